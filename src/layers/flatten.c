/*
 * layers/flatten: the Flatten layer, its syntax, spec and compute. NHWC
 * images are already flat rows, so its output is an alias of its input and
 * its passes do nothing; a dense or batch-norm layer after it keeps the
 * image's order in its weight file (keeps_order).
 */
#include "io/onnx.h"
#include "layers/pass.h"

#include <stdio.h>

static int flatten_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    (void)ls;
    return snprintf(buf, n, "flat");
}

static int flatten_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    (void)ls;
    (void)msg;
    (void)len;
    lp->out = shape_flat((int)shape_size(lp->in));
    lp->alias = 1;
    return 0;
}

static void flatten_forward(const layer_pass *p) { (void)p; }
static int flatten_backward(const layer_pass *p)
{
    (void)p;
    return 0;
}

/* ---- export: an image (NCHW) to [N, C*H*W] in the (C, H, W) order its
 * dense layer's file reads, a sequence [N, T, F] to [N, T*F]; flat data as
 * they are ---- */

static int flatten_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp,
                        const char *x, char *y, char *msg, size_t len)
{
    (void)ls;
    (void)msg;
    (void)len;
    if (lp->in.rank == 3 || lp->in.rank == 2) /* a sequence [N, T, F]: in step order */
        onnx_flatten(g, x, y, lp->index);
    else
        str_copy(y, ONNX_NAME_MAX, x);
    return 0;
}

const layer_ops layer_flatten_ops = {
    .name = "flatten",
    .abbrev = flatten_abbrev,
    .plan = flatten_plan,
    .forward = flatten_forward,
    .backward = flatten_backward,
    .grad_in_place = 1,
    .keeps_order = 1,
    .shares_input = 1,
    .onnx = flatten_onnx,
};
