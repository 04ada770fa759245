/*
 * cuBLAS, emulated: the entry points the plugin resolves with dlsym. The GEMM
 * is a plain column-major loop in float, queued on the handle's stream, after
 * cuBLAS's own argument checks (CUBLAS_STATUS_INVALID_VALUE for a negative
 * size, a leading dimension below the rows it must hold, a bad operation or
 * batch count). As cuBLAS, C is not read when beta is 0, nor A and B when alpha
 * is 0 or k is 0; every element the call reads or writes must lie in device
 * memory, or the call is a device fault.
 *
 * A handle owns a default workspace of COHORT_EMU_BLAS_WORKSPACE bytes of
 * device memory (default 1M, standing for cuBLAS's own of some 32 MiB on
 * Hopper) from cublasCreate on; cublasSetWorkspace gives it the caller's
 * instead and frees the default; cublasSetStream goes back to the default
 * (as cuBLAS documents), so a workspace is set after the stream.
 *
 * The plugin gives every handle a workspace from its pool (ctx_workspace),
 * which the planner counts: a GEMM on a handle still on its default is
 * refused (CUBLAS_STATUS_NOT_SUPPORTED, and a line that says so), and each
 * GEMM overwrites the whole workspace with 0xff bytes when it runs, as a
 * real one may use all of it, so that a workspace that overlaps live data,
 * or is used after its block went back to the pool, gives wrong numbers.
 */
#include "cublas_v2.h"
#include "emu.h"

#include <stdio.h>
#include <string.h>

struct emu_cublas {
    cudaStream_t stream;
    void *own_ws;  /* the default workspace, device memory */
    void *user_ws; /* cublasSetWorkspace's */
    size_t user_ws_bytes;
    cublasMath_t mode;
};

namespace {

size_t default_ws() { return emu::env_bytes("COHORT_EMU_BLAS_WORKSPACE", (size_t)1 << 20); }

cublasStatus_t own_workspace(emu_cublas *h)
{
    h->user_ws = nullptr;
    h->user_ws_bytes = 0;
    if (h->own_ws)
        return CUBLAS_STATUS_SUCCESS;
    return emu::dev_alloc(&h->own_ws, default_ws()) == cudaSuccess ? CUBLAS_STATUS_SUCCESS
                                                                  : CUBLAS_STATUS_ALLOC_FAILED;
}

/* Last element (column-major, rows x cols, leading dimension ld) + 1. */
size_t extent(int rows, int cols, int ld) { return (size_t)ld * (size_t)(cols - 1) + (size_t)rows; }

struct gemm_args {
    cublasOperation_t ta, tb;
    int m, n, k, lda, ldb, ldc;
    float alpha, beta;
    const float *A, *B;
    float *C;
    long long sA, sB, sC;
    int batch;
};

void gemm_run(const gemm_args &g)
{
    for (int b = 0; b < g.batch; b++) {
        const float *A = g.A + b * g.sA, *B = g.B + b * g.sB;
        float *C = g.C + b * g.sC;
        for (int j = 0; j < g.n; j++)
            for (int i = 0; i < g.m; i++) {
                float *c = &C[(size_t)i + (size_t)j * (size_t)g.ldc];
                float s = 0.0f;
                if (g.alpha != 0.0f)
                    for (int p = 0; p < g.k; p++) {
                        float a = g.ta == CUBLAS_OP_N ? A[(size_t)i + (size_t)p * (size_t)g.lda]
                                                      : A[(size_t)p + (size_t)i * (size_t)g.lda];
                        float v = g.tb == CUBLAS_OP_N ? B[(size_t)p + (size_t)j * (size_t)g.ldb]
                                                      : B[(size_t)j + (size_t)p * (size_t)g.ldb];
                        s += a * v;
                    }
                *c = g.beta == 0.0f ? g.alpha * s : g.alpha * s + g.beta * *c;
            }
    }
}

/* Every batch's [first, last element] of a matrix inside device memory. */
bool span_ok(const float *p, size_t ext, long long stride, int batch)
{
    for (int b = 0; b < batch; b += batch > 1 ? batch - 1 : 1)
        if (!emu::is_device(p + b * stride, ext * sizeof(float)))
            return false;
    return true;
}

cublasStatus_t gemm(emu_cublas *h, const gemm_args &g)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    bool op_ok = (g.ta == CUBLAS_OP_N || g.ta == CUBLAS_OP_T || g.ta == CUBLAS_OP_C) &&
                 (g.tb == CUBLAS_OP_N || g.tb == CUBLAS_OP_T || g.tb == CUBLAS_OP_C);
    int arows = g.ta == CUBLAS_OP_N ? g.m : g.k, brows = g.tb == CUBLAS_OP_N ? g.k : g.n;
    if (!op_ok || g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 0 || g.lda < (arows > 1 ? arows : 1) ||
        g.ldb < (brows > 1 ? brows : 1) || g.ldc < (g.m > 1 ? g.m : 1)) {
        /* cuBLAS says no more; the emulation says which. */
        fprintf(stderr,
                "cuda_emu: cublasSgemm: invalid value: op %d %d, m %d n %d k %d, lda %d (needs "
                ">= %d), ldb %d (>= %d), ldc %d (>= %d), batch %d\n",
                (int)g.ta, (int)g.tb, g.m, g.n, g.k, g.lda, arows, g.ldb, brows, g.ldc, g.m,
                g.batch);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!g.m || !g.n || !g.batch)
        return CUBLAS_STATUS_SUCCESS;
    bool reads_ab = g.k > 0 && g.alpha != 0.0f;
    if (!span_ok(g.C, extent(g.m, g.n, g.ldc), g.sC, g.batch) ||
        (reads_ab && (!span_ok(g.A, extent(arows, g.ta == CUBLAS_OP_N ? g.k : g.m, g.lda), g.sA,
                               g.batch) ||
                      !span_ok(g.B, extent(brows, g.tb == CUBLAS_OP_N ? g.n : g.k, g.ldb), g.sB,
                               g.batch)))) {
        emu::fault(cudaErrorIllegalAddress,
                   "cublasSgemm: m %d n %d k %d, lda %d ldb %d ldc %d, strides %lld %lld %lld, "
                   "batch %d: an operand reaches outside device memory",
                   g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.sA, g.sB, g.sC, g.batch);
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    if (!h->user_ws) {
        fprintf(stderr, "cuda_emu: cublasSgemm on a handle without cublasSetWorkspace: cuBLAS "
                        "would work in a workspace of its own, which no pool counts\n");
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    gemm_args q = g;
    if (!reads_ab)
        q.k = 0; /* no read of A or B: the product is 0 */
    void *ws = h->user_ws;
    size_t ws_bytes = h->user_ws_bytes;
    emu::enqueue(h->stream, [q, ws, ws_bytes]() {
        memset(ws, 0xff, ws_bytes);
        gemm_run(q);
    });
    return CUBLAS_STATUS_SUCCESS;
}

} /* namespace */

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
    emu_cublas *h = new emu_cublas();
    h->mode = CUBLAS_DEFAULT_MATH;
    if (own_workspace(h) != CUBLAS_STATUS_SUCCESS) {
        delete h;
        *handle = nullptr;
        return CUBLAS_STATUS_ALLOC_FAILED;
    }
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    cudaStreamSynchronize(h->stream);
    if (h->own_ws)
        emu::dev_free(h->own_ws);
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->stream = s;
    return own_workspace(h); /* cuBLAS: setting the stream resets the workspace */
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *ws, size_t bytes)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes && (!ws || (uintptr_t)ws % 256 || !emu::is_device(ws, bytes)))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (h->own_ws) {
        emu::dev_free(h->own_ws);
        h->own_ws = nullptr;
    }
    h->user_ws = ws;
    h->user_ws_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    h->mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                              int n, int k, const float *alpha, const float *A, int lda,
                              const float *B, int ldb, const float *beta, float *C, int ldc)
{
    if (!alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    return gemm(h, gemm_args{ta, tb, m, n, k, lda, ldb, ldc, *alpha, *beta, A, B, C, 0, 0, 0, 1});
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta,
                                         cublasOperation_t tb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda, long long sA,
                                         const float *B, int ldb, long long sB, const float *beta,
                                         float *C, int ldc, long long sC, int batch)
{
    if (!alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    return gemm(h,
                gemm_args{ta, tb, m, n, k, lda, ldb, ldc, *alpha, *beta, A, B, C, sA, sB, sC, batch});
}

const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "unknown cuBLAS status";
    }
}

} /* extern "C" */

void *emu_cublas_symbol(const char *name)
{
    struct {
        const char *name;
        void *fn;
    } table[] = {
        {"cublasCreate_v2", (void *)cublasCreate_v2},
        {"cublasDestroy_v2", (void *)cublasDestroy_v2},
        {"cublasSetStream_v2", (void *)cublasSetStream_v2},
        {"cublasSetWorkspace_v2", (void *)cublasSetWorkspace_v2},
        {"cublasSetMathMode", (void *)cublasSetMathMode},
        {"cublasSgemm_v2", (void *)cublasSgemm_v2},
        {"cublasSgemmStridedBatched", (void *)cublasSgemmStridedBatched},
        {"cublasGetStatusString", (void *)cublasGetStatusString},
    };
    for (const auto &t : table)
        if (strcmp(t.name, name) == 0)
            return t.fn;
    return nullptr;
}
