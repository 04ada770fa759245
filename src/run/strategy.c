/*
 * Training a run (cohort_run_train): the entry point, which picks the
 * strategy's concurrency, forms the jobs (jobs.c) and hands them to the
 * strategy (strategy_threads.c, strategy_processes.c), then writes the
 * final results and says how the run ended. See run/jobs.h for the map.
 */
#include "backend/cpu/cpu.h"
#include "io/report.h"
#include "run/jobs.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

static int threads_of(const cohort_run *run)
{
    int cores = run->devices->dev[0].info.threads;
    return run->opt.threads > 0 ? run->opt.threads : cores;
}

cohort_status run_plan_groups(cohort_run *run, run_group_info **out, int *n, cohort_error *err)
{
    job_runner s;
    memset(&s, 0, sizeof s);
    s.run = run;
    *out = NULL;
    *n = 0;
    if (run->trained_groups) {
        /* Trained: the models are done and would form no group; the plan
         * is the one the run trained by. */
        size_t bytes = (size_t)(run->n_trained_groups ? run->n_trained_groups : 1) *
                       sizeof **out;
        if (!(*out = malloc(bytes)))
            return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
        memcpy(*out, run->trained_groups, bytes);
        *n = run->n_trained_groups;
        return COHORT_OK;
    }
    cohort_status st = jobs_form(&s, threads_of(run), err);
    if (!st)
        st = jobs_groups(&s, out, n, err);
    free(s.jobs);
    return st;
}

cohort_status run_jobs(cohort_run *run, cohort_error *err)
{
    job_runner s;
    memset(&s, 0, sizeof s);
    s.run = run;
    s.out_fd = -1;
    pthread_cond_init(&s.cond, NULL);
    int threads = threads_of(run);
    cohort_status st = jobs_form(&s, threads, err);
    /* The first phase's groups are the plan cohort_run_plan_json gives
     * after training (a scheduler's later phases train fewer models). */
    if (!st && !run->trained_groups)
        st = jobs_groups(&s, &run->trained_groups, &run->n_trained_groups, err);
    switch (run->strategy) {
    case COHORT_STRATEGY_FUSED:
    case COHORT_STRATEGY_THREADS:
    case COHORT_STRATEGY_PROCESSES:
        s.concurrency = threads < s.n_jobs ? threads : s.n_jobs;
        if (s.concurrency < 1)
            s.concurrency = 1;
        s.threads_per_job = threads / s.concurrency > 0 ? threads / s.concurrency : 1;
        break;
    default:
        s.concurrency = 1;
        s.threads_per_job = threads;
        break;
    }
    if (!st && s.concurrency > 1)
        jobs_largest_first(&s);
    /* OpenBLAS's thread count is global: the runner sets it once, for all. */
    int threaded = run->strategy == COHORT_STRATEGY_THREADS || run->strategy == COHORT_STRATEGY_FUSED;
    backend_cpu_set_blas_threads(threaded ? 1 : backend_cpu_blas_threads(s.threads_per_job));
    if (!st) {
        if (threaded && s.concurrency > 1)
            st = jobs_run_threads(&s, err);
        else if (run->strategy == COHORT_STRATEGY_PROCESSES)
            st = jobs_run_processes(&s, err);
        else
            jobs_run_sequential(&s);
    }
    free(s.jobs);
    pthread_cond_destroy(&s.cond);
    return st;
}

static int count_failed(const cohort_run *run)
{
    int n = 0;
    for (int i = 0; i < run->n; i++)
        n += run->m[i].res.state != MODEL_OK && run->m[i].res.state != MODEL_PRUNED;
    return n;
}

cohort_status run_check_trainable(const cohort_run *run, cohort_error *err)
{
    int trainable = 0, resumed = 0;
    for (int i = 0; i < run->n; i++) {
        trainable += !run->m[i].done;
        resumed += run->m[i].resumed;
    }
    if (trainable == 0 && resumed == 0) {
        /* At the first model's line: every model failed, and its reason
         * (a memory plan over the device's limit, most often) is said
         * where the plan defines it. */
        if (run->n && run->plan && run->plan->path[0] && run->m[0].spec->line > 0)
            return cohort_fail(err, COHORT_ERR_INPUT, "%s:%d: no model can be trained: %s",
                               run->plan->path, run->m[0].spec->line, run->m[0].res.error);
        return cohort_fail(err, COHORT_ERR_INPUT, "no model can be trained: %s",
                           run->n ? run->m[0].res.error : "the plan has no models");
    }
    return COHORT_OK;
}

cohort_status cohort_run_train(cohort_run *run, cohort_error *err)
{
    if (!run)
        return cohort_fail(err, COHORT_ERR_USAGE, "cohort_run_train: run is NULL");
    /* The models' entries hold the first training's results: a second one
     * would find none to train and say so with an empty reason. */
    if (run->trained)
        return cohort_fail(err, COHORT_ERR_USAGE,
                           "cohort_run_train: this run has trained already; create a new run "
                           "(cohort_run_create, with opt.resume to go on from its checkpoints)");
    /* Before results.json is written: a run refused here leaves the
     * directory's earlier run as it was. */
    cohort_status st = run_check_trainable(run, err);
    if (st)
        return st;
    if (run->out_dir[0] && (st = run_write_results(run, err)))
        return st;
    run->trained = 1;
    if (run->out_dir[0] && run->plan->source) {
        char path[COHORT_PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/plan.yaml", run->out_dir);
        file_write_atomic(path, run->plan->source, strlen(run->plan->source), NULL);
    }
    prune_kind sk = run->plan->scheduler.kind;
    st = sk == PRUNE_PBT    ? run_scheduler_pbt(run, err)
         : sk != PRUNE_NONE ? run_scheduler_prune(run, err)
                            : run_jobs(run, err);
    pthread_mutex_lock(&run->lock);
    if (run->stop) {
        /* Models the stop kept from starting, or from reporting, are
         * interrupted too: --resume trains them. */
        for (int i = 0; i < run->n; i++) {
            model_entry *e = &run->m[i];
            if (e->done || (e->res.state != MODEL_PENDING && e->res.state != MODEL_RUNNING))
                continue;
            str_copy(e->res.error, sizeof e->res.error,
                     e->res.state == MODEL_PENDING
                         ? (run->disk_full ? "not started: the disk is full" : "not started")
                         : "stopped");
            e->res.state = MODEL_INTERRUPTED;
        }
    }
    if (run->out_dir[0] && !run->disk_full) {
        /* The final results.json: run_tick_results writes it only now and then. */
        cohort_error werr;
        /* The disk may fill at this very write: then it is the full disk's
         * case below (exit 1, what is stale, --resume), not an I/O error
         * that would say nothing trained. */
        if (run_write_results(run, &werr) && !run_disk_full(run) && !st) {
            pthread_mutex_unlock(&run->lock);
            *err = werr;
            return werr.status;
        }
    }
    if (run->disk_full) {
        /* One last try, then say what on disk is out of date. */
        cohort_error werr;
        int stale_results = run_write_results(run, &werr) != COHORT_OK;
        int stale_report = report_write(run->out_dir, &werr) != COHORT_OK;
        pthread_mutex_unlock(&run->lock);
        if (st)
            return st;
        return cohort_fail(err, COHORT_ERR_PARTIAL,
                           "the disk is full: writing %s failed for lack of space, so no model "
                           "was started after it and no checkpoint written; %s%s%s; the "
                           "checkpoints in %s/checkpoints are good. Free some space, then "
                           "--resume goes on",
                           file_out_of_space(),
                           stale_results || stale_report ? "stale on disk: " : "",
                           stale_results ? "results.json (it may show models running or "
                                           "pending), " : "",
                           stale_report ? "report.html, and the histories and weights of the "
                                          "models not ok"
                                        : "the histories and weights of the models not ok",
                           run->out_dir);
    }
    run_refresh_report(run, 1);
    pthread_mutex_unlock(&run->lock);
    if (st)
        return st;
    if (run->stop)
        return run->out_dir[0]
                   ? cohort_fail(err, COHORT_ERR_INTERRUPTED,
                                 "interrupted; finished models are in results.json")
                   : cohort_fail(err, COHORT_ERR_INTERRUPTED,
                                 "interrupted; nothing was saved (no output directory), each "
                                 "model's result says how far it got");
    int failed = count_failed(run);
    if (failed)
        return cohort_fail(err, COHORT_ERR_PARTIAL, "%d of %d models did not finish", failed,
                           run->n);
    return COHORT_OK;
}

