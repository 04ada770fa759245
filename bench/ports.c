/*
 * bench/ports: what a 512-bit square root and division cost the FMAs beside
 * them, on one core. The dense step's Adam update takes one of each per
 * vector of 16 weights, between the sums' multiply-adds; where the divider
 * works apart from the FMA ports the pair is free, where it holds one of
 * them it is not.
 *
 * Three loops, each N rounds: F rounds of 12 independent FMAs (12
 * accumulators, enough to cover the FMA latency), 4 independent chains of
 * sqrt + add + div, and both interleaved. It prints ns per round of each
 * and the overlap cost: both - max(fma, div). Near 0: the divider runs
 * beside the FMAs; near the div time: it stops them.
 *
 *     gcc -std=c11 -O2 -mavx512f bench/ports.c -o bench/out/ports && bench/out/ports
 *
 * Needs AVX-512F; the times are wall clock, best of 5, so run it on a quiet
 * machine.
 */
#define _POSIX_C_SOURCE 200809L
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define FMA1(c) c = _mm512_fmadd_ps(c, x, e)
#define DIV1(a) a = _mm512_div_ps(x, _mm512_add_ps(_mm512_sqrt_ps(a), e))

/* mode bit 1: the FMAs (f blocks of 12), bit 2: the 4 divider chains. */
static __attribute__((noinline)) float run(int mode, long rounds, int f)
{
    __m512 x = _mm512_set1_ps(1.0000001f), e = _mm512_set1_ps(1e-7f);
    __m512 c0 = x, c1 = x, c2 = x, c3 = x, c4 = x, c5 = x, c6 = x, c7 = x, c8 = x, c9 = x,
           c10 = x, c11 = x;
    __m512 a0 = _mm512_set1_ps(2.0f), a1 = _mm512_set1_ps(3.0f), a2 = _mm512_set1_ps(4.0f),
           a3 = _mm512_set1_ps(5.0f);
    for (long i = 0; i < rounds; i++) {
        if (mode & 1)
            for (int k = 0; k < f; k++) {
                FMA1(c0), FMA1(c1), FMA1(c2), FMA1(c3), FMA1(c4), FMA1(c5);
                FMA1(c6), FMA1(c7), FMA1(c8), FMA1(c9), FMA1(c10), FMA1(c11);
                /* keeps the accumulators in registers and the loop as written */
                __asm__ volatile(""
                                 : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(c4), "+v"(c5),
                                   "+v"(c6), "+v"(c7), "+v"(c8), "+v"(c9), "+v"(c10), "+v"(c11));
            }
        if (mode & 2) {
            DIV1(a0), DIV1(a1), DIV1(a2), DIV1(a3);
        }
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3));
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    return _mm512_reduce_add_ps(s);
}

static double best_ns(int mode, long rounds, int f, float *sink)
{
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t = now();
        *sink += run(mode, rounds, f);
        t = now() - t;
        best = t < best ? t : best;
    }
    return best / (double)rounds * 1e9;
}

int main(void)
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) {
        fprintf(stderr, "ports: this CPU has no AVX-512F\n");
        return 2;
    }
    float sink = 0.0f;
    printf("| FMAs a round | fma ns | 4 sqrt+div ns | both ns | overlap cost ns | per pair, FMA-equivalents |\n"
           "|---:|---:|---:|---:|---:|---:|\n");
    for (int f = 4; f <= 32; f *= 2) {
        long rounds = 40000000L / f;
        double tf = best_ns(1, rounds, f, &sink), td = best_ns(2, rounds, f, &sink),
               tb = best_ns(3, rounds, f, &sink);
        double cost = tb - (tf > td ? tf : td);
        /* One FMA's share of the FMA loop's time: tf / (12 f). */
        printf("| %d | %.2f | %.2f | %.2f | %.2f | %.1f |\n", 12 * f, tf, td, tb, cost,
               cost / 4.0 / (tf / (12.0 * f)));
    }
    return sink == 12345.0f; /* never: keeps the results live */
}
