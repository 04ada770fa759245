/* The test hooks (test_hooks.h): read from the environment with
 * COHORT_TEST_HOOKS, else all off. */
#include "util/test_hooks.h"

#ifdef COHORT_TEST_HOOKS

#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* The number in environment variable name, or -1 where it is not set. */
static long env_count(const char *name)
{
    const char *v = getenv(name);
    return v ? atol(v) : -1;
}

int test_hooks_built(void) { return 1; }

int test_hook_disk_full(void)
{
    static _Atomic long after = -2;
    static _Atomic long done;
    if (after == -2)
        after = env_count("COHORT_TEST_DISK_FULL_AFTER");
    return after >= 0 && done++ >= after;
}

long test_hook_slow_write_us(void)
{
    static long slow_us = -1;
    if (slow_us < 0) {
        long v = env_count("COHORT_TEST_SLOW_WRITES_US");
        slow_us = v > 0 ? v : 0;
    }
    return slow_us;
}

void test_hook_file_written(void)
{
    static _Atomic long after = -2;
    static _Atomic long done;
    if (after == -2)
        after = env_count("COHORT_TEST_KILL_AFTER_WRITES");
    if (after >= 0 && ++done >= after)
        raise(SIGKILL);
}

void test_hook_record_written(void)
{
    static _Atomic long after = -2;
    static _Atomic long written;
    if (after == -2)
        after = env_count("COHORT_TEST_KILL_AFTER_RECORDS");
    if (after >= 0 && ++written >= after)
        raise(SIGKILL);
}

int test_hook_pbt(const char *what)
{
    const char *h = getenv("COHORT_PBT_TEST");
    return h && strstr(h, what) != NULL;
}

#else

int test_hooks_built(void) { return 0; }
int test_hook_disk_full(void) { return 0; }
long test_hook_slow_write_us(void) { return 0; }
void test_hook_file_written(void) {}
void test_hook_record_written(void) {}
int test_hook_pbt(const char *what)
{
    (void)what;
    return 0;
}

#endif
