/*
 * check.h: the tiny test harness of cohort's C tests. Every failed CHECK
 * prints file:line and what failed, and makes check_done() return 1, so a
 * failure always changes the exit code. check_skip() exits 77, which ctest
 * counts as skipped.
 */
#ifndef COHORT_CHECK_H
#define COHORT_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_passed, check_failed;

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (cond)                                                                         \
            check_passed++;                                                               \
        else {                                                                            \
            check_failed++;                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);      \
        }                                                                                 \
    } while (0)

#define CHECK_MSG(cond, ...)                                                              \
    do {                                                                                  \
        if (cond)                                                                         \
            check_passed++;                                                               \
        else {                                                                            \
            check_failed++;                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                          \
        }                                                                                 \
    } while (0)

/* |a - b| <= tol, NaN never passes. */
#define CHECK_NEAR(a, b, tol)                                                             \
    do {                                                                                  \
        double check_a_ = (double)(a), check_b_ = (double)(b);                            \
        if (fabs(check_a_ - check_b_) <= (double)(tol))                                   \
            check_passed++;                                                               \
        else {                                                                            \
            check_failed++;                                                               \
            fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.9g, %s = %.9g, tol %g\n",   \
                    __FILE__, __LINE__, #a, check_a_, #b, check_b_, (double)(tol));       \
        }                                                                                 \
    } while (0)

/* The string s contains the substring sub. */
#define CHECK_CONTAINS(s, sub)                                                            \
    do {                                                                                  \
        const char *check_s_ = (s);                                                       \
        if (check_s_ && strstr(check_s_, (sub)))                                          \
            check_passed++;                                                               \
        else {                                                                            \
            check_failed++;                                                               \
            fprintf(stderr, "%s:%d: CHECK_CONTAINS failed: \"%s\" lacks \"%s\"\n",        \
                    __FILE__, __LINE__, check_s_ ? check_s_ : "(null)", (sub));           \
        }                                                                                 \
    } while (0)

static inline int check_done(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, check_passed, check_failed);
    return check_failed ? 1 : 0;
}

static inline void check_skip(const char *name, const char *why)
{
    printf("%s: skipped: %s\n", name, why);
    exit(77);
}

#endif
