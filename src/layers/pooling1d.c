/*
 * layers/pooling1d: the pooling kinds over sequences [T, C], their syntax,
 * spec and compute: four entries in one file, since they share the syntax
 * and the shapes. MaxPooling1D and AveragePooling1D run the 2-D poolings'
 * compute (layers/pooling.h) over the window pool x 1 (a sequence lies in
 * memory as the image T x 1; padding not counted, as TensorFlow's `same`);
 * they take no token mask (Keras's do not support masking).
 * GlobalAveragePooling1D and GlobalMaxPooling1D make one vector [C] of a
 * sequence through the backend's seq_pool ops, which honour a token mask:
 * under mask_zero the mean is over the steps that are not padding, as
 * Keras's, and the max ignores padded steps (Keras's own GlobalMaxPooling1D
 * ignores the mask and pools them too).
 */
#include "io/onnx.h"
#include "layers/pooling.h"

#include <float.h>
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
    pool_max_saved(lp); /* int32 steps of the maxima */
    return 0;
}

/* ---- export: [N, T, C] to [N, C, T], ONNX's 1-D MaxPool or AveragePool
 * (TensorFlow's same as explicit pads, the average over the real steps),
 * back to [N, T, C] ---- */

static int window_onnx(onnx_graph *g, const layer_plan *lp, const char *op, const char *x,
                       char *y)
{
    static const int64_t perm[3] = {0, 2, 1};
    char nct[ONNX_NAME_MAX], pool[ONNX_NAME_MAX];
    const char *in = nct;
    onnx_transpose(g, x, perm, 3, nct, lp->index, "nct");
    onnx_value_name(pool, lp->index, op);
    onnx_node_begin(g, op, &in, 1, pool);
    onnx_window1d_attrs(g, lp);
    if (!strcmp(op, "AveragePool"))
        onnx_attr_int(g, "count_include_pad", 0);
    onnx_node_end(g);
    onnx_transpose(g, pool, perm, 3, y, lp->index, "ntc");
    return 0;
}

static int max_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp, const char *x,
                    char *y, char *msg, size_t len)
{
    (void)ls;
    (void)msg;
    (void)len;
    return window_onnx(g, lp, "MaxPool", x, y);
}

static int avg_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp, const char *x,
                    char *y, char *msg, size_t len)
{
    (void)ls;
    (void)msg;
    (void)len;
    return window_onnx(g, lp, "AveragePool", x, y);
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
    .forward = pool_max_forward,
    .backward = pool_max_backward,
    .shares_input = 1,
    .takes_sequence = 1,
    .onnx = max_onnx,
};

const layer_ops layer_avg_pool1d_ops = {
    .name = "average_pooling1d",
    .keys = pool1d_keys,
    .keras_args = pool1d_keras,
    .parse = pool1d_parse,
    .to_json = pool1d_json,
    .abbrev = avg_abbrev,
    .fuse_key = pool1d_fuse_key,
    .plan = pool1d_plan,
    .forward = pool_avg_forward,
    .backward = pool_avg_backward,
    .shares_input = 1,
    .takes_sequence = 1,
    .onnx = avg_onnx,
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

/* ---- export: ReduceMean or ReduceMax over the steps; under a token mask
 * (computed from the input ids, onnx_mask) the sum of the tokens' steps
 * over their count, and the max of them, 0 for a sample of padding alone,
 * as seq_pool ---- */

static int global_onnx(onnx_graph *g, const layer_plan *lp, int max, const char *x, char *y)
{
    int i = lp->index;
    int64_t one = 1, two = 2, scalar = 0;
    if (!lp->mask_in) {
        onnx_value_name(y, i, max ? "gmp" : "gap");
        onnx_node_begin(g, max ? "ReduceMax" : "ReduceMean", &x, 1, y);
        onnx_attr_ints(g, "axes", &one, 1);
        onnx_attr_int(g, "keepdims", 0);
        onnx_node_end(g);
        return 0;
    }
    char axes1[ONNX_NAME_MAX], axes2[ONNX_NAME_MAX], keep3[ONNX_NAME_MAX], k[ONNX_NAME_MAX],
        a[ONNX_NAME_MAX], b[ONNX_NAME_MAX], c[ONNX_NAME_MAX], d[ONNX_NAME_MAX];
    onnx_ints(g, &two, 1, axes2, i, "axes2");
    const char *in[3] = {onnx_mask(g, max ? ONNX_MASK_BOOL : ONNX_MASK_FLOAT), axes2, NULL};
    onnx_op(g, "Unsqueeze", in, 2, keep3, i, "mask3"); /* [N, T, 1] */
    if (max) {
        /* The max over the tokens' steps, 0 where there are none. */
        float lowest = -FLT_MAX, zero = 0.0f;
        onnx_floats(g, &lowest, &scalar, 0, k, i, "lowest");
        in[0] = keep3;
        in[1] = x;
        in[2] = k;
        onnx_op(g, "Where", in, 3, a, i, "tokens");
        onnx_value_name(b, i, "gmp");
        in[0] = a;
        onnx_node_begin(g, "ReduceMax", in, 1, b);
        onnx_attr_ints(g, "axes", &one, 1);
        onnx_attr_int(g, "keepdims", 0);
        onnx_node_end(g);
        onnx_floats(g, &zero, &scalar, 0, k, i, "zero");
        in[0] = onnx_mask(g, ONNX_MASK_ANY);
        in[1] = b;
        in[2] = k;
        onnx_op(g, "Where", in, 3, y, i, "gmp.masked");
        return 0;
    }
    /* The sum over the tokens' steps over their count (at least 1). */
    float lone = 1.0f;
    onnx_ints(g, &one, 1, axes1, i, "axes1");
    in[0] = x;
    in[1] = keep3;
    onnx_op(g, "Mul", in, 2, a, i, "tokens");
    in[0] = a;
    in[1] = axes1;
    onnx_value_name(b, i, "sum");
    onnx_node_begin(g, "ReduceSum", in, 2, b);
    onnx_attr_int(g, "keepdims", 0);
    onnx_node_end(g);
    in[0] = onnx_mask(g, ONNX_MASK_FLOAT);
    onnx_value_name(c, i, "count");
    onnx_node_begin(g, "ReduceSum", in, 2, c);
    onnx_attr_int(g, "keepdims", 1);
    onnx_node_end(g);
    onnx_floats(g, &lone, &scalar, 0, k, i, "one");
    in[0] = c;
    in[1] = k;
    onnx_op(g, "Max", in, 2, d, i, "count1");
    in[0] = b;
    in[1] = d;
    onnx_op(g, "Div", in, 2, y, i, "gap.masked");
    return 0;
}

static int gap_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp, const char *x,
                    char *y, char *msg, size_t len)
{
    (void)ls;
    (void)msg;
    (void)len;
    return global_onnx(g, lp, 0, x, y);
}

static int gmp_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp, const char *x,
                    char *y, char *msg, size_t len)
{
    (void)ls;
    (void)msg;
    (void)len;
    return global_onnx(g, lp, 1, x, y);
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
    .onnx = gap_onnx,
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
    .onnx = gmp_onnx,
};
