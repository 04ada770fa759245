/*
 * plan_impl: what the files of src/plan/ share and nothing else includes: the
 * stages of a plan as functions of its tree (each file owns one job; plan.c
 * calls them in order), and the collector of their errors (errors.c).
 */
#ifndef COHORT_PLAN_IMPL_H
#define COHORT_PLAN_IMPL_H

#include "plan/plan.h"
#include "plan/yamltree.h"
#include "util/util.h"

#define PLAN_MAX_NODES ((size_t)1 << 20)

/* The most errors one plan reports at once. */
#define PLAN_MAX_ERRORS 20

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/*
 * The errors of a plan, reported together as a compiler does: one file:line
 * a line, up to PLAN_MAX_ERRORS, then how many there were. Each stage (the
 * top, data, devices, the scheduler, defaults, each model) adds its first
 * error and the next stage runs all the same, unless it needs what failed.
 * A mistake in defaults is one error, however many models inherit it: an
 * error at an inherited node is kept once, with the number of models it
 * stopped.
 */
typedef struct plan_errs {
    int n;       /* errors found */
    int kept;    /* entries of e, at most PLAN_MAX_ERRORS */
    struct {
        char *msg;          /* owned */
        int inherited;      /* at a node the model has from defaults: */
        int line;           /* the node's line */
        const char *origin; /* and origin */
        int models;         /* models it stopped */
    } e[PLAN_MAX_ERRORS];
} plan_errs;

/* Run one stage of the plan into pe: c->failed cleared, the call made, its
 * error added (and the plan goes on) unless it is not an input error.
 * Returns what plan_errs_add returns. */
#define PLAN_STAGE(pe, c, call)                                                             \
    ((c)->failed->node = NULL, plan_errs_add((pe), (c), (call), (c)->failed))

/* ---- overrides.c ---- */

/* Apply one "KEY=VALUE" to the tree; takes no ownership of anything. */
cohort_status plan_apply_override(const yctx *c, ynode *root, const char *ov);

/* ---- data.c ---- */

/* yget_str for a dataset spec (is_data) or a path, then resolve_path. */
cohort_status plan_yget_path(const yctx *c, const ynode *n, int is_data, const char *what,
                             char *buf, size_t size);

/* The data section into d (zeroed first); an error names its line. */
cohort_status plan_parse_data(const yctx *c, const ynode *root, data_spec *d);

/* "cpu:N" or "gpu:N". */
int plan_device_name_ok(const char *s, int allow_part);

/* The devices section into plan->devices (none: nothing to do). */
cohort_status plan_parse_devices(const yctx *c, const ynode *root, cohort_plan *plan);

/* ---- settings.c ---- */

/* The optimizer of model `label` (a name, a map or NULL: adam) into
 * out, with Keras's defaults for what it does not set. */
cohort_status plan_build_optimizer(const yctx *c, const ynode *o, const char *label,
                                   optim_spec *out);

/* A metric of the history that a callback may watch. */
cohort_status plan_get_monitor(const yctx *c, const ynode *v, const char *what, char *out,
                               size_t size);

/* loss: a name, or {name: N, from_logits, label_smoothing, delta}. */
cohort_status plan_build_loss(const yctx *c, const ynode *n, const char *label, model_spec *s);

/* An entry of `metrics`: accepted for Keras plans, as Keras's compile reads it
 * ("accuracy" and "acc" in any case; the accuracies and errors by their
 * function and class names), though the task decides what is reported. */
cohort_status plan_check_metric(const yctx *c, const ynode *n, const char *label);

/* class_weight: {CLASS: WEIGHT, ...} over classes 0..n-1, as Keras's fit. */
cohort_status plan_build_class_weight(const yctx *c, const ynode *n, const char *label,
                                      model_spec *s);

/* The last layer gives what the loss takes: a softmax for the categorical
 * cross-entropies, a sigmoid for binary_crossentropy, logits (a linear
 * layer) with from_logits. */
cohort_status plan_check_output(const yctx *c, const ynode *layer, const char *label,
                                const model_spec *s);

/* early_stopping of model `label`: null, true/false or a map, into es;
 * monitoring a val_ metric needs validation data. */
cohort_status plan_build_early_stop(const yctx *c, const ynode *n, const char *label,
                                    const data_spec *data, early_stop_spec *es);

/* reduce_lr_on_plateau: null, or a map of Keras's ReduceLROnPlateau
 * settings with its defaults. A schedule owns the learning rate, so the two
 * cannot be combined (Keras cannot set the rate of a schedule either). */
cohort_status plan_build_plateau(const yctx *c, const ynode *n, const char *label,
                                 const data_spec *data, const optim_spec *opt,
                                 plateau_spec *p);

/* ---- models.c ---- */

/* Models of the plan: each merged with defaults and swept. Every error goes
 * into pe; the return is not COHORT_OK only to stop at once (out of
 * memory). *built: every model was built, so the checks across models can
 * run. */
cohort_status plan_build_models(const yctx *c, plan_errs *pe, ynode *root,
                                cohort_plan *plan, int *built);

/* A warning for each key of defaults' optimizer that no model's optimizer
 * takes (weight_decay with only adam models): plan_build_optimizer passes over
 * an inherited key its optimizer does not take, meant for another model's,
 * so a key that is every model's other optimizer's would vanish unsaid. */
cohort_status plan_warn_unused_defaults(const yctx *c, const ynode *root,
                                        const cohort_plan *plan);

/* ---- errors.c ---- */

/* Add the error of a stage that returned st (c->err's message), which was
 * at `at` (NULL or no node: unknown). Returns COHORT_OK to go on, or st when it
 * is not an input error (out of memory): then the plan stops at once. */
cohort_status plan_errs_add(plan_errs *pe, const yctx *c, cohort_status st, const yfailed *at);

/* The errors as one message in c->err (COHORT_ERR_INPUT), or COHORT_OK when
 * there were none; frees pe's entries. */
cohort_status plan_errs_finish(plan_errs *pe, const yctx *c);

/* ---- scheduler.c ---- */

/* scheduler: {name, metric, mode, grace_period, reduction_factor, max_t}, or
 * for pbt {name, metric, mode, perturbation_interval, quantile_fraction,
 * resample_probability, hyperparam_mutations, seed}. */
cohort_status plan_parse_scheduler(const yctx *c, const ynode *root, cohort_plan *plan);

/* Every key of pbt's hyperparam_mutations is a setting the models have
 * (they all have the same layers and optimizer: run_check_scheduler). */
cohort_status plan_check_mutation_keys(const yctx *c, const ynode *root, cohort_plan *plan);

/* ---- json.c ---- */

/* The whole expanded plan as JSON: data, strategy, devices and each model's
 * config_json. malloc'd; NULL on out of memory. */
char *plan_to_json(const cohort_plan *p);

#endif
