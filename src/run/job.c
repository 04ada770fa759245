/*
 * One job's training (see run/jobs.h): create its group or resume it from
 * checkpoints, fit, evaluate on the test set with the confusion matrices,
 * save weights, report each model's outcome, release every byte.
 */
#include "run/jobs.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct job_ctx {
    job_runner *s;
    job *j;
    train_group *g;
    float *host;
    double last_step_report;
    char best_weights[MAX_GROUP][COHORT_PATH_MAX];
    double t0;
    double base_seconds[MAX_GROUP]; /* --resume: each model's seconds before this run */
    float *scratch; /* [4, P] for checkpoints */
    size_t P;       /* parameters of one model */
    const model_spec *specs[MAX_GROUP];
    train_result res[MAX_GROUP];
    train_start start; /* where the job starts (--resume) */
    int helpable;   /* helper threads may join its group */
    double last_ckpt; /* when the job last wrote its checkpoints (or started) */
    /* Best weights not written yet (run.h, WRITE_EVERY): model k's in
     * best_host + k * P while best_pending[k]. */
    float *best_host;
    int best_pending[MAX_GROUP];
} job_ctx;

/* Best weights of a job wait in memory only up to this many bytes (a group
 * of large models writes them at once, as its epochs are long anyway). */
#define BEST_WAIT_MAX ((size_t)64 << 20)

/* Whether the job's checkpoints are due after this epoch by time alone. */
static int ckpt_time_due(const job_ctx *c, double now)
{
    double every = c->s->run->write_every;
    return every <= 0 || now - c->last_ckpt >= every;
}

/* Write model k's best weights that wait in memory (sync: as
 * file_write_atomic_ex's flags). */
static cohort_status flush_best(job_ctx *c, int k, int sync, cohort_error *err)
{
    if (!c->best_pending[k])
        return COHORT_OK;
    cohort_run *run = c->s->run;
    c->best_pending[k] = 0;
    return run_write_weights(run, &run->m[c->j->idx[k]], c->best_host + (size_t)k * c->P, 1, sync,
                             c->best_weights[k], err);
}

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
    job_report(c->s, &m, NULL);
}

static int on_epoch(void *user, int k, int epoch, const epoch_metrics *em, int is_best,
                    cohort_error *err)
{
    job_ctx *c = user;
    cohort_run *run = c->s->run;
    const model_entry *e = &run->m[c->j->idx[k]];
    if (is_best && run->out_dir[0] && !run_disk_full(run)) {
        /* Not due, no checkpoint follows this epoch: the weights wait in
         * memory until the job's next checkpoint or its end. */
        int wait = !ckpt_time_due(c, now_seconds());
        size_t bytes = (size_t)c->j->n * c->P * sizeof(float);
        if (wait && !c->best_host && bytes <= BEST_WAIT_MAX)
            c->best_host = mem_alloc_big(bytes);
        if (wait && c->best_host) {
            group_get_params(c->g, k, c->best_host + (size_t)k * c->P);
            c->best_pending[k] = 1;
        } else {
            c->best_pending[k] = 0;
            group_get_params(c->g, k, c->host);
            /* Out of space: the run stops; the model is not failed for it. */
            if (run_write_weights(run, e, c->host, 1, FILE_SYNC_DATA | FILE_SYNC_NAME,
                                  c->best_weights[k], err) &&
                !run_disk_full(run))
                return 1;
        }
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
    job_report(c->s, &m, NULL);
    return 0;
}

static int on_checkpoint(void *user, int epoch, int64_t step, const train_result *res,
                         cohort_error *err)
{
    job_ctx *c = user;
    cohort_run *run = c->s->run;
    if (!run->out_dir[0] || run_disk_full(run))
        return 0; /* the last checkpoints that were written stay good */
    /* Due inside an epoch (a stop), when the run stops, at the rung or
     * interval the job trains to (the next phase starts from there), and
     * when write_every has passed; else the models train on, and a kill
     * costs the epochs since the last one, trained again to the same bits. */
    double now = now_seconds();
    int at_rung = c->start.stop_epoch > 0 && epoch >= c->start.stop_epoch;
    if (step == 0 && !run->stop && !at_rung && !ckpt_time_due(c, now))
        return 0;
    int every_epoch = run->write_every <= 0;
    for (int k = 0; k < c->j->n; k++) {
        const model_entry *e = &run->m[c->j->idx[k]];
        if (res[k].state != MODEL_RUNNING)
            continue;
        /* Its last epoch: its final weights and record follow. */
        if (!every_epoch && step == 0 && epoch >= e->spec->epochs)
            continue;
        /* The best weights the checkpoint's state names, on disk before it. */
        if (flush_best(c, k, FILE_SYNC_DATA | FILE_SYNC_NAME, err) ||
            ckpt_write(run, e, c->g, k, &res[k], epoch, step, c->scratch, err))
            return !run_disk_full(run);
    }
    c->last_ckpt = now_seconds();
    return 0;
}

/* Report each model's start, create the group, publish it to helpers, and
 * take the host buffers and histories (st: the first error, in *err). */
static cohort_status job_open(job_ctx *c, cohort_error *err)
{
    job_runner *s = c->s;
    job *j = c->j;
    cohort_run *run = s->run;
    cohort_device *dev = &run->devices->dev[j->device];
    msg m;
    for (int k = 0; k < j->n; k++) {
        c->specs[k] = run->m[j->idx[k]].spec;
        memset(&m, 0, sizeof m);
        m.type = MSG_START;
        m.model = j->idx[k];
        job_report(s, &m, NULL);
    }
    cohort_status st = group_create(c->specs, j->n, run->in_shape, run->n_classes, dev,
                                    j->threads, &c->g, err);
    c->helpable = c->g && s->out_fd < 0; /* a worker process has no helpers, nor their lock */
    if (s->out_fd < 0) {
        pthread_mutex_lock(&run->lock);
        j->live = c->g;
        if (j->starting) {
            /* The group holds its block of the pool: the next job on the
             * device may look for its own (reserve). */
            j->starting = 0;
            s->starting[j->device]--;
            pthread_cond_broadcast(&s->cond);
        }
        pthread_mutex_unlock(&run->lock);
    }
    c->P = c->g ? group_layout(c->g)->n_params : 0;
    if (!st) {
        c->host = mem_alloc_big(c->P * sizeof(float));
        c->scratch = mem_alloc_big(4 * c->P * sizeof(float));
        if (!c->host || !c->scratch)
            st = cohort_fail(err, COHORT_ERR_NOMEM, "out of host memory");
    }
    for (int k = 0; !st && k < j->n; k++) {
        c->res[k].history = calloc((size_t)c->specs[k]->epochs, sizeof(epoch_metrics));
        if (!c->res[k].history)
            st = cohort_fail(err, COHORT_ERR_NOMEM, "out of host memory");
    }
    return st;
}

/* --resume: where the job starts (every model of a job stands at the same
 * point, make_jobs), and each model's state, results and history from its
 * checkpoint. */
static cohort_status job_resume(job_ctx *c, cohort_error *err)
{
    cohort_run *run = c->s->run;
    const job *j = c->j;
    size_t P = c->P;
    const model_entry *e0 = &run->m[j->idx[0]];
    c->start = (train_start){e0->start_epoch, e0->start_step, e0->stop_epoch};
    int resuming = c->start.epoch > 0 || c->start.step > 0;
    cohort_status st = COHORT_OK;
    for (int k = 0; !st && resuming && k < j->n; k++) {
        const model_entry *e = &run->m[j->idx[k]];
        ckpt ck;
        st = ckpt_read(run, e, &ck, err);
        if (!st && !ck.found)
            st = cohort_fail(err, COHORT_ERR_IO, "model '%s': its checkpoint disappeared",
                             e->spec->name);
        if (!st) {
            train_result *res = c->res;
            group_set_state(c->g, k, ck.params, ck.have[1] ? ck.params + P : NULL,
                            ck.have[2] ? ck.params + 2 * P : NULL,
                            ck.have[3] ? ck.params + 3 * P : NULL);
            epoch_metrics *h = res[k].history;
            res[k] = ck.res;
            res[k].history = h;
            memcpy(h, ck.history, (size_t)ck.epoch * sizeof *h);
            c->base_seconds[k] = ck.res.seconds;
            str_copy(c->best_weights[k], sizeof c->best_weights[k], e->best_weights);
        }
        ckpt_free(&ck);
    }
    return st;
}

/* The confusion matrix [C, C] (rows: true class) of one model's predicted
 * classes pk of the test set. */
static void confusion_count(int64_t *conf, int C, const int32_t *pk, const data_view *test)
{
    memset(conf, 0, (size_t)C * (size_t)C * sizeof *conf);
    for (int64_t i = 0; i < test->n; i++)
        if (pk[i] >= 0 && pk[i] < C && test->y[i] >= 0 && test->y[i] < C)
            conf[test->y[i] * C + pk[i]]++;
}

/* The test results of the job: its metrics per model (te), and the classes
 * each model predicts for the confusion matrices (pred, one pass for both). */
typedef struct job_test {
    cohort_status st;  /* of the test pass: out of host memory */
    eval_metrics te[MAX_GROUP];
    int n_conf;        /* C * C, or 0: no matrices */
    int64_t *conf;     /* one model's matrix at a time */
    int32_t *pred;     /* [n, test.n] */
} job_test;

/* Model k's final report, m, after the job trained (st, err: the job's
 * failure before or while it trained); saves its weights. */
static void final_msg(job_ctx *c, int k, cohort_status st, cohort_error *err, job_test *t, msg *m)
{
    cohort_run *run = c->s->run;
    const job *j = c->j;
    int C = run->n_classes;
    if (st) {
        m->state = MODEL_FAILED;
        str_copy(m->error, sizeof m->error, err->message);
        return;
    }
    const train_result *r = &c->res[k];
    m->state = r->state;
    str_copy(m->error, sizeof m->error, r->error);
    if (r->state == MODEL_INTERRUPTED && run->disk_full)
        str_copy(m->error, sizeof m->error,
                 "stopped: the disk is full; --resume continues from its last checkpoint");
    m->epochs_run = r->epochs_run;
    m->best_epoch = r->best_epoch;
    m->best = r->best;
    m->stopped_early = r->stopped_early;
    m->seconds = r->seconds;
    if (r->state == MODEL_OK && t->st) {
        m->state = MODEL_FAILED;
        str_copy(m->error, sizeof m->error, "out of host memory evaluating the test data");
    }
    if (r->state == MODEL_OK && run->has_test && !t->st) {
        m->test_loss = t->te[k].loss;
        m->test_accuracy = t->te[k].accuracy;
        m->test_mae = t->te[k].mae;
        m->test_rmse = t->te[k].rmse;
        if (t->conf && t->pred) {
            confusion_count(t->conf, C, t->pred + (size_t)k * (size_t)run->test.n, &run->test);
            m->n_confusion = t->n_conf;
        }
    }
    const char *dev_error = c->g ? group_device_error(c->g) : "";
    if (m->state == MODEL_OK && *dev_error) {
        /* What the device copies back after an error is NaN: no
         * weights from it, and no state OK. */
        m->state = MODEL_FAILED;
        snprintf(m->error, sizeof m->error, "the device failed: %s", dev_error);
    }
    /* The names of these files are synced with the next batch of records
     * (run_flush_records), before the record that names them. */
    const model_entry *e = &run->m[j->idx[k]];
    if (m->state == MODEL_OK && run->out_dir[0]) {
        group_get_params(c->g, k, c->host);
        if (run_write_weights(run, e, c->host, 0, FILE_SYNC_DATA, m->weights, err)) {
            m->state = MODEL_FAILED;
            str_copy(m->error, sizeof m->error, err->message);
        }
        /* Best and final weights the same bytes (its last epoch was its
         * best, or early stopping restored them): the best file is a
         * second name of the final one. */
        else if (c->best_pending[k] &&
            !memcmp(c->best_host + (size_t)k * c->P, c->host, c->P * sizeof(float))) {
            char from[2 * COHORT_PATH_MAX], to[2 * COHORT_PATH_MAX];
            snprintf(from, sizeof from, "%s/%s", run->out_dir, m->weights);
            snprintf(to, sizeof to, "%s/models/%s.best.safetensors", run->out_dir, e->spec->name);
            cohort_error lerr;
            if (!file_link_atomic(from, to, &lerr)) {
                c->best_pending[k] = 0;
                snprintf(c->best_weights[k], sizeof c->best_weights[k],
                         "models/%s.best.safetensors", e->spec->name);
            }
        }
    }
    /* Else written out (a filesystem without hard links too); a model that
     * failed or diverged keeps its best epoch's weights as well. Out of
     * space, the run stops; the model is not failed for it. */
    if (run->out_dir[0] && !run_disk_full(run) && flush_best(c, k, FILE_SYNC_DATA, err) &&
        !run_disk_full(run) && m->state != MODEL_FAILED) {
        m->state = MODEL_FAILED;
        str_copy(m->error, sizeof m->error, err->message);
    }
    c->best_pending[k] = 0;
    str_copy(m->best_weights, sizeof m->best_weights, c->best_weights[k]);
}

/* Evaluate the job on the test set and report each model's outcome. */
static void job_report_finals(job_ctx *c, cohort_status st, cohort_error *err)
{
    job_runner *s = c->s;
    const job *j = c->j;
    cohort_run *run = s->run;
    int C = run->n_classes;
    job_test t;
    t.st = COHORT_OK;
    t.n_conf = run->has_test && C <= MAX_CONFUSION_CLASSES ? C * C : 0;
    t.conf = t.n_conf ? malloc((size_t)t.n_conf * sizeof *t.conf) : NULL;
    t.pred = t.conf ? malloc((size_t)j->n * (size_t)run->test.n * sizeof *t.pred + 1) : NULL;
    uint64_t share = c->g ? run_group_share(group_peak_bytes(c->g), j->n) : 0;
    uint64_t planned = run_group_share(j->bytes, j->n);
    if (!st && run->has_test)
        t.st = group_evaluate(c->g, &run->test, t.te, t.pred);
    for (int k = 0; k < j->n; k++) {
        msg m;
        memset(&m, 0, sizeof m);
        m.type = MSG_FINAL;
        m.model = j->idx[k];
        m.test_loss = m.test_accuracy = m.test_mae = m.test_rmse = NAN;
        m.planned_bytes = planned;
        m.peak_bytes = share;
        final_msg(c, k, st, err, &t, &m);
        job_report(s, &m, t.conf);
    }
    free(t.conf);
    free(t.pred);
}

/* Release every byte of the job, its group last. */
static void job_close(job_ctx *c)
{
    cohort_run *run = c->s->run;
    for (int k = 0; k < c->j->n; k++)
        free(c->res[k].history);
    free(c->host);
    free(c->scratch);
    free(c->best_host);
    if (c->helpable) {
        pthread_mutex_lock(&run->lock);
        c->j->live = NULL; /* no helper joins it from here on */
        pthread_mutex_unlock(&run->lock);
    }
    group_free(c->g);
}

/* Train job j here: create its group (or resume it), fit, evaluate on the
 * test set, save weights, report each model's outcome, release every byte. */
static void job_train(job_runner *s, job *j)
{
    cohort_run *run = s->run;
    job_ctx c;
    memset(&c, 0, sizeof c);
    c.s = s;
    c.j = j;
    c.t0 = now_seconds();
    c.last_ckpt = c.t0;
    cohort_error err;
    err.message[0] = 0;
    cohort_status st = job_open(&c, &err);
    if (!st)
        st = job_resume(&c, &err);
    if (!st) {
        /* Without an output directory nothing is checkpointed, and a stopped
         * model's error must not say otherwise. */
        train_callbacks cb = {on_step, on_epoch, run->out_dir[0] ? on_checkpoint : NULL, &c,
                              &run->stop};
        group_fit(c.g, &run->train, run->has_val ? &run->val : NULL, &cb, &c.start, c.res, &err);
    }
    job_report_finals(&c, st, &err);
    job_close(&c);
}

/* Job j on the thread that calls: bound to its CPU part's cores, where its
 * device is one, for the time it trains (the pool threads it starts inherit
 * that), then as it was. */
void job_run(job_runner *s, job *j)
{
    cpu_set_t saved;
    int bound = device_bind_thread(s->run->devices, &s->run->devices->dev[j->device], &saved);
    job_train(s, j);
    device_unbind_thread(bound, &saved);
}
