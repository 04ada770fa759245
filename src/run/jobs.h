/*
 * The jobs of a run and the strategies that run them (internal to src/run).
 * The models of a run are cut into jobs (a training group: one model, or K
 * same-shaped models when fused) and each job runs through job_run().
 * Strategies differ only in where job_run() runs:
 *   sequential  one job at a time in this thread, every core on it;
 *   threads     several jobs at once, one thread each, BLAS single-threaded;
 *   processes   one worker process per job, forked after the data is loaded;
 *   fused       same-shaped models on a device trained as one group.
 * job_run() reports through job_report(): applied to the model entries
 * (run_apply_msg), or sent down a pipe by a worker process and applied by
 * the parent. A job starts only when its device has room for its planned
 * bytes (job_reserve).
 *
 * Who owns what:
 *   events.c              reports: applying them to the model entries, the
 *                         run's events, report.html's refresh, the full disk;
 *   job.c                 one job's training: create or resume its group,
 *                         fit, test and confusion matrices, final reports;
 *   jobs.c                forming the jobs, cutting fused groups over a CPU's
 *                         cores, their order, room and cores on a device;
 *   strategy_threads.c    the sequential and threads strategies;
 *   strategy_processes.c  the processes strategy (worker processes, pipes);
 *   strategy.c            the entry point: cohort_run_train, run_jobs.
 */
#ifndef COHORT_RUN_JOBS_H
#define COHORT_RUN_JOBS_H

#include "run/run.h"

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#define MAX_GROUP COHORT_MAX_GROUP
#define MAX_CONFUSION_CLASSES 256

/* A job: the models (indices into run->m) trained as one group on one
 * device, and where it stands. */
typedef struct job {
    int n;
    int idx[MAX_GROUP];
    int device;
    uint64_t bytes;  /* the group's planned bytes */
    double cost;     /* training FLOPs over the epochs left: the start order */
    int state;       /* 0 pending, 1 running, 2 done */
    pid_t pid;
    int fd;
    int finals;      /* models whose final report arrived */
    int failed_start;
    int starting;    /* threads: started, its group not yet taken from the pool */
    int threads;     /* the threads it was given (job_threads) */
    train_group *live; /* the group while it exists (not in a worker process), under run->lock */
} job;

/* The runner's state: the jobs of a run, what they hold of each device
 * (bytes, cores), and how many run side by side. */
typedef struct job_runner {
    cohort_run *run;
    job *jobs;
    int n_jobs;
    uint64_t reserved[COHORT_MAX_DEVICES];
    int starting[COHORT_MAX_DEVICES]; /* jobs of each device with j->starting */
    int cores_used[COHORT_MAX_DEVICES]; /* threads of each device's jobs and helpers */
    int threads_per_job;
    int concurrency;
    int out_fd;      /* >= 0 in a worker process */
    int next;        /* threads: next job to consider */
    int running;
    pthread_cond_t cond;
} job_runner;

/* One report of a job on one model: its start, a step, an epoch, or its
 * outcome (MSG_FINAL, followed in a pipe by n_confusion int64s). */
enum { MSG_START = 1, MSG_STEP, MSG_EPOCH, MSG_FINAL };

typedef struct msg {
    int type, model;
    int epoch, is_best;
    int64_t step, steps;
    double loss, accuracy;
    epoch_metrics m;
    int state, epochs_run, best_epoch, stopped_early;
    epoch_metrics best;
    double seconds, test_loss, test_accuracy, test_mae, test_rmse;
    uint64_t peak_bytes, planned_bytes;
    char error[768];
    char weights[COHORT_PATH_MAX], best_weights[COHORT_PATH_MAX];
    /* From a worker process whose write failed for lack of space: that
     * file. Its own latch (file_out_of_space) is not the parent's, which
     * must stop the run as for a full disk of its own. */
    char no_space[COHORT_PATH_MAX];
    int n_confusion; /* int64 values that follow the message */
} msg;

/* ---- events.c ---- */

/* Whether the disk is full (a write of this process failed for lack of
 * space): then the run stops as if interrupted. Caller holds run->lock. */
int run_disk_full(cohort_run *run);
/* report.html after an epoch: at most once a second unless force. Caller
 * holds run->lock. */
void run_refresh_report(cohort_run *run, int force);
/* Apply one report to the model entries. Caller holds run->lock. */
void run_apply_msg(cohort_run *run, const msg *m, const int64_t *confusion);
/* Report from a job: down the pipe in a worker process, else applied here. */
void job_report(job_runner *s, msg *m, const int64_t *confusion);

/* ---- job.c ---- */

/* Train job j on the thread that calls, bound to its CPU part's cores. */
void job_run(job_runner *s, job *j);

/* ---- jobs.c ---- */

/* The jobs of the run: one per model, or per fused group, cut over the
 * cores on a CPU. */
cohort_status jobs_form(job_runner *s, int threads, cohort_error *err);
/* The jobs of s as groups (*out malloc'd, *n its length). */
cohort_status jobs_groups(const job_runner *s, run_group_info **out, int *n, cohort_error *err);
/* Largest first where jobs run side by side. */
void jobs_largest_first(job_runner *s);
/* Claim room for job j on its device; 0 when it does not fit right now. */
int job_reserve(job_runner *s, job *j);
void job_unreserve(job_runner *s, job *j);
/* The threads job j may take now, want at most. */
int job_threads(const job_runner *s, const job *j, int want);

/* ---- strategy_threads.c, strategy_processes.c ---- */

void jobs_run_sequential(job_runner *s);
cohort_status jobs_run_threads(job_runner *s, cohort_error *err);
cohort_status jobs_run_processes(job_runner *s, cohort_error *err);

#endif
