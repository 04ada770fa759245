/*
 * model/layout: a group's shapes, parameter offsets and exact memory plan,
 * from each layer's entry of the layer table (its plan op); when two specs
 * may share a group (their layers' fusion keys); a model's FLOPs.
 */
#include "model/model.h"
#include "layers/layer.h"
#include "optim/optim.h"
#include "util/util.h"

#include <stdio.h>
#include <string.h>

static int same_shape(sample_shape a, sample_shape b)
{
    return a.rank == b.rank && a.h == b.h && a.w == b.w && a.c == b.c;
}

static size_t align_up(size_t n) { return (n + COHORT_ALIGN - 1) / COHORT_ALIGN * COHORT_ALIGN; }

/* Fail for layer i of spec, the shape it sees and why; L->error_line is
 * the layer's line in the plan, for the caller's file:line. */
static cohort_status layer_fail(cohort_error *err, model_layout *L, const model_spec *spec, int i,
                                const char *why)
{
    const layer_spec *ls = &spec->layers[i];
    char where[32];
    layer_plan_name(&L->layers[i], where, sizeof where);
    L->error_line = ls->line;
    return cohort_fail(err, COHORT_ERR_INPUT, "model '%s', %s (%s): %s", spec->name, where,
                       ls->kind ? ls->kind->name : "unknown", why);
}

act_kind model_loss_act(const model_spec *spec)
{
    if (spec->from_logits)
        return ACT_LINEAR;
    switch (spec->loss) {
    case LOSS_SCE:
    case LOSS_CCE: return ACT_SOFTMAX;
    case LOSS_BCE: return ACT_SIGMOID;
    default: return ACT_LINEAR;
    }
}

metric_kind model_metric(const model_spec *spec, int n_out, int n_classes)
{
    switch (spec->loss) {
    case LOSS_SCE:
    case LOSS_CCE: return METRIC_ARGMAX;
    case LOSS_BCE: return METRIC_BINARY;
    default: return n_classes > 0 && n_out > 1 ? METRIC_ARGMAX : METRIC_ERRORS;
    }
}

/* Whether a model with n_out outputs and spec's loss can train on data with
 * n_classes class labels (0: target rows, checked against the data by the
 * caller); if not, why says what would fit. */
static int loss_fits(const model_spec *spec, int n_out, int n_classes, char *why, size_t len)
{
    const char *loss = loss_name(spec->loss);
    if (n_classes > 0) {
        switch (spec->loss) {
        case LOSS_SCE:
            if (n_out == n_classes)
                break;
            /* Labels far apart (2147483646): a layer that wide is refused anyway. */
            if (n_classes > LAYER_UNITS_MAX) {
                snprintf(why, len, "the data's largest label is %d, so it has %d classes, more "
                                   "than the %d units a layer may have; number the classes from "
                                   "0 (labels 0..K-1 for K classes), or for real-valued targets "
                                   "use loss mse",
                         n_classes - 1, n_classes, LAYER_UNITS_MAX);
                return 0;
            }
            snprintf(why, len, "the last layer has %d units but the data has %d classes; make "
                               "it {dense: %d, activation: softmax}",
                     n_out, n_classes, n_classes);
            return 0;
        case LOSS_CCE:
            snprintf(why, len, "categorical_crossentropy takes one-hot (or probability) rows "
                               "as targets, but the data has class labels; use loss: "
                               "sparse_categorical_crossentropy");
            return 0;
        case LOSS_BCE:
            if (n_out == 1 && n_classes <= 2)
                break;
            snprintf(why, len, "binary_crossentropy takes labels 0 and 1 with one output "
                               "unit ({dense: 1, activation: sigmoid}); the data has %d classes "
                               "and the last layer %d units%s",
                     n_classes, n_out,
                     n_classes > 2 ? "; for more classes use sparse_categorical_crossentropy" : "");
            return 0;
        default:
            if (n_out == 1 || n_out == n_classes)
                break;
            snprintf(why, len, "with %s the last layer needs 1 unit (the label as a number) or "
                               "%d (one per class, the label one-hot), not %d",
                     loss, n_classes, n_out);
            return 0;
        }
    }
    int classes = model_metric(spec, n_out, n_classes) == METRIC_ERRORS ? 0
                  : n_out == 1                                       ? 2
                                                                     : n_out;
    if (spec->n_class_weight && !classes) {
        snprintf(why, len, "class_weight needs classes, but %s on real-valued targets is a "
                           "regression",
                 loss);
        return 0;
    }
    if (spec->n_class_weight && spec->n_class_weight != classes) {
        snprintf(why, len, "class_weight names classes 0..%d, but the model has %d classes; give "
                           "a weight to each of 0..%d",
                 spec->n_class_weight - 1, classes, classes - 1);
        return 0;
    }
    return 1;
}

cohort_status model_layout_make(const model_spec *spec, sample_shape in, int n_classes, int K,
                                model_layout *L, cohort_error *err)
{
    memset(L, 0, sizeof *L);
    int n_in = (int)shape_size(in);
    if (n_in <= 0 || K <= 0 || spec->batch_size <= 0 || spec->n_layers <= 0)
        return cohort_fail(err, COHORT_ERR_INPUT, "model '%s': empty model or data", spec->name);
    /* A sample of two axes reads as an image of one channel (MNIST's NPY
     * [n, 28, 28]); a first layer that takes sequences reads it as T steps. */
    int f = 0; /* the first layer that reads the input: inside a block that opens the model */
    while (f + 1 < spec->n_layers && spec->layers[f].kind && spec->layers[f].kind->block_end)
        f++;
    const struct layer_ops *first = spec->layers[f].kind;
    if (in.rank == 3 && in.c == 1 && first && first->takes_sequence)
        in = shape_seq(in.h, in.w);
    L->in_shape = in;
    L->n_in = n_in;
    L->K = K;
    L->B = spec->batch_size;
    L->n_layers = spec->n_layers;

    /* Each layer's weight names and its block's other end (layers/block.c). */
    int path[COHORT_MAX_LAYERS][2], open = -1;
    if (spec->n_layers > COHORT_MAX_LAYERS || layer_paths(spec->layers, spec->n_layers, path))
        return cohort_fail(err, COHORT_ERR_INPUT, "model '%s': its blocks of layers do not open "
                                                  "and close in order", spec->name);
    for (int i = 0; i < spec->n_layers; i++) {
        layer_plan *lp = &L->layers[i];
        const layer_ops *ops = spec->layers[i].kind;
        lp->path[0] = path[i][0];
        lp->path[1] = path[i][1];
        lp->inner = path[i][1] >= 0;
        lp->pair = -1;
        if (open >= 0 && ops == spec->layers[open].kind->block_end) {
            lp->pair = open;
            L->layers[open].pair = i;
            open = -1;
        } else if (ops && ops->block_end) {
            open = i;
        }
    }

    /* Shapes and per-layer sizes from the table; then the offsets. */
    sample_shape cur = in, flat_from = in;
    size_t max_width = (size_t)n_in;
    for (int i = 0; i < spec->n_layers; i++) {
        const layer_spec *ls = &spec->layers[i];
        layer_plan *lp = &L->layers[i];
        const layer_ops *ops = ls->kind;
        lp->kind = ls->kind;
        lp->act = ls->act;
        lp->index = i;
        /* A block's end takes back the shape its block took: x + f(x). */
        if (lp->pair >= 0 && lp->pair < i && !same_shape(cur, L->layers[lp->pair].in)) {
            char a[48], b[48], why[320], where[32];
            shape_format(cur, a, sizeof a);
            shape_format(L->layers[lp->pair].in, b, sizeof b);
            layer_plan_name(&L->layers[lp->pair], where, sizeof where);
            snprintf(why, sizeof why, "it gives %s, but the %s at %s takes %s: x + f(x) needs f "
                                      "to end at its input's shape",
                     a, spec->layers[lp->pair].kind->name, where, b);
            return layer_fail(err, L, spec, i - 1, why);
        }
        lp->batch = spec->batch_size;
        lp->in = cur;
        if (cur.rank == 1 && flat_from.rank == 3 && shape_size(flat_from) == shape_size(cur))
            lp->flat_from = flat_from;
        else if (cur.rank == 3)
            lp->flat_from = cur; /* a first dense layer flattens its image */
        char why[256];
        if (!ops)
            return layer_fail(err, L, spec, i, "unknown layer kind");
        lp->mask_in = i > 0 && L->layers[i - 1].mask_out;
        if (lp->mask_in && !ops->takes_mask) {
            int from = i - 1;
            while (from > 0 && L->layers[from - 1].mask_out)
                from--;
            char at[32];
            layer_plan_name(&L->layers[from], at, sizeof at);
            snprintf(why, sizeof why, "%s cannot take the mask of the embedding at %s "
                                      "(mask_zero: true), as in Keras; pool the sequence first "
                                      "(global_average_pooling1d, or an lstm without "
                                      "return_sequences), or set mask_zero: false",
                     ops->name, at);
            return layer_fail(err, L, spec, i, why);
        }
        if (ops->plan(ls, lp, why, sizeof why))
            return layer_fail(err, L, spec, i, why);
        if (lp->mask_in && lp->out.rank == 2 && lp->out.h == lp->in.h)
            lp->mask_out = 1;
        if (ops->may_overwrite_input && i > 0 && !L->layers[i - 1].alias &&
            !L->layers[i - 1].kind->reads_output)
            lp->alias = 1;
        /* A layer that moves values (a dense of as many units as inputs
         * included) starts a new order. */
        if (lp->out.rank == 3 || !ops->keeps_order)
            flat_from = lp->out;
        cur = lp->out;
        if (shape_size(cur) > max_width)
            max_width = shape_size(cur);
    }
    size_t P = 0, state = 0, act = (size_t)n_in, saved = 0, stat = 0, work = 0;
    for (int i = 0; i < spec->n_layers; i++) {
        layer_plan *lp = &L->layers[i];
        lp->p_off = P;
        P += lp->n_params;
        lp->act_off = lp->alias ? (i ? L->layers[i - 1].act_off : 0) : act;
        if (!lp->alias)
            act += shape_size(lp->out);
        lp->saved_off = saved;
        saved += lp->n_saved;
        lp->stat_off = stat;
        stat += lp->n_stat;
        if (lp->n_work > work)
            work = lp->n_work;
    }
    L->n_trained = P;
    for (int i = 0; i < spec->n_layers; i++) {
        L->layers[i].s_off = P + state;
        state += L->layers[i].n_state;
    }
    P += state;
    L->n_out = (int)shape_size(cur);
    if (cur.rank != 1) {
        char s[48], why[320];
        shape_format(cur, s, sizeof s);
        if (cur.rank == 2)
            snprintf(why, sizeof why, "the model's output is a sequence %s; end it with a layer "
                                      "that makes one vector of a sequence (flatten, a global "
                                      "pooling, an lstm without return_sequences) and a dense "
                                      "layer", s);
        else
            snprintf(why, sizeof why, "the model's output is an image %s; end it with flatten "
                                      "(or global_average_pooling2d) and a dense layer", s);
        return layer_fail(err, L, spec, spec->n_layers - 1, why);
    }
    /* Softmax exists only fused into a cross-entropy loss: no kernel applies
     * it anywhere else, so it is refused there rather than trained without it. */
    act_kind out_act = model_loss_act(spec);
    for (int i = 0; i < spec->n_layers; i++)
        if (spec->layers[i].act == ACT_SOFTMAX && !(i == spec->n_layers - 1 && out_act == ACT_SOFTMAX))
            return layer_fail(err, L, spec, i,
                              i == spec->n_layers - 1
                                  ? "softmax is applied only with loss "
                                    "sparse_categorical_crossentropy or categorical_crossentropy "
                                    "(without from_logits); use one of those, or give the last "
                                    "layer activation: linear (or sigmoid)"
                                  : "softmax is applied only as the last layer's activation, with a "
                                    "cross-entropy loss");
    char why[320];
    if (!loss_fits(spec, L->n_out, n_classes, why, sizeof why))
        return cohort_fail(err, COHORT_ERR_INPUT, "model '%s': %s", spec->name, why);
    L->act_width = act;
    L->saved_width = saved;
    L->stat_width = stat;
    L->work_width = work;
    L->max_width = (int)max_width;
    L->n_params = P;
    /* A fused group's model k at an odd float offset made every vector load
     * of its weights, slots and transposed input straddle two cache lines
     * (16 models fused, Adam: 5% of the run). */
    L->p_stride = align_up(P * sizeof(float)) / sizeof(float);
    size_t S = L->p_stride;
    L->opt_slots = optim_slots(&spec->opt);
    L->out_act = out_act;
    L->layers[spec->n_layers - 1].act =
        L->out_act != ACT_LINEAR ? ACT_LINEAR : L->layers[spec->n_layers - 1].act;
    L->metric = model_metric(spec, L->n_out, n_classes);
    L->keep_best = spec->early_stop.enabled && spec->early_stop.restore_best;

    /* Element counts can overflow only for absurd models; check in doubles. */
    double rows = (double)K * (double)L->B;
    double need = (double)K * (double)S * (3.0 + L->opt_slots) * 4.0 + (double)K * (double)stat * 4.0 +
                  rows * ((double)act + 2.0 * (double)max_width + (double)saved + (double)work +
                          2.0 + (double)L->n_out) * 4.0;
    if (need > 1e15 || max_width > (size_t)1 << 30)
        return cohort_fail(err, COHORT_ERR_INPUT, "model '%s': needs %.3g bytes; too large",
                           spec->name, need);

    size_t k = (size_t)K, b = (size_t)L->B;
    L->buf_bytes[BUF_PARAMS] = k * S * sizeof(float);
    L->buf_bytes[BUF_GRADS] = k * S * sizeof(float);
    L->buf_bytes[BUF_OPT] = k * S * (size_t)L->opt_slots * sizeof(float);
    L->buf_bytes[BUF_ACT] = k * b * act * sizeof(float);
    L->buf_bytes[BUF_DELTA] = 2 * k * b * max_width * sizeof(float);
    L->buf_bytes[BUF_SAVED] = k * b * saved * sizeof(float);
    L->buf_bytes[BUF_STAT] = k * stat * sizeof(float);
    L->buf_bytes[BUF_WORK] = k * b * work * sizeof(float);
    L->buf_bytes[BUF_LABELS] = k * b * sizeof(int32_t);
    L->buf_bytes[BUF_TARGETS] = spec->loss != LOSS_SCE ? k * b * (size_t)L->n_out * sizeof(float) : 0;
    L->n_cw = spec->n_class_weight;
    L->buf_bytes[BUF_CLASSW] = k * (size_t)L->n_cw * sizeof(float);
    L->buf_bytes[BUF_STATS] = k * STATS_PER_MODEL * sizeof(double);
    L->buf_bytes[BUF_BEST] = L->keep_best ? k * S * sizeof(float) : 0;
    L->buf_bytes[BUF_NORMS] = k * sizeof(double);
    size_t off = 0;
    for (int i = 0; i < BUF_COUNT; i++) {
        L->buf_off[i] = off;
        off += align_up(L->buf_bytes[i]);
    }
    L->total_bytes = off;
    return COHORT_OK;
}

void model_group_spec(const model_spec *const *specs, int n, model_spec *out)
{
    *out = *specs[0];
    for (int k = 1; k < n; k++) {
        const model_spec *s = specs[k];
        /* The layout reads only the optimizer's slots: the member's with
         * the most. */
        if (optim_slots(&s->opt) > optim_slots(&out->opt))
            out->opt = s->opt;
        if (s->early_stop.enabled && s->early_stop.restore_best)
            out->early_stop = s->early_stop;
        if (s->n_class_weight > out->n_class_weight)
            out->n_class_weight = s->n_class_weight;
    }
}

int model_can_fuse(const model_spec *a, const model_spec *b)
{
    if (a->n_layers != b->n_layers || a->loss != b->loss || a->from_logits != b->from_logits ||
        a->batch_size != b->batch_size || a->opt.kind != b->opt.kind)
        return 0;
    for (int i = 0; i < a->n_layers; i++)
        if (!layer_can_fuse(&a->layers[i], &b->layers[i]))
            return 0;
    return 1;
}

double model_train_flops(const model_layout *L, int64_t n)
{
    /* Forward 2 flops a multiply-add per sample; backward 2 for the weight
     * gradient and 2 for the input gradient, except in the first layer with
     * weights, whose input gradient is never taken. */
    double f = 0;
    int first = 1;
    for (int i = 0; i < L->n_layers; i++) {
        const layer_ops *ops = L->layers[i].kind;
        double mac = ops->macs ? ops->macs(&L->layers[i]) : 0.0;
        if (mac > 0) {
            f += (first ? 4.0 : 6.0) * mac;
            first = 0;
        }
    }
    return f * (double)n;
}

const char *model_buf_name(int i)
{
    static const char *const names[BUF_COUNT] = {
        "parameters",  "gradients", "optimizer", "activations", "deltas",        "saved",
        "layer_stats", "workspace", "labels",    "targets",     "class_weights", "metrics",
        "best_weights", "norms"};
    return i >= 0 && i < BUF_COUNT ? names[i] : "unknown";
}
