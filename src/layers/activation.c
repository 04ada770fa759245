/*
 * layers/activation: the Activation layer, its syntax, spec and compute.
 * Y = act(X), in X's place where the layout made the layer an alias;
 * softmax leaves the logits to the loss, as a dense layer's does. Its one
 * setting is the spec's act, which every kind with an activation shares.
 */
#include "io/onnx.h"
#include "layers/pass.h"

#include <stdio.h>

/* ---- syntax and spec: {activation: NAME} ---- */

static void activation_json(const layer_spec *ls, strbuf *b)
{
    sb_puts(b, "\"activation\":");
    sb_json_str(b, act_name(ls->act));
}

static int activation_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    return snprintf(buf, n, "%s", act_name(ls->act));
}

static int activation_fuse_key(const layer_spec *ls, int *key)
{
    key[0] = (int)ls->act;
    return 1;
}

static int activation_with_act(const layer_spec *ls, act_kind a, char *buf, size_t n)
{
    (void)ls;
    return snprintf(buf, n, "make it {activation: %s}", act_name(a));
}

/* ---- shapes and compute ---- */

static int activation_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    (void)ls;
    (void)msg;
    (void)len;
    lp->out = lp->in;
    lp->n_saved = layer_act_saved(lp, shape_size(lp->in));
    return 0;
}

static void activation_forward(const layer_pass *p)
{
    size_t w = shape_size(p->lp->in), s = (size_t)p->batch * w;
    if (p->Y != p->X)
        p->be->copy(p->ctx, p->Y, p->X, s, (size_t)p->rows * w, p->count);
    layer_pass q = *p;
    q.sY = s;
    layer_act_forward(&q, NULL, p->rows, (int)w);
}

static int activation_backward(const layer_pass *p)
{
    size_t w = shape_size(p->lp->in);
    layer_act_backward(p, (size_t)p->rows * w);
    return 0;
}

/* ---- export: the activation's node ---- */

static int activation_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp,
                           const char *x, char *y, char *msg, size_t len)
{
    (void)msg;
    (void)len;
    onnx_activation(g, ls->act, x, y, lp->index);
    return 0;
}

const layer_ops layer_activation_ops = {
    .name = "activation",
    .takes_mask = 1,
    .example = "{activation: relu}",
    .parse = layer_parse_act,
    .to_json = activation_json,
    .abbrev = activation_abbrev,
    .fuse_key = activation_fuse_key,
    .with_act = activation_with_act,
    .act_is_value = 1,
    .plan = activation_plan,
    .forward = activation_forward,
    .backward = activation_backward,
    .grad_in_place = 1,
    .keeps_order = 1,
    .reads_output = 1,
    .may_overwrite_input = 1,
    .onnx = activation_onnx,
};
