/*
 * The CUDA backend against the CPU backend, which is the reference: every op
 * on fresh random inputs (count 1 and 3, padded strides, shared operands),
 * one epoch of a small fused group through the trainer, and GPU pools. The
 * image ops (im2col, pooling, batch norm) against plain loops written here,
 * in double, from backend_impl.h's contracts.
 * Tolerances: GEMMs 1e-4 of the largest |entry|; element-wise ops and loss
 * statistics 1e-5 (relative above 1, absolute below); dropout masks and
 * copies bit-identical; trained weights after one epoch 1e-3; im2col and max
 * pooling bit-identical, the other window ops 1e-5, batch norm 1e-4.
 * Without a plugin, driver or GPU it checks the loader's reasons and runs the
 * harness CPU against CPU (a failure with COHORT_REQUIRE_GPU=1). ctest runs it
 * again as test_cuda_emu on the emulated GPU (tests/cuda_emu).
 */
#include "backend/backend_impl.h"
#include "backend/cuda/cuda_plugin.h"
#include "backend/rnn_cell.h"
#include "check.h"
#include "layer_text.h"
#include "device/device.h"
#include "optim/optim.h"
#include "train/group_impl.h"
#include "train/train.h"
#include "util/util.h"

#include <stdint.h>

static const backend_ops *cpu, *gpu;
static backend_ctx *cc, *gc;
static rng_state rng;

/* ---- buffers: a host copy for the CPU, a device copy for the GPU ---------- */

typedef struct buf {
    float *h, *d;
    size_t n;
} buf;

static float urand(float lo, float hi) { return lo + (hi - lo) * rng_uniform(&rng); }

static void *dev_alloc(size_t bytes)
{
    void *p = gpu->mem_alloc(0, bytes ? bytes : 4);
    if (!p) {
        fprintf(stderr, "test_cuda: cudaMalloc of %zu bytes failed\n", bytes);
        exit(1);
    }
    return p;
}

static buf buf_make(size_t n, float lo, float hi)
{
    buf b = {malloc(n * sizeof(float)), NULL, n};
    for (size_t i = 0; i < n; i++)
        b.h[i] = urand(lo, hi);
    b.d = dev_alloc(n * sizeof(float));
    gpu->copy_h2d(gc, b.d, b.h, n * sizeof(float));
    return b;
}

static void buf_free(buf *b)
{
    free(b->h);
    gpu->mem_free(0, b->d);
}

static float *buf_back(const buf *b)
{
    float *h = malloc(b->n * sizeof(float));
    gpu->copy_d2h(gc, h, b->d, b->n * sizeof(float));
    return h;
}

/* |gpu - cpu| <= tol * max(1, |cpu|) everywhere (padding included). */
static void check_close(const char *what, const buf *b, double tol)
{
    float *g = buf_back(b);
    size_t bad = 0, worst = 0;
    double wd = -1.0;
    for (size_t i = 0; i < b->n; i++) {
        double ref = b->h[i], d = fabs((double)g[i] - ref);
        double lim = tol * (fabs(ref) > 1.0 ? fabs(ref) : 1.0);
        if (!(d <= lim) || isnan(g[i]) != isnan(b->h[i])) {
            bad++;
            if (!(d <= wd)) {
                wd = d;
                worst = i;
            }
        }
    }
    CHECK_MSG(bad == 0, "%s: %zu of %zu values off by more than %g; worst [%zu] gpu %.9g cpu %.9g",
              what, bad, b->n, tol, worst, (double)g[worst], (double)b->h[worst]);
    free(g);
}

/* max |gpu - cpu| <= tol * max |cpu| (GEMMs: the summation order differs). */
static void check_close_norm(const char *what, const buf *b, double tol)
{
    float *g = buf_back(b);
    double mx = 0.0, md = 0.0;
    size_t at = 0;
    for (size_t i = 0; i < b->n; i++) {
        double d = fabs((double)g[i] - (double)b->h[i]);
        if (fabs(b->h[i]) > mx)
            mx = fabs(b->h[i]);
        if (!(d <= md)) {
            md = d;
            at = i;
        }
    }
    CHECK_MSG(md <= tol * mx, "%s: max difference %.3g at [%zu] (gpu %.9g cpu %.9g), over %g of %.3g",
              what, md, at, (double)g[at], (double)b->h[at], tol, mx);
    free(g);
}

static void check_same(const char *what, const buf *b)
{
    float *g = buf_back(b);
    size_t diff = 0, first = 0;
    for (size_t i = 0; i < b->n; i++)
        if (memcmp(&g[i], &b->h[i], sizeof(float)) != 0 && diff++ == 0)
            first = i;
    CHECK_MSG(diff == 0, "%s: %zu of %zu values differ in their bits; first [%zu] gpu %.9g cpu %.9g",
              what, diff, b->n, first, (double)g[first], (double)b->h[first]);
    free(g);
}

static void check_no_error(const char *what)
{
    const char *e = backend_cuda_ctx_error(gc);
    CHECK_MSG(e[0] == 0, "%s: the CUDA context met an error: %s", what, e);
}

/* ---- ops ------------------------------------------------------------------ */

static void test_copies(void)
{
    buf a = buf_make(1000, -5, 5);
    check_same("copy_h2d then copy_d2h", &a);
    gpu->memzero(gc, (char *)a.d + 40, 400);
    cpu->memzero(cc, (char *)a.h + 40, 400);
    check_same("memzero of 100 floats in the middle", &a);
    buf_free(&a);
}

static void test_load(int count, int shared)
{
    enum { N = 50, DIM = 7, ROWS = 13, B = 16 };
    float x[N * DIM];
    int32_t y[N];
    int64_t idx[3 * N];
    for (int i = 0; i < N * DIM; i++)
        x[i] = urand(-1, 1);
    for (int i = 0; i < N; i++)
        y[i] = (int32_t)(rng_next(&rng) % 10);
    for (int i = 0; i < 3 * N; i++)
        idx[i] = (int64_t)(rng_next(&rng) % N);
    size_t istride = shared ? 0 : N;
    buf rows = buf_make((size_t)count * B * DIM, 99, 100);
    cpu->load_rows(cc, rows.h, (size_t)B * DIM, x, NULL, DIM, idx, istride, ROWS, count);
    gpu->load_rows(gc, rows.d, (size_t)B * DIM, x, NULL, DIM, idx, istride, ROWS, count);
    char what[96];
    snprintf(what, sizeof what, "load_rows count %d%s", count, shared ? " (shared rows)" : "");
    check_same(what, &rows);
    /* Rows of bytes (IDX images), scaled by 1/255 on the way. */
    uint8_t x8[N * DIM];
    for (int i = 0; i < N * DIM; i++)
        x8[i] = (uint8_t)(rng_next(&rng) % 256);
    buf rows8 = buf_make((size_t)count * B * DIM, 98, 100);
    cpu->load_rows(cc, rows8.h, (size_t)B * DIM, NULL, x8, DIM, idx, istride, ROWS, count);
    gpu->load_rows(gc, rows8.d, (size_t)B * DIM, NULL, x8, DIM, idx, istride, ROWS, count);
    snprintf(what, sizeof what, "load_rows of bytes count %d%s", count,
             shared ? " (shared rows)" : "");
    check_same(what, &rows8);
    /* Labels: the same through int32 buffers. */
    size_t nl = (size_t)count * B;
    int32_t *lh = malloc(nl * sizeof *lh), *lg = malloc(nl * sizeof *lg);
    for (size_t i = 0; i < nl; i++)
        lh[i] = -7;
    int32_t *ld = dev_alloc(nl * sizeof *ld);
    gpu->copy_h2d(gc, ld, lh, nl * sizeof *lh);
    cpu->load_labels(cc, lh, B, y, idx, istride, ROWS, count);
    gpu->load_labels(gc, ld, B, y, idx, istride, ROWS, count);
    gpu->copy_d2h(gc, lg, ld, nl * sizeof *lg);
    snprintf(what, sizeof what, "load_labels count %d%s", count, shared ? " (shared rows)" : "");
    CHECK_MSG(memcmp(lh, lg, nl * sizeof *lh) == 0, "%s: labels differ", what);
    gpu->mem_free(0, ld);
    free(lh);
    free(lg);
    buf_free(&rows);
    buf_free(&rows8);
}

static void test_gemm(int ta, int tb, int count, int shared_b, float beta)
{
    const int M = 17, N = 23, Kd = 29;
    int ar = ta ? Kd : M, ac = ta ? M : Kd; /* A as stored: ar x ac, row-major */
    int br = tb ? N : Kd, bc = tb ? Kd : N;
    int lda = ac + 3, ldb = bc + 2, ldc = N + 5;
    size_t sA = (size_t)ar * (size_t)lda + 7, sB = shared_b ? 0 : (size_t)br * (size_t)ldb + 3;
    size_t sC = (size_t)M * (size_t)ldc + 9;
    buf A = buf_make(sA * (size_t)count, -1, 1);
    buf Bm = buf_make(shared_b ? (size_t)br * (size_t)ldb : sB * (size_t)count, -1, 1);
    buf C = buf_make(sC * (size_t)count, -1, 1);
    cpu->gemm(cc, ta, tb, M, N, Kd, 0.7f, A.h, lda, sA, Bm.h, ldb, sB, beta, C.h, ldc, sC, count);
    gpu->gemm(gc, ta, tb, M, N, Kd, 0.7f, A.d, lda, sA, Bm.d, ldb, sB, beta, C.d, ldc, sC, count);
    char what[96];
    snprintf(what, sizeof what, "gemm ta=%d tb=%d count %d%s beta %g", ta, tb, count,
             shared_b ? " shared B" : "", (double)beta);
    check_close_norm(what, &C, 1e-4);
    check_no_error(what);
    buf_free(&A);
    buf_free(&Bm);
    buf_free(&C);
}

static const char *act_names[] = {"linear", "relu", "sigmoid", "tanh", "softmax", "gelu", "silu"};

static void test_bias_act(act_kind act, int count)
{
    const int rows = 19, cols = 37;
    size_t sY = (size_t)rows * cols + 11, sb = cols + 3;
    buf Y = buf_make(sY * (size_t)count, -3, 3), b = buf_make(sb * (size_t)count, -1, 1);
    cpu->bias_act(cc, Y.h, sY, b.h, sb, rows, cols, act, count);
    gpu->bias_act(gc, Y.d, sY, b.d, sb, rows, cols, act, count);
    char what[64];
    snprintf(what, sizeof what, "bias_act %s count %d", act_names[act], count);
    check_close(what, &Y, 1e-5);
    buf_free(&Y);
    buf_free(&b);
}

static void test_act_backward(act_kind act, int count)
{
    const size_t n = 777, sd = 790, sY = 800;
    buf d = buf_make(sd * (size_t)count, -2, 2);
    /* Y is the output, or for gelu and silu the input z (act_needs_input). */
    buf Y = act_needs_input(act) ? buf_make(sY * (size_t)count, -4.0f, 4.0f)
                                 : buf_make(sY * (size_t)count, act == ACT_SIGMOID ? 0.0f : -1.0f, 1);
    cpu->act_backward(cc, d.h, sd, Y.h, sY, n, act, count);
    gpu->act_backward(gc, d.d, sd, Y.d, sY, n, act, count);
    char what[64];
    snprintf(what, sizeof what, "act_backward %s count %d", act_names[act], count);
    check_close(what, &d, 1e-5);
    buf_free(&d);
    buf_free(&Y);
}

/* rows 70: one stage; 2600: the GPU's two stages (chunks of rows, then their
 * sums in order). */
static void test_bias_grad(int count, int rows)
{
    const int cols = 45;
    size_t sdb = cols + 5, sdZ = (size_t)rows * cols + 13;
    buf db = buf_make(sdb * (size_t)count, 50, 60), dZ = buf_make(sdZ * (size_t)count, -1, 1);
    cpu->bias_grad(cc, db.h, sdb, dZ.h, sdZ, rows, cols, count);
    gpu->bias_grad(gc, db.d, sdb, dZ.d, sdZ, rows, cols, count);
    /* A float sum of n terms is off by at most about n * 2^-24 * sum |terms| in
     * any order: 1e-5 * sum |terms| covers two orders of 70 terms (and the
     * chunked sums' error of 2600, below sqrt(rows) * 2^-24 in practice). */
    float *g = buf_back(&db);
    int bad = 0;
    for (int k = 0; k < count; k++)
        for (size_t j = 0; j < sdb; j++) {
            double mass = 0.0;
            for (int r = 0; j < (size_t)cols && r < rows; r++)
                mass += fabs(dZ.h[(size_t)k * sdZ + (size_t)r * cols + j]);
            size_t i = (size_t)k * sdb + j;
            bad += !(fabs((double)g[i] - (double)db.h[i]) <= 1e-5 * mass);
        }
    CHECK_MSG(bad == 0, "bias_grad count %d rows %d: %d sums off by more than 1e-5 of their mass",
              count, rows, bad);
    free(g);
    buf_free(&db);
    buf_free(&dZ);
}

static void test_dropout(int count)
{
    const size_t n = 1000, s = 1003;
    float rate[80];
    uint64_t key[80];
    for (int k = 0; k < count; k++) {
        rate[k] = (float)(k % 3) * 0.25f; /* 0, 0.25, 0.5 */
        key[k] = 0x1234567ULL * (uint64_t)(k + 1) ^ 0xabcdefULL;
    }
    buf X = buf_make(s * (size_t)count, -2, 2), Y = buf_make(s * (size_t)count, 7, 8);
    buf M = buf_make(s * (size_t)count, 7, 8);
    uint64_t counter0 = 123456789012ULL;
    cpu->dropout_fwd(cc, Y.h, X.h, M.h, s, n, rate, key, counter0, count);
    gpu->dropout_fwd(gc, Y.d, X.d, M.d, s, n, rate, key, counter0, count);
    char what[64];
    snprintf(what, sizeof what, "dropout mask count %d", count);
    check_same(what, &M);
    snprintf(what, sizeof what, "dropout output count %d", count);
    check_same(what, &Y);
    /* mul (dropout backward) with the mask it made. */
    buf d = buf_make(s * (size_t)count, -1, 1);
    cpu->mul(cc, d.h, s, M.h, s, n, count);
    gpu->mul(gc, d.d, s, M.d, s, n, count);
    snprintf(what, sizeof what, "mul count %d", count);
    check_same(what, &d);
    cpu->copy(cc, Y.h, d.h, s, n - 5, count);
    gpu->copy(gc, Y.d, d.d, s, n - 5, count);
    snprintf(what, sizeof what, "copy count %d", count);
    check_same(what, &Y);
    buf_free(&X);
    buf_free(&Y);
    buf_free(&M);
    buf_free(&d);
}

/* add (a residual's sum and its gradients): Y = A + B at three different
 * strides, B read by every model (stride 0), in place over A and over B,
 * and B NULL (a copy between strides). */
static void test_add(int count)
{
    const size_t n = 777, sy = 781, sa = 790, sb = 800;
    buf A = buf_make(sa * (size_t)count, -2, 2), B = buf_make(sb * (size_t)count, -3, 3);
    buf Y = buf_make(sy * (size_t)count, 7, 8);
    char what[64];
    cpu->add(cc, Y.h, sy, A.h, sa, B.h, sb, n, count);
    gpu->add(gc, Y.d, sy, A.d, sa, B.d, sb, n, count);
    snprintf(what, sizeof what, "add count %d", count);
    check_same(what, &Y);
    int wrong = 0;
    for (int k = 0; k < count; k++)
        for (size_t i = 0; i < n; i++)
            wrong += Y.h[(size_t)k * sy + i] != A.h[(size_t)k * sa + i] + B.h[(size_t)k * sb + i];
    CHECK_MSG(wrong == 0, "add count %d: %d sums wrong", count, wrong);
    cpu->add(cc, Y.h, sy, A.h, sa, B.h, 0, n, count);
    gpu->add(gc, Y.d, sy, A.d, sa, B.d, 0, n, count);
    snprintf(what, sizeof what, "add, B shared, count %d", count);
    check_same(what, &Y);
    cpu->add(cc, A.h, sa, A.h, sa, B.h, sb, n, count);
    gpu->add(gc, A.d, sa, A.d, sa, B.d, sb, n, count);
    snprintf(what, sizeof what, "add in place over A, count %d", count);
    check_same(what, &A);
    cpu->add(cc, B.h, sb, A.h, sa, B.h, sb, n - 3, count);
    gpu->add(gc, B.d, sb, A.d, sa, B.d, sb, n - 3, count);
    snprintf(what, sizeof what, "add in place over B, count %d", count);
    check_same(what, &B);
    cpu->add(cc, Y.h, sy, B.h, sb, NULL, 0, n, count);
    gpu->add(gc, Y.d, sy, B.d, sb, NULL, 0, n, count);
    snprintf(what, sizeof what, "add of nothing (a copy), count %d", count);
    check_same(what, &Y);
    /* The sum itself, where the two backends could agree on a wrong one. */
    int bad = 0;
    for (int k = 0; k < count; k++)
        for (size_t i = 0; i < n - 3; i++)
            bad += Y.h[(size_t)k * sy + i] != B.h[(size_t)k * sb + i];
    CHECK_MSG(bad == 0, "add of nothing, count %d: %d values not copied", count, bad);
    buf_free(&A);
    buf_free(&B);
    buf_free(&Y);
}

/* One loss: the outputs (made the model's output in place), the gradient
 * and the stats doubles, CPU against GPU; targets as labels (rows 0) or
 * target rows, with or without class weights. */
static void test_loss(loss_kind kind, metric_kind metric, act_kind out_act, int rows_t, int cw,
                      int cols, int count, int with_grad)
{
    const int rows = 37, B = 40;
    size_t sZ = (size_t)B * cols + 3, sd = (size_t)B * cols + 1, st = (size_t)B * cols;
    buf Z = buf_make(sZ * (size_t)count, -4, 4), dZ = buf_make(sd * (size_t)count, 9, 10);
    buf T = buf_make(st * (size_t)count, 0, 1);
    int32_t *y = malloc((size_t)count * B * sizeof *y);
    int classes = cols > 1 ? cols : 2;
    for (int k = 0; k < count; k++)
        for (int r = 0; r < B; r++) {
            int label = (int)(rng_next(&rng) % (uint64_t)classes);
            y[k * B + r] = label;
            float *z = Z.h + (size_t)k * sZ + (size_t)r * (size_t)cols;
            float *t = T.h + (size_t)k * st + (size_t)r * (size_t)cols;
            if (kind == LOSS_BCE && r % 3 == 0)
                for (int j = 0; j < cols; j++)
                    t[j] = t[j] > 0.5f ? 1.0f : 0.0f; /* some exact 0/1 targets */
            if (cols > 1 && r % 5 == 0 && cols > 7)
                z[3] = z[7] = 6.0f; /* a tie for the maximum: the first index wins on both */
        }
    gpu->copy_h2d(gc, Z.d, Z.h, Z.n * sizeof(float));
    gpu->copy_h2d(gc, T.d, T.h, T.n * sizeof(float));
    int32_t *yd = dev_alloc((size_t)count * B * sizeof *yd);
    gpu->copy_h2d(gc, yd, y, (size_t)count * B * sizeof *y);
    float wts[3 * 70], *wd = NULL;
    for (int i = 0; i < count * classes; i++)
        wts[i] = 0.25f + (float)(i % 5);
    if (cw) {
        wd = dev_alloc(sizeof wts);
        gpu->copy_h2d(gc, wd, wts, sizeof wts);
    }
    double sh[12], sg[12];
    for (int i = 0; i < 12; i++)
        sh[i] = 0.5 * i + 1.0; /* stats add to what is there */
    double *sdev = dev_alloc(sizeof sh);
    gpu->copy_h2d(gc, sdev, sh, sizeof sh);
    float scale = 1.0f / (float)rows, smooth[3] = {0.0f, 0.1f, 0.2f}, delta[3] = {1.0f, 0.5f, 2.0f};
    loss_step oc = {kind, out_act, metric, smooth, delta, cw ? wts : NULL, cw ? classes : 0};
    loss_step og = oc;
    og.class_weight = wd;
    cpu->loss(cc, &oc, Z.h, sZ, rows_t ? NULL : y, B, rows_t ? T.h : NULL, st,
              with_grad ? dZ.h : NULL, sd, sh, rows, cols, scale, count);
    gpu->loss(gc, &og, Z.d, sZ, rows_t ? NULL : yd, B, rows_t ? T.d : NULL, st,
              with_grad ? dZ.d : NULL, sd, sdev, rows, cols, scale, count);
    gpu->copy_d2h(gc, sg, sdev, sizeof sg);
    char what[128];
    snprintf(what, sizeof what, "loss %s cols %d count %d%s%s%s", loss_name(kind), cols, count,
             rows_t ? " rows" : " labels", cw ? " weighted" : "", with_grad ? "" : " (no gradient)");
    check_close(what, &Z, 1e-5);
    if (with_grad)
        check_close(what, &dZ, 1e-5);
    else
        check_same(what, &dZ);
    for (int k = 0; k < count; k++)
        for (int i = 0; i < 4; i++) {
            double c = sh[4 * k + i], gv = sg[4 * k + i];
            double tol = i == 1 && metric == METRIC_ARGMAX ? 0.0 : 1e-5 * fmax(1.0, fabs(c));
            CHECK_MSG(fabs(gv - c) <= tol, "%s: model %d stats[%d] %.9g vs %.9g", what, k, i, gv,
                      c);
        }
    check_no_error(what);
    gpu->mem_free(0, sdev);
    gpu->mem_free(0, yd);
    if (wd)
        gpu->mem_free(0, wd);
    free(y);
    buf_free(&Z);
    buf_free(&dZ);
    buf_free(&T);
}

/* Every optimizer of the table, CPU against GPU: each model's own settings
 * (model 0 plain, 1 centered or with weight decay, 2 with momentum or
 * nesterov) at step 5 of its schedule-free rate. */
static void test_optimizers(int count)
{
    const size_t n = 1000, s = 1010;
    float lr[3] = {0.1f, 0.01f, 0.05f}, mom[3] = {0.0f, 0.0f, 0.8f}, b1[3] = {0.9f, 0.8f, 0.95f};
    float b2[3] = {0.999f, 0.99f, 0.9999f}, eps[3] = {1e-7f, 1e-6f, 1e-8f};
    float wd[3] = {0.0f, 0.004f, 0.01f}, rho[3] = {0.9f, 0.8f, 0.95f};
    int nest[3] = {0, 0, 1}, centered[3] = {0, 1, 0};
    unsigned char active[3] = {1, 1, 1};
    if (count == 3)
        active[1] = 0; /* an inactive model must stay as it is */
    char what[64];
    for (int kind = 0; kind < OPT_KIND_COUNT; kind++) {
        const optim_entry *e = optim_entry_of((opt_kind)kind);
        optim_scalars sc[3];
        int slots = 0;
        for (int k = 0; k < count; k++) {
            optim_spec os;
            optim_defaults(&os, (opt_kind)kind);
            os.lr = lr[k], os.momentum = mom[k], os.beta1 = b1[k], os.beta2 = b2[k];
            os.eps = eps[k], os.rho = rho[k], os.nesterov = nest[k], os.centered = centered[k];
            os.weight_decay = kind == OPT_ADAMW ? wd[k] : 0.0f;
            optim_memo memo = {0, 0};
            e->scalars(&os, os.lr, 5, &memo, &sc[k]);
            if (e->slots(&os) > slots)
                slots = e->slots(&os);
        }
        optim_step o = {sc, active};
        buf w = buf_make(s * (size_t)count, -1, 1), g = buf_make(s * (size_t)count, -1, 1);
        buf s1 = buf_make(s * (size_t)count, 0.5f, 1.0f), s2 = buf_make(s * (size_t)count, 0, 0.01f);
        cpu->optimize(cc, (opt_kind)kind, w.h, g.h, slots > 0 ? s1.h : NULL,
                      slots > 1 ? s2.h : NULL, s, n, &o, count);
        gpu->optimize(gc, (opt_kind)kind, w.d, g.d, slots > 0 ? s1.d : NULL,
                      slots > 1 ? s2.d : NULL, s, n, &o, count);
        snprintf(what, sizeof what, "%s count %d", e->name, count);
        check_close(what, &w, 1e-5);
        check_close(what, &s1, 1e-5);
        check_close(what, &s2, 1e-5);
        check_no_error(what);
        buf_free(&w);
        buf_free(&g);
        buf_free(&s1);
        buf_free(&s2);
    }
}

/* The clipping and regularizer ops: the norms' sums in double, the same on
 * both (to rounding), and each model's own setting (0: off). */
/* n 3000: the sums in one block per model; 70000: the GPU's two stages. */
static void test_clip_reg(int count, size_t n)
{
    const size_t s = n + 11;
    float c[3] = {0.5f, 0.0f, 100.0f}, l1[3] = {0.01f, 0.0f, 0.0f}, l2[3] = {0.02f, 0.0f, 0.5f};
    char what[64];
    buf w = buf_make(s * (size_t)count, -1, 1), g = buf_make(s * (size_t)count, -1, 1);
    double acc_h[3], *acc_d = dev_alloc(3 * sizeof(double)), back[3];
    double st_h[12] = {0}, *st_d = dev_alloc(12 * sizeof(double)), st_back[12];
    gpu->copy_h2d(gc, st_d, st_h, sizeof st_h);
    cpu->sum_sq(cc, acc_h, g.h, s, n, 0, count);
    gpu->sum_sq(gc, acc_d, g.d, s, n, 0, count);
    cpu->sum_sq(cc, acc_h, w.h, s, n, 1, count);
    gpu->sum_sq(gc, acc_d, w.d, s, n, 1, count);
    gpu->copy_d2h(gc, back, acc_d, (size_t)count * sizeof(double));
    for (int k = 0; k < count; k++)
        CHECK_MSG(fabs(back[k] - acc_h[k]) <= 1e-12 * acc_h[k], "sum_sq model %d: %.17g vs %.17g",
                  k, back[k], acc_h[k]);
    cpu->clip_norm(cc, g.h, s, n, acc_h, c, count);
    gpu->clip_norm(gc, g.d, s, n, acc_d, c, count);
    snprintf(what, sizeof what, "clip_norm count %d", count);
    check_close(what, &g, 1e-6);
    cpu->clip_value(cc, g.h, s, n, c, count);
    gpu->clip_value(gc, g.d, s, n, c, count);
    snprintf(what, sizeof what, "clip_value count %d", count);
    check_close(what, &g, 0.0);
    cpu->reg_grad(cc, g.h, w.h, s, n, l1, l2, count);
    gpu->reg_grad(gc, g.d, w.d, s, n, l1, l2, count);
    snprintf(what, sizeof what, "reg_grad count %d", count);
    check_close(what, &g, 1e-6);
    cpu->reg_penalty(cc, st_h, w.h, s, n, l1, l2, 7, count);
    gpu->reg_penalty(gc, st_d, w.d, s, n, l1, l2, 7, count);
    gpu->copy_d2h(gc, st_back, st_d, sizeof st_back);
    for (int i = 0; i < 4 * count; i++)
        CHECK_MSG(fabs(st_back[i] - st_h[i]) <= 1e-12 * fmax(1.0, fabs(st_h[i])),
                  "reg_penalty stats[%d]: %.17g vs %.17g", i, st_back[i], st_h[i]);
    check_no_error("clip and regularizer ops");
    gpu->mem_free(0, acc_d);
    gpu->mem_free(0, st_d);
    buf_free(&w);
    buf_free(&g);
}

/* gelu and silu on the CPU (the reference above) against their formulas in
 * double, and their derivatives against central differences of those. */
static void test_act_formulas(void)
{
    enum { N = 601 };
    float z[N], y[N], d[N];
    for (int a = ACT_GELU; a <= ACT_SILU; a++) {
        for (int i = 0; i < N; i++) {
            z[i] = y[i] = -9.0f + 18.0f * (float)i / (float)(N - 1);
            d[i] = 1.0f;
        }
        cpu->bias_act(cc, y, 0, NULL, 0, 1, N, (act_kind)a, 1);
        cpu->act_backward(cc, d, 0, z, 0, N, (act_kind)a, 1);
        double wy = 0, wd = 0;
        for (int i = 0; i < N; i++) {
            double x = z[i], h = 1e-4;
#define F(t) (a == ACT_GELU ? 0.5 * (t) * (1.0 + erf((t) / sqrt(2.0))) : (t) / (1.0 + exp(-(t))))
            double ey = fabs(y[i] - F(x)), ed = fabs(d[i] - (F(x + h) - F(x - h)) / (2.0 * h));
#undef F
            wy = fmax(wy, ey / fmax(1.0, fabs(x)));
            wd = fmax(wd, ed);
        }
        CHECK_MSG(wy <= 2e-6, "%s: worst error %.3g against its formula in double",
                  act_names[a], wy);
        CHECK_MSG(wd <= 2e-6, "%s': worst error %.3g against central differences", act_names[a],
                  wd);
    }
}

/* ln_fwd and ln_bwd: the GPU against the CPU, and the CPU against the
 * formulas in double (backend_impl.h) with a row of another scale and
 * offset than the rest. */
static void test_layer_norm(int rows, int C, int count)
{
    size_t sX = (size_t)rows * C + 5, sp = (size_t)C + 3, sst = 2 * (size_t)rows + 1;
    buf X = buf_make(sX * (size_t)count, -2, 2), dY = buf_make(sX * (size_t)count, -1, 1);
    buf gam = buf_make(sp * (size_t)count, 0.5f, 1.5f), bet = buf_make(sp * (size_t)count, -1, 1);
    buf Y = buf_make(sX * (size_t)count, 0, 0), dX = buf_make(sX * (size_t)count, 0, 0);
    buf st = buf_make(sst * (size_t)count, 0, 0), dg = buf_make(2 * sp * (size_t)count, 0, 0);
    for (int j = 0; j < C; j++) /* row 0 of model 0: far from 0, a small spread */
        X.h[j] = 10.0f + 0.1f * X.h[j];
    gpu->copy_h2d(gc, X.d, X.h, X.n * sizeof(float));
    float eps[3] = {1e-3f, 1e-5f, 0.5f};
    cpu->ln_fwd(cc, Y.h, sX, X.h, sX, gam.h, bet.h, sp, st.h, sst, eps, rows, C, count);
    gpu->ln_fwd(gc, Y.d, sX, X.d, sX, gam.d, bet.d, sp, st.d, sst, eps, rows, C, count);
    cpu->ln_bwd(cc, dX.h, sX, dY.h, sX, X.h, sX, gam.h, sp, st.h, sst, dg.h, dg.h + sp,
                2 * sp, rows, C, count);
    gpu->ln_bwd(gc, dX.d, sX, dY.d, sX, X.d, sX, gam.d, sp, st.d, sst, dg.d, dg.d + sp, 2 * sp,
                rows, C, count);
    char what[96];
    snprintf(what, sizeof what, "ln_fwd %d x %d count %d", rows, C, count);
    check_close(what, &Y, 1e-5);
    check_close(what, &st, 1e-5);
    snprintf(what, sizeof what, "ln_bwd %d x %d count %d", rows, C, count);
    check_close(what, &dX, 1e-5);
    check_close_norm(what, &dg, 1e-5);
    /* The CPU against double. */
    double wy = 0, wdx = 0, wdg = 0;
    for (int k = 0; k < count; k++) {
        const float *x = X.h + k * sX, *dy = dY.h + k * sX, *g = gam.h + k * sp,
                    *b = bet.h + k * sp;
        for (int j = 0; j < C; j++) {
            double sg = 0, sb = 0;
            for (int r = 0; r < rows; r++) {
                const float *xr = x + (size_t)r * C;
                double m = 0, v = 0;
                for (int i = 0; i < C; i++)
                    m += xr[i];
                m /= C;
                for (int i = 0; i < C; i++)
                    v += (xr[i] - m) * (xr[i] - m);
                double inv = 1.0 / sqrt(v / C + eps[k]);
                sg += dy[(size_t)r * C + j] * (xr[j] - m) * inv;
                sb += dy[(size_t)r * C + j];
                if (j == 0)
                    for (int i = 0; i < C; i++) {
                        double xh = (xr[i] - m) * inv, a = 0, c = 0;
                        wy = fmax(wy, fabs(Y.h[k * sX + (size_t)r * C + i] - (g[i] * xh + b[i])));
                        for (int q = 0; q < C; q++) {
                            double gq = dy[(size_t)r * C + q] * g[q];
                            a += gq;
                            c += gq * (xr[q] - m) * inv;
                        }
                        double want = inv * (dy[(size_t)r * C + i] * g[i] - a / C - xh * c / C);
                        wdx = fmax(wdx, fabs(dX.h[k * sX + (size_t)r * C + i] - want) /
                                            fmax(1.0, fabs(want)));
                    }
            }
            wdg = fmax(wdg, fabs(dg.h[k * 2 * sp + j] - sg) / fmax(1.0, fabs(sg)));
            wdg = fmax(wdg, fabs(dg.h[k * 2 * sp + sp + j] - sb) / fmax(1.0, fabs(sb)));
        }
    }
    CHECK_MSG(wy <= 1e-5 && wdx <= 1e-3 && wdg <= 1e-5,
              "layer norm %d x %d: the CPU against double: y %.3g, dx %.3g, dgamma/dbeta %.3g",
              rows, C, wy, wdx, wdg);
    buf_free(&X);
    buf_free(&dY);
    buf_free(&gam);
    buf_free(&bet);
    buf_free(&Y);
    buf_free(&dX);
    buf_free(&st);
    buf_free(&dg);
}

/* attn_softmax_fwd and _bwd: the GPU against the CPU, and the CPU against
 * the masked softmax written here (keys of padding and, causal, after the
 * query take no part; a padded query's row is 0). n samples of T tokens,
 * padded before or after; tokens one copy per model or shared. */
static void test_attn_softmax(int n, int H, int T, int causal, int masked, int shared, int count)
{
    size_t sS = (size_t)H * n * T * T + 7, st = shared ? 0 : (size_t)n * T + 3;
    buf S = buf_make(sS * (size_t)count, -4, 4), dS = buf_make(sS * (size_t)count, -1, 1);
    buf tok = buf_make((shared ? 1 : (size_t)count) * ((size_t)n * T + 3), 1, 5);
    for (int k = 0; k < (shared ? 1 : count); k++)
        for (int b = 0; b < n; b++) {
            int real = 1 + (b + k) % T, pre = b % 2; /* the first sample all padding */
            for (int t = 0; t < T; t++) {
                int pad = b == 0 || (pre ? t < T - real : t >= real);
                if (pad && masked)
                    tok.h[k * st + (size_t)b * T + t] = 0.0f;
            }
        }
    gpu->copy_h2d(gc, tok.d, tok.h, tok.n * sizeof(float));
    float *S0 = malloc(S.n * sizeof(float));
    memcpy(S0, S.h, S.n * sizeof(float));
    const float *th = masked ? tok.h : NULL, *td = masked ? tok.d : NULL;
    cpu->attn_softmax_fwd(cc, S.h, sS, th, st, n, H, T, causal, count);
    gpu->attn_softmax_fwd(gc, S.d, sS, td, st, n, H, T, causal, count);
    buf dS2 = buf_make(dS.n, 0, 0);
    memcpy(dS2.h, dS.h, dS.n * sizeof(float));
    cpu->attn_softmax_bwd(cc, dS.h, sS, S.h, sS, n, H, T, count);
    gpu->attn_softmax_bwd(gc, dS.d, sS, S.d, sS, n, H, T, count);
    char what[128];
    snprintf(what, sizeof what, "attn_softmax n %d H %d T %d%s%s%s count %d", n, H, T,
             causal ? " causal" : "", masked ? " masked" : "", shared ? " shared" : "", count);
    check_close(what, &S, 1e-6);
    check_close(what, &dS, 1e-6);
    /* The CPU against its definition, in double. */
    double worst = 0;
    int rows_zero = 0, want_zero = 0;
    for (int k = 0; k < count; k++)
        for (int h = 0; h < H; h++)
            for (int b = 0; b < n; b++)
                for (int i = 0; i < T; i++) {
                    size_t o = k * sS + (((size_t)h * n + b) * T + i) * T;
                    const float *tk = th ? th + k * st + (size_t)b * T : NULL;
                    int in[64], any = !tk || tk[i] != 0.0f;
                    double mx = -INFINITY, sum = 0, dot = 0;
                    for (int j = 0; j < T; j++) {
                        in[j] = any && !(causal && j > i) && (!tk || tk[j] != 0.0f);
                        if (in[j] && S0[o + j] > mx)
                            mx = S0[o + j];
                    }
                    for (int j = 0; j < T; j++)
                        sum += in[j] ? exp(S0[o + j] - mx) : 0.0;
                    int none = 1;
                    for (int j = 0; j < T; j++) {
                        double pj = in[j] ? exp(S0[o + j] - mx) / sum : 0.0;
                        worst = fmax(worst, fabs(S.h[o + j] - pj));
                        dot += pj * dS2.h[o + j];
                        none &= S.h[o + j] == 0.0f;
                    }
                    for (int j = 0; j < T; j++) {
                        double pj = in[j] ? exp(S0[o + j] - mx) / sum : 0.0;
                        worst = fmax(worst, fabs(dS.h[o + j] - pj * (dS2.h[o + j] - dot)));
                    }
                    want_zero += !any;
                    rows_zero += none;
                }
    CHECK_MSG(worst <= 1e-6, "%s: the CPU against the masked softmax in double: %.3g", what, worst);
    CHECK_MSG(rows_zero == want_zero, "%s: %d rows all 0, %d queries padded", what, rows_zero,
              want_zero);
    free(S0);
    buf_free(&S);
    buf_free(&dS);
    buf_free(&dS2);
    buf_free(&tok);
}

/* The ops of issue 37's sequence layers, on random draws of their own: the
 * checks after them see the stream they always saw. */
static void test_sequence_ops(void)
{
    rng_state keep = rng;
    rng_seed(&rng, 37, 1);
    test_act_formulas();
    for (int c = 1; c <= 3; c += 2)
        for (int a = ACT_GELU; a <= ACT_SILU; a++) {
            test_bias_act((act_kind)a, c);
            test_act_backward((act_kind)a, c);
        }
    test_layer_norm(37, 19, 1);
    test_layer_norm(70, 64, 3);
    test_layer_norm(5, 1, 2);
    for (int c = 1; c <= 70; c = c == 3 ? 70 : c + 2)
        test_add(c);
    for (int causal = 0; causal < 2; causal++)
        for (int masked = 0; masked < 2; masked++) {
            test_attn_softmax(4, 2, 7, causal, masked, 0, 1);
            test_attn_softmax(5, 3, 6, causal, masked, masked, 3);
        }
    test_attn_softmax(40, 4, 33, 1, 1, 0, 2);
    check_no_error("sequence ops");
    rng = keep;
}

static void test_ops(void)
{
    test_copies();
    test_sequence_ops();
    for (int c = 1; c <= 3; c += 2) {
        test_load(c, 0);
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                test_gemm(ta, tb, c, 0, 0.0f);
                test_gemm(ta, tb, c, 0, 0.5f);
            }
        for (int a = ACT_LINEAR; a <= ACT_SOFTMAX; a++) {
            test_bias_act((act_kind)a, c);
            test_act_backward((act_kind)a, c);
        }
        test_bias_grad(c, 70);
        test_bias_grad(c, 2600);
        test_dropout(c);
        for (int grad = 0; grad < 2; grad++) {
            test_loss(LOSS_SCE, METRIC_ARGMAX, ACT_SOFTMAX, 0, 0, 10, c, grad);
            test_loss(LOSS_SCE, METRIC_ARGMAX, ACT_SOFTMAX, 0, 1, 70, c, grad);
            test_loss(LOSS_CCE, METRIC_ARGMAX, ACT_LINEAR, 1, 1, 10, c, grad);
            test_loss(LOSS_BCE, METRIC_BINARY, ACT_SIGMOID, 1, 0, 3, c, grad);
            test_loss(LOSS_BCE, METRIC_BINARY, ACT_SIGMOID, 0, 1, 1, c, grad);
            test_loss(LOSS_MSE, METRIC_ARGMAX, ACT_LINEAR, 0, 0, 10, c, grad);
            test_loss(LOSS_MSE, METRIC_ERRORS, ACT_LINEAR, 1, 0, 1, c, grad);
            test_loss(LOSS_MAE, METRIC_ERRORS, ACT_LINEAR, 1, 0, 4, c, grad);
            test_loss(LOSS_HUBER, METRIC_ERRORS, ACT_LINEAR, 1, 0, 40, c, grad);
        }
        test_optimizers(c);
        test_clip_reg(c, 3000);
        test_clip_reg(c, 70000);
    }
    test_load(3, 1);
    test_gemm(0, 1, 3, 1, 0.0f); /* the forward pass's shape, one shared weight matrix */
    test_gemm(1, 0, 3, 1, 1.0f);
    test_dropout(70); /* more models than one launch carries */
    check_no_error("every op");
}

/* ---- image layers against plain loops ----------------------------------------- */

/* The backend under test must have the image ops (CUDA does; the CPU
 * backend, standing in for it without a GPU, may not yet). */
static int image_ops_required;

static int have_image_ops(void)
{
    int have = gpu->im2col && gpu->col2im && gpu->maxpool_fwd && gpu->maxpool_bwd &&
               gpu->avgpool_fwd && gpu->avgpool_bwd && gpu->bn_fwd_train && gpu->bn_fwd_infer &&
               gpu->bn_bwd && gpu->seq_pool_fwd && gpu->seq_pool_bwd;
    CHECK_MSG(have || !image_ops_required, "the %s backend lacks some image op", gpu->name);
    return have;
}

static void buf_upload(const buf *b) { gpu->copy_h2d(gc, b->d, b->h, b->n * sizeof(float)); }

static void check_same_int(const char *what, const int32_t *ref, const int32_t *dev, size_t n)
{
    int32_t *g = malloc(n * sizeof *g);
    gpu->copy_d2h(gc, g, dev, n * sizeof *g);
    size_t diff = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (g[i] != ref[i] && diff++ == 0)
            first = i;
    CHECK_MSG(diff == 0, "%s: %zu of %zu indices differ; first [%zu] gpu %d cpu %d", what, diff, n,
              first, (int)g[first], (int)ref[first]);
    free(g);
}

/* One model's image shape and window (2 images each). */
typedef struct geom_case {
    int h, w, c, kh, kw, sh, sw, same;
} geom_case;

/* TensorFlow's geometry: `valid` has no padding; `same` gives ceil(h / sh)
 * outputs and pads (oh - 1) * sh + kh - h rows, the smaller half on top. */
static window_geom geom_make(const geom_case *t)
{
    window_geom g = {2, t->h, t->w, t->c, t->kh, t->kw, t->sh, t->sw, 0, 0, 0, 0, 1, 1};
    if (t->same) {
        g.oh = (t->h + t->sh - 1) / t->sh;
        g.ow = (t->w + t->sw - 1) / t->sw;
        int ph = (g.oh - 1) * t->sh + t->kh - t->h, pw = (g.ow - 1) * t->sw + t->kw - t->w;
        g.pad_top = ph > 0 ? ph / 2 : 0;
        g.pad_left = pw > 0 ? pw / 2 : 0;
    } else {
        g.oh = (t->h - t->kh) / t->sh + 1;
        g.ow = (t->w - t->kw) / t->sw + 1;
    }
    return g;
}

static size_t geom_in(const window_geom *g) { return (size_t)(g->n * g->h * g->w * g->c); }
static size_t geom_out(const window_geom *g) { return (size_t)(g->n * g->oh * g->ow * g->c); }

/* The offset of pixel (iy, ix), channel ch, of image i in one model's
 * (n, h, w, c) tensor; -1 where that is padding. */
static long px_at(const window_geom *g, int i, int iy, int ix, int ch)
{
    if (iy < 0 || iy >= g->h || ix < 0 || ix >= g->w)
        return -1;
    return (((long)i * g->h + iy) * g->w + ix) * g->c + ch;
}

/* The input pixel that window tap (ky, kx) of output (oy, ox) reads. */
static long tap_at(const window_geom *g, int i, int oy, int ox, int ky, int kx, int ch)
{
    return px_at(g, i, oy * g->sh + ky * window_dilation(g->dh) - g->pad_top,
                 ox * g->sw + kx * window_dilation(g->dw) - g->pad_left, ch);
}

/* The references below follow the contracts of backend_impl.h word for word,
 * one model at a time, sums in double. */
static void ref_im2col(float *col, const float *x, const window_geom *g)
{
    size_t q = 0;
    for (int i = 0; i < g->n; i++)
        for (int oy = 0; oy < g->oh; oy++)
            for (int ox = 0; ox < g->ow; ox++)
                for (int ky = 0; ky < g->kh; ky++)
                    for (int kx = 0; kx < g->kw; kx++)
                        for (int ch = 0; ch < g->c; ch++) {
                            long p = tap_at(g, i, oy, ox, ky, kx, ch);
                            col[q++] = p < 0 ? 0.0f : x[p];
                        }
}

static void ref_col2im(float *dx, const float *col, const window_geom *g)
{
    double *acc = calloc(geom_in(g), sizeof *acc);
    size_t q = 0;
    for (int i = 0; i < g->n; i++)
        for (int oy = 0; oy < g->oh; oy++)
            for (int ox = 0; ox < g->ow; ox++)
                for (int ky = 0; ky < g->kh; ky++)
                    for (int kx = 0; kx < g->kw; kx++)
                        for (int ch = 0; ch < g->c; ch++, q++) {
                            long p = tap_at(g, i, oy, ox, ky, kx, ch);
                            if (p >= 0)
                                acc[p] += col[q];
                        }
    for (size_t j = 0; j < geom_in(g); j++)
        dx[j] = (float)acc[j];
    free(acc);
}

/* Max pooling (avg = 0) or average pooling (avg = 1) forward. */
static void ref_pooling_fwd(float *y, int32_t *arg, const float *x, const window_geom *g, int avg)
{
    size_t o = 0;
    for (int i = 0; i < g->n; i++)
        for (int oy = 0; oy < g->oh; oy++)
            for (int ox = 0; ox < g->ow; ox++)
                for (int ch = 0; ch < g->c; ch++, o++) {
                    double sum = 0.0;
                    float best = 0.0f;
                    int at = -1, cnt = 0;
                    for (int ky = 0; ky < g->kh; ky++)
                        for (int kx = 0; kx < g->kw; kx++) {
                            long p = tap_at(g, i, oy, ox, ky, kx, ch);
                            if (p < 0)
                                continue;
                            sum += x[p];
                            cnt++;
                            if (at < 0 || x[p] > best) {
                                best = x[p];
                                at = (oy * g->sh + ky - g->pad_top) * g->w +
                                     (ox * g->sw + kx - g->pad_left);
                            }
                        }
                    if (avg) {
                        y[o] = (float)(sum / cnt);
                    } else {
                        y[o] = best;
                        arg[o] = at;
                    }
                }
}

/* Max pooling backward (arg != NULL) or average pooling backward. */
static void ref_pooling_bwd(float *dx, const float *dy, const int32_t *arg, const window_geom *g)
{
    double *acc = calloc(geom_in(g), sizeof *acc);
    size_t o = 0;
    for (int i = 0; i < g->n; i++)
        for (int oy = 0; oy < g->oh; oy++)
            for (int ox = 0; ox < g->ow; ox++)
                for (int ch = 0; ch < g->c; ch++, o++) {
                    if (arg) {
                        acc[px_at(g, i, arg[o] / g->w, arg[o] % g->w, ch)] += dy[o];
                        continue;
                    }
                    int cnt = 0;
                    for (int ky = 0; ky < g->kh; ky++)
                        for (int kx = 0; kx < g->kw; kx++)
                            cnt += tap_at(g, i, oy, ox, ky, kx, ch) >= 0;
                    for (int ky = 0; ky < g->kh; ky++)
                        for (int kx = 0; kx < g->kw; kx++) {
                            long p = tap_at(g, i, oy, ox, ky, kx, ch);
                            if (p >= 0)
                                acc[p] += (double)dy[o] / cnt;
                        }
                }
    for (size_t j = 0; j < geom_in(g); j++)
        dx[j] = (float)acc[j];
    free(acc);
}

/* Every window op on geometry t, count 2 with gaps between the models;
 * shared: one input X for both models (stride 0). The inputs of max pooling
 * take 4 values only, so windows tie often (the first largest wins), and many
 * windows are all negative (padding must not count as 0). */
static void test_windows(const geom_case *t, int shared)
{
    enum { COUNT = 2 };
    window_geom g = geom_make(t);
    size_t nx = geom_in(&g), ny = geom_out(&g), ncol = ny * (size_t)(g.kh * g.kw);
    size_t sX = shared ? 0 : nx + 5, sdX = nx + 5, sY = ny + 3, scol = ncol + 7;
    char what[160], geo[96];
    snprintf(geo, sizeof geo, "%dx%dx%d window %dx%d stride %d,%d %s (pad %d,%d)%s", t->h, t->w,
             t->c, t->kh, t->kw, t->sh, t->sw, t->same ? "same" : "valid", g.pad_top, g.pad_left,
             shared ? " shared input" : "");
    buf X = buf_make(shared ? nx : sX * COUNT, -2, 2);
    for (size_t j = 0; j < X.n; j++)
        X.h[j] = floorf(X.h[j]);
    buf_upload(&X);

    buf col = buf_make(scol * COUNT, 50, 60);
    for (int k = 0; k < COUNT; k++)
        ref_im2col(col.h + k * scol, X.h + k * sX, &g);
    gpu->im2col(gc, col.d, scol, X.d, sX, &g, COUNT);
    snprintf(what, sizeof what, "im2col %s", geo);
    check_same(what, &col);

    buf dcol = buf_make(scol * COUNT, -1, 1), dX = buf_make(sdX * COUNT, 50, 60);
    for (int k = 0; k < COUNT; k++)
        ref_col2im(dX.h + k * sdX, dcol.h + k * scol, &g);
    gpu->col2im(gc, dX.d, sdX, dcol.d, scol, &g, COUNT);
    snprintf(what, sizeof what, "col2im %s", geo);
    check_close(what, &dX, 1e-5);

    buf Y = buf_make(sY * COUNT, 50, 60);
    int32_t *arg = malloc(sY * COUNT * sizeof *arg);
    for (size_t j = 0; j < sY * COUNT; j++)
        arg[j] = -7;
    int32_t *argd = dev_alloc(sY * COUNT * sizeof *argd);
    gpu->copy_h2d(gc, argd, arg, sY * COUNT * sizeof *arg);
    for (int k = 0; k < COUNT; k++)
        ref_pooling_fwd(Y.h + k * sY, arg + k * sY, X.h + k * sX, &g, 0);
    gpu->maxpool_fwd(gc, Y.d, sY, argd, sY, X.d, sX, &g, COUNT);
    snprintf(what, sizeof what, "maxpool_fwd %s", geo);
    check_same(what, &Y);
    check_same_int(what, arg, argd, sY * COUNT);

    /* Backward from the reference's arg, so that it is tested on its own. */
    buf dY = buf_make(sY * COUNT, -1, 1), dXm = buf_make(sdX * COUNT, 50, 60);
    gpu->copy_h2d(gc, argd, arg, sY * COUNT * sizeof *arg);
    for (int k = 0; k < COUNT; k++)
        ref_pooling_bwd(dXm.h + k * sdX, dY.h + k * sY, arg + k * sY, &g);
    gpu->maxpool_bwd(gc, dXm.d, sdX, dY.d, sY, argd, sY, &g, COUNT);
    snprintf(what, sizeof what, "maxpool_bwd %s", geo);
    check_close(what, &dXm, 1e-5);

    buf Ya = buf_make(sY * COUNT, 50, 60), dXa = buf_make(sdX * COUNT, 50, 60);
    for (int k = 0; k < COUNT; k++) {
        ref_pooling_fwd(Ya.h + k * sY, NULL, X.h + k * sX, &g, 1);
        ref_pooling_bwd(dXa.h + k * sdX, dY.h + k * sY, NULL, &g);
    }
    gpu->avgpool_fwd(gc, Ya.d, sY, X.d, sX, &g, COUNT);
    gpu->avgpool_bwd(gc, dXa.d, sdX, dY.d, sY, &g, COUNT);
    snprintf(what, sizeof what, "avgpool_fwd %s", geo);
    check_close(what, &Ya, 1e-5);
    snprintf(what, sizeof what, "avgpool_bwd %s", geo);
    check_close(what, &dXa, 1e-5);
    check_no_error(what);

    gpu->mem_free(0, argd);
    free(arg);
    buf_free(&X);
    buf_free(&col);
    buf_free(&dcol);
    buf_free(&dX);
    buf_free(&Y);
    buf_free(&dY);
    buf_free(&dXm);
    buf_free(&Ya);
    buf_free(&dXa);
}

/* Batch norm of one model in training: stat, moving statistics, y. */
static void ref_bn_train(float *y, const float *x, const float *gamma, const float *beta,
                         float *mm, float *mv, float *stat, int rows, int C, double mom,
                         double eps)
{
    for (int ch = 0; ch < C; ch++) {
        double s = 0.0, v = 0.0;
        for (int r = 0; r < rows; r++)
            s += x[(size_t)r * C + ch];
        double mean = s / rows;
        for (int r = 0; r < rows; r++) {
            double d = x[(size_t)r * C + ch] - mean;
            v += d * d;
        }
        v /= rows;
        double inv = 1.0 / sqrt(v + eps);
        stat[ch] = (float)mean;
        stat[C + ch] = (float)inv;
        mm[ch] = (float)(mom * mm[ch] + (1.0 - mom) * mean);
        mv[ch] = (float)(mom * mv[ch] + (1.0 - mom) * v);
        for (int r = 0; r < rows; r++) {
            size_t o = (size_t)r * C + ch;
            y[o] = (float)(gamma[ch] * (x[o] - mean) * inv + beta[ch]);
        }
    }
}

static void ref_bn_infer(float *y, const float *x, const float *gamma, const float *beta,
                         const float *mm, const float *mv, int rows, int C, double eps)
{
    for (int r = 0; r < rows; r++)
        for (int ch = 0; ch < C; ch++) {
            size_t o = (size_t)r * C + ch;
            y[o] = (float)(gamma[ch] * (x[o] - mm[ch]) / sqrt(mv[ch] + eps) + beta[ch]);
        }
}

static void ref_bn_bwd(float *dx, const float *dy, const float *x, const float *gamma,
                       const float *stat, float *dgamma, float *dbeta, int rows, int C)
{
    for (int ch = 0; ch < C; ch++) {
        double mean = stat[ch], inv = stat[C + ch], g = gamma[ch], sd = 0.0, sdx = 0.0;
        for (int r = 0; r < rows; r++) {
            size_t o = (size_t)r * C + ch;
            sd += dy[o];
            sdx += dy[o] * (x[o] - mean) * inv;
        }
        dgamma[ch] = (float)sdx;
        dbeta[ch] = (float)sd;
        for (int r = 0; dx && r < rows; r++) {
            size_t o = (size_t)r * C + ch;
            double xh = (x[o] - mean) * inv;
            dx[o] = (float)(inv * (dy[o] * g - g * sd / rows - xh * g * sdx / rows));
        }
    }
}

/* The three batch-norm ops over rows x C, per-model momentum and epsilon,
 * gaps between the models; channels off zero mean. Each op is fed the
 * reference's inputs (moving statistics, stat), so that each is tested on
 * its own. */
static void test_bn(int rows, int C, int count)
{
    size_t sX = (size_t)rows * C + 7, sp = (size_t)C + 3, sst = 2 * (size_t)C + 5;
    size_t sg = (size_t)C + 2, nX = sX * (size_t)count, np = sp * (size_t)count;
    float mom[80], eps[80];
    for (int k = 0; k < count; k++) {
        mom[k] = 0.9f + 0.02f * (float)(k % 5);
        eps[k] = 1e-3f * (float)(k % 3 + 1);
    }
    bn_step o = {mom, eps};
    char what[96];
    buf X = buf_make(nX, -2, 3);
    for (int k = 0; k < count; k++)
        for (int r = 0; r < rows; r++)
            for (int ch = 0; ch < C; ch++)
                X.h[(size_t)k * sX + (size_t)r * C + ch] += 0.25f * (float)(ch % 9) - 1.0f;
    buf_upload(&X);
    buf gam = buf_make(np, 0.5f, 1.5f), bet = buf_make(np, -0.5f, 0.5f);
    buf mm = buf_make(np, -1, 1), mv = buf_make(np, 0.5f, 2);
    buf Y = buf_make(nX, 50, 60), st = buf_make(sst * (size_t)count, 50, 60);
    for (int k = 0; k < count; k++)
        ref_bn_train(Y.h + k * sX, X.h + k * sX, gam.h + k * sp, bet.h + k * sp, mm.h + k * sp,
                     mv.h + k * sp, st.h + k * sst, rows, C, mom[k], eps[k]);
    gpu->bn_fwd_train(gc, Y.d, sX, X.d, sX, gam.d, bet.d, mm.d, mv.d, sp, st.d, sst, rows, C, &o,
                      count);
    snprintf(what, sizeof what, "bn_fwd_train %d x %d count %d", rows, C, count);
    check_close(what, &Y, 1e-4);
    check_close(what, &st, 1e-4);
    check_close(what, &mm, 1e-4);
    check_close(what, &mv, 1e-4);
    /* Run to run, the same bits (the sums' order is the shapes'; the
     * emulation runs the second launch's blocks and threads in another
     * order). The moving statistics move again; Y and stat do not. */
    float *y1 = buf_back(&Y), *s1 = buf_back(&st);
    gpu->bn_fwd_train(gc, Y.d, sX, X.d, sX, gam.d, bet.d, mm.d, mv.d, sp, st.d, sst, rows, C, &o,
                      count);
    float *y2 = buf_back(&Y), *s2 = buf_back(&st);
    CHECK_MSG(memcmp(y1, y2, nX * sizeof(float)) == 0 &&
                  memcmp(s1, s2, sst * (size_t)count * sizeof(float)) == 0,
              "%s: a second run gave other bits", what);
    free(y1);
    free(s1);
    free(y2);
    free(s2);

    buf_upload(&mm);
    buf_upload(&mv);
    buf Yi = buf_make(nX, 50, 60);
    for (int k = 0; k < count; k++)
        ref_bn_infer(Yi.h + k * sX, X.h + k * sX, gam.h + k * sp, bet.h + k * sp, mm.h + k * sp,
                     mv.h + k * sp, rows, C, eps[k]);
    gpu->bn_fwd_infer(gc, Yi.d, sX, X.d, sX, gam.d, bet.d, mm.d, mv.d, sp, rows, C, &o, count);
    snprintf(what, sizeof what, "bn_fwd_infer %d x %d count %d", rows, C, count);
    check_close(what, &Yi, 1e-4);

    buf_upload(&st);
    buf dY = buf_make(nX, -1, 1), dX = buf_make(nX, 50, 60);
    float *dg1 = NULL, *db1 = NULL;
    for (int with_dx = 1; with_dx >= 0; with_dx--) {
        buf dg = buf_make(sg * (size_t)count, 50, 60), db = buf_make(sg * (size_t)count, 50, 60);
        for (int k = 0; k < count; k++)
            ref_bn_bwd(with_dx ? dX.h + k * sX : NULL, dY.h + k * sX, X.h + k * sX,
                       gam.h + k * sp, st.h + k * sst, dg.h + k * sg, db.h + k * sg, rows, C);
        gpu->bn_bwd(gc, with_dx ? dX.d : NULL, sX, dY.d, sX, X.d, sX, gam.d, sp, st.d, sst, dg.d,
                    db.d, sg, rows, C, count);
        snprintf(what, sizeof what, "bn_bwd %d x %d count %d%s", rows, C, count,
                 with_dx ? "" : " (no dX)");
        check_close(what, &dg, 1e-4);
        check_close(what, &db, 1e-4);
        /* With dX and without, the same sums: the same bits (each model's C
         * values; the padding after them is each buffer's own). */
        float *dg2 = buf_back(&dg), *db2 = buf_back(&db);
        if (dg1) {
            int same = 1;
            for (int k = 0; k < count; k++)
                same &= memcmp(dg1 + k * sg, dg2 + k * sg, (size_t)C * sizeof(float)) == 0 &&
                        memcmp(db1 + k * sg, db2 + k * sg, (size_t)C * sizeof(float)) == 0;
            CHECK_MSG(same, "%s: other bits than the run with dX", what);
            free(dg2);
            free(db2);
        } else {
            dg1 = dg2;
            db1 = db2;
        }
        buf_free(&dg);
        buf_free(&db);
    }
    free(dg1);
    free(db1);
    snprintf(what, sizeof what, "bn_bwd %d x %d count %d: dX", rows, C, count);
    check_close(what, &dX, 1e-4);
    check_no_error(what);
    buf_free(&X);
    buf_free(&gam);
    buf_free(&bet);
    buf_free(&mm);
    buf_free(&mv);
    buf_free(&Y);
    buf_free(&st);
    buf_free(&Yi);
    buf_free(&dY);
    buf_free(&dX);
}

/* im2col and col2im of a dilated window (taps dh, dw apart; stride 1, as
 * Keras's dilated convolutions) over n images, count 2 with gaps, own or
 * shared input: pad 0 valid, 1 same, 2 causal (all the rows' padding
 * before the image). im2col exact against the loops here; col2im, which
 * sums each pixel's taps in the CPU's order, bit for bit the CPU's. */
static void test_dilated(int n, int h, int w, int c, int kh, int kw, int dh, int dw, int pad,
                         int shared)
{
    enum { COUNT = 2 };
    int eh = (kh - 1) * dh + 1, ew = (kw - 1) * dw + 1;
    window_geom g = {n, h, w, c, kh, kw, 1, 1, 0, 0, h - eh + 1, w - ew + 1, dh, dw};
    if (pad >= 1) {
        g.oh = h, g.ow = w;
        g.pad_top = pad == 2 ? eh - 1 : (eh - 1) / 2;
        g.pad_left = (ew - 1) / 2;
    }
    size_t nx = geom_in(&g), ncol = (size_t)n * g.oh * g.ow * (size_t)(kh * kw * c);
    size_t sX = shared ? 0 : nx + 5, sdX = nx + 5, scol = ncol + 7;
    char what[160], geo[112];
    snprintf(geo, sizeof geo, "n%d %dx%dx%d window %dx%d dilation %d,%d %s%s", n, h, w, c, kh,
             kw, dh, dw, pad == 2 ? "causal" : pad ? "same" : "valid",
             shared ? " shared input" : "");
    buf X = buf_make(shared ? nx : sX * COUNT, -2, 2);
    buf col = buf_make(scol * COUNT, 50, 60);
    for (int k = 0; k < COUNT; k++)
        ref_im2col(col.h + k * scol, X.h + k * sX, &g);
    gpu->im2col(gc, col.d, scol, X.d, sX, &g, COUNT);
    snprintf(what, sizeof what, "im2col %s", geo);
    check_same(what, &col);

    buf dcol = buf_make(scol * COUNT, -1, 1), dX = buf_make(sdX * COUNT, 50, 60);
    cpu->col2im(cc, dX.h, sdX, dcol.h, scol, &g, COUNT);
    gpu->col2im(gc, dX.d, sdX, dcol.d, scol, &g, COUNT);
    snprintf(what, sizeof what, "col2im %s", geo);
    check_same(what, &dX);
    float *ref = malloc(nx * sizeof *ref);
    ref_col2im(ref, dcol.h, &g); /* the CPU's own against the loops here */
    double worst = 0.0;
    for (size_t j = 0; j < nx; j++)
        worst = fmax(worst, fabs((double)ref[j] - (double)dX.h[j]));
    CHECK_MSG(worst <= 1e-5, "%s: the CPU's col2im is %g off", what, worst);
    check_no_error(what);
    free(ref);
    buf_free(&X);
    buf_free(&col);
    buf_free(&dcol);
    buf_free(&dX);
}

/* Global pooling of sequences (seq_pool_fwd, seq_pool_bwd), max and mean,
 * count models with gaps between them, with and without a token mask
 * (shared by the models or one each): the GPU bit for bit the CPU, and the
 * CPU against the loops here (the max and its step exact; the mean in
 * double, 1e-6). The tokens pad some samples before their words and some
 * after, leave one sample all padding and one with no padding; inputs take
 * few values, so maxima tie. */
static void test_seq_pool(int n, int T, int C, int masked, int shared_tokens, int count)
{
    size_t sX = (size_t)n * T * C + 3, sY = (size_t)n * C + 5, stok = (size_t)n * T + 2;
    char what[160], geo[96];
    snprintf(geo, sizeof geo, "n%d T%d C%d count %d%s", n, T, C, count,
             !masked ? "" : shared_tokens ? " masked (shared tokens)" : " masked");
    buf X = buf_make(sX * count, -3, 3);
    for (size_t j = 0; j < X.n; j++)
        X.h[j] = floorf(X.h[j]);
    buf_upload(&X);
    size_t ntok = shared_tokens ? stok : stok * count;
    buf tok = buf_make(ntok, 0, 1);
    for (size_t j = 0; j < ntok; j++) {
        int k = (int)(j / stok), i = (int)(j % stok) / T, t = (int)(j % stok) % T;
        int len = (i + k) % (T + 1); /* the sample's words: 0 to T */
        int pre = i % 2 ? T - len : 0; /* before them, else after */
        tok.h[j] = t >= pre && t < pre + len ? (float)(1 + (t * 7 + i) % 9) : 0.0f;
    }
    buf_upload(&tok);
    const float *th = masked ? tok.h : NULL, *td = masked ? tok.d : NULL;
    size_t st = shared_tokens ? 0 : stok;
    for (int max = 0; max < 2; max++) {
        const char *op = max ? "max" : "mean";
        buf Y = buf_make(sY * count, 50, 60);
        int32_t *arg = malloc(sY * count * sizeof *arg), *argd = dev_alloc(sY * count * 4);
        for (size_t j = 0; j < sY * count; j++)
            arg[j] = -7;
        gpu->copy_h2d(gc, argd, arg, sY * count * sizeof *arg);
        cpu->seq_pool_fwd(cc, max, Y.h, sY, arg, sY, X.h, sX, th, st, n, T, C, count);
        gpu->seq_pool_fwd(gc, max, Y.d, sY, argd, sY, X.d, sX, td, st, n, T, C, count);
        snprintf(what, sizeof what, "seq_pool_fwd %s %s", op, geo);
        check_same(what, &Y);
        if (max)
            check_same_int(what, arg, argd, sY * count);
        int bad = 0;
        for (int k = 0; k < count; k++)
            for (int i = 0; i < n; i++)
                for (int ch = 0; ch < C; ch++) {
                    const float *tk = masked ? tok.h + k * st + (size_t)i * T : NULL;
                    double sum = 0.0, best = 0.0;
                    int taken = 0, at = -1;
                    for (int t = 0; t < T; t++) {
                        if (tk && tk[t] == 0.0f)
                            continue;
                        double v = X.h[k * sX + ((size_t)i * T + t) * C + ch];
                        sum += v;
                        if (taken++ == 0 || v > best)
                            best = v, at = t;
                    }
                    size_t o = k * sY + (size_t)i * C + ch;
                    double want = max ? best : taken ? sum / taken : 0.0;
                    bad += fabs(Y.h[o] - want) > 1e-6 || (max && arg[o] != at);
                }
        CHECK_MSG(bad == 0, "%s: the CPU's differs from the loops here at %d outputs", what, bad);

        buf dY = buf_make(sY * count, -1, 1), dX = buf_make(sX * count, 50, 60);
        cpu->seq_pool_bwd(cc, max, dX.h, sX, dY.h, sY, max ? arg : NULL, sY, th, st, n, T, C,
                          count);
        gpu->seq_pool_bwd(gc, max, dX.d, sX, dY.d, sY, max ? argd : NULL, sY, td, st, n, T, C,
                          count);
        snprintf(what, sizeof what, "seq_pool_bwd %s %s", op, geo);
        check_same(what, &dX);
        bad = 0;
        for (int k = 0; k < count; k++)
            for (int i = 0; i < n; i++) {
                const float *tk = masked ? tok.h + k * st + (size_t)i * T : NULL;
                int taken = 0;
                for (int t = 0; t < T; t++)
                    taken += !tk || tk[t] != 0.0f;
                for (int t = 0; t < T; t++)
                    for (int ch = 0; ch < C; ch++) {
                        size_t o = k * sY + (size_t)i * C + ch;
                        double want = max ? (arg[o] == t ? dY.h[o] : 0.0)
                                          : (!tk || tk[t] != 0.0f) ? (double)dY.h[o] / taken : 0.0;
                        bad += fabs(dX.h[k * sX + ((size_t)i * T + t) * C + ch] - want) > 1e-6;
                    }
            }
        CHECK_MSG(bad == 0, "%s: the CPU's differs from the loops here at %d elements", what,
                  bad);
        check_no_error(what);
        gpu->mem_free(0, argd);
        free(arg);
        buf_free(&Y);
        buf_free(&dY);
        buf_free(&dX);
    }
    buf_free(&X);
    buf_free(&tok);
}

/* Batch normalization over many rows, in two stages: rows in several chunks
 * (of at least 512 rows), the last one shorter; C < 32 and two channel
 * groups; and more channels than one tile of inference scales (4096). */
static void test_bn_many(void)
{
    if (!have_image_ops())
        return;
    test_bn(2600, 40, 3);
    test_bn(1100, 3, 2);
    test_bn(3, 4100, 1);
}

static void test_image_ops(void)
{
    if (!have_image_ops())
        return;
    static const geom_case geoms[] = {
        {7, 5, 3, 3, 3, 1, 1, 0}, /* valid, stride 1 */
        {7, 5, 3, 3, 3, 1, 1, 1}, /* same: one row and column each side */
        {7, 5, 3, 3, 3, 2, 2, 1}, /* same, stride 2 */
        {7, 5, 3, 2, 2, 2, 2, 1}, /* same, stride 2: padding below and right only */
        {7, 5, 3, 4, 4, 3, 3, 1}, /* same: 1 on top, 2 below */
        {7, 5, 3, 3, 2, 2, 1, 0}, /* valid, unequal window and strides */
        {7, 5, 3, 5, 5, 1, 1, 1}, /* same: 2 each side, windows wider than the image */
        {7, 5, 3, 1, 1, 2, 2, 0}, /* stride over window: pixels no window reads */
        {7, 5, 3, 7, 5, 1, 1, 0}, /* global pooling */
        {6, 6, 40, 3, 3, 2, 2, 1}, /* more channels than a warp */
    };
    for (size_t i = 0; i < sizeof geoms / sizeof geoms[0]; i++)
        test_windows(&geoms[i], 0);
    test_windows(&geoms[2], 1);
    test_windows(&geoms[8], 1);
    test_dilated(3, 11, 1, 4, 3, 1, 2, 1, 2, 0); /* a sequence: causal, same, valid */
    test_dilated(3, 11, 1, 4, 3, 1, 2, 1, 1, 1);
    test_dilated(2, 12, 1, 5, 2, 1, 4, 1, 0, 0);
    test_dilated(2, 9, 1, 40, 4, 1, 3, 1, 2, 0); /* a window wider than the sequence's padding */
    test_dilated(2, 7, 8, 3, 2, 3, 3, 2, 1, 0);  /* both axes */
    test_seq_pool(7, 6, 3, 0, 0, 2);
    test_seq_pool(7, 6, 3, 1, 0, 2);
    test_seq_pool(9, 5, 40, 1, 1, 3); /* more channels than a warp, one copy of the tokens */
    test_seq_pool(3, 1, 2, 1, 0, 1);  /* one step */
    test_bn(70, 3, 2);    /* C < 32: several rows side by side in a warp */
    test_bn(1000, 40, 2); /* two channel groups, the second partly empty */
    test_bn(35, 64, 1);
    test_bn(1, 5, 2);    /* one row: variance 0 */
    test_bn(20, 5, 70);  /* more models than one launch carries */
}

/* ---- the trainer on the GPU ------------------------------------------------- */

enum { TN = 320, TDIM = 20, TCLASSES = 4 };

static void make_data(cohort_dataset *ds, float *x, int32_t *y)
{
    memset(ds, 0, sizeof *ds);
    ds->n = TN;
    ds->dim = TDIM;
    ds->x = x;
    ds->y = y;
    ds->n_classes = TCLASSES;
    for (int i = 0; i < TN; i++) {
        float best = -1e30f;
        for (int j = 0; j < TDIM; j++) {
            float v = urand(-1, 1);
            x[i * TDIM + j] = v;
            if (j < TCLASSES && v > best) {
                best = v;
                y[i] = j;
            }
        }
    }
}

static void spec_small(model_spec *s, uint64_t seed, opt_kind opt)
{
    model_spec_defaults(s);
    snprintf(s->name, sizeof s->name, "m%llu", (unsigned long long)seed);
    s->seed = seed;
    s->batch_size = 32;
    s->epochs = 1;
    optim_defaults(&s->opt, opt); /* Keras's rho, betas, eps of this optimizer */
    s->opt.lr = opt == OPT_SGD ? 0.05f : 0.01f;
    s->opt.momentum = opt == OPT_SGD ? 0.9f : 0.0f;
    s->opt.weight_decay = opt == OPT_ADAMW ? 0.004f : 0.0f;
    s->opt.centered = opt == OPT_RMSPROP && seed % 2; /* seeds 11..13: one centered */
    /* The gradient ops through the trainer: model 12 clips each variable's
     * norm, model 13 all of them together and each value. */
    s->opt.clipnorm = seed == 12 ? 0.5f : 0.0f;
    s->opt.global_clipnorm = seed == 13 ? 1.0f : 0.0f;
    s->opt.clipvalue = seed == 13 ? 0.05f : 0.0f;
    s->n_layers = 4;
    s->layers[0] = layer_dense(32, ACT_RELU);
    s->layers[1] = layer_dropout(0.2f);
    s->layers[2] = layer_dense(16, ACT_TANH);
    s->layers[3] = layer_dense(TCLASSES, ACT_SOFTMAX);
    if (seed == 11) { /* kernel regularizers (reg_grad, reg_penalty) */
        s->layers[0].l2 = 1e-3f;
        s->layers[2].l1 = 1e-4f;
    }
}

/* The samples of make_data as 5 x 4 x 1 images, and a small CNN on them:
 * conv without a bias, batch normalization, relu, max pooling (same),
 * flatten, dropout, dense: every path of the image layers on a group. */
static const sample_shape timage = {3, 5, 4, 1};

static void spec_cnn(model_spec *s, uint64_t seed, opt_kind opt)
{
    spec_small(s, seed, opt);
    s->n_layers = 7;
    s->layers[0] = layer_conv(6, 3, 1, PAD_SAME, ACT_LINEAR, 0);
    s->layers[1] = layer_bnorm(0.9f, 1e-3f);
    s->layers[2] = layer_act(ACT_RELU);
    s->layers[3] = layer_pooling("max_pooling2d", 2, 2, PAD_SAME);
    s->layers[4] = layer_text("flatten");
    s->layers[5] = layer_dropout(0.2f);
    s->layers[6] = layer_dense(TCLASSES, ACT_SOFTMAX);
}

/* The samples of make_data as sequences of 10 steps x 2 features, and a
 * small 1-D convnet on them: a dilated causal conv1d, max pooling, a conv1d
 * same without a bias, global max pooling, dense. */
static const sample_shape tseq = {2, 10, 1, 2};

static void spec_seq(model_spec *s, uint64_t seed, opt_kind opt)
{
    spec_small(s, seed, opt);
    s->n_layers = 5;
    s->layers[0] = layer_text("{conv1d: 8, kernel_size: 3, padding: causal, dilation_rate: 2, "
                              "activation: relu}");
    s->layers[1] = layer_text("{max_pooling1d: 2}");
    s->layers[2] = layer_text("{conv1d: 6, kernel_size: 2, padding: same, use_bias: false, "
                              "activation: tanh}");
    s->layers[3] = layer_text("global_max_pooling1d");
    s->layers[4] = layer_dense(TCLASSES, ACT_SOFTMAX);
}

/* One epoch of a group of 3 on cpu:0 and on dg: the same weights to 1e-3,
 * the same history to 1e-4; planned bytes equal the GPU pool's peak. With
 * cnn 1, the models are spec_cnn's on the samples as images; 2, spec_seq's
 * on them as sequences. */
static void test_fit(device_registry *reg, cohort_device *dg, opt_kind opt, int cnn)
{
    static float x[TN * TDIM];
    static int32_t y[TN];
    cohort_dataset ds;
    make_data(&ds, x, y);
    data_view train, val;
    data_split(&ds, 0.25, &train, &val);
    model_spec s[3];
    const model_spec *sp[3];
    for (int k = 0; k < 3; k++) {
        if (cnn == 2)
            spec_seq(&s[k], 11 + (uint64_t)k, opt);
        else if (cnn)
            spec_cnn(&s[k], 11 + (uint64_t)k, opt);
        else
            spec_small(&s[k], 11 + (uint64_t)k, opt);
        sp[k] = &s[k];
    }
    sample_shape in = cnn == 2 ? tseq : cnn ? timage : shape_flat(TDIM);
    cohort_device *dc = devices_find(reg, "cpu:0");
    train_group *gcpu = NULL, *ggpu = NULL;
    cohort_error err;
    cohort_status st = group_create(sp, 3, in, TCLASSES, dc, 1, &gcpu, &err);
    CHECK_MSG(st == COHORT_OK, "cpu group: %s", err.message);
    st = group_create(sp, 3, in, TCLASSES, dg, 1, &ggpu, &err);
    CHECK_MSG(st == COHORT_OK, "gpu group: %s", err.message);
    if (!gcpu || !ggpu) {
        group_free(gcpu);
        group_free(ggpu);
        return;
    }
    /* A GPU group runs on its plugin's own table, not on the lazy one the
     * registry holds (which has no ops past those before a context). */
    CHECK_MSG(group_backend(ggpu) == (dg == dc ? cpu : gpu), "%s group on the %s table",
              dg->info.name, group_backend(ggpu)->name);
    const model_layout *L = group_layout(ggpu);
    CHECK_MSG(group_peak_bytes(ggpu) == L->total_bytes,
              "%s: planned %zu bytes, the pool's peak is %llu", dg->info.name, L->total_bytes,
              (unsigned long long)group_peak_bytes(ggpu));
    /* Beside each group's slab, on a GPU, its context's bytes (cuBLAS's
     * workspace, the reductions' scratch), from the same pool. */
    CHECK(mem_pool_in_use(dg->mem_pool) ==
          (dg == dc ? 2 * L->total_bytes : L->total_bytes + device_ctx_bytes(dg)));
    train_result rc[3], rg[3];
    memset(rc, 0, sizeof rc);
    memset(rg, 0, sizeof rg);
    for (int k = 0; k < 3; k++) {
        rc[k].history = calloc(1, sizeof(epoch_metrics));
        rg[k].history = calloc(1, sizeof(epoch_metrics));
    }
    CHECK(group_fit(gcpu, &train, &val, NULL, NULL, rc, &err) == COHORT_OK);
    CHECK(group_fit(ggpu, &train, &val, NULL, NULL, rg, &err) == COHORT_OK);
    size_t P = L->n_params;
    float *pc = malloc(P * sizeof *pc), *pg = malloc(P * sizeof *pg);
    for (int k = 0; k < 3; k++) {
        CHECK_MSG(rg[k].state == MODEL_OK && rc[k].state == MODEL_OK, "model %d: gpu %s (%s)", k,
                  model_state_str(rg[k].state), rg[k].error);
        group_get_params(gcpu, k, pc);
        group_get_params(ggpu, k, pg);
        double md = 0.0, moved = 0.0;
        for (size_t i = 0; i < P; i++) {
            double d = fabs((double)pc[i] - (double)pg[i]);
            md = d > md || isnan(d) ? d : md;
        }
        float *init = malloc(P * sizeof *init);
        model_init_params(&s[k], L, init);
        for (size_t i = 0; i < P; i++)
            moved = fmax(moved, fabs((double)pc[i] - (double)init[i]));
        free(init);
        CHECK_MSG(md <= 1e-3, "%s%s model %d: weights differ by up to %.3g after one epoch",
                  opt_name(opt), cnn == 2 ? " conv1d" : cnn ? " cnn" : "", k, md);
        CHECK_MSG(moved > 1e-2, "model %d: training did not move the weights (%.3g)", k, moved);
        const epoch_metrics *a = &rc[k].history[0], *b = &rg[k].history[0];
        CHECK_MSG(fabs(a->loss - b->loss) <= 1e-4 * fmax(1.0, a->loss), "model %d loss %.9g vs %.9g",
                  k, b->loss, a->loss);
        CHECK_MSG(fabs(a->val_loss - b->val_loss) <= 1e-4 * fmax(1.0, a->val_loss),
                  "model %d val_loss %.9g vs %.9g", k, b->val_loss, a->val_loss);
        CHECK_MSG(fabs(a->accuracy - b->accuracy) <= 2.0 / TN, "model %d accuracy %.6f vs %.6f", k,
                  b->accuracy, a->accuracy);
        free(rc[k].history);
        free(rg[k].history);
    }
    free(pc);
    free(pg);
    group_free(gcpu);
    group_free(ggpu);
    CHECK_MSG(mem_pool_in_use(dg->mem_pool) == 0 && mem_pool_in_use(dc->mem_pool) == 0,
              "%s: %llu bytes still in use after group_free", dg->info.name,
              (unsigned long long)mem_pool_in_use(dg->mem_pool));
}

/* Hard limits and both policies on a GPU pool. */
static void test_mem_pools(cohort_device *dg)
{
    model_spec s;
    spec_small(&s, 5, OPT_ADAM);
    const model_spec *sp[1] = {&s};
    model_layout L;
    cohort_error err;
    CHECK(model_layout_make(&s, shape_flat(TDIM), TCLASSES, 1, &L, &err) == COHORT_OK);
    cohort_device d = *dg;
    train_group *g = NULL;
    /* A group takes its layout's bytes and, on a GPU, its context's
     * (device_ctx_bytes: cuBLAS's workspace, the reductions' scratch). */
    const uint64_t ctx = device_ctx_bytes(dg), all = L.total_bytes + ctx;
    /* One alignment unit short: refused before anything trains. */
    CHECK(mem_pool_create("gpu:0/test", dg->be, dg->be_dev, all - 64, COHORT_MEM_GROW, &d.mem_pool,
                      &err) == COHORT_OK);
    cohort_status st = group_create(sp, 1, shape_flat(TDIM), TCLASSES, &d, 1, &g, &err);
    CHECK(st == COHORT_ERR_NOMEM && g == NULL);
    CHECK_CONTAINS(err.message, "only");
    CHECK(mem_pool_in_use(d.mem_pool) == 0);
    mem_pool_free(d.mem_pool);
    for (int policy = 0; policy < 2; policy++) {
        cohort_mem_policy pol = policy ? COHORT_MEM_PREALLOCATE : COHORT_MEM_GROW;
        CHECK(mem_pool_create("gpu:0/test", dg->be, dg->be_dev, all, pol, &d.mem_pool, &err) ==
              COHORT_OK);
        st = group_create(sp, 1, shape_flat(TDIM), TCLASSES, &d, 1, &g, &err);
        CHECK_MSG(st == COHORT_OK, "%s pool of exactly the plan: %s", policy ? "preallocate" : "grow",
                  err.message);
        CHECK(mem_pool_in_use(d.mem_pool) == all && mem_pool_peak(d.mem_pool) == all);
        if (g)
            CHECK(group_peak_bytes(g) == L.total_bytes);
        group_free(g);
        g = NULL;
        CHECK(mem_pool_in_use(d.mem_pool) == 0);
        mem_pool_free(d.mem_pool);
    }
    /* A grow pool on a GPU keeps a released block for the next request of its
     * size (cudaMalloc and cudaFree synchronize the whole device): its bytes
     * are still there, where a fresh cudaMalloc's would not be (the
     * emulation fills them with NaN). A larger request frees it for room. */
    if (dg->be->host_memory)
        return;
    mem_pool *gp = NULL;
    const size_t blk = 4096;
    CHECK(mem_pool_create("gpu:0/keep", dg->be, dg->be_dev, 3 * blk, COHORT_MEM_GROW, &gp, &err) ==
          COHORT_OK);
    if (!gp)
        return;
    float mark[4] = {1.5f, -2.0f, 3.25f, 7.0f}, back[4] = {0};
    void *a = mem_pool_alloc(gp, blk, NULL, "a", &err);
    CHECK(a != NULL);
    if (a) {
        gpu->copy_h2d(gc, a, mark, sizeof mark);
        mem_pool_release(gp, a, NULL);
        CHECK(mem_pool_in_use(gp) == 0);
        void *b = mem_pool_alloc(gp, blk, NULL, "b", &err);
        CHECK_MSG(b == a, "a grow pool on %s did not reuse a released block", dg->info.name);
        if (b) {
            gpu->copy_d2h(gc, back, b, sizeof back);
            CHECK_MSG(memcmp(back, mark, sizeof mark) == 0,
                      "the block was freed and allocated again, not kept");
            mem_pool_release(gp, b, NULL);
        }
        void *c = mem_pool_alloc(gp, 3 * blk, NULL, "c", &err);
        CHECK_MSG(c != NULL && mem_pool_in_use(gp) == 3 * blk,
                  "a kept block left no room for a larger one: %s", err.message);
        mem_pool_release(gp, c, NULL);
    }
    mem_pool_free(gp);
}

/*
 * group_free: the group's queued work may still write its slab, so the
 * context (whose ctx_free waits for that work) goes before the block goes
 * back to the pool. Here another context takes the block the moment it is
 * released and writes it (the pool's release hook); the group had a memset
 * of its whole slab queued. In the emulation's deferred mode (test_cuda_emu)
 * the memset runs only when the group's stream is waited for: released
 * first, it would run after the other context's write and wipe it.
 */
typedef struct taker {
    backend_ctx *ctx;
    float *mark;
    size_t n;
    int calls;
} taker;

static void take_released(void *arg, void *ptr, size_t bytes)
{
    taker *t = arg;
    if (t->calls++) /* the slab's only */
        return;
    t->n = bytes / sizeof(float);
    t->mark = malloc(t->n * sizeof(float));
    for (size_t i = 0; i < t->n; i++)
        t->mark[i] = (float)(i % 97) + 0.5f;
    gpu->copy_h2d(t->ctx, ptr, t->mark, t->n * sizeof(float));
}

static void test_group_free_order(cohort_device *dg)
{
    model_spec s;
    spec_small(&s, 6, OPT_ADAM);
    const model_spec *sp[1] = {&s};
    model_layout L;
    cohort_error err;
    CHECK(model_layout_make(&s, shape_flat(TDIM), TCLASSES, 1, &L, &err) == COHORT_OK);
    cohort_device d = *dg;
    CHECK(mem_pool_create("gpu:0/order", dg->be, dg->be_dev, L.total_bytes + device_ctx_bytes(dg),
                          COHORT_MEM_PREALLOCATE, &d.mem_pool, &err) == COHORT_OK);
    train_group *g = NULL;
    if (group_create(sp, 1, shape_flat(TDIM), TCLASSES, &d, 1, &g, &err) != COHORT_OK) {
        CHECK_MSG(0, "group on a slab of its size: %s", err.message);
        mem_pool_free(d.mem_pool);
        return;
    }
    void *slab = g->slab;
    taker t = {gc, NULL, 0, 0};
    g->be->memzero(g->ctx, g->slab, L.total_bytes); /* queued, not waited for */
    mem_pool_on_release(d.mem_pool, take_released, &t);
    int workspace = g->ctx_ws != NULL;
    group_free(g);
    mem_pool_on_release(d.mem_pool, NULL, NULL);
    /* The slab, then (on a GPU) the context's workspace: the hook's last
     * call wrote the workspace, which no later work touched either. */
    CHECK_MSG(t.calls == 1 + workspace, "the pool had %d releases", t.calls);
    if (t.mark) {
        float *back = malloc(t.n * sizeof(float));
        gpu->copy_d2h(gc, back, slab, t.n * sizeof(float));
        size_t wiped = 0;
        for (size_t i = 0; i < t.n; i++)
            wiped += back[i] != t.mark[i];
        CHECK_MSG(wiped == 0,
                  "group_free released the slab before its queued work ran: %zu of %zu floats "
                  "another context wrote there were overwritten",
                  wiped, t.n);
        free(back);
        free(t.mark);
    }
    mem_pool_free(d.mem_pool);
}

/* ---- the recurrent steps against the CPU's -------------------------------------- */

/* The operands of a step (backend_impl.h's rnn_step), each padded: leading
 * dimensions and model strides wider than the rows, so that an op that
 * writes past its row or model shows in the padding. */
typedef struct rnn_bufs {
    buf gates, rec, bias, c, cp, h, hp, dy, dh, dc, tok, y;
    int rows, H, count, G;
} rnn_bufs;

static rnn_bufs rnn_bufs_make(int rows, int H, int count, int G)
{
    rnn_bufs b = {.rows = rows, .H = H, .count = count, .G = G};
    size_t n = (size_t)count, R = (size_t)rows, h = (size_t)H;
    b.gates = buf_make(n * (R * (G * h + 3) + 5), -2, 2);
    b.rec = buf_make(n * (R * (3 * h + 1) + 2), -2, 2);
    b.bias = buf_make(n * (3 * h + 2), -1, 1);
    b.c = buf_make(n * (R * (h + 2) + 1), -1, 1);
    b.cp = buf_make(n * (R * (h + 2) + 1), -1, 1);
    b.h = buf_make(n * (R * (h + 4) + 3), -1, 1);
    b.hp = buf_make(n * (R * (h + 1) + 2), -1, 1);
    b.dy = buf_make(n * (R * (h + 5) + 1), -1, 1);
    b.dh = buf_make(n * (R * h + 2), -1, 1);
    b.dc = buf_make(n * (R * h + 2), -1, 1);
    b.y = buf_make(n * (R * (2 * h + 1) + 4), -1, 1);
    /* Tokens 0 (padding), 1 and 2, one per row 3 floats apart, per model. */
    b.tok = buf_make(n * R * 3, 0, 2.99f);
    for (size_t i = 0; i < b.tok.n; i++)
        b.tok.h[i] = floorf(b.tok.h[i]);
    gpu->copy_h2d(gc, b.tok.d, b.tok.h, b.tok.n * sizeof(float));
    return b;
}

static void rnn_bufs_free(rnn_bufs *b)
{
    buf *all[] = {&b->gates, &b->rec, &b->bias, &b->c, &b->cp, &b->h,
                  &b->hp,    &b->dy,  &b->dh,   &b->dc, &b->tok, &b->y};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        buf_free(all[i]);
}

/* The step over b's host copies (dev 0) or device copies (dev 1). */
static rnn_step rnn_step_of(const rnn_bufs *b, int dev, int prev, int tok, int first, int dy,
                            int y)
{
#define P(x) (dev ? b->x.d : b->x.h)
    size_t R = (size_t)b->rows, h = (size_t)b->H;
    rnn_step s = {.rows = b->rows, .H = b->H, .count = b->count};
    s.gates = P(gates), s.ld_g = b->G * b->H + 3, s.s_g = R * (size_t)s.ld_g + 5;
    s.rec = P(rec), s.ld_r = 3 * b->H + 1, s.s_r = R * (size_t)s.ld_r + 2;
    s.bias = P(bias), s.s_b = 3 * h + 2;
    s.c = P(c), s.c_prev = prev ? P(cp) : NULL, s.ld_c = b->H + 2, s.s_c = R * (h + 2) + 1;
    s.h = P(h), s.ld_h = b->H + 4, s.s_h = R * (h + 4) + 3;
    s.h_prev = prev ? P(hp) : NULL, s.ld_hp = b->H + 1, s.s_hp = R * (h + 1) + 2;
    s.dy = dy ? P(dy) : NULL, s.ld_dy = b->H + 5, s.s_dy = R * (h + 5) + 1;
    s.dh = P(dh), s.dc = P(dc), s.s_d = R * h + 2;
    s.first = first;
    /* y: the output's copy (1), 0 at padded steps (2). */
    s.y = y ? P(y) : NULL, s.ld_y = 2 * b->H + 1, s.s_y = R * (2 * h + 1) + 4, s.zero_out = y == 2;
    /* Shared tokens with one model in three (stride 0). */
    s.tok = tok ? P(tok) : NULL, s.ld_t = 3, s.s_t = b->count % 3 == 0 ? 0 : R * 3;
#undef P
    return s;
}

/* One forward step then its backward on both backends, every operand
 * compared after each (the forward's gates feed the backward as a layer's
 * do). */
static void test_rnn_step(int gru, int rows, int H, int count, int prev, int tok, int first,
                          int dy, int y)
{
    rnn_bufs b = rnn_bufs_make(rows, H, count, gru ? 3 : 4);
    rnn_step hs = rnn_step_of(&b, 0, prev, tok, first, dy, y);
    rnn_step ds = rnn_step_of(&b, 1, prev, tok, first, dy, y);
    char what[160];
    snprintf(what, sizeof what, "%s rows %d H %d count %d%s%s%s%s%s", gru ? "gru" : "lstm", rows,
             H, count, prev ? " with a state" : "", tok ? " padded" : "", first ? " first" : "",
             dy ? " dy" : "", y == 2 ? " y, zero_out" : y ? " y" : "");
    (gru ? cpu->gru_fwd : cpu->lstm_fwd)(cc, &hs);
    (gru ? gpu->gru_fwd : gpu->lstm_fwd)(gc, &ds);
    char w2[200];
    snprintf(w2, sizeof w2, "%s forward: gates", what);
    check_close(w2, &b.gates, 1e-5);
    snprintf(w2, sizeof w2, "%s forward: h", what);
    check_close(w2, &b.h, 1e-5);
    snprintf(w2, sizeof w2, "%s forward: y", what);
    check_close(w2, &b.y, 1e-5);
    snprintf(w2, sizeof w2, "%s forward: %s", what, gru ? "recurrent products" : "c");
    check_close(w2, gru ? &b.rec : &b.c, 1e-5);
    /* The backward from the forward's own state (the CPU's, on both). */
    buf_upload(&b.gates);
    buf_upload(gru ? &b.rec : &b.c);
    (gru ? cpu->gru_bwd : cpu->lstm_bwd)(cc, &hs);
    (gru ? gpu->gru_bwd : gpu->lstm_bwd)(gc, &ds);
    snprintf(w2, sizeof w2, "%s backward: d gates", what);
    check_close(w2, &b.gates, 1e-5);
    snprintf(w2, sizeof w2, "%s backward: dh", what);
    check_close(w2, &b.dh, 1e-5);
    if (gru) {
        snprintf(w2, sizeof w2, "%s backward: d recurrent products", what);
        check_close(w2, &b.rec, 1e-5);
    } else {
        snprintf(w2, sizeof w2, "%s backward: dc", what);
        check_close(w2, &b.dc, 1e-5);
    }
    check_no_error(what);
    rnn_bufs_free(&b);
}

/* The cells' tanh (expf and a short series) against tanh in double: 5e-7
 * relative from 1e-6 to 20 and below, exact at 0, +-1 where it saturates. */
static void test_rnn_tanh(void)
{
    double worst = 0.0;
    for (int i = -200000; i <= 200000; i++) {
        float x = (float)i * 1e-4f;
        if (i == 0)
            CHECK(rnn_tanh(x) == 0.0f);
        else
            worst = fmax(worst, fabs(rnn_tanh(x) - tanh((double)x)) / fabs(tanh((double)x)));
    }
    CHECK(worst < 5e-7);
    CHECK(fabsf(rnn_tanh(1e-6f) - 1e-6f) <= 1e-13f);
    CHECK(rnn_tanh(100.0f) == 1.0f && rnn_tanh(-100.0f) == -1.0f);
    CHECK(rnn_tanh(INFINITY) == 1.0f && rnn_tanh(-INFINITY) == -1.0f);
}

static void test_rnn_steps(void)
{
    test_rnn_tanh();
    for (int gru = 0; gru < 2; gru++)
        for (int count = 1; count <= 3; count += 2)
            for (int v = 0; v < 4; v++) {
                test_rnn_step(gru, 37, 19, count, v & 1, v >> 1, 0, 1, 0);
                test_rnn_step(gru, 37, 19, count, v & 1, v >> 1, 1, v & 1, 0);
                test_rnn_step(gru, 37, 19, count, v & 1, v >> 1, v & 1, 1, 1 + (v >> 1));
            }
    test_rnn_step(0, 300, 70, 2, 1, 1, 0, 1, 2); /* several blocks per model */
    test_rnn_step(1, 300, 70, 2, 1, 1, 0, 0, 1);
}

/*
 * What a group holds on a GPU is what the planner counts: its slab and its
 * context's bytes (device_ctx_bytes), both from its pool, and nothing else;
 * a preallocated pool of exactly that takes one slab, so the GPU's free
 * memory falls by exactly the pool's limit. cuBLAS's own default workspace,
 * or scratch a context allocated for itself, would show here (the
 * emulation counts every cudaMalloc, cuBLAS's included). A real GPU hands
 * out memory in 2 MiB pages: there the fall is the limit rounded up to
 * them, after a first GEMM of the shape has loaded its kernels.
 */
static void test_ctx_bytes(cohort_device *dg)
{
    if (dg->be->host_memory)
        return;
    model_spec s;
    spec_small(&s, 7, OPT_ADAM);
    const model_spec *sp[1] = {&s};
    model_layout L;
    cohort_error err;
    CHECK(model_layout_make(&s, shape_flat(TDIM), TCLASSES, 1, &L, &err) == COHORT_OK);
    uint64_t limit = (mem_pool_charge(L.total_bytes) + device_ctx_bytes(dg) + 255) / 256 * 256;
    CHECK_MSG(device_ctx_bytes(dg) >= 256, "%s: no bytes for a context (%llu)", dg->info.name,
              (unsigned long long)device_ctx_bytes(dg));
    cohort_device d = *dg;
    CHECK(mem_pool_create("gpu:0/held", dg->be, dg->be_dev, limit, COHORT_MEM_PREALLOCATE, &d.mem_pool,
                          &err) == COHORT_OK);
    gpu_info before, after;
    char why[256];
    float *warm = dev_alloc(16 * sizeof(float));
    gpu->memzero(gc, warm, 16 * sizeof(float));
    gpu->gemm(gc, 0, 1, 4, 4, 4, 1.0f, warm, 4, 0, warm, 4, 0, 0.0f, warm, 4, 0, 1);
    gpu->sync(gc);
    CHECK(cuda_plugin_query(&before, 1, why, sizeof why) == 1);
    train_group *g = NULL;
    CHECK_MSG(group_create(sp, 1, shape_flat(TDIM), TCLASSES, &d, 1, &g, &err) == COHORT_OK,
              "group on a pool of its plan and its context: %s", err.message);
    if (g) {
        CHECK(g->ctx_ws != NULL);
        /* A GEMM on the group's context: cuBLAS works in its workspace. */
        g->be->gemm(g->ctx, 0, 1, 4, 4, 4, 1.0f, g->params, 4, 0, g->params, 4, 0, 0.0f, g->grads,
                    4, 0, 1);
        g->be->sync(g->ctx);
        CHECK(cuda_plugin_query(&after, 1, why, sizeof why) == 1);
        uint64_t took = before.free_bytes - after.free_bytes, page = (uint64_t)2 << 20;
        int emulated = strstr(dg->info.model, "emulation") != NULL;
        if (!emulated)
            printf("test_cuda: a group of %llu planned bytes and %llu for its context took %llu "
                   "bytes of the GPU\n",
                   (unsigned long long)L.total_bytes, (unsigned long long)device_ctx_bytes(dg),
                   (unsigned long long)took);
        CHECK_MSG(emulated ? took == limit : took >= limit && took <= (limit + page - 1) / page * page,
                  "%s: a group of %llu planned bytes and %llu for its context took %llu bytes of "
                  "the GPU",
                  dg->info.name, (unsigned long long)L.total_bytes,
                  (unsigned long long)device_ctx_bytes(dg), (unsigned long long)took);
        const char *e = g->be->ctx_error ? g->be->ctx_error(g->ctx) : "";
        CHECK_MSG(!e[0], "a GEMM in the context's workspace: %s", e);
        group_free(g);
    }
    mem_pool_free(d.mem_pool);
    gpu->mem_free(0, warm);
}

/* ---- without a GPU ---------------------------------------------------------- */

static void test_reasons(device_registry *reg, const char *why)
{
    CHECK_MSG(why[0] != 0, "backend_cuda gave no reason");
    int gpus = 0;
    for (int i = 0; i < reg->n; i++)
        gpus += strcmp(reg->dev[i].info.kind, "cuda") == 0;
    CHECK_MSG(gpus == 0, "discovery listed %d GPUs but backend_cuda says: %s", gpus, why);
    /* The child's reason is the one this process meets. */
    char note[600];
    snprintf(note, sizeof note, "no GPU: %s", why);
    CHECK_MSG(strcmp(reg->gpu_note, note) == 0, "gpu_note \"%s\", expected \"%s\"", reg->gpu_note,
              note);
    /* The lazy table of a GPU device fails with the same reason. */
    backend_ctx *c = NULL;
    cohort_error err;
    err.message[0] = 0;
    CHECK(backend_cuda_lazy()->ctx_create(0, 1, &c, &err) == COHORT_ERR_DEVICE && c == NULL);
    CHECK_CONTAINS(err.message, why);
    CHECK(backend_cuda_lazy()->mem_alloc(0, 1024) == NULL);
    /* An explicit plugin directory is the only place looked at. */
    char path[4096], w2[512];
    setenv("COHORT_PLUGIN_DIR", "/nonexistent-cohort-dir", 1);
    CHECK(cuda_plugin_path(path, sizeof path, w2, sizeof w2) == -1);
    CHECK_CONTAINS(w2, "/nonexistent-cohort-dir/libcohort_cuda.so");
    unsetenv("COHORT_PLUGIN_DIR");
}

/* Everything against the CPU, on the device dg with the backend `gpu`. */
/* ---- token ids (an embedding): gather_rows, scatter_add_rows ------------------ */

/* n ids in [0, V) per model (stride sT, or one row for all), some repeated
 * many times (the sums the adjoint makes), as floats. */
static buf token_buf(size_t sT, int n, int V, int count)
{
    buf t = buf_make(sT ? sT * (size_t)count : (size_t)n, 0, 1);
    for (size_t i = 0; i < t.n; i++)
        t.h[i] = (float)(rng_next(&rng) % 4 == 0 ? 1 : rng_next(&rng) % (uint64_t)V);
    gpu->copy_h2d(gc, t.d, t.h, t.n * sizeof(float));
    return t;
}

static void test_tokens(int count, int shared, int n, int V, int dim)
{
    size_t sT = shared ? 0 : (size_t)n + 3, sW = (size_t)V * dim + 5, sY = (size_t)n * dim + 7;
    buf tok = token_buf(sT, n, V, count);
    buf W = buf_make(sW * (size_t)count, -1, 1), Y = buf_make(sY * (size_t)count, 7, 8);
    char what[128];
    snprintf(what, sizeof what, "gather_rows count %d n %d V %d dim %d%s", count, n, V, dim,
             shared ? " (shared ids)" : "");
    cpu->gather_rows(cc, Y.h, sY, tok.h, sT, W.h, sW, n, dim, count);
    gpu->gather_rows(gc, Y.d, sY, tok.d, sT, W.d, sW, n, dim, count);
    int wrong = 0;
    for (int k = 0; k < count; k++)
        for (int r = 0; r < n; r++)
            wrong += memcmp(Y.h + k * sY + (size_t)r * dim,
                            W.h + k * sW + (size_t)tok.h[k * sT + (size_t)r] * dim,
                            (size_t)dim * sizeof(float)) != 0;
    CHECK_MSG(wrong == 0, "%s: %d rows of the CPU's are not their table rows", what, wrong);
    check_same(what, &Y);
    /* The adjoint, over the table's padding too (it stays as it was). */
    buf G = buf_make(sW * (size_t)count, 50, 60), dY = buf_make(sY * (size_t)count, -1, 1);
    float *want = malloc(G.n * sizeof *want);
    memcpy(want, G.h, G.n * sizeof *want);
    for (int k = 0; k < count; k++) {
        float *g = want + k * sW;
        memset(g, 0, (size_t)V * dim * sizeof *g);
        for (int r = 0; r < n; r++)
            for (int j = 0; j < dim; j++)
                g[(size_t)tok.h[k * sT + (size_t)r] * dim + j] += dY.h[k * sY + (size_t)r * dim + j];
    }
    snprintf(what, sizeof what, "scatter_add_rows count %d n %d V %d dim %d%s", count, n, V, dim,
             shared ? " (shared ids)" : "");
    cpu->scatter_add_rows(cc, G.h, sW, tok.h, sT, dY.h, sY, n, V, dim, count);
    gpu->scatter_add_rows(gc, G.d, sW, tok.d, sT, dY.d, sY, n, V, dim, count);
    CHECK_MSG(memcmp(want, G.h, G.n * sizeof *want) == 0,
              "%s: the CPU's sums are not the rows added in order", what);
    check_same(what, &G);
    check_no_error(what);
    free(want);
    buf_free(&tok);
    buf_free(&W);
    buf_free(&Y);
    buf_free(&G);
    buf_free(&dY);
}

static void test_token_ops(void)
{
    for (int c = 1; c <= 3; c += 2) {
        test_tokens(c, 0, 37, 11, 9);
        test_tokens(c, 1, 37, 11, 9);
    }
    test_tokens(2, 0, 3000, 50, 70); /* many rows to a table row: long sums; the CPU's team */
    test_tokens(70, 1, 20, 5, 3);    /* more models than the GPU's groups of rows */
}

static void run_all(device_registry *reg, cohort_device *dg)
{
    cohort_error err;
    cpu = backend_cpu();
    CHECK(cpu->ctx_create(0, 1, &cc, &err) == COHORT_OK);
    cohort_status st = gpu->ctx_create(dg->be_dev, 1, &gc, &err);
    CHECK_MSG(st == COHORT_OK, "%s ctx: %s", dg->info.name, err.message);
    if (st) {
        cpu->ctx_free(cc);
        return;
    }
    /* Its scratch and cuBLAS workspace from device memory, as a group's come
     * from its pool (the emulation refuses a GEMM without one). */
    void *ws = NULL;
    if (gpu->ctx_workspace && device_ctx_bytes(dg)) {
        ws = dev_alloc((size_t)device_ctx_bytes(dg));
        gpu->ctx_workspace(gc, ws, (size_t)device_ctx_bytes(dg));
    }
    test_ops();
    test_image_ops();
    test_token_ops();
    /* The ops alone (gpu-check under compute-sanitizer, where whole epochs
     * would take minutes). */
    const char *ops_only = getenv("COHORT_TEST_CUDA_OPS_ONLY");
    for (int cnn = 0; cnn < 2 && !(ops_only && ops_only[0] == '1'); cnn++) {
        test_fit(reg, dg, OPT_ADAM, cnn);
        test_fit(reg, dg, OPT_SGD, cnn);
        test_fit(reg, dg, OPT_ADAMW, cnn);
    }
    if (!(ops_only && ops_only[0] == '1')) {
        test_fit(reg, dg, OPT_RMSPROP, 0);
        test_fit(reg, dg, OPT_ADAGRAD, 0);
        test_fit(reg, dg, OPT_NADAM, 0);
        test_fit(reg, dg, OPT_ADAM, 2); /* conv1d and the 1-D poolings */
    }
    test_mem_pools(dg);
    test_group_free_order(dg);
    test_ctx_bytes(dg);
    /* After the fits, which start from this rng's draws. */
    test_rnn_steps();
    test_bn_many();
    check_no_error("the end");
    gpu->ctx_free(gc);
    if (ws)
        gpu->mem_free(0, ws);
    cpu->ctx_free(cc);
}

int main(void)
{
    rng_seed(&rng, 2024, 6);
    /* Discovery first, as cohort does: it asks a child, this process has not
     * started CUDA yet. */
    device_registry *reg;
    cohort_error err;
    if (devices_discover(&reg, &err)) {
        fprintf(stderr, "test_cuda: %s\n", err.message);
        return 1;
    }
    char why[512] = "";
    gpu = backend_cuda(why, sizeof why);
    if (!gpu) {
        test_reasons(reg, why);
        /* No GPU: run the comparisons CPU against CPU, so that this harness
         * itself is exercised (and sanitized) wherever the suite runs. */
        gpu = backend_cpu();
        run_all(reg, devices_find(reg, "cpu:0"));
        devices_free(reg);
        /* The plugin's sources run on the emulated GPU in every test run
         * (test_cuda_emu); on a GPU machine, gpu-check asks for a GPU. */
        const char *need = getenv("COHORT_REQUIRE_GPU");
        CHECK_MSG(!need || !need[0] || strcmp(need, "0") == 0, "no GPU: %s", why);
        if (!check_failed)
            printf("test_cuda: no GPU (%s): checked the loader's reasons, and the harness CPU "
                   "against CPU\n",
                   why);
        return check_done("test_cuda");
    }
    cohort_device *dg = devices_find(reg, "gpu:0");
    CHECK_MSG(dg != NULL, "the backend started but discovery listed no gpu:0 (%s)", reg->gpu_note);
    if (!dg) {
        devices_free(reg);
        return check_done("test_cuda");
    }
    printf("test_cuda: %s, compute capability %d.%d, %llu MiB free\n", dg->info.model,
           dg->info.cc_major, dg->info.cc_minor,
           (unsigned long long)(dg->info.free_bytes >> 20));
    CHECK(!strcmp(dg->info.kind, "cuda") && dg->info.cc_major >= 1);
    CHECK(dg->info.total_bytes > 0 && dg->info.free_bytes <= dg->info.total_bytes);
    CHECK(mem_pool_limit(dg->mem_pool) == dg->info.free_bytes - gpu_headroom(dg->info.free_bytes));
    CHECK(strcmp(gpu->name, "cuda") == 0 && gpu->api_version == COHORT_BACKEND_API_VERSION);
    image_ops_required = 1;
    run_all(reg, dg);
    devices_free(reg);
    return check_done("test_cuda");
}
