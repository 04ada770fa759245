/*
 * The CPU backend: GEMMs through OpenBLAS, element-wise passes as plain loops
 * that gcc vectorizes (-O3 -fno-math-errno). Device memory is host memory.
 */
#include "backend/backend_impl.h"
#include "backend/cpu/dense_step.h"
#include "backend/cpu/kernels.h"
#include "util/util.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/*
 * A context's own threads, for the kernels that are not OpenBLAS's: the
 * runner gives a context `threads` cores; threads - 1 workers wait here and
 * the caller is the last. One job at a time: pool_run returns once every
 * part is done. Workers spin a while on the job word before they sleep:
 * on a virtual machine, waking a sleeping thread took longer than most of
 * the jobs (a two-thread run ran at half the speed of one thread).
 *
 * Helpers: a thread of the runner with nothing left to start joins a
 * running context (help_join, help_run) and takes a part of its jobs from
 * the next job on, until the context is freed. A job's parts are fixed when
 * it is posted, in the job word with its number, so a helper that joins
 * meanwhile sits that job out. The kernels split on tile boundaries, which
 * changes no sum: the results are the same with or without helpers.
 */
#define POOL_MAX 64
#define POOL_SPINS 4000 /* pause instructions before a worker sleeps: ~0.1 ms */
#define JOB_PARTS(word) ((int)((word) & 0xffff))
typedef void (*pool_fn)(void *arg, int part, int parts);

struct backend_ctx {
    cpu_isa isa;
    pthread_t worker[POOL_MAX];
    int n_workers;
    pthread_mutex_t mu;
    pthread_cond_t go;
    int sleepers;           /* threads waiting on go, under mu */
    _Atomic uint64_t job;   /* job number << 16 | parts, stored (release) after fn and arg */
    _Atomic int pending;    /* parts other than the caller's still running */
    _Atomic int quit;
    _Atomic int helpers;    /* helpers that joined: parts n_workers .. n_workers + helpers - 1 */
    _Atomic int helpers_in; /* helpers that have not yet left for good */
    uint64_t help_seen[POOL_MAX]; /* the job word when each helper joined */
    pool_fn fn;
    void *arg;
};

typedef struct worker_arg {
    backend_ctx *c;
    int part;
} worker_arg;

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* The next job word after `seen`, or `seen` when the pool quits. */
static uint64_t pool_wait(backend_ctx *c, uint64_t seen)
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

/* Take part `part` of every job posted after `seen` that counts it in. */
static void pool_serve(backend_ctx *c, int part, uint64_t seen)
{
    for (;;) {
        uint64_t j = pool_wait(c, seen);
        if (j == seen)
            break; /* quit */
        seen = j;
        int parts = JOB_PARTS(j);
        if (part >= parts - 1)
            continue; /* joined after this job was posted */
        /* The caller waits for this part, so fn and arg stay this job's. */
        c->fn(c->arg, part, parts);
        atomic_fetch_sub_explicit(&c->pending, 1, memory_order_release);
    }
}

static void *pool_worker(void *p)
{
    worker_arg a = *(worker_arg *)p;
    free(p);
    pool_serve(a.c, a.part, 0);
    return NULL;
}

/* Jobs below this many multiply-adds run on the calling thread alone: waking
 * a worker costs more than it saves. */
#define POOL_MIN_WORK 1e6

static void pool_run(backend_ctx *c, pool_fn fn, void *arg, double work)
{
    int parts = 1 + c->n_workers + atomic_load(&c->helpers);
    if (parts == 1 || work < POOL_MIN_WORK) {
        fn(arg, 0, 1);
        return;
    }
    c->fn = fn;
    c->arg = arg;
    atomic_store_explicit(&c->pending, parts - 1, memory_order_relaxed);
    uint64_t next = ((atomic_load_explicit(&c->job, memory_order_relaxed) >> 16) + 1) << 16;
    atomic_store_explicit(&c->job, next | (uint64_t)parts, memory_order_release);
    /* A thread about to sleep holds mu while it looks at job once more, so
     * it either sees the new job or is counted in sleepers here. */
    pthread_mutex_lock(&c->mu);
    if (c->sleepers)
        pthread_cond_broadcast(&c->go);
    pthread_mutex_unlock(&c->mu);
    fn(arg, parts - 1, parts);
    while (atomic_load_explicit(&c->pending, memory_order_acquire) > 0)
        cpu_relax();
}

/* A helper counts itself in (while the runner keeps c alive): its slot, or
 * -1 where c has no kernels to share. */
static int cpu_help_join(backend_ctx *c)
{
    if (c->isa == ISA_NONE || atomic_load(&c->helpers) >= POOL_MAX - c->n_workers)
        return -1;
    uint64_t seen = atomic_load(&c->job); /* before it is counted: see pool_run */
    atomic_fetch_add(&c->helpers_in, 1);
    int h = atomic_load(&c->helpers);
    c->help_seen[h] = seen;
    atomic_store(&c->helpers, h + 1); /* joins are serialized by the runner's lock */
    return h;
}

/* The helper in slot h works c's jobs until c is freed. */
static void cpu_help_run(backend_ctx *c, int h)
{
    pool_serve(c, c->n_workers + h, c->help_seen[h]);
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
        if (pthread_create(&c->worker[i], NULL, pool_worker, a) != 0) {
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

typedef struct rows_job {
    float *dst;
    const float *x;
    const int64_t *idx;
    size_t dst_stride, idx_stride, dim;
    int rows, count;
} rows_job;

/* One part's rows of every problem. */
static void rows_part(void *p, int part, int parts)
{
    const rows_job *j = p;
    int r0, r1;
    part_range(j->rows, 1, part, parts, &r0, &r1);
    for (int k = 0; k < j->count; k++)
        for (int r = r0; r < r1; r++)
            memcpy(j->dst + k * j->dst_stride + (size_t)r * j->dim,
                   j->x + (size_t)j->idx[k * j->idx_stride + (size_t)r] * j->dim,
                   j->dim * sizeof(float));
}

/* The rows come from all over a dataset larger than the caches, so a big
 * gather is split: each thread's copies wait on memory at the same time. */
#define GATHER_MIN_SPLIT 32768

static void cpu_load_rows(backend_ctx *c, float *dst, size_t dst_stride, const float *x,
                          int64_t dim, const int64_t *idx, size_t idx_stride, int rows, int count)
{
    rows_job j = {dst, x, idx, dst_stride, idx_stride, (size_t)dim, rows, count};
    double n = (double)rows * (double)dim * count;
    pool_run(c, rows_part, &j, n >= GATHER_MIN_SPLIT ? POOL_MIN_WORK : 0.0);
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
        kern_bias_act(Y + k * sY, bias ? bias + k * sb : NULL, rows, cols, act);
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

/* The arguments of one dense_step call, split over the pool by rows of W. */
typedef struct dense_job {
    cpu_isa isa;
    float *W, *s1, *s2;
    size_t sW, sdZ, sX, ldd, ldx;
    const float *dZ, *X;
    int rows, n_out, n_in, count;
    const unsigned char *active;
    step_scalars o[64];
} dense_job;

/* One part's rows of W, for every active model. */
static void dense_part(void *p, int part, int parts)
{
    const dense_job *j = p;
    int r0, r1;
    part_range(j->n_out, DENSE_TILE_ROWS, part, parts, &r0, &r1);
    for (int k = 0; k < j->count && r0 < r1; k++) {
        if (!j->active[k])
            continue;
        size_t w = k * j->sW;
        kern_dense_step(j->isa, j->W + w, j->s1 ? j->s1 + w : NULL, j->s2 ? j->s2 + w : NULL,
                        j->dZ + k * j->sdZ, j->ldd, j->X + k * j->sX, j->ldx, j->rows, j->n_in, r0,
                        r1, &j->o[k]);
    }
}

static int cpu_dense_step(backend_ctx *c, opt_kind kind, float *W, float *s1, float *s2,
                          size_t sW, const float *dZ, int ldd, size_t sdZ, const float *X, int ldx,
                          size_t sX, int rows, int n_out, int n_in, const optim_step *o, int count)
{
    if (c->isa == ISA_NONE || count > 64)
        return 0;
    dense_job j = {c->isa, W, s1, s2, sW, sdZ, sX, (size_t)ldd, (size_t)ldx, dZ, X, rows,
                   n_out, n_in, count, o->active, {{0}}};
    for (int k = 0; k < count; k++) {
        if (kind == OPT_SGD)
            sgd_scalars(o->lr[k], o->momentum[k], o->nesterov[k], s1 != NULL, &j.o[k]);
        else
            adam_scalars(o->lr[k], o->beta1[k], o->beta2[k], o->eps[k], o->weight_decay[k], o->t,
                         &j.o[k]);
    }
    pool_run(c, dense_part, &j, (double)rows * n_out * n_in * count);
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
    pool_run(c, transpose_part, &j, n >= TRANSPOSE_MIN_SPLIT ? POOL_MIN_WORK : 0.0);
}

typedef struct fwd_job {
    cpu_isa isa;
    float *Y;
    const float *XT, *W;
    int ldy, ldt, rows, n_out, n_in;
} fwd_job;

static void fwd_part(void *p, int part, int parts)
{
    const fwd_job *j = p;
    int r0, r1;
    part_range(j->n_out, DENSE_TILE_ROWS, part, parts, &r0, &r1);
    if (r0 < r1)
        kern_dense_fwd(j->isa, j->Y, (size_t)j->ldy, j->W, j->XT, (size_t)j->ldt, j->rows, j->n_in,
                       r0, r1);
}

static void cpu_dense_forward(backend_ctx *c, float *Y, int ldy, const float *XT, int ldt,
                              const float *W, int rows, int n_out, int n_in)
{
    fwd_job j = {c->isa, Y, XT, W, ldy, ldt, rows, n_out, n_in};
    pool_run(c, fwd_part, &j, (double)rows * n_out * n_in);
}

static const backend_ops cpu_ops = {
    .name = "cpu",
    .api_version = COHORT_BACKEND_API_VERSION,
    .model_major = 1,
    .stats_every = 1,
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
    .dense_step = cpu_dense_step,
    .xt_ld = cpu_xt_ld,
    .transpose = cpu_transpose,
    .dense_forward = cpu_dense_forward,
    .help_join = cpu_help_join,
    .help_run = cpu_help_run,
};

const backend_ops *backend_cpu(void) { return &cpu_ops; }

int backend_cpu_blas_threads(int threads) { return cpu_isa_detect() != ISA_NONE ? 1 : threads; }
