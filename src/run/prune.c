/*
 * prune: the plan's scheduler, which stops models that are not worth their
 * remaining epochs. The models train in phases, one a rung: every live model
 * trains to the rung's epoch (the ordinary schedule, any strategy, resumed
 * from its checkpoint), then the rule decides from the histories alone who
 * goes on. Decisions therefore depend on nothing but the models' metrics,
 * which are the same bit for bit under every strategy: the same plan gives
 * the same pruned models sequentially, in threads, fused or in processes,
 * and after --resume (the phases are recomputed from the journal).
 *
 * asha: successive halving (Li et al., "A System for Massively Parallel
 * Hyperparameter Tuning", MLSys 2020) at rungs grace * eta^k: at each rung
 * the best 1/eta of the models that reached it go on. Ray Tune's ASHA
 * promotes as results arrive, which makes the choice depend on timing; here
 * a rung waits for its last model instead.
 * hyperband: asha in brackets (Li et al., JMLR 2018): the models are dealt
 * round robin to brackets that start cutting at successive rungs, so that
 * some models get more epochs before they are judged; the last bracket
 * trains its models in full.
 * median: the median stopping rule of Golovin et al. (Vizier, KDD 2017), as
 * Ray Tune's MedianStoppingRule runs it: from grace_period on, after every
 * epoch a model stops when its best value so far is worse than the median
 * of the other models' running averages (the mean of their values over the
 * epochs from grace_period on, as Ray scopes it), with at least
 * MEDIAN_MIN_OTHERS others.
 * pbt, which stops no model but copies good ones into bad ones, trains in
 * phases the same way (run/pbt.c).
 */
#include "run/run.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MEDIAN_MIN_OTHERS 3

/* The last epoch the scheduler lets model e train. */
static int target_epochs(const cohort_run *run, const model_entry *e)
{
    int t = e->spec->epochs, max_t = run->plan->scheduler.max_t;
    return max_t > 0 && max_t < t ? max_t : t;
}

/* The rungs below the largest target: asha's (and hyperband's) grace *
 * eta^k, median's every epoch from grace. Returns how many (at most cap). */
static int make_rungs(const scheduler_spec *sc, int top, int *rungs, int cap)
{
    int n = 0;
    if (sc->kind != PRUNE_MEDIAN)
        for (long r = sc->grace; r < top && n < cap; r *= sc->eta)
            rungs[n++] = (int)r;
    else
        for (int r = sc->grace; r < top && n < cap; r++)
            rungs[n++] = r;
    return n;
}

/* The watched metric of e after `epoch` epochs (asha), or its best so far
 * (median); NaN when it has none. */
static double value_at(const scheduler_spec *sc, const model_entry *e, int epoch, int best_so_far)
{
    const metric_field *f = epoch_metric_find(sc->metric);
    if (!f || epoch < 1 || epoch > e->res.epochs_run)
        return NAN;
    if (!best_so_far)
        return epoch_metric_get(&e->res.history[epoch - 1], f);
    double b = NAN;
    for (int i = 0; i < epoch; i++) {
        double v = epoch_metric_get(&e->res.history[i], f);
        if (isfinite(v) && (isnan(b) || (sc->maximize ? v > b : v < b)))
            b = v;
    }
    return b;
}

/* The mean of e's watched metric over epochs grace_period to `epoch`
 * (median's running average, scoped as Ray's MedianStoppingRule scopes it);
 * NaN when one of them is not a number. */
static double running_mean(const scheduler_spec *sc, const model_entry *e, int epoch)
{
    const metric_field *f = epoch_metric_find(sc->metric);
    int from = sc->grace > 1 ? sc->grace : 1;
    if (!f || epoch < from || epoch > e->res.epochs_run)
        return NAN;
    double sum = 0.0;
    for (int i = from; i <= epoch; i++)
        sum += epoch_metric_get(&e->res.history[i - 1], f);
    return sum / (epoch - from + 1);
}

/* v is better than w under the scheduler's mode; NaN is worst. */
static int better(const scheduler_spec *sc, double v, double w)
{
    if (isnan(w))
        return !isnan(v);
    return !isnan(v) && (sc->maximize ? v > w : v < w);
}

typedef struct ranked {
    double v;
    int i;
} ranked;

static const scheduler_spec *sort_sc;
static int by_value(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (better(sort_sc, x->v, y->v))
        return -1;
    if (better(sort_sc, y->v, x->v))
        return 1;
    return x->i - y->i; /* ties: the plan's order */
}

static double median_of(double *v, int n)
{
    for (int i = 1; i < n; i++) /* insertion sort: n is a rung's models */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int run_at_rung(const cohort_run *run, const model_entry *e)
{
    return e->stop_epoch > 0 && e->res.state == MODEL_OK && !e->res.stopped_early &&
           e->res.epochs_run < target_epochs(run, e);
}

static void prune(cohort_run *run, model_entry *e, int rung)
{
    /* Under the lock: cohort_run_model_result may be polling, and events
     * come under it. */
    pthread_mutex_lock(&run->lock);
    e->res.state = MODEL_PRUNED;
    e->pruned_rung = rung;
    e->res.error[0] = 0;
    e->done = 1;
    run_emit_model_end(run, e);
    pthread_mutex_unlock(&run->lock);
    cohort_error err;
    run_write_record(run, e, &err);
}

/* Hyperband's bracket of model i among `brackets` (dealt round robin, so the
 * brackets depend on the plan alone); 0 for the other rules. Bracket b's
 * rungs are the ladder's from rung b on: its models train b rungs' worth of
 * epochs before their first cut, the last bracket's never are cut. */
static int bracket_of(const scheduler_spec *sc, int i, int brackets)
{
    return sc->kind == PRUNE_HYPERBAND ? i % brackets : 0;
}

/* Rung `ri` of the ladder at epoch R: which of the live models of bracket b
 * stop (b's own rung there is ri - b). */
static void decide(cohort_run *run, const unsigned char *live, int ri, int R, int b,
                   int brackets)
{
    const scheduler_spec *sc = &run->plan->scheduler;
    ranked *r = malloc((size_t)run->n * sizeof *r);
    double *others = malloc((size_t)run->n * sizeof *others);
    double *avg = malloc((size_t)run->n * sizeof *avg);
    int *cut = malloc((size_t)run->n * sizeof *cut);
    if (!r || !others || !avg || !cut) {
        free(r);
        free(others);
        free(avg);
        free(cut);
        return; /* out of memory: nobody is pruned, which is safe */
    }
    /* The rung's field: every model that reached it and was not pruned
     * before, also those that ended since (early stopping) or were pruned
     * here or later in a run this one resumes, so that a replay decides as
     * the first run did. Only live models are stopped. */
    int n = 0;
    for (int i = 0; i < run->n; i++) {
        const model_entry *e = &run->m[i];
        if (bracket_of(sc, i, brackets) == b && e->res.epochs_run >= R &&
            !(e->res.state == MODEL_PRUNED && e->pruned_rung < ri)) {
            avg[n] = sc->kind == PRUNE_MEDIAN ? running_mean(sc, e, R) : NAN;
            r[n++] = (ranked){value_at(sc, e, R, sc->kind == PRUNE_MEDIAN), i};
        }
    }
    if (sc->kind != PRUNE_MEDIAN) {
        sort_sc = sc;
        qsort(r, (size_t)n, sizeof *r, by_value);
        int keep = n / sc->eta > 0 ? n / sc->eta : 1;
        for (int k = keep; k < n; k++)
            if (live[r[k].i])
                prune(run, &run->m[r[k].i], ri);
    } else {
        int nc = 0;
        for (int k = 0; k < n; k++) {
            int m = 0;
            for (int o = 0; o < n; o++)
                if (o != k && !isnan(avg[o]))
                    others[m++] = avg[o];
            if (m < MEDIAN_MIN_OTHERS)
                continue;
            double med = median_of(others, m);
            if (better(sc, med, r[k].v) && live[r[k].i])
                cut[nc++] = r[k].i; /* every model judged against the same values */
        }
        for (int k = 0; k < nc; k++)
            prune(run, &run->m[cut[k]], ri);
    }
    free(r);
    free(others);
    free(avg);
    free(cut);
}

cohort_status run_check_scheduler(const cohort_run *run, cohort_error *err)
{
    const scheduler_spec *sc = &run->plan->scheduler;
    int wants_errors = strstr(sc->metric, "mae") || strstr(sc->metric, "rmse");
    int wants_acc = strstr(sc->metric, "accuracy") != NULL;
    for (int i = 0; i < run->n; i++) {
        const model_entry *e = &run->m[i];
        int errors = e->L.metric == METRIC_ERRORS;
        if ((wants_errors && !errors) || (wants_acc && errors))
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s:%d: the scheduler watches %s, but model '%s' records %s; "
                               "watch a metric every model has (val_loss does)",
                               run->plan->path, sc->line, sc->metric, e->spec->name,
                               errors ? "mae and rmse (a regression)" : "accuracy");
    }
    if (!strncmp(sc->metric, "val_", 4) && !run->has_val)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s:%d: the scheduler watches %s, but there are no validation samples",
                           run->plan->path, sc->line, sc->metric);
    /* A rung ranks the models against each other: a shard, or an MPI rank
     * (which trains one), would rank its own models only, and the merge
     * would keep models one run prunes and prune others it keeps. */
    if (sc->kind != PRUNE_PBT && run->opt.shard_count > 1)
        return cohort_fail(err, COHORT_ERR_USAGE,
                           "%s:%d: scheduler %s ranks the models against each other, but a shard "
                           "of the plan (--shard, or an MPI rank) holds only some of them; train "
                           "it in one run",
                           run->plan->path, sc->line, prune_kind_name(sc->kind));
    return sc->kind == PRUNE_PBT ? run_check_pbt(run, err) : COHORT_OK;
}

cohort_status run_continue_to(cohort_run *run, model_entry *e, int target, cohort_error *err)
{
    e->stop_epoch = target < e->spec->epochs ? target : 0;
    if (e->res.epochs_run == 0 && !e->done)
        return COHORT_OK; /* not started: as it is (a --resume may have set its start) */
    ckpt c;
    cohort_status st = ckpt_read(run, e, &c, err);
    if (!st && !c.found)
        st = cohort_fail(err, COHORT_ERR_IO, "model '%s': its checkpoint at a rung is missing",
                         e->spec->name);
    if (!st) {
        ckpt_start_from(run, e, &c);
        e->res.state = MODEL_PENDING;
        e->done = 0;
        e->resumed = 0;
    }
    ckpt_free(&c);
    return st;
}

/* Models of a phased run that ended for good (their last epoch, early
 * stopping, divergence, failure) leave `live`. */
static void scheduler_drop_ended(const cohort_run *run, unsigned char *live)
{
    for (int i = 0; i < run->n; i++) {
        const model_entry *e = &run->m[i];
        if (live[i] && e->done &&
            (e->res.state != MODEL_OK || e->res.stopped_early ||
             e->res.epochs_run >= target_epochs(run, e)))
            live[i] = 0;
    }
}

cohort_status scheduler_phase(cohort_run *run, unsigned char *live, int R, int reached_waits,
                          cohort_error *err)
{
    cohort_status st = COHORT_OK;
    int any = 0;
    for (int i = 0; i < run->n && !st; i++) {
        model_entry *e = &run->m[i];
        int target = R < target_epochs(run, e) ? R : target_epochs(run, e);
        if (!live[i])
            continue;
        pthread_mutex_lock(&run->lock); /* a poller reads the entry */
        if ((reached_waits || e->done) && e->res.epochs_run >= target) {
            /* Resumed from its checkpoint at or past R (pbt): it waits
             * there. Left without a stop, the phase's schedule would train
             * it to its last epoch, past the intervals' decisions. */
            if (!e->done)
                e->stop_epoch = e->res.epochs_run;
            pthread_mutex_unlock(&run->lock);
            continue;
        }
        st = run_continue_to(run, e, target, err);
        pthread_mutex_unlock(&run->lock);
        any = 1;
    }
    if (!st && any)
        st = run_jobs(run, err);
    if (!st && !run->stop)
        scheduler_drop_ended(run, live);
    return st;
}

void scheduler_mark_waiting(cohort_run *run, const unsigned char *live, const char *why)
{
    pthread_mutex_lock(&run->lock);
    for (int i = 0; run->stop && i < run->n; i++) {
        model_entry *e = &run->m[i];
        /* Only a model waiting at a rung: one that has trained its last
         * epoch in the phase the stop cut short has ended, ok. */
        if (live[i] && e->done && run_at_rung(run, e)) {
            e->res.state = MODEL_INTERRUPTED;
            str_copy(e->res.error, sizeof e->res.error, why);
            run_emit_model_end(run, e);
        }
    }
    pthread_mutex_unlock(&run->lock);
}

cohort_status run_scheduler_prune(cohort_run *run, cohort_error *err)
{
    const scheduler_spec *sc = &run->plan->scheduler;
    cohort_status st = run_check_scheduler(run, err);
    if (st)
        return st;
    int top = 0;
    for (int i = 0; i < run->n; i++)
        if (target_epochs(run, &run->m[i]) > top)
            top = target_epochs(run, &run->m[i]);
    int *rungs = malloc(((size_t)top + 1) * sizeof *rungs);
    unsigned char *live = calloc((size_t)run->n + 1, 1);
    if (!rungs || !live) {
        free(rungs);
        free(live);
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    }
    int nr = make_rungs(sc, top, rungs, top);
    int brackets = sc->kind == PRUNE_HYPERBAND ? nr + 1 : 1;
    /* Live: every model not finished for good. A resumed model whose record
     * says ok may stand at a rung: it lives while it has epochs to go. */
    for (int i = 0; i < run->n; i++) {
        model_entry *e = &run->m[i];
        live[i] = !e->done || (e->res.state == MODEL_OK && !e->res.stopped_early &&
                               e->res.epochs_run < target_epochs(run, e));
    }
    for (int ri = 0; ri <= nr && !st; ri++) {
        int R = ri < nr ? rungs[ri] : top;
        /* A model whose record says it reached the rung waits for the
         * decision; one resumed from a checkpoint at the rung trains no
         * epoch in this phase but still ends it (its weights, its record). */
        st = scheduler_phase(run, live, R, 0, err);
        if (st || run->stop)
            break;
        for (int b = 0; ri < nr && b < brackets && b <= ri; b++)
            decide(run, live, ri, R, b, brackets);
        for (int i = 0; i < run->n; i++)
            if (run->m[i].res.state == MODEL_PRUNED)
                live[i] = 0;
    }
    /* Stopped by Ctrl-C between rungs: the models waiting at a rung go on
     * with --resume. */
    scheduler_mark_waiting(run, live, "stopped at a rung of the scheduler");
    free(rungs);
    free(live);
    return st;
}

int run_scheduler_budget(const cohort_run *run, long long *epochs, long long *full)
{
    const scheduler_spec *sc = &run->plan->scheduler;
    *epochs = *full = 0;
    int top = 0;
    for (int i = 0; i < run->n; i++) {
        int t = target_epochs(run, &run->m[i]);
        *full += run->m[i].spec->epochs;
        top = t > top ? t : top;
    }
    if (sc->kind == PRUNE_PBT) { /* every model trains all its epochs */
        int *at = NULL, n = run_pbt_intervals(run, &at);
        free(at);
        *epochs = *full;
        return n > 0 ? n : 0;
    }
    if (sc->kind == PRUNE_MEDIAN) {
        for (int i = 0; i < run->n; i++)
            *epochs += target_epochs(run, &run->m[i]);
        return 0;
    }
    int *rungs = malloc(((size_t)top + 1) * sizeof *rungs);
    if (!rungs)
        return 0;
    int nr = make_rungs(sc, top, rungs, top);
    int brackets = sc->kind == PRUNE_HYPERBAND ? nr + 1 : 1;
    /* The most: each bracket's n models to its first rung, the best 1/eta
     * of them on to the next. */
    for (int b = 0; b < brackets; b++) {
        long long n = 0, prev = 0;
        for (int i = 0; i < run->n; i++)
            n += bracket_of(sc, i, brackets) == b;
        for (int ri = b; ri <= nr && n > 0; ri++) {
            int R = ri < nr ? rungs[ri] : top;
            *epochs += n * (R - prev);
            prev = R;
            n = n / sc->eta > 0 ? n / sc->eta : 1;
        }
    }
    free(rungs);
    return nr;
}
