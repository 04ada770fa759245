/* conv: the Keras convnet's layers (examples/cnn.yaml's mnist_convnet) one op at a time, on one
 * core, as cohort's CPU backend runs them per chunk of images (backend_cpu.c's conv_fwd_chunk,
 * wgrad_chunk, conv_bwd_chunk; window.c's pooling), over a batch of 128 images:
 *   conv1 3x3, 1 -> 32 channels on 28x28 (26x26 out), kc 9; chunks of 4 images
 *   conv2 3x3, 32 -> 64 channels on 13x13 (11x11 out), kc 288; forward and input gradient by
 *         one image, weight gradient by 6 (conv_chunk_images, conv_wgrad_chunk)
 *   pool1 2x2 max of 26x26x32, pool2 of 11x11x64 (forward with its argmax, and backward)
 * and each product through OpenBLAS's sgemm on the same im2col rows, for scale. For each: the
 * best of several rounds of the thread's CPU time (not the wall's: on a shared machine a
 * descheduled op is not charged for it), as GFLOP/s of the product (2 * rows * N * K) or, for
 * pooling, GB/s of what it reads and writes; and the ms per batch of 128, so that the rows add
 * up to a training step's share of each op.
 *
 * Build and run: bench/run-conv [--rounds N] (the flags of cohort's Release build).
 * Prints a markdown table.
 */
#define _POSIX_C_SOURCE 199309L
#include "backend/cpu/cpu.h"
#include "backend/cpu/dense_step.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/window.h"

#include <cblas.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void openblas_set_num_threads(int n);

#define BATCH 128

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float *filled(size_t n, unsigned seed, float scale)
{
    float *p = aligned_alloc(64, (n * sizeof *p + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "conv: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * scale;
    }
    return p;
}

/* One convolution layer's buffers for a batch. */
typedef struct layer {
    const char *name;
    window_geom g;
    int F, kc, chunk, wchunk;
    float *X, *Y, *W, *wt, *col, *dY, *dX, *G;
    int32_t *arg;
    window_geom pg; /* the max pooling after it */
    float *P, *dP, *dYp;
} layer;

static cpu_isa isa;
static layer *cur;

static void make(layer *l, const char *name, int h, int c, int F)
{
    window_geom g = {.n = BATCH, .h = h, .w = h, .c = c, .kh = 3, .kw = 3, .sh = 1, .sw = 1,
                     .oh = h - 2, .ow = h - 2};
    l->name = name;
    l->g = g;
    l->F = F;
    l->kc = 9 * c;
    size_t pix = (size_t)g.oh * g.ow, floats = pix * (size_t)l->kc;
    l->chunk = conv_chunk_images(floats, BATCH);
    l->wchunk = conv_wgrad_chunk(floats, (int)pix, BATCH);
    int most = l->chunk > l->wchunk ? l->chunk : l->wchunk;
    l->X = filled((size_t)BATCH * h * h * c, 1, 1.0f);
    l->Y = filled((size_t)BATCH * pix * F, 2, 1.0f);
    l->dY = filled((size_t)BATCH * pix * F, 3, 1.0f);
    l->dX = filled((size_t)BATCH * h * h * c, 4, 1.0f);
    l->W = filled((size_t)F * l->kc, 5, 0.1f);
    l->wt = filled((size_t)F * l->kc, 6, 0.1f);
    l->G = filled((size_t)F * l->kc, 7, 0.1f);
    l->col = filled((size_t)most * floats, 8, 1.0f);
    window_geom pg = {.n = BATCH, .h = g.oh, .w = g.ow, .c = F, .kh = 2, .kw = 2, .sh = 2, .sw = 2,
                      .oh = g.oh / 2, .ow = g.ow / 2};
    l->pg = pg;
    size_t pout = (size_t)BATCH * pg.oh * pg.ow * F;
    l->P = filled(pout, 9, 1.0f);
    l->dP = filled(pout, 10, 1.0f);
    l->arg = aligned_alloc(64, (pout * sizeof(int32_t) + 63) / 64 * 64);
    l->dYp = filled((size_t)BATCH * pix * F, 11, 1.0f);
    kern_maxpool_fwd(l->P, l->arg, l->Y, &l->pg, 0, BATCH);
}

static int rows_of(const layer *l, int i0, int i1) { return (i1 - i0) * l->g.oh * l->g.ow; }

/* Each op over the whole batch, chunk by chunk as the backend's parts run them. */
static void fwd_im2col(void)
{
    layer *l = cur;
    for (int i0 = 0; i0 < BATCH; i0 += l->chunk) {
        int i1 = i0 + l->chunk < BATCH ? i0 + l->chunk : BATCH, rows = rows_of(l, i0, i1);
        kern_im2col(l->col, l->X, &l->g, i0, i1);
        kern_gemm_own(isa, l->Y + (size_t)i0 * l->g.oh * l->g.ow * l->F, (size_t)l->F, l->col,
                      (size_t)l->kc, 1, l->wt, (size_t)l->F, rows, l->F, l->kc);
    }
}

static void fwd_implicit(void)
{
    layer *l = cur;
    for (int i0 = 0; i0 < BATCH; i0 += l->chunk) {
        int i1 = i0 + l->chunk < BATCH ? i0 + l->chunk : BATCH;
        kern_conv_fwd_own(isa, l->Y + (size_t)i0 * l->g.oh * l->g.ow * l->F, (size_t)l->F, l->X,
                          &l->g, i0, i1, l->wt, (size_t)l->F, l->F);
    }
}

static void fwd_blas(void)
{
    layer *l = cur;
    for (int i0 = 0; i0 < BATCH; i0 += l->chunk) {
        int i1 = i0 + l->chunk < BATCH ? i0 + l->chunk : BATCH, rows = rows_of(l, i0, i1);
        kern_im2col(l->col, l->X, &l->g, i0, i1);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, l->F, l->kc, 1.0f, l->col,
                    l->kc, l->W, l->kc, 0.0f, l->Y + (size_t)i0 * l->g.oh * l->g.ow * l->F, l->F);
    }
}

static void im2col_only(void)
{
    layer *l = cur;
    for (int i0 = 0; i0 < BATCH; i0 += l->chunk) {
        int i1 = i0 + l->chunk < BATCH ? i0 + l->chunk : BATCH;
        kern_im2col(l->col, l->X, &l->g, i0, i1);
    }
}

static void wgrad_own(void)
{
    layer *l = cur;
    const dense_update grad = {.kind = FUSE_GRAD};
    for (int i0 = 0; i0 < BATCH; i0 += l->wchunk) {
        int i1 = i0 + l->wchunk < BATCH ? i0 + l->wchunk : BATCH, rows = rows_of(l, i0, i1);
        const float *dY = l->dY + (size_t)i0 * l->g.oh * l->g.ow * l->F;
        kern_im2col(l->col, l->X, &l->g, i0, i1);
        if (conv_small_ok(l->kc, l->F))
            kern_conv_small_wgrad(isa, l->G, dY, l->col, rows, l->F, l->kc);
        else
            kern_dense_step(isa, l->G, NULL, NULL, dY, (size_t)l->F, l->col, (size_t)l->kc, rows,
                            l->kc, 0, l->F, &grad);
    }
}

static void wgrad_blas(void)
{
    layer *l = cur;
    for (int i0 = 0; i0 < BATCH; i0 += l->wchunk) {
        int i1 = i0 + l->wchunk < BATCH ? i0 + l->wchunk : BATCH, rows = rows_of(l, i0, i1);
        kern_im2col(l->col, l->X, &l->g, i0, i1);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, l->F, l->kc, rows, 1.0f,
                    l->dY + (size_t)i0 * l->g.oh * l->g.ow * l->F, l->F, l->col, l->kc, 0.0f, l->G,
                    l->kc);
    }
}

static void dgrad_own(void)
{
    layer *l = cur;
    for (int i0 = 0; i0 < BATCH; i0 += l->chunk) {
        int i1 = i0 + l->chunk < BATCH ? i0 + l->chunk : BATCH, rows = rows_of(l, i0, i1);
        kern_gemm_own(isa, l->col, (size_t)l->kc, l->dY + (size_t)i0 * l->g.oh * l->g.ow * l->F,
                      (size_t)l->F, 1, l->W, (size_t)l->kc, rows, l->kc, l->F);
        kern_col2im(l->dX, l->col, &l->g, i0, i1);
    }
}

static void dgrad_blas(void)
{
    layer *l = cur;
    for (int i0 = 0; i0 < BATCH; i0 += l->chunk) {
        int i1 = i0 + l->chunk < BATCH ? i0 + l->chunk : BATCH, rows = rows_of(l, i0, i1);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, l->kc, l->F, 1.0f,
                    l->dY + (size_t)i0 * l->g.oh * l->g.ow * l->F, l->F, l->W, l->kc, 0.0f,
                    l->col, l->kc);
        kern_col2im(l->dX, l->col, &l->g, i0, i1);
    }
}

static void act_bwd(void)
{
    layer *l = cur;
    kern_act_backward(l->dY, l->Y, (size_t)BATCH * l->g.oh * l->g.ow * l->F, ACT_RELU);
}

static void pool_fwd(void) { kern_maxpool_fwd(cur->P, cur->arg, cur->Y, &cur->pg, 0, BATCH); }
static void pool_bwd(void) { kern_maxpool_bwd(cur->dYp, cur->dP, cur->arg, &cur->pg, 0, BATCH); }

/* The core's multiply-add peak: 12 independent chains of 512-bit (or 256-bit) FMAs, 1e6 steps. */
static volatile float sink;

__attribute__((target("avx512f"))) static void peak512(void)
{
    __m512 a[12], m = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
    for (int i = 0; i < 12; i++)
        a[i] = _mm512_set1_ps((float)i);
    for (int n = 0; n < 1000000; n++)
        for (int i = 0; i < 12; i++)
            a[i] = _mm512_fmadd_ps(a[i], m, b);
    for (int i = 1; i < 12; i++)
        a[0] = _mm512_add_ps(a[0], a[i]);
    sink = _mm512_reduce_add_ps(a[0]);
}

static void peak256(void)
{
    __m256 a[12], m = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
    for (int i = 0; i < 12; i++)
        a[i] = _mm256_set1_ps((float)i);
    for (int n = 0; n < 1000000; n++)
        for (int i = 0; i < 12; i++)
            a[i] = _mm256_fmadd_ps(a[i], m, b);
    for (int i = 1; i < 12; i++)
        a[0] = _mm256_add_ps(a[0], a[i]);
    float t[8];
    _mm256_storeu_ps(t, a[0]);
    sink = t[0];
}

static int rounds = 5;

static double best_of(void (*f)(void))
{
    double best = 1e30;
    for (int r = 0; r < rounds; r++) {
        int calls = 0;
        double t0 = now_seconds(), t;
        do {
            f();
            calls++;
            t = now_seconds() - t0;
        } while (t < 0.2);
        if (t / calls < best)
            best = t / calls;
    }
    return best;
}

static void row(const char *layer_name, const char *op, void (*f)(void), double flops,
                double bytes)
{
    double s = best_of(f);
    if (flops > 0)
        printf("| %s | %s | %.2f | %.1f GFLOP/s |\n", layer_name, op, 1e3 * s, flops / s * 1e-9);
    else
        printf("| %s | %s | %.2f | %.1f GB/s |\n", layer_name, op, 1e3 * s, bytes / s * 1e-9);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: conv [--rounds N]\n");
            return 2;
        }
    }
    openblas_set_num_threads(1);
    isa = cpu_isa_detect();
    if (isa == ISA_NONE) {
        fprintf(stderr, "conv: no AVX2 here: cohort's conv kernels are OpenBLAS's\n");
        return 2;
    }
    layer ls[2];
    make(&ls[0], "conv1", 28, 1, 32);
    make(&ls[1], "conv2", 13, 32, 64);
    printf("One core, %s kernels, a batch of %d; ms per batch (the thread's CPU time, best of %d)\n\n",
           cpu_isa_name(isa), BATCH, rounds);
    printf("| layer | op | ms | rate |\n|---|---|---:|---:|\n");
    if (isa == ISA_AVX512)
        row("-", "peak: 12 chains of 512-bit FMAs", peak512, 1e6 * 12 * 32, 0);
    row("-", "peak: 12 chains of 256-bit FMAs", peak256, 1e6 * 12 * 16, 0);
    for (int k = 0; k < 2; k++) {
        layer *l = cur = &ls[k];
        double flops = 2.0 * BATCH * l->g.oh * l->g.ow * (double)l->F * l->kc;
        size_t yb = (size_t)BATCH * l->g.oh * l->g.ow * l->F * sizeof(float);
        size_t pb = (size_t)BATCH * l->pg.oh * l->pg.ow * l->F * sizeof(float);
        row(l->name, "im2col alone (forward chunks)", im2col_only, 0,
            (double)BATCH * l->g.oh * l->g.ow * l->kc * sizeof(float));
        row(l->name, "forward: im2col + kern_gemm_own", fwd_im2col, flops, 0);
        row(l->name, "forward: kern_conv_fwd_own (no col)", fwd_implicit, flops, 0);
        row(l->name, "forward: im2col + OpenBLAS sgemm", fwd_blas, flops, 0);
        row(l->name, "relu backward (kern_act_backward)", act_bwd, 0, 3.0 * (double)yb);
        row(l->name, conv_small_ok(l->kc, l->F) ? "weight gradient: im2col + kern_conv_small_wgrad"
                                               : "weight gradient: im2col + kern_dense_step",
            wgrad_own, flops, 0);
        row(l->name, "weight gradient: im2col + OpenBLAS sgemm", wgrad_blas, flops, 0);
        if (k == 1) {
            row(l->name, "input gradient: kern_gemm_own + col2im", dgrad_own, flops, 0);
            row(l->name, "input gradient: OpenBLAS sgemm + col2im", dgrad_blas, flops, 0);
        }
        /* forward reads Y, writes the pooled Y and arg; backward reads dY and arg, writes dX */
        row(l->name, "max pooling forward", pool_fwd, 0, (double)yb + 2.0 * (double)pb);
        row(l->name, "max pooling backward", pool_bwd, 0, (double)yb + 2.0 * (double)pb);
    }
    return 0;
}
