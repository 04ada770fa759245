/*
 * layers/pass: the compute half's interface. One pass of one layer over a
 * range of a group's models (layer_pass), handed by the trainer (train/) to
 * an entry's forward and backward, which run it through the backend's
 * batched primitives; and the window geometry the windowed kinds share.
 * Only the entries and train/ include it: it carries the backend.
 */
#ifndef COHORT_LAYERS_PASS_H
#define COHORT_LAYERS_PASS_H

#include "backend/backend_impl.h"
#include "layers/layer.h"

#include <stdint.h>

/*
 * One pass of one layer over `count` models of a group (a range of it). Every
 * pointer is device memory at the range's first model, with the per-model
 * stride beside it (a stride of 0: one copy read by every model).
 */
typedef struct layer_pass {
    const backend_ops *be;
    backend_ctx *ctx;
    const layer_plan *lp;
    const layer_spec *const *ls; /* ls[k]: this layer's spec in model k of the range */
    const uint64_t *seed;        /* [count]: each model's seed (dropout masks) */
    int count, rows;             /* models, samples in the batch */
    int batch;                   /* the batch size B the buffers hold */
    int training;                /* 0: inference (no dropout, moving statistics) */
    uint64_t counter;            /* the step's number: unique dropout masks */
    const unsigned char *active; /* [count] or NULL: 0 for a model no longer trained, whose
                                  * batch-norm moving statistics stay as they are */
    const float *X;              /* input activations [rows, in] */
    float *Y;                    /* output activations [rows, out] */
    size_t sX, sY;
    float *W, *G;                /* the model's parameters and gradients, stride sP */
    size_t sP;
    float *saved, *stat, *work;  /* this layer's saved tensors, its per-model ones, scratch */
    size_t s_saved, s_stat, s_work;
    /* backward: dY [rows, out] in, dX [rows, in] out (NULL: the first
     * layer, whose input gradient nobody needs); dX == dY for entries with
     * grad_in_place */
    float *dY, *dX;
    size_t sd;
    /* lp->mask_in: the model's input tokens [rows, T] (float ids; stride
     * s_tokens, 0 when one copy is shared): step t of sample r is padding
     * where tokens[r*T + t] == 0. NULL without a mask. */
    const float *tokens;
    size_t s_tokens;
    /* dense, first layer: its input transposed for the backend's
     * dense_forward (NULL: unused), ldt columns */
    const float *XT;
    int ldt;
    size_t sXT; /* XT's stride between models: 0 for one input read by all */
    /* backward: where not NULL, the optimizer step the first n_fused
     * parameters may take at once (the backend's dense_step) */
    const optim_step *step;
    opt_kind opt;
    float *s1, *s2;              /* optimizer slots, laid out as W */
    float *host;                 /* [4 * count] host scratch for per-model settings */
    /* A block's opening or closing entry (lp->pair >= 0; layers/block.c):
     * the other entry's input activations [rows, its in] (stride s_pair_X;
     * 0: one input read by every model) and its saved tensors. */
    const float *pair_X;
    size_t s_pair_X;
    float *pair_saved;
    size_t s_pair_saved;
} layer_pass;

/* The window geometry of lp over `rows` images. */
window_geom layer_window(const layer_plan *lp, int rows);

/*
 * A layer's activation lp->act over its output Y (p->Y, p->sY: rows x cols
 * per model) after the bias b (stride p->sP; NULL: none). An activation
 * whose derivative needs its input (act_needs_input: gelu, silu) has the
 * input Z kept first in the layer's saved tensors (its plan counts rows x
 * cols of them in n_saved: layer_act_saved), and backward makes the
 * derivative from there. `act` is the one to apply (lp->act, or linear
 * where the backend's fused kernel applies it).
 */
static inline size_t layer_act_saved(const layer_plan *lp, size_t width)
{
    return act_needs_input(lp->act) ? width : 0;
}

static inline void layer_act_forward(const layer_pass *p, const float *b, int rows, int cols)
{
    act_kind a = p->lp->act;
    if (!act_needs_input(a)) {
        p->be->bias_act(p->ctx, p->Y, p->sY, b, p->sP, rows, cols, a, p->count);
        return;
    }
    size_t n = (size_t)rows * (size_t)cols;
    if (b)
        p->be->bias_act(p->ctx, p->Y, p->sY, b, p->sP, rows, cols, ACT_LINEAR, p->count);
    if (p->sY == p->s_saved)
        p->be->copy(p->ctx, p->saved, p->Y, p->sY, n, p->count);
    else
        for (int k = 0; k < p->count; k++)
            p->be->copy(p->ctx, p->saved + (size_t)k * p->s_saved, p->Y + (size_t)k * p->sY, 0,
                        n, 1);
    p->be->bias_act(p->ctx, p->Y, p->sY, NULL, 0, rows, cols, a, p->count);
}

/* dY *= act'(...) over n values per model, from the output Y or the kept
 * input Z (layer_act_forward). */
static inline void layer_act_backward(const layer_pass *p, size_t n)
{
    act_kind a = p->lp->act;
    if (act_needs_input(a))
        p->be->act_backward(p->ctx, p->dY, p->sd, p->saved, p->s_saved, n, a, p->count);
    else
        p->be->act_backward(p->ctx, p->dY, p->sd, p->Y, p->sY, n, a, p->count);
}

#endif
