/* kernels: cohort's own dense kernels against OpenBLAS on one core, for the
 * shapes the seed models run at batch 64. Per shape and ISA it times
 *   fwd   Y[64,H] = X[64,N]·Wᵀ: kern_transpose + kern_dense_fwd, against
 *         cblas_sgemm(NoTrans, Trans);
 *   step  the weight gradient G[H,N] = dZᵀ·X with Adam on W: kern_dense_step,
 *         against cblas_sgemm(Trans, NoTrans) into G and then kern_optimize
 *         over W (what COHORT_CPU_KERNELS=blas runs);
 *   dX    the input gradient dX[64,N] = dZ·W of a layer past the first:
 *         kern_gemm_own against cblas_sgemm(NoTrans, NoTrans), for N a
 *         multiple of 16 (else "-");
 * best of several rounds of at least 0.1 s of the thread's CPU time each, as GFLOP/s (2·64·N·H per
 * product) and as a ratio own / OpenBLAS (above 1: own is faster). One
 * thread: cohort's pool splits rows of W between cores, OpenBLAS's threads
 * are set to one (openblas_set_num_threads), so the ratio holds per core.
 *
 * Build and run: bench/run-kernels [options], with the flags of cohort's own
 *   build (-std=c11: GNU C's default -ffp-contract=fast would time contracted
 *   multiply-adds that cohort's kernels do not compute).
 * Usage: kernels [--quick] [--isa avx2|avx512|all] [--rounds N] [--shape NAME]
 *        [--opt adam|sgd|grad]   (the step's optimizer: Adam, SGD with momentum,
 *        or none: FUSE_GRAD, the weight gradient alone against the sgemm alone,
 *        as convolutions use it; shape conv2 is the convnet's second one)
 * prints a markdown table; more rounds find the machine's quiet moments.
 */
#define _POSIX_C_SOURCE 199309L
#include "backend/cpu/dense_step.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/window.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void openblas_set_num_threads(int n);

/* The thread's CPU time, not the wall's: on a shared machine a kernel
 * descheduled for another process's slice is not charged for it. */
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
        fprintf(stderr, "kernels: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * scale;
    }
    return p;
}

typedef struct shape {
    const char *name;
    int rows, n_in, n_out;
} shape;

typedef struct bufs {
    const shape *s;
    cpu_isa isa;
    float *X, *XT, *W, *Y, *dZ, *G, *m, *v;
    int ldt;
    opt_kind kind;
    optim_scalars sc; /* the optimizer's scalars, for kern_optimize */
    dense_update o;   /* the same for the fused step (or FUSE_GRAD) */
} bufs;

static double min_seconds;

/* Best seconds per call of f over rounds of at least min_seconds. */
static double best_of(void (*f)(bufs *), bufs *b, int rounds)
{
    double best = 1e30;
    for (int r = 0; r < rounds; r++) {
        int calls = 0;
        double t0 = now_seconds(), t;
        do {
            f(b);
            calls++;
            t = now_seconds() - t0;
        } while (t < min_seconds);
        if (t / calls < best)
            best = t / calls;
    }
    return best;
}

static void own_fwd(bufs *b)
{
    const shape *s = b->s;
    kern_transpose(b->isa, b->XT, (size_t)b->ldt, b->X, (size_t)s->n_in, s->rows, s->n_in);
    kern_dense_fwd(b->isa, b->Y, (size_t)s->n_out, b->W, b->XT, (size_t)b->ldt, s->rows, s->n_in,
                   0, s->n_out);
}

static void blas_fwd(bufs *b)
{
    const shape *s = b->s;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->rows, s->n_out, s->n_in, 1.0f, b->X,
                s->n_in, b->W, s->n_in, 0.0f, b->Y, s->n_out);
}

static void own_step(bufs *b)
{
    const shape *s = b->s;
    kern_dense_step(b->isa, b->W, b->m, b->v, b->dZ, (size_t)s->n_out, b->X, (size_t)s->n_in,
                    s->rows, s->n_in, 0, s->n_out, &b->o);
}

static void blas_step(bufs *b)
{
    const shape *s = b->s;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s->n_out, s->n_in, s->rows, 1.0f, b->dZ,
                s->n_out, b->X, s->n_in, 0.0f, b->G, s->n_in);
    if (b->o.kind != FUSE_GRAD)
        kern_optimize(b->kind, b->W, b->G, b->m, b->v, (size_t)s->n_out * (size_t)s->n_in, &b->sc);
}

static void own_dx(bufs *b)
{
    const shape *s = b->s;
    kern_gemm_own(b->isa, b->X, (size_t)s->n_in, b->dZ, (size_t)s->n_out, 1, b->W,
                  (size_t)s->n_in, s->rows, s->n_in, s->n_out);
}

static void blas_dx(bufs *b)
{
    const shape *s = b->s;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->rows, s->n_in, s->n_out, 1.0f, b->dZ,
                s->n_out, b->W, s->n_in, 0.0f, b->X, s->n_in);
}

int main(int argc, char **argv)
{
    int quick = 0;
    const char *which = "all", *only = NULL;
    int rounds = 0, sgd = 0, grad = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc)
            which = argv[++i];
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--opt") && i + 1 < argc) {
            i++;
            sgd = !strcmp(argv[i], "sgd");
            grad = !strcmp(argv[i], "grad");
        }
        else {
            fprintf(stderr, "usage: kernels [--quick] [--isa avx2|avx512|all] [--rounds N] "
                            "[--shape NAME] [--opt adam|sgd|grad]\n");
            return 2;
        }
    }
    min_seconds = quick ? 0.02 : 0.1;
    if (rounds <= 0)
        rounds = quick ? 2 : 5;
    openblas_set_num_threads(1);

    cpu_isa best = cpu_isa_detect(), isas[2];
    int n_isa = 0;
    if (strcmp(which, "avx512") && best >= ISA_AVX2)
        isas[n_isa++] = ISA_AVX2;
    if (strcmp(which, "avx2") && best >= ISA_AVX512)
        isas[n_isa++] = ISA_AVX512;
    if (!n_isa) {
        fprintf(stderr, "kernels: this processor has none of the ISAs asked for (%s)\n", which);
        return 2;
    }
    static const shape shapes[] = {
        {"784-128", 64, 784, 128}, {"784-256", 64, 784, 256}, {"784-512", 64, 784, 512},
        {"128-10", 64, 128, 10},   {"512-10", 64, 512, 10},
        /* layers past the first of deeper MLPs, and a convnet's dense head
         * (batch 128): forward from their input transposed, dX by gemm_own */
        {"512-256", 64, 512, 256}, {"256-128", 64, 256, 128}, {"1600-128", 128, 1600, 128},
        /* the convnet's second weight gradient: a chunk of 6 images of 11 x 11
         * pixels, 3 x 3 x 32 windows, 64 filters (with --opt grad) */
        {"conv2", 726, 288, 64},
    };
    printf("| shape | isa | fwd own GFLOP/s | fwd OpenBLAS | own/OpenBLAS | step own GFLOP/s "
           "| step OpenBLAS+adam | own/OpenBLAS | dX own | dX OpenBLAS | own/OpenBLAS |\n"
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++) {
        const shape *s = &shapes[k];
        if (only && strcmp(only, s->name))
            continue;
        for (int i = 0; i < n_isa; i++) {
            bufs b = {.s = s, .isa = isas[i]};
            size_t nw = (size_t)s->n_out * (size_t)s->n_in;
            b.ldt = kern_dense_fwd_ld(b.isa, s->rows);
            b.X = filled((size_t)s->rows * (size_t)s->n_in, 1, 1.0f);
            b.XT = filled((size_t)b.ldt * (size_t)s->n_in, 2, 1.0f);
            b.W = filled(nw, 3, 0.1f);
            b.Y = filled((size_t)s->rows * (size_t)s->n_out, 4, 1.0f);
            b.dZ = filled((size_t)s->rows * (size_t)s->n_out, 5, 0.01f);
            b.G = filled(nw, 6, 1.0f);
            b.m = filled(nw, 7, 0.001f);
            b.v = filled(nw, 8, 0.001f);
            for (size_t j = 0; j < nw; j++)
                b.v[j] = b.v[j] * b.v[j];
            if (sgd) {
                b.kind = OPT_SGD;
                b.sc.sgd = (sgd_scalars){0.01f, 0.9f, SGD_MOMENTUM};
            } else {
                b.kind = OPT_ADAM;
                adam_scalars_at(1e-3f, 0.9f, 0.999f, 1e-7f, 0.0f, 10, &b.sc.adam);
            }
            b.o = dense_update_of(b.kind, &b.sc);
            if (grad)
                b.o.kind = FUSE_GRAD;
            double flops = 2.0 * s->rows * s->n_in * s->n_out;
            double fo = best_of(own_fwd, &b, rounds), fb = best_of(blas_fwd, &b, rounds);
            double so = best_of(own_step, &b, rounds), sb = best_of(blas_step, &b, rounds);
            printf("| %s | %s | %.1f | %.1f | %.2fx | %.1f | %.1f | %.2fx |", s->name,
                   cpu_isa_name(b.isa), flops / fo * 1e-9, flops / fb * 1e-9, fb / fo,
                   flops / so * 1e-9, flops / sb * 1e-9, sb / so);
            if (gemm_own_ok(s->n_in)) {
                double xo = best_of(own_dx, &b, rounds), xb = best_of(blas_dx, &b, rounds);
                printf(" %.1f | %.1f | %.2fx |\n", flops / xo * 1e-9, flops / xb * 1e-9, xb / xo);
            } else {
                printf(" - | - | - |\n");
            }
            free(b.X), free(b.XT), free(b.W), free(b.Y), free(b.dZ), free(b.G), free(b.m),
                free(b.v);
        }
    }
    return 0;
}
