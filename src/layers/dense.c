/*
 * layers/dense: the Dense layer, its syntax, spec and compute.
 * Y = act(X·Wᵀ + b), W [out, in] as torch.nn.Linear. Its
 * weight gradient may take the optimizer step at once (the backend's
 * dense_step), and as a first layer its forward may run from the input
 * transposed (dense_forward). On an image as the first layer it flattens it,
 * as cohort always has; elsewhere an image needs a Flatten first. On a
 * sequence [T, F] it acts on the last axis, as Keras's: the T steps of each
 * sample are rows of one product, and the output is [T, UNITS].
 */
#include "io/onnx.h"
#include "layers/pass.h"
#include "util/util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- syntax and spec: {dense: UNITS, activation, use_bias, kernel_regularizer} ---- */

typedef struct dense_settings {
    int units;    /* output width */
    int use_bias; /* Keras's use_bias (true) */
} dense_settings;
LAYER_SETTINGS_OF(dense_settings);

static dense_settings settings(const layer_spec *ls) { return dense_settings_of(ls); }

static const char *const dense_keys[] = {"activation", "use_bias", "kernel_regularizer", NULL};

static const layer_keras_arg dense_keras[] = {
    {"units", "a dense layer's units are its value: {dense: 64} (Keras's Dense(units=64))"},
    {NULL, NULL}};

static cohort_status dense_parse(const layer_syntax *s, layer_spec *ls)
{
    dense_settings d = {0};
    char what[200];
    long long units;
    snprintf(what, sizeof what, "dense units of %s", s->where);
    cohort_status st = yget_int(s->c, s->value, what, 1, LAYER_UNITS_MAX, &units);
    if (st)
        return st;
    d.units = (int)units;
    if ((st = layer_parse_use_bias(s, &d.use_bias)) || (st = layer_parse_regularizer(s, ls)))
        return st;
    dense_settings_put(ls, &d);
    return layer_parse_act(s, ls);
}

static void dense_json(const layer_spec *ls, strbuf *b)
{
    sb_printf(b, "\"dense\":%d", settings(ls).units);
    layer_json_act(b, ls->act);
    layer_json_use_bias(b, settings(ls).use_bias);
    layer_json_regularizer(b, ls);
}

static int dense_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    return snprintf(buf, n, "%d%s", settings(ls).units,
                    ls->act == ACT_LINEAR ? "" : act_name(ls->act));
}

static int dense_fuse_key(const layer_spec *ls, int *key)
{
    key[0] = settings(ls).units;
    key[1] = (int)ls->act;
    key[2] = settings(ls).use_bias;
    return 3;
}

static int dense_with_act(const layer_spec *ls, act_kind a, char *buf, size_t n)
{
    /* A softmax over one unit is 1 whatever the input: one unit per class. */
    if (a == ACT_SOFTMAX && settings(ls).units == 1)
        return snprintf(buf, n, "make it {dense: CLASSES, activation: softmax}, one unit per "
                                "class");
    return snprintf(buf, n, "make it {dense: %d, activation: %s}", settings(ls).units,
                    act_name(a));
}

static const layer_hyper dense_hyper[] = {LAYER_HYPER_REGULARIZER, {NULL, 0, 0, 0, 0, NULL}};

/* ---- shapes, init, forward, backward, weight file ---- */

/* The rows of one sample (a sequence's steps) and the width of each. */
static int steps_of(const layer_plan *lp) { return lp->in.rank == 2 ? lp->in.h : 1; }
static size_t width_of(const layer_plan *lp)
{
    return lp->in.rank == 2 ? (size_t)lp->in.c : shape_size(lp->in);
}

static int dense_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    if (lp->in.rank == 3 && lp->index > 0) {
        char s[48];
        shape_format(lp->in, s, sizeof s);
        snprintf(msg, len, "dense gets an image %s; put a flatten (or global_average_pooling2d) "
                           "before it", s);
        return 1;
    }
    size_t in = width_of(lp), units = (size_t)settings(ls).units;
    lp->out = lp->in.rank == 2 ? shape_seq(lp->in.h, settings(ls).units)
                               : shape_flat(settings(ls).units);
    lp->n_params = in * units + (settings(ls).use_bias ? units : 0);
    lp->n_fused = in * units;
    lp->n_saved = layer_act_saved(lp, shape_size(lp->out));
    return 0;
}

/* Keras: glorot_uniform kernel, zero bias. */
static void dense_init(const layer_spec *ls, const layer_plan *lp, uint64_t seed, float *P)
{
    size_t in = width_of(lp), out = (size_t)settings(ls).units;
    rng_state r;
    rng_seed(&r, seed, 1000 + (uint64_t)lp->index);
    float limit = sqrtf(6.0f / (float)(in + out));
    float *W = P + lp->p_off;
    for (size_t i = 0; i < in * out; i++)
        W[i] = (2.0f * rng_uniform(&r) - 1.0f) * limit;
    if (settings(ls).use_bias)
        memset(W + in * out, 0, out * sizeof(float));
}

static void dense_forward(const layer_pass *p)
{
    const layer_plan *lp = p->lp;
    int in = (int)width_of(lp), out = lp->out.c, rows = p->rows * steps_of(lp);
    const float *W = p->W + lp->p_off;
    const float *b = settings(p->ls[0]).use_bias ? W + (size_t)in * (size_t)out : NULL;
    if (p->XT)
        p->be->dense_forward(p->ctx, p->Y, out, p->sY, p->XT, p->ldt, p->sXT, W, p->sP, rows,
                             out, in, p->count);
    else
        p->be->gemm(p->ctx, 0, 1, rows, out, in, 1.0f, p->X, in, p->sX, W, in, p->sP, 0.0f,
                    p->Y, out, p->sY, p->count);
    layer_act_forward(p, b, rows, out);
}

/* The gradients from dY (dZ once the activation's derivative is applied):
 * the input gradient first, since it needs the weights before their step. */
static int dense_backward(const layer_pass *p)
{
    const layer_plan *lp = p->lp;
    const backend_ops *be = p->be;
    int in = (int)width_of(lp), out = lp->out.c, rows = p->rows * steps_of(lp);
    size_t nw = (size_t)in * (size_t)out;
    float *W = p->W + lp->p_off, *G = p->G + lp->p_off;
    layer_act_backward(p, (size_t)rows * (size_t)out);
    if (settings(p->ls[0]).use_bias)
        be->bias_grad(p->ctx, G + nw, p->sP, p->dY, p->sd, rows, out, p->count);
    if (p->dX)
        be->gemm(p->ctx, 0, 0, rows, in, out, 1.0f, p->dY, out, p->sd, W, in, p->sP, 0.0f, p->dX,
                 in, p->sd, p->count);
    if (p->step && be->dense_step &&
        be->dense_step(p->ctx, p->opt, W, p->s1 ? p->s1 + lp->p_off : NULL,
                       p->s2 ? p->s2 + lp->p_off : NULL, p->sP, p->dY, out, p->sd, p->X, in,
                       p->sX, rows, out, in, p->step, p->count))
        return 1;
    be->gemm(p->ctx, 1, 0, out, in, rows, 1.0f, p->dY, out, p->sd, p->X, in, p->sX, 0.0f, G, in,
             p->sP, p->count);
    return 0;
}

static int dense_tensors(const layer_plan *lp, layer_tensor *t)
{
    int64_t in = (int64_t)width_of(lp), out = lp->out.c;
    t[0] = (layer_tensor){"weight", 2, {out, in}, lp->p_off, (size_t)(out * in)};
    t[1] = (layer_tensor){"bias", 1, {out}, lp->p_off + (size_t)(out * in), (size_t)out};
    return lp->n_params > (size_t)(out * in) ? 2 : 1; /* use_bias: false has none */
}

/* After a flatten of an image, the file's columns (each row of W) are in
 * torch's order. */
static void dense_convert(const layer_plan *lp, int i, float *P, float *file, int to_file)
{
    layer_tensor t[2];
    dense_tensors(lp, t);
    if (i == 0 && lp->flat_from.rank == 3)
        layer_flat_convert(&lp->flat_from, (size_t)lp->out.c, width_of(lp), P + t[0].off, file,
                           to_file);
    else
        layer_flat_convert(NULL, 1, t[i].n, P + t[i].off, file, to_file);
}

static double dense_macs(const layer_plan *lp)
{
    return (double)steps_of(lp) * (double)width_of(lp) * lp->out.c;
}

/* ---- export: Gemm with transB (W [out, in], as torch.nn.Linear), then the
 * activation; a first layer on an image flattens it, in the (C, H, W) order
 * of its file's columns; on a sequence, MatMul over its last axis ---- */

static int dense_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp, const char *x,
                      char *y, char *msg, size_t len)
{
    (void)msg;
    (void)len;
    char flat[ONNX_NAME_MAX], out[ONNX_NAME_MAX];
    const char *in[3] = {x, NULL, NULL};
    int n = settings(ls).use_bias ? 2 : 1;
    if (lp->in.rank == 2) { /* a sequence [N, T, E]: on its last axis */
        if (!onnx_weights(g, lp, n, in + 1))
            return 1;
        onnx_linear(g, x, in[1], n == 2 ? in[2] : NULL, out, lp->index, "linear");
        onnx_activation(g, ls->act, out, y, lp->index);
        return 0;
    }
    if (lp->in.rank == 3) {
        onnx_flatten(g, x, flat, lp->index);
        in[0] = flat;
    }
    if (!onnx_weights(g, lp, n, in + 1))
        return 1;
    onnx_value_name(out, lp->index, "gemm");
    onnx_node_begin(g, "Gemm", in, n + 1, out);
    onnx_attr_int(g, "transB", 1);
    onnx_node_end(g);
    onnx_activation(g, ls->act, out, y, lp->index);
    return 0;
}

const layer_ops layer_dense_ops = {
    .name = "dense",
    .keys = dense_keys,
    .example = "{dense: UNITS, activation: relu}",
    .keras_args = dense_keras,
    .parse = dense_parse,
    .to_json = dense_json,
    .abbrev = dense_abbrev,
    .fuse_key = dense_fuse_key,
    .hyper = dense_hyper,
    .with_act = dense_with_act,
    .plan = dense_plan,
    .init = dense_init,
    .forward = dense_forward,
    .backward = dense_backward,
    .shares_input = 1,
    .reads_output = 1,
    .uses_xt = 1,
    .takes_mask = 1,
    .tensors = dense_tensors,
    .convert = dense_convert,
    .macs = dense_macs,
    .onnx = dense_onnx,
};
