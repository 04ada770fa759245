/*
 * GPU discovery: which GPUs the CUDA plugin sees, asked in a short-lived
 * child process so that this one never initializes CUDA (CUDA does not
 * survive fork: DESIGN.md rule 3). The child writes its answer to a pipe.
 */
#include "backend/backend_impl.h"
#include "backend/cpu/cpu.h"
#include "backend/cuda/cuda_plugin.h"
#include "device/device.h"
#include "util/util.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Starting CUDA can take seconds on a big machine; a hung driver must not
 * hang cohort. */
#define DISCOVERY_TIMEOUT_MS 60000

typedef struct gpu_report {
    int count;
    char why[400];
    gpu_info gpu[CUDA_MAX_GPUS];
} gpu_report;

static void report_query(gpu_report *rep)
{
    memset(rep, 0, sizeof *rep);
    rep->count = cuda_plugin_query(rep->gpu, CUDA_MAX_GPUS, rep->why, sizeof rep->why);
    if (rep->count < 0)
        rep->count = 0;
}

/* Run the query in a child; 0 with rep filled, else -1 with rep->why. */
static int query_in_child(gpu_report *rep)
{
    int fd[2];
    memset(rep, 0, sizeof *rep);
    /* OpenBLAS's threads stop for the fork; with their count settled now,
     * no later call starts them again where they are not wanted. */
    backend_cpu_blas_settle();
    if (pipe(fd) != 0) {
        snprintf(rep->why, sizeof rep->why, "GPU discovery: pipe: %s", strerror(errno));
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(rep->why, sizeof rep->why, "GPU discovery: fork: %s", strerror(errno));
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    if (pid == 0) {
        close(fd[0]);
        gpu_report r;
        report_query(&r);
        const char *p = (const char *)&r;
        size_t left = sizeof r;
        while (left > 0) {
            ssize_t w = write(fd[1], p, left);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                _exit(1);
            p += w;
            left -= (size_t)w;
        }
        _exit(0);
    }
    close(fd[1]);
    char *p = (char *)rep;
    size_t got = 0;
    int timed_out = 0;
    double deadline = now_seconds() + DISCOVERY_TIMEOUT_MS / 1000.0;
    while (got < sizeof *rep) {
        int wait_ms = (int)((deadline - now_seconds()) * 1000.0);
        if (wait_ms <= 0) {
            timed_out = 1;
            break;
        }
        struct pollfd pfd = {fd[0], POLLIN, 0};
        int pr = poll(&pfd, 1, wait_ms);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0) {
            timed_out = pr == 0;
            break;
        }
        ssize_t n = read(fd[0], p + got, sizeof *rep - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd[0]);
    if (timed_out)
        kill(pid, SIGKILL);
    int status = 0;
    pid_t w;
    do
        w = waitpid(pid, &status, 0);
    while (w < 0 && errno == EINTR);
    if (got == sizeof *rep)
        return 0;
    memset(rep, 0, sizeof *rep);
    if (timed_out)
        snprintf(rep->why, sizeof rep->why,
                 "GPU discovery did not answer within %d s (the NVIDIA driver may be hung)",
                 DISCOVERY_TIMEOUT_MS / 1000);
    else if (w == pid && WIFSIGNALED(status))
        snprintf(rep->why, sizeof rep->why,
                 "GPU discovery crashed (signal %d) while starting CUDA", WTERMSIG(status));
    else
        snprintf(rep->why, sizeof rep->why, "GPU discovery ended without an answer (status %d)",
                 w == pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return -1;
}

/*
 * What a training process takes on a GPU beside its pools, kept out of the
 * default limit: the kernels CUDA loads lazily on first launch (cuBLAS's and
 * cuBLASLt's that the run's GEMMs use, and the plugin's own: tens to a few
 * hundred MB), each context's buffer of byte batches, and cudaMalloc's 2 MiB
 * granules under a grow pool (one per group). Packed to the free memory, a
 * preallocated slab or the last group failed at run time. Each context's
 * cuBLAS workspace and reduction scratch are not in it: they come from the
 * pool, counted by the planner (gpu_ctx_bytes). Nor is the process's own CUDA
 * context: discovery's child measured the free memory with a context of its
 * own, and the training process's takes its place. 512 MiB, at most an
 * eighth of what is free.
 */
uint64_t gpu_headroom(uint64_t free_bytes)
{
    uint64_t h = (uint64_t)512 << 20;
    return h < free_bytes / 8 ? h : free_bytes / 8;
}

/*
 * A worker process (strategy processes) opens a CUDA context of its own,
 * which the parent's discovery did not see: some 500 MB on an H100 or H200.
 * Most of it is the local memory CUDA reserves for thread stacks (the
 * default 1 KiB for each of the 2048 threads an SM holds, on 132 SMs: 264
 * MiB), the rest the device heap for malloc (8 MiB), the printf buffer
 * (1 MiB), the runtime's own state and the modules the worker loads (the
 * plugin's kernels, the cuBLAS kernels its GEMMs use). 512 MiB, at most a
 * sixteenth of the GPU (the emulation's GPUs are small, and so are its
 * contexts). Its group's cuBLAS workspace is gpu_ctx_bytes, counted apart.
 */
uint64_t gpu_worker_bytes(uint64_t total_bytes)
{
    uint64_t w = (uint64_t)512 << 20;
    return w < total_bytes / 16 ? w : total_bytes / 16;
}

/* A context's scratch and cuBLAS workspace (cuda_plugin.h): 33 MiB, at most
 * a sixty-fourth of the GPU, in 256-byte units (cuBLAS's alignment). */
uint64_t gpu_ctx_bytes(uint64_t total_bytes)
{
    uint64_t w = (uint64_t)(CUDA_REDUCE_SCRATCH + CUDA_BLAS_WORKSPACE);
    if (w > total_bytes / 64)
        w = total_bytes / 64;
    return w / 256 * 256;
}

void devices_discover_gpus(device_registry *r)
{
    char path[4096], why[512];
    gpu_report rep;
    if (cuda_plugin_path(path, sizeof path, why, sizeof why)) {
        snprintf(r->gpu_note, sizeof r->gpu_note, "no GPU: %.500s", why);
        return;
    }
    /* Once this process runs CUDA, a child of it cannot: ask here. */
    if (backend_cuda_started())
        report_query(&rep);
    else if (query_in_child(&rep) != 0)
        rep.count = 0;
    int max = (int)(sizeof r->dev / sizeof r->dev[0]);
    int added = 0;
    for (int i = 0; i < rep.count && i < CUDA_MAX_GPUS && r->n < max; i++) {
        const gpu_info *g = &rep.gpu[i];
        cohort_device *d = &r->dev[r->n];
        memset(d, 0, sizeof *d);
        snprintf(d->info.name, sizeof d->info.name, "gpu:%d", i);
        d->kind = &device_kind_cuda;
        str_copy(d->info.kind, sizeof d->info.kind, d->kind->name);
        snprintf(d->info.model, sizeof d->info.model, "%.*s", (int)sizeof g->name - 1, g->name);
        d->info.threads = 1; /* one host thread drives a GPU's stream */
        d->info.cc_major = g->cc_major;
        d->info.cc_minor = g->cc_minor;
        d->info.total_bytes = g->total_bytes;
        d->info.free_bytes = g->free_bytes;
        d->info.limit_bytes = g->free_bytes - gpu_headroom(g->free_bytes);
        d->info.policy = COHORT_MEM_GROW;
        d->be = backend_cuda_lazy();
        d->be_dev = i;
        d->parent = r->n;
        cohort_error err;
        if (mem_pool_create(d->info.name, d->be, i, d->info.limit_bytes, COHORT_MEM_GROW, &d->mem_pool,
                        &err)) {
            snprintf(r->gpu_note, sizeof r->gpu_note, "%.500s", err.message);
            break;
        }
        r->n++;
        added++;
    }
    if (added)
        r->gpu_note[0] = 0;
    else if (!r->gpu_note[0])
        snprintf(r->gpu_note, sizeof r->gpu_note, "no GPU: %.500s",
                 rep.why[0] ? rep.why : "the CUDA plugin found none");
}
