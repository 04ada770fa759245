/*
 * The CUDA backend, built as the plugin libcohort_cuda.so: each context owns
 * a non-blocking stream and a cuBLAS handle; memory comes from cudaMalloc;
 * batches are gathered on the host into pinned staging memory and sent in one
 * asynchronous copy; GEMMs go to cuBLAS, everything else to kernels.cu.
 * cuBLAS is loaded with dlopen when the backend starts, so discovery's query
 * never pays for loading it. Nothing in the step path synchronizes the host.
 */
#include "backend/cuda/cuda_plugin.h"
#include "backend/cuda/kernels_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT extern "C" __attribute__((visibility("default")))

#ifndef COHORT_CUDA_LIBDIR
#define COHORT_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif
#define STR2(x) #x
#define STR(x) STR2(x)

/* Host buffers a context stages batches through: a ring, so that filling
 * one never waits for the copy of the one before. */
#define STAGES 4

/* Device bytes a context's reductions keep their partial sums in: 64
 * chunks of 4096 columns of one model's bias gradient. */
#define REDUCE_SCRATCH CUDA_REDUCE_SCRATCH

typedef struct stage {
    void *host;
    size_t cap;
    int pinned;        /* cudaMallocHost; else malloc, copied synchronously */
    int pending;       /* `done` was recorded after a copy from it */
    cudaEvent_t done;
} stage;

struct backend_ctx {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    stage ring[STAGES];
    int next;
    /* Device bytes a batch of byte images (x8) lands in before k_bytes_to_float
     * makes them floats: a quarter of what the floats would take over the bus,
     * and the host copies rows instead of converting them. The context's own,
     * as cuBLAS's workspace is: a batch's bytes, not counted in the pool. */
    uint8_t *bytes;
    size_t bytes_cap;
    /* Partial sums of the two-stage reductions (bias_grad, sum_sq,
     * reg_penalty), REDUCE_SCRATCH bytes of the block ctx_workspace gave
     * (the pool's); NULL: they run in one stage. */
    void *scratch;
    char error[512]; /* the first error an op met */
};

namespace {

/* ---- cuBLAS through dlopen ---------------------------------------------- */

struct cublas_api {
    void *lib;
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&cublasSetWorkspace_v2) set_workspace;
    decltype(&cublasSgemm_v2) sgemm;
    decltype(&cublasSgemmStridedBatched) sgemm_strided;
    decltype(&cublasGetStatusString) status_string;
};

cublas_api blas;

void say(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void say(char *why, size_t n, const char *fmt, ...)
{
    if (!why || !n)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
}

template <typename F> bool blas_sym(F &f, const char *name, char *why, size_t n)
{
    f = reinterpret_cast<F>(dlsym(blas.lib, name));
    if (!f)
        say(why, n, "cuBLAS has no %s: %s", name, dlerror());
    return f != nullptr;
}

bool blas_load(char *why, size_t n)
{
    if (blas.lib)
        return true;
    const char *names[] = {"libcublas.so." STR(CUBLAS_VER_MAJOR),
                           COHORT_CUDA_LIBDIR "/libcublas.so." STR(CUBLAS_VER_MAJOR),
                           "/usr/local/cuda/lib64/libcublas.so." STR(CUBLAS_VER_MAJOR)};
    char first[256] = "";
    for (const char *name : names) {
        blas.lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
        if (blas.lib)
            break;
        if (!first[0])
            snprintf(first, sizeof first, "%s", dlerror());
    }
    if (!blas.lib) {
        say(why, n,
            "libcublas.so.%d not found (%s): install cuBLAS %d or put its directory on "
            "LD_LIBRARY_PATH",
            CUBLAS_VER_MAJOR, first, CUBLAS_VER_MAJOR);
        return false;
    }
    bool ok = blas_sym(blas.create, "cublasCreate_v2", why, n) &&
              blas_sym(blas.destroy, "cublasDestroy_v2", why, n) &&
              blas_sym(blas.set_stream, "cublasSetStream_v2", why, n) &&
              blas_sym(blas.set_math_mode, "cublasSetMathMode", why, n) &&
              blas_sym(blas.set_workspace, "cublasSetWorkspace_v2", why, n) &&
              blas_sym(blas.sgemm, "cublasSgemm_v2", why, n) &&
              blas_sym(blas.sgemm_strided, "cublasSgemmStridedBatched", why, n) &&
              blas_sym(blas.status_string, "cublasGetStatusString", why, n);
    if (!ok) {
        dlclose(blas.lib);
        blas.lib = nullptr;
    }
    return ok;
}

/* ---- errors -------------------------------------------------------------- */

cohort_status fail(cohort_error *err, cohort_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
cohort_status fail(cohort_error *err, cohort_status st, const char *fmt, ...)
{
    if (err) {
        err->status = st;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* Keep the first error of ctx; clear CUDA's last-error slot so that it is
 * not reported again by the next launch. */
void note(backend_ctx *c, const char *op, cudaError_t e)
{
    if (e == cudaSuccess)
        return;
    (void)cudaGetLastError();
    if (c && !c->error[0])
        snprintf(c->error, sizeof c->error, "gpu:%d: %s: %s (%s)", c->device, op,
                 cudaGetErrorString(e), cudaGetErrorName(e));
}

void note_blas(backend_ctx *c, const char *op, cublasStatus_t s)
{
    if (s == CUBLAS_STATUS_SUCCESS)
        return;
    if (c && !c->error[0])
        snprintf(c->error, sizeof c->error, "gpu:%d: %s: cuBLAS: %s", c->device, op,
                 blas.status_string(s));
}

/* Make dev the calling thread's current device (a thread-local setting). */
cudaError_t use_device(int dev)
{
    int cur = -1;
    if (cudaGetDevice(&cur) == cudaSuccess && cur == dev)
        return cudaSuccess;
    return cudaSetDevice(dev);
}

/* The ctx's device for the calling thread: contexts may move between
 * threads, and a launch must go to the device its stream belongs to. */
void on(backend_ctx *c) { note(c, "select the device", use_device(c->device)); }

/* ---- contexts and memory ---------------------------------------------------- */

void ctx_release(backend_ctx *c)
{
    if (c->stream)
        cudaStreamSynchronize(c->stream);
    for (int i = 0; i < STAGES; i++) {
        stage *s = &c->ring[i];
        if (s->host) {
            if (s->pinned)
                cudaFreeHost(s->host);
            else
                free(s->host);
        }
        if (s->done)
            cudaEventDestroy(s->done);
    }
    if (c->bytes)
        cudaFree(c->bytes);
    if (c->blas)
        blas.destroy(c->blas);
    if (c->stream)
        cudaStreamDestroy(c->stream);
    (void)cudaGetLastError();
    free(c);
}

cohort_status cu_ctx_create(int device, int threads, backend_ctx **out, cohort_error *err)
{
    (void)threads;
    *out = nullptr;
    backend_ctx *c = static_cast<backend_ctx *>(calloc(1, sizeof *c));
    if (!c)
        return fail(err, COHORT_ERR_NOMEM, "gpu:%d: out of host memory creating a context",
                    device);
    c->device = device;
    cudaError_t e = use_device(device);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        ctx_release(c);
        return fail(err, COHORT_ERR_DEVICE, "gpu:%d: cannot start a CUDA stream: %s", device,
                    cudaGetErrorString(e));
    }
    cublasStatus_t s = blas.create(&c->blas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        c->blas = nullptr;
        ctx_release(c);
        return fail(err, COHORT_ERR_DEVICE, "gpu:%d: cuBLAS did not start: %s", device,
                    blas.status_string(s));
    }
    /* Full float32 GEMMs (no TF32), so results agree with the CPU's. */
    s = blas.set_stream(c->blas, c->stream);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = blas.set_math_mode(c->blas, CUBLAS_DEFAULT_MATH);
    if (s != CUBLAS_STATUS_SUCCESS) {
        ctx_release(c);
        return fail(err, COHORT_ERR_DEVICE, "gpu:%d: cuBLAS setup failed: %s", device,
                    blas.status_string(s));
    }
    *out = c;
    return COHORT_OK;
}

/*
 * The pool's block for the context's own device memory (gpu_ctx_bytes):
 * the reductions' partial sums first where it holds twice their scratch,
 * the rest cuBLAS's workspace, so that cuBLAS allocates nothing of its own
 * (cublasSetStream would give it back its own: the stream is set before).
 * cuBLAS wants the workspace 256-byte aligned, a pool block is 64-byte.
 */
void cu_ctx_workspace(backend_ctx *c, void *dev, size_t bytes)
{
    on(c);
    uintptr_t p = (uintptr_t)dev, a = (p + 255) / 256 * 256;
    if (!dev || bytes < a - p + 256)
        return;
    char *ws = reinterpret_cast<char *>(a);
    bytes -= a - p;
    if (bytes >= 2 * REDUCE_SCRATCH) {
        c->scratch = ws;
        ws += REDUCE_SCRATCH;
        bytes -= REDUCE_SCRATCH;
    }
    cublasStatus_t s = blas.set_workspace(c->blas, ws, bytes / 256 * 256);
    note_blas(c, "cuBLAS workspace", s);
}

void cu_ctx_free(backend_ctx *c)
{
    if (c) {
        use_device(c->device);
        ctx_release(c);
    }
}

void *cu_mem_alloc(int device, size_t bytes)
{
    void *p = nullptr;
    if (use_device(device) != cudaSuccess || cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        return nullptr;
    }
    return p; /* cudaMalloc aligns to at least 256 bytes */
}

void cu_mem_free(int device, void *p)
{
    if (!p)
        return;
    use_device(device);
    cudaFree(p);
    (void)cudaGetLastError();
}

void cu_copy_h2d(backend_ctx *c, void *dst, const void *src, size_t bytes)
{
    on(c);
    if (!bytes)
        return;
    note(c, "copy to the device", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                                  c->stream));
    /* The caller may reuse src at once. */
    note(c, "copy to the device", cudaStreamSynchronize(c->stream));
}

void cu_copy_d2h(backend_ctx *c, void *dst, const void *src, size_t bytes)
{
    on(c);
    if (!bytes)
        return;
    note(c, "copy from the device",
         cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    note(c, "copy from the device", cudaStreamSynchronize(c->stream));
    /* After any error, what comes back is NaN: the trainer stops the model. */
    if (c->error[0])
        memset(dst, 0xff, bytes);
}

void cu_memzero(backend_ctx *c, void *dst, size_t bytes)
{
    on(c);
    if (bytes)
        note(c, "memset", cudaMemsetAsync(dst, 0, bytes, c->stream));
}

void cu_sync(backend_ctx *c)
{
    on(c);
    note(c, "synchronize", cudaStreamSynchronize(c->stream));
}

/* ---- staging ---------------------------------------------------------------- */

/* A host buffer of at least `bytes` that no copy still reads; NULL (and
 * the error noted) when the host is out of memory. */
stage *stage_take(backend_ctx *c, size_t bytes)
{
    stage *s = &c->ring[c->next];
    c->next = (c->next + 1) % STAGES;
    if (s->pending) {
        note(c, "staging", cudaEventSynchronize(s->done));
        s->pending = 0;
    }
    if (!s->done)
        note(c, "staging", cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming));
    if (s->cap < bytes) {
        if (s->host) {
            if (s->pinned)
                cudaFreeHost(s->host);
            else
                free(s->host);
        }
        size_t cap = s->cap * 2 > bytes ? s->cap * 2 : bytes;
        if (cap < 65536)
            cap = 65536;
        s->host = nullptr;
        s->cap = 0;
        s->pinned = cudaMallocHost(&s->host, cap) == cudaSuccess;
        if (!s->pinned) {
            (void)cudaGetLastError();
            s->host = malloc(cap);
        }
        if (!s->host) {
            if (!c->error[0])
                snprintf(c->error, sizeof c->error,
                         "gpu:%d: out of host memory staging a batch of %zu bytes", c->device,
                         bytes);
            return nullptr;
        }
        s->cap = cap;
    }
    return s;
}

void stage_done(backend_ctx *c, stage *s)
{
    if (s->pinned) {
        note(c, "staging", cudaEventRecord(s->done, c->stream));
        s->pending = 1;
    } else {
        note(c, "staging", cudaStreamSynchronize(c->stream));
    }
}

/* Send `count` blocks of `block` bytes from host h to dst + k * dpitch; with
 * shared, every block comes from the one at h. */
void send_blocks(backend_ctx *c, void *dst, size_t dpitch, const char *h, size_t block, int count,
                 int shared)
{
    char *d = static_cast<char *>(dst);
    if (count == 1 || shared || dpitch > (size_t)INT_MAX) {
        for (int k = 0; k < count; k++)
            note(c, "load batch",
                 cudaMemcpyAsync(d + k * dpitch, h + (shared ? 0 : k * block), block,
                                 cudaMemcpyHostToDevice, c->stream));
        return;
    }
    note(c, "load batch", cudaMemcpy2DAsync(d, dpitch, h, block, block, (size_t)count,
                                            cudaMemcpyHostToDevice, c->stream));
}

/* The context's device bytes, at least n of them; NULL (and the error
 * noted) when the device has no more. */
uint8_t *device_bytes(backend_ctx *c, size_t n)
{
    if (c->bytes_cap >= n)
        return c->bytes;
    if (c->bytes) {
        note(c, "staging", cudaStreamSynchronize(c->stream)); /* no launch still reads it */
        cudaFree(c->bytes);
    }
    c->bytes = nullptr;
    c->bytes_cap = 0;
    void *p = nullptr;
    if (cudaMalloc(&p, n) != cudaSuccess) {
        (void)cudaGetLastError();
        if (!c->error[0])
            snprintf(c->error, sizeof c->error,
                     "gpu:%d: out of device memory staging a batch of %zu bytes", c->device, n);
        return nullptr;
    }
    c->bytes = static_cast<uint8_t *>(p);
    c->bytes_cap = n;
    return c->bytes;
}

/* Rows of bytes gathered on the host, sent as bytes, made floats on the
 * device: k_bytes_to_float divides as host_row_of_bytes does. */
void load_byte_rows(backend_ctx *c, float *dst, size_t dst_stride, const uint8_t *x8,
                    int64_t dim, const int64_t *idx, size_t idx_stride, int rows, int count)
{
    size_t block = (size_t)rows * (size_t)dim;
    int shared = idx_stride == 0 && count > 1, gathers = shared ? 1 : count;
    size_t bytes = block * (size_t)gathers;
    uint8_t *d = device_bytes(c, bytes);
    stage *s = d ? stage_take(c, bytes) : nullptr;
    if (!s)
        return;
    uint8_t *h = static_cast<uint8_t *>(s->host);
    for (int k = 0; k < gathers; k++)
        for (int r = 0; r < rows; r++)
            memcpy(h + (size_t)k * block + (size_t)r * (size_t)dim,
                   x8 + idx[k * idx_stride + (size_t)r] * dim, (size_t)dim);
    note(c, "load batch", cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, c->stream));
    stage_done(c, s);
    note(c, "load batch",
         cu_bytes_to_float(c->stream, dst, dst_stride, d, shared ? 0 : block, block, count));
}

void cu_load_rows(backend_ctx *c, float *dst, size_t dst_stride, const float *x,
                  const uint8_t *x8, int64_t dim, const int64_t *idx, size_t idx_stride, int rows,
                  int count)
{
    on(c);
    if (rows <= 0 || count <= 0 || dim <= 0)
        return;
    if (!x) {
        load_byte_rows(c, dst, dst_stride, x8, dim, idx, idx_stride, rows, count);
        return;
    }
    size_t row = (size_t)dim * sizeof(float), block = (size_t)rows * row;
    int shared = idx_stride == 0 && count > 1, gathers = shared ? 1 : count;
    stage *s = stage_take(c, block * (size_t)gathers);
    if (!s)
        return;
    char *h = static_cast<char *>(s->host);
    for (int k = 0; k < gathers; k++)
        for (int r = 0; r < rows; r++) {
            char *d = h + (size_t)k * block + (size_t)r * row;
            memcpy(d, x + idx[k * idx_stride + (size_t)r] * dim, row);
        }
    send_blocks(c, dst, dst_stride * sizeof(float), h, block, count, shared);
    stage_done(c, s);
}

void cu_load_labels(backend_ctx *c, int32_t *dst, size_t dst_stride, const int32_t *y,
                    const int64_t *idx, size_t idx_stride, int rows, int count)
{
    on(c);
    if (rows <= 0 || count <= 0)
        return;
    size_t block = (size_t)rows * sizeof(int32_t);
    int shared = idx_stride == 0 && count > 1, gathers = shared ? 1 : count;
    stage *s = stage_take(c, block * (size_t)gathers);
    if (!s)
        return;
    int32_t *h = static_cast<int32_t *>(s->host);
    for (int k = 0; k < gathers; k++)
        for (int r = 0; r < rows; r++)
            h[(size_t)k * (size_t)rows + (size_t)r] = y[idx[k * idx_stride + (size_t)r]];
    send_blocks(c, dst, dst_stride * sizeof(int32_t), reinterpret_cast<const char *>(h), block,
                count, shared);
    stage_done(c, s);
}

/* ---- compute ---------------------------------------------------------------- */

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the same
 * call with the operands swapped and M, N exchanged. */
void cu_gemm(backend_ctx *c, int ta, int tb, int M, int N, int Kd, float alpha, const float *A,
             int lda, size_t sA, const float *B, int ldb, size_t sB, float beta, float *C, int ldc,
             size_t sC, int count)
{
    on(c);
    if (M <= 0 || N <= 0 || count <= 0)
        return;
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t s;
    if (count == 1)
        s = blas.sgemm(c->blas, opb, opa, N, M, Kd, &alpha, B, ldb, A, lda, &beta, C, ldc);
    else
        s = blas.sgemm_strided(c->blas, opb, opa, N, M, Kd, &alpha, B, ldb, (long long)sB, A, lda,
                               (long long)sA, &beta, C, ldc, (long long)sC, count);
    note_blas(c, "gemm", s);
}

void cu_bias_act_op(backend_ctx *c, float *Y, size_t sY, const float *bias, size_t sb, int rows,
                    int cols, act_kind act, int count)
{
    on(c);
    note(c, "bias_act", cu_bias_act(c->stream, Y, sY, bias, sb, rows, cols, (int)act, count));
}

void cu_act_backward_op(backend_ctx *c, float *d, size_t sd, const float *Y, size_t sY, size_t n,
                        act_kind act, int count)
{
    on(c);
    note(c, "act_backward", cu_act_backward(c->stream, d, sd, Y, sY, n, (int)act, count));
}

void cu_bias_grad_op(backend_ctx *c, float *db, size_t sdb, const float *dZ, size_t sdZ, int rows,
                     int cols, int count)
{
    on(c);
    note(c, "bias_grad",
         cu_bias_grad(c->stream, db, sdb, dZ, sdZ, rows, cols, count, c->scratch, REDUCE_SCRATCH));
}

void cu_dropout_fwd_op(backend_ctx *c, float *Y, const float *X, float *mask, size_t s, size_t n,
                       const float *rate, const uint64_t *key, uint64_t counter0, int count)
{
    on(c);
    for (int k0 = 0; k0 < count; k0 += CU_CHUNK) {
        int m = count - k0 < CU_CHUNK ? count - k0 : CU_CHUNK;
        cu_dropout_args a;
        memset(&a, 0, sizeof a);
        for (int k = 0; k < m; k++) {
            a.rate[k] = rate[k0 + k];
            a.keep[k] = 1.0f / (1.0f - rate[k0 + k]); /* as kern_dropout_fwd */
            a.key[k] = key[k0 + k];
        }
        size_t off = (size_t)k0 * s;
        note(c, "dropout", cu_dropout_fwd(c->stream, Y + off, X + off, mask + off, s, n, &a,
                                          counter0, m));
    }
}

void cu_mul_op(backend_ctx *c, float *d, size_t sd, const float *mask, size_t sm, size_t n,
               int count)
{
    on(c);
    note(c, "mul", cu_mul(c->stream, d, sd, mask, sm, n, count));
}

void cu_copy_op(backend_ctx *c, float *dst, const float *src, size_t s, size_t n, int count)
{
    on(c);
    note(c, "copy", cu_copy(c->stream, dst, src, s, n, count));
}

void cu_gather_rows_op(backend_ctx *c, float *Y, size_t sY, const float *tok, size_t sT,
                       const float *W, size_t sW, int n, int dim, int count)
{
    on(c);
    note(c, "gather_rows", cu_gather_rows(c->stream, Y, sY, tok, sT, W, sW, n, dim, count));
}

void cu_scatter_add_rows_op(backend_ctx *c, float *G, size_t sG, const float *tok, size_t sT,
                            const float *dY, size_t sdY, int n, int V, int dim, int count)
{
    on(c);
    note(c, "scatter_add_rows",
         cu_scatter_add_rows(c->stream, G, sG, tok, sT, dY, sdY, n, V, dim, count));
}

void cu_add_op(backend_ctx *c, float *Y, size_t sY, const float *A, size_t sA, const float *B,
               size_t sB, size_t n, int count)
{
    on(c);
    note(c, "add", cu_add(c->stream, Y, sY, A, sA, B, sB, n, count));
}

void cu_loss_op(backend_ctx *c, const loss_step *o, float *Z, size_t sZ, const int32_t *y,
                size_t sy, const float *t, size_t st, float *dZ, size_t sdZ, double *stats,
                int rows, int cols, float grad_scale, int count)
{
    on(c);
    for (int k0 = 0; k0 < count; k0 += CU_CHUNK) {
        int m = count - k0 < CU_CHUNK ? count - k0 : CU_CHUNK;
        cu_loss_args a;
        memset(&a, 0, sizeof a);
        a.kind = o->kind;
        a.out_act = o->out_act;
        a.metric = o->metric;
        a.class_weight = o->class_weight ? o->class_weight + (size_t)k0 * (size_t)o->n_cw : nullptr;
        a.n_cw = o->n_cw;
        for (int k = 0; k < m; k++) {
            a.smoothing[k] = o->smoothing[k0 + k];
            a.delta[k] = o->delta[k0 + k];
        }
        note(c, "loss",
             cu_loss(c->stream, &a, Z + (size_t)k0 * sZ, sZ, y ? y + (size_t)k0 * sy : nullptr, sy,
                     t ? t + (size_t)k0 * st : nullptr, st, dZ ? dZ + (size_t)k0 * sdZ : nullptr,
                     sdZ, stats + STATS_PER_MODEL * (size_t)k0, rows, cols, grad_scale, m));
    }
}

void cu_optimize_op(backend_ctx *c, opt_kind kind, float *w, const float *g, float *s1,
                    float *s2, size_t s, size_t n, const optim_step *o, int count)
{
    on(c);
    for (int k0 = 0; k0 < count; k0 += CU_CHUNK) {
        int m = count - k0 < CU_CHUNK ? count - k0 : CU_CHUNK;
        cu_optim_args a;
        memset(&a, 0, sizeof a);
        for (int k = 0; k < m; k++) {
            a.sc[k] = o->sc[k0 + k];
            a.active[k] = o->active[k0 + k];
        }
        size_t off = (size_t)k0 * s;
        note(c, "optimize",
             cu_optimize(c->stream, kind, w + off, g + off, s1 ? s1 + off : nullptr,
                         s2 ? s2 + off : nullptr, s, n, &a, m));
    }
}

/* Models k0 .. k0 + m - 1 of the host settings a and b (b may be NULL). */
cu_pair_args pair_args(const float *a, const float *b, int k0, int m)
{
    cu_pair_args p;
    memset(&p, 0, sizeof p);
    for (int k = 0; k < m; k++) {
        p.a[k] = a[k0 + k];
        p.b[k] = b ? b[k0 + k] : 0.0f;
    }
    return p;
}

void cu_sum_sq_op(backend_ctx *c, double *acc, const float *x, size_t s, size_t n, int add,
                  int count)
{
    on(c);
    for (int k0 = 0; k0 < count; k0 += CU_CHUNK) {
        int m = count - k0 < CU_CHUNK ? count - k0 : CU_CHUNK;
        note(c, "sum_sq", cu_sum_sq(c->stream, acc + k0, x + (size_t)k0 * s, s, n, add, m,
                                    c->scratch, REDUCE_SCRATCH));
    }
}

void cu_clip_norm_op(backend_ctx *c, float *x, size_t s, size_t n, const double *acc,
                     const float *cn, int count)
{
    on(c);
    for (int k0 = 0; k0 < count; k0 += CU_CHUNK) {
        int m = count - k0 < CU_CHUNK ? count - k0 : CU_CHUNK;
        cu_pair_args a = pair_args(cn, nullptr, k0, m);
        note(c, "clip_norm", cu_clip_norm(c->stream, x + (size_t)k0 * s, s, n, acc + k0, &a, m));
    }
}

void cu_clip_value_op(backend_ctx *c, float *x, size_t s, size_t n, const float *cv, int count)
{
    on(c);
    for (int k0 = 0; k0 < count; k0 += CU_CHUNK) {
        int m = count - k0 < CU_CHUNK ? count - k0 : CU_CHUNK;
        cu_pair_args a = pair_args(cv, nullptr, k0, m);
        note(c, "clip_value", cu_clip_value(c->stream, x + (size_t)k0 * s, s, n, &a, m));
    }
}

void cu_reg_grad_op(backend_ctx *c, float *g, const float *w, size_t s, size_t n,
                    const float *l1, const float *l2, int count)
{
    on(c);
    for (int k0 = 0; k0 < count; k0 += CU_CHUNK) {
        int m = count - k0 < CU_CHUNK ? count - k0 : CU_CHUNK;
        cu_pair_args a = pair_args(l1, l2, k0, m);
        size_t off = (size_t)k0 * s;
        note(c, "reg_grad", cu_reg_grad(c->stream, g + off, w + off, s, n, &a, m));
    }
}

void cu_reg_penalty_op(backend_ctx *c, double *stats, const float *w, size_t s, size_t n,
                       const float *l1, const float *l2, int rows, int count)
{
    on(c);
    for (int k0 = 0; k0 < count; k0 += CU_CHUNK) {
        int m = count - k0 < CU_CHUNK ? count - k0 : CU_CHUNK;
        cu_pair_args a = pair_args(l1, l2, k0, m);
        note(c, "reg_penalty",
             cu_reg_penalty(c->stream, stats + STATS_PER_MODEL * k0, w + (size_t)k0 * s, s, n, &a,
                            rows, m, c->scratch, REDUCE_SCRATCH));
    }
}

void cu_im2col_op(backend_ctx *c, float *col, size_t scol, const float *X, size_t sX,
                  const window_geom *g, int count)
{
    on(c);
    note(c, "im2col", cu_im2col(c->stream, col, scol, X, sX, g, count));
}

void cu_col2im_op(backend_ctx *c, float *dX, size_t sdX, const float *col, size_t scol,
                  const window_geom *g, int count)
{
    on(c);
    note(c, "col2im", cu_col2im(c->stream, dX, sdX, col, scol, g, count));
}

void cu_maxpool_fwd_op(backend_ctx *c, float *Y, size_t sY, int32_t *arg, size_t sarg,
                       const float *X, size_t sX, const window_geom *g, int count)
{
    on(c);
    note(c, "maxpool_fwd", cu_maxpool_fwd(c->stream, Y, sY, arg, sarg, X, sX, g, count));
}

void cu_maxpool_bwd_op(backend_ctx *c, float *dX, size_t sdX, const float *dY, size_t sdY,
                       const int32_t *arg, size_t sarg, const window_geom *g, int count)
{
    on(c);
    note(c, "maxpool_bwd", cu_maxpool_bwd(c->stream, dX, sdX, dY, sdY, arg, sarg, g, count));
}

void cu_avgpool_fwd_op(backend_ctx *c, float *Y, size_t sY, const float *X, size_t sX,
                       const window_geom *g, int count)
{
    on(c);
    note(c, "avgpool_fwd", cu_avgpool_fwd(c->stream, Y, sY, X, sX, g, count));
}

void cu_avgpool_bwd_op(backend_ctx *c, float *dX, size_t sdX, const float *dY, size_t sdY,
                       const window_geom *g, int count)
{
    on(c);
    note(c, "avgpool_bwd", cu_avgpool_bwd(c->stream, dX, sdX, dY, sdY, g, count));
}

void cu_seq_pool_fwd_op(backend_ctx *c, int max, float *Y, size_t sY, int32_t *arg, size_t sarg,
                        const float *X, size_t sX, const float *tokens, size_t s_tokens, int n,
                        int T, int C, int count)
{
    on(c);
    note(c, "seq_pool_fwd",
         cu_seq_pool_fwd(c->stream, max, Y, sY, arg, sarg, X, sX, tokens, s_tokens, n, T, C,
                         count));
}

void cu_seq_pool_bwd_op(backend_ctx *c, int max, float *dX, size_t sdX, const float *dY,
                        size_t sdY, const int32_t *arg, size_t sarg, const float *tokens,
                        size_t s_tokens, int n, int T, int C, int count)
{
    on(c);
    note(c, "seq_pool_bwd",
         cu_seq_pool_bwd(c->stream, max, dX, sdX, dY, sdY, arg, sarg, tokens, s_tokens, n, T, C,
                         count));
}

void cu_ln_fwd_op(backend_ctx *c, float *Y, size_t sY, const float *X, size_t sX,
                  const float *gamma, const float *beta, size_t sp, float *stat, size_t sst,
                  const float *eps, int rows, int C, int count)
{
    on(c);
    note(c, "ln_fwd", cu_ln_fwd(c->stream, Y, sY, X, sX, gamma, beta, sp, stat, sst, eps, rows,
                                C, count));
}

void cu_ln_bwd_op(backend_ctx *c, float *dX, size_t sdX, const float *dY, size_t sdY,
                  const float *X, size_t sX, const float *gamma, size_t sp, const float *stat,
                  size_t sst, float *dgamma, float *dbeta, size_t sg, int rows, int C, int count)
{
    on(c);
    note(c, "ln_bwd", cu_ln_bwd(c->stream, dX, sdX, dY, sdY, X, sX, gamma, sp, stat, sst, dgamma,
                                dbeta, sg, rows, C, count));
}

void cu_attn_softmax_fwd_op(backend_ctx *c, float *S, size_t sS, const float *tokens,
                            size_t s_tokens, int n, int H, int T, int causal, int count)
{
    on(c);
    note(c, "attn_softmax_fwd",
         cu_attn_softmax_fwd(c->stream, S, sS, tokens, s_tokens, n, H, T, causal, count));
}

void cu_attn_softmax_bwd_op(backend_ctx *c, float *dS, size_t sdS, const float *P, size_t sP,
                            int n, int H, int T, int count)
{
    on(c);
    note(c, "attn_softmax_bwd", cu_attn_softmax_bwd(c->stream, dS, sdS, P, sP, n, H, T, count));
}

/* The models k0 .. k0 + m - 1 of o, the most one launch carries. */
cu_bn_args bn_args(const bn_step *o, int k0, int m)
{
    cu_bn_args a;
    memset(&a, 0, sizeof a);
    for (int k = 0; k < m; k++) {
        a.momentum[k] = o->momentum[k0 + k];
        a.eps[k] = o->epsilon[k0 + k];
    }
    return a;
}

void cu_bn_fwd_train_op(backend_ctx *c, float *Y, size_t sY, const float *X, size_t sX,
                        const float *gamma, const float *beta, float *mov_mean, float *mov_var,
                        size_t sp, float *stat, size_t sst, int rows, int C, const bn_step *o,
                        int count)
{
    on(c);
    for (int k0 = 0; k0 < count; k0 += CU_CHUNK) {
        int m = count - k0 < CU_CHUNK ? count - k0 : CU_CHUNK;
        cu_bn_args a = bn_args(o, k0, m);
        size_t kp = (size_t)k0 * sp;
        note(c, "bn_fwd_train",
             cu_bn_fwd_train(c->stream, Y + (size_t)k0 * sY, sY, X + (size_t)k0 * sX, sX,
                             gamma + kp, beta + kp, mov_mean + kp, mov_var + kp, sp,
                             stat + (size_t)k0 * sst, sst, rows, C, &a, m, c->scratch,
                             REDUCE_SCRATCH));
    }
}

void cu_bn_fwd_infer_op(backend_ctx *c, float *Y, size_t sY, const float *X, size_t sX,
                        const float *gamma, const float *beta, const float *mov_mean,
                        const float *mov_var, size_t sp, int rows, int C, const bn_step *o,
                        int count)
{
    on(c);
    for (int k0 = 0; k0 < count; k0 += CU_CHUNK) {
        int m = count - k0 < CU_CHUNK ? count - k0 : CU_CHUNK;
        cu_bn_args a = bn_args(o, k0, m);
        size_t kp = (size_t)k0 * sp;
        note(c, "bn_fwd_infer",
             cu_bn_fwd_infer(c->stream, Y + (size_t)k0 * sY, sY, X + (size_t)k0 * sX, sX,
                             gamma + kp, beta + kp, mov_mean + kp, mov_var + kp, sp, rows, C,
                             &a, m));
    }
}

void cu_bn_bwd_op(backend_ctx *c, float *dX, size_t sdX, const float *dY, size_t sdY,
                  const float *X, size_t sX, const float *gamma, size_t sp, const float *stat,
                  size_t sst, float *dgamma, float *dbeta, size_t sg, int rows, int C, int count)
{
    on(c);
    note(c, "bn_bwd", cu_bn_bwd(c->stream, dX, sdX, dY, sdY, X, sX, gamma, sp, stat, sst, dgamma,
                                dbeta, sg, rows, C, count, c->scratch, REDUCE_SCRATCH));
}

void cu_lstm_fwd_op(backend_ctx *c, const rnn_step *s)
{
    on(c);
    note(c, "lstm_fwd", cu_rnn_step(c->stream, CU_LSTM_FWD, s));
}

void cu_lstm_bwd_op(backend_ctx *c, const rnn_step *s)
{
    on(c);
    note(c, "lstm_bwd", cu_rnn_step(c->stream, CU_LSTM_BWD, s));
}

void cu_gru_fwd_op(backend_ctx *c, const rnn_step *s)
{
    on(c);
    note(c, "gru_fwd", cu_rnn_step(c->stream, CU_GRU_FWD, s));
}

void cu_gru_bwd_op(backend_ctx *c, const rnn_step *s)
{
    on(c);
    note(c, "gru_bwd", cu_rnn_step(c->stream, CU_GRU_BWD, s));
}

EXPORT const char *cohort_cuda_ctx_error(const backend_ctx *ctx);

backend_ops make_ops()
{
    backend_ops o;
    memset(&o, 0, sizeof o);
    o.name = "cuda";
    o.api_version = COHORT_BACKEND_API_VERSION;
    o.model_major = 0;  /* op by op over the group: one launch feeds every model */
    o.stats_every = 16; /* a read of the metrics waits for the stream */
    o.ctx_error = cohort_cuda_ctx_error;
    o.ctx_create = cu_ctx_create;
    o.ctx_free = cu_ctx_free;
    o.ctx_workspace = cu_ctx_workspace;
    o.mem_alloc = cu_mem_alloc;
    o.mem_free = cu_mem_free;
    o.copy_h2d = cu_copy_h2d;
    o.copy_d2h = cu_copy_d2h;
    o.memzero = cu_memzero;
    o.sync = cu_sync;
    o.load_rows = cu_load_rows;
    o.load_labels = cu_load_labels;
    o.gemm = cu_gemm;
    o.bias_act = cu_bias_act_op;
    o.act_backward = cu_act_backward_op;
    o.bias_grad = cu_bias_grad_op;
    o.dropout_fwd = cu_dropout_fwd_op;
    o.mul = cu_mul_op;
    o.copy = cu_copy_op;
    o.add = cu_add_op;
    o.loss = cu_loss_op;
    o.optimize = cu_optimize_op;
    o.sum_sq = cu_sum_sq_op;
    o.clip_norm = cu_clip_norm_op;
    o.clip_value = cu_clip_value_op;
    o.reg_grad = cu_reg_grad_op;
    o.reg_penalty = cu_reg_penalty_op;
    o.im2col = cu_im2col_op;
    o.col2im = cu_col2im_op;
    o.maxpool_fwd = cu_maxpool_fwd_op;
    o.maxpool_bwd = cu_maxpool_bwd_op;
    o.avgpool_fwd = cu_avgpool_fwd_op;
    o.avgpool_bwd = cu_avgpool_bwd_op;
    o.bn_fwd_train = cu_bn_fwd_train_op;
    o.bn_fwd_infer = cu_bn_fwd_infer_op;
    o.bn_bwd = cu_bn_bwd_op;
    o.lstm_fwd = cu_lstm_fwd_op;
    o.lstm_bwd = cu_lstm_bwd_op;
    o.gru_fwd = cu_gru_fwd_op;
    o.gru_bwd = cu_gru_bwd_op;
    o.seq_pool_fwd = cu_seq_pool_fwd_op;
    o.seq_pool_bwd = cu_seq_pool_bwd_op;
    o.gather_rows = cu_gather_rows_op;
    o.scatter_add_rows = cu_scatter_add_rows_op;
    o.ln_fwd = cu_ln_fwd_op;
    o.ln_bwd = cu_ln_bwd_op;
    o.attn_softmax_fwd = cu_attn_softmax_fwd_op;
    o.attn_softmax_bwd = cu_attn_softmax_bwd_op;
    return o;
}

const backend_ops cuda_ops = make_ops();

/* ---- is CUDA usable here? ------------------------------------------------------ */

bool api_ok(int api_version, char *why, size_t n)
{
    if (api_version == COHORT_BACKEND_API_VERSION)
        return true;
    say(why, n, "the CUDA plugin implements backend API %d but cohort asks for %d: rebuild it",
        COHORT_BACKEND_API_VERSION, api_version);
    return false;
}

bool driver_present(char *why, size_t n)
{
    /* cudart loads the same library itself; asking first gives the reason. */
    if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL))
        return true;
    const char *e = dlerror();
    if (!e || strstr(e, "No such file"))
        say(why, n, "libcuda.so.1 not found: no NVIDIA driver");
    else
        say(why, n, "libcuda.so.1 did not load: %s", e);
    return false;
}

/* GPUs this process can see; 0 with the reason. */
int visible_gpus(char *why, size_t n)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (e == cudaSuccess && count > 0)
        return count;
    (void)cudaGetLastError();
    if (e == cudaSuccess || e == cudaErrorNoDevice) {
        say(why, n, "no GPU visible (CUDA_VISIBLE_DEVICES=%s)", vis ? vis : "unset");
    } else if (e == cudaErrorInsufficientDriver) {
        int drv = 0;
        cudaDriverGetVersion(&drv);
        say(why, n,
            "the NVIDIA driver supports CUDA %d.%d, older than the CUDA %d.%d this plugin was "
            "built with",
            drv / 1000, drv % 1000 / 10, CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    } else {
        say(why, n, "CUDA did not start: %s (%s; CUDA_VISIBLE_DEVICES=%s)", cudaGetErrorString(e),
            cudaGetErrorName(e), vis ? vis : "unset");
    }
    return 0;
}

} /* namespace */

EXPORT const int cohort_cuda_api_version = COHORT_BACKEND_API_VERSION;

EXPORT const backend_ops *cohort_backend_cuda_entry(int api_version, char *why, size_t why_len)
{
    if (!api_ok(api_version, why, why_len) || !driver_present(why, why_len) ||
        !visible_gpus(why, why_len) || !blas_load(why, why_len))
        return nullptr;
    return &cuda_ops;
}

EXPORT int cohort_cuda_query(int api_version, gpu_info *out, int max, char *why, size_t why_len)
{
    if (!api_ok(api_version, why, why_len) || !driver_present(why, why_len))
        return 0;
    int count = visible_gpus(why, why_len), found = 0, prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess)
        prev = -1;
    for (int i = 0; i < count && found < max; i++) {
        cudaDeviceProp p;
        size_t free_b = 0, total_b = 0;
        cudaError_t e = cudaGetDeviceProperties(&p, i);
        if (e == cudaSuccess)
            e = cudaSetDevice(i);
        if (e == cudaSuccess)
            e = cudaMemGetInfo(&free_b, &total_b);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            say(why, why_len, "GPU %d: %s", i, cudaGetErrorString(e));
            continue;
        }
        gpu_info *g = &out[found++];
        memset(g, 0, sizeof *g);
        snprintf(g->name, sizeof g->name, "%.127s", p.name);
        g->cc_major = p.major;
        g->cc_minor = p.minor;
        g->total_bytes = p.totalGlobalMem;
        g->free_bytes = free_b;
    }
    if (prev >= 0)
        cudaSetDevice(prev);
    (void)cudaGetLastError();
    return found;
}

EXPORT const char *cohort_cuda_ctx_error(const backend_ctx *ctx) { return ctx ? ctx->error : ""; }
