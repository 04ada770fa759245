/*
 * A device's memory pool (device.h): every byte a group takes on a device,
 * from the backend's allocator, under a hard limit, grown per allocation or
 * carved from one preallocated slab.
 */
#include "backend/backend_impl.h"
#include "device/device.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

typedef struct block {
    size_t off, size; /* PREALLOCATE: offset in the slab */
    void *ptr;
    int used;
} block;

struct mem_pool {
    char name[64];
    const backend_ops *be;
    int dev;
    uint64_t limit, in_use, peak;
    uint64_t kept;    /* GROW on a device: bytes of freed blocks kept for reuse */
    cohort_mem_policy policy;
    char *slab;       /* PREALLOCATE only */
    block *blocks;    /* GROW: live allocations; PREALLOCATE: the slab's blocks in order */
    int n_blocks, cap_blocks;
    int fail_countdown;
    void (*on_release)(void *arg, void *ptr, size_t bytes); /* mem_pool_on_release */
    void *on_release_arg;
    pthread_mutex_t lock;
};

static size_t round_up(size_t n) { return (n + 63) / 64 * 64; }

static int blocks_reserve(mem_pool *p, int extra)
{
    if (p->n_blocks + extra <= p->cap_blocks)
        return 0;
    int cap = p->cap_blocks ? p->cap_blocks * 2 : 16;
    while (cap < p->n_blocks + extra)
        cap *= 2;
    block *b = realloc(p->blocks, (size_t)cap * sizeof *b);
    if (!b)
        return -1;
    p->blocks = b;
    p->cap_blocks = cap;
    return 0;
}

cohort_status mem_pool_create(const char *name, const backend_ops *be, int dev, uint64_t limit,
                          cohort_mem_policy policy, mem_pool **out, cohort_error *err)
{
    *out = NULL;
    mem_pool *p = calloc(1, sizeof *p);
    if (!p)
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory creating its pool", name);
    str_copy(p->name, sizeof p->name, name);
    p->be = be;
    p->dev = dev;
    p->limit = limit;
    p->policy = policy;
    pthread_mutex_init(&p->lock, NULL);
    /* A GPU's slab is taken when the first model starts, in the process that
     * trains: CUDA memory does not survive fork, and the parent must not
     * start CUDA (rule 3). */
    if (policy == COHORT_MEM_PREALLOCATE && !be->host_memory) {
        if (blocks_reserve(p, 1)) {
            mem_pool_free(p);
            return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", name);
        }
        p->blocks[0] = (block){0, (size_t)limit, NULL, 0};
        p->n_blocks = 1;
    } else if (policy == COHORT_MEM_PREALLOCATE) {
        char buf[32];
        p->slab = limit ? be->mem_alloc(dev, (size_t)limit) : NULL;
        if (limit && !p->slab) {
            mem_pool_free(p);
            return cohort_fail(err, COHORT_ERR_NOMEM,
                               "%s: cannot preallocate %s; lower its memory or use policy grow",
                               name, format_bytes(limit, buf, sizeof buf));
        }
        if (blocks_reserve(p, 1)) {
            mem_pool_free(p);
            return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", name);
        }
        p->blocks[0] = (block){0, (size_t)limit, p->slab, 0};
        p->n_blocks = 1;
    }
    *out = p;
    return COHORT_OK;
}

void mem_pool_free(mem_pool *p)
{
    if (!p)
        return;
    if (p->policy == COHORT_MEM_PREALLOCATE) {
        if (p->slab)
            p->be->mem_free(p->dev, p->slab);
    } else {
        for (int i = 0; i < p->n_blocks; i++)
            p->be->mem_free(p->dev, p->blocks[i].ptr);
    }
    free(p->blocks);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

/* GROW on a device: free the kept block i (the pool's lock held). */
static void kept_drop(mem_pool *p, int i)
{
    p->be->mem_free(p->dev, p->blocks[i].ptr);
    p->kept -= p->blocks[i].size;
    p->blocks[i] = p->blocks[--p->n_blocks];
}

/*
 * GROW: a block of n bytes from the backend. On a device (CUDA) a released
 * block is kept for reuse, since cudaMalloc and cudaFree synchronize the
 * whole device and stall every other group's stream: a kept block of exactly
 * n bytes is taken again (groups of one plan ask for the same size, and the
 * peak stays the plan's), else kept blocks are freed, the largest first, until
 * n has room under the limit beside the blocks in use and those still kept.
 */
static void *grow_take(mem_pool *p, size_t n)
{
    for (int i = 0; i < p->n_blocks; i++)
        if (!p->blocks[i].used && p->blocks[i].size == n) {
            p->blocks[i].used = 1;
            p->kept -= n;
            return p->blocks[i].ptr;
        }
    while (p->kept && p->in_use + p->kept + n > p->limit) {
        int big = -1;
        for (int i = 0; i < p->n_blocks; i++)
            if (!p->blocks[i].used && (big < 0 || p->blocks[i].size > p->blocks[big].size))
                big = i;
        kept_drop(p, big);
    }
    if (blocks_reserve(p, 1))
        return NULL;
    void *ptr = p->be->mem_alloc(p->dev, n);
    if (!ptr && p->kept) { /* the device itself is short: give back what is kept */
        for (int i = p->n_blocks - 1; i >= 0; i--)
            if (!p->blocks[i].used)
                kept_drop(p, i);
        ptr = p->be->mem_alloc(p->dev, n);
    }
    if (ptr)
        p->blocks[p->n_blocks++] = (block){0, n, ptr, 1};
    return ptr;
}

/* First fit in the slab; splits the block it takes. Returns the pointer or NULL. */
static void *slab_take(mem_pool *p, size_t n)
{
    for (int i = 0; i < p->n_blocks; i++) {
        block *b = &p->blocks[i];
        if (b->used || b->size < n)
            continue;
        if (b->size > n) {
            if (blocks_reserve(p, 1))
                return NULL;
            b = &p->blocks[i];
            memmove(&p->blocks[i + 2], &p->blocks[i + 1],
                    (size_t)(p->n_blocks - i - 1) * sizeof *b);
            p->blocks[i + 1] = (block){b->off + n, b->size - n, p->slab + b->off + n, 0};
            p->n_blocks++;
            b->size = n;
        }
        b->used = 1;
        return b->ptr;
    }
    return NULL;
}

void *mem_pool_alloc(mem_pool *p, size_t bytes, mem_account *acct, const char *who,
                 cohort_error *err)
{
    size_t n = round_up(bytes ? bytes : 1);
    char need[32], left[32];
    pthread_mutex_lock(&p->lock);
    void *ptr = NULL;
    if (p->fail_countdown > 0 && --p->fail_countdown == 0) {
        pthread_mutex_unlock(&p->lock);
        cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory on %s (injected failure)", who,
                    p->name);
        return NULL;
    }
    if (p->in_use + n > p->limit) {
        uint64_t free_bytes = p->limit - p->in_use;
        pthread_mutex_unlock(&p->lock);
        cohort_fail(err, COHORT_ERR_NOMEM, "%s: needs %s on %s but only %s of its limit is free",
                    who, format_bytes(n, need, sizeof need), p->name,
                    format_bytes(free_bytes, left, sizeof left));
        return NULL;
    }
    if (p->policy == COHORT_MEM_PREALLOCATE) {
        if (!p->slab && p->limit) {
            p->slab = p->be->mem_alloc(p->dev, (size_t)p->limit);
            for (int i = 0; p->slab && i < p->n_blocks; i++)
                p->blocks[i].ptr = p->slab + p->blocks[i].off;
        }
        ptr = p->slab ? slab_take(p, n) : NULL;
    } else if (!p->be->host_memory) {
        ptr = grow_take(p, n);
    } else if (blocks_reserve(p, 1) == 0) {
        ptr = p->be->mem_alloc(p->dev, n);
        if (ptr)
            p->blocks[p->n_blocks++] = (block){0, n, ptr, 1};
    }
    if (!ptr) {
        int no_slab = p->policy == COHORT_MEM_PREALLOCATE && !p->slab;
        char slab[32];
        pthread_mutex_unlock(&p->lock);
        if (no_slab)
            cohort_fail(err, COHORT_ERR_NOMEM,
                        "%s: the device %s could not give its preallocated slab of %s (the "
                        "device is out of memory: lower its memory_limit)",
                        who, p->name, format_bytes(p->limit, slab, sizeof slab));
        else
            cohort_fail(err, COHORT_ERR_NOMEM, "%s: the device %s could not give %s (%s)", who,
                        p->name, format_bytes(n, need, sizeof need),
                        p->policy == COHORT_MEM_PREALLOCATE ? "its slab is fragmented"
                                                            : "the device is out of memory");
        return NULL;
    }
    p->in_use += n;
    if (p->in_use > p->peak)
        p->peak = p->in_use;
    if (acct) {
        acct->current += n;
        if (acct->current > acct->peak)
            acct->peak = acct->current;
    }
    pthread_mutex_unlock(&p->lock);
    return ptr;
}

void mem_pool_release(mem_pool *p, void *ptr, mem_account *acct)
{
    if (!ptr)
        return;
    size_t released = 0;
    pthread_mutex_lock(&p->lock);
    for (int i = 0; i < p->n_blocks; i++) {
        block *b = &p->blocks[i];
        if (b->ptr != ptr || !b->used)
            continue;
        released = b->size;
        p->in_use -= b->size;
        if (acct)
            acct->current -= b->size;
        if (p->policy == COHORT_MEM_GROW && !p->be->host_memory) {
            b->used = 0; /* kept for the next group of its size (grow_take) */
            p->kept += b->size;
        } else if (p->policy == COHORT_MEM_GROW) {
            released = 0; /* gone: nothing another group could take */
            p->be->mem_free(p->dev, ptr);
            p->blocks[i] = p->blocks[--p->n_blocks];
        } else {
            b->used = 0;
            /* Merge with free neighbours so the slab does not fragment. */
            if (i + 1 < p->n_blocks && !p->blocks[i + 1].used) {
                b->size += p->blocks[i + 1].size;
                memmove(&p->blocks[i + 1], &p->blocks[i + 2],
                        (size_t)(p->n_blocks - i - 2) * sizeof *b);
                p->n_blocks--;
            }
            if (i > 0 && !p->blocks[i - 1].used) {
                p->blocks[i - 1].size += b->size;
                memmove(&p->blocks[i], &p->blocks[i + 1],
                        (size_t)(p->n_blocks - i - 1) * sizeof *b);
                p->n_blocks--;
            }
        }
        break;
    }
    void (*hook)(void *, void *, size_t) = p->on_release;
    void *hook_arg = p->on_release_arg;
    pthread_mutex_unlock(&p->lock);
    if (hook && released)
        hook(hook_arg, ptr, released);
}

void pool_shrink(mem_pool *p, uint64_t limit)
{
    pthread_mutex_lock(&p->lock);
    if (!p->in_use && !p->slab && limit < p->limit) {
        p->limit = limit;
        if (p->policy == COHORT_MEM_PREALLOCATE && p->n_blocks == 1)
            p->blocks[0].size = (size_t)limit;
    }
    pthread_mutex_unlock(&p->lock);
}

uint64_t mem_pool_in_use(const mem_pool *p) { return p->in_use; }
uint64_t mem_pool_peak(const mem_pool *p) { return p->peak; }
uint64_t mem_pool_limit(const mem_pool *p) { return p->limit; }
cohort_mem_policy mem_pool_policy(const mem_pool *p) { return p->policy; }
uint64_t mem_pool_charge(uint64_t bytes) { return round_up((size_t)(bytes ? bytes : 1)); }

uint64_t mem_pool_largest_free(mem_pool *p)
{
    pthread_mutex_lock(&p->lock);
    uint64_t most = p->limit - p->in_use;
    if (p->policy == COHORT_MEM_PREALLOCATE) {
        most = 0;
        for (int i = 0; i < p->n_blocks; i++)
            if (!p->blocks[i].used && p->blocks[i].size > most)
                most = p->blocks[i].size;
    }
    pthread_mutex_unlock(&p->lock);
    return most;
}

void mem_pool_rebind(mem_pool *p, int dev)
{
    pthread_mutex_lock(&p->lock);
    p->dev = dev;
    pthread_mutex_unlock(&p->lock);
}

void mem_pool_on_release(mem_pool *p, void (*fn)(void *arg, void *ptr, size_t bytes), void *arg)
{
    pthread_mutex_lock(&p->lock);
    p->on_release = fn;
    p->on_release_arg = arg;
    pthread_mutex_unlock(&p->lock);
}

void mem_pool_fail_after(mem_pool *p, int n)
{
    pthread_mutex_lock(&p->lock);
    p->fail_countdown = n;
    pthread_mutex_unlock(&p->lock);
}
