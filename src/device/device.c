/*
 * The device registry (device.h): discovery of the CPU (the GPUs in
 * discover_gpu.c), the device kinds, splits into logical devices with
 * their memory policies, and binding a thread to a CPU part's cores.
 */
#include "backend/backend_impl.h"
#include "backend/cpu/cpu.h"
#include "device/device.h"
#include "util/util.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const device_kind device_kind_cpu = {
    .name = "cpu",
    .shares_cores = 1,
    .flops_per_core = 5e10,
    .kernels = backend_cpu_kernels,
    .kernels_why = backend_cpu_kernels_why,
};

const device_kind device_kind_cuda = {
    .name = "cuda",
    .visible_env = "CUDA_VISIBLE_DEVICES",
    .flops = 2e13,
    .auto_fuse = 1,
    .dealt_to_ranks = 1,
    .headroom = gpu_headroom,
    .ctx_bytes = gpu_ctx_bytes,
};

uint64_t device_ctx_bytes(const cohort_device *d)
{
    return d->kind->ctx_bytes ? d->kind->ctx_bytes(d->info.total_bytes) : 0;
}

static void cpu_model_name(char *buf, size_t n)
{
    str_copy(buf, n, "CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *colon = strchr(line, ':');
            if (colon) {
                colon++;
                while (*colon == ' ')
                    colon++;
                colon[strcspn(colon, "\n")] = 0;
                str_copy(buf, n, colon);
            }
            break;
        }
    }
    fclose(f);
}

static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    uint64_t kb = 0;
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %lu kB", &kb) == 1)
                break;
        fclose(f);
    }
    return kb * 1024;
}

cohort_status devices_discover(device_registry **out, cohort_error *err)
{
    *out = NULL;
    device_registry *r = calloc(1, sizeof *r);
    if (!r)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory listing devices");
    cohort_device *d = &r->dev[r->n++];
    str_copy(d->info.name, sizeof d->info.name, "cpu:0");
    d->kind = &device_kind_cpu;
    str_copy(d->info.kind, sizeof d->info.kind, d->kind->name);
    cpu_model_name(d->info.model, sizeof d->info.model);
    /* The cores this process may run on (taskset, a container's cpuset,
     * a batch system's binding), where it may use fewer than are online. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    CPU_ZERO(&r->cpus);
    if (sched_getaffinity(0, sizeof r->cpus, &r->cpus) == 0 && CPU_COUNT(&r->cpus) > 0) {
        r->cpus_known = 1;
        if (cores <= 0 || CPU_COUNT(&r->cpus) < cores)
            cores = CPU_COUNT(&r->cpus);
    }
    d->info.threads = cores > 0 ? (int)cores : 1;
    d->info.total_bytes = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    d->info.free_bytes = mem_available();
    d->info.limit_bytes = d->info.total_bytes;
    d->be = backend_cpu();
    d->parent = 0;
    cohort_status st = mem_pool_create(d->info.name, d->be, 0, d->info.limit_bytes, COHORT_MEM_GROW,
                                   &d->mem_pool, err);
    if (st) {
        devices_free(r);
        return st;
    }
    devices_discover_gpus(r);
    *out = r;
    return COHORT_OK;
}

void devices_free(device_registry *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n; i++)
        mem_pool_free(r->dev[i].mem_pool);
    free(r);
}

cohort_device *devices_find(device_registry *r, const char *name)
{
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->dev[i].info.name, name) == 0)
            return &r->dev[i];
    /* "cpu" and "gpu" alone mean device 0. */
    if (strcmp(name, "cpu") == 0)
        return devices_find(r, "cpu:0");
    if (strcmp(name, "gpu") == 0)
        return devices_find(r, "gpu:0");
    return NULL;
}

int devices_usable(const device_registry *r, int *idx, int max)
{
    int n = 0;
    for (int i = 0; i < r->n && n < max; i++)
        if (r->dev[i].mem_pool)
            idx[n++] = i;
    return n;
}

static int is_part_of(const device_registry *r, int i, int parent)
{
    return r->dev[i].info.is_logical && r->dev[i].parent == parent;
}

cohort_status devices_split(device_registry *r, const char *name, const uint64_t *sizes, int n,
                            cohort_mem_policy policy, cohort_error *err)
{
    cohort_device *d = devices_find(r, name);
    char a[32], b[32];
    if (!d || d->info.is_logical)
        return cohort_fail(err, COHORT_ERR_INPUT, "no physical device '%s' to split", name);
    int parent = (int)(d - r->dev);
    if (!d->mem_pool)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s is split already", name);
    if (n < 1 || r->n + n > COHORT_MAX_DEVICES)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: cannot split into %d parts", name, n);
    uint64_t total = 0, have = d->info.limit_bytes;
    for (int i = 0; i < n; i++) {
        if (sizes[i] == 0)
            return cohort_fail(err, COHORT_ERR_INPUT, "%s: part %d of the split has size 0", name, i);
        /* Compared before adding: a sum past 2^64 would wrap to a small one. */
        if (sizes[i] > have - total)
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s: the split adds up to more than the %s the device has (part "
                               "%d alone is %s)",
                               name, format_bytes(have, b, sizeof b), i,
                               format_bytes(sizes[i], a, sizeof a));
        total += sizes[i];
    }
    int base = r->n;
    for (int i = 0; i < n; i++) {
        cohort_device *p = &r->dev[r->n];
        *p = *d;
        p->mem_pool = NULL;
        snprintf(p->info.name, sizeof p->info.name, "%.20s/%d", d->info.name, i % 1000);
        p->info.is_logical = 1;
        p->info.limit_bytes = sizes[i];
        p->info.policy = policy;
        p->parent = parent;
        if (d->kind->shares_cores) {
            /* Each part gets its share of the cores, at least one. */
            int cores = d->info.threads;
            int first = (int)((long)cores * i / n), next = (int)((long)cores * (i + 1) / n);
            p->core_begin = first;
            p->info.threads = next > first ? next - first : 1;
        }
        cohort_status st =
            mem_pool_create(p->info.name, p->be, p->be_dev, sizes[i], policy, &p->mem_pool, err);
        if (st) {
            for (int j = base; j < r->n; j++)
                mem_pool_free(r->dev[j].mem_pool);
            r->n = base;
            return st;
        }
        r->n++;
    }
    mem_pool_free(d->mem_pool);
    d->mem_pool = NULL;
    return COHORT_OK;
}

cohort_status devices_set_policy(device_registry *r, const char *name, cohort_mem_policy policy,
                                 uint64_t limit, cohort_error *err)
{
    cohort_device *d = devices_find(r, name);
    char a[32], b[32];
    if (!d)
        return cohort_fail(err, COHORT_ERR_INPUT, "no device '%s'", name);
    if (!d->mem_pool) {
        int parent = (int)(d - r->dev);
        for (int i = 0; i < r->n; i++)
            if (is_part_of(r, i, parent)) {
                cohort_status st = devices_set_policy(r, r->dev[i].info.name, policy, 0, err);
                if (st)
                    return st;
            }
        return COHORT_OK;
    }
    uint64_t have = d->info.is_logical ? d->info.limit_bytes : d->info.total_bytes;
    if (limit > have)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: memory_limit %s is more than its %s", name,
                           format_bytes(limit, a, sizeof a), format_bytes(have, b, sizeof b));
    /* A GPU's memory is what was free at discovery, less what CUDA itself
     * takes (gpu_headroom): a limit above it would fail at run time. */
    uint64_t keep = d->kind->headroom ? d->kind->headroom(d->info.free_bytes) : 0;
    uint64_t usable = d->info.free_bytes - keep;
    if (!d->info.is_logical && d->kind->headroom && limit > usable) {
        char c[32], h[32];
        cohort_log(COHORT_LOG_WARN,
                   "%s: memory_limit %s is more than the %s it can give (%s free at discovery, "
                   "less %s for CUDA's own use); the limit is %s",
                   name, format_bytes(limit, a, sizeof a), format_bytes(usable, b, sizeof b),
                   format_bytes(d->info.free_bytes, c, sizeof c),
                   format_bytes(keep, h, sizeof h),
                   format_bytes(usable, b, sizeof b));
        limit = usable;
    }
    if (limit == 0)
        limit = mem_pool_limit(d->mem_pool);
    if (mem_pool_in_use(d->mem_pool))
        return cohort_fail(err, COHORT_ERR_USAGE, "%s: its pool is in use", name);
    mem_pool *np;
    cohort_status st = mem_pool_create(d->info.name, d->be, d->be_dev, limit, policy, &np, err);
    if (st)
        return st;
    mem_pool_free(d->mem_pool);
    d->mem_pool = np;
    d->info.limit_bytes = limit;
    d->info.policy = policy;
    return COHORT_OK;
}

/* ---- the public handle --------------------------------------------------- */

cohort_status cohort_devices_discover(cohort_devices **out, cohort_error *err)
{
    if (!out)
        return cohort_fail(err, COHORT_ERR_USAGE, "cohort_devices_discover: out is NULL");
    return devices_discover(out, err);
}

void cohort_devices_free(cohort_devices *d) { devices_free(d); }

int cohort_devices_count(const cohort_devices *d) { return d ? d->n : 0; }

cohort_status cohort_devices_info(const cohort_devices *d, int i, cohort_device_info *out)
{
    if (!d || !out || i < 0 || i >= d->n)
        return COHORT_ERR_USAGE;
    *out = d->dev[i].info;
    if (d->dev[i].mem_pool)
        out->limit_bytes = mem_pool_limit(d->dev[i].mem_pool);
    return COHORT_OK;
}

cohort_status cohort_devices_split(cohort_devices *d, const char *name, const uint64_t *sizes,
                                   int n, cohort_mem_policy policy, cohort_error *err)
{
    if (!d || !name || (n > 0 && !sizes))
        return cohort_fail(err, COHORT_ERR_USAGE, "cohort_devices_split: invalid arguments");
    if (policy != COHORT_MEM_GROW && policy != COHORT_MEM_PREALLOCATE)
        return cohort_fail(err, COHORT_ERR_USAGE,
                           "cohort_devices_split: policy %d is not a cohort_mem_policy", (int)policy);
    return devices_split(d, name, sizes, n, policy, err);
}

cohort_status cohort_devices_set_policy(cohort_devices *d, const char *name,
                                        cohort_mem_policy policy, uint64_t limit, cohort_error *err)
{
    if (!d || !name)
        return cohort_fail(err, COHORT_ERR_USAGE, "cohort_devices_set_policy: invalid arguments");
    if (policy != COHORT_MEM_GROW && policy != COHORT_MEM_PREALLOCATE)
        return cohort_fail(err, COHORT_ERR_USAGE,
                           "cohort_devices_set_policy: policy %d is not a cohort_mem_policy",
                           (int)policy);
    return devices_set_policy(d, name, policy, limit, err);
}

const char *cohort_devices_note(const cohort_devices *d) { return d ? d->gpu_note : ""; }

int device_part_cores(const device_registry *r, const cohort_device *d, cpu_set_t *part)
{
    CPU_ZERO(part);
    if (!d->info.is_logical || !d->kind->shares_cores || !r->cpus_known)
        return 0;
    /* The allowed cores numbered core_begin on, in order. */
    int seen = 0, taken = 0;
    for (int c = 0; c < CPU_SETSIZE && taken < d->info.threads; c++) {
        if (!CPU_ISSET(c, &r->cpus))
            continue;
        if (seen++ >= d->core_begin) {
            CPU_SET(c, part);
            taken++;
        }
    }
    return taken;
}

int device_bind_thread(const device_registry *r, const cohort_device *d, cpu_set_t *saved)
{
    cpu_set_t part;
    if (device_part_cores(r, d, &part) == 0 ||
        pthread_getaffinity_np(pthread_self(), sizeof *saved, saved) != 0)
        return 0;
    return pthread_setaffinity_np(pthread_self(), sizeof part, &part) == 0;
}

void device_unbind_thread(int bound, const cpu_set_t *saved)
{
    if (bound)
        pthread_setaffinity_np(pthread_self(), sizeof *saved, saved);
}
