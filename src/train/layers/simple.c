/*
 * The layers without parameters that work element by element or not at all:
 * Dropout (inverted, Keras's), Flatten (an alias of its input: NHWC images
 * are already flat rows) and Activation.
 */
#include "train/layer.h"

static int same_shape_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    (void)ls;
    (void)msg;
    (void)len;
    lp->out = lp->in;
    return 0;
}

static int dropout_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    same_shape_plan(ls, lp, msg, len);
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
        p->host[k] = p->ls[k]->rate;
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

const layer_ops layer_dropout_ops = {
    .plan = dropout_plan,
    .forward = dropout_forward,
    .backward = dropout_backward,
    .grad_in_place = 1,
    .keeps_order = 1,
};

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

const layer_ops layer_flatten_ops = {
    .plan = flatten_plan,
    .forward = flatten_forward,
    .backward = flatten_backward,
    .grad_in_place = 1,
    .keeps_order = 1,
    .shares_input = 1,
};

/* Y = act(X), in X's place where the layout made the layer an alias;
 * softmax leaves the logits to the loss, as a dense layer's does. */
static void activation_forward(const layer_pass *p)
{
    size_t w = shape_size(p->lp->in), s = (size_t)p->batch * w;
    if (p->Y != p->X)
        p->be->copy(p->ctx, p->Y, p->X, s, (size_t)p->rows * w, p->count);
    p->be->bias_act(p->ctx, p->Y, s, NULL, 0, p->rows, (int)w, p->lp->act, p->count);
}

static int activation_backward(const layer_pass *p)
{
    size_t w = shape_size(p->lp->in);
    p->be->act_backward(p->ctx, p->dY, p->sd, p->Y, p->sY, (size_t)p->rows * w, p->lp->act,
                        p->count);
    return 0;
}

const layer_ops layer_activation_ops = {
    .plan = same_shape_plan,
    .forward = activation_forward,
    .backward = activation_backward,
    .grad_in_place = 1,
    .keeps_order = 1,
    .reads_output = 1,
    .may_overwrite_input = 1,
};
