/*
 * The CPU backend: GEMMs through OpenBLAS, element-wise passes as plain loops
 * that gcc vectorizes (-O3 -fno-math-errno). Device memory is host memory.
 */
#include "backend/backend_impl.h"
#include "backend/cpu/kernels.h"
#include "util/util.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct backend_ctx {
    int threads;
};

static cohort_status cpu_ctx_create(int device, int threads, backend_ctx **out, cohort_error *err)
{
    (void)device;
    backend_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory creating a CPU context");
    c->threads = threads > 0 ? threads : 1;
    *out = c;
    return COHORT_OK;
}

static void cpu_ctx_free(backend_ctx *c) { free(c); }

static void *cpu_mem_alloc(int device, size_t bytes)
{
    (void)device;
    size_t n = (bytes + 63) / 64 * 64;
    return aligned_alloc(64, n ? n : 64);
}

static void cpu_mem_free(int device, void *p)
{
    (void)device;
    free(p);
}

static void cpu_copy(backend_ctx *c, void *dst, const void *src, size_t bytes)
{
    (void)c;
    memcpy(dst, src, bytes);
}

static void cpu_memzero(backend_ctx *c, void *dst, size_t bytes)
{
    (void)c;
    memset(dst, 0, bytes);
}

static void cpu_sync(backend_ctx *c) { (void)c; }

static void cpu_load_rows(backend_ctx *c, float *dst, size_t dst_stride, const float *x,
                          int64_t dim, const int64_t *idx, size_t idx_stride, int rows, int count)
{
    (void)c;
    for (int k = 0; k < count; k++)
        for (int r = 0; r < rows; r++)
            memcpy(dst + k * dst_stride + (size_t)r * (size_t)dim,
                   x + idx[k * idx_stride + (size_t)r] * dim, (size_t)dim * sizeof(float));
}

static void cpu_load_labels(backend_ctx *c, int32_t *dst, size_t dst_stride, const int32_t *y,
                            const int64_t *idx, size_t idx_stride, int rows, int count)
{
    (void)c;
    for (int k = 0; k < count; k++)
        for (int r = 0; r < rows; r++)
            dst[k * dst_stride + (size_t)r] = y[idx[k * idx_stride + (size_t)r]];
}

static void cpu_gemm(backend_ctx *c, int ta, int tb, int M, int N, int Kd, float alpha,
                     const float *A, int lda, size_t sA, const float *B, int ldb, size_t sB,
                     float beta, float *C, int ldc, size_t sC, int count)
{
    (void)c;
    for (int k = 0; k < count; k++)
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    M, N, Kd, alpha, A + k * sA, lda, B + k * sB, ldb, beta, C + k * sC, ldc);
}

static void cpu_bias_act(backend_ctx *c, float *Y, size_t sY, const float *bias, size_t sb,
                         int rows, int cols, act_kind act, int count)
{
    (void)c;
    for (int k = 0; k < count; k++)
        kern_bias_act(Y + k * sY, bias + k * sb, rows, cols, act);
}

static void cpu_act_backward(backend_ctx *c, float *d, size_t sd, const float *Y, size_t sY,
                             size_t n, act_kind act, int count)
{
    (void)c;
    for (int k = 0; k < count; k++)
        kern_act_backward(d + k * sd, Y + k * sY, n, act);
}

static void cpu_bias_grad(backend_ctx *c, float *db, size_t sdb, const float *dZ, size_t sdZ,
                          int rows, int cols, int count)
{
    (void)c;
    for (int k = 0; k < count; k++)
        kern_bias_grad(db + k * sdb, dZ + k * sdZ, rows, cols);
}

static void cpu_dropout_fwd(backend_ctx *c, float *Y, const float *X, float *mask, size_t s,
                            size_t n, const float *rate, const uint64_t *key, uint64_t counter0,
                            int count)
{
    (void)c;
    for (int k = 0; k < count; k++)
        kern_dropout_fwd(Y + k * s, X + k * s, mask + k * s, n, rate[k], key[k], counter0);
}

static void cpu_mul(backend_ctx *c, float *d, size_t sd, const float *mask, size_t sm, size_t n,
                    int count)
{
    (void)c;
    for (int k = 0; k < count; k++) {
        float *dk = d + k * sd;
        const float *mk = mask + k * sm;
        for (size_t i = 0; i < n; i++)
            dk[i] *= mk[i];
    }
}

static void cpu_copyf(backend_ctx *c, float *dst, const float *src, size_t s, size_t n, int count)
{
    (void)c;
    for (int k = 0; k < count; k++)
        memcpy(dst + k * s, src + k * s, n * sizeof(float));
}

static void cpu_softmax_xent(backend_ctx *c, float *Z, size_t sZ, const int32_t *y, size_t sy,
                             float *dZ, size_t sdZ, double *stats, int rows, int cols,
                             float grad_scale, int count)
{
    (void)c;
    for (int k = 0; k < count; k++)
        kern_softmax_xent(Z + k * sZ, y + k * sy, dZ ? dZ + k * sdZ : NULL, stats + 4 * k, rows,
                          cols, grad_scale);
}

static void cpu_mse(backend_ctx *c, const float *Y, size_t sY, const int32_t *y, size_t sy,
                    float *dY, size_t sdY, double *stats, int rows, int cols, float grad_scale,
                    int count)
{
    (void)c;
    for (int k = 0; k < count; k++)
        kern_mse(Y + k * sY, y + k * sy, dY ? dY + k * sdY : NULL, stats + 4 * k, rows, cols,
                 grad_scale);
}

static void cpu_sgd(backend_ctx *c, float *w, const float *g, float *v, size_t s, size_t n,
                    const optim_step *o, int count)
{
    (void)c;
    for (int k = 0; k < count; k++) {
        if (!o->active[k])
            continue;
        kern_sgd(w + k * s, g + k * s, v ? v + k * s : NULL, n, o->lr[k], o->momentum[k],
                 o->nesterov[k]);
    }
}

static void cpu_adam(backend_ctx *c, float *w, const float *g, float *m, float *v, size_t s,
                     size_t n, const optim_step *o, int count)
{
    (void)c;
    for (int k = 0; k < count; k++) {
        if (!o->active[k])
            continue;
        kern_adam(w + k * s, g + k * s, m + k * s, v + k * s, n, o->lr[k], o->beta1[k],
                  o->beta2[k], o->eps[k], o->weight_decay[k], o->t);
    }
}

static const backend_ops cpu_ops = {
    .name = "cpu",
    .api_version = COHORT_BACKEND_API_VERSION,
    .ctx_create = cpu_ctx_create,
    .ctx_free = cpu_ctx_free,
    .mem_alloc = cpu_mem_alloc,
    .mem_free = cpu_mem_free,
    .copy_h2d = cpu_copy,
    .copy_d2h = cpu_copy,
    .memzero = cpu_memzero,
    .sync = cpu_sync,
    .load_rows = cpu_load_rows,
    .load_labels = cpu_load_labels,
    .gemm = cpu_gemm,
    .bias_act = cpu_bias_act,
    .act_backward = cpu_act_backward,
    .bias_grad = cpu_bias_grad,
    .dropout_fwd = cpu_dropout_fwd,
    .mul = cpu_mul,
    .copy = cpu_copyf,
    .softmax_xent = cpu_softmax_xent,
    .mse = cpu_mse,
    .sgd = cpu_sgd,
    .adam = cpu_adam,
};

const backend_ops *backend_cpu(void) { return &cpu_ops; }
