/*
 * The CPU backend: GEMMs through OpenBLAS (split over the context's threads),
 * image layers from window.c, element-wise passes as plain loops
 * that gcc vectorizes (-O3 -fno-math-errno). Device memory is host memory.
 */
#include "backend/backend_impl.h"
#include "backend/cpu/cpu.h"
#include "backend/cpu/dense_step.h"
#include "backend/cpu/gemm_grid.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/norm_attn.h"
#include "backend/cpu/rnn_gemm.h"
#include "backend/cpu/team_solo.h"
#include "device/device.h"
#include "backend/cpu/window.h"
#include "util/util.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/*
 * A context's own threads, for the kernels that are not OpenBLAS's: the
 * runner gives a context `threads` cores; threads - 1 workers wait here and
 * the caller is one more. One job at a time, cut into parts when it is
 * posted; team_run returns once every part is done. Workers spin a while on
 * the job word before they sleep: on a virtual machine, waking a sleeping
 * thread took longer than most of the jobs (a two-thread run ran at half
 * the speed of one thread).
 *
 * Parts are claimed, not assigned: every thread, the caller too, takes its
 * own part first (the same rows every job: they stay in its core's cache),
 * then any part still unclaimed, and the caller then waits only for parts
 * that were claimed. A worker that has not yet seen the job (its
 * core lent to another process, on a shared machine) leaves its parts to
 * the others instead of holding the caller until it is scheduled again:
 * with a parallel compile beside it, a 2-thread run had been 3.7 times
 * slower than a 1-thread one. A part is a function of (part, parts) alone,
 * never of the thread that runs it, so the results do not change.
 *
 * Helpers: a thread of the runner with nothing left to start joins a
 * running context (help_join, help_run) and claims parts of its jobs from
 * the next job on, until the context is freed; the number of parts counts
 * it from the next job on. The kernels split on tile boundaries, which
 * changes no sum: the results are the same with or without helpers.
 */
#define POOL_MAX 64
#define POOL_SPINS 4000 /* pause instructions before a worker sleeps: ~0.1 ms */
#define WAIT_SPINS 2000 /* pauses before a waiting caller yields its core */
#define JOB_PARTS(word) ((int)((word) & 0xffff))
typedef void (*team_fn)(void *arg, int part, int parts);

struct backend_ctx {
    cpu_isa isa;
    pthread_t worker[POOL_MAX];
    int n_workers;
    pthread_mutex_t mu;
    pthread_cond_t go;
    int sleepers;           /* threads waiting on go, under mu */
    _Atomic uint64_t job;   /* job number << 16 | parts, stored (release) after fn and arg */
    _Atomic uint64_t taken[POOL_MAX + 1]; /* per part: the last job number that claimed it */
    _Atomic int done;       /* parts of the job finished */
    _Atomic int quit;
    _Atomic int helpers;    /* helpers that joined: counted in the parts of later jobs */
    _Atomic int helpers_in; /* helpers that have not yet left for good */
    uint64_t help_seen[POOL_MAX]; /* the job word when each helper joined */
    team_fn fn;
    void *arg;
    /* The caller's own (one thread posts a context's jobs): see team_run. */
    team_solo solo; /* the fallback for a preempted worker (team_solo.h) */
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* The next job word after `seen`, or `seen` when the pool quits. */
static uint64_t team_wait(backend_ctx *c, uint64_t seen)
{
    for (int spin = 0; spin < POOL_SPINS; spin++) {
        uint64_t j = atomic_load_explicit(&c->job, memory_order_acquire);
        if (j != seen || atomic_load_explicit(&c->quit, memory_order_acquire))
            return j;
        cpu_relax();
    }
    pthread_mutex_lock(&c->mu);
    c->sleepers++;
    uint64_t j;
    while ((j = atomic_load_explicit(&c->job, memory_order_acquire)) == seen &&
           !atomic_load_explicit(&c->quit, memory_order_acquire))
        pthread_cond_wait(&c->go, &c->mu);
    c->sleepers--;
    pthread_mutex_unlock(&c->mu);
    return j;
}

/*
 * Part p of job `id`, if no one has claimed it yet: each slot holds the last
 * job that took its part, and job numbers only grow, so a thread still on
 * an older job (the job ended, and another may be posted) finds every slot
 * of its job past its number and claims nothing. fn and arg are read only
 * after a claim: while a claimed part runs, the caller waits, so they are
 * still this job's.
 */
static void team_try(backend_ctx *c, uint64_t id, int p, int parts)
{
    uint64_t v = atomic_load_explicit(&c->taken[p], memory_order_relaxed);
    while (v < id)
        if (atomic_compare_exchange_weak_explicit(&c->taken[p], &v, id, memory_order_acq_rel,
                                                  memory_order_relaxed)) {
            c->fn(c->arg, p, parts);
            atomic_fetch_add_explicit(&c->done, 1, memory_order_release);
            return;
        }
}

/* Parts of job `word`: the thread's own part `mine` first (the same part
 * of every job, so its rows stay in this core's cache), then any left. */
static void team_claim(backend_ctx *c, uint64_t word, int mine)
{
    uint64_t id = word >> 16;
    int parts = JOB_PARTS(word);
    if (mine < parts)
        team_try(c, id, mine, parts);
    for (int p = 0; p < parts; p++)
        team_try(c, id, p, parts);
}

/* Claim parts of every job posted after `seen`, own part `mine` first,
 * until the pool quits. */
static void team_serve(backend_ctx *c, int mine, uint64_t seen)
{
    unsigned fp = fp_flush_denormals(); /* as the caller trains (group_fit) */
    for (;;) {
        uint64_t j = team_wait(c, seen);
        if (j == seen)
            break; /* quit */
        seen = j;
        team_claim(c, j, mine);
    }
    fp_restore(fp);
}

typedef struct worker_arg {
    backend_ctx *c;
    int part;
} worker_arg;

static void *team_worker(void *p)
{
    worker_arg a = *(worker_arg *)p;
    free(p);
    team_serve(a.c, a.part, 0);
    return NULL;
}

/* Jobs below this many multiply-adds run on the calling thread alone: waking
 * a worker costs more than it saves. */
#define POOL_MIN_WORK 1e6

static void team_run(backend_ctx *c, team_fn fn, void *arg, double work)
{
    int parts = 1 + c->n_workers + atomic_load(&c->helpers);
    if (parts == 1 || work < POOL_MIN_WORK) {
        fn(arg, 0, 1);
        return;
    }
    double t0 = now_seconds();
    if (team_solo_now(&c->solo, t0)) {
        for (int p = 0; p < parts; p++)
            fn(arg, p, parts);
        return;
    }
    c->fn = fn;
    c->arg = arg;
    atomic_store_explicit(&c->done, 0, memory_order_relaxed);
    uint64_t id = (atomic_load_explicit(&c->job, memory_order_relaxed) >> 16) + 1;
    uint64_t word = id << 16 | (uint64_t)parts;
    atomic_store_explicit(&c->job, word, memory_order_release);
    /* A thread about to sleep holds mu while it looks at job once more, so
     * it either sees the new job or is counted in sleepers here. */
    pthread_mutex_lock(&c->mu);
    if (c->sleepers)
        pthread_cond_broadcast(&c->go);
    pthread_mutex_unlock(&c->mu);
    team_claim(c, word, parts - 1);
    /* Every part is claimed; wait for those still running elsewhere. A
     * claimer whose core was taken runs again sooner where this thread
     * yields its own. */
    double t1 = 0.0;
    for (int spin = 0; atomic_load_explicit(&c->done, memory_order_acquire) < parts; spin++) {
        if (spin < WAIT_SPINS) {
            cpu_relax();
            continue;
        }
        sched_yield();
        if (t1 == 0.0)
            t1 = now_seconds(); /* about when the wait began: WAIT_SPINS is short */
    }
    if (t1 == 0.0)
        return;
    team_solo_after_wait(&c->solo, t1, now_seconds());
}

void cpu_team_run(backend_ctx *c, void (*fn)(void *, int, int), void *arg, double work)
{
    team_run(c, fn, arg, work);
}

/* A helper counts itself in (while the runner keeps c alive): its slot, or
 * -1 where c has no kernels to share. */
static int cpu_help_join(backend_ctx *c)
{
    if (c->isa == ISA_NONE || atomic_load(&c->helpers) >= POOL_MAX - c->n_workers)
        return -1;
    uint64_t seen = atomic_load(&c->job); /* the job running now is left to its threads */
    atomic_fetch_add(&c->helpers_in, 1);
    int h = atomic_load(&c->helpers);
    c->help_seen[h] = seen;
    atomic_store(&c->helpers, h + 1); /* joins are serialized by the runner's lock */
    return h;
}

/* The helper in slot h works c's jobs until c is freed. */
static void cpu_help_run(backend_ctx *c, int h)
{
    team_serve(c, c->n_workers + h, c->help_seen[h]);
    atomic_fetch_sub(&c->helpers_in, 1); /* the last touch of c */
}

static void cpu_ctx_free(backend_ctx *c)
{
    if (!c)
        return;
    atomic_store_explicit(&c->quit, 1, memory_order_release);
    pthread_mutex_lock(&c->mu);
    pthread_cond_broadcast(&c->go);
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < c->n_workers; i++)
        pthread_join(c->worker[i], NULL);
    while (atomic_load(&c->helpers_in) > 0)
        cpu_relax(); /* helpers leave at once: they saw quit */
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->go);
    free(c);
}

static cohort_status cpu_ctx_create(int device, int threads, backend_ctx **out, cohort_error *err)
{
    (void)device;
    backend_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory creating a CPU context");
    c->isa = cpu_isa_detect();
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->go, NULL);
    /* Workers only where a kernel of ours will use them. */
    int want = c->isa != ISA_NONE && threads > 1 ? threads - 1 : 0;
    for (int i = 0; i < want && i < POOL_MAX; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (!a)
            break;
        a->c = c;
        a->part = i;
        if (pthread_create(&c->worker[i], NULL, team_worker, a) != 0) {
            free(a);
            break;
        }
        c->n_workers++;
    }
    *out = c;
    return COHORT_OK;
}

static void *cpu_mem_alloc(int device, size_t bytes)
{
    (void)device;
    return mem_alloc_big(bytes); /* a model's pool: huge pages from 1 MiB on */
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

typedef struct rows_job {
    float *dst;
    const float *x;
    const uint8_t *x8;
    const int64_t *idx;
    size_t dst_stride, idx_stride, dim;
    int rows, count;
} rows_job;

/* The bytes of source rows a gather asks for ahead of the row it copies. */
#define GATHER_AHEAD_BYTES 8192

/* Every cache line of the source row of problem k's row r. */
static void prefetch_row(const rows_job *j, int k, int r, size_t row_bytes)
{
    size_t at = (size_t)j->idx[k * j->idx_stride + (size_t)r] * j->dim;
    const char *src = j->x ? (const char *)(j->x + at) : (const char *)(j->x8 + at);
    for (size_t b = 0; b < row_bytes; b += 64)
        __builtin_prefetch(src + b, 0, 3);
}

/*
 * One part's rows of every problem. The rows are random ones of a dataset
 * larger than the caches, and each is a few lines that the hardware
 * prefetcher finds too late: fetched a few rows ahead, a batch of 64
 * Fashion-MNIST rows gathers in 12 us instead of 31 (2-core AMD EPYC).
 */
static void rows_part(void *p, int part, int parts)
{
    const rows_job *j = p;
    int r0, r1;
    part_range(j->rows, 1, part, parts, &r0, &r1);
    size_t row_bytes = j->dim * (j->x ? sizeof(float) : 1);
    int ahead = row_bytes ? (int)(GATHER_AHEAD_BYTES / row_bytes) : 0;
    ahead = ahead < 1 ? 1 : ahead > 8 ? 8 : ahead;
    for (int k = 0; k < j->count; k++) {
        for (int r = r0; r < r1 && r < r0 + ahead; r++)
            prefetch_row(j, k, r, row_bytes);
        for (int r = r0; r < r1; r++) {
            if (r + ahead < r1)
                prefetch_row(j, k, r + ahead, row_bytes);
            float *d = j->dst + k * j->dst_stride + (size_t)r * j->dim;
            size_t at = (size_t)j->idx[k * j->idx_stride + (size_t)r] * j->dim;
            if (j->x)
                memcpy(d, j->x + at, j->dim * sizeof(float));
            else
                host_row_of_bytes(d, j->x8 + at, j->dim);
        }
    }
}

/* The rows come from all over a dataset larger than the caches, so a big
 * gather is split: each thread's copies wait on memory at the same time. */
#define GATHER_MIN_SPLIT 32768

static void cpu_load_rows(backend_ctx *c, float *dst, size_t dst_stride, const float *x,
                          const uint8_t *x8, int64_t dim, const int64_t *idx, size_t idx_stride,
                          int rows, int count)
{
    rows_job j = {dst, x, x8, idx, dst_stride, idx_stride, (size_t)dim, rows, count};
    double n = (double)rows * (double)dim * count;
    team_run(c, rows_part, &j, n >= GATHER_MIN_SPLIT ? POOL_MIN_WORK : 0.0);
}

static void cpu_load_labels(backend_ctx *c, int32_t *dst, size_t dst_stride, const int32_t *y,
                            const int64_t *idx, size_t idx_stride, int rows, int count)
{
    (void)c;
    for (int k = 0; k < count; k++)
        for (int r = 0; r < rows; r++)
            dst[k * dst_stride + (size_t)r] = y[idx[k * idx_stride + (size_t)r]];
}

/*
 * Big products over the context's threads, where OpenBLAS runs on one
 * (backend_cpu_blas_threads): C is cut into a grid of tiles, each one
 * single-threaded cblas_sgemm owned by one part. The grid depends on the
 * shape alone, never on the number of parts, so every element of C comes
 * from the same call, with the same sums, whatever the thread count.
 * Smaller products are one tile; a group of them is split by problem.
 */

typedef struct gemm_job {
    int ta, tb, M, N, Kd, lda, ldb, ldc, count;
    float alpha, beta;
    const float *A, *B;
    float *C;
    size_t sA, sB, sC;
    int mb, nb, tile_m, tile_n; /* the grid: mb x nb tiles of tile_m x tile_n */
} gemm_job;


static int ceil_div(int a, int b) { return (a + b - 1) / b; }

/* What team_run counts for `count` products of M x N x Kd: their
 * multiply-adds and a fixed cost a problem (its call, its packing). A
 * Transformer's attention makes one batched product per head of 128
 * problems of 16 x 16 x 8 (2048 multiply-adds each): 22 us on one thread
 * (Zen 4), about 8000 multiply-adds' time a problem, so these ran on one
 * thread while the other waited. The split never changes a sum. */
#define GEMM_CALL_WORK 6144.0
static double gemm_work(int M, int N, int Kd, int count)
{
    return ((double)M * N * Kd + GEMM_CALL_WORK) * count;
}

/* The tiles of the product: gemm_grid.h. */
static void gemm_grid(gemm_job *j)
{
    gemm_grid_of(j->M, j->N, j->Kd, &j->mb, &j->nb, &j->tile_m, &j->tile_n);
}

/* One part's tiles, numbered problem by problem, rows of tiles first. */
static void gemm_part(void *p, int part, int parts)
{
    const gemm_job *j = p;
    int tiles = j->mb * j->nb, t0, t1;
    part_range(tiles * j->count, 1, part, parts, &t0, &t1);
    for (int t = t0; t < t1; t++) {
        int k = t / tiles, bi = t % tiles / j->nb, bj = t % tiles % j->nb;
        int m0 = bi * j->tile_m, n0 = bj * j->tile_n;
        int m = j->M - m0 < j->tile_m ? j->M - m0 : j->tile_m;
        int n = j->N - n0 < j->tile_n ? j->N - n0 : j->tile_n;
        /* A is M x Kd (Kd x M transposed), B is Kd x N (N x Kd transposed). */
        const float *A = j->A + k * j->sA + (j->ta ? (size_t)m0 : (size_t)m0 * j->lda);
        const float *B = j->B + k * j->sB + (j->tb ? (size_t)n0 * j->ldb : (size_t)n0);
        float *C = j->C + k * j->sC + (size_t)m0 * j->ldc + n0;
        cblas_sgemm(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans,
                    j->tb ? CblasTrans : CblasNoTrans, m, n, j->Kd, j->alpha, A, j->lda, B, j->ldb,
                    j->beta, C, j->ldc);
    }
}

/* The next run of units [*u, u1) within one model of `per` units: model *k,
 * its units [*a, *b); *u moves past them. */
static void next_span(int *u, int u1, int per, int *k, int *a, int *b)
{
    *k = *u / per;
    *a = *u % per;
    *b = *a + (u1 - *u) < per ? *a + (u1 - *u) : per;
    *u += *b - *a;
}

/*
 * Products with a short side, the layers after an MLP's first (a batch of
 * 64 through Dense(10) after Dense(128): C = X·Wᵀ is 64 x 10 x 128, the
 * input gradient dZ·W 64 x 128 x 10), go to the own small kernels where
 * kern_small_nn_suits and kern_small_nt_suits say they beat OpenBLAS (the
 * figures are in dense_step.c). They ran on the calling thread alone while
 * the others waited. The pool splits them by rows of C; each element is one
 * kernel's sum in order, so the split changes nothing.
 */
typedef struct small_job {
    cpu_isa isa;
    int nt, M, N, Kd, lda, ldb, ldc, count;
    const float *A, *B;
    float *C;
    size_t sA, sB, sC;
} small_job;

/* Row groups of C (DENSE_TILE_ROWS rows), problem by problem. */
static void small_part(void *p, int part, int parts)
{
    const small_job *j = p;
    int per = (j->M + DENSE_TILE_ROWS - 1) / DENSE_TILE_ROWS, u0, u1;
    part_range(per * j->count, 1, part, parts, &u0, &u1);
    while (u0 < u1) {
        int k, a, b;
        next_span(&u0, u1, per, &k, &a, &b);
        int m0 = a * DENSE_TILE_ROWS, m1 = b * DENSE_TILE_ROWS < j->M ? b * DENSE_TILE_ROWS : j->M;
        float *C = j->C + k * j->sC;
        const float *A = j->A + k * j->sA, *B = j->B + k * j->sB;
        if (j->nt)
            kern_small_nt(j->isa, C, (size_t)j->ldc, A, (size_t)j->lda, B, (size_t)j->ldb, m0, m1,
                          j->N, j->Kd);
        else
            kern_small_nn(j->isa, C, (size_t)j->ldc, A, (size_t)j->lda, B, (size_t)j->ldb, m0, m1,
                          j->N, j->Kd);
    }
}

/* 1 where the product went to the small kernels. */
static int small_gemm(backend_ctx *c, int ta, int tb, int M, int N, int Kd, float alpha,
                      const float *A, int lda, size_t sA, const float *B, int ldb, size_t sB,
                      float beta, float *C, int ldc, size_t sC, int count)
{
    if (ta || alpha != 1.0f || beta != 0.0f || Kd <= 0)
        return 0;
    if (tb ? !kern_small_nt_suits(c->isa, M, N, Kd, (size_t)ldb)
           : !kern_small_nn_suits(c->isa, N, Kd))
        return 0;
    small_job j = {c->isa, tb, M, N, Kd, lda, ldb, ldc, count, A, B, C, sA, sB, sC};
    team_run(c, small_part, &j, gemm_work(M, N, Kd, count));
    return 1;
}

/*
 * A·B with neither transposed and N a multiple of 16 (a dense layer's
 * input gradient dZ·W, past the first layer) goes to kern_gemm_own: each
 * element one sum over k in order, so its bits do not depend on the split.
 * One core, Zen 5, 64 x 512 x 256 (the 512-256 layer of a deeper MLP):
 * 188-200 GFLOP/s against OpenBLAS's SkylakeX kernels' 179-194; AVX2
 * kernels 114-119 against the Haswell kernels' 109 (figures in
 * bench/README). The pool takes columns by GEMM_PANEL (gemm_own's
 * panel), then rows by six as well where the columns give too few units
 * for the parts.
 */
typedef struct own_job {
    cpu_isa isa;
    int M, N, Kd, lda, ldb, ldc, count, rblocks, cblocks;
    const float *A, *B;
    float *C;
    size_t sA, sB, sC;
} own_job;

static void own_part(void *p, int part, int parts)
{
    const own_job *j = p;
    int per = j->rblocks * j->cblocks, u0, u1;
    part_range(per * j->count, 1, part, parts, &u0, &u1);
    int rows = ceil_div(ceil_div(j->M, j->rblocks), 6) * 6;
    for (int u = u0; u < u1; u++) {
        int k = u / per, rb = u % per / j->cblocks, cb = u % per % j->cblocks;
        int r0 = rb * rows, c0 = cb * GEMM_PANEL;
        int r1 = r0 + rows < j->M ? r0 + rows : j->M;
        int c1 = c0 + GEMM_PANEL < j->N ? c0 + GEMM_PANEL : j->N;
        if (r0 >= r1)
            continue;
        kern_gemm_own(j->isa, j->C + k * j->sC + (size_t)r0 * j->ldc + c0, (size_t)j->ldc,
                      j->A + k * j->sA + (size_t)r0 * j->lda, (size_t)j->lda, 1, j->B + k * j->sB + c0,
                      (size_t)j->ldb, r1 - r0, c1 - c0, j->Kd);
    }
}

/* 1 where the product went to kern_gemm_own. */
static int own_gemm(backend_ctx *c, int ta, int tb, int M, int N, int Kd, float alpha,
                    const float *A, int lda, size_t sA, const float *B, int ldb, size_t sB,
                    float beta, float *C, int ldc, size_t sC, int count)
{
    if (ta || tb || alpha != 1.0f || beta != 0.0f || Kd <= 0 || !gemm_own_ok(N))
        return 0;
    int parts = 1 + c->n_workers + atomic_load(&c->helpers);
    own_job j = {c->isa, M, N, Kd, lda, ldb, ldc, count, 1, ceil_div(N, GEMM_PANEL), A, B, C, sA,
                 sB, sC};
    while (j.rblocks * j.cblocks * count < 2 * parts && j.rblocks * 6 < M)
        j.rblocks *= 2;
    team_run(c, own_part, &j, gemm_work(M, N, Kd, count));
    return 1;
}

static void cpu_gemm(backend_ctx *c, int ta, int tb, int M, int N, int Kd, float alpha,
                     const float *A, int lda, size_t sA, const float *B, int ldb, size_t sB,
                     float beta, float *C, int ldc, size_t sC, int count)
{
    if (c->isa == ISA_NONE) { /* OpenBLAS threads each product itself */
        for (int k = 0; k < count; k++)
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                        tb ? CblasTrans : CblasNoTrans, M, N, Kd, alpha, A + k * sA, lda,
                        B + k * sB, ldb, beta, C + k * sC, ldc);
        return;
    }
    if (M <= 0 || N <= 0 || count <= 0)
        return;
    if (small_gemm(c, ta, tb, M, N, Kd, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, count) ||
        own_gemm(c, ta, tb, M, N, Kd, alpha, A, lda, sA, B, ldb, sB, beta, C, ldc, sC, count))
        return;
    gemm_job j = {ta, tb, M, N, Kd, lda, ldb, ldc, count, alpha, beta, A, B, C, sA, sB, sC,
                  0, 0, 0, 0};
    gemm_grid(&j);
    team_run(c, gemm_part, &j, gemm_work(M, N, Kd, count));
}

/*
 * The activations (bias_act, act_backward) over the context's threads:
 * each element's value depends on its own input alone (kernels.c's loops,
 * the math unit's functions whatever lane or tail computes them), so any
 * split of rows or of a run of values gives the same bits. A gelu over a
 * Transformer's 2048 x 128 feed-forward rows was one thread's loop.
 */
typedef struct act_job {
    float *Y;
    const float *bias, *Z;
    size_t sY, sb, sZ, n;
    int rows, cols, count;
    act_kind act;
} act_job;

/* Rows of bias_act, and values of act_backward, a part takes at least. */
#define ACT_UNIT_ROWS 8
#define ACT_UNIT 1024

/* The cost of an element in the multiply-adds that team_run counts: the
 * transcendental activations a few dozen, the others about one. */
static double act_work(act_kind act)
{
    return act == ACT_RELU || act == ACT_LINEAR || act == ACT_SOFTMAX ? 1.0 : 24.0;
}

static void bias_act_part(void *p, int part, int parts)
{
    const act_job *j = p;
    int u0, u1;
    part_range(j->rows * j->count, ACT_UNIT_ROWS, part, parts, &u0, &u1);
    while (u0 < u1) {
        int k, a, b;
        next_span(&u0, u1, j->rows, &k, &a, &b);
        kern_bias_act(j->Y + k * j->sY + (size_t)a * (size_t)j->cols,
                      j->bias ? j->bias + k * j->sb : NULL, b - a, j->cols, j->act);
    }
}

static void cpu_bias_act(backend_ctx *c, float *Y, size_t sY, const float *bias, size_t sb,
                         int rows, int cols, act_kind act, int count)
{
    act_job j = {.Y = Y, .bias = bias, .sY = sY, .sb = sb, .rows = rows, .cols = cols,
                 .count = count, .act = act};
    team_run(c, bias_act_part, &j, (double)rows * cols * count * act_work(act));
}

static void act_backward_part(void *p, int part, int parts)
{
    const act_job *j = p;
    int per = (int)((j->n + ACT_UNIT - 1) / ACT_UNIT), u0, u1;
    part_range(per * j->count, 1, part, parts, &u0, &u1);
    while (u0 < u1) {
        int k, a, b;
        next_span(&u0, u1, per, &k, &a, &b);
        size_t i0 = (size_t)a * ACT_UNIT, i1 = (size_t)b * ACT_UNIT < j->n ? (size_t)b * ACT_UNIT
                                                                           : j->n;
        kern_act_backward(j->Y + k * j->sY + i0, j->Z + k * j->sZ + i0, i1 - i0, j->act);
    }
}

static void cpu_act_backward(backend_ctx *c, float *d, size_t sd, const float *Y, size_t sY,
                             size_t n, act_kind act, int count)
{
    act_job j = {.Y = d, .Z = Y, .sY = sd, .sZ = sY, .n = n, .count = count, .act = act};
    team_run(c, act_backward_part, &j, (double)n * count * act_work(act));
}

static void cpu_bias_grad(backend_ctx *c, float *db, size_t sdb, const float *dZ, size_t sdZ,
                          int rows, int cols, int count)
{
    (void)c;
    for (int k = 0; k < count; k++)
        kern_bias_grad(db + k * sdb, dZ + k * sdZ, rows, cols);
}

typedef struct dropout_job {
    float *Y, *mask;
    const float *X, *rate;
    const uint64_t *key;
    size_t s, n;
    uint64_t counter0;
    int count;
} dropout_job;

/* Element i's mask hangs on its counter alone: any split gives the same. */
static void dropout_part(void *p, int part, int parts)
{
    const dropout_job *j = p;
    int blocks = (int)((j->n + 1023) / 1024), b0, b1;
    part_range(blocks, 1, part, parts, &b0, &b1);
    size_t e0 = (size_t)b0 * 1024, e1 = (size_t)b1 * 1024 < j->n ? (size_t)b1 * 1024 : j->n;
    for (int k = 0; k < j->count && e0 < e1; k++) {
        size_t o = k * j->s + e0;
        kern_dropout_fwd(j->Y + o, j->X + o, j->mask + o, e1 - e0, j->rate[k], j->key[k],
                         j->counter0 + e0);
    }
}

static void cpu_dropout_fwd(backend_ctx *c, float *Y, const float *X, float *mask, size_t s,
                            size_t n, const float *rate, const uint64_t *key, uint64_t counter0,
                            int count)
{
    dropout_job j = {Y, mask, X, rate, key, s, n, counter0, count};
    team_run(c, dropout_part, &j, 8.0 * (double)n * count); /* a hash is ~8 multiply-adds */
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

static void cpu_add(backend_ctx *c, float *Y, size_t sY, const float *A, size_t sA,
                    const float *B, size_t sB, size_t n, int count)
{
    (void)c;
    for (int k = 0; k < count; k++) {
        float *y = Y + k * sY;
        const float *a = A + k * sA, *b = B ? B + k * sB : NULL;
        if (!b)
            memmove(y, a, n * sizeof(float));
        else
            for (size_t i = 0; i < n; i++)
                y[i] = a[i] + b[i];
    }
}

static void cpu_loss(backend_ctx *c, const loss_step *o, float *Z, size_t sZ, const int32_t *y,
                     size_t sy, const float *t, size_t st, float *dZ, size_t sdZ, double *stats,
                     int rows, int cols, float grad_scale, int count)
{
    (void)c;
    for (int k = 0; k < count; k++) {
        loss_params p = {o->kind,         o->out_act,
                         o->metric,       o->smoothing[k],
                         o->delta[k],     o->class_weight ? o->class_weight + (size_t)k * o->n_cw : NULL,
                         o->n_cw};
        kern_loss(&p, Z + k * sZ, y ? y + k * sy : NULL, t ? t + k * st : NULL,
                  dZ ? dZ + k * sdZ : NULL, stats + STATS_PER_MODEL * k, rows, cols, grad_scale);
    }
}

static void cpu_optimize(backend_ctx *c, opt_kind kind, float *w, const float *g, float *s1,
                         float *s2, size_t s, size_t n, const optim_step *o, int count)
{
    (void)c;
    for (int k = 0; k < count; k++)
        if (o->active[k])
            kern_optimize(kind, w + k * s, g + k * s, s1 ? s1 + k * s : NULL,
                          s2 ? s2 + k * s : NULL, n, &o->sc[k]);
}

static void cpu_sum_sq(backend_ctx *c, double *acc, const float *x, size_t s, size_t n, int add,
                       int count)
{
    (void)c;
    for (int k = 0; k < count; k++)
        acc[k] = (add ? acc[k] : 0.0) + kern_sum_sq(x + k * s, n);
}

static void cpu_clip_norm(backend_ctx *c, float *x, size_t s, size_t n, const double *acc,
                          const float *cn, int count)
{
    (void)c;
    for (int k = 0; k < count; k++)
        if (cn[k] > 0.0f)
            kern_scale(x + k * s, n, clip_norm_factor(acc[k], cn[k]));
}

static void cpu_clip_value(backend_ctx *c, float *x, size_t s, size_t n, const float *cv,
                           int count)
{
    (void)c;
    for (int k = 0; k < count; k++)
        if (cv[k] > 0.0f)
            kern_clip_value(x + k * s, n, cv[k]);
}

static void cpu_reg_grad(backend_ctx *c, float *g, const float *w, size_t s, size_t n,
                         const float *l1, const float *l2, int count)
{
    (void)c;
    for (int k = 0; k < count; k++)
        if (l1[k] != 0.0f || l2[k] != 0.0f)
            kern_reg_grad(g + k * s, w + k * s, n, l1[k], l2[k]);
}

static void cpu_reg_penalty(backend_ctx *c, double *stats, const float *w, size_t s, size_t n,
                            const float *l1, const float *l2, int rows, int count)
{
    (void)c;
    for (int k = 0; k < count; k++) {
        if (l1[k] == 0.0f && l2[k] == 0.0f)
            continue;
        double p = (double)l2[k] * kern_sum_sq(w + k * s, n) +
                   (double)l1[k] * kern_sum_abs(w + k * s, n);
        stats[STATS_PER_MODEL * k + STAT_LOSS_SUM] += (double)rows * p;
        stats[STATS_PER_MODEL * k + STAT_BATCH_LOSS] += p;
    }
}


/*
 * Units [0, n) of a job dealt out a run at a time, so the parts end
 * together however fast each one runs: a split in equal halves left the
 * calling thread spinning for a tenth of a 2-thread step (one core is often
 * slower for a while, on a shared machine). Each part first takes runs of
 * its own share (part_range: the same units every job, so the rows of W and
 * of the optimizer's slots that a thread updates stay in its core's cache
 * for its next forward pass and step), then what is left of the other
 * parts' shares. Dealt from one counter, the units of a part moved from
 * core to core every job: a 2-thread step of the large seed model (512 x
 * 784) took as long as on one thread, its weights and slots fetched from
 * the other core's cache (AMD EPYC, Zen 5). A unit is a row group of W
 * (DENSE_TILE_ROWS rows) of one model, computed alone by the kernels, so
 * who takes it changes no result. next[p] counts the units taken of part
 * p's share. Returns 0 when none is left; else the run [*u0, *u1).
 */
static int deal(_Atomic int *next, int n, int part, int parts, int *u0, int *u1)
{
    int grab = n / (8 * parts) > 1 ? n / (8 * parts) : 1;
    for (int i = 0; i < parts; i++) {
        int p = (part + i) % parts, a, b;
        part_range(n, 1, p, parts, &a, &b);
        if (atomic_load_explicit(&next[p], memory_order_relaxed) >= b - a)
            continue;
        int u = a + atomic_fetch_add_explicit(&next[p], grab, memory_order_relaxed);
        if (u >= b)
            continue;
        *u0 = u;
        *u1 = u + grab < b ? u + grab : b;
        return 1;
    }
    return 0;
}

/* The arguments of one dense_step call, dealt over the pool by row groups of W. */
typedef struct dense_job {
    cpu_isa isa;
    float *W, *s1, *s2;
    size_t sW, sdZ, sX, ldd, ldx;
    const float *dZ, *X;
    int rows, n_out, n_in, count;
    const unsigned char *active;
    _Atomic int next[POOL_MAX + 1]; /* per part: row groups of its share taken (deal) */
    dense_update o[COHORT_MAX_GROUP];
} dense_job;

/* Row groups of W, of every active model, as long as there are any. */
static void dense_part(void *p, int part, int parts)
{
    dense_job *j = p;
    int per = (j->n_out + DENSE_TILE_ROWS - 1) / DENSE_TILE_ROWS, u0, u1;
    while (deal(j->next, per * j->count, part, parts, &u0, &u1))
        while (u0 < u1) {
            int k, a, b;
            next_span(&u0, u1, per, &k, &a, &b);
            if (!j->active[k])
                continue;
            int r1 = b * DENSE_TILE_ROWS < j->n_out ? b * DENSE_TILE_ROWS : j->n_out;
            size_t w = k * j->sW;
            kern_dense_step(j->isa, j->W + w, j->s1 ? j->s1 + w : NULL,
                            j->s2 ? j->s2 + w : NULL, j->dZ + k * j->sdZ, j->ldd,
                            j->X + k * j->sX, j->ldx, j->rows, j->n_in, a * DENSE_TILE_ROWS, r1,
                            &j->o[k]);
        }
}

static int cpu_fuses(backend_ctx *c, opt_kind kind)
{
    (void)c;
    return dense_fuses(kind);
}

static int cpu_dense_step(backend_ctx *c, opt_kind kind, float *W, float *s1, float *s2,
                          size_t sW, const float *dZ, int ldd, size_t sdZ, const float *X, int ldx,
                          size_t sX, int rows, int n_out, int n_in, const optim_step *o, int count)
{
    if (c->isa == ISA_NONE || count > COHORT_MAX_GROUP)
        return 0;
    dense_job j = {c->isa, W, s1, s2, sW, sdZ, sX, (size_t)ldd, (size_t)ldx, dZ, X, rows,
                   n_out, n_in, count, o->active, {0}, {{0}}};
    for (int k = 0; k < count; k++)
        j.o[k] = dense_update_of(kind, &o->sc[k]);
    team_run(c, dense_part, &j, (double)rows * n_out * n_in * count);
    return 1;
}

static int cpu_xt_ld(backend_ctx *c, int rows)
{
    return c->isa == ISA_NONE ? 0 : kern_dense_fwd_ld(c->isa, rows);
}

typedef struct transpose_job {
    cpu_isa isa;
    float *XT;
    const float *X;
    int ldt, ldx, rows, cols;
} transpose_job;

/* One part's columns of X, on multiples of 8 (the 8 x 8 blocks). */
static void transpose_part(void *p, int part, int parts)
{
    const transpose_job *j = p;
    int c0, c1;
    part_range(j->cols, 8, part, parts, &c0, &c1);
    if (c0 < c1)
        kern_transpose(j->isa, j->XT + (size_t)c0 * (size_t)j->ldt, (size_t)j->ldt, j->X + c0,
                       (size_t)j->ldx, j->rows, c1 - c0);
}

/* A copy, so it is split only when big: a batch of 64 Fashion-MNIST rows
 * (50,000 floats) took 0.02 ms, a tenth of a small model's step, alone on
 * the caller while the other threads waited. */
#define TRANSPOSE_MIN_SPLIT 32768

static void cpu_transpose(backend_ctx *c, float *XT, int ldt, const float *X, int ldx, int rows,
                          int cols)
{
    transpose_job j = {c->isa, XT, X, ldt, ldx, rows, cols};
    double n = (double)rows * cols;
    team_run(c, transpose_part, &j, n >= TRANSPOSE_MIN_SPLIT ? POOL_MIN_WORK : 0.0);
}

typedef struct fwd_job {
    cpu_isa isa;
    float *Y;
    const float *XT, *W;
    size_t sY, sXT, sW;
    int ldy, ldt, rows, n_out, n_in, count;
    _Atomic int next[POOL_MAX + 1]; /* per part: row groups of its share taken (deal) */
} fwd_job;

/* Row groups of W, numbered model by model, as long as there are any. */
static void fwd_part(void *p, int part, int parts)
{
    fwd_job *j = p;
    int per = (j->n_out + DENSE_TILE_ROWS - 1) / DENSE_TILE_ROWS, u0, u1;
    while (deal(j->next, per * j->count, part, parts, &u0, &u1))
        while (u0 < u1) {
            int k, a, b;
            next_span(&u0, u1, per, &k, &a, &b);
            int r1 = b * DENSE_TILE_ROWS < j->n_out ? b * DENSE_TILE_ROWS : j->n_out;
            kern_dense_fwd(j->isa, j->Y + k * j->sY, (size_t)j->ldy, j->W + k * j->sW,
                           j->XT + k * j->sXT, (size_t)j->ldt, j->rows, j->n_in,
                           a * DENSE_TILE_ROWS, r1);
        }
}

static void cpu_dense_forward(backend_ctx *c, float *Y, int ldy, size_t sY, const float *XT,
                              int ldt, size_t sXT, const float *W, size_t sW, int rows, int n_out,
                              int n_in, int count)
{
    fwd_job j = {c->isa, Y, XT, W, sY, sXT, sW, ldy, ldt, rows, n_out, n_in, count, {0}};
    team_run(c, fwd_part, &j, (double)rows * n_out * n_in * count);
}

/*
 * Image layers: the pool splits a group's (model, image) pairs, so each
 * image's output is written by one part, and batch norm's (model, block of
 * BN_SPLIT channels) pairs, so each channel's sums run in one part over the
 * rows in order. Neither split changes a result. BN_SPLIT is 32 channels,
 * 128 bytes of a row: with 16 (a cache line), two threads on a 32-channel
 * layer each took one 64-byte half of every row, and the batch norm of
 * convnet_bn took 3.4 times the CPU time it takes on one thread (perf, Zen
 * 5: the backward 2150 samples against 630); with 32 the two cores no
 * longer share a row's pair of lines, a 32-channel layer runs on one part,
 * and convnet_bn's epoch took 4.9-5.8 s against 6.4-9.6 s (3 runs each,
 * interleaved), with the same weights bit for bit.
 */
#define WINDOW_MIN_SPLIT 32768 /* floats touched: less is quicker on one thread */
#define BN_SPLIT 32            /* channels per unit of the split: 128 bytes of floats */

typedef struct window_job {
    const window_geom *g;
    float *out;          /* col, dX or Y */
    int32_t *arg;        /* maxpool_fwd's */
    const float *in;     /* X, col or dY */
    const int32_t *carg; /* maxpool_bwd's */
    size_t s_out, s_in, s_arg;
    int count;
} window_job;

static void window_run(backend_ctx *c, team_fn fn, window_job *j)
{
    const window_geom *g = j->g;
    double n = (double)g->n * g->oh * g->ow * g->kh * g->kw * g->c * j->count;
    team_run(c, fn, j, n >= WINDOW_MIN_SPLIT ? POOL_MIN_WORK : 0.0);
}

#define WINDOW_PART(name, call)                                                                 \
    static void name(void *p, int part, int parts)                                              \
    {                                                                                           \
        const window_job *j = p;                                                                \
        int u, u1, k, i0, i1;                                                                   \
        part_range(j->g->n * j->count, 1, part, parts, &u, &u1);                                \
        while (u < u1) {                                                                        \
            next_span(&u, u1, j->g->n, &k, &i0, &i1);                                           \
            call;                                                                               \
        }                                                                                       \
    }

/* Floats of col before image i's rows. */
static size_t col_at(const window_geom *g, int i)
{
    return (size_t)i * (size_t)g->oh * (size_t)g->ow * (size_t)(g->kh * g->kw * g->c);
}

WINDOW_PART(im2col_part, kern_im2col(j->out + k * j->s_out + col_at(j->g, i0),
                                     j->in + k * j->s_in, j->g, i0, i1))
WINDOW_PART(col2im_part, kern_col2im(j->out + k * j->s_out,
                                     j->in + k * j->s_in + col_at(j->g, i0), j->g, i0, i1))
WINDOW_PART(maxpool_fwd_part, kern_maxpool_fwd(j->out + k * j->s_out, j->arg + k * j->s_arg,
                                               j->in + k * j->s_in, j->g, i0, i1))
WINDOW_PART(maxpool_bwd_part, kern_maxpool_bwd(j->out + k * j->s_out, j->in + k * j->s_in,
                                               j->carg + k * j->s_arg, j->g, i0, i1))
WINDOW_PART(avgpool_fwd_part, kern_avgpool_fwd(j->out + k * j->s_out, j->in + k * j->s_in, j->g,
                                               i0, i1))
WINDOW_PART(avgpool_bwd_part, kern_avgpool_bwd(j->out + k * j->s_out, j->in + k * j->s_in, j->g,
                                               i0, i1))

/*
 * Convolutions fused per chunk of images (conv_fwd, conv_wgrad,
 * conv_bwd_data). As separate passes, im2col writes the whole col matrix to
 * memory, the product reads it back, and backward keeps it or makes it
 * again; per chunk, a part makes the chunk's rows of col in its own slot of
 * the scratch, which stays in cache from im2col through the product, the
 * bias and the activation. Each chunk is one single-threaded sgemm and the
 * weight gradient adds the chunks' partial sums in chunk order: no result
 * depends on the thread count.
 */
typedef struct conv_job {
    cpu_isa isa;
    const window_geom *g;
    int F, kc, chunk; /* filters, columns of col, images per chunk */
    int small;        /* kern_conv_small_wgrad instead of sgemm (conv_small_ok) */
    int own;          /* own kernels instead of sgemm: kern_gemm_own (gemm_own_ok of the
                       * product's N) for the forward and input gradient; the weight
                       * gradient's long inner dimension (a chunk's rows) goes through the
                       * dense step's sums (FUSE_GRAD), whose register tile holds its sums
                       * over every row, where kern_gemm_own had run at half OpenBLAS's
                       * rate (45 against 85 GFLOP/s on an AVX2 Zen 3) */
    int implicit;     /* the forward's product straight from X (kern_conv_fwd_own), no col */
    act_kind act;
    float *Y, *scratch, *dX, *G, *db, *partial, *dY, *wt;
    const float *X, *W, *bias, *cY;
    /* conv_fwd_pool, conv_wgrad_pool: the max pooling after the layer, its
     * window over Y (NULL: none); forward its output P and positions parg,
     * backward its gradient dP and the positions carg */
    const window_geom *pg;
    float *P;
    int32_t *parg;
    const float *dP;
    const int32_t *carg;
} conv_job;

/* Part `part`'s chunks [i0, i1) of images, one call of `each` a chunk with
 * the part's slot of the scratch (that of its first chunk). */
static void conv_chunks_of(const conv_job *j, int part, int parts,
                           void (*each)(const conv_job *, int, int, int, float *))
{
    int n = j->g->n, chunks = ceil_div(n, j->chunk), c0, c1;
    size_t slot = (size_t)j->chunk * j->g->oh * j->g->ow * (size_t)j->kc;
    part_range(chunks, 1, part, parts, &c0, &c1);
    for (int ch = c0; ch < c1; ch++) {
        int i0 = ch * j->chunk, i1 = i0 + j->chunk < n ? i0 + j->chunk : n;
        each(j, ch, i0, i1, j->scratch + (size_t)c0 * slot);
    }
}

static size_t conv_pixels(const conv_job *j) { return (size_t)j->g->oh * (size_t)j->g->ow; }

static void conv_fwd_chunk(const conv_job *j, int ch, int i0, int i1, float *col)
{
    (void)ch;
    size_t r0 = (size_t)i0 * conv_pixels(j);
    int rows = (int)((size_t)(i1 - i0) * conv_pixels(j));
    float *Y = j->Y + r0 * (size_t)j->F;
    if (j->implicit) {
        kern_conv_fwd_own(j->isa, Y, (size_t)j->F, j->X, j->g, i0, i1, j->wt, (size_t)j->F, j->F);
    } else {
        kern_im2col(col, j->X, j->g, i0, i1);
        if (j->own)
            kern_gemm_own(j->isa, Y, (size_t)j->F, col, (size_t)j->kc, 1, j->wt, (size_t)j->F,
                          rows, j->F, j->kc);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, j->F, j->kc, 1.0f, col,
                        j->kc, j->W, j->kc, 0.0f, Y, j->F);
    }
    kern_bias_act(Y, j->bias, rows, j->F, j->act);
    if (j->pg)
        kern_maxpool_fwd(j->P, j->parg, j->Y, j->pg, i0, i1);
}

static void conv_fwd_part(void *p, int part, int parts) { conv_chunks_of(p, part, parts, conv_fwd_chunk); }

static double conv_work(const window_geom *g, int F)
{
    return (double)g->n * g->oh * g->ow * F * (double)(g->kh * g->kw * g->c);
}

static void cpu_conv_fwd_pool(backend_ctx *c, float *Y, float *scratch, float *wt,
                              const float *X, const float *W, const float *bias,
                              const window_geom *g, int F, act_kind act, int chunk, float *P,
                              int32_t *arg, const window_geom *pg)
{
    int kc = g->kh * g->kw * g->c;
    conv_job j = {.isa = c->isa, .g = g, .F = F, .kc = kc, .chunk = chunk,
                  .own = c->isa != ISA_NONE && gemm_own_ok(F),
                  .implicit = c->isa != ISA_NONE && conv_fwd_own_ok(g, F), .act = act, .Y = Y,
                  .scratch = scratch, .wt = wt, .X = X, .W = W, .bias = bias, .pg = pg, .P = P,
                  .parg = arg};
    if (j.own)
        for (int f = 0; f < F; f++)
            for (int k = 0; k < kc; k++)
                wt[(size_t)k * F + f] = W[(size_t)f * kc + k];
    team_run(c, conv_fwd_part, &j, conv_work(g, F));
}

static void cpu_conv_fwd(backend_ctx *c, float *Y, float *scratch, float *wt, const float *X,
                         const float *W, const float *bias, const window_geom *g, int F,
                         act_kind act, int chunk)
{
    cpu_conv_fwd_pool(c, Y, scratch, wt, X, W, bias, g, F, act, chunk, NULL, NULL, NULL);
}

static void conv_bwd_chunk(const conv_job *j, int ch, int i0, int i1, float *dcol)
{
    (void)ch;
    size_t r0 = (size_t)i0 * conv_pixels(j);
    int rows = (int)((size_t)(i1 - i0) * conv_pixels(j));
    if (j->own)
        kern_gemm_own(j->isa, dcol, (size_t)j->kc, j->dY + r0 * (size_t)j->F, (size_t)j->F, 1, j->W,
                      (size_t)j->kc, rows, j->kc, j->F);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, j->kc, j->F, 1.0f,
                    j->dY + r0 * (size_t)j->F, j->F, j->W, j->kc, 0.0f, dcol, j->kc);
    kern_col2im(j->dX, dcol, j->g, i0, i1);
}

static void conv_bwd_part(void *p, int part, int parts) { conv_chunks_of(p, part, parts, conv_bwd_chunk); }

static void cpu_conv_bwd_data(backend_ctx *c, float *dX, float *scratch, const float *dY,
                              const float *W, const window_geom *g, int F, int chunk)
{
    int kc = g->kh * g->kw * g->c;
    conv_job j = {.isa = c->isa, .g = g, .F = F, .kc = kc, .chunk = chunk,
                  .own = c->isa != ISA_NONE && gemm_own_ok(kc), .dX = dX, .scratch = scratch,
                  .dY = (float *)dY, .W = W};
    team_run(c, conv_bwd_part, &j, conv_work(g, F));
}

/* Chunk ch: act' on its dY, its rows of col made again, its product and
 * bias sums into partial slot ch. */
static void wgrad_chunk(const conv_job *j, int ch, int i0, int i1, float *col)
{
    size_t F = (size_t)j->F, r0 = (size_t)i0 * conv_pixels(j);
    int rows = (int)((size_t)(i1 - i0) * conv_pixels(j));
    float *dY = j->dY + r0 * F, *out = j->partial + (size_t)ch * (F * (size_t)j->kc + F);
    if (j->pg)
        kern_maxpool_bwd(j->dY, j->dP, j->carg, j->pg, i0, i1);
    kern_act_backward(dY, j->cY + r0 * F, (size_t)rows * F, j->act);
    kern_im2col(col, j->X, j->g, i0, i1);
    if (j->small) {
        kern_conv_small_wgrad(j->isa, out, dY, col, rows, j->F, j->kc);
    } else if (j->own) {
        const dense_update grad = {.kind = FUSE_GRAD};
        kern_dense_step(j->isa, out, NULL, NULL, dY, F, col, (size_t)j->kc, rows, j->kc, 0, j->F,
                        &grad);
    } else {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, j->F, j->kc, rows, 1.0f, dY, j->F,
                    col, j->kc, 0.0f, out, j->kc);
    }
    if (j->db)
        kern_bias_grad(out + F * (size_t)j->kc, dY, rows, j->F);
}

static void wgrad_part(void *p, int part, int parts) { conv_chunks_of(p, part, parts, wgrad_chunk); }

/* The partials added in chunk order, elements split among the parts. */
static void wgrad_sum_part(void *p, int part, int parts)
{
    const conv_job *j = p;
    int chunks = ceil_div(j->g->n, j->chunk), e0, e1;
    int nw = j->F * j->kc, n = nw + (j->db ? j->F : 0);
    size_t stride = (size_t)nw + (size_t)j->F;
    part_range(n, 16, part, parts, &e0, &e1);
    for (int e = e0; e < e1; e++) {
        float sum = j->partial[e];
        for (int s = 1; s < chunks; s++)
            sum += j->partial[(size_t)s * stride + (size_t)e];
        if (e < nw)
            j->G[e] = sum;
        else
            j->db[e - nw] = sum;
    }
}

static void cpu_conv_wgrad_pool(backend_ctx *c, float *G, float *db, float *dY, const float *Y,
                                const float *X, float *scratch, float *partial,
                                const window_geom *g, int F, act_kind act, int chunk,
                                const float *dP, const int32_t *arg, const window_geom *pg)
{
    int kc = g->kh * g->kw * g->c;
    conv_job j = {.isa = c->isa, .g = g, .F = F, .kc = kc, .chunk = chunk,
                  .small = c->isa != ISA_NONE && conv_small_ok(kc, F),
                  .own = c->isa != ISA_NONE, .act = act, .G = G,
                  .db = db,
                  .partial = partial, .dY = dY, .cY = Y, .scratch = scratch, .X = X, .pg = pg,
                  .dP = dP, .carg = arg};
    team_run(c, wgrad_part, &j, conv_work(g, F));
    /* The sums read every partial once: split where they are many (the
     * Keras convnet's second layer: 22 partials of 18 496 floats, 0.1 ms
     * on one thread, while the other thread went to sleep and took 20-30
     * us to wake for the next job). Each element is summed in chunk order
     * whoever takes it. */
    double floats = ((double)F * kc + F) * ceil_div(g->n, chunk);
    team_run(c, wgrad_sum_part, &j, floats >= WINDOW_MIN_SPLIT ? POOL_MIN_WORK : 0.0);
}

static void cpu_conv_wgrad(backend_ctx *c, float *G, float *db, float *dY, const float *Y,
                           const float *X, float *scratch, float *partial, const window_geom *g,
                           int F, act_kind act, int chunk)
{
    cpu_conv_wgrad_pool(c, G, db, dY, Y, X, scratch, partial, g, F, act, chunk, NULL, NULL, NULL);
}

static void cpu_im2col(backend_ctx *c, float *col, size_t scol, const float *X, size_t sX,
                       const window_geom *g, int count)
{
    window_job j = {g, col, NULL, X, NULL, scol, sX, 0, count};
    window_run(c, im2col_part, &j);
}

static void cpu_col2im(backend_ctx *c, float *dX, size_t sdX, const float *col, size_t scol,
                       const window_geom *g, int count)
{
    window_job j = {g, dX, NULL, col, NULL, sdX, scol, 0, count};
    window_run(c, col2im_part, &j);
}

static void cpu_maxpool_fwd(backend_ctx *c, float *Y, size_t sY, int32_t *arg, size_t sarg,
                            const float *X, size_t sX, const window_geom *g, int count)
{
    window_job j = {g, Y, arg, X, NULL, sY, sX, sarg, count};
    window_run(c, maxpool_fwd_part, &j);
}

static void cpu_maxpool_bwd(backend_ctx *c, float *dX, size_t sdX, const float *dY, size_t sdY,
                            const int32_t *arg, size_t sarg, const window_geom *g, int count)
{
    window_job j = {g, dX, NULL, dY, arg, sdX, sdY, sarg, count};
    window_run(c, maxpool_bwd_part, &j);
}

static void cpu_avgpool_fwd(backend_ctx *c, float *Y, size_t sY, const float *X, size_t sX,
                            const window_geom *g, int count)
{
    window_job j = {g, Y, NULL, X, NULL, sY, sX, 0, count};
    window_run(c, avgpool_fwd_part, &j);
}

static void cpu_avgpool_bwd(backend_ctx *c, float *dX, size_t sdX, const float *dY, size_t sdY,
                            const window_geom *g, int count)
{
    window_job j = {g, dX, NULL, dY, NULL, sdX, sdY, 0, count};
    window_run(c, avgpool_bwd_part, &j);
}

/* Global pooling of sequences: the pool splits the (model, sample) pairs. */
typedef struct seq_pool_job {
    int max, n, T, C, count;
    float *out;           /* Y or dX */
    const float *in;      /* X or dY */
    int32_t *arg;         /* forward's */
    const int32_t *carg;  /* backward's */
    const float *tokens;  /* NULL: every step */
    size_t s_out, s_in, s_arg, s_tokens;
} seq_pool_job;

static const float *tokens_of(const seq_pool_job *j, int k)
{
    return j->tokens ? j->tokens + (size_t)k * j->s_tokens : NULL;
}

static void seq_pool_fwd_part(void *p, int part, int parts)
{
    const seq_pool_job *j = p;
    int u, u1, k, i0, i1;
    part_range(j->n * j->count, 1, part, parts, &u, &u1);
    while (u < u1) {
        next_span(&u, u1, j->n, &k, &i0, &i1);
        kern_seq_pool_fwd(j->max, j->out + k * j->s_out, j->arg ? j->arg + k * j->s_arg : NULL,
                          j->in + k * j->s_in, tokens_of(j, k), j->T, j->C, i0, i1);
    }
}

static void seq_pool_bwd_part(void *p, int part, int parts)
{
    const seq_pool_job *j = p;
    int u, u1, k, i0, i1;
    part_range(j->n * j->count, 1, part, parts, &u, &u1);
    while (u < u1) {
        next_span(&u, u1, j->n, &k, &i0, &i1);
        kern_seq_pool_bwd(j->max, j->out + k * j->s_out, j->in + k * j->s_in,
                          j->carg ? j->carg + k * j->s_arg : NULL, tokens_of(j, k), j->T, j->C,
                          i0, i1);
    }
}

static void seq_pool_run(backend_ctx *c, team_fn fn, seq_pool_job *j)
{
    double n = (double)j->n * j->T * j->C * j->count;
    team_run(c, fn, j, n >= WINDOW_MIN_SPLIT ? POOL_MIN_WORK : 0.0);
}

static void cpu_seq_pool_fwd(backend_ctx *c, int max, float *Y, size_t sY, int32_t *arg,
                             size_t sarg, const float *X, size_t sX, const float *tokens,
                             size_t s_tokens, int n, int T, int C, int count)
{
    seq_pool_job j = {.max = max, .n = n, .T = T, .C = C, .count = count, .out = Y, .in = X,
                      .arg = arg, .tokens = tokens, .s_out = sY, .s_in = sX, .s_arg = sarg,
                      .s_tokens = s_tokens};
    seq_pool_run(c, seq_pool_fwd_part, &j);
}

static void cpu_seq_pool_bwd(backend_ctx *c, int max, float *dX, size_t sdX, const float *dY,
                             size_t sdY, const int32_t *arg, size_t sarg, const float *tokens,
                             size_t s_tokens, int n, int T, int C, int count)
{
    seq_pool_job j = {.max = max, .n = n, .T = T, .C = C, .count = count, .out = dX, .in = dY,
                      .carg = arg, .tokens = tokens, .s_out = sdX, .s_in = sdY, .s_arg = sarg,
                      .s_tokens = s_tokens};
    seq_pool_run(c, seq_pool_bwd_part, &j);
}

/* The arguments of the three batch-norm ops (each uses its own fields). */
typedef struct bn_job {
    float *out; /* Y or dX */
    const float *X, *dY, *gamma, *beta;
    float *mov_mean, *mov_var, *stat, *dgamma, *dbeta;
    const float *cmov_mean, *cmov_var, *cstat;
    size_t s_out, sX, sdY, sp, sst, sg;
    int rows, C, count;
    const bn_step *o;
} bn_job;

static void bn_run(backend_ctx *c, team_fn fn, bn_job *j)
{
    double n = (double)j->rows * j->C * j->count;
    team_run(c, fn, j, n >= WINDOW_MIN_SPLIT ? POOL_MIN_WORK : 0.0);
}

#define BN_PART(name, call)                                                                     \
    static void name(void *p, int part, int parts)                                              \
    {                                                                                           \
        const bn_job *j = p;                                                                    \
        int per = (j->C + BN_SPLIT - 1) / BN_SPLIT, u, u1, k, b0, b1;                           \
        part_range(per * j->count, 1, part, parts, &u, &u1);                                    \
        while (u < u1) {                                                                        \
            next_span(&u, u1, per, &k, &b0, &b1);                                               \
            int c0 = b0 * BN_SPLIT, c1 = b1 * BN_SPLIT < j->C ? b1 * BN_SPLIT : j->C;           \
            call;                                                                               \
        }                                                                                       \
    }

BN_PART(bn_train_part,
        kern_bn_fwd_train(j->out + k * j->s_out, j->X + k * j->sX, j->gamma + k * j->sp,
                          j->beta + k * j->sp, j->mov_mean + k * j->sp, j->mov_var + k * j->sp,
                          j->stat + k * j->sst, j->rows, j->C, j->o->momentum[k],
                          j->o->epsilon[k], c0, c1))
BN_PART(bn_infer_part,
        kern_bn_fwd_infer(j->out + k * j->s_out, j->X + k * j->sX, j->gamma + k * j->sp,
                          j->beta + k * j->sp, j->cmov_mean + k * j->sp,
                          j->cmov_var + k * j->sp, j->rows, j->C, j->o->epsilon[k], c0, c1))
BN_PART(bn_bwd_part,
        kern_bn_bwd(j->out ? j->out + k * j->s_out : NULL, j->dY + k * j->sdY, j->X + k * j->sX,
                    j->gamma + k * j->sp, j->cstat + k * j->sst, j->dgamma + k * j->sg,
                    j->dbeta + k * j->sg, j->rows, j->C, c0, c1))

static void cpu_bn_fwd_train(backend_ctx *c, float *Y, size_t sY, const float *X, size_t sX,
                             const float *gamma, const float *beta, float *mov_mean,
                             float *mov_var, size_t sp, float *stat, size_t sst, int rows, int C,
                             const bn_step *o, int count)
{
    bn_job j = {.out = Y, .X = X, .gamma = gamma, .beta = beta, .mov_mean = mov_mean,
                .mov_var = mov_var, .stat = stat, .s_out = sY, .sX = sX, .sp = sp, .sst = sst,
                .rows = rows, .C = C, .count = count, .o = o};
    bn_run(c, bn_train_part, &j);
}

static void cpu_bn_fwd_infer(backend_ctx *c, float *Y, size_t sY, const float *X, size_t sX,
                             const float *gamma, const float *beta, const float *mov_mean,
                             const float *mov_var, size_t sp, int rows, int C, const bn_step *o,
                             int count)
{
    bn_job j = {.out = Y, .X = X, .gamma = gamma, .beta = beta, .cmov_mean = mov_mean,
                .cmov_var = mov_var, .s_out = sY, .sX = sX, .sp = sp, .rows = rows, .C = C,
                .count = count, .o = o};
    bn_run(c, bn_infer_part, &j);
}

static void cpu_bn_bwd(backend_ctx *c, float *dX, size_t sdX, const float *dY, size_t sdY,
                       const float *X, size_t sX, const float *gamma, size_t sp,
                       const float *stat, size_t sst, float *dgamma, float *dbeta, size_t sg,
                       int rows, int C, int count)
{
    bn_job j = {.out = dX, .X = X, .dY = dY, .gamma = gamma, .cstat = stat, .dgamma = dgamma,
                .dbeta = dbeta, .s_out = sdX, .sX = sX, .sdY = sdY, .sp = sp, .sst = sst,
                .sg = sg, .rows = rows, .C = C, .count = count};
    bn_run(c, bn_bwd_part, &j);
}

/* The recurrent steps: the rows of all models dealt out in equal spans
 * (element-wise, so any split gives the same bits). */
typedef void (*rnn_kern)(const rnn_step *s, int k, int r0, int r1);
typedef struct rnn_job {
    const rnn_step *s;
    rnn_kern fn;
} rnn_job;

static void rnn_part(void *p, int part, int parts)
{
    const rnn_job *j = p;
    int rows = j->s->rows, u0, u1;
    part_range(rows * j->s->count, 1, part, parts, &u0, &u1);
    for (int u = u0; u < u1;) {
        int k = u / rows, r0 = u % rows, r1 = rows - r0 < u1 - u ? rows : r0 + (u1 - u);
        j->fn(j->s, k, r0, r1);
        u += r1 - r0;
    }
}

static void rnn_run(backend_ctx *c, rnn_kern fn, const rnn_step *s, double per_unit)
{
    rnn_job j = {s, fn};
    team_run(c, rnn_part, &j, per_unit * (double)s->rows * s->H * s->count);
}

/* Work per unit: the transcendental functions count ~20 multiply-adds each. */
static void cpu_lstm_fwd(backend_ctx *c, const rnn_step *s) { rnn_run(c, kern_lstm_fwd, s, 110); }
static void cpu_lstm_bwd(backend_ctx *c, const rnn_step *s) { rnn_run(c, kern_lstm_bwd, s, 40); }
static void cpu_gru_fwd(backend_ctx *c, const rnn_step *s) { rnn_run(c, kern_gru_fwd, s, 75); }
static void cpu_gru_bwd(backend_ctx *c, const rnn_step *s) { rnn_run(c, kern_gru_bwd, s, 20); }

/*
 * A recurrent direction's steps at once (rnn_fwd, rnn_bwd): the rows of
 * every model in chunks of RNN_CHUNK_ROWS, each chunk one unit of the pool
 * that runs all the steps of its rows, its products (kern_rnn_gemm) and its
 * cells, with no wait between steps: the rows' recurrences are independent.
 * The chunks are fixed by the rows alone, and every element of a product is
 * its own sum anyway, so no result depends on the thread count. One step at
 * a time, the words LSTM (64 units, batch 128) had run its recurrent
 * products through OpenBLAS on one thread (2.1 million multiply-adds a step,
 * under the split's threshold), packing Whh again at every step.
 */
#define RNN_CHUNK_ROWS 16
#define RNN_AT(x, ld, st, k, r) ((x) + (size_t)(k) * (st) + (size_t)(r) * (size_t)(ld))

typedef struct rnn_seq_job {
    const rnn_seq *q;
    cpu_isa isa;
    int chunks; /* per model */
} rnn_seq_job;

static int rnn_gates(const rnn_seq *q) { return (q->gru ? 3 : 4) * q->steps[0].H; }

/* Wih and Whh transposed into wt, model by model. */
static void rnn_wt_part(void *p, int part, int parts)
{
    const rnn_seq *q = ((const rnn_seq_job *)p)->q;
    int GH = rnn_gates(q), H = q->steps[0].H, F = q->F, k0, k1;
    part_range(q->steps[0].count, 1, part, parts, &k0, &k1);
    for (int k = k0; k < k1; k++) {
        float *wt = q->wt + (size_t)k * q->s_wt;
        kern_rnn_transpose(wt, (size_t)GH, q->Wih + (size_t)k * q->sW, (size_t)F, GH, F);
        kern_rnn_transpose(wt + (size_t)F * (size_t)GH, (size_t)GH, q->Whh + (size_t)k * q->sW,
                           (size_t)H, GH, H);
    }
}

/* Unit u: model k, rows [*r0, *r1). */
static int rnn_unit(const rnn_seq_job *j, int u, int *r0, int *r1)
{
    int rows = j->q->steps[0].rows;
    *r0 = u % j->chunks * RNN_CHUNK_ROWS;
    *r1 = *r0 + RNN_CHUNK_ROWS < rows ? *r0 + RNN_CHUNK_ROWS : rows;
    return u / j->chunks;
}

/* Whether every row of the chunk [r0, r1) of model k is padding at step s
 * (a mask_zero embedding's token 0). An LSTM step padded in every row needs
 * no products: its cells carry the state over without reading the gates,
 * and its backward zeroes their gradient without reading them, so the
 * input and recurrent products of such a step change nothing (the backward's
 * dh += 0·Whh adds zeros). Words padded at their end leave the chunk's steps
 * past its longest word so. The GRU's cells read their products' rows even
 * where padded, so its steps run whole. */
static int rnn_chunk_padded(const rnn_step *s, int k, int r0, int r1)
{
    if (!s->tok)
        return 0;
    for (int r = r0; r < r1; r++)
        if (*RNN_AT(s->tok, s->ld_t, s->s_t, k, r) != 0.0f)
            return 0;
    return 1;
}

/* A chunk's steps: gates = b + x·Wihᵀ (+ h_prev·Whhᵀ, the LSTM's), the
 * GRU's rec = h_prev·Whhᵀ, then the cells. */
static void rnn_fwd_part(void *p, int part, int parts)
{
    const rnn_seq_job *j = p;
    const rnn_seq *q = j->q;
    int GH = rnn_gates(q), H = q->steps[0].H, F = q->F, u0, u1;
    part_range(j->chunks * q->steps[0].count, 1, part, parts, &u0, &u1);
    for (int u = u0; u < u1; u++) {
        int r0, r1, k = rnn_unit(j, u, &r0, &r1), m = r1 - r0;
        const float *wt = q->wt + (size_t)k * q->s_wt, *wh = wt + (size_t)F * (size_t)GH;
        const float *b = q->b + (size_t)k * q->sW;
        const float *x = RNN_AT(q->X, q->ld_x, q->sX, k, r0);
        for (int i = 0; i < q->n; i++, x += q->x_next) {
            const rnn_step *s = &q->steps[i];
            float *g = RNN_AT(s->gates, s->ld_g, s->s_g, k, r0);
            if (!q->gru && rnn_chunk_padded(s, k, r0, r1)) {
                kern_lstm_fwd(s, k, r0, r1);
                continue;
            }
            kern_rnn_gemm(j->isa, g, (size_t)s->ld_g, x, (size_t)q->ld_x, wt, (size_t)GH, m, GH,
                          F, 0, b);
            if (s->h_prev) {
                const float *hp = RNN_AT(s->h_prev, s->ld_hp, s->s_hp, k, r0);
                if (q->gru)
                    kern_rnn_gemm(j->isa, RNN_AT(s->rec, s->ld_r, s->s_r, k, r0), (size_t)s->ld_r,
                                  hp, (size_t)s->ld_hp, wh, (size_t)GH, m, GH, H, 0, NULL);
                else
                    kern_rnn_gemm(j->isa, g, (size_t)s->ld_g, hp, (size_t)s->ld_hp, wh, (size_t)GH,
                                  m, GH, H, 1, NULL);
            }
            (q->gru ? kern_gru_fwd : kern_lstm_fwd)(s, k, r0, r1);
        }
    }
}

static void rnn_bwd_part(void *p, int part, int parts)
{
    const rnn_seq_job *j = p;
    const rnn_seq *q = j->q;
    int GH = rnn_gates(q), H = q->steps[0].H, u0, u1;
    part_range(j->chunks * q->steps[0].count, 1, part, parts, &u0, &u1);
    for (int u = u0; u < u1; u++) {
        int r0, r1, k = rnn_unit(j, u, &r0, &r1);
        const float *W = q->Whh + (size_t)k * q->sW;
        for (int i = q->n - 1; i >= 0; i--) {
            const rnn_step *s = &q->steps[i];
            (q->gru ? kern_gru_bwd : kern_lstm_bwd)(s, k, r0, r1);
            if (!s->h_prev || (!q->gru && rnn_chunk_padded(s, k, r0, r1)))
                continue;
            const float *dr = q->gru ? RNN_AT(s->rec, s->ld_r, s->s_r, k, r0)
                                     : RNN_AT(s->gates, s->ld_g, s->s_g, k, r0);
            kern_rnn_gemm(j->isa, RNN_AT(s->dh, H, s->s_d, k, r0), (size_t)H, dr,
                          (size_t)(q->gru ? s->ld_r : s->ld_g), W, (size_t)H, r1 - r0, H, GH, 1,
                          NULL);
        }
    }
}

static void rnn_seq_run(backend_ctx *c, const rnn_seq *q, team_fn fn)
{
    const rnn_step *s = q->steps;
    if (q->n <= 0 || s->rows <= 0 || s->count <= 0)
        return;
    rnn_seq_job j = {q, c->isa, (s->rows + RNN_CHUNK_ROWS - 1) / RNN_CHUNK_ROWS};
    int fwd = fn == rnn_fwd_part;
    if (fwd && q->fill_wt)
        team_run(c, rnn_wt_part, &j, (double)rnn_gates(q) * (q->F + s->H) * s->count);
    /* The products' multiply-adds and the cells' (~100 a unit). */
    double work = (double)s->count * s->rows * q->n * s->H *
                  ((double)rnn_gates(q) * (fwd ? q->F + s->H : s->H) / s->H + 100.0);
    team_run(c, fn, &j, work);
}

static void cpu_rnn_fwd(backend_ctx *c, const rnn_seq *q) { rnn_seq_run(c, q, rnn_fwd_part); }
static void cpu_rnn_bwd(backend_ctx *c, const rnn_seq *q) { rnn_seq_run(c, q, rnn_bwd_part); }

/* The recurrent layers' weight gradients (wgrad): the dense step's sums
 * alone (FUSE_GRAD), row groups of G dealt over the pool as dense_step's.
 * Through OpenBLAS, the words LSTM's W_hh and W_ih gradients (K = 2048
 * rows) cut into 32 x 32 tiles packed their operands again for each tile:
 * a third of the epoch on one thread, for a fifth of its multiply-adds. */
static int cpu_wgrad(backend_ctx *c, float *G, size_t sG, const float *dZ, int ldd, size_t sdZ,
                     const float *X, int ldx, size_t sX, int rows, int n_out, int n_in,
                     int count)
{
    unsigned char all[COHORT_MAX_GROUP];
    if (c->isa == ISA_NONE || count > COHORT_MAX_GROUP)
        return 0;
    memset(all, 1, (size_t)count);
    dense_job j = {c->isa, G, NULL, NULL, sG, sdZ, sX, (size_t)ldd, (size_t)ldx, dZ, X, rows,
                   n_out, n_in, count, all, {0}, {{0}}};
    for (int k = 0; k < count; k++)
        j.o[k] = (dense_update){.kind = FUSE_GRAD};
    team_run(c, dense_part, &j, (double)rows * n_out * n_in * count);
    return 1;
}

/* ---- token ids (an embedding) ---- */

typedef struct rows_of_job {
    float *out;
    const float *tok, *in;
    size_t s_out, sT, s_in;
    int n, V, dim, count;
} rows_of_job;

/* Rows r0..r1 of every model: each a copy, any split gives the same. */
static void gather_part(void *p, int part, int parts)
{
    const rows_of_job *j = p;
    int r0, r1;
    part_range(j->n * j->count, 1, part, parts, &r0, &r1);
    size_t dim = (size_t)j->dim;
    for (int t = r0; t < r1; t++) {
        int k = t / j->n, r = t % j->n;
        size_t id = (size_t)j->tok[k * j->sT + (size_t)r];
        memcpy(j->out + k * j->s_out + (size_t)r * dim, j->in + k * j->s_in + id * dim,
               dim * sizeof(float));
    }
}

static void cpu_gather_rows(backend_ctx *c, float *Y, size_t sY, const float *tok, size_t sT,
                            const float *W, size_t sW, int n, int dim, int count)
{
    rows_of_job j = {Y, tok, W, sY, sT, sW, n, 0, dim, count};
    double work = (double)n * dim * count;
    team_run(c, gather_part, &j, work >= GATHER_MIN_SPLIT ? POOL_MIN_WORK : 0.0);
}

/* Columns of 16 floats, (model, block) pairs split among the parts: each
 * column's sums run over the rows in order, whatever the split. */
#define SCATTER_COLS 16

static void scatter_part(void *p, int part, int parts)
{
    const rows_of_job *j = p;
    int blocks = (j->dim + SCATTER_COLS - 1) / SCATTER_COLS, b0, b1;
    part_range(blocks * j->count, 1, part, parts, &b0, &b1);
    size_t dim = (size_t)j->dim;
    for (int b = b0; b < b1; b++) {
        int k = b / blocks;
        size_t c0 = (size_t)(b % blocks) * SCATTER_COLS;
        size_t c1 = c0 + SCATTER_COLS < dim ? c0 + SCATTER_COLS : dim;
        float *G = j->out + k * j->s_out;
        const float *tok = j->tok + k * j->sT, *dY = j->in + k * j->s_in;
        for (size_t v = 0; v < (size_t)j->V; v++)
            memset(G + v * dim + c0, 0, (c1 - c0) * sizeof(float));
        for (int r = 0; r < j->n; r++) {
            float *g = G + (size_t)tok[r] * dim;
            const float *d = dY + (size_t)r * dim;
            for (size_t c = c0; c < c1; c++)
                g[c] += d[c];
        }
    }
}

static void cpu_scatter_add_rows(backend_ctx *c, float *G, size_t sG, const float *tok,
                                 size_t sT, const float *dY, size_t sdY, int n, int V, int dim,
                                 int count)
{
    rows_of_job j = {G, tok, dY, sG, sT, sdY, n, V, dim, count};
    team_run(c, scatter_part, &j, (double)(n + V) * dim * count);
}

static const backend_ops cpu_ops = {
    .name = "cpu",
    .api_version = COHORT_BACKEND_API_VERSION,
    .model_major = 1,
    .stats_every = 1,
    .host_memory = 1,
    .conv_fwd = cpu_conv_fwd,
    .conv_wgrad = cpu_conv_wgrad,
    .conv_bwd_data = cpu_conv_bwd_data,
    .conv_fwd_pool = cpu_conv_fwd_pool,
    .conv_wgrad_pool = cpu_conv_wgrad_pool,
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
    .add = cpu_add,
    .loss = cpu_loss,
    .optimize = cpu_optimize,
    .sum_sq = cpu_sum_sq,
    .clip_norm = cpu_clip_norm,
    .clip_value = cpu_clip_value,
    .reg_grad = cpu_reg_grad,
    .reg_penalty = cpu_reg_penalty,
    .im2col = cpu_im2col,
    .col2im = cpu_col2im,
    .maxpool_fwd = cpu_maxpool_fwd,
    .maxpool_bwd = cpu_maxpool_bwd,
    .avgpool_fwd = cpu_avgpool_fwd,
    .avgpool_bwd = cpu_avgpool_bwd,
    .bn_fwd_train = cpu_bn_fwd_train,
    .bn_fwd_infer = cpu_bn_fwd_infer,
    .bn_bwd = cpu_bn_bwd,
    .fuses = cpu_fuses,
    .dense_step = cpu_dense_step,
    .xt_ld = cpu_xt_ld,
    .transpose = cpu_transpose,
    .dense_forward = cpu_dense_forward,
    .help_join = cpu_help_join,
    .help_run = cpu_help_run,
    .lstm_fwd = cpu_lstm_fwd,
    .lstm_bwd = cpu_lstm_bwd,
    .gru_fwd = cpu_gru_fwd,
    .gru_bwd = cpu_gru_bwd,
    .rnn_fwd = cpu_rnn_fwd,
    .rnn_bwd = cpu_rnn_bwd,
    .wgrad = cpu_wgrad,
    .seq_pool_fwd = cpu_seq_pool_fwd,
    .seq_pool_bwd = cpu_seq_pool_bwd,
    .gather_rows = cpu_gather_rows,
    .scatter_add_rows = cpu_scatter_add_rows,
    .ln_fwd = cpu_ln_fwd,
    .ln_bwd = cpu_ln_bwd,
    .attn_softmax_fwd = cpu_attn_softmax_fwd,
    .attn_softmax_bwd = cpu_attn_softmax_bwd,
};

const backend_ops *backend_cpu(void) { return &cpu_ops; }

int backend_cpu_blas_threads(int threads) { return cpu_isa_detect() != ISA_NONE ? 1 : threads; }

void backend_cpu_set_blas_threads(int n)
{
    if (openblas_get_num_threads() != n)
        openblas_set_num_threads(n);
}

void backend_cpu_blas_settle(void) { backend_cpu_set_blas_threads(backend_cpu_blas_threads(1)); }

const char *backend_cpu_kernels(void) { return cpu_isa_name(cpu_isa_detect()); }

const char *backend_cpu_kernels_why(void) { return cpu_isa_why(); }
