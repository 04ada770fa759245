/*
 * Reports of the jobs (see run/jobs.h): applied to the model entries here,
 * turned into the run's events, and report.html refreshed; the full disk
 * that stops a run.
 */
#include "io/report.h"
#include "run/jobs.h"
#include "util/util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
void run_refresh_report(cohort_run *run, int force)
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
int run_disk_full(cohort_run *run)
{
    if (!run->disk_full && file_out_of_space()) {
        run->disk_full = 1;
        run->stop = 1;
    }
    return run->disk_full;
}

/* Apply one report. Caller holds run->lock. */
void run_apply_msg(cohort_run *run, const msg *m, const int64_t *confusion)
{
    model_entry *e = &run->m[m->model];
    cohort_event ev;
    cohort_error err;
    if (m->no_space[0]) {
        file_note_out_of_space(m->no_space);
        run_disk_full(run);
    }
    switch (m->type) {
    case MSG_START:
        e->res.state = MODEL_RUNNING;
        e->next_history = now_seconds() + run->write_every;
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
        if (run->out_dir[0] && !run_disk_full(run)) {
            /* A model's history is rewritten whole: after every epoch only
             * where its epochs are long (or write_every is 0); always at
             * its end. */
            double now = now_seconds();
            if (run->write_every <= 0 || now >= e->next_history) {
                run_write_history(run, e, FILE_SYNC_DATA | FILE_SYNC_NAME, &err);
                e->next_history = now + run->write_every;
            }
            run_tick_results(run, &err);
            run_refresh_report(run, 0);
            run_disk_full(run);
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
        if (run->out_dir[0] && !run_disk_full(run)) {
            /* The record waits for the next batch, which syncs the history's
             * folder (and the weights') before it journals the record. */
            run_write_history(run, e, FILE_SYNC_DATA, &err);
            run_queue_record(run, e, &err);
            run_tick_results(run, &err);
            run_disk_full(run);
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
void job_report(job_runner *s, msg *m, const int64_t *confusion)
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
    run_apply_msg(s->run, m, confusion);
    pthread_mutex_unlock(&s->run->lock);
}
