/*
 * layers/residual: a residual block, x + f(x) (the Add of Keras's
 * functional API; in torch, a module whose forward returns x + f(x), f a
 * torch.nn.Sequential of the layers inside). A spec holds it flat
 * (layers/block.c): this entry, `residual`, opens the block, the layers of
 * f follow, and `add` closes it. Neither has parameters:
 *   residual  its output is its input (an alias); in backward it adds the
 *             gradient that skipped f (kept by add) into its input's;
 *   add       y = f(x) + x, reading x where the residual found it
 *             (layer_pass.pair_X); in backward the gradient goes on to f
 *             unchanged and a copy of it is kept, for the residual.
 * The layout checks that f gives back its input's shape (layers.i.j, the
 * layer that breaks it). Masks pass through both.
 */
#include "io/onnx.h"
#include "layers/pass.h"

#include <stdio.h>

extern const layer_ops layer_residual_add_ops;

static int residual_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    (void)ls;
    return snprintf(buf, n, "res");
}

/* ---- residual: the block's opening ---- */

static int residual_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    (void)ls;
    if (lp->in.rank == 1 && lp->flat_from.rank == 3) {
        /* The file's dense layers read a flattened image in torch's (C, H,
         * W) order, but f(x) comes out in its units' order: a sum of the two
         * would differ from the torch module the file loads into. */
        snprintf(msg, len, "a residual cannot take a flattened image (torch's order of its "
                           "values differs from f's output); put a dense layer before it");
        return 1;
    }
    lp->out = lp->in;
    lp->alias = 1;
    return 0;
}

static void residual_forward(const layer_pass *p) { (void)p; }

/* dX (which is dY) += the gradient add kept from its own dY. */
static int residual_backward(const layer_pass *p)
{
    if (p->dX)
        p->be->add(p->ctx, p->dX, p->sd, p->dY, p->sd, p->pair_saved, p->s_pair_saved,
                   (size_t)p->rows * shape_size(p->lp->in), p->count);
    return 0;
}

static int residual_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp,
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

const layer_ops layer_residual_ops = {
    .name = "residual",
    .example = "{residual: [{dense: 64, activation: relu}, {dense: WIDTH}]}",
    .abbrev = residual_abbrev,
    .fuse_key = layer_fuse_any,
    .block_end = &layer_residual_add_ops,
    .plan = residual_plan,
    .forward = residual_forward,
    .backward = residual_backward,
    .grad_in_place = 1,
    .shares_input = 1,
    .takes_mask = 1,
    .onnx = residual_onnx,
};

/* ---- add: the block's closing, y = f(x) + x ---- */

static int add_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    (void)ls;
    return snprintf(buf, n, "add");
}

static int add_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    (void)ls;
    (void)msg;
    (void)len;
    lp->out = lp->in;
    lp->n_saved = shape_size(lp->in); /* dY, for the residual's backward */
    return 0;
}

static void add_forward(const layer_pass *p)
{
    p->be->add(p->ctx, p->Y, p->sY, p->X, p->sX, p->pair_X, p->s_pair_X,
               (size_t)p->rows * shape_size(p->lp->in), p->count);
}

static int add_backward(const layer_pass *p)
{
    p->be->add(p->ctx, p->saved, p->s_saved, p->dY, p->sd, NULL, 0,
               (size_t)p->rows * shape_size(p->lp->in), p->count);
    return 0;
}

static int add_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp, const char *x,
                    char *y, char *msg, size_t len)
{
    (void)ls;
    (void)msg;
    (void)len;
    const char *in[2] = {x, onnx_layer_input(g, lp->pair)};
    onnx_value_name(y, lp->index, "add");
    onnx_node_begin(g, "Add", in, 2, y);
    onnx_node_end(g);
    return 0;
}

const layer_ops layer_residual_add_ops = {
    .name = "add",
    .abbrev = add_abbrev,
    .fuse_key = layer_fuse_any,
    .plan = add_plan,
    .forward = add_forward,
    .backward = add_backward,
    .grad_in_place = 1,
    .may_overwrite_input = 1,
    .takes_mask = 1,
    .onnx = add_onnx,
};
