/*
 * tests/layers/scaled_identity: a layer kind that only test_layer_table
 * compiles in, to show that a kind is its entry's file and one line of the
 * table (here layer_register, the test binary's table line): nothing else of
 * cohort knows it, and yet it parses, plans, trains (fused too), saves,
 * loads and prints.
 *
 *   {scaled_identity: S}   Y = g ⊙ X, with a trained per-feature gain g
 *                          (the weight file's layers.{i}.weight [width])
 *                          that starts at S (> 0; 1 by default)
 *
 * Its passes are plain loops over the pass's pointers, which are host memory
 * on the CPU backend: the kind runs on CPU devices only, as the test does. A
 * shipped kind would use the backend's primitives instead.
 */
#include "layers/pass.h"

#include <stdio.h>

typedef struct scaled_identity_settings {
    float scale; /* the gain's start */
} scaled_identity_settings;
LAYER_SETTINGS_OF(scaled_identity_settings);

static float scale_of(const layer_spec *ls)
{
    return scaled_identity_settings_of(ls).scale;
}

static cohort_status si_parse(const layer_syntax *s, layer_spec *ls)
{
    char what[200];
    double d = 1.0;
    snprintf(what, sizeof what, "scaled_identity scale of layers.%d", s->index);
    cohort_status st = layer_no_settings(s->value)
                           ? COHORT_OK
                           : yget_num(s->c, s->value, what, YR_POSITIVE, 1, &d);
    if (!st)
        scaled_identity_settings_put(ls, &(scaled_identity_settings){(float)d});
    return st;
}

static void si_json(const layer_spec *ls, strbuf *b)
{
    sb_puts(b, "\"scaled_identity\":");
    sb_json_float(b, scale_of(ls));
}

static int si_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    return snprintf(buf, n, "sid%g", (double)scale_of(ls));
}

static int si_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    (void)ls;
    if (lp->in.rank != 1) {
        snprintf(msg, len, "scaled_identity takes flat samples");
        return 1;
    }
    lp->out = lp->in;
    lp->n_params = shape_size(lp->in);
    return 0;
}

static void si_init(const layer_spec *ls, const layer_plan *lp, uint64_t seed, float *P)
{
    (void)seed;
    for (size_t j = 0; j < lp->n_params; j++)
        P[lp->p_off + j] = scale_of(ls);
}

static void si_forward(const layer_pass *p)
{
    size_t w = shape_size(p->lp->in);
    for (int k = 0; k < p->count; k++) {
        const float *X = p->X + (size_t)k * p->sX, *g = p->W + (size_t)k * p->sP + p->lp->p_off;
        float *Y = p->Y + (size_t)k * p->sY;
        for (size_t r = 0; r < (size_t)p->rows; r++)
            for (size_t j = 0; j < w; j++)
                Y[r * w + j] = g[j] * X[r * w + j];
    }
}

static int si_backward(const layer_pass *p)
{
    size_t w = shape_size(p->lp->in);
    for (int k = 0; k < p->count; k++) {
        const float *X = p->X + (size_t)k * p->sX, *g = p->W + (size_t)k * p->sP + p->lp->p_off;
        const float *dY = p->dY + (size_t)k * p->sd;
        float *G = p->G + (size_t)k * p->sP + p->lp->p_off;
        for (size_t j = 0; j < w; j++) {
            float sum = 0.0f;
            for (size_t r = 0; r < (size_t)p->rows; r++)
                sum += X[r * w + j] * dY[r * w + j];
            G[j] = sum;
        }
        if (p->dX) {
            float *dX = p->dX + (size_t)k * p->sd;
            for (size_t r = 0; r < (size_t)p->rows; r++)
                for (size_t j = 0; j < w; j++)
                    dX[r * w + j] = g[j] * dY[r * w + j];
        }
    }
    return 0;
}

static int si_tensors(const layer_plan *lp, layer_tensor *t)
{
    t[0] = (layer_tensor){"weight", 1, {(int64_t)lp->n_params}, lp->p_off, lp->n_params};
    return 1;
}

const layer_ops layer_scaled_identity_ops = {
    .name = "scaled_identity",
    .parse = si_parse,
    .to_json = si_json,
    .abbrev = si_abbrev,
    .fuse_key = layer_fuse_any,
    .plan = si_plan,
    .shares_input = 1,
    .keeps_order = 1,
    .init = si_init,
    .forward = si_forward,
    .backward = si_backward,
    .tensors = si_tensors,
};
