/* gemm_peak: the single-precision GEMM rate OpenBLAS reaches on this machine.
 * Large square sgemm with every thread and with one, then the GEMM shapes the seed models
 * run at batch 64; best of a few repetitions, printed as one JSON object on stdout.
 *
 * Build: gcc -O2 -I/usr/include/x86_64-linux-gnu/openblas-pthread bench/gemm_peak.c -lopenblas
 * Usage: gemm_peak [--quick]      (--quick: smaller sizes, fewer repetitions; for testing)
 *        gemm_peak --spot         (the squares with every thread only, fewer rounds: about 2 s)
 */
#define _POSIX_C_SOURCE 199309L
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* One GEMM shape: C[m,n] = op(A) * op(B), k the inner size; what the seed model uses it for. */
typedef struct {
    const char *name;
    int m, n, k;
    int trans_a, trans_b;
} gemm_shape;

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float *alloc_filled(size_t count, unsigned seed)
{
    float *p = malloc(count * sizeof *p);
    if (p == NULL) {
        fprintf(stderr, "gemm_peak: out of memory (%zu floats)\n", count);
        exit(1);
    }
    for (size_t i = 0; i < count; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
    return p;
}

/* Best GFLOP/s of `reps` timed rounds; each round repeats the call until it lasts at least
 * `min_seconds`, so tiny shapes are timed over many calls. One untimed warm-up call first. */
static double measure(const gemm_shape *s, int reps, double min_seconds)
{
    size_t a_count = (size_t)s->m * (size_t)s->k;
    size_t b_count = (size_t)s->k * (size_t)s->n;
    size_t c_count = (size_t)s->m * (size_t)s->n;
    float *a = alloc_filled(a_count, 1u);
    float *b = alloc_filled(b_count, 2u);
    float *c = alloc_filled(c_count, 3u);
    enum CBLAS_TRANSPOSE ta = s->trans_a ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = s->trans_b ? CblasTrans : CblasNoTrans;
    int lda = s->trans_a ? s->m : s->k;
    int ldb = s->trans_b ? s->k : s->n;
    double flops = 2.0 * s->m * s->n * s->k;
    double best = 0.0;

    cblas_sgemm(CblasRowMajor, ta, tb, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c, s->n);
    for (int r = 0; r < reps; r++) {
        long calls = 0;
        double start = now_seconds(), elapsed;
        do {
            cblas_sgemm(CblasRowMajor, ta, tb, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c,
                        s->n);
            calls++;
            elapsed = now_seconds() - start;
        } while (elapsed < min_seconds);
        double rate = flops * (double)calls / elapsed / 1e9;
        if (rate > best) best = rate;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int spot = argc > 1 && strcmp(argv[1], "--spot") == 0;
    if (argc > 2 || (argc == 2 && !quick && !spot)) {
        fprintf(stderr, "usage: gemm_peak [--quick | --spot]\n");
        return 2;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int all = cores > 0 ? (int)cores : 1;
    int max_threads = openblas_get_num_threads();
    if (max_threads > 0 && max_threads < all) all = max_threads;

    /* --spot: the all-threads square peak alone (2048 and 4096, as below, fewer
     * rounds: about two seconds), taken right before and after each timed run
     * (bench/run). */
    if (spot) {
        gemm_shape s2 = {"square", 2048, 2048, 2048, 0, 0}, s4 = {"square", 4096, 4096, 4096, 0, 0};
        openblas_set_num_threads(all);
        double a = measure(&s2, 3, 0.0), b = measure(&s4, 2, 0.0);
        printf("{\"threads_all\": %d, \"gflops_2048\": %.2f, \"gflops_4096\": %.2f, "
               "\"gflops_all_threads\": %.2f}\n",
               all, a, b, a > b ? a : b);
        return 0;
    }

    /* Square peaks: each call lasts long (0.1 s to a few s), so one call per round. */
    static const int square_full[] = {2048, 4096};
    static const int square_quick[] = {512, 1024};
    const int *square = quick ? square_quick : square_full;
    int square_reps = quick ? 2 : 3;

    /* Seed-model shapes at batch 64, per dense layer 784->H then H->10:
     * forward X W^T, weight gradient dY^T X, and for layer 2 the input gradient dY W. */
    static const int hidden[] = {128, 256, 512};
    gemm_shape shapes[3 * 5];
    char names[3 * 5][64];
    int n_shapes = 0;
    for (int i = 0; i < 3; i++) {
        int h = hidden[i];
        snprintf(names[n_shapes], sizeof names[0], "fwd1 64x784*784x%d", h);
        shapes[n_shapes] = (gemm_shape){names[n_shapes], 64, h, 784, 0, 1};
        n_shapes++;
        snprintf(names[n_shapes], sizeof names[0], "wgrad1 %dx64*64x784", h);
        shapes[n_shapes] = (gemm_shape){names[n_shapes], h, 784, 64, 1, 0};
        n_shapes++;
        snprintf(names[n_shapes], sizeof names[0], "fwd2 64x%d*%dx10", h, h);
        shapes[n_shapes] = (gemm_shape){names[n_shapes], 64, 10, h, 0, 1};
        n_shapes++;
        snprintf(names[n_shapes], sizeof names[0], "wgrad2 10x64*64x%d", h);
        shapes[n_shapes] = (gemm_shape){names[n_shapes], 10, h, 64, 1, 0};
        n_shapes++;
        snprintf(names[n_shapes], sizeof names[0], "dgrad2 64x10*10x%d", h);
        shapes[n_shapes] = (gemm_shape){names[n_shapes], 64, h, 10, 0, 0};
        n_shapes++;
    }
    int shape_reps = quick ? 2 : 5;
    double shape_seconds = quick ? 0.02 : 0.2;

    printf("{\n  \"threads_all\": %d,\n  \"openblas_config\": \"%s\",\n", all,
           openblas_get_config());
    printf("  \"square\": [\n");
    for (int i = 0; i < 2; i++) {
        int n = square[i];
        gemm_shape s = {"square", n, n, n, 0, 0};
        openblas_set_num_threads(all);
        double rate_all = measure(&s, square_reps, 0.0);
        openblas_set_num_threads(1);
        double rate_one = measure(&s, square_reps, 0.0);
        printf("    {\"n\": %d, \"gflops_all_threads\": %.2f, \"gflops_1_thread\": %.2f}%s\n", n,
               rate_all, rate_one, i == 1 ? "" : ",");
        fflush(stdout);
    }
    printf("  ],\n  \"shapes\": [\n");
    for (int i = 0; i < n_shapes; i++) {
        const gemm_shape *s = &shapes[i];
        openblas_set_num_threads(all);
        double rate_all = measure(s, shape_reps, shape_seconds);
        openblas_set_num_threads(1);
        double rate_one = measure(s, shape_reps, shape_seconds);
        printf("    {\"name\": \"%s\", \"m\": %d, \"n\": %d, \"k\": %d, "
               "\"gflops_all_threads\": %.2f, \"gflops_1_thread\": %.2f}%s\n",
               s->name, s->m, s->n, s->k, rate_all, rate_one, i == n_shapes - 1 ? "" : ",");
        fflush(stdout);
    }
    printf("  ]\n}\n");
    return 0;
}
