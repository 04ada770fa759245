/*
 * The CUDA plugin's loader. The core links no CUDA: it finds
 * libcohort_cuda.so, dlopens it only when asked, checks its API version and
 * forwards to it. Nothing here starts CUDA until backend_cuda(), the plugin's
 * query, or a lazy table's first ctx_create or mem_alloc runs.
 */
#include "backend/backend_impl.h"
#include "backend/cuda/cuda_plugin.h"
#include "util/util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef COHORT_PLUGIN_DIR
#define COHORT_PLUGIN_DIR "."
#endif

static pthread_mutex_t plugin_lock = PTHREAD_MUTEX_INITIALIZER;
static void *plugin_handle;             /* the dlopen'd plugin */
static cuda_ctx_error_fn plugin_ctx_error;
static int plugin_started;              /* the entry or query ran: CUDA is initialized */
static int plugin_tried;                /* backend_cuda() ran; its answer is final */
static char plugin_why[512];            /* why it returned NULL */
static _Atomic(const backend_ops *) plugin_ops; /* set once, then read without the lock */

static int file_exists(const char *path) { return access(path, R_OK) == 0; }

int cuda_plugin_path(char *path, size_t n, char *why, size_t why_len)
{
    const char *env = getenv("COHORT_PLUGIN_DIR");
    if (env && env[0]) {
        snprintf(path, n, "%s/%s", env, CUDA_PLUGIN_FILE);
        if (file_exists(path))
            return 0;
        snprintf(why, why_len, "no CUDA plugin at %s (from COHORT_PLUGIN_DIR)", path);
        return -1;
    }
    /* Beside the program (the cohort command), then beside the library
     * that holds this code (libcohort.so inside an installed Python
     * package: the interpreter is the program there), then the build tree. */
    char dirs[2][4096], tried[1024] = "";
    int n_dirs = 0;
    ssize_t len = readlink("/proc/self/exe", dirs[0], sizeof dirs[0] - 1);
    if (len > 0) {
        dirs[0][len] = 0;
        n_dirs = 1;
    }
    Dl_info info;
    if (dladdr((void *)cuda_plugin_path, &info) && info.dli_fname && info.dli_fname[0] == '/' &&
        (!n_dirs || strcmp(info.dli_fname, dirs[0]) != 0))
        n_dirs += str_copy(dirs[n_dirs], sizeof dirs[n_dirs], info.dli_fname) == 0;
    for (int i = 0; i < n_dirs; i++) {
        char *slash = strrchr(dirs[i], '/');
        if (!slash)
            continue;
        *slash = 0;
        snprintf(path, n, "%s/%s", dirs[i], CUDA_PLUGIN_FILE);
        if (file_exists(path))
            return 0;
        size_t used = strlen(tried);
        snprintf(tried + used, sizeof tried - used, "%s%s", used ? ", " : "", path);
    }
    snprintf(path, n, "%s/%s", COHORT_PLUGIN_DIR, CUDA_PLUGIN_FILE);
    if (file_exists(path))
        return 0;
    if (tried[0] && !strstr(tried, path))
        snprintf(why, why_len, "no CUDA plugin at %s or %s: cohort was built without nvcc",
                 tried, path);
    else
        snprintf(why, why_len, "no CUDA plugin at %s: cohort was built without nvcc", path);
    return -1;
}

/* dlopen the plugin and check its API version; call with plugin_lock held. */
static int plugin_open_locked(char *why, size_t why_len)
{
    if (plugin_handle)
        return 0;
    char path[4096];
    if (cuda_plugin_path(path, sizeof path, why, why_len))
        return -1;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why, why_len, "cannot load the CUDA plugin: %s", dlerror());
        return -1;
    }
    const int *api = (const int *)dlsym(h, CUDA_API_SYMBOL);
    if (!api || *api != COHORT_BACKEND_API_VERSION) {
        if (api)
            snprintf(why, why_len,
                     "the CUDA plugin %s implements backend API %d, this cohort needs %d: "
                     "rebuild it",
                     path, *api, COHORT_BACKEND_API_VERSION);
        else
            snprintf(why, why_len, "%s is not a cohort CUDA plugin (no %s)", path,
                     CUDA_API_SYMBOL);
        dlclose(h);
        return -1;
    }
    plugin_ctx_error = (cuda_ctx_error_fn)dlsym(h, CUDA_CTX_ERROR_SYMBOL);
    plugin_handle = h;
    return 0;
}

const backend_ops *backend_cuda(char *why, size_t why_len)
{
    const backend_ops *ops = atomic_load_explicit(&plugin_ops, memory_order_acquire);
    if (ops)
        return ops;
    pthread_mutex_lock(&plugin_lock);
    if (!plugin_tried) {
        char reason[512] = "";
        if (plugin_open_locked(reason, sizeof reason) == 0) {
            cuda_entry_fn entry = (cuda_entry_fn)dlsym(plugin_handle, CUDA_ENTRY_SYMBOL);
            if (!entry) {
                snprintf(reason, sizeof reason, "the CUDA plugin has no %s", CUDA_ENTRY_SYMBOL);
            } else {
                plugin_started = 1;
                ops = entry(COHORT_BACKEND_API_VERSION, reason, sizeof reason);
                if (ops && ops->api_version != COHORT_BACKEND_API_VERSION) {
                    snprintf(reason, sizeof reason,
                             "the CUDA plugin's ops are of backend API %d, this cohort needs %d",
                             ops->api_version, COHORT_BACKEND_API_VERSION);
                    ops = NULL;
                }
                if (ops)
                    atomic_store_explicit(&plugin_ops, ops, memory_order_release);
            }
        }
        if (!ops)
            str_copy(plugin_why, sizeof plugin_why, reason[0] ? reason : "unknown");
        /* A failure is final for this process: a missing driver stays missing. */
        plugin_tried = 1;
    }
    ops = atomic_load_explicit(&plugin_ops, memory_order_acquire);
    if (!ops)
        str_copy(why, why_len, plugin_why);
    pthread_mutex_unlock(&plugin_lock);
    return ops;
}

int cuda_plugin_query(gpu_info *out, int max, char *why, size_t why_len)
{
    pthread_mutex_lock(&plugin_lock);
    cuda_query_fn query = NULL;
    if (plugin_open_locked(why, why_len) == 0) {
        query = (cuda_query_fn)dlsym(plugin_handle, CUDA_QUERY_SYMBOL);
        if (!query)
            snprintf(why, why_len, "the CUDA plugin has no %s", CUDA_QUERY_SYMBOL);
        else
            plugin_started = 1;
    }
    pthread_mutex_unlock(&plugin_lock);
    return query ? query(COHORT_BACKEND_API_VERSION, out, max, why, why_len) : 0;
}

int backend_cuda_started(void)
{
    pthread_mutex_lock(&plugin_lock);
    int started = plugin_started;
    pthread_mutex_unlock(&plugin_lock);
    return started;
}

const char *backend_cuda_ctx_error(const backend_ctx *ctx)
{
    pthread_mutex_lock(&plugin_lock);
    cuda_ctx_error_fn f = plugin_ctx_error;
    pthread_mutex_unlock(&plugin_lock);
    return f && atomic_load(&plugin_ops) ? f(ctx) : "";
}

/* ---- the lazy table ---------------------------------------------------------
 * Registered for each GPU at discovery, for the calls that come before any
 * context: ctx_create and a pool's mem_alloc load the plugin. Every op on a
 * context goes to the plugin's own table, which backend_resolve gives once
 * ctx_create has made one: this table never copies the plugin's ops, so an
 * op added to the plugin cannot be missing here (it was: every op past
 * adam, the convolutions' among them, was a NULL pointer on a GPU), and
 * the plugin's capabilities (model_major, stats_every) are its own. */

#define REAL() atomic_load_explicit(&plugin_ops, memory_order_acquire)

static cohort_status lazy_ctx_create(int device, int threads, backend_ctx **out,
                                     cohort_error *err)
{
    char why[512];
    const backend_ops *be = backend_cuda(why, sizeof why);
    if (!be) {
        *out = NULL;
        return cohort_fail(err, COHORT_ERR_DEVICE, "gpu:%d: %s", device, why);
    }
    return be->ctx_create(device, threads, out, err);
}

static void lazy_ctx_free(backend_ctx *c)
{
    if (c)
        REAL()->ctx_free(c);
}

static void *lazy_mem_alloc(int device, size_t bytes)
{
    char why[512];
    const backend_ops *be = backend_cuda(why, sizeof why);
    return be ? be->mem_alloc(device, bytes) : NULL;
}

static void lazy_mem_free(int device, void *p)
{
    const backend_ops *be = REAL();
    if (be && p)
        be->mem_free(device, p);
}

static const backend_ops lazy_ops = {
    .name = "cuda",
    .api_version = COHORT_BACKEND_API_VERSION,
    .ctx_create = lazy_ctx_create,
    .ctx_free = lazy_ctx_free,
    .mem_alloc = lazy_mem_alloc,
    .mem_free = lazy_mem_free,
};

const backend_ops *backend_cuda_lazy(void) { return &lazy_ops; }

const backend_ops *backend_resolve(const backend_ops *be)
{
    const backend_ops *real = REAL();
    return be == &lazy_ops && real ? real : be;
}
