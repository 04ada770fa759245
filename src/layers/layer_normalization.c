/*
 * layers/layer_normalization: Keras's LayerNormalization (axis -1, center
 * and scale), its syntax, spec and compute. Each vector of the last axis
 * (a flat sample, a step of a sequence, a pixel of an image) is normalized
 * by its own mean and biased variance: y = gamma (x - mean) / sqrt(var +
 * epsilon) + beta, the same in training and inference. gamma and beta
 * [width] are trained (torch.nn.LayerNorm's weight and bias); kept from
 * forward to backward: each vector's mean and 1/sqrt(var + epsilon). It
 * passes a token mask on (each step is normalized alone). epsilon may
 * differ between the models of a group.
 */
#include "io/onnx.h"
#include "layers/pass.h"
#include "plan/keys.h"

#include <stdio.h>
#include <string.h>

/* ---- syntax and spec: layer_normalization, or {layer_normalization:
 * {epsilon: 0.001}} ---- */

typedef struct ln_settings {
    float epsilon; /* Keras's 1e-3 */
} ln_settings;
LAYER_SETTINGS_OF(ln_settings);

static ln_settings settings(const layer_spec *ls) { return ln_settings_of(ls); }

static const char *const ln_keys[] = {"epsilon", NULL};

static const layer_keras_arg ln_keras[] = {
    {"axis", "layer_normalization normalizes the last axis (Keras's axis=-1), the only one it "
             "takes"},
    {"center", "layer_normalization always has its beta (Keras's center=True)"},
    {"scale", "layer_normalization always has its gamma (Keras's scale=True)"},
    {NULL, NULL}};

static cohort_status ln_parse(const layer_syntax *s, layer_spec *ls)
{
    ln_settings d = {0.001f};
    const yctx *c = s->c;
    const ynode *v = s->value;
    char got[80], what[200];
    ln_settings_put(ls, &d);
    if (layer_no_settings(v))
        return COHORT_OK;
    if (v->type != YNODE_MAP)
        return ynode_fail(c, v, "layer_normalization of %s of %s must be a map like "
                                "{epsilon: 0.001}, or nothing, got %s",
                          s->where, s->label, ynode_describe(v, got, sizeof got));
    cohort_status st = plan_check_keys(c, v, ln_keys, "in layer_normalization of %s of %s",
                                       s->where, s->label);
    if (st)
        return st;
    const ynode *x = ymap_get(v, "epsilon");
    if (x) {
        double num;
        snprintf(what, sizeof what, "epsilon of %s", s->where);
        if ((st = yget_num(c, x, what, YR_POSITIVE, 1, &num)))
            return st;
        d.epsilon = (float)num;
    }
    ln_settings_put(ls, &d);
    return COHORT_OK;
}

static void ln_json(const layer_spec *ls, strbuf *b)
{
    sb_puts(b, "\"layer_normalization\":{\"epsilon\":");
    sb_json_float(b, settings(ls).epsilon);
    sb_putn(b, "}", 1);
}

static int ln_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    (void)ls;
    return snprintf(buf, n, "ln");
}

/* ---- shapes, init, forward, backward, weight file ---- */

/* Vectors per sample: its steps (a sequence) or pixels (an image); 1 flat. */
static size_t vectors(const layer_plan *lp) { return (size_t)lp->in.h * (size_t)lp->in.w; }

static int ln_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    (void)ls;
    (void)msg;
    (void)len;
    size_t C = (size_t)lp->in.c;
    lp->out = lp->in;
    lp->n_params = 2 * C;
    lp->n_saved = 2 * vectors(lp); /* each vector's mean and 1/std */
    return 0;
}

/* Keras: gamma 1, beta 0. */
static void ln_init(const layer_spec *ls, const layer_plan *lp, uint64_t seed, float *P)
{
    (void)ls;
    (void)seed;
    size_t C = (size_t)lp->in.c;
    for (size_t c = 0; c < C; c++) {
        P[lp->p_off + c] = 1.0f;
        P[lp->p_off + C + c] = 0.0f;
    }
}

static int ln_rows(const layer_pass *p) { return p->rows * (int)vectors(p->lp); }

static void ln_forward(const layer_pass *p)
{
    const layer_plan *lp = p->lp;
    int C = lp->in.c;
    const float *gamma = p->W + lp->p_off;
    for (int k = 0; k < p->count; k++)
        p->host[k] = settings(p->ls[k]).epsilon;
    p->be->ln_fwd(p->ctx, p->Y, p->sY, p->X, p->sX, gamma, gamma + C, p->sP,
                  p->saved, p->s_saved, p->host, ln_rows(p), C, p->count);
}

static int ln_backward(const layer_pass *p)
{
    const layer_plan *lp = p->lp;
    int C = lp->in.c;
    float *dgamma = p->G + lp->p_off;
    p->be->ln_bwd(p->ctx, p->dX, p->sd, p->dY, p->sd, p->X, p->sX, p->W + lp->p_off, p->sP,
                  p->saved, p->s_saved, dgamma, dgamma + C, p->sP, ln_rows(p), C, p->count);
    return 0;
}

static int ln_tensors(const layer_plan *lp, layer_tensor *t)
{
    int64_t C = lp->in.c;
    t[0] = (layer_tensor){"weight", 1, {C}, lp->p_off, (size_t)C};
    t[1] = (layer_tensor){"bias", 1, {C}, lp->p_off + (size_t)C, (size_t)C};
    return 2;
}

/* After a flatten of an image, the file's features are in torch's order
 * (LayerNorm after Flatten). */
static void ln_convert(const layer_plan *lp, int i, float *P, float *file, int to_file)
{
    layer_tensor t[2];
    ln_tensors(lp, t);
    layer_convert_features(lp, &t[i], P, file, to_file);
}


/* ---- export: ONNX's LayerNormalization (opset 17) over the last axis of a
 * flat sample or a sequence; an image, NCHW there, goes to NHWC and back
 * around it, so that each pixel's channels are normalized ---- */

static int ln_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp, const char *x,
                   char *y, char *msg, size_t len)
{
    (void)msg;
    (void)len;
    static const int64_t nhwc[4] = {0, 2, 3, 1}, nchw[4] = {0, 3, 1, 2};
    char out[ONNX_NAME_MAX], last[ONNX_NAME_MAX];
    const char *in[3] = {x};
    if (!onnx_weights(g, lp, 2, in + 1))
        return 1;
    if (lp->in.rank == 3) {
        onnx_transpose(g, x, nhwc, 4, last, lp->index, "nhwc");
        in[0] = last;
    }
    onnx_value_name(out, lp->index, "ln");
    onnx_node_begin(g, "LayerNormalization", in, 3, out);
    onnx_attr_int(g, "axis", -1);
    onnx_attr_float(g, "epsilon", settings(ls).epsilon);
    onnx_node_end(g);
    if (lp->in.rank == 3)
        onnx_transpose(g, out, nchw, 4, y, lp->index, "nchw");
    else
        str_copy(y, ONNX_NAME_MAX, out);
    return 0;
}

const layer_ops layer_layer_normalization_ops = {
    .name = "layer_normalization",
    .inner = ln_keys,
    .hint = "write {layer_normalization: {epsilon: 0.001}}",
    .keras_args = ln_keras,
    .parse = ln_parse,
    .to_json = ln_json,
    .abbrev = ln_abbrev,
    .fuse_key = layer_fuse_any,
    .plan = ln_plan,
    .init = ln_init,
    .forward = ln_forward,
    .backward = ln_backward,
    .shares_input = 1,
    .keeps_order = 1,
    .takes_mask = 1,
    .takes_sequence = 1,
    .tensors = ln_tensors,
    .convert = ln_convert,
    .onnx = ln_onnx,
};
