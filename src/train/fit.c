/*
 * The fit loop and its policy: per-model shuffle orders, metrics read back
 * from the device, divergence (a model whose loss or weights stop being
 * finite stops alone), the best epoch, early stopping, checkpoints and
 * interruption.
 */
#include "train/group_impl.h"
#include "util/util.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static void shuffle_order(int64_t *order, int64_t n, uint64_t seed, int epoch, int shuffle)
{
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    if (!shuffle)
        return;
    /* Each epoch's order depends on (seed, epoch) alone, so a resumed run
     * draws exactly the orders an uninterrupted one would. */
    rng_state r;
    rng_seed(&r, seed, 0x5000 + (uint64_t)epoch);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below(&r, (uint64_t)i + 1);
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

#define FIELD(f) {#f, offsetof(epoch_metrics, f)}
const metric_field epoch_metric_fields[EPOCH_METRIC_COUNT] = {
    FIELD(loss), FIELD(accuracy), FIELD(val_loss), FIELD(val_accuracy), FIELD(seconds),
    FIELD(mae),  FIELD(rmse),     FIELD(val_mae),  FIELD(val_rmse),     FIELD(lr)};
#undef FIELD

const metric_field *epoch_metric_find(const char *name)
{
    for (int i = 0; i < EPOCH_METRIC_COUNT; i++)
        if (strcmp(epoch_metric_fields[i].name, name) == 0)
            return &epoch_metric_fields[i];
    return NULL;
}

void epoch_metrics_clear(epoch_metrics *m)
{
    for (int i = 0; i < EPOCH_METRIC_COUNT; i++)
        *epoch_metric(m, &epoch_metric_fields[i]) = NAN;
}

/* Accuracies improve upwards; losses and errors downwards. */
static int monitor_is_max(const char *monitor) { return strstr(monitor, "accuracy") != NULL; }

/* Whether the epochs of layout L have the metric: accuracy or the errors by
 * the task, a val_ one only with validation data. The plan cannot tell the
 * task (mse on class labels counts accuracy); Keras skips a monitor its logs
 * lack, and so does cohort. */
int fit_monitor_present(const model_layout *L, int has_val, const char *monitor)
{
    if (strncmp(monitor, "val_", 4) == 0) {
        if (!has_val)
            return 0;
        monitor += 4;
    }
    if (strcmp(monitor, "accuracy") == 0)
        return L->metric != METRIC_ERRORS;
    if (strcmp(monitor, "mae") == 0 || strcmp(monitor, "rmse") == 0)
        return L->metric == METRIC_ERRORS;
    return 1;
}

static double monitor_value(const char *monitor, const epoch_metrics *m)
{
    const metric_field *f = epoch_metric_find(monitor);
    return f ? epoch_metric_get(m, f) : NAN;
}

/*
 * Keras's ReduceLROnPlateau at the end of an epoch of model k: once
 * `patience` epochs in a row (not counting a cooldown) did not improve the
 * monitored metric by min_delta, the rate times factor, not below min_lr
 * (and not at all once it is there), then `cooldown` epochs of rest. A
 * metric the epochs do not have changes nothing; a NaN value is no
 * improvement, as in Keras (its comparison is false). The rate is a float,
 * as Keras's variable is.
 */
static void plateau_step(train_group *g, int k, int has_val, const epoch_metrics *m,
                         train_result *r)
{
    const plateau_spec *p = &g->spec[k]->plateau;
    if (!p->enabled || !fit_monitor_present(&g->L, has_val, p->monitor))
        return;
    double v = monitor_value(p->monitor, m);
    if (r->plateau_cooldown > 0) {
        r->plateau_cooldown--;
        r->plateau_wait = 0;
    }
    /* No best yet (NaN) is Keras's start of +-inf. */
    int is_max = monitor_is_max(p->monitor);
    double best = isnan(r->plateau_best) ? (is_max ? -HUGE_VAL : HUGE_VAL) : r->plateau_best;
    int better = is_max ? v > best + p->min_delta : v < best - p->min_delta;
    if (better) {
        r->plateau_best = v;
        r->plateau_wait = 0;
        return;
    }
    if (r->plateau_cooldown > 0 || ++r->plateau_wait < p->patience)
        return;
    if ((double)g->lr[k] > (double)(float)p->min_lr) {
        double lr = (double)g->lr[k] * p->factor;
        g->lr[k] = (float)(lr > p->min_lr ? lr : p->min_lr);
        r->lr = g->lr[k];
        r->plateau_cooldown = p->cooldown;
        r->plateau_wait = 0;
    }
}

/* One fit's state, shared by its phases. */
typedef struct fit_state {
    train_group *g;
    const data_view *train, *val;
    const train_callbacks *cb;
    train_result *res;
    cohort_error *err;
    int has_val;
    int e0;                        /* whole epochs before this fit */
    int64_t s0;                    /* steps of epoch e0 + 1 before this fit */
    int64_t n, steps;              /* training rows, steps per epoch */
    int max_epochs;                /* the last epoch of any model */
    int last[COHORT_MAX_GROUP];    /* each model's last epoch of this fit */
    int blocked;                   /* steps taken in blocks */
    int stats_every;               /* steps between reads of the stats */
    double t0;                     /* when the fit began */
    /* Seconds before this fit (a resumed model's, from its checkpoint): a
     * checkpoint carries the total so far, so the time spent before an
     * interruption counts. */
    double base[COHORT_MAX_GROUP];
    double st[COHORT_MAX_GROUP * STATS_PER_MODEL]; /* the stats as last read */
    int mid_epoch;                 /* interrupted inside an epoch */
} fit_state;

/* Model k's statistic `stat` as last read. */
static double stat_of(const fit_state *f, int k, int stat)
{
    return f->st[STATS_PER_MODEL * k + stat];
}

/* Each model's last epoch, the shuffle orders, and the results: cleared for
 * a fresh fit, kept (the resumed state) with the learning rate taken back
 * otherwise. */
static cohort_status fit_begin(fit_state *f, const train_start *start)
{
    train_group *g = f->g;
    train_result *res = f->res;
    int K = g->K, B = g->L.B;
    f->n = f->train->n;
    f->steps = (f->n + B - 1) / B;
    f->has_val = f->val && f->val->n > 0;
    f->max_epochs = 0;
    f->e0 = start ? start->epoch : 0;
    f->s0 = start ? start->step : 0;
    int fresh = f->e0 == 0 && f->s0 == 0; /* else res[] hold the resumed state */
    for (int k = 0; k < K; k++) {
        f->last[k] = g->spec[k]->epochs;
        if (start && start->stop_epoch > 0 && start->stop_epoch < f->last[k])
            f->last[k] = start->stop_epoch;
        if (f->last[k] > f->max_epochs)
            f->max_epochs = f->last[k];
    }
    free(g->order);
    g->order = malloc((size_t)(g->shared ? 1 : K) * (size_t)(f->n > 0 ? f->n : 1) *
                      sizeof *g->order);
    for (int k = 0; k < K; k++) {
        if (fresh) {
            epoch_metrics *h = res[k].history;
            memset(&res[k], 0, sizeof res[k]);
            res[k].history = h;
            res[k].best_value = NAN;
            res[k].lr = g->lr[k];
            res[k].plateau_best = NAN;
        } else if (isfinite(res[k].lr) && res[k].lr > 0.0) {
            g->lr[k] = (float)res[k].lr; /* as reduce_lr_on_plateau left it */
        }
        res[k].state = MODEL_RUNNING;
        res[k].error[0] = 0;
        g->active[k] = 1;
        if (!res[k].history || !g->order) {
            res[k].state = MODEL_FAILED;
            str_copy(res[k].error, sizeof res[k].error, "out of host memory");
            g->active[k] = 0;
        }
    }
    if (!g->order)
        return cohort_fail(f->err, COHORT_ERR_NOMEM, "out of host memory");
    f->blocked = g->be->model_major && K > 1;
    f->stats_every = g->be->stats_every > 1 ? g->be->stats_every : 1;
    /* Every epoch takes every step, so the step count follows from the start. */
    g->t = (int64_t)f->e0 * f->steps + f->s0;
    f->t0 = now_seconds();
    for (int k = 0; k < K; k++)
        f->base[k] = res[k].seconds;
    f->mid_epoch = 0;
    return COHORT_OK;
}

/* Whether model k's loss as last read is finite; if not, it leaves the fit,
 * diverged (or failed, where the device failed). */
static int check_loss(fit_state *f, int k, int epoch, int64_t step)
{
    train_group *g = f->g;
    train_result *r = &f->res[k];
    double batch = stat_of(f, k, STAT_BATCH_LOSS);
    if (isfinite(batch) && isfinite(stat_of(f, k, STAT_LOSS_SUM)))
        return 1;
    g->active[k] = 0;
    r->epochs_run = epoch - 1;
    const char *dev = group_device_error(g);
    if (*dev) { /* the device's NaN, not the model's */
        r->state = MODEL_FAILED;
        snprintf(r->error, sizeof r->error, "the device failed at epoch %d: %s", epoch, dev);
        return 0;
    }
    r->state = MODEL_DIVERGED;
    str_format(r->error, sizeof r->error,
               "loss became %s at epoch %d, step %lld%s; lower the learning rate (now %g)",
               isnan(batch) ? "NaN" : "Inf", epoch, (long long)step + 1,
               f->stats_every > 1 || f->blocked ? " or before" : "", (double)g->lr[k]);
    return 0;
}

/* Stopped inside an epoch: keep the sums of the steps done, checkpoint. */
static cohort_status stop_mid_epoch(fit_state *f, int epoch, int64_t step)
{
    const train_callbacks *cb = f->cb;
    train_result *res = f->res;
    for (int k = 0; k < f->g->K; k++) {
        res[k].part_loss = stat_of(f, k, STAT_LOSS_SUM);
        res[k].part_correct = stat_of(f, k, STAT_RIGHT);
        res[k].part_sq = stat_of(f, k, STAT_SQ_SUM);
        res[k].seconds = f->base[k] + (now_seconds() - f->t0);
    }
    if (cb->on_checkpoint && cb->on_checkpoint(cb->user, epoch - 1, step + 1, res, f->err))
        return cohort_fail_prefix(f->err, "checkpoint");
    f->mid_epoch = 1;
    return COHORT_ERR_INTERRUPTED;
}

/* The steps of one epoch (from where a resumed fit stopped, in the first):
 * progress, divergence, and a stop request. */
static cohort_status fit_steps(fit_state *f, int epoch)
{
    train_group *g = f->g;
    const train_callbacks *cb = f->cb;
    train_result *res = f->res;
    int K = g->K, B = g->L.B;
    int64_t n = f->n, steps = f->steps;
    for (int k = 0; k < (g->shared ? 1 : K); k++)
        shuffle_order(g->order + (size_t)k * (size_t)n, n, model_order_seed(g->spec[k]), epoch,
                      g->spec[k]->shuffle);
    int64_t first = epoch == f->e0 + 1 ? f->s0 : 0;
    for (int k = 0; k < K; k++) {
        double *s = f->st + STATS_PER_MODEL * k;
        s[STAT_LOSS_SUM] = first ? res[k].part_loss : 0.0;
        s[STAT_RIGHT] = first ? res[k].part_correct : 0.0;
        s[STAT_BATCH_LOSS] = 0.0;
        s[STAT_SQ_SUM] = first ? res[k].part_sq : 0.0;
    }
    g->be->copy_h2d(g->ctx, g->stats, f->st, (size_t)K * STATS_PER_MODEL * sizeof(double));
    for (int64_t step = first; step < steps; step++) {
        uint64_t counter = (uint64_t)(epoch - 1) * (uint64_t)steps + (uint64_t)step;
        /* The step index below is a block's last. */
        step += group_train_steps(g, f->train, g->order, step, steps, counter) - 1;
        int rows = group_batch_rows(n, step, B);
        /* Reading the metrics back is a host sync on a GPU: there, every
         * 16 steps and at the end of the epoch; on the CPU, every step. */
        if (f->stats_every > 1 && (step + 1) % f->stats_every != 0 && step + 1 < steps &&
            !(cb && cb->stop && *cb->stop))
            continue;
        group_read_stats(g, f->st);
        for (int k = 0; k < K; k++) {
            if (!g->active[k] || !check_loss(f, k, epoch, step))
                continue;
            if (cb && cb->on_step) {
                int64_t done = step * B + rows;
                double acc = g->L.metric == METRIC_ERRORS
                                 ? NAN
                                 : stat_of(f, k, STAT_RIGHT) / (double)done;
                cb->on_step(cb->user, k, epoch, step + 1, steps,
                            stat_of(f, k, STAT_LOSS_SUM) / (double)done, acc);
            }
        }
        if (cb && cb->stop && *cb->stop && step + 1 < steps)
            return stop_mid_epoch(f, epoch, step);
    }
    return COHORT_OK;
}

/* Whether model k's weights are all finite after the epoch: a loss can stay
 * finite while the weights run off to Inf (dead ReLUs, saturated outputs). */
static int check_weights(fit_state *f, int k, int epoch)
{
    train_group *g = f->g;
    group_get_params(g, k, g->host);
    size_t bad = 0;
    for (size_t i = 0; i < g->L.n_params; i++)
        bad += !isfinite(g->host[i]);
    if (!bad)
        return 1;
    train_result *r = &f->res[k];
    g->active[k] = 0;
    r->state = MODEL_DIVERGED;
    str_format(r->error, sizeof r->error,
               "%zu weights became NaN or Inf in epoch %d; lower the learning rate (now %g)", bad,
               epoch, (double)g->lr[k]);
    r->epochs_run = epoch - 1;
    return 0;
}

/* Model k's metrics of the epoch into its history. */
static epoch_metrics *record_epoch(fit_state *f, int k, int epoch, double secs,
                                   const eval_metrics *ve)
{
    train_group *g = f->g;
    train_result *r = &f->res[k];
    epoch_metrics *m = &r->history[epoch - 1];
    epoch_metrics_clear(m);
    eval_metrics tm = metrics_of_stats(&g->L, f->st + STATS_PER_MODEL * k, (double)f->n);
    m->loss = tm.loss;
    m->accuracy = tm.accuracy;
    m->mae = tm.mae;
    m->rmse = tm.rmse;
    if (f->has_val) {
        m->val_loss = ve[k].loss;
        m->val_accuracy = ve[k].accuracy;
        m->val_mae = ve[k].mae;
        m->val_rmse = ve[k].rmse;
    }
    m->seconds = secs;
    m->lr = group_lr_at(g, k, g->t - 1);
    r->epochs_run = epoch;
    r->part_loss = r->part_correct = r->part_sq = 0.0;
    return m;
}

/* The end of an epoch of model k: its metrics, the best epoch, the epoch
 * callback, reduce_lr_on_plateau and early stopping. */
static void model_epoch_end(fit_state *f, int k, int epoch, double secs, const eval_metrics *ve)
{
    train_group *g = f->g;
    const model_layout *L = &g->L;
    const train_callbacks *cb = f->cb;
    train_result *r = &f->res[k];
    if (!check_weights(f, k, epoch))
        return;
    epoch_metrics *m = record_epoch(f, k, epoch, secs, ve);
    const early_stop_spec *es = &g->spec[k]->early_stop;
    const char *mon = es->enabled ? es->monitor : f->has_val ? "val_loss" : "loss";
    double v = monitor_value(mon, m), delta = es->enabled ? es->min_delta : 0.0;
    double best = r->best_value;
    int is_max = monitor_is_max(mon);
    /* Keras's EarlyStopping._is_improvement: the value less min_delta
     * against the best, in that order, so that a gain of exactly
     * min_delta counts as Keras counts it. */
    int improved = isfinite(v) && (isnan(best) || (is_max ? v - delta > best : v + delta < best));
    /* Keras: with restore_best_weights, the first epoch's weights are
     * the best until an epoch improves, which a NaN or Inf value never
     * does; best_value stays NaN, so any finite value will. A monitor
     * the epochs lack changes nothing (no wait, no stop), as in Keras. */
    int count = !es->enabled || fit_monitor_present(L, f->has_val, mon);
    int is_best = improved ||
                  (count && es->enabled && es->restore_best && g->best && r->best_epoch == 0);
    if (is_best) {
        r->best_epoch = epoch;
        r->best = *m;
        if (g->best)
            g->be->copy(g->ctx, g->best + (size_t)k * L->p_stride,
                        g->params + (size_t)k * L->p_stride, 0, L->n_params, 1);
    }
    if (improved) {
        r->best_value = v;
        r->wait = 0;
    } else if (count) {
        r->wait++;
    }
    if (cb && cb->on_epoch) {
        cohort_error e;
        e.message[0] = 0;
        if (cb->on_epoch(cb->user, k, epoch, m, is_best, &e)) {
            g->active[k] = 0;
            r->state = MODEL_FAILED;
            str_copy(r->error, sizeof r->error, e.message);
            return;
        }
    }
    plateau_step(g, k, f->has_val, m, r);
    /* Keras: stop once `patience` epochs in a row did not improve,
     * never after the first (its `epoch > 0`). */
    if (es->enabled && count && !improved && r->wait >= es->patience && epoch > 1 &&
        epoch < g->spec[k]->epochs) {
        g->active[k] = 0;
        r->state = MODEL_OK;
        r->stopped_early = 1;
    }
}

/* The end of an epoch: validation, each model's end of it, the checkpoint,
 * and a stop request. */
static cohort_status fit_epoch_end(fit_state *f, int epoch, double te)
{
    train_group *g = f->g;
    const train_callbacks *cb = f->cb;
    train_result *res = f->res;
    int K = g->K;
    eval_metrics ve[COHORT_MAX_GROUP];
    if (f->has_val && group_evaluate(g, f->val, ve, NULL) != COHORT_OK) {
        for (int k = 0; k < K; k++)
            if (g->active[k]) {
                g->active[k] = 0;
                res[k].state = MODEL_FAILED;
                snprintf(res[k].error, sizeof res[k].error,
                         "out of host memory evaluating epoch %d on the validation data", epoch);
            }
    }
    double secs = now_seconds() - te;
    for (int k = 0; k < K; k++)
        if (g->active[k])
            model_epoch_end(f, k, epoch, secs, ve);
    for (int k = 0; k < K; k++)
        res[k].seconds = f->base[k] + (now_seconds() - f->t0);
    if (cb && cb->on_checkpoint && cb->on_checkpoint(cb->user, epoch, 0, res, f->err))
        return cohort_fail_prefix(f->err, "checkpoint");
    if (cb && cb->stop && *cb->stop && epoch < f->max_epochs)
        return COHORT_ERR_INTERRUPTED;
    return COHORT_OK;
}

/* Each model's state as the fit ends (ret: how it ended), the best weights
 * restored where early stopping says so, and the seconds. */
static void fit_finish(fit_state *f, cohort_status ret)
{
    train_group *g = f->g;
    const model_layout *L = &g->L;
    const train_callbacks *cb = f->cb;
    train_result *res = f->res;
    double secs = now_seconds() - f->t0;
    for (int k = 0; k < g->K; k++) {
        if (res[k].state == MODEL_RUNNING && ret == COHORT_ERR_INTERRUPTED) {
            res[k].state = MODEL_INTERRUPTED;
            snprintf(res[k].error, sizeof res[k].error, "stopped after %d of %d epochs%s%s",
                     res[k].epochs_run, g->spec[k]->epochs,
                     f->mid_epoch ? " and part of the next" : "",
                     cb && cb->on_checkpoint ? "; its checkpoint is saved" : "");
        } else if (res[k].state == MODEL_RUNNING) {
            res[k].state = ret ? MODEL_FAILED : MODEL_OK;
        }
        if (ret && ret != COHORT_ERR_INTERRUPTED && res[k].state == MODEL_FAILED &&
            !res[k].error[0])
            str_copy(res[k].error, sizeof res[k].error, f->err->message);
        if (res[k].state == MODEL_OK && g->best && res[k].best_epoch > 0 &&
            g->spec[k]->early_stop.enabled && g->spec[k]->early_stop.restore_best)
            g->be->copy(g->ctx, g->params + (size_t)k * L->p_stride,
                        g->best + (size_t)k * L->p_stride, 0, L->n_params, 1);
        res[k].seconds = f->base[k] + secs;
    }
}

static cohort_status fit(train_group *g, const data_view *train, const data_view *val,
                         const train_callbacks *cb, const train_start *start, train_result *res,
                         cohort_error *err)
{
    fit_state f;
    f.g = g;
    f.train = train;
    f.val = val;
    f.cb = cb;
    f.res = res;
    f.err = err;
    cohort_status ret = fit_begin(&f, start);
    if (ret)
        return ret;
    for (int epoch = f.e0 + 1; epoch <= f.max_epochs; epoch++) {
        int any = 0;
        for (int k = 0; k < g->K; k++) {
            if (g->active[k] && epoch > f.last[k]) {
                g->active[k] = 0;
                res[k].state = MODEL_OK;
            }
            any |= g->active[k];
        }
        if (!any)
            break;
        double te = now_seconds();
        ret = fit_steps(&f, epoch);
        /* The checkpoint of a stop inside an epoch failed: the fit ends
         * there, its models left as they stand (running). */
        if (ret && ret != COHORT_ERR_INTERRUPTED)
            return ret;
        if (ret)
            break;
        if ((ret = fit_epoch_end(&f, epoch, te)))
            break;
    }
    fit_finish(&f, ret);
    return ret;
}

/*
 * Denormals are flushed to zero while a group trains. Adam's first moment of
 * a weight whose gradient is always zero (a border pixel of every image)
 * decays by beta1 each step into the denormal range, where each vector op on
 * it takes a microcode assist of a hundred cycles or more: measured, 3% of
 * the large seed model's m was denormal after one epoch. Such values shift a
 * weight by less than 1e-30 of its size, so the results do not change.
 */
cohort_status group_fit(train_group *g, const data_view *train, const data_view *val,
                        const train_callbacks *cb, const train_start *start, train_result *res,
                        cohort_error *err)
{
    unsigned fp = fp_flush_denormals();
    cohort_status st = fit(g, train, val, cb, start, res, err);
    fp_restore(fp);
    return st;
}

