/* vmath: the CPU math unit (src/backend/cpu/vmath.h) against glibc's scalar
 * functions, in elements per second of the thread's CPU time, over an array
 * of 4096 floats in [-6, 6) (it stays in L1): per function, each path the
 * processor has (avx512, avx2, scalar) and glibc's float function in the
 * form the CPU backend used before (expf, 1 / (1 + expf(-x)), tanhf, erff,
 * and act_math.h's gelu, silu and their derivatives), the best of several
 * rounds of at least 0.05 s each, and the ratio best path / glibc.
 *
 * Build and run: bench/run-vmath [--rounds N], with cohort's own flags.
 * Prints a markdown table.
 */
#define _POSIX_C_SOURCE 199309L
#include "backend/act_math.h"
#include "backend/cpu/vmath.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N 4096

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* glibc's float forms, as the CPU kernels computed them before vmath. */
static void glibc_map(vm_op op, float *y, const float *x, size_t n)
{
    switch (op) {
    case VM_EXP: for (size_t i = 0; i < n; i++) y[i] = expf(x[i]); break;
    case VM_SIGMOID: for (size_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-x[i])); break;
    case VM_TANH: for (size_t i = 0; i < n; i++) y[i] = tanhf(x[i]); break;
    case VM_ERF: for (size_t i = 0; i < n; i++) y[i] = erff(x[i]); break;
    case VM_GELU: for (size_t i = 0; i < n; i++) y[i] = act_gelu(x[i]); break;
    case VM_SILU: for (size_t i = 0; i < n; i++) y[i] = act_silu(x[i]); break;
    case VM_GELU_GRAD: for (size_t i = 0; i < n; i++) y[i] *= act_gelu_grad(x[i]); break;
    case VM_SILU_GRAD: for (size_t i = 0; i < n; i++) y[i] *= act_silu_grad(x[i]); break;
    case VM_N_OPS: break;
    }
}

static volatile float sink;

/* Elements per second: path < 0 is glibc's, else the vmath path of that ISA. */
static double rate(int path, vm_op op, float *y, const float *x, int rounds)
{
    double best = 0;
    for (int r = 0; r < rounds; r++) {
        long reps = 0;
        double t0 = now_seconds(), t;
        do {
            for (int k = 0; k < 16; k++) {
                for (size_t i = 0; i < N; i++)
                    y[i] = 1.0f; /* the _GRAD ops multiply into y */
                if (path < 0)
                    glibc_map(op, y, x, N);
                else
                    vm_map_isa((cpu_isa)path, op, y, x, N);
                sink = y[k];
            }
            reps += 16;
            t = now_seconds() - t0;
        } while (t < 0.05);
        double v = (double)reps * N / t;
        if (v > best)
            best = v;
    }
    return best;
}

static int has_isa(cpu_isa isa)
{
    __builtin_cpu_init();
    if (isa == ISA_AVX512)
        return __builtin_cpu_supports("avx512f");
    if (isa == ISA_AVX2)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return 1;
}

int main(int argc, char **argv)
{
    int rounds = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: vmath [--rounds N]\n");
            return 2;
        }
    }
    float *x = aligned_alloc(64, N * sizeof *x), *y = aligned_alloc(64, N * sizeof *y);
    if (!x || !y)
        return 1;
    unsigned seed = 1;
    for (size_t i = 0; i < N; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 12.0f;
    }
    int paths[3] = {has_isa(ISA_AVX512), has_isa(ISA_AVX2), 1};
    cpu_isa isas[3] = {ISA_AVX512, ISA_AVX2, ISA_NONE};
    printf("| function | avx512 Melem/s | avx2 Melem/s | scalar Melem/s | glibc Melem/s | best / glibc |\n");
    printf("|---|---|---|---|---|---|\n");
    for (vm_op op = 0; op < VM_N_OPS; op++) {
        double g = rate(-1, op, y, x, rounds), best = 0, r[3] = {0, 0, 0};
        for (int p = 0; p < 3; p++)
            if (paths[p]) {
                r[p] = rate((int)isas[p], op, y, x, rounds);
                if (r[p] > best)
                    best = r[p];
            }
        printf("| %s |", vm_op_name(op));
        for (int p = 0; p < 3; p++)
            paths[p] ? printf(" %.0f |", r[p] / 1e6) : printf(" - |");
        printf(" %.0f | %.1fx |\n", g / 1e6, best / g);
    }
    free(x);
    free(y);
    return 0;
}
