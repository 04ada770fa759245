/*
 * cuda_plugin: the seam between the core and the CUDA plugin libcohort_cuda.so:
 * the symbols the plugin exports and what they return, and the core's loader
 * (backend/backend.c) that finds it, dlopens it on demand and forwards to it.
 */
#ifndef COHORT_CUDA_PLUGIN_H
#define COHORT_CUDA_PLUGIN_H

#include "backend/backend_impl.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUDA_PLUGIN_FILE "libcohort_cuda.so"
#define CUDA_MAX_GPUS 16

/*
 * The device bytes each context takes beside its group's slab, which the
 * group takes from its device's pool and hands over with ctx_workspace, so
 * that the planner counts them (gpu_ctx_bytes): the partial sums of the
 * two-stage reductions first (CUDA_REDUCE_SCRATCH, where the block is at
 * least twice that), then cuBLAS's workspace (cublasSetWorkspace), up to
 * CUDA_BLAS_WORKSPACE, the size cuBLAS's documentation recommends on Hopper
 * (4 MiB before it).
 */
#define CUDA_REDUCE_SCRATCH ((size_t)1 << 20)
#define CUDA_BLAS_WORKSPACE ((size_t)32 << 20)

/* What discovery learns of one GPU. */
typedef struct gpu_info {
    char name[128];
    int cc_major, cc_minor;
    uint64_t total_bytes, free_bytes;
} gpu_info;

/* ---- exported by the plugin (C linkage) ---------------------------------- */

/* int: the COHORT_BACKEND_API_VERSION the plugin was built against. */
#define CUDA_API_SYMBOL "cohort_cuda_api_version"

/* The CUDA backend, or NULL with the reason in why when api_version is not
 * the plugin's, there is no NVIDIA driver, or no GPU is visible. Initializes
 * CUDA in the calling process and loads cuBLAS. */
#define CUDA_ENTRY_SYMBOL "cohort_backend_cuda_entry"
typedef const backend_ops *(*cuda_entry_fn)(int api_version, char *why, size_t why_len);

/* Fill out[0..max) with the visible GPUs; returns their count, 0 with the
 * reason in why when there are none. Loads no cuBLAS and allocates nothing;
 * it does initialize CUDA, so the core calls it in a short-lived child. */
#define CUDA_QUERY_SYMBOL "cohort_cuda_query"
typedef int (*cuda_query_fn)(int api_version, gpu_info *out, int max, char *why, size_t why_len);

/* The first CUDA or cuBLAS error an op on ctx met ("" when none). The ops
 * cannot return errors; after one, copy_d2h fills its destination with NaN
 * bytes, so that the trainer sees a non-finite loss and stops the model. */
#define CUDA_CTX_ERROR_SYMBOL "cohort_cuda_ctx_error"
typedef const char *(*cuda_ctx_error_fn)(const backend_ctx *ctx);

/* ---- the core's side (backend/backend.c) -------------------------------- */

/*
 * The plugin's path: $COHORT_PLUGIN_DIR when set, else the running
 * executable's directory, else the build directory CMake compiled in.
 * Returns 0 when a plugin file is there; else -1 with why saying where it
 * looked. Loads nothing.
 */
int cuda_plugin_path(char *path, size_t n, char *why, size_t why_len);

/* Query the GPUs through the plugin in this process (loading it if needed):
 * what discovery's child runs. Returns the count; 0 with why on failure. */
int cuda_plugin_query(gpu_info *out, int max, char *why, size_t why_len);

/* 1 once this process has called into CUDA through the plugin (after which
 * a forked child can no longer use CUDA). */
int backend_cuda_started(void);

/* A table for a GPU that loads the plugin on its first ctx_create or
 * mem_alloc, so a registry can list GPUs without starting CUDA in this
 * process. ctx_create fails with the loader's reason. It has only the calls
 * that need no context (ctx_create, ctx_free, mem_alloc, mem_free): the ops
 * on a context are backend_resolve's. */
const backend_ops *backend_cuda_lazy(void);

/* The first error an op on a CUDA ctx met, "" when none or not CUDA. */
const char *backend_cuda_ctx_error(const backend_ctx *ctx);

#ifdef __cplusplus
}
#endif

#endif
