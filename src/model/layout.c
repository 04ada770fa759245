#include "model/model.h"
#include "util/util.h"

#include <string.h>

static size_t align_up(size_t n) { return (n + COHORT_ALIGN - 1) / COHORT_ALIGN * COHORT_ALIGN; }

static int opt_slots(const optim_spec *o)
{
    switch (o->kind) {
    case OPT_SGD: return o->momentum > 0.0f ? 1 : 0;
    case OPT_ADAM:
    case OPT_ADAMW: return 2;
    }
    return 0;
}

cohort_status model_layout_make(const model_spec *spec, int n_in, int n_classes, int K,
                                model_layout *L, cohort_error *err)
{
    memset(L, 0, sizeof *L);
    if (n_in <= 0 || K <= 0 || spec->batch_size <= 0 || spec->n_layers <= 0)
        return cohort_fail(err, COHORT_ERR_INPUT, "model '%s': empty model or data", spec->name);
    L->n_in = n_in;
    L->K = K;
    L->B = spec->batch_size;

    size_t width = (size_t)n_in, P = 0, act = (size_t)n_in, mask = 0;
    int max_width = 0;
    L->act_off[0] = 0;
    for (int i = 0; i < spec->n_layers; i++) {
        const layer_spec *ls = &spec->layers[i];
        if (ls->kind == LAYER_DENSE) {
            dense_layout *d = &L->dense[L->n_dense++];
            d->spec_index = i;
            d->in = (int)width;
            d->out = ls->units;
            d->act = ls->act;
            d->w_off = P;
            P += (size_t)d->in * (size_t)d->out;
            d->b_off = P;
            P += (size_t)d->out;
            width = (size_t)ls->units;
        } else {
            L->mask_off[i] = mask;
            mask += width;
        }
        L->act_off[i + 1] = act;
        act += width;
        if ((int)width > max_width)
            max_width = (int)width;
    }
    if (L->n_dense == 0)
        return cohort_fail(err, COHORT_ERR_INPUT, "model '%s': needs at least one dense layer",
                           spec->name);
    L->n_out = (int)width;
    if (spec->loss == LOSS_SCE && L->n_out != n_classes)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "model '%s': the last layer has %d units but the data has %d classes;"
                           " make it {dense: %d, activation: softmax}",
                           spec->name, L->n_out, n_classes, n_classes);
    if (spec->loss == LOSS_MSE && L->n_out != 1 && L->n_out != n_classes)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "model '%s': with mse the last layer needs 1 unit (the label as a"
                           " number) or %d (one per class), not %d",
                           spec->name, n_classes, L->n_out);
    L->act_width = act;
    L->mask_width = mask;
    L->max_width = max_width;
    L->n_params = P;
    L->opt_slots = opt_slots(&spec->opt);
    L->keep_best = spec->early_stop.enabled && spec->early_stop.restore_best;

    /* Element counts can overflow only for absurd models; check in doubles. */
    double rows = (double)K * (double)L->B;
    double need = (double)K * (double)P * (3.0 + L->opt_slots) * 4.0 +
                  rows * ((double)act + 2.0 * max_width + (double)mask + 1.0) * 4.0;
    if (need > 1e15)
        return cohort_fail(err, COHORT_ERR_INPUT, "model '%s': needs %.3g bytes; too large",
                           spec->name, need);

    size_t k = (size_t)K, b = (size_t)L->B;
    L->buf_bytes[BUF_PARAMS] = k * P * sizeof(float);
    L->buf_bytes[BUF_GRADS] = k * P * sizeof(float);
    L->buf_bytes[BUF_OPT] = k * P * (size_t)L->opt_slots * sizeof(float);
    L->buf_bytes[BUF_ACT] = k * b * act * sizeof(float);
    L->buf_bytes[BUF_DELTA] = 2 * k * b * (size_t)max_width * sizeof(float);
    L->buf_bytes[BUF_MASK] = k * b * mask * sizeof(float);
    L->buf_bytes[BUF_LABELS] = k * b * sizeof(int32_t);
    L->buf_bytes[BUF_STATS] = k * 4 * sizeof(double);
    L->buf_bytes[BUF_BEST] = L->keep_best ? k * P * sizeof(float) : 0;
    size_t off = 0;
    for (int i = 0; i < BUF_COUNT; i++) {
        L->buf_off[i] = off;
        off += align_up(L->buf_bytes[i]);
    }
    L->total_bytes = off;
    return COHORT_OK;
}

int model_can_fuse(const model_spec *a, const model_spec *b)
{
    if (a->n_layers != b->n_layers || a->loss != b->loss || a->batch_size != b->batch_size ||
        a->opt.kind != b->opt.kind)
        return 0;
    for (int i = 0; i < a->n_layers; i++) {
        const layer_spec *x = &a->layers[i], *y = &b->layers[i];
        if (x->kind != y->kind)
            return 0;
        if (x->kind == LAYER_DENSE && (x->units != y->units || x->act != y->act))
            return 0;
    }
    return 1;
}

double model_train_flops(const model_layout *L, int64_t n)
{
    /* Forward 2*in*out per sample; backward 2*in*out for the weight gradient
     * and another 2*in*out for the input gradient, except in the first layer. */
    double f = 0;
    for (int i = 0; i < L->n_dense; i++) {
        double mac = (double)L->dense[i].in * (double)L->dense[i].out;
        f += (i == 0 ? 4.0 : 6.0) * mac;
    }
    return f * (double)n;
}
