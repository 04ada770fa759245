/*
 * train: trains a group of K same-shaped models as one (K = 1 is the ordinary
 * case): parameter init, the fit loop with per-model shuffles, optimizers,
 * metrics, early stopping, evaluation. Owns the group's one slab of device
 * memory, taken from the device's pool before training starts.
 */
#ifndef COHORT_TRAIN_H
#define COHORT_TRAIN_H

#include "data/data.h"
#include "device/device.h"
#include "model/model.h"

/* One epoch of one model. A metric that does not apply is NaN: accuracy for
 * regression (real-valued targets), mae and rmse for classification. lr is
 * the learning rate of the epoch's last step. */
typedef struct epoch_metrics {
    double loss, accuracy, val_loss, val_accuracy, seconds;
    double mae, rmse, val_mae, val_rmse;
    double lr;
} epoch_metrics;

/* The fields of epoch_metrics by their history names ("loss", "val_mae",
 * "lr", ...), in the order checkpoints store them (new ones go last). */
typedef struct metric_field {
    const char *name;
    size_t off;
} metric_field;
#define EPOCH_METRIC_COUNT 10
extern const metric_field epoch_metric_fields[EPOCH_METRIC_COUNT];
/* The field named `name`, or NULL. */
const metric_field *epoch_metric_find(const char *name);
static inline double *epoch_metric(epoch_metrics *m, const metric_field *f)
{
    return (double *)((char *)m + f->off);
}
static inline double epoch_metric_get(const epoch_metrics *m, const metric_field *f)
{
    return *(const double *)((const char *)m + f->off);
}
/* Every metric NaN. */
void epoch_metrics_clear(epoch_metrics *m);

typedef enum model_state {
    MODEL_PENDING,
    MODEL_RUNNING,
    MODEL_OK,
    MODEL_FAILED,
    MODEL_DIVERGED,
    MODEL_INTERRUPTED, /* stopped by a signal; --resume continues it */
    MODEL_PRUNED       /* stopped by the plan's scheduler at a rung: a success */
} model_state;

const char *model_state_str(model_state s);

/* What training one model produced. The trainer fills it; the caller owns it. */

/* One model's training so far. The caller allocates history ([epochs]);
 * when a fit resumes, the caller fills the fields from a checkpoint. */
typedef struct train_result {
    model_state state;
    char error[768];
    int epochs_run;
    epoch_metrics *history;  /* [epochs], owned by the caller */
    int best_epoch;          /* 1-based, 0 = none */
    epoch_metrics best;
    double best_value;       /* the monitored metric at best_epoch (NaN: none) */
    int wait;                /* epochs since it last improved (early stopping) */
    int stopped_early;
    double seconds;
    double part_loss, part_correct, part_sq; /* sums over the steps done of an unfinished
                                              * epoch (STAT_LOSS_SUM, STAT_RIGHT,
                                              * STAT_SQ_SUM) */
    /* reduce_lr_on_plateau: the learning rate now (NaN: the spec's), the
     * best monitored value, epochs without improvement, cooldown left */
    double lr, plateau_best;
    int plateau_wait, plateau_cooldown;
} train_result;

/* Where a fit starts: after `epoch` whole epochs and `step` steps of the next. */
typedef struct train_start {
    int epoch;
    int64_t step;
    int stop_epoch; /* > 0: train no model past this epoch (a scheduler's rung); 0: its own */
} train_start;

typedef struct train_callbacks {
    /* Called as steps complete (throttled by the caller as it likes). */
    void (*on_step)(void *user, int k, int epoch, int64_t step, int64_t steps, double loss,
                    double accuracy);
    /* Called after each epoch of each still-training model; is_best says the
     * epoch improved the monitored metric. Returning non-zero fails model k
     * with the message in err. */
    int (*on_epoch)(void *user, int k, int epoch, const epoch_metrics *m, int is_best,
                    cohort_error *err);
    /* Called after every epoch (step 0) and when stopped mid-epoch (the steps
     * done of epoch + 1): the moment to save the group's state. Non-zero
     * fails the whole fit with err. May be NULL: nothing is saved, and a
     * stopped model's error does not claim a checkpoint. */
    int (*on_checkpoint)(void *user, int epoch, int64_t step, const train_result *res,
                         cohort_error *err);
    void *user;
    _Atomic int *stop;  /* non-NULL and set: finish the step and return INTERRUPTED */
} train_callbacks;

typedef struct train_group train_group;

/*
 * Allocate and initialize a group of K models (specs[k], same shapes) on dev:
 * one slab of exactly model_layout.total_bytes from the device pool, weights
 * Glorot-uniform from each model's seed or loaded from its init_from file.
 * On error nothing stays allocated and err names the model.
 */
cohort_status group_create(const model_spec *const *specs, int K, sample_shape in, int n_classes,
                           cohort_device *dev, int threads, train_group **out, cohort_error *err);
void group_free(train_group *g);

/* Lend the calling thread to g's kernels (the backend's help_join and
 * help_run): group_help_join, while g is kept alive by the caller's lock,
 * returns a slot, or -1 where g's device takes no helpers; group_help_run
 * then works until group_free. Results do not change. */
int group_help_join(train_group *g);
void group_help_run(train_group *g, int slot);

const model_layout *group_layout(const train_group *g);
/* The table the group's ops run on (backend_resolve of its device's). */
const struct backend_ops *group_backend(const train_group *g);
/* The bytes the group's account peaked at in its pool. */
uint64_t group_peak_bytes(const train_group *g);

/* Train every model of the group from `start` (NULL: from scratch; else
 * res[k] hold the resumed state). res[k] receive each model's outcome. A
 * model that diverges stops alone (state DIVERGED); the others go on.
 * Returns COHORT_OK, COHORT_ERR_INTERRUPTED when cb->stop was set (after a
 * checkpoint), or the checkpoint callback's error. */
cohort_status group_fit(train_group *g, const data_view *train, const data_view *val,
                        const train_callbacks *cb, const train_start *start, train_result *res,
                        cohort_error *err);

/* Model k's parameters, optimizer state and best-epoch parameters as host
 * arrays of P floats (m, v, best may be NULL when the group has none). */
void group_get_state(train_group *g, int k, float *params, float *m, float *v, float *best);
void group_set_state(train_group *g, int k, const float *params, const float *m, const float *v,
                     const float *best);
/* Which optimizer-state arrays the group keeps: 0, 1 (m) or 2 (m, v). */
int group_opt_slots(const train_group *g);
int group_keeps_best(const train_group *g);

/* A model's metrics on a dataset: the loss, and the accuracy or (for real
 * targets, METRIC_ERRORS) the mean absolute and root mean squared errors;
 * what does not apply is NaN. */
typedef struct eval_metrics {
    double loss, accuracy, mae, rmse;
} eval_metrics;

/* The metrics of n samples from the loss op's stats sums (st: 4 doubles). */
eval_metrics metrics_of_stats(const model_layout *L, const double *st, double n);

/* Metrics of every model on d (no dropout): out[K]. pred: NULL, or
 * [K * d->n] host memory for the class (output_class) each model gives each
 * sample, pred[k * d->n + i], taken from the same pass (-1 where there was
 * no memory for it). Returns COHORT_ERR_NOMEM, every metric NaN, when its
 * host memory cannot be had. */
cohort_status group_evaluate(train_group *g, const data_view *d, eval_metrics *out, int32_t *pred);

/* Output probabilities (or values, for mse) of model k for all of d:
 * out is [d->n, n_out] host memory. */
void group_predict(train_group *g, int k, const data_view *d, float *out);

/* The class an output row of a model laid out as L stands for: the argmax;
 * for a single binary_crossentropy output, the class binary accuracy counts
 * (probability > 0.5, or logit > 0 with from_logits); for another single
 * output (mse on the label as a number), that value rounded. */
int output_class(const model_layout *L, const float *row);

/* Copy model k's parameters ([P], the layout's order) to or from host memory. */
void group_get_params(train_group *g, int k, float *host);
void group_set_params(train_group *g, int k, const float *host);
/* The first error the group's device reported ("" for none; a CPU has
 * none): after one, what the device copies back is NaN. */
const char *group_device_error(const train_group *g);

/* Whether the epochs of a model of layout L have the history column
 * `monitor` (accuracy for a classifier, mae and rmse for a regression; a
 * val_ one only with validation data). A callback on a column they lack
 * never acts, as Keras's (which warns, as the runner does). */
int fit_monitor_present(const model_layout *L, int has_val, const char *monitor);

/* For tests: the mean loss of each model on the first min(n, B) rows of d
 * and its gradient (grad is host [K, P]), without an optimizer step; with
 * dropout, the masks of step `counter`. Out of host memory: every loss is
 * NaN and grad is left as it was. */
void group_loss_grad(train_group *g, const data_view *d, int dropout, uint64_t counter,
                     double *loss, float *grad);

/* Fill host[P] with the Glorot-uniform init of spec's seed. */
void model_init_params(const model_spec *spec, const model_layout *L, float *host);

/* Load init_from weights for spec into host[P]; err names file and tensor. */
cohort_status model_load_params(const model_spec *spec, const model_layout *L, const char *path,
                                float *host, cohort_error *err);

#endif
