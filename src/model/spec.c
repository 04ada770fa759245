/* model/spec: names of the model enums, the default spec and its JSON form (each
 * layer's from its entry of the layer table). */
#include "model/model.h"

#include "layers/layer.h"
#include "optim/optim.h"
#include "util/util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Name of an activation as the plan spells it; "unknown" for a bad value. */
const char *act_name(act_kind a)
{
    switch (a) {
    case ACT_LINEAR: return "linear";
    case ACT_RELU: return "relu";
    case ACT_SIGMOID: return "sigmoid";
    case ACT_TANH: return "tanh";
    case ACT_SOFTMAX: return "softmax";
    case ACT_GELU: return "gelu";
    case ACT_SILU: return "silu";
    }
    return "unknown";
}

/* Name of a loss as the plan spells it; "unknown" for a bad value. */
const char *loss_name(loss_kind l)
{
    switch (l) {
    case LOSS_SCE: return "sparse_categorical_crossentropy";
    case LOSS_MSE: return "mse";
    case LOSS_CCE: return "categorical_crossentropy";
    case LOSS_BCE: return "binary_crossentropy";
    case LOSS_MAE: return "mae";
    case LOSS_HUBER: return "huber";
    case LOSS_KIND_COUNT: break;
    }
    return "unknown";
}

/* Reset spec to what a plan starts from: Keras's defaults (Adam, lr 0.001,
 * batch 32, one epoch, shuffled, seed 1, no early stopping). */
void model_spec_defaults(model_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    spec->epochs = 1;
    spec->batch_size = 32;
    spec->shuffle = 1;
    spec->seed = 1;
    optim_defaults(&spec->opt, OPT_DEFAULT);
    spec->loss = LOSS_SCE;
    spec->huber_delta = 1.0f;
    str_copy(spec->early_stop.monitor, sizeof spec->early_stop.monitor, "val_loss");
}

/* Floats are written by sb_json_float: 7 significant digits (0.001f prints
 * as 0.001), or up to 9 where 7 would not read back as the same float, since
 * the plan parser reads this JSON back (eval, predict, --resume). */

static void sb_key(strbuf *b, const char *key)
{
    sb_putn(b, ",", 1);
    sb_json_str(b, key);
    sb_putn(b, ":", 1);
}

static void sb_str_or_null(strbuf *b, const char *s)
{
    if (s[0])
        sb_json_str(b, s);
    else
        sb_puts(b, "null");
}

/* The seed of the shuffle orders: one common seed under shared_order. */
uint64_t model_order_seed(const model_spec *spec)
{
    return spec->shared_order ? 0x5ea7ed0dULL : spec->seed;
}

int model_same_order(const model_spec *a, const model_spec *b)
{
    return a->shuffle == b->shuffle && model_order_seed(a) == model_order_seed(b);
}

/* A double as the shortest %g that reads back as the same double. */
static void sb_double(strbuf *b, double v)
{
    char buf[40];
    for (int digits = 7; digits <= 17; digits++) {
        str_format(buf, sizeof buf, "%.*g", digits, v);
        if (str_to_double(buf, NULL) == v)
            break;
    }
    sb_puts(b, buf);
}

/* The clip that is set, if any. */
static void sb_clips(strbuf *b, const optim_spec *o)
{
    const char *names[3] = {"clipnorm", "global_clipnorm", "clipvalue"};
    float v[3] = {o->clipnorm, o->global_clipnorm, o->clipvalue};
    for (int i = 0; i < 3; i++)
        if (v[i] > 0.0f) {
            sb_key(b, names[i]);
            sb_json_float(b, v[i]);
        }
}

static void sb_lr_schedule(strbuf *b, const lr_schedule *s)
{
    switch (s->kind) {
    case SCHED_NONE: return;
    case SCHED_COSINE:
        sb_printf(b, ",\"schedule\":{\"cosine_decay\":{\"decay_steps\":%lld,\"alpha\":",
                  (long long)s->decay_steps);
        sb_double(b, s->alpha);
        sb_printf(b, ",\"warmup_steps\":%lld,\"warmup_target\":", (long long)s->warmup_steps);
        if (isnan(s->warmup_target))
            sb_puts(b, "null");
        else
            sb_double(b, s->warmup_target);
        break;
    case SCHED_EXPONENTIAL:
        sb_printf(b, ",\"schedule\":{\"exponential_decay\":{\"decay_steps\":%lld,"
                     "\"decay_rate\":",
                  (long long)s->decay_steps);
        sb_double(b, s->decay_rate);
        sb_puts(b, s->staircase ? ",\"staircase\":true" : ",\"staircase\":false");
        break;
    case SCHED_PIECEWISE:
        sb_puts(b, ",\"schedule\":{\"piecewise_constant\":{\"boundaries\":[");
        for (int i = 0; i < s->n_bounds; i++)
            sb_printf(b, "%s%lld", i ? "," : "", (long long)s->bounds[i]);
        sb_puts(b, "],\"values\":[");
        for (int i = 0; i <= s->n_bounds; i++) {
            if (i)
                sb_putn(b, ",", 1);
            sb_double(b, s->values[i]);
        }
        sb_putn(b, "]", 1);
        break;
    }
    sb_puts(b, "}}");
}

/* The optimizer's map: its name, lr, its entry's keys in their order, the
 * clip and the schedule. */
static void sb_optimizer(strbuf *b, const optim_spec *o)
{
    const optim_entry *e = optim_entry_of(o->kind);
    sb_puts(b, "{\"name\":");
    sb_json_str(b, e->name);
    sb_puts(b, ",\"lr\":");
    sb_json_float(b, o->lr);
    for (int i = 0; i < e->n_keys; i++) {
        const optim_key *k = &e->keys[i];
        sb_key(b, k->name);
        if (k->range == OPTIM_BOOL)
            sb_puts(b, *(const int *)optim_field_c(o, k) ? "true" : "false");
        else
            sb_json_float(b, *(const float *)optim_field_c(o, k));
    }
    sb_clips(b, o);
    sb_lr_schedule(b, &o->schedule);
    sb_putn(b, "}", 1);
}

static void sb_plateau(strbuf *b, const plateau_spec *p)
{
    if (!p->enabled)
        return;
    sb_key(b, "reduce_lr_on_plateau");
    sb_puts(b, "{\"monitor\":");
    sb_json_str(b, p->monitor);
    sb_puts(b, ",\"factor\":");
    sb_double(b, p->factor);
    sb_printf(b, ",\"patience\":%d,\"min_delta\":", p->patience);
    sb_double(b, p->min_delta);
    sb_printf(b, ",\"cooldown\":%d,\"min_lr\":", p->cooldown);
    sb_double(b, p->min_lr);
    sb_putn(b, "}", 1);
}

double model_lr_at(const optim_spec *o, double lr, int64_t step)
{
    const lr_schedule *s = &o->schedule;
    double x = (double)step;
    switch (s->kind) {
    case SCHED_NONE: return lr;
    case SCHED_COSINE: {
        double d = (double)s->decay_steps, from = lr;
        if (!isnan(s->warmup_target)) {
            double w = (double)s->warmup_steps;
            if (x > d + w)
                x = d + w;
            if (x < w) /* linear from lr to the target */
                return (s->warmup_target - lr) * (x / w) + lr;
            x -= w;
            from = s->warmup_target;
        } else if (x > d) {
            x = d;
        }
        double cosine = 0.5 * (1.0 + cos(M_PI * (x / d)));
        return from * ((1.0 - s->alpha) * cosine + s->alpha);
    }
    case SCHED_EXPONENTIAL: {
        double p = x / (double)s->decay_steps;
        return lr * pow(s->decay_rate, s->staircase ? floor(p) : p);
    }
    case SCHED_PIECEWISE: {
        /* values[i] while step <= bounds[i]; the last value past them all */
        int i = 0;
        while (i < s->n_bounds && step > s->bounds[i])
            i++;
        return s->values[i];
    }
    }
    return lr;
}

int model_needs_full_grads(const model_spec *spec)
{
    const optim_spec *o = &spec->opt;
    if (o->clipnorm > 0.0f || o->global_clipnorm > 0.0f || o->clipvalue > 0.0f)
        return 1;
    for (int i = 0; i < spec->n_layers; i++)
        if (spec->layers[i].l1 != 0.0f || spec->layers[i].l2 != 0.0f)
            return 1;
    return 0;
}

/* The spec as one JSON object, malloc'd (the caller frees it); NULL on out
 * of memory. Only the optimizer fields that apply to its kind are written. */
char *model_spec_to_json(const model_spec *spec)
{
    strbuf b;
    sb_init(&b);
    sb_puts(&b, "{\"name\":");
    sb_json_str(&b, spec->name);
    sb_key(&b, "layers");
    layer_list_to_json(spec->layers, spec->n_layers < COHORT_MAX_LAYERS ? spec->n_layers
                                                                        : COHORT_MAX_LAYERS, &b);

    sb_key(&b, "optimizer");
    sb_optimizer(&b, &spec->opt);

    sb_key(&b, "loss");
    if (!spec->from_logits && spec->label_smoothing == 0.0f &&
        (spec->loss != LOSS_HUBER || spec->huber_delta == 1.0f)) {
        sb_json_str(&b, loss_name(spec->loss));
    } else {
        sb_puts(&b, "{\"name\":");
        sb_json_str(&b, loss_name(spec->loss));
        if (spec->from_logits)
            sb_puts(&b, ",\"from_logits\":true");
        if (spec->label_smoothing != 0.0f) {
            sb_puts(&b, ",\"label_smoothing\":");
            sb_json_float(&b, spec->label_smoothing);
        }
        if (spec->loss == LOSS_HUBER) {
            sb_puts(&b, ",\"delta\":");
            sb_json_float(&b, spec->huber_delta);
        }
        sb_putn(&b, "}", 1);
    }
    if (spec->n_class_weight) {
        sb_key(&b, "class_weight");
        for (int i = 0; i < spec->n_class_weight; i++) {
            sb_printf(&b, "%s\"%d\":", i ? "," : "{", i);
            sb_json_float(&b, spec->class_weight[i]);
        }
        sb_putn(&b, "}", 1);
    }
    sb_printf(&b, ",\"epochs\":%d,\"batch_size\":%d,\"shuffle\":%s,\"seed\":%llu", spec->epochs,
              spec->batch_size, spec->shuffle ? "true" : "false",
              (unsigned long long)spec->seed);
    if (spec->shared_order)
        sb_puts(&b, ",\"shared_order\":true");

    sb_key(&b, "early_stopping");
    const early_stop_spec *es = &spec->early_stop;
    if (es->enabled) {
        sb_puts(&b, "{\"monitor\":");
        sb_json_str(&b, es->monitor);
        sb_printf(&b, ",\"patience\":%d,\"min_delta\":", es->patience);
        sb_double(&b, es->min_delta);
        sb_puts(&b, es->restore_best ? ",\"restore_best_weights\":true}"
                                     : ",\"restore_best_weights\":false}");
    } else {
        sb_puts(&b, "null");
    }
    sb_plateau(&b, &spec->plateau);
    sb_key(&b, "device");
    sb_str_or_null(&b, spec->device);
    sb_key(&b, "init_from");
    sb_str_or_null(&b, spec->init_from);
    sb_putn(&b, "}", 1);
    if (b.failed) {
        sb_free(&b);
        return NULL;
    }
    return b.data;
}

void shape_format(sample_shape s, char *buf, size_t len)
{
    if (s.rank == 3)
        snprintf(buf, len, "(%d, %d, %d)", s.h, s.w, s.c);
    else if (s.rank == 2)
        snprintf(buf, len, "(%d, %d)", s.h, s.c);
    else
        snprintf(buf, len, "(%d)", s.c);
}
