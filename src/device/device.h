/*
 * device: the device registry (the CPU, each CUDA GPU, logical devices split
 * out of them) and one memory pool per logical device. Every byte a model
 * uses on a device comes from that device's pool, under its hard limit.
 */
#ifndef COHORT_DEVICE_H
#define COHORT_DEVICE_H

#include "cohort.h"

#include <sched.h>

#include <pthread.h>
#include <stdint.h>

/* What one user (a model, a group) holds in a pool. */
typedef struct mem_account {
    uint64_t current, peak;
} mem_account;

typedef struct mem_pool mem_pool;
/* A backend's ops table: the backends' and train/'s (backend_impl.h). */
typedef struct backend_ops backend_ops;

/*
 * A pool of `limit` bytes on device `dev` of backend `be`. Policy GROW takes
 * memory from the device per allocation; PREALLOCATE takes the whole limit
 * now (failing here when the device cannot give it) and carves it.
 */
cohort_status mem_pool_create(const char *name, const backend_ops *be, int dev, uint64_t limit,
                          cohort_mem_policy policy, mem_pool **out, cohort_error *err);
/* Frees the pool and everything still allocated from it. */
void mem_pool_free(mem_pool *p);
/* `bytes` of device memory, 64-byte aligned, charged to acct (may be NULL).
 * On error NULL is returned, err says who wanted how much and what was
 * left, and nothing is charged. Thread-safe. */
void *mem_pool_alloc(mem_pool *p, size_t bytes, mem_account *acct, const char *who,
                 cohort_error *err);
/* Give back memory from mem_pool_alloc; NULL is a no-op. Thread-safe. */
void mem_pool_release(mem_pool *p, void *ptr, mem_account *acct);
uint64_t mem_pool_in_use(const mem_pool *p);
uint64_t mem_pool_peak(const mem_pool *p);
uint64_t mem_pool_limit(const mem_pool *p);
cohort_mem_policy mem_pool_policy(const mem_pool *p);
/* What an allocation of `bytes` takes from a pool: rounded up to its 64-byte
 * alignment. */
uint64_t mem_pool_charge(uint64_t bytes);
/* The largest allocation the pool could give now: under PREALLOCATE its
 * largest free block of the slab (the bytes free in all may lie in several),
 * under GROW what is left of its limit. Thread-safe. */
uint64_t mem_pool_largest_free(mem_pool *p);
/* Make the pool allocate on backend device `dev` from now on (a worker
 * process that sees only one GPU, as its device 0). */
void mem_pool_rebind(mem_pool *p, int dev);
/* Test hook: the n-th allocation from now (1 = the next) fails as if the
 * device were out of memory; 0 disarms. */
void mem_pool_fail_after(mem_pool *p, int n);
/* Test hook: after each release of a block the pool keeps (a slab's, or a
 * device's grow block), fn(arg, ptr, bytes) is called outside the pool's
 * lock, as if another group took the block at once; NULL disarms. */
void mem_pool_on_release(mem_pool *p, void (*fn)(void *arg, void *ptr, size_t bytes), void *arg);

/*
 * A kind of device, as the run decides by it. Every decision that depends
 * on the kind reads a field here; no code compares kind names (to add a
 * kind: docs/design.md, "How to add a device kind").
 */
typedef struct device_kind {
    const char *name;          /* cohort_device_info.kind: "cpu", "cuda" */
    /* A logical part takes its share of the physical device's cores
     * (devices_split), its threads are bound to them (device_bind_thread),
     * its models use no more than those (run_device_cores), and a fused
     * group on it is cut into one sub-group per core. */
    int shares_cores;
    /* The environment variable that shows a worker process only its
     * device, as the backend's device 0 (NULL: none is needed). */
    const char *visible_env;
    /* Rough training throughput in FLOP/s, to balance work over devices:
     * flops + flops_per_core * the cores the device may use. */
    double flops, flops_per_core;
    /* The auto strategy fuses same-shaped models that share such a device
     * (a GPU: one launch for the group instead of one per model). */
    int auto_fuse;
    /* Under MPI, the node's devices of this kind are dealt out among its
     * ranks, each rank training on its own. */
    int dealt_to_ranks;
    /* Device memory the default limit keeps out of the pool, of free_bytes
     * free at discovery: what the runtime takes beside the pools (NULL:
     * none; a GPU: gpu_headroom). */
    uint64_t (*headroom)(uint64_t free_bytes);
    /* Device memory each training context (one per job: a model or a fused
     * group) takes from the device's pool beside its group's slab, on a
     * device of total_bytes (NULL: none; a GPU: gpu_ctx_bytes). The planner
     * counts it for every job it places there. */
    uint64_t (*ctx_bytes)(uint64_t total_bytes);
    /* What runs a device's models, for `cohort devices`: the backend's own
     * kernels and why (NULL where the kind has no such choice). */
    const char *(*kernels)(void);
    const char *(*kernels_why)(void);
} device_kind;

extern const device_kind device_kind_cpu, device_kind_cuda;

typedef struct cohort_device {
    cohort_device_info info;
    const device_kind *kind; /* info.kind is kind->name */
    const backend_ops *be;
    int be_dev;            /* the backend's index of the physical device */
    int parent;            /* index of the physical device in the registry */
    int core_begin;        /* CPU: first core of this device's share */
    mem_pool *mem_pool;     /* NULL for a physical device that was split */
} cohort_device;

#define COHORT_MAX_DEVICES 64

/* The registry is the public cohort_devices handle. */
struct cohort_devices {
    int n;
    cohort_device dev[COHORT_MAX_DEVICES];
    char gpu_note[512];    /* why no GPU is listed, when none is */
    cpu_set_t cpus;        /* the cores the process may run on, at discovery */
    int cpus_known;        /* cpus was read (sched_getaffinity) */
};
typedef struct cohort_devices device_registry;

/* Discover the CPU (and GPUs, through a short-lived child process, so that
 * this process never initializes CUDA). */
cohort_status devices_discover(device_registry **out, cohort_error *err);
/* Append a "gpu:N" device (kind "cuda", a grow pool limited to the memory
 * free at discovery less gpu_headroom) for each GPU the CUDA plugin sees, asked in a child
 * process; with none, set r->gpu_note to why. Never fails. (discover_gpu.c) */
void devices_discover_gpus(device_registry *r);
/* Device memory a GPU's default limit keeps out of its pool, of `free_bytes`
 * free at discovery: what a training process takes beside its pools (see
 * discover_gpu.c). */
uint64_t gpu_headroom(uint64_t free_bytes);
/* Device memory a worker process (strategy processes) takes on a GPU of
 * total_bytes beside its group and its group's context bytes: its own CUDA
 * context (see discover_gpu.c). */
uint64_t gpu_worker_bytes(uint64_t total_bytes);
/* Device memory a context takes on a GPU of total_bytes beside its group's
 * slab: the reductions' scratch and cuBLAS's workspace (cuda_plugin.h). */
uint64_t gpu_ctx_bytes(uint64_t total_bytes);
/* What a training context takes on d beside its group (d->kind->ctx_bytes
 * of the physical device's memory; 0 on a CPU). */
uint64_t device_ctx_bytes(const cohort_device *d);
/* A worker process's copy of a preallocated GPU pool, lowered to the one
 * job it trains (nothing in use, no slab taken yet): each worker takes a
 * slab of its own. */
void pool_shrink(mem_pool *p, uint64_t limit);
void devices_free(device_registry *r);
/* The device named `name` ("cpu:0", "gpu:1/0"), or NULL. */
cohort_device *devices_find(device_registry *r, const char *name);
/*
 * Split physical device `name` into n logical devices `name/0` .. `name/n-1`
 * with hard limits sizes[i] (bytes). CPU parts share the cores out. Fails
 * when the parts add up to more than the device has, or it is split already.
 */
cohort_status devices_split(device_registry *r, const char *name, const uint64_t *sizes, int n,
                            cohort_mem_policy policy, cohort_error *err);
/* Set the memory policy and, when limit > 0, the hard limit of an unsplit
 * device (or of every part of a split one, with limit 0). */
cohort_status devices_set_policy(device_registry *r, const char *name, cohort_mem_policy policy,
                                 uint64_t limit, cohort_error *err);
/* Devices models may be placed on: logical parts, or unsplit physical ones. */
int devices_usable(const device_registry *r, int *idx, int max);

/*
 * Bind the calling thread to the cores of d where d is a part of a split
 * CPU: its share of the cores the process may run on (cpus), from its
 * core_begin. Its models then run there, and so do the pool threads they
 * start, which inherit the binding. Returns 1, with the thread's binding
 * before in *saved for device_unbind_thread; 0 where nothing was bound (d
 * is not a CPU part, or the system refused).
 */
int device_bind_thread(const device_registry *r, const cohort_device *d, cpu_set_t *saved);
/* The cores device_bind_thread binds d's threads to, in *part; their count
 * (0: d is not a CPU part, or the process's cores were not read). */
int device_part_cores(const device_registry *r, const cohort_device *d, cpu_set_t *part);
void device_unbind_thread(int bound, const cpu_set_t *saved);

#endif
