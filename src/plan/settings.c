/* settings: a model's settings besides its layers: the optimizer with its clip
 * and learning-rate schedule, the loss and whether the output layer gives what
 * it takes, metrics, class_weight, early_stopping and reduce_lr_on_plateau. */
#include "plan/plan_impl.h"

#include "layers/layer.h"
#include "optim/optim.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

const char *const plan_loss_keys[] = {"name", "from_logits", "label_smoothing", "delta", NULL};

const char *const plan_plateau_keys[] = {"monitor", "factor", "patience", "min_delta",
                                         "cooldown", "min_lr", NULL};

const char *const plan_early_stop_keys[] = {"monitor", "patience", "min_delta",
                                            "restore_best_weights", NULL};

/* The losses as Keras names them, aliases after; loss_kinds[i] is names[i]'s. */
static const char *const loss_names[] = {
    "sparse_categorical_crossentropy", "categorical_crossentropy", "binary_crossentropy",
    "mse", "mae", "huber", "mean_squared_error", "mean_absolute_error", "huber_loss"};

static const loss_kind loss_kinds[] = {LOSS_SCE, LOSS_CCE, LOSS_BCE,   LOSS_MSE,  LOSS_MAE,
                                       LOSS_HUBER, LOSS_MSE, LOSS_MAE, LOSS_HUBER};

/* keras.losses.get's other spellings of them (Keras 3's aliases and class
 * names), taken as they are written there: in that case only. */
static const struct {
    const char *name;
    loss_kind kind;
} keras_losses[] = {{"MSE", LOSS_MSE},
                    {"MAE", LOSS_MAE},
                    {"bce", LOSS_BCE},
                    {"BCE", LOSS_BCE},
                    {"MeanSquaredError", LOSS_MSE},
                    {"MeanAbsoluteError", LOSS_MAE},
                    {"Huber", LOSS_HUBER},
                    {"BinaryCrossentropy", LOSS_BCE},
                    {"CategoricalCrossentropy", LOSS_CCE},
                    {"SparseCategoricalCrossentropy", LOSS_SCE}};

static const char *const monitor_names[] = {"val_loss", "val_accuracy", "loss",    "accuracy",
                                            "val_mae",  "val_rmse",     "mae",     "rmse"};

/* Key k of an optimizer map applies to every optimizer. */
static int opt_common_key(const char *k)
{
    static const char *const common[] = {"lr", "clipnorm", "global_clipnorm", "clipvalue",
                                          "schedule", NULL};
    for (int i = 0; common[i]; i++)
        if (strcmp(k, common[i]) == 0)
            return 1;
    return 0;
}

/* The gradient clip of an optimizer map: at most one of clipnorm,
 * global_clipnorm and clipvalue (Keras refuses more); null is not set. */
static cohort_status build_clip(const yctx *c, const ynode *o, const char *label,
                                optim_spec *out)
{
    static const char *const names[] = {"clipnorm", "global_clipnorm", "clipvalue"};
    float *dst[3] = {&out->clipnorm, &out->global_clipnorm, &out->clipvalue};
    const ynode *first = NULL;
    for (int i = 0; i < 3; i++) {
        int at = ymap_find(o, names[i]);
        if (at < 0 || ynode_is_null(o->vals[at]))
            continue;
        if (first)
            return ynode_fail(c, o->keys[at], "the optimizer of %s has both '%s' and '%s'; only "
                                              "one of clipnorm, clipvalue and global_clipnorm "
                                              "can be set (as in Keras)",
                              label, first->str, names[i]);
        first = o->keys[at];
        double d;
        cohort_status st = yget_num(c, o->vals[at], names[i], YR_POSITIVE, 1, &d);
        if (st)
            return st;
        *dst[i] = (float)d;
    }
    return COHORT_OK;
}

static const char *const lr_schedule_names[] = {"cosine_decay", "exponential_decay",
                                             "piecewise_constant"};

static const char *const cosine_keys[] = {"decay_steps", "alpha", "warmup_steps",
                                          "warmup_target", NULL};

static const char *const exp_keys[] = {"decay_steps", "decay_rate", "staircase", NULL};

static const char *const piece_keys[] = {"boundaries", "values", NULL};

/* A required key of a schedule's map. */
static cohort_status scheduler_need(const yctx *c, const ynode *m, const char *key,
                                const char *kind, const ynode **v)
{
    if ((*v = ymap_get(m, key)))
        return COHORT_OK;
    return ynode_fail(c, m, "%s needs %s (like {%s: {decay_steps: 1000%s}})", kind, key, kind,
                      strcmp(kind, "exponential_decay") == 0 ? ", decay_rate: 0.96" : "");
}

static cohort_status build_piecewise(const yctx *c, const ynode *m, lr_schedule *s)
{
    const ynode *b, *v;
    char got[80];
    cohort_status st;
    if ((st = scheduler_need(c, m, "boundaries", "piecewise_constant", &b)) ||
        (st = scheduler_need(c, m, "values", "piecewise_constant", &v)))
        return st;
    if (b->type != YNODE_SEQ || b->n == 0 || b->n > COHORT_MAX_PIECES)
        return ynode_fail(c, b, "boundaries of piecewise_constant must be a list of 1 to %d "
                                "step numbers, like [1500, 3000], got %s",
                          COHORT_MAX_PIECES, ynode_describe(b, got, sizeof got));
    if (v->type != YNODE_SEQ || v->n != b->n + 1)
        return ynode_fail(c, v, "values of piecewise_constant must be a list of %zu learning "
                                "rates (one more than the boundaries), got %s",
                          b->n + 1, ynode_describe(v, got, sizeof got));
    s->n_bounds = (int)b->n;
    for (size_t i = 0; i < b->n; i++) {
        long long ll;
        if ((st = yget_int(c, b->vals[i], "a boundary of piecewise_constant", 0, INT64_MAX,
                           &ll)))
            return st;
        if (i > 0 && ll <= s->bounds[i - 1])
            return ynode_fail(c, b->vals[i], "boundaries of piecewise_constant must increase "
                                             "strictly; %lld follows %lld",
                              ll, (long long)s->bounds[i - 1]);
        s->bounds[i] = ll;
    }
    /* Kept in double for the spec's JSON; the rate is a float at run time. */
    for (size_t i = 0; i < v->n; i++) {
        if ((st = yget_num(c, v->vals[i], "a value of piecewise_constant", YR_POSITIVE, 0,
                           &s->values[i])))
            return st;
        if ((float)s->values[i] < FLT_MIN)
            return ynode_fail(c, v->vals[i], YNUM_TINY_MSG, "a value of piecewise_constant",
                              ynode_describe(v->vals[i], got, sizeof got));
    }
    return COHORT_OK;
}

/* optimizer.schedule: null, or a map of one of Keras's schedules. */
static cohort_status build_lr_schedule(const yctx *c, const ynode *n, lr_schedule *s)
{
    char got[80];
    if (!n || ynode_is_null(n))
        return COHORT_OK;
    if (n->type != YNODE_MAP || n->n != 1)
        return ynode_fail(c, n, "schedule must be a map of one schedule, like {cosine_decay: "
                                "{decay_steps: 1000}}, {exponential_decay: {decay_steps: 1000, "
                                "decay_rate: 0.96}} or {piecewise_constant: {boundaries: [1000], "
                                "values: [0.001, 0.0001]}}, got %s",
                          ynode_describe(n, got, sizeof got));
    int kind;
    cohort_status st = yget_enum(c, n->keys[0], "schedule", lr_schedule_names,
                                 COUNT(lr_schedule_names), &kind);
    if (st)
        return st;
    const char *name = lr_schedule_names[kind];
    const ynode *m = n->vals[0], *v;
    if (m->type != YNODE_MAP)
        return ynode_fail(c, m, "%s must be a map of its settings, got %s", name,
                          ynode_describe(m, got, sizeof got));
    const char *const *keys = kind == 0 ? cosine_keys : kind == 1 ? exp_keys : piece_keys;
    if ((st = plan_check_keys(c, m, keys, "in %s", name)))
        return st;
    long long ll;
    s->kind = kind == 0 ? SCHED_COSINE : kind == 1 ? SCHED_EXPONENTIAL : SCHED_PIECEWISE;
    if (s->kind == SCHED_PIECEWISE)
        return build_piecewise(c, m, s);
    if ((st = scheduler_need(c, m, "decay_steps", name, &v)) ||
        (st = yget_int(c, v, "decay_steps", 1, INT64_MAX, &ll)))
        return st;
    s->decay_steps = ll;
    if (s->kind == SCHED_EXPONENTIAL) {
        if ((st = scheduler_need(c, m, "decay_rate", name, &v)) ||
            (st = yget_num(c, v, "decay_rate", YR_POSITIVE, 0, &s->decay_rate)))
            return st;
        if ((v = ymap_get(m, "staircase")) && (st = yget_bool(c, v, "staircase", &s->staircase)))
            return st;
        return COHORT_OK;
    }
    if ((v = ymap_get(m, "alpha")) && (st = yget_num(c, v, "alpha", YR_NONNEG, 0, &s->alpha)))
        return st;
    if ((v = ymap_get(m, "warmup_steps"))) {
        if ((st = yget_int(c, v, "warmup_steps", 0, INT64_MAX, &ll)))
            return st;
        s->warmup_steps = ll;
    }
    /* As Keras: a target with no warmup steps starts the cosine from it. */
    if ((v = ymap_get(m, "warmup_target")) && !ynode_is_null(v) &&
        (st = yget_num(c, v, "warmup_target", YR_NONNEG, 0, &s->warmup_target)))
        return st;
    return COHORT_OK;
}

/* Key k of optimizer map o (a key its entry names) into out. */
static cohort_status opt_key_value(const yctx *c, const ynode *v, const optim_key *k,
                                   optim_spec *out)
{
    if (k->range == OPTIM_BOOL)
        return yget_bool(c, v, k->name, optim_field(out, k));
    static const yrange ranges[] = {[OPTIM_POSITIVE] = YR_POSITIVE, [OPTIM_NONNEG] = YR_NONNEG,
                                    [OPTIM_UNIT] = YR_UNIT};
    double d;
    cohort_status st = yget_num(c, v, k->name, ranges[k->range], 1, &d);
    if (!st)
        *(float *)optim_field(out, k) = (float)d;
    return st;
}

cohort_status plan_build_optimizer(const yctx *c, const ynode *o, const char *label,
                                   optim_spec *out)
{
    char got[80], list[160];
    const char *names[OPT_KIND_COUNT];
    size_t at = 0;
    for (int i = 0; i < OPT_KIND_COUNT; i++) {
        names[i] = opt_name((opt_kind)i);
        at += (size_t)snprintf(list + at, at < sizeof list ? sizeof list - at : 0, "%s%s",
                               i ? ", " : "", names[i]);
    }
    const ynode *name = NULL;
    if (o && o->type == YNODE_SCALAR)
        name = o;
    else if (o && o->type == YNODE_MAP)
        name = ymap_get(o, "name");
    else if (o)
        return ynode_fail(c, o, "optimizer of %s must be a name (%s) or a map like {name: adam, "
                                "lr: 0.001}, got %s",
                          label, list, ynode_describe(o, got, sizeof got));
    int kind = OPT_DEFAULT;
    cohort_status st;
    if (name && !(o->type == YNODE_SCALAR && ynode_is_null(o)) &&
        (st = yget_enum_anycase(c, name, "optimizer", names, OPT_KIND_COUNT, &kind)))
        return st;
    optim_defaults(out, (opt_kind)kind); /* Keras's, from the optimizer's entry */
    if (!o || o->type != YNODE_MAP)
        return COHORT_OK;
    for (size_t i = 0; i < o->n; i++) {
        const char *k = o->keys[i]->str;
        double d;
        if (strcmp(k, "lr") == 0) {
            if ((st = yget_num(c, o->vals[i], k, YR_POSITIVE, 1, &d)))
                return st;
            out->lr = (float)d;
            continue;
        }
        if (strcmp(k, "name") == 0 || opt_common_key(k))
            continue; /* the clips and the schedule: below */
        const optim_key *key = optim_key_of(out->kind, k);
        if (!key) {
            if (o->keys[i]->inherited)
                continue; /* a default meant for another optimizer */
            return ynode_fail(c, o->keys[i], "'%s' does not apply to optimizer '%s' of %s (it "
                                             "takes %s, and clipnorm, global_clipnorm, "
                                             "clipvalue, schedule)",
                              k, names[kind], label, optim_keys_list(out->kind, list, sizeof list));
        }
        if ((st = opt_key_value(c, o->vals[i], key, out)))
            return st;
    }
    const optim_entry *e = optim_entry_of(out->kind);
    const char *why = e->check ? e->check(out) : NULL;
    if (why)
        return ynode_fail(c, o, "optimizer %s of %s: %s", names[kind], label, why);
    if ((st = build_clip(c, o, label, out)))
        return st;
    return build_lr_schedule(c, ymap_get(o, "schedule"), &out->schedule);
}

cohort_status plan_get_monitor(const yctx *c, const ynode *v, const char *what, char *out,
                               size_t size)
{
    int idx;
    cohort_status st = yget_enum(c, v, what, monitor_names, COUNT(monitor_names), &idx);
    if (st)
        return st;
    str_copy(out, size, monitor_names[idx]);
    return COHORT_OK;
}

static int is_cross_entropy(loss_kind l) { return l == LOSS_SCE || l == LOSS_CCE || l == LOSS_BCE; }

cohort_status plan_build_loss(const yctx *c, const ynode *n, const char *label, model_spec *s)
{
    char got[80];
    const ynode *name = n && n->type == YNODE_MAP ? ymap_get(n, "name") : n;
    if (!n || ynode_is_null(n))
        return COHORT_OK;
    if ((n->type != YNODE_SCALAR && n->type != YNODE_MAP) || !name)
        return ynode_fail(c, n, "loss of %s must be a name like mse or a map like {name: huber, "
                                "delta: 1.0}, got %s",
                          label, ynode_describe(n, got, sizeof got));
    int idx = -1;
    cohort_status st = COHORT_OK;
    for (size_t i = 0; name->type == YNODE_SCALAR && i < COUNT(keras_losses); i++)
        if (strcmp(name->str, keras_losses[i].name) == 0)
            idx = (int)i;
    if (idx >= 0)
        s->loss = keras_losses[idx].kind;
    else if ((st = yget_enum(c, name, "loss", loss_names, COUNT(loss_names), &idx)))
        return st;
    else
        s->loss = loss_kinds[idx];
    if (n->type != YNODE_MAP)
        return COHORT_OK; /* its keys: checked with the model's (models.c) */
    for (size_t i = 0; i < n->n; i++) {
        const char *k = n->keys[i]->str;
        const ynode *v = n->vals[i];
        double d;
        if (strcmp(k, "name") == 0)
            continue;
        int ce = is_cross_entropy(s->loss);
        if ((strcmp(k, "from_logits") == 0 || strcmp(k, "label_smoothing") == 0) && !ce)
            return ynode_fail(c, n->keys[i], "'%s' applies to the cross-entropy losses, not to "
                                             "loss %s of %s",
                              k, loss_name(s->loss), label);
        if (strcmp(k, "delta") == 0 && s->loss != LOSS_HUBER)
            return ynode_fail(c, n->keys[i], "'delta' applies to loss huber, not to loss %s of %s",
                              loss_name(s->loss), label);
        if (strcmp(k, "from_logits") == 0) {
            if ((st = yget_bool(c, v, "from_logits", &s->from_logits)))
                return st;
        } else if (strcmp(k, "label_smoothing") == 0) {
            /* [0, 1] as Keras and torch: 1 makes every target uniform. */
            if ((st = yget_num(c, v, "label_smoothing", YR_UNIT_ALL, 1, &d)))
                return st;
            s->label_smoothing = (float)d;
        } else if (strcmp(k, "delta") == 0) {
            if ((st = yget_num(c, v, "delta", YR_POSITIVE, 1, &d)))
                return st;
            s->huber_delta = (float)d;
        }
    }
    return COHORT_OK;
}

cohort_status plan_check_metric(const yctx *c, const ynode *n, const char *label)
{
    static const char *const names[] = {
        "accuracy",           "mae",         "rmse",
        "sparse_categorical_accuracy",       "categorical_accuracy",
        "binary_accuracy",    "MAE",         "mean_absolute_error",
        "MeanAbsoluteError",  "RootMeanSquaredError"};
    char got[80];
    if (n->type == YNODE_SCALAR) {
        if (strcasecmp(n->str, "accuracy") == 0 || strcasecmp(n->str, "acc") == 0)
            return COHORT_OK;
        for (size_t i = 0; i < COUNT(names); i++)
            if (strcmp(n->str, names[i]) == 0)
                return COHORT_OK;
    }
    const char *near = n->type == YNODE_SCALAR ? ysuggest(n->str, names, COUNT(names)) : NULL;
    char hint[80] = "";
    if (n->type == YNODE_SCALAR && (strcasecmp(n->str, "mse") == 0 ||
                                    strcmp(n->str, "mean_squared_error") == 0 ||
                                    strcmp(n->str, "MeanSquaredError") == 0))
        snprintf(hint, sizeof hint, " (it reports rmse, mse's square root)");
    else if (near)
        snprintf(hint, sizeof hint, " (did you mean '%s'?)", near);
    return ynode_fail(c, n, "metrics of %s: %s is not a metric cohort reports%s; it reports the "
                            "loss and accuracy for classification, the loss, mae and rmse for "
                            "regression: list accuracy, mae or rmse, or leave metrics out",
                      label, ynode_describe(n, got, sizeof got), hint);
}

cohort_status plan_build_class_weight(const yctx *c, const ynode *n, const char *label,
                                      model_spec *s)
{
    char got[80];
    if (!n || ynode_is_null(n))
        return COHORT_OK;
    if (n->type != YNODE_MAP || n->n == 0)
        return ynode_fail(c, n, "class_weight of %s must be a map of class to weight like "
                                "{0: 1.0, 1: 5.0}, got %s",
                          label, ynode_describe(n, got, sizeof got));
    if (n->n > COHORT_MAX_CLASS_WEIGHTS)
        return ynode_fail(c, n, "class_weight of %s names %zu classes, more than the %d allowed",
                          label, n->n, COHORT_MAX_CLASS_WEIGHTS);
    unsigned char seen[COHORT_MAX_CLASS_WEIGHTS] = {0};
    for (size_t i = 0; i < n->n; i++) {
        long long cls;
        double w;
        cohort_status st = yget_int(c, n->keys[i], "a class of class_weight", 0,
                                    (long long)n->n - 1, &cls);
        if (st)
            return st;
        if (seen[cls])
            return ynode_fail(c, n->keys[i], "class_weight of %s gives class %lld twice", label,
                              cls);
        if ((st = yget_num(c, n->vals[i], "class_weight", YR_NONNEG, 1, &w)))
            return st;
        seen[cls] = 1;
        s->class_weight[cls] = (float)w;
    }
    s->n_class_weight = (int)n->n;
    return COHORT_OK;
}

cohort_status plan_check_output(const yctx *c, const ynode *layer, const char *label,
                                const model_spec *s)
{
    const layer_spec *l = &s->layers[s->n_layers - 1];
    act_kind want = model_loss_act(s);
    if (!is_cross_entropy(s->loss))
        return COHORT_OK;
    act_kind have = l->act;
    if (have == want)
        return COHORT_OK;
    char is[80], fix[120];
    const char *act = act_name(want);
    layer_describe_output(l, want, s->loss == LOSS_BCE, is, sizeof is, fix, sizeof fix);
    if (s->from_logits)
        return ynode_fail(c, layer, "%s: loss %s with from_logits: true takes logits, but the "
                                    "last layer is %s; %s (or drop from_logits)",
                          label, loss_name(s->loss), is, fix);
    /* A sigmoid output is a binary classifier's: its loss is the likelier fix. */
    if (have == ACT_SIGMOID && want == ACT_SOFTMAX)
        return ynode_fail(c, layer, "%s: loss %s needs the model's output to be a softmax, but "
                                    "the last layer is %s; a sigmoid output is binary "
                                    "classification's: for labels 0 and 1 with one unit, use "
                                    "loss: binary_crossentropy; for classes 0..K-1, %s",
                          label, loss_name(s->loss), is, fix);
    return ynode_fail(c, layer, "%s: loss %s needs the model's output to be a %s, but the last "
                                "layer is %s; %s%s",
                      label, loss_name(s->loss), act, is, fix,
                      have == ACT_LINEAR ? " (or give the loss from_logits: true)" : "");
}

cohort_status plan_build_early_stop(const yctx *c, const ynode *n, const char *label,
                                    const data_spec *data, early_stop_spec *es)
{
    char got[80];
    int on = 0;
    const ynode *at = n;
    if (!n || ynode_is_null(n))
        return COHORT_OK;
    if (n->type == YNODE_SCALAR) {
        if (yget_bool(c, n, "early_stopping", &on) != COHORT_OK)
            return ynode_fail(c, n, "early_stopping must be a map like {monitor: val_loss, "
                                    "patience: 3}, or true or false, got %s",
                              ynode_describe(n, got, sizeof got));
        es->enabled = on;
    } else if (n->type == YNODE_MAP) {
        es->enabled = 1;
        cohort_status st;
        const ynode *v;
        long long ll;
        double d;
        if ((v = ymap_get(n, "monitor"))) {
            if ((st = plan_get_monitor(c, v, "early_stopping.monitor", es->monitor,
                                  sizeof es->monitor)))
                return st;
            at = v;
        }
        if ((v = ymap_get(n, "patience"))) {
            if ((st = yget_int(c, v, "early_stopping.patience", 0, 1000000, &ll)))
                return st;
            es->patience = (int)ll;
        }
        if ((v = ymap_get(n, "min_delta"))) {
            if ((st = yget_num(c, v, "early_stopping.min_delta", YR_NONNEG, 0, &d)))
                return st;
            es->min_delta = d;
        }
        if ((v = ymap_get(n, "restore_best_weights")) &&
            (st = yget_bool(c, v, "early_stopping.restore_best_weights", &es->restore_best)))
            return st;
    } else {
        return ynode_fail(c, n, "early_stopping must be a map like {monitor: val_loss, "
                                "patience: 3}, or true or false, got %s",
                          ynode_describe(n, got, sizeof got));
    }
    if (es->enabled && strncmp(es->monitor, "val_", 4) == 0 && !data->validation[0] &&
        data->validation_split <= 0)
        return ynode_fail(c, at, "early_stopping of %s monitors %s, but the plan has no "
                                 "validation data (set data.validation_split or "
                                 "data.validation, or monitor loss)",
                          label, es->monitor);
    return COHORT_OK;
}

cohort_status plan_build_plateau(const yctx *c, const ynode *n, const char *label,
                                 const data_spec *data, const optim_spec *opt,
                                 plateau_spec *p)
{
    char got[80];
    if (!n || ynode_is_null(n))
        return COHORT_OK;
    if (n->type != YNODE_MAP)
        return ynode_fail(c, n, "reduce_lr_on_plateau of %s must be a map like {monitor: "
                                "val_loss, factor: 0.1, patience: 10}, got %s",
                          label, ynode_describe(n, got, sizeof got));
    p->enabled = 1;
    str_copy(p->monitor, sizeof p->monitor, "val_loss");
    p->factor = 0.1;
    p->patience = 10;
    p->min_delta = 1e-4;
    const ynode *v, *at = n;
    cohort_status st;
    long long ll;
    if ((v = ymap_get(n, "monitor"))) {
        if ((st = plan_get_monitor(c, v, "reduce_lr_on_plateau.monitor", p->monitor,
                              sizeof p->monitor)))
            return st;
        at = v;
    }
    if ((v = ymap_get(n, "factor"))) {
        if ((st = yget_num(c, v, "reduce_lr_on_plateau.factor", YR_UNIT, 0, &p->factor)))
            return st;
        if (p->factor == 0.0)
            return ynode_fail(c, v, "reduce_lr_on_plateau.factor must be in (0, 1), got 0");
    }
    if ((v = ymap_get(n, "patience"))) {
        if ((st = yget_int(c, v, "reduce_lr_on_plateau.patience", 0, 1000000, &ll)))
            return st;
        p->patience = (int)ll;
    }
    if ((v = ymap_get(n, "cooldown"))) {
        if ((st = yget_int(c, v, "reduce_lr_on_plateau.cooldown", 0, 1000000, &ll)))
            return st;
        p->cooldown = (int)ll;
    }
    if ((v = ymap_get(n, "min_delta")) &&
        (st = yget_num(c, v, "reduce_lr_on_plateau.min_delta", YR_NONNEG, 0, &p->min_delta)))
        return st;
    if ((v = ymap_get(n, "min_lr")) &&
        (st = yget_num(c, v, "reduce_lr_on_plateau.min_lr", YR_NONNEG, 0, &p->min_lr)))
        return st;
    if (opt->schedule.kind != SCHED_NONE)
        return ynode_fail(c, n, "%s has both optimizer.schedule and reduce_lr_on_plateau; a "
                                "schedule sets the learning rate of every step, so keep one",
                          label);
    if (strncmp(p->monitor, "val_", 4) == 0 && !data->validation[0] &&
        data->validation_split <= 0)
        return ynode_fail(c, at, "reduce_lr_on_plateau of %s monitors %s, but the plan has no "
                                 "validation data (set data.validation_split or "
                                 "data.validation, or monitor loss)",
                          label, p->monitor);
    return COHORT_OK;
}
