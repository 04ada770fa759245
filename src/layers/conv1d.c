/*
 * layers/conv1d: the Conv1D layer, its syntax, spec and compute. A sequence
 * [T, C] lies in memory as the image T x 1 (model/shape.h), so Conv1D is
 * conv2d's compute (layers/conv.h: im2col + GEMM, the backend's fused
 * per-model ops) over the window k x 1, strides s x 1 and dilation d x 1;
 * Keras's causal padding is (k - 1)*d steps before the sequence and none
 * after, so output t reads inputs t - (k - 1)*d .. t alone. The weight file
 * holds W as torch.nn.Conv1d does: [filters, in_channels, kernel_size].
 * It takes no token mask (Keras's Conv1D does not support masking): after a
 * mask_zero embedding the layout refuses it.
 */
#include "io/onnx.h"
#include "layers/conv.h"
#include "layers/pass.h"
#include "util/util.h"

#include <stdio.h>
#include <string.h>

/* ---- syntax and spec: {conv1d: FILTERS, kernel_size, strides, padding,
 * dilation_rate, activation, use_bias, kernel_regularizer} ---- */

typedef struct conv1d_settings {
    int filters;
    int use_bias;  /* Keras's use_bias (true) */
    int kernel;    /* kernel_size */
    int strides;   /* (1) */
    int dilation;  /* dilation_rate (1) */
    pad_kind pad;  /* padding: valid (the default), same or causal */
} conv1d_settings;
LAYER_SETTINGS_OF(conv1d_settings);

static conv1d_settings settings(const layer_spec *ls) { return conv1d_settings_of(ls); }

static const char *const conv1d_keys[] = {"kernel_size", "strides",    "padding",
                                          "dilation_rate", "activation", "use_bias",
                                          "kernel_regularizer", NULL};

static const layer_keras_arg conv1d_keras[] = {
    {"filters", "a conv1d layer's filters are its value: {conv1d: 64, kernel_size: 5} "
                "(Keras's Conv1D(filters=64, kernel_size=5))"},
    {NULL, NULL}};

static cohort_status conv1d_parse(const layer_syntax *s, layer_spec *ls)
{
    conv1d_settings d = {0};
    char what[200];
    const ynode *v;
    cohort_status st = conv_parse_filters(s, ls, 5, &d.filters, &v);
    if (st)
        return st;
    snprintf(what, sizeof what, "kernel_size of %s", s->where);
    if ((st = layer_get_len(s->c, v, what, &d.kernel)))
        return st;
    d.strides = d.dilation = 1;
    d.pad = PAD_VALID;
    if ((v = ymap_get(s->map, "dilation_rate"))) {
        snprintf(what, sizeof what, "dilation_rate of %s", s->where);
        if ((st = layer_get_len(s->c, v, what, &d.dilation)))
            return st;
    }
    if ((st = layer_parse_window1d(s, 1, &d.strides, &d.pad)) ||
        (st = layer_parse_use_bias(s, &d.use_bias)) || (st = layer_parse_regularizer(s, ls)))
        return st;
    if (d.strides > 1 && d.dilation > 1)
        return ynode_fail(s->c, ymap_get(s->map, "strides"),
                          "%s of %s: strides %d with dilation_rate %d; Keras's Conv1D "
                          "takes a stride above 1 or a dilation above 1, not both",
                          s->where, s->label, d.strides, d.dilation);
    /* The window's span, (kernel - 1) * dilation + 1, in an int. */
    if ((long long)(d.kernel - 1) * d.dilation + 1 > LAYER_WINDOW_MAX)
        return ynode_fail(s->c, s->node, "%s of %s: kernel_size %d with dilation_rate %d "
                                         "spans %lld steps, more than %d",
                          s->where, s->label, d.kernel, d.dilation,
                          (long long)(d.kernel - 1) * d.dilation + 1, LAYER_WINDOW_MAX);
    conv1d_settings_put(ls, &d);
    return layer_parse_act(s, ls);
}

static void conv1d_json(const layer_spec *ls, strbuf *b)
{
    const conv1d_settings d = settings(ls);
    sb_printf(b, "\"conv1d\":%d,\"kernel_size\":%d,\"strides\":%d", d.filters, d.kernel,
              d.strides);
    layer_json_padding(b, d.pad);
    sb_printf(b, ",\"dilation_rate\":%d", d.dilation);
    conv_json_kernel(b, ls, d.use_bias);
}

static int conv1d_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    return conv_abbrev(ls, "c1d", settings(ls).filters, buf, n);
}

static int conv1d_fuse_key(const layer_spec *ls, int *key)
{
    const conv1d_settings d = settings(ls);
    int k[] = {d.filters, (int)ls->act, d.use_bias, d.kernel, d.strides, d.dilation, (int)d.pad};
    memcpy(key, k, sizeof k);
    return (int)(sizeof k / sizeof k[0]);
}

/* ---- shapes and compute (layers/conv.h over the window k x 1) ---- */

static int conv1d_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    char s[48];
    shape_format(lp->in, s, sizeof s);
    if (lp->in.rank != 2) {
        if (lp->in.rank == 3)
            snprintf(msg, len, "conv1d needs sequences [T, C], but gets images %s; use conv2d "
                               "on images", s);
        else
            snprintf(msg, len, "conv1d needs sequences [T, C], but gets flat samples %s; give "
                               "the data's shape with data.input_shape: [T, F]", s);
        return 1;
    }
    const conv1d_settings d = settings(ls);
    int span = (d.kernel - 1) * d.dilation + 1, out;
    window_dim(lp->in.h, span, d.strides, d.pad, &out, &lp->pad_top);
    if (out < 1) {
        if (d.dilation > 1)
            snprintf(msg, len, "conv1d's kernel_size %d with dilation_rate %d spans %d steps, "
                               "more than its input sequence %s has; use padding: same or "
                               "causal, or a smaller kernel_size or dilation_rate",
                     d.kernel, d.dilation, span, s);
        else
            snprintf(msg, len, "conv1d's kernel_size %d is longer than its input sequence %s; "
                               "use padding: same or causal, or a smaller kernel_size",
                     d.kernel, s);
        return 1;
    }
    lp->kh = d.kernel, lp->kw = 1, lp->sh = d.strides, lp->sw = 1, lp->pad_left = 0;
    lp->dh = d.dilation, lp->dw = 1;
    lp->out = shape_seq(out, d.filters);
    conv_plan_sizes(lp, d.filters, d.use_bias);
    return 0;
}

static void conv1d_init(const layer_spec *ls, const layer_plan *lp, uint64_t seed, float *P)
{
    conv_glorot_init(lp, settings(ls).filters, settings(ls).use_bias, seed, P);
}

static void conv1d_forward(const layer_pass *p)
{
    conv_run_forward(p, settings(p->ls[0]).use_bias);
}

static int conv1d_backward(const layer_pass *p)
{
    return conv_run_backward(p, settings(p->ls[0]).use_bias);
}

static int conv1d_tensors(const layer_plan *lp, layer_tensor *t)
{
    int64_t F = lp->out.c, C = lp->in.c, k = lp->kh, n = F * C * k;
    t[0] = (layer_tensor){"weight", 3, {F, C, k}, lp->p_off, (size_t)n};
    t[1] = (layer_tensor){"bias", 1, {F}, lp->p_off + (size_t)n, (size_t)F};
    return lp->n_params > (size_t)n ? 2 : 1; /* use_bias: false has none */
}

/* The model's [F, k, c] to the file's [F, c, k], or back. */
static void conv1d_convert(const layer_plan *lp, int i, float *P, float *file, int to_file)
{
    layer_tensor t[2];
    conv1d_tensors(lp, t);
    conv_reorder(lp, t, i, P, file, to_file);
}

/* ---- export: [N, T, C] to [N, C, T], ONNX's 1-D Conv (the file's W [F, C,
 * k] as it is; causal: all the padding before), back to [N, T, F], then the
 * activation ---- */

static int conv1d_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp,
                       const char *x, char *y, char *msg, size_t len)
{
    (void)msg;
    (void)len;
    static const int64_t perm[3] = {0, 2, 1};
    char nct[ONNX_NAME_MAX], conv[ONNX_NAME_MAX], ntc[ONNX_NAME_MAX];
    const char *in[3] = {nct, NULL, NULL};
    int n = settings(ls).use_bias ? 2 : 1;
    if (!onnx_weights(g, lp, n, in + 1))
        return 1;
    onnx_transpose(g, x, perm, 3, nct, lp->index, "nct");
    onnx_value_name(conv, lp->index, "conv");
    onnx_node_begin(g, "Conv", in, n + 1, conv);
    onnx_window1d_attrs(g, lp);
    onnx_node_end(g);
    onnx_transpose(g, conv, perm, 3, ntc, lp->index, "ntc");
    onnx_activation(g, ls->act, ntc, y, lp->index);
    return 0;
}

const layer_ops layer_conv1d_ops = {
    .name = "conv1d",
    .keys = conv1d_keys,
    .example = "{conv1d: FILTERS, kernel_size: 5}",
    .keras_args = conv1d_keras,
    .parse = conv1d_parse,
    .to_json = conv1d_json,
    .abbrev = conv1d_abbrev,
    .fuse_key = conv1d_fuse_key,
    .hyper = conv_hyper,
    .with_act = conv_with_act,
    .plan = conv1d_plan,
    .init = conv1d_init,
    .forward = conv1d_forward,
    .backward = conv1d_backward,
    .shares_input = 1,
    .reads_output = 1,
    .takes_sequence = 1,
    .tensors = conv1d_tensors,
    .convert = conv1d_convert,
    .macs = conv_macs,
    .onnx = conv1d_onnx,
};
