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

static cohort_status fit(train_group *g, const data_view *train, const data_view *val,
                         const train_callbacks *cb, const train_start *start, train_result *res,
                         cohort_error *err)
{
    const model_layout *L = &g->L;
    int K = g->K, B = L->B;
    int64_t n = train->n, steps = (n + B - 1) / B;
    int has_val = val && val->n > 0;
    int max_epochs = 0, e0 = start ? start->epoch : 0;
    int64_t s0 = start ? start->step : 0;
    int fresh = e0 == 0 && s0 == 0; /* else res[] hold the resumed state */
    int last[COHORT_MAX_GROUP]; /* each model's last epoch of this fit */
    for (int k = 0; k < K; k++) {
        last[k] = g->spec[k]->epochs;
        if (start && start->stop_epoch > 0 && start->stop_epoch < last[k])
            last[k] = start->stop_epoch;
        if (last[k] > max_epochs)
            max_epochs = last[k];
    }
    free(g->order);
    g->order = malloc((size_t)(g->shared ? 1 : K) * (size_t)(n > 0 ? n : 1) * sizeof *g->order);
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
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of host memory");
    int blocked = g->be->model_major && K > 1; /* steps taken in blocks */
    int stats_every = g->be->stats_every > 1 ? g->be->stats_every : 1;
    /* Every epoch takes every step, so the step count follows from the start. */
    g->t = (int64_t)e0 * steps + s0;
    double t0 = now_seconds(), st[COHORT_MAX_GROUP * 4];
    /* Seconds before this fit (a resumed model's, from its checkpoint): a
     * checkpoint carries the total so far, so the time spent before an
     * interruption counts. */
    double base[COHORT_MAX_GROUP];
    for (int k = 0; k < K; k++)
        base[k] = res[k].seconds;
    cohort_status ret = COHORT_OK;
    int mid_epoch = 0; /* interrupted inside an epoch */

    for (int epoch = e0 + 1; epoch <= max_epochs; epoch++) {
        int any = 0;
        for (int k = 0; k < K; k++) {
            if (g->active[k] && epoch > last[k]) {
                g->active[k] = 0;
                res[k].state = MODEL_OK;
            }
            any |= g->active[k];
        }
        if (!any)
            break;
        double te = now_seconds();
        for (int k = 0; k < (g->shared ? 1 : K); k++)
            shuffle_order(g->order + (size_t)k * (size_t)n, n, model_order_seed(g->spec[k]), epoch,
                          g->spec[k]->shuffle);
        int64_t first = epoch == e0 + 1 ? s0 : 0;
        for (int k = 0; k < K; k++) {
            st[4 * k] = first ? res[k].part_loss : 0.0;
            st[4 * k + 1] = first ? res[k].part_correct : 0.0;
            st[4 * k + 2] = 0.0;
            st[4 * k + 3] = first ? res[k].part_sq : 0.0;
        }
        g->be->copy_h2d(g->ctx, g->stats, st, (size_t)K * 4 * sizeof(double));
        for (int64_t step = first; step < steps; step++) {
            uint64_t counter = (uint64_t)(epoch - 1) * (uint64_t)steps + (uint64_t)step;
            /* The step index below is a block's last. */
            step += group_train_steps(g, train, g->order, step, steps, counter) - 1;
            int rows = group_batch_rows(n, step, B);
            /* Reading the metrics back is a host sync on a GPU: there, every
             * 16 steps and at the end of the epoch; on the CPU, every step. */
            if (stats_every > 1 && (step + 1) % stats_every != 0 && step + 1 < steps &&
                !(cb && cb->stop && *cb->stop))
                continue;
            group_read_stats(g, st);
            for (int k = 0; k < K; k++) {
                if (!g->active[k])
                    continue;
                if (!isfinite(st[4 * k + 2]) || !isfinite(st[4 * k])) {
                    g->active[k] = 0;
                    res[k].epochs_run = epoch - 1;
                    const char *dev = group_device_error(g);
                    if (*dev) { /* the device's NaN, not the model's */
                        res[k].state = MODEL_FAILED;
                        snprintf(res[k].error, sizeof res[k].error,
                                 "the device failed at epoch %d: %s", epoch, dev);
                        continue;
                    }
                    res[k].state = MODEL_DIVERGED;
                    str_format(res[k].error, sizeof res[k].error,
                             "loss became %s at epoch %d, step %lld%s; lower the learning rate "
                             "(now %g)",
                             isnan(st[4 * k + 2]) ? "NaN" : "Inf", epoch, (long long)step + 1,
                             stats_every > 1 || blocked ? " or before" : "", (double)g->lr[k]);
                    continue;
                }
                if (cb && cb->on_step) {
                    int64_t done = step * B + rows;
                    double acc = L->metric == METRIC_ERRORS ? NAN : st[4 * k + 1] / (double)done;
                    cb->on_step(cb->user, k, epoch, step + 1, steps, st[4 * k] / (double)done, acc);
                }
            }
            if (cb && cb->stop && *cb->stop && step + 1 < steps) {
                for (int k = 0; k < K; k++) {
                    res[k].part_loss = st[4 * k];
                    res[k].part_correct = st[4 * k + 1];
                    res[k].part_sq = st[4 * k + 3];
                    res[k].seconds = base[k] + (now_seconds() - t0);
                }
                if (cb->on_checkpoint && cb->on_checkpoint(cb->user, epoch - 1, step + 1, res, err))
                    return cohort_fail_prefix(err, "checkpoint");
                ret = COHORT_ERR_INTERRUPTED;
                mid_epoch = 1;
                break;
            }
        }
        if (ret)
            break;
        eval_metrics ve[COHORT_MAX_GROUP];
        if (has_val && group_evaluate(g, val, ve, NULL) != COHORT_OK) {
            for (int k = 0; k < K; k++)
                if (g->active[k]) {
                    g->active[k] = 0;
                    res[k].state = MODEL_FAILED;
                    snprintf(res[k].error, sizeof res[k].error,
                             "out of host memory evaluating epoch %d on the validation data",
                             epoch);
                }
        }
        double secs = now_seconds() - te;
        for (int k = 0; k < K; k++) {
            if (!g->active[k])
                continue;
            /* A loss can stay finite while the weights run off to Inf (dead
             * ReLUs, saturated outputs): check the weights too. */
            group_get_params(g, k, g->host);
            size_t bad = 0;
            for (size_t i = 0; i < L->n_params; i++)
                bad += !isfinite(g->host[i]);
            if (bad) {
                g->active[k] = 0;
                res[k].state = MODEL_DIVERGED;
                str_format(res[k].error, sizeof res[k].error,
                         "%zu weights became NaN or Inf in epoch %d; lower the learning rate "
                         "(now %g)",
                         bad, epoch, (double)g->lr[k]);
                res[k].epochs_run = epoch - 1;
                continue;
            }
            epoch_metrics *m = &res[k].history[epoch - 1];
            epoch_metrics_clear(m);
            eval_metrics tm = metrics_of_stats(L, st + 4 * k, (double)n);
            m->loss = tm.loss;
            m->accuracy = tm.accuracy;
            m->mae = tm.mae;
            m->rmse = tm.rmse;
            if (has_val) {
                m->val_loss = ve[k].loss;
                m->val_accuracy = ve[k].accuracy;
                m->val_mae = ve[k].mae;
                m->val_rmse = ve[k].rmse;
            }
            m->seconds = secs;
            m->lr = group_lr_at(g, k, g->t - 1);
            res[k].epochs_run = epoch;
            res[k].part_loss = res[k].part_correct = res[k].part_sq = 0.0;
            const early_stop_spec *es = &g->spec[k]->early_stop;
            const char *mon = es->enabled ? es->monitor : has_val ? "val_loss" : "loss";
            double v = monitor_value(mon, m), delta = es->enabled ? es->min_delta : 0.0;
            double best = res[k].best_value;
            int is_max = monitor_is_max(mon);
            /* Keras's EarlyStopping._is_improvement: the value less min_delta
             * against the best, in that order, so that a gain of exactly
             * min_delta counts as Keras counts it. */
            int improved = isfinite(v) &&
                           (isnan(best) || (is_max ? v - delta > best : v + delta < best));
            /* Keras: with restore_best_weights, the first epoch's weights are
             * the best until an epoch improves, which a NaN or Inf value never
             * does; best_value stays NaN, so any finite value will. A monitor
             * the epochs lack changes nothing (no wait, no stop), as in Keras. */
            int count = !es->enabled || fit_monitor_present(L, has_val, mon);
            int is_best = improved || (count && es->enabled && es->restore_best && g->best &&
                                       res[k].best_epoch == 0);
            if (is_best) {
                res[k].best_epoch = epoch;
                res[k].best = *m;
                if (g->best)
                    g->be->copy(g->ctx, g->best + (size_t)k * L->p_stride,
                                g->params + (size_t)k * L->p_stride, 0, L->n_params, 1);
            }
            if (improved) {
                res[k].best_value = v;
                res[k].wait = 0;
            } else if (count) {
                res[k].wait++;
            }
            if (cb && cb->on_epoch) {
                cohort_error e;
                e.message[0] = 0;
                if (cb->on_epoch(cb->user, k, epoch, m, is_best, &e)) {
                    g->active[k] = 0;
                    res[k].state = MODEL_FAILED;
                    str_copy(res[k].error, sizeof res[k].error, e.message);
                    continue;
                }
            }
            plateau_step(g, k, has_val, m, &res[k]);
            /* Keras: stop once `patience` epochs in a row did not improve,
             * never after the first (its `epoch > 0`). */
            if (es->enabled && count && !improved && res[k].wait >= es->patience && epoch > 1 &&
                epoch < g->spec[k]->epochs) {
                g->active[k] = 0;
                res[k].state = MODEL_OK;
                res[k].stopped_early = 1;
            }
        }
        for (int k = 0; k < K; k++)
            res[k].seconds = base[k] + (now_seconds() - t0);
        if (cb && cb->on_checkpoint && cb->on_checkpoint(cb->user, epoch, 0, res, err)) {
            ret = cohort_fail_prefix(err, "checkpoint");
            break;
        }
        if (cb && cb->stop && *cb->stop && epoch < max_epochs) {
            ret = COHORT_ERR_INTERRUPTED;
            break;
        }
    }
    double secs = now_seconds() - t0;
    for (int k = 0; k < K; k++) {
        if (res[k].state == MODEL_RUNNING && ret == COHORT_ERR_INTERRUPTED) {
            res[k].state = MODEL_INTERRUPTED;
            snprintf(res[k].error, sizeof res[k].error, "stopped after %d of %d epochs%s%s",
                     res[k].epochs_run, g->spec[k]->epochs,
                     mid_epoch ? " and part of the next" : "",
                     cb && cb->on_checkpoint ? "; its checkpoint is saved" : "");
        } else if (res[k].state == MODEL_RUNNING) {
            res[k].state = ret ? MODEL_FAILED : MODEL_OK;
        }
        if (ret && ret != COHORT_ERR_INTERRUPTED && res[k].state == MODEL_FAILED &&
            !res[k].error[0])
            str_copy(res[k].error, sizeof res[k].error, err->message);
        if (res[k].state == MODEL_OK && g->best && res[k].best_epoch > 0 &&
            g->spec[k]->early_stop.enabled && g->spec[k]->early_stop.restore_best)
            g->be->copy(g->ctx, g->params + (size_t)k * L->p_stride,
                        g->best + (size_t)k * L->p_stride, 0, L->n_params, 1);
        res[k].seconds = base[k] + secs;
    }
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

