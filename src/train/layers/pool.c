/*
 * Pooling over NHWC images: MaxPooling2D (the position of each window's
 * maximum is kept for backward), AveragePooling2D (padding not counted, as
 * TensorFlow's `same`) and GlobalAveragePooling2D (one h x w window; its
 * output is flat, one value per channel, as Keras's).
 */
#include "train/layer.h"

#include <stdio.h>

static int pool_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    char s[48];
    shape_format(lp->in, s, sizeof s);
    const char *name = layer_kind_name(ls->kind);
    if (lp->in.rank != 3) {
        snprintf(msg, len, "%s needs images, but gets flat samples %s", name, s);
        return 1;
    }
    int sh = ls->sh > 0 ? ls->sh : ls->kh, sw = ls->sw > 0 ? ls->sw : ls->kw, oh, ow;
    window_dim(lp->in.h, ls->kh, sh, ls->pad, &oh, &lp->pad_top);
    window_dim(lp->in.w, ls->kw, sw, ls->pad, &ow, &lp->pad_left);
    if (oh < 1 || ow < 1) {
        snprintf(msg, len, "%s's %dx%d pool is larger than its input %s; use padding: same or a "
                           "smaller pool size", name, ls->kh, ls->kw, s);
        return 1;
    }
    lp->kh = ls->kh, lp->kw = ls->kw, lp->sh = sh, lp->sw = sw;
    lp->out = shape_image(oh, ow, lp->in.c);
    if (ls->kind == LAYER_MAX_POOL2D)
        lp->n_saved = shape_size(lp->out); /* int32 positions of the maxima */
    return 0;
}

static void max_forward(const layer_pass *p)
{
    window_geom g = layer_window(p->lp, p->rows);
    p->be->maxpool_fwd(p->ctx, p->Y, p->sY, (int32_t *)p->saved, p->s_saved, p->X, p->sX, &g,
                       p->count);
}

static int max_backward(const layer_pass *p)
{
    window_geom g = layer_window(p->lp, p->rows);
    if (p->dX)
        p->be->maxpool_bwd(p->ctx, p->dX, p->sd, p->dY, p->sd, (const int32_t *)p->saved,
                           p->s_saved, &g, p->count);
    return 0;
}

const layer_ops layer_max_pool_ops = {
    .plan = pool_plan,
    .forward = max_forward,
    .backward = max_backward,
    .shares_input = 1,
};

static void avg_forward(const layer_pass *p)
{
    window_geom g = layer_window(p->lp, p->rows);
    p->be->avgpool_fwd(p->ctx, p->Y, p->sY, p->X, p->sX, &g, p->count);
}

static int avg_backward(const layer_pass *p)
{
    window_geom g = layer_window(p->lp, p->rows);
    if (p->dX)
        p->be->avgpool_bwd(p->ctx, p->dX, p->sd, p->dY, p->sd, &g, p->count);
    return 0;
}

const layer_ops layer_avg_pool_ops = {
    .plan = pool_plan,
    .forward = avg_forward,
    .backward = avg_backward,
    .shares_input = 1,
};

static int global_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    char s[48];
    shape_format(lp->in, s, sizeof s);
    if (lp->in.rank != 3) {
        snprintf(msg, len, "%s needs images, but gets flat samples %s", layer_kind_name(ls->kind),
                 s);
        return 1;
    }
    lp->kh = lp->sh = lp->in.h;
    lp->kw = lp->sw = lp->in.w;
    lp->out = shape_flat(lp->in.c);
    return 0;
}

const layer_ops layer_global_avg_pool_ops = {
    .plan = global_plan,
    .forward = avg_forward,
    .backward = avg_backward,
    .shares_input = 1,
};
