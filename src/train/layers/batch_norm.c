/*
 * BatchNormalization over the last axis (the channels of an image, the
 * features of a flat sample), as Keras's: training normalizes with the
 * batch's statistics and moves the moving mean and variance by `momentum`;
 * inference uses the moving ones. gamma and beta are trained; the moving
 * statistics are the layer's state, which no optimizer touches. Saved for
 * backward: each channel's batch mean and 1/sqrt(var + epsilon).
 */
#include "train/layer.h"

#include <string.h>

static int bn_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    (void)ls;
    (void)msg;
    (void)len;
    size_t C = (size_t)lp->in.c;
    lp->out = lp->in;
    lp->n_params = 2 * C;
    lp->n_state = 2 * C;
    lp->n_stat = 2 * C;
    return 0;
}

/* gamma 1, beta 0, moving mean 0, moving variance 1. */
static void bn_init(const layer_spec *ls, const layer_plan *lp, uint64_t seed, float *P)
{
    (void)ls;
    (void)seed;
    size_t C = (size_t)lp->in.c;
    for (size_t c = 0; c < C; c++) {
        P[lp->p_off + c] = 1.0f;
        P[lp->p_off + C + c] = 0.0f;
        P[lp->s_off + c] = 0.0f;
        P[lp->s_off + C + c] = 1.0f;
    }
}

/* Rows of the op: every pixel of every image. */
static int bn_rows(const layer_pass *p) { return p->rows * p->lp->in.h * p->lp->in.w; }

static void bn_forward(const layer_pass *p)
{
    const layer_plan *lp = p->lp;
    int C = lp->in.c;
    float *gamma = p->W + lp->p_off, *beta = gamma + C;
    float *mean = p->W + lp->s_off, *var = mean + C;
    for (int k = 0; k < p->count; k++) {
        /* A stopped model of a group trained op by op (a GPU) still runs
         * forward: momentum 1 leaves its moving statistics as they were,
         * as a model trained alone or model by model (a CPU) has them. */
        p->host[k] = !p->active || p->active[k] ? p->ls[k]->momentum : 1.0f;
        p->host[p->count + k] = p->ls[k]->epsilon;
    }
    bn_step o = {p->host, p->host + p->count};
    if (p->training)
        p->be->bn_fwd_train(p->ctx, p->Y, p->sY, p->X, p->sX, gamma, beta, mean, var, p->sP,
                            p->stat, p->s_stat, bn_rows(p), C, &o, p->count);
    else
        p->be->bn_fwd_infer(p->ctx, p->Y, p->sY, p->X, p->sX, gamma, beta, mean, var, p->sP,
                            bn_rows(p), C, &o, p->count);
}

static int bn_backward(const layer_pass *p)
{
    const layer_plan *lp = p->lp;
    int C = lp->in.c;
    float *gamma = p->W + lp->p_off, *dgamma = p->G + lp->p_off;
    p->be->bn_bwd(p->ctx, p->dX, p->sd, p->dY, p->sd, p->X, p->sX, gamma, p->sP, p->stat,
                  p->s_stat, dgamma, dgamma + C, p->sP, bn_rows(p), C, p->count);
    return 0;
}

static int bn_tensors(const layer_plan *lp, layer_tensor *t)
{
    int64_t C = lp->in.c;
    size_t n = (size_t)C;
    t[0] = (layer_tensor){"weight", 1, {C}, lp->p_off, n};
    t[1] = (layer_tensor){"bias", 1, {C}, lp->p_off + n, n};
    t[2] = (layer_tensor){"running_mean", 1, {C}, lp->s_off, n};
    t[3] = (layer_tensor){"running_var", 1, {C}, lp->s_off + n, n};
    return 4;
}

/* After a flatten of an image (h, w, c), the file's features are in torch's
 * (c, h, w) order (BatchNorm1d after Flatten); the model's follow the
 * activations' (h, w, c). Elsewhere the same order. */
static void bn_convert(const layer_plan *lp, int i, float *P, float *file, int to_file)
{
    layer_tensor t[4];
    bn_tensors(lp, t);
    float *mine = P + t[i].off;
    sample_shape f = lp->flat_from;
    int image = lp->in.rank == 1 && f.rank == 3;
    size_t hw = image ? (size_t)f.h * (size_t)f.w : 1, c = image ? (size_t)f.c : t[i].n;
    for (size_t px = 0; px < hw; px++)
        for (size_t ch = 0; ch < c; ch++) {
            if (to_file)
                file[ch * hw + px] = mine[px * c + ch];
            else
                mine[px * c + ch] = file[ch * hw + px];
        }
}

const layer_ops layer_batch_norm_ops = {
    .plan = bn_plan,
    .init = bn_init,
    .forward = bn_forward,
    .backward = bn_backward,
    .shares_input = 1,
    .keeps_order = 1,
    .tensors = bn_tensors,
    .convert = bn_convert,
};
