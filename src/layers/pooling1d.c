/*
 * layers/pooling1d: the pooling kinds over sequences [T, C], their syntax,
 * spec and compute: four entries in one file, since they share the syntax
 * and the shapes. MaxPooling1D and AveragePooling1D are the 2-D window
 * kernels over the window pool x 1 (a sequence lies in memory as the image
 * T x 1; padding not counted, as TensorFlow's `same`); they take no token
 * mask (Keras's do not support masking). GlobalAveragePooling1D and
 * GlobalMaxPooling1D make one vector [C] of a sequence through the backend's
 * seq_pool ops, which honour a token mask: under mask_zero the mean is over
 * the steps that are not padding, as Keras's, and the max ignores padded
 * steps (Keras's own GlobalMaxPooling1D ignores the mask and pools them too).
 */
#include "layers/pass.h"

#include <stdio.h>
#include <string.h>

/* ---- syntax and spec: {max_pooling1d: POOL, strides, padding}, the same for
 * average_pooling1d; the global poolings take no settings ---- */

typedef struct pool1d_settings {
    int pool;     /* pool_size (2) */
    int strides;  /* (the pool size) */
    pad_kind pad; /* padding (valid) */
} pool1d_settings;
LAYER_SETTINGS_OF(pool1d_settings);

static pool1d_settings settings(const layer_spec *ls) { return pool1d_settings_of(ls); }

static const char *const pool1d_keys[] = {"strides", "padding", NULL};

static const layer_keras_arg pool1d_keras[] = {
    {"pool_size", "the pool size is the pooling layer's value: {max_pooling1d: 2} (Keras's "
                  "MaxPooling1D(pool_size=2))"},
    {NULL, NULL}};

static cohort_status pool1d_parse(const layer_syntax *s, layer_spec *ls)
{
    pool1d_settings d = {0};
    char what[200];
    cohort_status st;
    d.pool = 2; /* Keras's pool_size */
    snprintf(what, sizeof what, "pool size of %s", s->where);
    if (s->value && !ynode_is_null(s->value) &&
        (st = layer_get_len(s->c, s->value, what, &d.pool)))
        return st;
    d.strides = d.pool;
    d.pad = PAD_VALID;
    if ((st = layer_parse_window1d(s, 0, &d.strides, &d.pad)))
        return st;
    pool1d_settings_put(ls, &d);
    return COHORT_OK;
}

static void pool1d_json(const layer_spec *ls, strbuf *b)
{
    const pool1d_settings d = settings(ls);
    sb_json_str(b, ls->kind->name);
    sb_printf(b, ":%d,\"strides\":%d", d.pool, d.strides);
    layer_json_padding(b, d.pad);
}

static int max_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    return snprintf(buf, n, "mp1d%d", settings(ls).pool);
}

static int avg_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    return snprintf(buf, n, "ap1d%d", settings(ls).pool);
}

static int pool1d_fuse_key(const layer_spec *ls, int *key)
{
    const pool1d_settings d = settings(ls);
    int k[] = {d.pool, d.strides, (int)d.pad};
    memcpy(key, k, sizeof k);
    return (int)(sizeof k / sizeof k[0]);
}

/* ---- shapes and compute ---- */

/* The input must be a sequence; msg says what it is instead. */
static int needs_sequence(const layer_spec *ls, const layer_plan *lp, char *msg, size_t len)
{
    if (lp->in.rank == 2)
        return 0;
    char s[48];
    shape_format(lp->in, s, sizeof s);
    snprintf(msg, len, "%s needs sequences [T, C], but gets %s %s%s", ls->kind->name,
             lp->in.rank == 3 ? "images" : "flat samples", s,
             lp->in.rank == 3 ? "; use the 2-D pooling on images"
                              : "; give the data's shape with data.input_shape: [T, F]");
    return 1;
}

static int pool1d_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    if (needs_sequence(ls, lp, msg, len))
        return 1;
    const pool1d_settings d = settings(ls);
    int out;
    window_dim(lp->in.h, d.pool, d.strides, d.pad, &out, &lp->pad_top);
    if (out < 1) {
        char s[48];
        shape_format(lp->in, s, sizeof s);
        snprintf(msg, len, "%s's pool of %d is longer than its input sequence %s; use padding: "
                           "same or a smaller pool size", ls->kind->name, d.pool, s);
        return 1;
    }
    lp->kh = d.pool, lp->kw = 1, lp->sh = d.strides, lp->sw = 1, lp->pad_left = 0;
    lp->out = shape_seq(out, lp->in.c);
    return 0;
}

static int max_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    if (pool1d_plan(ls, lp, msg, len))
        return 1;
    lp->n_saved = shape_size(lp->out); /* int32 steps of the maxima */
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

const layer_ops layer_max_pool1d_ops = {
    .name = "max_pooling1d",
    .keys = pool1d_keys,
    .keras_args = pool1d_keras,
    .parse = pool1d_parse,
    .to_json = pool1d_json,
    .abbrev = max_abbrev,
    .fuse_key = pool1d_fuse_key,
    .plan = max_plan,
    .forward = max_forward,
    .backward = max_backward,
    .shares_input = 1,
    .takes_sequence = 1,
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

const layer_ops layer_avg_pool1d_ops = {
    .name = "average_pooling1d",
    .keys = pool1d_keys,
    .keras_args = pool1d_keras,
    .parse = pool1d_parse,
    .to_json = pool1d_json,
    .abbrev = avg_abbrev,
    .fuse_key = pool1d_fuse_key,
    .plan = pool1d_plan,
    .forward = avg_forward,
    .backward = avg_backward,
    .shares_input = 1,
    .takes_sequence = 1,
};

/* ---- the global poolings: [T, C] to [C], masked or not (seq_pool) ---- */

static int global_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    if (needs_sequence(ls, lp, msg, len))
        return 1;
    lp->out = shape_flat(lp->in.c);
    return 0;
}

static int global_max_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    if (global_plan(ls, lp, msg, len))
        return 1;
    lp->n_saved = (size_t)lp->in.c; /* int32 steps of the maxima */
    return 0;
}

static void global_forward(const layer_pass *p, int max)
{
    const layer_plan *lp = p->lp;
    p->be->seq_pool_fwd(p->ctx, max, p->Y, p->sY, max ? (int32_t *)p->saved : NULL, p->s_saved,
                        p->X, p->sX, p->tokens, p->s_tokens, p->rows, lp->in.h, lp->in.c,
                        p->count);
}

static int global_backward(const layer_pass *p, int max)
{
    const layer_plan *lp = p->lp;
    if (p->dX)
        p->be->seq_pool_bwd(p->ctx, max, p->dX, p->sd, p->dY, p->sd,
                            max ? (const int32_t *)p->saved : NULL, p->s_saved, p->tokens,
                            p->s_tokens, p->rows, lp->in.h, lp->in.c, p->count);
    return 0;
}

static void gap_forward(const layer_pass *p) { global_forward(p, 0); }
static int gap_backward(const layer_pass *p) { return global_backward(p, 0); }
static void gmp_forward(const layer_pass *p) { global_forward(p, 1); }
static int gmp_backward(const layer_pass *p) { return global_backward(p, 1); }

static int gap_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    (void)ls;
    return snprintf(buf, n, "gap1d");
}

static int gmp_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    (void)ls;
    return snprintf(buf, n, "gmp1d");
}

const layer_ops layer_global_avg_pool1d_ops = {
    .name = "global_average_pooling1d",
    .abbrev = gap_abbrev,
    .plan = global_plan,
    .forward = gap_forward,
    .backward = gap_backward,
    .shares_input = 1,
    .takes_mask = 1,
    .takes_sequence = 1,
};

const layer_ops layer_global_max_pool1d_ops = {
    .name = "global_max_pooling1d",
    .abbrev = gmp_abbrev,
    .plan = global_max_plan,
    .forward = gmp_forward,
    .backward = gmp_backward,
    .shares_input = 1,
    .takes_mask = 1,
    .takes_sequence = 1,
};
