/*
 * layers/batch_norm: the BatchNormalization layer, its syntax, spec and
 * compute. BatchNormalization over the last axis (the channels of an image, the
 * features of a flat sample), as Keras's: training normalizes with the
 * batch's statistics and moves the moving mean and variance by `momentum`;
 * inference uses the moving ones. gamma and beta are trained; the moving
 * statistics are the layer's state, which no optimizer touches. Saved for
 * backward: each channel's batch mean and 1/sqrt(var + epsilon).
 */
#include "io/onnx.h"
#include "layers/pass.h"
#include "plan/keys.h"

#include <stdio.h>
#include <string.h>

/* ---- syntax and spec: batch_normalization, or {batch_normalization:
 * {momentum: 0.99, epsilon: 0.001}} ---- */

typedef struct bn_settings {
    float momentum; /* Keras's momentum (0.99) */
    float epsilon;  /* 0.001 */
} bn_settings;
LAYER_SETTINGS_OF(bn_settings);

static bn_settings settings(const layer_spec *ls) { return bn_settings_of(ls); }

static const char *const bn_keys[] = {"momentum", "epsilon", NULL};

static cohort_status bn_parse(const layer_syntax *s, layer_spec *ls)
{
    bn_settings d = {0.99f, 0.001f};
    const yctx *c = s->c;
    const ynode *v = s->value;
    char got[80], what[200];
    bn_settings_put(ls, &d);
    if (layer_no_settings(v))
        return COHORT_OK;
    if (v->type != YNODE_MAP)
        return ynode_fail(c, v, "batch_normalization of %s of %s must be a map like "
                                "{momentum: 0.99, epsilon: 0.001}, or nothing, got %s",
                          s->where, s->label, ynode_describe(v, got, sizeof got));
    cohort_status st = plan_check_keys(c, v, bn_keys, "in batch_normalization of %s of %s",
                                       s->where, s->label);
    if (st)
        return st;
    const ynode *x;
    double num;
    if ((x = ymap_get(v, "momentum"))) {
        snprintf(what, sizeof what, "momentum of %s", s->where);
        if ((st = yget_num(c, x, what, YR_UNIT, 1, &num)))
            return st;
        d.momentum = (float)num;
    }
    if ((x = ymap_get(v, "epsilon"))) {
        snprintf(what, sizeof what, "epsilon of %s", s->where);
        if ((st = yget_num(c, x, what, YR_POSITIVE, 1, &num)))
            return st;
        d.epsilon = (float)num;
    }
    bn_settings_put(ls, &d);
    return COHORT_OK;
}

static void bn_json(const layer_spec *ls, strbuf *b)
{
    sb_puts(b, "\"batch_normalization\":{\"momentum\":");
    sb_json_float(b, settings(ls).momentum);
    sb_puts(b, ",\"epsilon\":");
    sb_json_float(b, settings(ls).epsilon);
    sb_putn(b, "}", 1);
}

static int bn_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    (void)ls;
    return snprintf(buf, n, "bn");
}

/* ---- shapes, init, forward, backward, weight file ---- */

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
        p->host[k] = !p->active || p->active[k] ? settings(p->ls[k]).momentum : 1.0f;
        p->host[p->count + k] = settings(p->ls[k]).epsilon;
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

/* After a flatten of an image, the file's features are in torch's order
 * (BatchNorm1d after Flatten). */
static void bn_convert(const layer_plan *lp, int i, float *P, float *file, int to_file)
{
    layer_tensor t[4];
    bn_tensors(lp, t);
    layer_convert_features(lp, &t[i], P, file, to_file);
}

/* ---- export: BatchNormalization with the moving statistics; an image's
 * per channel (NCHW), flat features per feature, in their file's order ((C,
 * H, W) after a flatten, as the graph's), a sequence's per feature of its
 * last axis (transposed to [N, C, T] and back) ---- */

static int bn_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp, const char *x,
                   char *y, char *msg, size_t len)
{
    (void)msg;
    (void)len;
    static const int64_t swap[3] = {0, 2, 1};
    char out[ONNX_NAME_MAX], nct[ONNX_NAME_MAX];
    const char *in[5] = {x};
    if (!onnx_weights(g, lp, 4, in + 1))
        return 1;
    if (lp->in.rank == 2) { /* a sequence [N, T, C]: ONNX's channels are axis 1 */
        onnx_transpose(g, x, swap, 3, nct, lp->index, "nct");
        in[0] = nct;
    }
    onnx_value_name(out, lp->index, "bn");
    onnx_node_begin(g, "BatchNormalization", in, 5, out);
    onnx_attr_float(g, "epsilon", settings(ls).epsilon);
    onnx_node_end(g);
    if (lp->in.rank == 2)
        onnx_transpose(g, out, swap, 3, y, lp->index, "ntc");
    else
        str_copy(y, ONNX_NAME_MAX, out);
    return 0;
}

const layer_ops layer_batch_norm_ops = {
    .name = "batch_normalization",
    .inner = bn_keys,
    .hint = "write {batch_normalization: {momentum: 0.99, epsilon: 0.001}}",
    .parse = bn_parse,
    .to_json = bn_json,
    .abbrev = bn_abbrev,
    .fuse_key = layer_fuse_any,
    .plan = bn_plan,
    .init = bn_init,
    .forward = bn_forward,
    .backward = bn_backward,
    .shares_input = 1,
    .keeps_order = 1,
    .tensors = bn_tensors,
    .convert = bn_convert,
    .onnx = bn_onnx,
};
