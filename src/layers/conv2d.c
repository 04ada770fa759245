/*
 * layers/conv2d: the Conv2D layer, its syntax, spec and compute.
 * Conv2D over NHWC images as im2col + GEMM: Y = col·Wᵀ + b with the im2col
 * matrix col [n*oh*ow, kh*kw*c] and W [filters, kh, kw, c]; backward makes
 * col again for the weight gradient dYᵀ·col, and folds dcol = dY·W back
 * with col2im. Where the backend fuses these per chunk of images
 * (conv_fwd, conv_wgrad, conv_bwd_data: a CPU) it does so for one model at
 * a time; elsewhere they are its batched primitives. The weight file holds
 * W as torch.nn.Conv2d does: [filters, c, kh, kw].
 */
#include "backend/cpu/cpu.h"
#include "io/onnx.h"
#include "layers/conv.h"
#include "layers/pass.h"
#include "util/util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- the syntax and spec conv1d shares (layers/conv.h) ---- */

cohort_status conv_parse_filters(const layer_syntax *s, const layer_spec *ls, int example_kernel,
                                 int *filters, const ynode **kernel)
{
    const char *name = ls->kind->name;
    char what[200];
    long long f;
    snprintf(what, sizeof what, "%s filters of %s", name, s->where);
    cohort_status st = yget_int(s->c, s->value, what, 1, LAYER_UNITS_MAX, &f);
    if (st)
        return st;
    *filters = (int)f;
    if (!(*kernel = ymap_get(s->map, "kernel_size")))
        return ynode_fail(s->c, s->node, "%s of %s: %s needs kernel_size (like "
                                         "{%s: %d, kernel_size: %d})",
                          s->where, s->label, name, name, *filters, example_kernel);
    return COHORT_OK;
}

void conv_json_kernel(strbuf *b, const layer_spec *ls, int use_bias)
{
    layer_json_act(b, ls->act);
    layer_json_use_bias(b, use_bias);
    layer_json_regularizer(b, ls);
}

int conv_abbrev(const layer_spec *ls, const char *prefix, int filters, char *buf, size_t n)
{
    return snprintf(buf, n, "%s%d%s", prefix, filters,
                    ls->act == ACT_LINEAR ? "" : act_name(ls->act));
}

int conv_with_act(const layer_spec *ls, act_kind a, char *buf, size_t n)
{
    (void)ls;
    return snprintf(buf, n, "give it activation: %s", act_name(a));
}

const layer_hyper conv_hyper[] = {LAYER_HYPER_REGULARIZER, {NULL, 0, 0, 0, 0, NULL}};

/* ---- syntax and spec: {conv2d: FILTERS, kernel_size, strides, padding, activation,
 * use_bias, kernel_regularizer} ---- */

typedef struct conv_settings {
    int filters;
    int use_bias;   /* Keras's use_bias (true) */
    int kh, kw;     /* kernel_size */
    int sh, sw;     /* strides (1) */
    pad_kind pad;   /* padding (valid) */
} conv_settings;
LAYER_SETTINGS_OF(conv_settings);

static conv_settings settings(const layer_spec *ls) { return conv_settings_of(ls); }

static const char *const conv_keys[] = {"kernel_size", "strides", "padding", "activation",
                                        "use_bias", "kernel_regularizer", NULL};

static const layer_keras_arg conv_keras[] = {
    {"filters", "a conv2d layer's filters are its value: {conv2d: 32, kernel_size: 3} "
                "(Keras's Conv2D(filters=32, kernel_size=3))"},
    {NULL, NULL}};

static cohort_status conv2d_parse(const layer_syntax *s, layer_spec *ls)
{
    conv_settings d = {0};
    char what[200];
    const ynode *v;
    cohort_status st = conv_parse_filters(s, ls, 3, &d.filters, &v);
    if (st)
        return st;
    snprintf(what, sizeof what, "kernel_size of %s", s->where);
    if ((st = layer_get_hw(s->c, v, what, &d.kh, &d.kw)))
        return st;
    d.sh = d.sw = 1;
    d.pad = PAD_VALID;
    if ((st = layer_parse_window(s, &d.sh, &d.sw, &d.pad)) ||
        (st = layer_parse_use_bias(s, &d.use_bias)) || (st = layer_parse_regularizer(s, ls)))
        return st;
    conv_settings_put(ls, &d);
    return layer_parse_act(s, ls);
}

static void conv_json(const layer_spec *ls, strbuf *b)
{
    const conv_settings d = settings(ls);
    sb_printf(b, "\"conv2d\":%d", d.filters);
    layer_json_hw(b, "kernel_size", d.kh, d.kw);
    layer_json_hw(b, "strides", d.sh, d.sw);
    layer_json_padding(b, d.pad);
    conv_json_kernel(b, ls, d.use_bias);
}

static int conv2d_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    return conv_abbrev(ls, "c", settings(ls).filters, buf, n);
}

static int conv_fuse_key(const layer_spec *ls, int *key)
{
    const conv_settings d = settings(ls);
    int k[] = {d.filters, (int)ls->act, d.use_bias, d.kh, d.kw, d.sh, d.sw, (int)d.pad};
    memcpy(key, k, sizeof k);
    return (int)(sizeof k / sizeof k[0]);
}

/* ---- shapes, init, forward, backward, weight file: the compute of any
 * convolution over its plan's window (layers/conv.h; conv1d's too) ---- */

/* Columns of the im2col matrix. */
static size_t patch(const layer_plan *lp)
{
    return (size_t)lp->kh * (size_t)lp->kw * (size_t)lp->in.c;
}

/* Images per chunk of the backend's fused ops (forward and input gradient;
 * weight gradient), and where the weight gradient's partial sums follow
 * the col slots in the workspace. */
static int chunk_fwd(const layer_plan *lp)
{
    return conv_chunk_images((size_t)lp->out.h * (size_t)lp->out.w * patch(lp), lp->batch);
}

static int chunk_wgrad(const layer_plan *lp)
{
    return conv_wgrad_chunk((size_t)lp->out.h * (size_t)lp->out.w * patch(lp),
                            lp->out.h * lp->out.w, lp->batch);
}

/* Floats of the workspace's im2col rows: the slots of the forward chunks or
 * of the weight gradient's, whichever need more (a whole batch at least). */
static size_t col_floats(const layer_plan *lp)
{
    size_t B = (size_t)lp->batch, fc = (size_t)chunk_fwd(lp), wc = (size_t)chunk_wgrad(lp);
    size_t f_rows = (B + fc - 1) / fc * fc, w_rows = (B + wc - 1) / wc * wc;
    return (f_rows > w_rows ? f_rows : w_rows) * (size_t)lp->out.h * (size_t)lp->out.w *
           patch(lp);
}

/* The weight gradient's partial sums follow the im2col rows. */
static float *partials_of(const layer_pass *p) { return p->work + col_floats(p->lp); }

static size_t conv_work_per_row(const layer_plan *lp, int filters)
{
    /* Scratch (BUF_WORK), the only buffer of its own: the im2col rows, made
     * again in backward rather than kept (measured on one core: about as
     * fast, and 17 MiB less a model for the Keras convnet at batch 128), in
     * the slots of the fused ops (conv_chunk_images) or the whole batch's,
     * then the weight gradient's partial sums of the fused conv_wgrad; the
     * input gradient's dcol reuses the col rows. */
    size_t B = (size_t)lp->batch, wc = (size_t)chunk_wgrad(lp);
    size_t need = col_floats(lp) +
                  (B + wc - 1) / wc * ((size_t)filters * patch(lp) + (size_t)filters);
    return (need + B - 1) / B;
}

void conv_plan_sizes(layer_plan *lp, int filters, int use_bias)
{
    lp->n_params = (size_t)filters * patch(lp) + (use_bias ? (size_t)filters : 0);
    lp->n_work = conv_work_per_row(lp, filters);
    lp->n_saved = layer_act_saved(lp, shape_size(lp->out)); /* gelu's, silu's input */
}

static int conv_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    char s[48];
    shape_format(lp->in, s, sizeof s);
    if (lp->in.rank == 2) {
        snprintf(msg, len, "conv2d needs images, but gets a sequence %s; for sequences use "
                           "conv1d", s);
        return 1;
    }
    if (lp->in.rank != 3) {
        snprintf(msg, len, "conv2d needs images, but gets flat samples %s; give the data's "
                           "shape with data.input_shape: [H, W, C]", s);
        return 1;
    }
    const conv_settings d = settings(ls);
    int oh, ow;
    window_dim(lp->in.h, d.kh, d.sh, d.pad, &oh, &lp->pad_top);
    window_dim(lp->in.w, d.kw, d.sw, d.pad, &ow, &lp->pad_left);
    if (oh < 1 || ow < 1) {
        snprintf(msg, len, "conv2d's %dx%d kernel is larger than its input %s; use padding: same "
                           "or a smaller kernel_size", d.kh, d.kw, s);
        return 1;
    }
    lp->kh = d.kh, lp->kw = d.kw, lp->sh = d.sh, lp->sw = d.sw;
    lp->out = shape_image(oh, ow, d.filters);
    conv_plan_sizes(lp, d.filters, d.use_bias);
    return 0;
}

/* Keras: glorot_uniform over fan_in = kh*kw*c, fan_out = kh*kw*filters. */
void conv_glorot_init(const layer_plan *lp, int filters, int use_bias, uint64_t seed, float *P)
{
    size_t n = (size_t)filters * patch(lp);
    float fan_in = (float)patch(lp), fan_out = (float)(lp->kh * lp->kw * filters);
    rng_state r;
    rng_seed(&r, seed, 1000 + (uint64_t)lp->index);
    float limit = sqrtf(6.0f / (fan_in + fan_out));
    float *W = P + lp->p_off;
    for (size_t i = 0; i < n; i++)
        W[i] = (2.0f * rng_uniform(&r) - 1.0f) * limit;
    if (use_bias)
        memset(W + n, 0, (size_t)filters * sizeof(float));
}

static void conv_init(const layer_spec *ls, const layer_plan *lp, uint64_t seed, float *P)
{
    conv_glorot_init(lp, settings(ls).filters, settings(ls).use_bias, seed, P);
}

void conv_run_forward(const layer_pass *p, int use_bias)
{
    const layer_plan *lp = p->lp;
    window_geom g = layer_window(lp, p->rows);
    int F = lp->out.c, kc = (int)patch(lp), M = p->rows * lp->out.h * lp->out.w;
    const float *W = p->W + lp->p_off;
    const float *b = use_bias ? W + (size_t)F * (size_t)kc : NULL;
    if (p->count == 1 && p->be->conv_fwd) {
        /* The partial sums' region is free in forward: W transposed goes
         * there. An activation made from its input follows the product. */
        int own = act_needs_input(lp->act);
        p->be->conv_fwd(p->ctx, p->Y, p->work, partials_of(p), p->X, W, b, &g, F,
                        own ? ACT_LINEAR : lp->act, chunk_fwd(lp));
        if (own)
            layer_act_forward(p, NULL, M, F);
        return;
    }
    p->be->im2col(p->ctx, p->work, p->s_work, p->X, p->sX, &g, p->count);
    p->be->gemm(p->ctx, 0, 1, M, F, kc, 1.0f, p->work, kc, p->s_work, W, kc, p->sP, 0.0f, p->Y,
                F, p->sY, p->count);
    layer_act_forward(p, b, M, F);
}

static void conv_forward(const layer_pass *p) { conv_run_forward(p, settings(p->ls[0]).use_bias); }

int conv_run_backward(const layer_pass *p, int use_bias)
{
    const layer_plan *lp = p->lp;
    const backend_ops *be = p->be;
    window_geom g = layer_window(lp, p->rows);
    int F = lp->out.c, kc = (int)patch(lp), M = p->rows * lp->out.h * lp->out.w;
    float *W = p->W + lp->p_off, *G = p->G + lp->p_off;
    float *db = use_bias ? G + (size_t)F * (size_t)kc : NULL;
    if (p->count == 1 && be->conv_wgrad && be->conv_bwd_data) {
        int own = act_needs_input(lp->act);
        if (own)
            layer_act_backward(p, (size_t)M * (size_t)F);
        be->conv_wgrad(p->ctx, G, db, p->dY, p->Y, p->X, p->work, partials_of(p), &g, F,
                       own ? ACT_LINEAR : lp->act, chunk_wgrad(lp));
        if (p->dX)
            be->conv_bwd_data(p->ctx, p->dX, p->work, p->dY, W, &g, F, chunk_fwd(lp));
        return 0;
    }
    layer_act_backward(p, (size_t)M * (size_t)F);
    if (db)
        be->bias_grad(p->ctx, db, p->sP, p->dY, p->sd, M, F, p->count);
    be->im2col(p->ctx, p->work, p->s_work, p->X, p->sX, &g, p->count);
    be->gemm(p->ctx, 1, 0, F, kc, M, 1.0f, p->dY, F, p->sd, p->work, kc, p->s_work, 0.0f, G, kc,
             p->sP, p->count);
    if (p->dX) {
        be->gemm(p->ctx, 0, 0, M, kc, F, 1.0f, p->dY, F, p->sd, W, kc, p->sP, 0.0f, p->work, kc,
                 p->s_work, p->count);
        be->col2im(p->ctx, p->dX, p->sd, p->work, p->s_work, &g, p->count);
    }
    return 0;
}

static int conv_backward(const layer_pass *p)
{
    return conv_run_backward(p, settings(p->ls[0]).use_bias);
}

/* Max pooling right after the convolution, of one model, on a backend that
 * fuses the two (conv_fwd_pool, conv_wgrad_pool), under an activation made
 * from the output (relu, not gelu: its input would be kept in between). */
extern const layer_ops layer_max_pool_ops;

static int pools_after(const layer_pass *p, const layer_pass *q)
{
    return q->lp->kind == &layer_max_pool_ops && p->count == 1 && q->count == 1 &&
           !act_needs_input(p->lp->act) && p->be->conv_fwd_pool && p->be->conv_wgrad_pool &&
           p->be->conv_bwd_data;
}

static int conv_forward_next(const layer_pass *p, const layer_pass *q)
{
    if (!pools_after(p, q))
        return 0;
    const layer_plan *lp = p->lp;
    window_geom g = layer_window(lp, p->rows), pg = layer_window(q->lp, q->rows);
    int F = lp->out.c, kc = (int)patch(lp);
    const float *W = p->W + lp->p_off;
    const float *b = settings(p->ls[0]).use_bias ? W + (size_t)F * (size_t)kc : NULL;
    p->be->conv_fwd_pool(p->ctx, p->Y, p->work, partials_of(p), p->X, W, b, &g, F, lp->act,
                         chunk_fwd(lp), q->Y, (int32_t *)q->saved, &pg);
    return 1;
}

static int conv_backward_next(const layer_pass *p, const layer_pass *q)
{
    if (!pools_after(p, q) || q->dX != p->dY)
        return -1;
    const layer_plan *lp = p->lp;
    window_geom g = layer_window(lp, p->rows), pg = layer_window(q->lp, q->rows);
    int F = lp->out.c, kc = (int)patch(lp);
    float *W = p->W + lp->p_off, *G = p->G + lp->p_off;
    float *db = settings(p->ls[0]).use_bias ? G + (size_t)F * (size_t)kc : NULL;
    p->be->conv_wgrad_pool(p->ctx, G, db, p->dY, p->Y, p->X, p->work, partials_of(p), &g, F,
                           lp->act, chunk_wgrad(lp), q->dY, (const int32_t *)q->saved, &pg);
    if (p->dX)
        p->be->conv_bwd_data(p->ctx, p->dX, p->work, p->dY, W, &g, F, chunk_fwd(lp));
    return 0;
}

static int conv_tensors(const layer_plan *lp, layer_tensor *t)
{
    int64_t F = lp->out.c, kc = (int64_t)patch(lp);
    t[0] = (layer_tensor){"weight", 4, {F, lp->in.c, lp->kh, lp->kw}, lp->p_off, (size_t)(F * kc)};
    t[1] = (layer_tensor){"bias", 1, {F}, lp->p_off + (size_t)(F * kc), (size_t)F};
    return lp->n_params > (size_t)(F * kc) ? 2 : 1; /* use_bias: false has none */
}

/* The model's [F, kh, kw, c] to the file's [F, c, kh, kw], or back. */
void conv_reorder(const layer_plan *lp, const layer_tensor *t, int i, float *P, float *file,
                  int to_file)
{
    float *W = P + t[i].off;
    if (i == 1) {
        if (to_file)
            memcpy(file, W, t[1].n * sizeof(float));
        else
            memcpy(W, file, t[1].n * sizeof(float));
        return;
    }
    size_t F = (size_t)lp->out.c, C = (size_t)lp->in.c, kk = (size_t)lp->kh * (size_t)lp->kw;
    for (size_t f = 0; f < F; f++)
        for (size_t q = 0; q < kk; q++)
            for (size_t c = 0; c < C; c++) {
                float *mine = &W[(f * kk + q) * C + c], *theirs = &file[(f * C + c) * kk + q];
                if (to_file)
                    *theirs = *mine;
                else
                    *mine = *theirs;
            }
}

static void conv_convert(const layer_plan *lp, int i, float *P, float *file, int to_file)
{
    layer_tensor t[2];
    conv_tensors(lp, t);
    conv_reorder(lp, t, i, P, file, to_file);
}

double conv_macs(const layer_plan *lp)
{
    return (double)lp->out.h * lp->out.w * lp->out.c * (double)patch(lp);
}

/* ---- export: Conv on NCHW with the file's [F, C, kh, kw] kernel and
 * TensorFlow's padding as explicit pads, then the activation ---- */

static int conv_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp, const char *x,
                     char *y, char *msg, size_t len)
{
    (void)msg;
    (void)len;
    char out[ONNX_NAME_MAX];
    const char *in[3] = {x, NULL, NULL};
    int n = settings(ls).use_bias ? 2 : 1;
    if (!onnx_weights(g, lp, n, in + 1))
        return 1;
    onnx_value_name(out, lp->index, "conv");
    onnx_node_begin(g, "Conv", in, n + 1, out);
    onnx_window_attrs(g, lp);
    onnx_node_end(g);
    onnx_activation(g, ls->act, out, y, lp->index);
    return 0;
}

const layer_ops layer_conv2d_ops = {
    .name = "conv2d",
    .keys = conv_keys,
    .example = "{conv2d: FILTERS, kernel_size: 3}",
    .keras_args = conv_keras,
    .parse = conv2d_parse,
    .to_json = conv_json,
    .abbrev = conv2d_abbrev,
    .fuse_key = conv_fuse_key,
    .hyper = conv_hyper,
    .with_act = conv_with_act,
    .plan = conv_plan,
    .init = conv_init,
    .forward = conv_forward,
    .backward = conv_backward,
    .forward_next = conv_forward_next,
    .backward_next = conv_backward_next,
    .shares_input = 1,
    .reads_output = 1,
    .tensors = conv_tensors,
    .convert = conv_convert,
    .macs = conv_macs,
    .onnx = conv_onnx,
};
