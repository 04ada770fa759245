/*
 * layers/dropout: the Dropout layer, its syntax, spec and compute. Inverted
 * dropout, as Keras's: training keeps each value with probability 1 - rate
 * and scales it by 1 / (1 - rate); inference passes the input on. Its rate
 * may differ between the models of a group, and PBT may change it.
 */
#include "io/onnx.h"
#include "layers/pass.h"

#include <stdio.h>

/* ---- syntax and spec: {dropout: RATE} ---- */

typedef struct dropout_settings {
    float rate; /* fraction dropped, in [0, 1) */
} dropout_settings;
LAYER_SETTINGS_OF(dropout_settings);

static const layer_keras_arg dropout_keras[] = {
    {"rate", "the rate is the dropout layer's value: {dropout: 0.5} (Keras's Dropout(rate=0.5))"},
    {NULL, NULL}};

static cohort_status dropout_parse(const layer_syntax *s, layer_spec *ls)
{
    char what[200];
    double d;
    snprintf(what, sizeof what, "dropout rate of %s", s->where);
    cohort_status st = yget_num(s->c, s->value, what, YR_UNIT, 1, &d);
    if (st)
        return st;
    dropout_settings_put(ls, &(dropout_settings){(float)d});
    return COHORT_OK;
}

static void dropout_json(const layer_spec *ls, strbuf *b)
{
    sb_puts(b, "\"dropout\":");
    sb_json_float(b, dropout_settings_of(ls).rate);
}

static int dropout_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    return snprintf(buf, n, "drop%g", (double)dropout_settings_of(ls).rate);
}

static float *rate_field(layer_spec *ls)
{
    return LAYER_SETTINGS_FLOAT(dropout_settings, rate, ls);
}

static const layer_hyper dropout_hyper[] = {{"dropout", 0, 1, 0, 1, rate_field},
                                            {NULL, 0, 0, 0, 0, NULL}};

/* ---- shapes and compute ---- */

static int dropout_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    (void)ls;
    (void)msg;
    (void)len;
    lp->out = lp->in;
    lp->n_saved = shape_size(lp->in); /* the mask */
    return 0;
}

/* The mask of model k draws from (seed, layer) at counter (step * B * width
 * + element): unique per step, the same whatever else the group holds. */
static void dropout_forward(const layer_pass *p)
{
    size_t w = shape_size(p->lp->in), s = (size_t)p->batch * w;
    if (!p->training) {
        p->be->copy(p->ctx, p->Y, p->X, s, (size_t)p->rows * w, p->count);
        return;
    }
    uint64_t key[COHORT_MAX_GROUP];
    for (int k = 0; k < p->count; k++) {
        p->host[k] = dropout_settings_of(p->ls[k]).rate;
        key[k] = p->seed[k] * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(p->lp->index + 1);
    }
    p->be->dropout_fwd(p->ctx, p->Y, p->X, p->saved, s, (size_t)p->rows * w, p->host, key,
                       p->counter * s, p->count);
}

static int dropout_backward(const layer_pass *p)
{
    size_t w = shape_size(p->lp->in);
    p->be->mul(p->ctx, p->dY, p->sd, p->saved, p->s_saved, (size_t)p->rows * w, p->count);
    return 0;
}

/* ---- export: nothing at inference ---- */

static int dropout_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp,
                        const char *x, char *y, char *msg, size_t len)
{
    (void)g;
    (void)ls;
    (void)lp;
    (void)msg;
    (void)len;
    str_copy(y, ONNX_NAME_MAX, x);
    return 0;
}

const layer_ops layer_dropout_ops = {
    .name = "dropout",
    .takes_mask = 1,
    .example = "{dropout: RATE}",
    .keras_args = dropout_keras,
    .parse = dropout_parse,
    .to_json = dropout_json,
    .abbrev = dropout_abbrev,
    .hyper = dropout_hyper,
    .fuse_key = layer_fuse_any,
    .plan = dropout_plan,
    .forward = dropout_forward,
    .backward = dropout_backward,
    .grad_in_place = 1,
    .keeps_order = 1,
    .onnx = dropout_onnx,
};
