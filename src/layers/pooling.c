/*
 * layers/pool: the pooling kinds, their syntax, spec and compute: three
 * entries in one file, since they share the window's syntax, plan and
 * kernels. Pooling over NHWC images: MaxPooling2D (the position of each window's
 * maximum is kept for backward), AveragePooling2D (padding not counted, as
 * TensorFlow's `same`) and GlobalAveragePooling2D (one h x w window; its
 * output is flat, one value per channel, as Keras's). Their compute is
 * exported (layers/pooling.h) for the 1-D poolings, which run it over T x 1.
 */
#include "layers/pooling.h"

#include "io/onnx.h"

#include <stdio.h>
#include <string.h>

/* ---- syntax and spec: {max_pooling2d: POOL, strides, padding}, the same for
 * average_pooling2d; global_average_pooling2d takes no settings ---- */

typedef struct pooling_settings {
    int kh, kw;   /* pool_size (2) */
    int sh, sw;   /* strides (the pool size) */
    pad_kind pad; /* padding (valid) */
} pooling_settings;
LAYER_SETTINGS_OF(pooling_settings);

static pooling_settings settings(const layer_spec *ls) { return pooling_settings_of(ls); }

static const char *const pooling_keys[] = {"strides", "padding", NULL};

static const layer_keras_arg pooling_keras[] = {
    {"pool_size", "the pool size is the pooling layer's value: {max_pooling2d: 2} (Keras's "
                  "MaxPooling2D(pool_size=2))"},
    {NULL, NULL}};

static cohort_status pooling_parse(const layer_syntax *s, layer_spec *ls)
{
    pooling_settings d = {0};
    char what[200];
    cohort_status st;
    d.kh = d.kw = 2; /* Keras's pool_size */
    snprintf(what, sizeof what, "pool size of %s", s->where);
    if (s->value && !ynode_is_null(s->value) &&
        (st = layer_get_hw(s->c, s->value, what, &d.kh, &d.kw)))
        return st;
    d.sh = d.kh;
    d.sw = d.kw;
    d.pad = PAD_VALID;
    if ((st = layer_parse_window(s, &d.sh, &d.sw, &d.pad)))
        return st;
    pooling_settings_put(ls, &d);
    return COHORT_OK;
}

static void pooling_json(const layer_spec *ls, strbuf *b)
{
    const pooling_settings d = settings(ls);
    sb_json_str(b, ls->kind->name);
    sb_printf(b, ":[%d,%d]", d.kh, d.kw);
    layer_json_hw(b, "strides", d.sh, d.sw);
    layer_json_padding(b, d.pad);
}

static int max_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    return snprintf(buf, n, "mp%d", settings(ls).kh);
}

static int avg_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    return snprintf(buf, n, "ap%d", settings(ls).kh);
}

static int gap_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    (void)ls;
    return snprintf(buf, n, "gap");
}

static int pooling_fuse_key(const layer_spec *ls, int *key)
{
    const pooling_settings d = settings(ls);
    int k[] = {d.kh, d.kw, d.sh, d.sw, (int)d.pad};
    memcpy(key, k, sizeof k);
    return (int)(sizeof k / sizeof k[0]);
}

/* ---- shapes and compute ---- */

/* A 2-D pooling given no image: a sequence is named as one, with the 1-D
 * kind that takes it (max_pooling2d -> max_pooling1d). Returns 1. */
static int not_an_image(const char *name, sample_shape in, const char *s, char *msg, size_t len)
{
    if (in.rank == 2) {
        int base = (int)strlen(name) - 2; /* the kind's name less its "2d" */
        snprintf(msg, len, "%s needs images, but gets a sequence %s; for sequences use %.*s1d",
                 name, s, base, name);
    } else {
        snprintf(msg, len, "%s needs images, but gets flat samples %s", name, s);
    }
    return 1;
}

static int pooling_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    char s[48];
    shape_format(lp->in, s, sizeof s);
    const char *name = ls->kind->name;
    const pooling_settings d = settings(ls);
    if (lp->in.rank != 3)
        return not_an_image(name, lp->in, s, msg, len);
    int sh = d.sh > 0 ? d.sh : d.kh, sw = d.sw > 0 ? d.sw : d.kw, oh, ow;
    window_dim(lp->in.h, d.kh, sh, d.pad, &oh, &lp->pad_top);
    window_dim(lp->in.w, d.kw, sw, d.pad, &ow, &lp->pad_left);
    if (oh < 1 || ow < 1) {
        snprintf(msg, len, "%s's %dx%d pool is larger than its input %s; use padding: same or a "
                           "smaller pool size", name, d.kh, d.kw, s);
        return 1;
    }
    lp->kh = d.kh, lp->kw = d.kw, lp->sh = sh, lp->sw = sw;
    lp->out = shape_image(oh, ow, lp->in.c);
    return 0;
}

void pool_max_saved(layer_plan *lp) { lp->n_saved = shape_size(lp->out); }

static int max_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    if (pooling_plan(ls, lp, msg, len))
        return 1;
    pool_max_saved(lp);
    return 0;
}

void pool_max_forward(const layer_pass *p)
{
    window_geom g = layer_window(p->lp, p->rows);
    p->be->maxpool_fwd(p->ctx, p->Y, p->sY, (int32_t *)p->saved, p->s_saved, p->X, p->sX, &g,
                       p->count);
}

int pool_max_backward(const layer_pass *p)
{
    window_geom g = layer_window(p->lp, p->rows);
    if (p->dX)
        p->be->maxpool_bwd(p->ctx, p->dX, p->sd, p->dY, p->sd, (const int32_t *)p->saved,
                           p->s_saved, &g, p->count);
    return 0;
}

/* ---- export: MaxPool and AveragePool with TensorFlow's padding as explicit
 * pads (the average over the real pixels only, as Keras), GlobalAveragePool
 * then Flatten to [N, C] ---- */

static int pooling_onnx(onnx_graph *g, const layer_plan *lp, const char *op, const char *x, char *y)
{
    char out[ONNX_NAME_MAX];
    onnx_value_name(out, lp->index, op);
    onnx_node_begin(g, op, &x, 1, out);
    onnx_window_attrs(g, lp);
    if (!strcmp(op, "AveragePool"))
        onnx_attr_int(g, "count_include_pad", 0);
    onnx_node_end(g);
    str_copy(y, ONNX_NAME_MAX, out);
    return 0;
}

static int max_pool_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp,
                         const char *x, char *y, char *msg, size_t len)
{
    (void)ls;
    (void)msg;
    (void)len;
    return pooling_onnx(g, lp, "MaxPool", x, y);
}

const layer_ops layer_max_pool_ops = {
    .name = "max_pooling2d",
    .keys = pooling_keys,
    .keras_args = pooling_keras,
    .parse = pooling_parse,
    .to_json = pooling_json,
    .abbrev = max_abbrev,
    .fuse_key = pooling_fuse_key,
    .plan = max_plan,
    .forward = pool_max_forward,
    .backward = pool_max_backward,
    .shares_input = 1,
    .onnx = max_pool_onnx,
};

void pool_avg_forward(const layer_pass *p)
{
    window_geom g = layer_window(p->lp, p->rows);
    p->be->avgpool_fwd(p->ctx, p->Y, p->sY, p->X, p->sX, &g, p->count);
}

int pool_avg_backward(const layer_pass *p)
{
    window_geom g = layer_window(p->lp, p->rows);
    if (p->dX)
        p->be->avgpool_bwd(p->ctx, p->dX, p->sd, p->dY, p->sd, &g, p->count);
    return 0;
}

static int avg_pool_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp,
                         const char *x, char *y, char *msg, size_t len)
{
    (void)ls;
    (void)msg;
    (void)len;
    return pooling_onnx(g, lp, "AveragePool", x, y);
}

const layer_ops layer_avg_pool_ops = {
    .name = "average_pooling2d",
    .keys = pooling_keys,
    .keras_args = pooling_keras,
    .parse = pooling_parse,
    .to_json = pooling_json,
    .abbrev = avg_abbrev,
    .fuse_key = pooling_fuse_key,
    .plan = pooling_plan,
    .forward = pool_avg_forward,
    .backward = pool_avg_backward,
    .shares_input = 1,
    .onnx = avg_pool_onnx,
};

static int global_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    char s[48];
    shape_format(lp->in, s, sizeof s);
    if (lp->in.rank != 3)
        return not_an_image(ls->kind->name, lp->in, s, msg, len);
    lp->kh = lp->sh = lp->in.h;
    lp->kw = lp->sw = lp->in.w;
    lp->out = shape_flat(lp->in.c);
    return 0;
}

static int global_avg_pool_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp,
                                const char *x, char *y, char *msg, size_t len)
{
    (void)ls;
    (void)msg;
    (void)len;
    char out[ONNX_NAME_MAX];
    onnx_value_name(out, lp->index, "gap");
    onnx_node_begin(g, "GlobalAveragePool", &x, 1, out);
    onnx_node_end(g);
    onnx_flatten(g, out, y, lp->index); /* [N, C, 1, 1] to [N, C] */
    return 0;
}

const layer_ops layer_global_avg_pool_ops = {
    .name = "global_average_pooling2d",
    .abbrev = gap_abbrev,
    .plan = global_plan,
    .forward = pool_avg_forward,
    .backward = pool_avg_backward,
    .shares_input = 1,
    .onnx = global_avg_pool_onnx,
};
