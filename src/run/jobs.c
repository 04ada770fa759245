/*
 * The jobs of a run (see run/jobs.h): one per model or per fused group,
 * fused groups cut over a CPU's cores, the order they start in, and the
 * room and cores each takes on its device.
 */
#include "run/jobs.h"
#include "util/util.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Planned bytes of a group of the given models, or 0 on error. */
static uint64_t group_bytes(const cohort_run *run, const int *idx, int n)
{
    const model_spec *specs[MAX_GROUP];
    for (int k = 0; k < n; k++)
        specs[k] = run->m[idx[k]].spec;
    model_spec merged;
    model_group_spec(specs, n, &merged);
    model_layout L;
    if (model_layout_make(&merged, run->in_shape, run->n_classes, n, &L, NULL))
        return 0;
    return L.total_bytes;
}

static cohort_status make_jobs(job_runner *s, cohort_error *err)
{
    cohort_run *run = s->run;
    s->jobs = calloc((size_t)(run->n ? run->n : 1), sizeof *s->jobs);
    if (!s->jobs)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    int fuse = run->strategy == COHORT_STRATEGY_FUSED;
    for (int i = 0; i < run->n; i++) {
        model_entry *e = &run->m[i];
        e->group = -1;
        if (e->done)
            continue;
        job *j = NULL;
        if (fuse)
            for (int g = 0; g < s->n_jobs && !j; g++) {
                job *c = &s->jobs[g];
                const model_entry *f = &run->m[c->idx[0]];
                if (c->device == e->device && c->n < MAX_GROUP && model_can_fuse(f->spec, e->spec) &&
                    f->start_epoch == e->start_epoch && f->start_step == e->start_step &&
                    f->stop_epoch == e->stop_epoch) {
                    c->idx[c->n] = i;
                    const cohort_device *d = &run->devices->dev[e->device];
                    uint64_t b = group_bytes(run, c->idx, c->n + 1);
                    if (b && b + device_ctx_bytes(d) <= mem_pool_limit(d->mem_pool))
                        j = c;
                }
            }
        if (!j) {
            j = &s->jobs[s->n_jobs++];
            j->device = e->device;
            j->fd = -1;
        }
        j->idx[j->n++] = i;
        j->bytes = group_bytes(run, j->idx, j->n);
        e->group = (int)(j - s->jobs);
    }
    return COHORT_OK;
}

/* The sub-groups job j is cut into: one per core of its CPU (of its part's
 * cores on a CPU part), at most one per model. */
static int group_parts(const job_runner *s, const job *j, int cores)
{
    const cohort_run *run = s->run;
    if (!run->devices->dev[j->device].kind->shares_cores || j->n < 2)
        return 1;
    int own = run_device_cores(run, j->device);
    if (own < cores)
        cores = own;
    return j->n < cores ? j->n : cores;
}

/*
 * On a CPU, a fused group is cut into one sub-group per core, trained side
 * by side: each core runs its models' small GEMMs single-threaded, which
 * is faster than splitting every small GEMM over the cores.
 */
static cohort_status split_groups_over_cores(job_runner *s, int cores, cohort_error *err)
{
    cohort_run *run = s->run;
    int total = 0;
    for (int i = 0; i < s->n_jobs; i++)
        total += group_parts(s, &s->jobs[i], cores);
    job *nj = calloc((size_t)(total ? total : 1), sizeof *nj);
    if (!nj)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    int n = 0;
    for (int i = 0; i < s->n_jobs; i++) {
        const job *j = &s->jobs[i];
        int parts = group_parts(s, j, cores);
        for (int p = 0; p < parts; p++) {
            job *d = &nj[n + p];
            d->device = j->device;
            d->fd = -1;
            for (int k = p; k < j->n; k += parts)
                d->idx[d->n++] = j->idx[k];
            d->bytes = group_bytes(run, d->idx, d->n);
            for (int k = 0; k < d->n; k++)
                run->m[d->idx[k]].group = n + p;
        }
        n += parts;
    }
    free(s->jobs);
    s->jobs = nj;
    s->n_jobs = n;
    return COHORT_OK;
}

/*
 * Claim room for job j on its device; 0 when it does not fit right now.
 * A job alone on its device always starts (placement refused the models
 * that cannot fit alone), so a job that waits waits for one that runs and
 * will release. A preallocated slab needs one free block of the group's
 * size, not only as many bytes in all: there the job also waits while
 * another job on the device has yet to take its block (where that lands
 * decides what is left), and then until the largest free block holds it.
 */
/* The bytes job j takes on its device while it runs: its group's, its
 * context's (a GPU's cuBLAS workspace and scratch, from the pool:
 * device_ctx_bytes), and under processes on a device whose workers each open
 * a CUDA context of their own, that context's (gpu_worker_bytes). */
uint64_t run_job_room(const cohort_run *run, int device, uint64_t bytes)
{
    const cohort_device *d = &run->devices->dev[device];
    uint64_t room = bytes + device_ctx_bytes(d);
    if (run->strategy == COHORT_STRATEGY_PROCESSES && d->kind->visible_env)
        room += gpu_worker_bytes(d->info.total_bytes);
    return room;
}

int job_reserve(job_runner *s, job *j)
{
    const cohort_device *d = &s->run->devices->dev[j->device];
    mem_pool *pool = d->mem_pool;
    uint64_t room = run_job_room(s->run, j->device, j->bytes);
    /* A slab's two blocks (the group's, its context's) both fit where its
     * largest free block holds the two together. */
    uint64_t block = mem_pool_charge(j->bytes) + device_ctx_bytes(d);
    if (s->reserved[j->device] > 0) {
        if (s->reserved[j->device] + room > mem_pool_limit(pool))
            return 0;
        if (mem_pool_policy(pool) == COHORT_MEM_PREALLOCATE &&
            (s->starting[j->device] > 0 || mem_pool_largest_free(pool) < block))
            return 0;
    }
    s->reserved[j->device] += room;
    return 1;
}

void job_unreserve(job_runner *s, job *j)
{
    s->reserved[j->device] -= run_job_room(s->run, j->device, j->bytes);
}

/* The threads job j may take now, want at most: on a CPU part, no more than
 * its cores leave free (0 when they are all taken). */
int job_threads(const job_runner *s, const job *j, int want)
{
    int left = run_device_cores(s->run, j->device) - s->cores_used[j->device];
    return want < left ? want : left > 0 ? left : 0;
}

int run_device_cores(const cohort_run *run, int dev)
{
    const cohort_device *d = &run->devices->dev[dev];
    return d->info.is_logical && d->kind->shares_cores ? d->info.threads : INT_MAX;
}

/* Costliest first; equal costs in the order the jobs were formed (plan order). */
static int by_cost(const void *pa, const void *pb)
{
    const job *a = pa, *b = pb;
    if (a->cost != b->cost)
        return a->cost > b->cost ? -1 : 1;
    return a->idx[0] - b->idx[0];
}

/*
 * Where jobs run side by side, the largest start first (longest processing
 * time first): a large job started last would run on alone at the end
 * while the other cores only help it.
 */
void jobs_largest_first(job_runner *s)
{
    cohort_run *run = s->run;
    for (int i = 0; i < s->n_jobs; i++) {
        job *j = &s->jobs[i];
        j->cost = 0.0;
        for (int k = 0; k < j->n; k++) {
            const model_entry *e = &run->m[j->idx[k]];
            j->cost += model_train_flops(&e->L, run->train.n) *
                       (double)((e->stop_epoch ? e->stop_epoch : e->spec->epochs) - e->start_epoch);
        }
    }
    qsort(s->jobs, (size_t)s->n_jobs, sizeof *s->jobs, by_cost);
    for (int i = 0; i < s->n_jobs; i++)
        for (int k = 0; k < s->jobs[i].n; k++)
            run->m[s->jobs[i].idx[k]].group = i;
}

/* The jobs of the run: one per model, or per fused group, cut over the
 * cores on a CPU. */
cohort_status jobs_form(job_runner *s, int threads, cohort_error *err)
{
    cohort_status st = make_jobs(s, err);
    if (!st && s->run->strategy == COHORT_STRATEGY_FUSED && threads > 1)
        st = split_groups_over_cores(s, threads, err);
    return st;
}

/* The jobs of s as groups (*out malloc'd, *n its length). */
cohort_status jobs_groups(const job_runner *s, run_group_info **out, int *n, cohort_error *err)
{
    run_group_info *g = calloc((size_t)(s->n_jobs ? s->n_jobs : 1), sizeof *g);
    if (!g)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < s->n_jobs; i++) {
        g[i].device = s->jobs[i].device;
        g[i].n = s->jobs[i].n;
        memcpy(g[i].idx, s->jobs[i].idx, (size_t)s->jobs[i].n * sizeof(int));
        g[i].bytes = s->jobs[i].bytes;
    }
    *out = g;
    *n = s->n_jobs;
    return COHORT_OK;
}
