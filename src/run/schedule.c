/*
 * Strategies. The models of a run are cut into jobs (a training group: one
 * model, or K same-shaped models when fused) and each job runs through
 * job_run(). Strategies differ only in where job_run() runs:
 *   sequential  one job at a time in this thread, every core on it;
 *   threads     several jobs at once, one thread each, BLAS single-threaded;
 *   processes   one worker process per job, forked after the data is loaded;
 *   fused       same-shaped models on a device trained as one group.
 * job_run() reports through report(): applied to the model entries here, or
 * sent down a pipe by a worker process and applied by the parent. A job
 * starts only when its device has room for its planned bytes.
 */
#include "backend/backend_impl.h"
#include "io/report.h"
#include "run/run.h"
#include "util/util.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_GROUP COHORT_MAX_GROUP
#define MAX_CONFUSION_CLASSES 256

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

typedef struct sched {
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
} sched;

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

/* ---- applying reports to the model entries -------------------------------- */

static void event_init(cohort_event *ev, cohort_event_kind kind, const cohort_run *run,
                       const model_entry *e)
{
    memset(ev, 0, sizeof *ev);
    ev->kind = kind;
    ev->model = e->index;
    ev->name = e->spec->name;
    ev->device = e->device >= 0 ? run->devices->dev[e->device].info.name : "";
    ev->epochs = e->spec->epochs;
    ev->loss = ev->accuracy = ev->val_loss = ev->val_accuracy = NAN;
    ev->mae = ev->rmse = ev->val_mae = ev->val_rmse = NAN;
}

/* The run whose event this thread is delivering: the callback runs under
 * run->lock, and cohort_run_model_result, called from it, must not lock
 * again. */
static _Thread_local const cohort_run *in_event;

int run_in_event(const cohort_run *run) { return in_event == run; }

/* Caller holds run->lock: events come one at a time, from whichever thread
 * applied the report. */
static void emit(cohort_run *run, cohort_event *ev)
{
    if (!run->opt.on_event)
        return;
    const cohort_run *outer = in_event;
    in_event = run;
    run->opt.on_event(ev, run->opt.user);
    in_event = outer;
}

/* report.html after an epoch: at most once a second (the last one is
 * written when the run ends). Caller holds run->lock. */
static void refresh_report(cohort_run *run, int force)
{
    double now = now_seconds();
    if (!run->out_dir[0] || (!force && now < run->next_report))
        return;
    cohort_error err;
    report_write(run->out_dir, &err);
    /* At most a tenth of the run goes to the report, however many models
     * it draws: the next one waits ten times as long as this one took. */
    double took = now_seconds() - now;
    run->next_report = now + (10.0 * took > 1.0 ? 10.0 * took : 1.0);
}

/* Whether the disk is full (a write of this process failed for lack of
 * space): then the run stops as if interrupted, starts no model and writes
 * no more checkpoints, so --resume goes on from the last good ones. */
static int disk_full(cohort_run *run)
{
    if (!run->disk_full && file_out_of_space()) {
        run->disk_full = 1;
        run->stop = 1;
    }
    return run->disk_full;
}

/* Apply one report. Caller holds run->lock. */
static void apply(cohort_run *run, const msg *m, const int64_t *confusion)
{
    model_entry *e = &run->m[m->model];
    cohort_event ev;
    cohort_error err;
    if (m->no_space[0]) {
        file_note_out_of_space(m->no_space);
        disk_full(run);
    }
    switch (m->type) {
    case MSG_START:
        e->res.state = MODEL_RUNNING;
        event_init(&ev, COHORT_EVENT_MODEL_START, run, e);
        emit(run, &ev);
        return;
    case MSG_STEP:
        event_init(&ev, COHORT_EVENT_STEP, run, e);
        ev.epoch = m->epoch;
        ev.step = m->step;
        ev.steps = m->steps;
        ev.loss = m->loss;
        ev.accuracy = m->accuracy;
        emit(run, &ev);
        return;
    case MSG_EPOCH:
        if (m->epoch >= 1 && m->epoch <= e->spec->epochs) {
            e->res.history[m->epoch - 1] = m->m;
            e->res.epochs_run = m->epoch;
        }
        if (m->is_best) {
            e->res.best_epoch = m->epoch;
            e->res.best = m->m;
            str_copy(e->best_weights, sizeof e->best_weights, m->best_weights);
        }
        e->res.seconds = m->seconds;
        if (run->out_dir[0] && !disk_full(run)) {
            run_write_history(run, e, &err);
            run_tick_results(run, &err);
            refresh_report(run, 0);
            disk_full(run);
        }
        event_init(&ev, COHORT_EVENT_EPOCH_END, run, e);
        ev.epoch = m->epoch;
        ev.loss = m->m.loss;
        ev.accuracy = m->m.accuracy;
        ev.val_loss = m->m.val_loss;
        ev.val_accuracy = m->m.val_accuracy;
        ev.mae = m->m.mae;
        ev.rmse = m->m.rmse;
        ev.val_mae = m->m.val_mae;
        ev.val_rmse = m->m.val_rmse;
        ev.seconds = m->seconds;
        emit(run, &ev);
        return;
    case MSG_FINAL:
        e->res.state = (model_state)m->state;
        str_copy(e->res.error, sizeof e->res.error, m->error);
        e->res.epochs_run = m->epochs_run < e->spec->epochs ? m->epochs_run : e->spec->epochs;
        e->res.best_epoch = m->best_epoch;
        e->res.best = m->best;
        e->res.stopped_early = m->stopped_early;
        e->res.seconds = m->seconds;
        e->test_loss = m->test_loss;
        e->test_accuracy = m->test_accuracy;
        e->test_mae = m->test_mae;
        e->test_rmse = m->test_rmse;
        e->peak_bytes = m->peak_bytes;
        if (m->planned_bytes)
            e->planned_bytes = m->planned_bytes;
        str_copy(e->weights, sizeof e->weights, m->weights);
        str_copy(e->best_weights, sizeof e->best_weights, m->best_weights);
        if (confusion && m->n_confusion == run->n_classes * run->n_classes) {
            free(e->confusion);
            e->confusion = malloc((size_t)m->n_confusion * sizeof(int64_t));
            if (e->confusion)
                memcpy(e->confusion, confusion, (size_t)m->n_confusion * sizeof(int64_t));
        }
        e->done = 1;
        if (run->out_dir[0] && !disk_full(run)) {
            run_write_history(run, e, &err);
            run_write_record(run, e, &err);
            run_tick_results(run, &err);
            disk_full(run);
        }
        /* A job that stopped at a scheduler's rung or interval is not the
         * model's end: the decision there says whether it goes on, and
         * run_emit_model_end reports a pruned model then. */
        if (!run_at_rung(run, e))
            run_emit_model_end(run, e);
        return;
    }
}

void run_emit_model_end(cohort_run *run, const model_entry *e)
{
    cohort_event ev;
    event_init(&ev, COHORT_EVENT_MODEL_END, run, e);
    ev.status = model_state_str(e->res.state);
    ev.error = e->res.error;
    ev.epoch = e->res.epochs_run;
    ev.seconds = e->res.seconds;
    ev.stopped_early = e->res.state == MODEL_OK && e->res.stopped_early;
    ev.restored_epoch = run_restored_epoch(e);
    emit(run, &ev);
}

static int write_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Report from a job: down the pipe in a worker process, else applied here. */
static void report(sched *s, msg *m, const int64_t *confusion)
{
    if (s->out_fd >= 0) {
        const char *full = file_out_of_space();
        if (full)
            str_copy(m->no_space, sizeof m->no_space, full);
        if (write_all(s->out_fd, m, sizeof *m) == 0 && m->n_confusion > 0)
            write_all(s->out_fd, confusion, (size_t)m->n_confusion * sizeof(int64_t));
        return;
    }
    pthread_mutex_lock(&s->run->lock);
    apply(s->run, m, confusion);
    pthread_mutex_unlock(&s->run->lock);
}

/* ---- running one job ------------------------------------------------------- */

typedef struct job_ctx {
    sched *s;
    job *j;
    train_group *g;
    float *host;
    double last_step_report;
    char best_weights[MAX_GROUP][COHORT_PATH_MAX];
    double t0;
    double base_seconds[MAX_GROUP]; /* --resume: each model's seconds before this run */
    float *scratch; /* [4, P] for checkpoints */
} job_ctx;

static void on_step(void *user, int k, int epoch, int64_t step, int64_t steps, double loss,
                    double accuracy)
{
    job_ctx *c = user;
    /* A worker process reports progress a few times a second, not every step. */
    if (c->s->out_fd >= 0) {
        double now = now_seconds();
        if (now - c->last_step_report < 0.2 && step != steps)
            return;
        if (k == c->j->n - 1)
            c->last_step_report = now;
    }
    msg m;
    memset(&m, 0, sizeof m);
    m.type = MSG_STEP;
    m.model = c->j->idx[k];
    m.epoch = epoch;
    m.step = step;
    m.steps = steps;
    m.loss = loss;
    m.accuracy = accuracy;
    report(c->s, &m, NULL);
}

static int on_epoch(void *user, int k, int epoch, const epoch_metrics *em, int is_best,
                    cohort_error *err)
{
    job_ctx *c = user;
    cohort_run *run = c->s->run;
    const model_entry *e = &run->m[c->j->idx[k]];
    if (is_best && run->out_dir[0] && !disk_full(run)) {
        group_get_params(c->g, k, c->host);
        /* Out of space: the run stops; the model is not failed for it. */
        if (run_write_weights(run, e, c->host, 1, c->best_weights[k], err) && !disk_full(run))
            return 1;
    }
    msg m;
    memset(&m, 0, sizeof m);
    m.type = MSG_EPOCH;
    m.model = e->index;
    m.epoch = epoch;
    m.is_best = is_best;
    m.m = *em;
    m.seconds = c->base_seconds[k] + (now_seconds() - c->t0);
    str_copy(m.best_weights, sizeof m.best_weights, c->best_weights[k]);
    report(c->s, &m, NULL);
    return 0;
}

static int on_checkpoint(void *user, int epoch, int64_t step, const train_result *res,
                         cohort_error *err)
{
    job_ctx *c = user;
    cohort_run *run = c->s->run;
    if (!run->out_dir[0] || disk_full(run))
        return 0; /* the last checkpoints that were written stay good */
    for (int k = 0; k < c->j->n; k++) {
        if (res[k].state != MODEL_RUNNING)
            continue;
        if (ckpt_write(run, &run->m[c->j->idx[k]], c->g, k, &res[k], epoch, step, c->scratch, err))
            return !disk_full(run);
    }
    return 0;
}

/* Train job j here: create its group, fit, evaluate on the test set, save
 * weights, report each model's outcome, release every byte. */
static void job_train(sched *s, job *j)
{
    cohort_run *run = s->run;
    cohort_device *dev = &run->devices->dev[j->device];
    const model_spec *specs[MAX_GROUP];
    train_result res[MAX_GROUP];
    job_ctx c;
    memset(&c, 0, sizeof c);
    memset(res, 0, sizeof res);
    c.s = s;
    c.j = j;
    c.t0 = now_seconds();
    msg m;
    for (int k = 0; k < j->n; k++) {
        specs[k] = run->m[j->idx[k]].spec;
        memset(&m, 0, sizeof m);
        m.type = MSG_START;
        m.model = j->idx[k];
        report(s, &m, NULL);
    }
    cohort_error err;
    err.message[0] = 0;
    cohort_status st = group_create(specs, j->n, run->in_shape, run->n_classes, dev,
                                    j->threads, &c.g, &err);
    int helpable = c.g && s->out_fd < 0; /* a worker process has no helpers, nor their lock */
    if (s->out_fd < 0) {
        pthread_mutex_lock(&run->lock);
        j->live = c.g;
        if (j->starting) {
            /* The group holds its block of the pool: the next job on the
             * device may look for its own (reserve). */
            j->starting = 0;
            s->starting[j->device]--;
            pthread_cond_broadcast(&s->cond);
        }
        pthread_mutex_unlock(&run->lock);
    }
    size_t P = c.g ? group_layout(c.g)->n_params : 0;
    if (!st) {
        c.host = mem_alloc_big(P * sizeof(float));
        c.scratch = mem_alloc_big(4 * P * sizeof(float));
        if (!c.host || !c.scratch)
            st = cohort_fail(&err, COHORT_ERR_NOMEM, "out of host memory");
    }
    for (int k = 0; !st && k < j->n; k++) {
        res[k].history = calloc((size_t)specs[k]->epochs, sizeof(epoch_metrics));
        if (!res[k].history)
            st = cohort_fail(&err, COHORT_ERR_NOMEM, "out of host memory");
    }
    /* --resume: every model of a job stands at the same point (make_jobs). */
    const model_entry *e0 = &run->m[j->idx[0]];
    train_start start = {e0->start_epoch, e0->start_step, e0->stop_epoch};
    int resuming = start.epoch > 0 || start.step > 0;
    for (int k = 0; !st && resuming && k < j->n; k++) {
        const model_entry *e = &run->m[j->idx[k]];
        ckpt ck;
        st = ckpt_read(run, e, &ck, &err);
        if (!st && !ck.found)
            st = cohort_fail(&err, COHORT_ERR_IO, "model '%s': its checkpoint disappeared",
                             e->spec->name);
        if (!st) {
            group_set_state(c.g, k, ck.params, ck.have[1] ? ck.params + P : NULL,
                            ck.have[2] ? ck.params + 2 * P : NULL,
                            ck.have[3] ? ck.params + 3 * P : NULL);
            epoch_metrics *h = res[k].history;
            res[k] = ck.res;
            res[k].history = h;
            memcpy(h, ck.history, (size_t)ck.epoch * sizeof *h);
            c.base_seconds[k] = ck.res.seconds;
            str_copy(c.best_weights[k], sizeof c.best_weights[k], e->best_weights);
        }
        ckpt_free(&ck);
    }
    if (!st) {
        /* Without an output directory nothing is checkpointed, and a stopped
         * model's error must not say otherwise. */
        train_callbacks cb = {on_step, on_epoch, run->out_dir[0] ? on_checkpoint : NULL, &c,
                              &run->stop};
        group_fit(c.g, &run->train, run->has_val ? &run->val : NULL, &cb, &start, res, &err);
    }
    int C = run->n_classes;
    int n_conf = run->has_test && C <= MAX_CONFUSION_CLASSES ? C * C : 0;
    int64_t *conf = n_conf ? malloc((size_t)n_conf * sizeof *conf) : NULL;
    /* The classes the test pass gives, for the confusion matrices: one pass for both. */
    int32_t *pred = conf ? malloc((size_t)j->n * (size_t)run->test.n * sizeof *pred + 1) : NULL;
    uint64_t share = c.g ? run_group_share(group_peak_bytes(c.g), j->n) : 0;
    uint64_t planned = run_group_share(j->bytes, j->n);
    eval_metrics te[MAX_GROUP];
    cohort_status test_st = COHORT_OK;
    if (!st && run->has_test)
        test_st = group_evaluate(c.g, &run->test, te, pred);
    for (int k = 0; k < j->n; k++) {
        memset(&m, 0, sizeof m);
        m.type = MSG_FINAL;
        m.model = j->idx[k];
        m.test_loss = m.test_accuracy = m.test_mae = m.test_rmse = NAN;
        m.planned_bytes = planned;
        m.peak_bytes = share;
        if (st) {
            m.state = MODEL_FAILED;
            str_copy(m.error, sizeof m.error, err.message);
        } else {
            const train_result *r = &res[k];
            m.state = r->state;
            str_copy(m.error, sizeof m.error, r->error);
            if (r->state == MODEL_INTERRUPTED && run->disk_full)
                str_copy(m.error, sizeof m.error,
                         "stopped: the disk is full; --resume continues from its last checkpoint");
            m.epochs_run = r->epochs_run;
            m.best_epoch = r->best_epoch;
            m.best = r->best;
            m.stopped_early = r->stopped_early;
            m.seconds = r->seconds;
            str_copy(m.best_weights, sizeof m.best_weights, c.best_weights[k]);
            if (r->state == MODEL_OK && test_st) {
                m.state = MODEL_FAILED;
                str_copy(m.error, sizeof m.error, "out of host memory evaluating the test data");
            }
            if (r->state == MODEL_OK && run->has_test && !test_st) {
                m.test_loss = te[k].loss;
                m.test_accuracy = te[k].accuracy;
                m.test_mae = te[k].mae;
                m.test_rmse = te[k].rmse;
                if (conf && pred) {
                    memset(conf, 0, (size_t)n_conf * sizeof *conf);
                    const int32_t *pk = pred + (size_t)k * (size_t)run->test.n;
                    for (int64_t i = 0; i < run->test.n; i++)
                        if (pk[i] >= 0 && pk[i] < C)
                            conf[run->test.y[i] * C + pk[i]]++;
                    m.n_confusion = n_conf;
                }
            }
            const char *dev_error = c.g ? group_device_error(c.g) : "";
            if (m.state == MODEL_OK && *dev_error) {
                /* What the device copies back after an error is NaN: no
                 * weights from it, and no state OK. */
                m.state = MODEL_FAILED;
                snprintf(m.error, sizeof m.error, "the device failed: %s", dev_error);
            }
            if (m.state == MODEL_OK && run->out_dir[0]) {
                group_get_params(c.g, k, c.host);
                if (run_write_weights(run, &run->m[j->idx[k]], c.host, 0, m.weights, &err)) {
                    m.state = MODEL_FAILED;
                    str_copy(m.error, sizeof m.error, err.message);
                }
            }
        }
        report(s, &m, conf);
    }
    for (int k = 0; k < j->n; k++)
        free(res[k].history);
    free(conf);
    free(pred);
    free(c.host);
    free(c.scratch);
    if (helpable) {
        pthread_mutex_lock(&run->lock);
        j->live = NULL; /* no helper joins it from here on */
        pthread_mutex_unlock(&run->lock);
    }
    group_free(c.g);
}

/* Job j on the thread that calls: bound to its CPU part's cores, where its
 * device is one, for the time it trains (the pool threads it starts inherit
 * that), then as it was. */
static void job_run(sched *s, job *j)
{
    cpu_set_t saved;
    int bound = device_bind_thread(s->run->devices, &s->run->devices->dev[j->device], &saved);
    job_train(s, j);
    device_unbind_thread(bound, &saved);
}

/* ---- jobs ------------------------------------------------------------------- */

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

static cohort_status make_jobs(sched *s, cohort_error *err)
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
                    uint64_t b = group_bytes(run, c->idx, c->n + 1);
                    if (b && b <= pool_limit(run->devices->dev[e->device].pool))
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
static int group_parts(const sched *s, const job *j, int cores)
{
    const cohort_run *run = s->run;
    if (strcmp(run->devices->dev[j->device].info.kind, "cpu") != 0 || j->n < 2)
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
static cohort_status split_groups_over_cores(sched *s, int cores, cohort_error *err)
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
static int reserve(sched *s, job *j)
{
    cohort_pool *pool = s->run->devices->dev[j->device].pool;
    if (s->reserved[j->device] > 0) {
        if (s->reserved[j->device] + j->bytes > pool_limit(pool))
            return 0;
        if (pool_policy(pool) == COHORT_MEM_PREALLOCATE &&
            (s->starting[j->device] > 0 || pool_largest_free(pool) < pool_charge(j->bytes)))
            return 0;
    }
    s->reserved[j->device] += j->bytes;
    return 1;
}

static void unreserve(sched *s, job *j) { s->reserved[j->device] -= j->bytes; }

/* The threads job j may take now, want at most: on a CPU part, no more than
 * its cores leave free (0 when they are all taken). */
static int job_threads(const sched *s, const job *j, int want)
{
    int left = run_device_cores(s->run, j->device) - s->cores_used[j->device];
    return want < left ? want : left > 0 ? left : 0;
}

/* ---- sequential and threads --------------------------------------------------- */

static void run_sequential(sched *s)
{
    for (int i = 0; i < s->n_jobs && !s->run->stop; i++) {
        job *j = &s->jobs[i];
        reserve(s, j);
        j->threads = job_threads(s, j, s->threads_per_job);
        backend_cpu_set_blas_threads(backend_cpu_blas_threads(j->threads));
        j->state = 1;
        job_run(s, j);
        j->state = 2;
        unreserve(s, j);
    }
}

static void *thread_main(void *arg)
{
    sched *s = arg;
    cohort_run *run = s->run;
    pthread_mutex_lock(&run->lock);
    for (;;) {
        job *pick = NULL;
        int pending = 0;
        for (int i = 0; i < s->n_jobs; i++) {
            job *j = &s->jobs[i];
            if (j->state != 0)
                continue;
            pending++;
            if (job_threads(s, j, s->threads_per_job) > 0 && reserve(s, j)) {
                pick = j;
                break;
            }
        }
        if (run->stop)
            break;
        if (pending == 0) {
            /* Nothing left to start: help a job still running (one that
             * started first may be the largest) where its device has a
             * core free, and then look again. */
            job *h = NULL;
            int slot = -1;
            for (int i = 0; i < s->n_jobs && !h; i++)
                if (s->jobs[i].state == 1 && s->jobs[i].live &&
                    job_threads(s, &s->jobs[i], 1) > 0 &&
                    (slot = group_help_join(s->jobs[i].live)) >= 0)
                    h = &s->jobs[i];
            if (!h)
                break;
            train_group *g = h->live;
            int d = h->device;
            s->cores_used[d]++;
            pthread_mutex_unlock(&run->lock);
            cpu_set_t saved;
            int bound = device_bind_thread(run->devices, &run->devices->dev[d], &saved);
            group_help_run(g, slot);
            device_unbind_thread(bound, &saved);
            pthread_mutex_lock(&run->lock);
            s->cores_used[d]--;
            continue;
        }
        if (!pick) {
            /* Everything left waits for memory another job holds. */
            if (s->running == 0)
                break;
            pthread_cond_wait(&s->cond, &run->lock);
            continue;
        }
        pick->state = 1;
        pick->starting = 1;
        s->starting[pick->device]++;
        pick->threads = job_threads(s, pick, s->threads_per_job);
        s->cores_used[pick->device] += pick->threads;
        s->running++;
        pthread_mutex_unlock(&run->lock);
        job_run(s, pick);
        pthread_mutex_lock(&run->lock);
        pick->state = 2;
        s->running--;
        s->cores_used[pick->device] -= pick->threads;
        unreserve(s, pick);
        pthread_cond_broadcast(&s->cond);
    }
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&run->lock);
    return NULL;
}

static cohort_status run_threads(sched *s, cohort_error *err)
{
    pthread_t t[64];
    int n = s->concurrency < 64 ? s->concurrency : 64, started = 0;
    for (int i = 0; i < n; i++) {
        if (pthread_create(&t[i], NULL, thread_main, s) != 0)
            break;
        started++;
    }
    if (started == 0)
        return cohort_fail(err, COHORT_ERR_INTERNAL, "cannot start worker threads");
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    return COHORT_OK;
}

/* ---- processes ------------------------------------------------------------------ */

static int read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int launch(sched *s, job *j, int threads)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        /* A worker never outlives its parent. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1)
            _exit(1);
        /* ps and top name the model a worker trains (15 bytes at most). */
        char title[16];
        snprintf(title, sizeof title, "cohort:%.8s", s->run->m[j->idx[0]].spec->name);
        prctl(PR_SET_NAME, title);
        close(fds[0]);
        for (int i = 0; i < s->n_jobs; i++)
            if (s->jobs[i].fd >= 0)
                close(s->jobs[i].fd);
        cohort_device *d = &s->run->devices->dev[j->device];
        /* The worker sees only its GPU, set before any GPU code is loaded;
         * there that GPU is device 0. */
        if (!strcmp(d->info.kind, "cuda")) {
            char vis[16];
            snprintf(vis, sizeof vis, "%d", d->be_dev);
            setenv("CUDA_VISIBLE_DEVICES", vis, 1);
            d->be_dev = 0;
            pool_rebind(d->pool, 0);
        }
        j->threads = threads;
        backend_cpu_set_blas_threads(backend_cpu_blas_threads(threads));
        s->out_fd = fds[1];
        job_run(s, j);
        close(fds[1]);
        _exit(0);
    }
    close(fds[1]);
    j->pid = pid;
    j->fd = fds[0];
    j->state = 1;
    return 0;
}

/* The worker of j ended: every model without a final report failed. */
static void reap(sched *s, job *j)
{
    int status = 0;
    while (waitpid(j->pid, &status, 0) < 0 && errno == EINTR)
        ;
    close(j->fd);
    j->fd = -1;
    j->state = 2;
    s->cores_used[j->device] -= j->threads;
    unreserve(s, j);
    char why[256];
    if (WIFSIGNALED(status))
        snprintf(why, sizeof why, "its worker process (pid %d) was killed by signal %d (%s)",
                 (int)j->pid, WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(why, sizeof why, "its worker process (pid %d) exited with status %d before it "
                 "finished", (int)j->pid, WEXITSTATUS(status));
    cohort_run *run = s->run;
    pthread_mutex_lock(&run->lock);
    for (int k = 0; k < j->n; k++) {
        model_entry *e = &run->m[j->idx[k]];
        if (e->done)
            continue;
        msg m;
        memset(&m, 0, sizeof m);
        m.type = MSG_FINAL;
        m.model = e->index;
        m.state = run->stop ? MODEL_INTERRUPTED : MODEL_FAILED;
        m.epochs_run = e->res.epochs_run;
        m.best_epoch = e->res.best_epoch;
        m.best = e->res.best;
        m.seconds = e->res.seconds;
        m.test_loss = m.test_accuracy = m.test_mae = m.test_rmse = NAN;
        m.peak_bytes = RUN_PEAK_UNKNOWN; /* the worker held its group, but said nothing of it */
        str_copy(m.best_weights, sizeof m.best_weights, e->best_weights);
        str_copy(m.error, sizeof m.error,
                 !run->stop          ? why
                 : run->out_dir[0] ? "stopped before its worker reported; its last checkpoint is saved"
                                   : "stopped before its worker reported");
        apply(run, &m, NULL);
    }
    pthread_mutex_unlock(&run->lock);
}

static cohort_status run_processes(sched *s, cohort_error *err)
{
    cohort_run *run = s->run;
    int forwarded = 0;
    for (;;) {
        int running = 0, pending = 0, waiting = 0;
        for (int i = 0; i < s->n_jobs; i++) {
            running += s->jobs[i].state == 1;
            waiting += s->jobs[i].state == 0;
        }
        for (int i = 0; i < s->n_jobs; i++) {
            job *j = &s->jobs[i];
            if (j->state == 0 && !run->stop) {
                /* The last job may take every core the others left (on a
                 * CPU part, those of its part). */
                int threads = job_threads(s, j, waiting == 1 ? (s->concurrency - running) *
                                                                   s->threads_per_job
                                                             : s->threads_per_job);
                if (running < s->concurrency && threads > 0 && reserve(s, j)) {
                    waiting--;
                    running++;
                    j->threads = threads;
                    s->cores_used[j->device] += threads;
                    if (launch(s, j, threads) != 0) {
                        s->cores_used[j->device] -= threads;
                        unreserve(s, j);
                        return cohort_fail(err, COHORT_ERR_INTERNAL, "cannot start a worker: %s",
                                           strerror(errno));
                    }
                } else {
                    pending++;
                }
            }
        }
        if (running == 0 && (pending == 0 || run->stop))
            break;
        if (run->stop && !forwarded) {
            /* Workers finish their step and report; they may not have seen
             * the signal if it was sent to this process alone. */
            for (int i = 0; i < s->n_jobs; i++)
                if (s->jobs[i].state == 1)
                    kill(s->jobs[i].pid, SIGTERM);
            forwarded = 1;
        }
        struct pollfd pf[64];
        job *pj[64];
        int n = 0;
        for (int i = 0; i < s->n_jobs && n < 64; i++)
            if (s->jobs[i].state == 1) {
                pf[n].fd = s->jobs[i].fd;
                pf[n].events = POLLIN;
                pj[n++] = &s->jobs[i];
            }
        int r = poll(pf, (nfds_t)n, 200);
        if (r < 0 && errno != EINTR)
            return cohort_fail(err, COHORT_ERR_INTERNAL, "poll: %s", strerror(errno));
        for (int i = 0; r > 0 && i < n; i++) {
            if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            msg m;
            if (read_all(pf[i].fd, &m, sizeof m) != 0) {
                reap(s, pj[i]);
                continue;
            }
            int64_t *conf = NULL;
            int bad = m.model < 0 || m.model >= run->n || m.n_confusion < 0 ||
                      m.n_confusion > MAX_CONFUSION_CLASSES * MAX_CONFUSION_CLASSES;
            if (!bad && m.n_confusion > 0) {
                conf = malloc((size_t)m.n_confusion * sizeof *conf);
                bad = !conf || read_all(pf[i].fd, conf, (size_t)m.n_confusion * sizeof *conf);
            }
            if (bad) {
                free(conf);
                kill(pj[i]->pid, SIGKILL);
                reap(s, pj[i]);
                continue;
            }
            m.error[sizeof m.error - 1] = 0;
            m.weights[sizeof m.weights - 1] = 0;
            m.best_weights[sizeof m.best_weights - 1] = 0;
            m.no_space[sizeof m.no_space - 1] = 0;
            pthread_mutex_lock(&run->lock);
            apply(run, &m, conf);
            pthread_mutex_unlock(&run->lock);
            free(conf);
        }
    }
    return COHORT_OK;
}

/* ---- entry --------------------------------------------------------------------- */

static int threads_of(const cohort_run *run)
{
    int cores = run->devices->dev[0].info.threads;
    return run->opt.threads > 0 ? run->opt.threads : cores;
}

int run_device_cores(const cohort_run *run, int dev)
{
    const cohort_device *d = &run->devices->dev[dev];
    return d->info.is_logical && !strcmp(d->info.kind, "cpu") ? d->info.threads : INT_MAX;
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
static void largest_first(sched *s)
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
static cohort_status form_jobs(sched *s, int threads, cohort_error *err)
{
    cohort_status st = make_jobs(s, err);
    if (!st && s->run->strategy == COHORT_STRATEGY_FUSED && threads > 1)
        st = split_groups_over_cores(s, threads, err);
    return st;
}

/* The jobs of s as groups (*out malloc'd, *n its length). */
static cohort_status groups_of(const sched *s, run_group_info **out, int *n, cohort_error *err)
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

cohort_status run_plan_groups(cohort_run *run, run_group_info **out, int *n, cohort_error *err)
{
    sched s;
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
    cohort_status st = form_jobs(&s, threads_of(run), err);
    if (!st)
        st = groups_of(&s, out, n, err);
    free(s.jobs);
    return st;
}

cohort_status run_schedule(cohort_run *run, cohort_error *err)
{
    sched s;
    memset(&s, 0, sizeof s);
    s.run = run;
    s.out_fd = -1;
    pthread_cond_init(&s.cond, NULL);
    int threads = threads_of(run);
    cohort_status st = form_jobs(&s, threads, err);
    /* The first phase's groups are the plan cohort_run_plan_json gives
     * after training (a scheduler's later phases train fewer models). */
    if (!st && !run->trained_groups)
        st = groups_of(&s, &run->trained_groups, &run->n_trained_groups, err);
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
        largest_first(&s);
    /* OpenBLAS's thread count is global: the runner sets it once, for all. */
    int threaded = run->strategy == COHORT_STRATEGY_THREADS || run->strategy == COHORT_STRATEGY_FUSED;
    backend_cpu_set_blas_threads(threaded ? 1 : backend_cpu_blas_threads(s.threads_per_job));
    if (!st) {
        if (threaded && s.concurrency > 1)
            st = run_threads(&s, err);
        else if (run->strategy == COHORT_STRATEGY_PROCESSES)
            st = run_processes(&s, err);
        else
            run_sequential(&s);
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
    if (trainable == 0 && resumed == 0)
        return cohort_fail(err, COHORT_ERR_INPUT, "no model can be trained: %s",
                           run->n ? run->m[0].res.error : "the plan has no models");
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
    st = sk == PRUNE_PBT    ? run_schedule_pbt(run, err)
         : sk != PRUNE_NONE ? run_schedule_pruned(run, err)
                            : run_schedule(run, err);
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
        if (run_write_results(run, &werr) && !disk_full(run) && !st) {
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
    refresh_report(run, 1);
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
