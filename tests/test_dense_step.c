/*
 * The fused weight-gradient and optimizer step (kern_dense_step) against
 * the two-pass reference: G = dZᵀ·X summed over the rows in order with one
 * fused multiply-add each, then the optimizer's own per-weight function
 * (optim/sgd.h, optim/adam.h, through kern_optimize) over G, with the
 * scalars its table entry makes. Every vector
 * width the processor has must give the reference bit for bit, for every
 * optimizer, over shapes with and without vector tails, for row ranges
 * split anywhere on a tile boundary, over several steps. The reference G
 * itself is checked against sums in double. The forward kernel
 * (kern_dense_fwd, from the input transposed) likewise against its sums.
 */
#include "backend/cpu/dense_step.h"
#include "backend/cpu/gemm_grid.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/window.h"
#include "check.h"
#include "optim/optim.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct opt_case {
    const char *name;
    opt_kind kind;
    float lr, momentum, weight_decay;
    int nesterov;
} opt_case;

static const opt_case cases[] = {
    {"sgd", OPT_SGD, 0.05f, 0.0f, 0.0f, 0},      {"momentum", OPT_SGD, 0.05f, 0.9f, 0.0f, 0},
    {"nesterov", OPT_SGD, 0.05f, 0.9f, 0.0f, 1}, {"adam", OPT_ADAM, 0.01f, 0.0f, 0.0f, 0},
    {"adamw", OPT_ADAMW, 0.01f, 0.0f, 0.004f, 0},
};

static void fill(float *p, size_t n, rng_state *r, float scale)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (2.0f * rng_uniform(r) - 1.0f) * scale;
}

/* Elements of a and b (n each) whose bits differ. */
static size_t bits_differ(const float *a, const float *b, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return bad;
}

/* The case's scalars of step t, from its optimizer's entry. */
static optim_scalars scalars_of(const opt_case *c, int64_t t)
{
    optim_spec o;
    optim_defaults(&o, c->kind);
    o.lr = c->lr;
    o.momentum = c->momentum;
    o.nesterov = c->nesterov;
    o.weight_decay = c->weight_decay;
    optim_memo memo = {0, 0};
    optim_scalars s;
    optim_entry_of(c->kind)->scalars(&o, o.lr, t, &memo, &s);
    return s;
}

/* Three steps of one shape, optimizer and vector width; 0 when every
 * weight and state value equals the reference's bit for bit. */
static int run_case(cpu_isa isa, const opt_case *c, int rows, int n_out, int n_in, int split)
{
    size_t nw = (size_t)n_out * (size_t)n_in;
    rng_state r;
    rng_seed(&r, 7, (uint64_t)(rows * 1000 + n_out * 10 + n_in));
    float *X = malloc((size_t)rows * n_in * sizeof(float));
    float *dZ = malloc((size_t)rows * n_out * sizeof(float));
    float *G = malloc(nw * sizeof(float));
    float *w[2], *s1[2], *s2[2];
    for (int i = 0; i < 2; i++) {
        w[i] = malloc(nw * sizeof(float));
        s1[i] = calloc(nw, sizeof(float));
        s2[i] = calloc(nw, sizeof(float));
    }
    fill(w[0], nw, &r, 0.5f);
    memcpy(w[1], w[0], nw * sizeof(float));
    int bad = 0;
    double worst_g = 0.0;
    for (int64_t t = 1; t <= 3 && !bad; t++) {
        fill(X, (size_t)rows * n_in, &r, 1.0f);
        fill(dZ, (size_t)rows * n_out, &r, 0.1f);
        /* The reference: G in row order, then the optimizer's own pass. */
        for (int j = 0; j < n_out; j++)
            for (int col = 0; col < n_in; col++) {
                float g = 0.0f;
                double exact = 0.0;
                for (int k = 0; k < rows; k++) {
                    float a = dZ[(size_t)k * n_out + j], b = X[(size_t)k * n_in + col];
                    g = fmaf(a, b, g);
                    exact += (double)a * b;
                }
                G[(size_t)j * n_in + col] = g;
                double e = fabs(g - exact);
                worst_g = e > worst_g ? e : worst_g;
            }
        int adam = c->kind != OPT_SGD;
        optim_scalars sc = scalars_of(c, t);
        kern_optimize(c->kind, w[0], G, c->momentum != 0.0f || adam ? s1[0] : NULL,
                      adam ? s2[0] : NULL, nw, &sc);
        dense_update o = dense_update_of(c->kind, &sc);
        /* The fused step, its rows cut at `split` (a multiple of DENSE_TILE_ROWS). */
        int cut = split < n_out ? split : n_out;
        kern_dense_step(isa, w[1], s1[1], adam ? s2[1] : NULL, dZ, (size_t)n_out, X,
                        (size_t)n_in, rows, n_in, 0, cut, &o);
        kern_dense_step(isa, w[1], s1[1], adam ? s2[1] : NULL, dZ, (size_t)n_out, X,
                        (size_t)n_in, rows, n_in, cut, n_out, &o);
        bad = memcmp(w[0], w[1], nw * sizeof(float)) != 0 ||
              memcmp(s1[0], s1[1], nw * sizeof(float)) != 0 ||
              memcmp(s2[0], s2[1], nw * sizeof(float)) != 0;
    }
    /* |G - exact| is float rounding of at most `rows` terms below 0.1. */
    CHECK_MSG(worst_g <= 1e-6 * rows, "reference G off by %g", worst_g);
    CHECK_MSG(!bad, "%s %s rows %d, %d x %d, split %d: differs from the reference",
              cpu_isa_name(isa), c->name, rows, n_out, n_in, split);
    free(X);
    free(dZ);
    free(G);
    for (int i = 0; i < 2; i++) {
        free(w[i]);
        free(s1[i]);
        free(s2[i]);
    }
    return bad;
}

/* G [n_out, n_in] = dZᵀ·X, dZ [rows, n_out] and X [rows, n_in], each
 * element summed over the rows in order with one fused multiply-add. */
static void ref_grad(float *G, const float *dZ, const float *X, int rows, int n_out, int n_in)
{
    for (int j = 0; j < n_out; j++)
        for (int col = 0; col < n_in; col++) {
            float g = 0.0f;
            for (int k = 0; k < rows; k++)
                g = fmaf(dZ[(size_t)k * n_out + j], X[(size_t)k * n_in + col], g);
            G[(size_t)j * n_in + col] = g;
        }
}

/* FUSE_GRAD: W receives G itself (a convolution's weight gradient), every
 * element written (W starts as NaNs), its rows cut at split; 0 when G
 * equals the sums in row order bit for bit. */
static int run_grad(cpu_isa isa, int rows, int n_out, int n_in, int split)
{
    size_t nw = (size_t)n_out * (size_t)n_in;
    rng_state r;
    rng_seed(&r, 11, (uint64_t)(rows * 1000 + n_out * 10 + n_in));
    float *X = malloc((size_t)rows * n_in * sizeof(float));
    float *dZ = malloc((size_t)rows * n_out * sizeof(float));
    float *G = malloc(nw * sizeof(float)), *ref = malloc(nw * sizeof(float));
    fill(X, (size_t)rows * n_in, &r, 1.0f);
    fill(dZ, (size_t)rows * n_out, &r, 0.1f);
    ref_grad(ref, dZ, X, rows, n_out, n_in);
    for (size_t i = 0; i < nw; i++)
        G[i] = NAN;
    const dense_update grad = {.kind = FUSE_GRAD};
    int cut = split < n_out ? split : n_out;
    kern_dense_step(isa, G, NULL, NULL, dZ, (size_t)n_out, X, (size_t)n_in, rows, n_in, 0, cut,
                    &grad);
    kern_dense_step(isa, G, NULL, NULL, dZ, (size_t)n_out, X, (size_t)n_in, rows, n_in, cut,
                    n_out, &grad);
    size_t bad = bits_differ(G, ref, nw);
    CHECK_MSG(bad == 0, "%s grad rows %d, %d x %d, split %d: %zu of %zu differ",
              cpu_isa_name(isa), rows, n_out, n_in, split, bad, nw);
    free(X);
    free(dZ);
    free(G);
    free(ref);
    return bad != 0;
}

/* The forward kernel against the same sums in plain C; 0 when equal bit
 * for bit. XT comes from kern_transpose, checked element by element. */
static int run_forward(cpu_isa isa, int rows, int n_out, int n_in)
{
    rng_state r;
    rng_seed(&r, 11, (uint64_t)(rows * 1000 + n_out * 10 + n_in));
    int ldt = kern_dense_fwd_ld(isa, rows);
    float *X = malloc((size_t)rows * n_in * sizeof(float));
    float *XT = malloc((size_t)ldt * n_in * sizeof(float));
    float *W = malloc((size_t)n_out * n_in * sizeof(float));
    float *Y = malloc((size_t)rows * n_out * sizeof(float));
    float *ref = malloc((size_t)rows * n_out * sizeof(float));
    fill(X, (size_t)rows * n_in, &r, 1.0f);
    fill(W, (size_t)n_out * n_in, &r, 0.5f);
    /* Columns past `rows` hold NaN: they must not reach Y. */
    for (size_t i = 0; i < (size_t)ldt * n_in; i++)
        XT[i] = NAN;
    kern_transpose(isa, XT, (size_t)ldt, X, (size_t)n_in, rows, n_in);
    int bad_t = 0;
    for (int i = 0; i < rows; i++)
        for (int c = 0; c < n_in; c++)
            bad_t += XT[(size_t)c * ldt + i] != X[(size_t)i * n_in + c];
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < n_out; j++) {
            float y = 0.0f;
            for (int c = 0; c < n_in; c++)
                y = fmaf(W[(size_t)j * n_in + c], X[(size_t)i * n_in + c], y);
            ref[(size_t)i * n_out + j] = y;
        }
    /* Two calls, cut after the first tile of rows of W. */
    int cut = n_out < DENSE_TILE_ROWS ? n_out : DENSE_TILE_ROWS;
    kern_dense_fwd(isa, Y, (size_t)n_out, W, XT, (size_t)ldt, rows, n_in, 0, cut);
    kern_dense_fwd(isa, Y, (size_t)n_out, W, XT, (size_t)ldt, rows, n_in, cut, n_out);
    int bad = memcmp(Y, ref, (size_t)rows * n_out * sizeof(float)) != 0;
    CHECK_MSG(bad_t == 0, "kern_transpose: %d elements wrong (%d x %d)", bad_t, rows, n_in);
    CHECK_MSG(!bad, "%s forward rows %d, %d x %d: differs from the reference", cpu_isa_name(isa),
              rows, n_out, n_in);
    free(X);
    free(XT);
    free(W);
    free(Y);
    free(ref);
    return bad;
}

/*
 * kern_small_nn and kern_small_nt against the sums written out (over k in
 * order, one fmaf each) bit for bit, and those against sums in double; B
 * with rows of exactly K or N (tight: kern_small_nt then runs the forward
 * kernel from A transposed) or wider, C
 * with a leading dimension wider than N, whose extra columns must stay as
 * they were, and the rows computed in two calls cut at `cut`.
 */
static void run_small(cpu_isa isa, int nt, int M, int N, int K, int cut, int tight)
{
    rng_state r;
    rng_seed(&r, 17, (uint64_t)(nt * 1000000 + M * 10000 + N * 100 + K));
    size_t lda = (size_t)K + 3, ldc = (size_t)N + 5;
    /* B is N x K (nt) or K x N; tight: rows of exactly K or N, as a layer's W */
    size_t ldb = tight ? (size_t)(nt ? K : N) : nt ? (size_t)K + 2 : (size_t)N + 1;
    size_t nb = nt ? (size_t)N * ldb : (size_t)K * ldb;
    float *A = malloc((size_t)M * lda * sizeof(float)), *B = malloc(nb * sizeof(float));
    float *C = malloc((size_t)M * ldc * sizeof(float)), *ref = malloc((size_t)M * ldc * sizeof(float));
    fill(A, (size_t)M * lda, &r, 1.0f);
    fill(B, nb, &r, 0.5f);
    for (size_t i = 0; i < (size_t)M * ldc; i++)
        C[i] = ref[i] = -7.0f; /* the columns past N keep it */
    double worst = 0.0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float acc = 0.0f;
            double d = 0.0;
            for (int k = 0; k < K; k++) {
                float b = nt ? B[(size_t)n * ldb + (size_t)k] : B[(size_t)k * ldb + (size_t)n];
                acc = fmaf(A[(size_t)m * lda + (size_t)k], b, acc);
                d += (double)A[(size_t)m * lda + (size_t)k] * b;
            }
            ref[(size_t)m * ldc + (size_t)n] = acc;
            double e = fabs((double)acc - d) / (1.0 + fabs(d));
            worst = e > worst ? e : worst;
        }
    if (cut > M)
        cut = M;
    if (nt) {
        kern_small_nt(isa, C, ldc, A, lda, B, ldb, 0, cut, N, K);
        kern_small_nt(isa, C, ldc, A, lda, B, ldb, cut, M, N, K);
    } else {
        kern_small_nn(isa, C, ldc, A, lda, B, ldb, 0, cut, N, K);
        kern_small_nn(isa, C, ldc, A, lda, B, ldb, cut, M, N, K);
    }
    size_t bad = bits_differ(C, ref, (size_t)M * ldc);
    CHECK_MSG(bad == 0,
              "%s small %s %d x %d x %d (cut %d, ldb %zu): %zu elements differ from the sums in order",
              cpu_isa_name(isa), nt ? "nt" : "nn", M, N, K, cut, ldb, bad);
    CHECK_MSG(worst < 1e-5, "small %s %d x %d x %d: the sums in order are %g from double's",
              nt ? "nt" : "nn", M, N, K, worst);
    free(A);
    free(B);
    free(C);
    free(ref);
}

/*
 * The convolutions' own products (window.h) against the sums written out,
 * bit for bit: kern_gemm_own, Y = A·B with A read through strides (ar, ac:
 * im2col's rows, or dY through Wᵀ), and kern_conv_small_wgrad, G = dYᵀ·col.
 * N (and F) multiples of 16 and of 8 but not of 32, rows around the tile's
 * six, and a B too big to be read whole by every row group (by panels);
 * Y's columns past N and the rows' padding must stay as they were.
 */
static void run_conv(cpu_isa isa, int M, int N, int K, int transposed)
{
    rng_state r;
    rng_seed(&r, 23, (uint64_t)(M * 10000 + N * 100 + K + transposed));
    /* A is M x K as rows of K + 2 (ar = K + 2, ac = 1), or K x M read
     * transposed (ar = 1, ac = M + 1). */
    size_t ar = transposed ? 1 : (size_t)K + 2, ac = transposed ? (size_t)M + 1 : 1;
    size_t na = transposed ? (size_t)K * ac : (size_t)M * ar;
    size_t ldb = (size_t)N + 3, ldy = (size_t)N + 5;
    float *A = malloc(na * sizeof(float)), *B = malloc((size_t)K * ldb * sizeof(float));
    float *Y = malloc((size_t)M * ldy * sizeof(float));
    float *ref = malloc((size_t)M * ldy * sizeof(float));
    fill(A, na, &r, 1.0f);
    fill(B, (size_t)K * ldb, &r, 0.5f);
    for (size_t i = 0; i < (size_t)M * ldy; i++)
        Y[i] = ref[i] = -7.0f;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++)
                acc = fmaf(A[(size_t)m * ar + (size_t)k * ac], B[(size_t)k * ldb + (size_t)n], acc);
            ref[(size_t)m * ldy + (size_t)n] = acc;
        }
    kern_gemm_own(isa, Y, ldy, A, ar, ac, B, ldb, M, N, K);
    size_t bad = bits_differ(Y, ref, (size_t)M * ldy);
    CHECK_MSG(bad == 0, "%s gemm_own %d x %d x %d%s: %zu elements differ from the sums in order",
              cpu_isa_name(isa), M, N, K, transposed ? " (A transposed)" : "", bad);
    free(A);
    free(B);
    free(Y);
    free(ref);
}

static void run_conv_wgrad(cpu_isa isa, int rows, int F, int kc)
{
    rng_state r;
    rng_seed(&r, 29, (uint64_t)(rows * 10000 + F * 100 + kc));
    float *dY = malloc((size_t)rows * F * sizeof(float));
    float *col = malloc((size_t)rows * kc * sizeof(float));
    float *G = malloc((size_t)F * kc * sizeof(float)), *ref = malloc((size_t)F * kc * sizeof(float));
    fill(dY, (size_t)rows * F, &r, 1.0f);
    fill(col, (size_t)rows * kc, &r, 1.0f);
    ref_grad(ref, dY, col, rows, F, kc);
    kern_conv_small_wgrad(isa, G, dY, col, rows, F, kc);
    size_t bad = bits_differ(G, ref, (size_t)F * kc);
    CHECK_MSG(bad == 0, "%s conv_small_wgrad %d rows, %d filters, kc %d: %zu differ",
              cpu_isa_name(isa), rows, F, kc, bad);
    free(dY);
    free(col);
    free(G);
    free(ref);
}

/* The stripes of kern_dense_step: X whole where it fits DENSE_STRIPE_BYTES
 * (the seed's batch of 64 of 784 inputs, 196 KiB), else whole register
 * tiles, two at least. That the stripes change no bit is run_case's and
 * run_grad's check: their 517 x 784 and 726 x 288 inputs are striped. */
static void test_stripes(void)
{
    CHECK(kern_dense_stripe(64, 49, 16, 4) == 49);
    CHECK(kern_dense_stripe(1, 192, 16, 4) == 192);
    CHECK((size_t)517 * 784 * sizeof(float) > DENSE_STRIPE_BYTES);
    CHECK((size_t)726 * 288 * sizeof(float) > DENSE_STRIPE_BYTES);
    int s = kern_dense_stripe(1024, 192, 16, 4); /* 1024 x 3072 */
    CHECK(s % 4 == 0 && s >= 8 && s < 192);
    CHECK((size_t)1024 * (size_t)s * 16 * sizeof(float) <= DENSE_STRIPE_BYTES);
    CHECK(kern_dense_stripe(100000, 192, 16, 4) == 8); /* two tiles at least */
    CHECK(kern_dense_stripe(726, 36, 8, 2) % 2 == 0);
}

/* OpenBLAS's tiles: a product too small is one call; past it, as many
 * tiles as before (the pool's parts), shaped to pack the least. */
static void test_gemm_grid(void)
{
    int mb, nb, tm, tn;
    gemm_grid_of(64, 10, 128, &mb, &nb, &tm, &tn);
    CHECK(mb == 1 && nb == 1 && tm == 64 && tn == 10);
    /* A batch of 1024 through Dense(1000) on 3072 inputs: 8 x 8 tiles, not
     * 32 x 2 (each row block packs all 12 MiB of the weights again). */
    gemm_grid_of(1024, 1000, 3072, &mb, &nb, &tm, &tn);
    CHECK_MSG(mb == 8 && nb == 8 && tm == 128 && tn == 128, "1024 x 1000: %d x %d of %d x %d", mb,
              nb, tm, tn);
    /* The seed's 64 x 128 x 784 keeps its 2 x 4 tiles of 32 x 32. */
    gemm_grid_of(64, 128, 784, &mb, &nb, &tm, &tn);
    CHECK(mb == 2 && nb == 4 && tm == 32 && tn == 32);
    /* Every grid covers C with tiles on multiples of 16, 64 at most. */
    int dims[] = {1, 33, 64, 100, 1000, 1024, 4096, 43264};
    for (int a = 0; a < 8; a++)
        for (int b = 0; b < 8; b++) {
            gemm_grid_of(dims[a], dims[b], 512, &mb, &nb, &tm, &tn);
            CHECK(mb * nb <= GEMM_TILES && mb * tm >= dims[a] && nb * tn >= dims[b]);
            CHECK((mb - 1) * tm < dims[a] && (nb - 1) * tn < dims[b]);
            CHECK(mb * nb == 1 || (tm % GEMM_EDGE_UNIT == 0 && tn % GEMM_EDGE_UNIT == 0));
        }
}

int main(void)
{
    test_stripes();
    test_gemm_grid();
    /* The processor's best, and each narrower one. */
    cpu_isa best = cpu_isa_detect();
    cpu_isa isas[3] = {ISA_NONE, ISA_AVX2, ISA_AVX512};
    /* the last: dZ read in place, not packed */
    int rows_of[] = {1, 7, 64, DENSE_PACK_ROWS + 5};
    int out_of[] = {1, 6, 13};
    /* 1000 and 24: under AVX-512, 8 columns past the last 16 (the AVX2
     * kernel's); 37: 5 (scalar) */
    int in_of[] = {784, 1000, 37, 24, 16, 5, 1};
    int tried = 0;
    for (int a = 0; a < 3; a++) {
        if (isas[a] > best)
            continue;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            for (size_t i = 0; i < sizeof rows_of / sizeof *rows_of; i++)
                for (int j = 0; j < 3; j++)
                    for (size_t k = 0; k < sizeof in_of / sizeof *in_of; k++) {
                        run_case(isas[a], &cases[c], rows_of[i], out_of[j], in_of[k],
                                 DENSE_TILE_ROWS);
                        tried++;
                    }
    }
    /* The gradient alone: the seed's and a convolution's shapes (64
     * filters, 3 x 3 x 32 windows, a chunk of 6 images of 11 x 11). */
    int gr_rows[] = {1, 7, 64, DENSE_PACK_ROWS + 5, 726};
    int gr_out[] = {1, 6, 13, 64};
    int gr_in[] = {784, 1000, 288, 37, 24, 16, 5, 1};
    for (int a = 0; a < 3; a++) {
        if (isas[a] > best)
            continue;
        for (size_t i = 0; i < sizeof gr_rows / sizeof *gr_rows; i++)
            for (size_t j = 0; j < sizeof gr_out / sizeof *gr_out; j++)
                for (size_t k = 0; k < sizeof gr_in / sizeof *gr_in; k++) {
                    run_grad(isas[a], gr_rows[i], gr_out[j], gr_in[k], 2 * DENSE_TILE_ROWS);
                    tried++;
                }
    }
    /* 200: kern_transpose's bands of 64 rows, and a last band it leaves
     * part of to the scalar loop */
    int fwd_rows[] = {1, 7, 64, 70, 200};
    for (int a = 0; a < 3; a++) {
        if (isas[a] > best)
            continue;
        for (size_t i = 0; i < sizeof fwd_rows / sizeof *fwd_rows; i++)
            for (int j = 0; j < 3; j++)
                for (int k = 0; k < 5; k++) {
                    run_forward(isas[a], fwd_rows[i], out_of[j], in_of[k]);
                    tried++;
                }
    }
    /* Small products: N and K around the vector widths and the tile's 6
     * rows, the seed models' second layers (64 x 10 x 128, 64 x 512 x 10),
     * and kern_small_nt past its pack (K * N too large: the scalar path). */
    int sm_m[] = {1, 5, 6, 13, 64};
    int sm_n[] = {1, 7, 8, 10, 16, 17, 33, 128};
    int sm_k[] = {1, 3, 10, 128};
    for (int a = 0; a < 3; a++) {
        if (isas[a] > best)
            continue;
        for (int nt = 0; nt < 2; nt++)
            for (size_t i = 0; i < sizeof sm_m / sizeof *sm_m; i++)
                for (size_t j = 0; j < sizeof sm_n / sizeof *sm_n; j++)
                    for (size_t k = 0; k < sizeof sm_k / sizeof *sm_k; k++)
                        for (int tight = 0; tight < 2; tight++) {
                            run_small(isas[a], nt, sm_m[i], sm_n[j], sm_k[k], 7, tight);
                            tried++;
                        }
        run_small(isas[a], 0, 64, 512, 10, 30, 1);
        run_small(isas[a], 1, 64, 10, 512, 30, 1); /* A transposed: 64 x 512 fills the buffer */
        run_small(isas[a], 1, 600, 10, 192, 30, 1); /* rows 0-29 transposed, the rest packed */
        run_small(isas[a], 1, 64, 10, 1024, 30, 1); /* past both: scalar */
        run_small(isas[a], 1, 9, 10, KERN_SMALL_NT_PACK / 8, 4, 0); /* scalar */
        tried += 5;
    }
    /* AVX2 and AVX-512 give the same bits only where they take the same
     * paths: every choice between the own kernels and OpenBLAS (and the
     * transposed input's width, on which the forward's choice depends)
     * must answer the same for both, whatever the processor (no kernel runs
     * here). 33 rows rounded to 40 under AVX2 and 48 under AVX-512 had 33 x
     * 6 x 785 take the own kernels under AVX2 alone, N = 24 (a vector and a
     * half under AVX2, 8 scalar columns of 24 under AVX-512) likewise. */
    int ld_differ = 0, nt_differ = 0, nn_differ = 0;
    for (int rows = 1; rows <= 130; rows++) {
        ld_differ += kern_dense_fwd_ld(ISA_AVX2, rows) != kern_dense_fwd_ld(ISA_AVX512, rows);
        for (int k = 1; k <= 1100; k += k < 40 ? 1 : 29)
            for (int n = 1; n <= KERN_SMALL_NT_N + 1; n++)
                nt_differ += kern_small_nt_suits(ISA_AVX2, rows, n, k, (size_t)k) !=
                             kern_small_nt_suits(ISA_AVX512, rows, n, k, (size_t)k);
    }
    for (int n = 1; n <= 300; n++)
        for (int k = 1; k <= 40; k++)
            nn_differ += kern_small_nn_suits(ISA_AVX2, n, k) != kern_small_nn_suits(ISA_AVX512, n, k);
    CHECK_MSG(!ld_differ, "kern_dense_fwd_ld: AVX2 and AVX-512 differ for %d row counts", ld_differ);
    CHECK_MSG(!nt_differ, "kern_small_nt_suits: AVX2 and AVX-512 differ for %d shapes", nt_differ);
    CHECK_MSG(!nn_differ, "kern_small_nn_suits: AVX2 and AVX-512 differ for %d shapes", nn_differ);
    tried++;
    /* The convolutions' products: N a multiple of 32, of 16 only, M past
     * and below the tiles' six rows; the small weight gradient with F a
     * multiple of 16 and of 8 only. */
    int cv_m[] = {1, 5, 6, 13, 100};
    int cv_n[] = {16, 32, 48, 64};
    int cv_k[] = {1, 9, 50};
    int wg_f[] = {8, 16, 24, 32};
    int wg_kc[] = {1, 9, CONV_SMALL_KC};
    for (int a = 1; a < 3; a++) {
        if (isas[a] > best)
            continue;
        for (size_t i = 0; i < sizeof cv_m / sizeof *cv_m; i++)
            for (size_t j = 0; j < sizeof cv_n / sizeof *cv_n; j++)
                for (size_t k = 0; k < sizeof cv_k / sizeof *cv_k; k++)
                    for (int t = 0; t < 2; t++) {
                        CHECK(gemm_own_ok(cv_n[j]));
                        run_conv(isas[a], cv_m[i], cv_n[j], cv_k[k], t);
                        tried++;
                    }
        /* B past 256 KiB: by panels of 64 columns, the last narrower (a
         * later dense layer's input gradient, dZ·W). */
        run_conv(isas[a], 20, 208, 400, 0);
        run_conv(isas[a], 64, 96, 700, 1);
        tried += 2;
        for (size_t f = 0; f < sizeof wg_f / sizeof *wg_f; f++)
            for (size_t k = 0; k < sizeof wg_kc / sizeof *wg_kc; k++) {
                CHECK(conv_small_ok(wg_kc[k], wg_f[f]));
                run_conv_wgrad(isas[a], 37, wg_f[f], wg_kc[k]);
                tried++;
            }
    }
    printf("test_dense_step: %d cases, widths up to %s\n", tried, cpu_isa_name(best));
    if (best == ISA_NONE)
        printf("test_dense_step: this processor has no AVX2: only the scalar path was tested\n");
    return check_done("test_dense_step");
}
