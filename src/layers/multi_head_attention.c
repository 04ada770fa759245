/*
 * layers/multi_head_attention: Keras's MultiHeadAttention as self-attention
 * (MultiHeadAttention()(x, x): query, key and value are the layer's input
 * sequence [T, E]), its syntax, spec and compute.
 *
 *   Q_h = X Wq_h^T + bq_h, K_h, V_h likewise    (head h of H; key_dim dk,
 *                                                value_dim dv)
 *   A_h = softmax(Q_h K_h^T / sqrt(dk))          over the keys, masked
 *   Y   = sum over h of dropout(A_h) V_h Wo_h^T + bo
 *
 * Under a token mask (mask_zero) a padded key gets no weight and a padded
 * query's row is 0 (Keras 3's attention mask from the query and value
 * masks, whose masked softmax zeroes a row with no key); causal: true is
 * Keras's use_causal_mask. The mask passes on. Dropout on the weights is
 * the dropout layer's (its rate per model, PBT may change it).
 *
 * Per model, the projections are one gemm each over every head (the
 * kernels Wq, Wk, Wv lie one after another: [Wq; Wk; Wv] is one matrix, and
 * so are their biases), and the scores and contexts one batched gemm per
 * head over the n samples of the batch (slots_of). Saved from forward to
 * backward, per sample: Q, K, V, the [H, T, T] weights, their dropout mask
 * and the context; scratch (the workspace): the dropped weights and the
 * backward's gradients. At a dropout rate of 0 the mask is neither drawn
 * nor applied: the weights are used as they are (its room stays planned:
 * the group's other models, or PBT, may drop).
 *
 * Weights, torch's nn.Linear layout: q_proj.weight [H dk, E] (head h's rows
 * h dk .. h dk + dk - 1), k_proj, v_proj [H dv, E], out_proj.weight
 * [E, H dv], each with .bias.
 */
#include "io/onnx.h"
#include "layers/pass.h"
#include "plan/keys.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- syntax and spec: {multi_head_attention: {num_heads, key_dim,
 * value_dim, dropout, causal, use_bias}} ---- */

typedef struct mha_settings {
    int heads, key_dim, value_dim; /* value_dim: key_dim unless given */
    float dropout;                 /* on the attention weights, in [0, 1) */
    int causal;                    /* Keras's use_causal_mask */
    int use_bias;
} mha_settings;
LAYER_SETTINGS_OF(mha_settings);

static mha_settings settings(const layer_spec *ls) { return mha_settings_of(ls); }

static const char *const mha_keys[] = {"num_heads", "key_dim", "value_dim", "dropout",
                                       "causal",    "use_bias", NULL};

/* Those a plan may write beside the kind by mistake, for the hint (dropout
 * and use_bias are names of their own there: a layer kind, dense's key). */
static const char *const mha_inner[] = {"num_heads", "key_dim", "value_dim", "causal", NULL};

static const layer_keras_arg mha_keras[] = {
    {"use_causal_mask", "write {multi_head_attention: {num_heads: 4, key_dim: 16, causal: "
                        "true}} (Keras's use_causal_mask=True)"},
    {NULL, NULL}};

#define MHA_EXAMPLE "{multi_head_attention: {num_heads: 4, key_dim: 16}}"

static cohort_status mha_parse(const layer_syntax *s, layer_spec *ls)
{
    const yctx *c = s->c;
    const ynode *v = s->value, *x;
    char got[80], what[200];
    if (!v || v->type != YNODE_MAP)
        return ynode_fail(c, v ? v : s->node,
                          "multi_head_attention of %s of %s must be a map like " MHA_EXAMPLE
                          ", got %s",
                          s->where, s->label,
                          v ? ynode_describe(v, got, sizeof got) : "nothing");
    cohort_status st = plan_check_keys(c, v, mha_keys,
                                       "in multi_head_attention of %s of %s", s->where,
                                       s->label);
    if (st)
        return st;
    mha_settings d = {0, 0, 0, 0.0f, 0, 1};
    static const char *const ints[] = {"num_heads", "key_dim", "value_dim"};
    int *dst[] = {&d.heads, &d.key_dim, &d.value_dim};
    for (int i = 0; i < 3; i++) {
        long long n;
        if (!(x = ymap_get(v, ints[i]))) {
            if (i < 2)
                return ynode_fail(c, v, "multi_head_attention of %s of %s needs %s: "
                                        "write " MHA_EXAMPLE,
                                  s->where, s->label, ints[i]);
            continue;
        }
        snprintf(what, sizeof what, "%s of %s", ints[i], s->where);
        if ((st = yget_int(c, x, what, 1, LAYER_UNITS_MAX, &n)))
            return st;
        *dst[i] = (int)n;
    }
    if (!d.value_dim)
        d.value_dim = d.key_dim;
    if ((x = ymap_get(v, "dropout"))) {
        double r;
        snprintf(what, sizeof what, "dropout of %s", s->where);
        if ((st = yget_num(c, x, what, YR_UNIT, 1, &r)))
            return st;
        d.dropout = (float)r;
    }
    if ((x = ymap_get(v, "causal"))) {
        snprintf(what, sizeof what, "causal of %s", s->where);
        if ((st = yget_bool(c, x, what, &d.causal)))
            return st;
    }
    if ((x = ymap_get(v, "use_bias"))) {
        snprintf(what, sizeof what, "use_bias of %s", s->where);
        if ((st = yget_bool(c, x, what, &d.use_bias)))
            return st;
    }
    mha_settings_put(ls, &d);
    return COHORT_OK;
}

static void mha_json(const layer_spec *ls, strbuf *b)
{
    mha_settings d = settings(ls);
    sb_printf(b, "\"multi_head_attention\":{\"num_heads\":%d,\"key_dim\":%d,\"value_dim\":%d,"
                 "\"dropout\":",
              d.heads, d.key_dim, d.value_dim);
    sb_json_float(b, d.dropout);
    sb_printf(b, ",\"causal\":%s,\"use_bias\":%s}", d.causal ? "true" : "false",
              d.use_bias ? "true" : "false");
}

static int mha_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    mha_settings d = settings(ls);
    return snprintf(buf, n, "mha%dx%d%s", d.heads, d.key_dim, d.causal ? "c" : "");
}

static int mha_fuse_key(const layer_spec *ls, int *key)
{
    mha_settings d = settings(ls);
    key[0] = d.heads;
    key[1] = d.key_dim;
    key[2] = d.value_dim;
    key[3] = d.causal;
    key[4] = d.use_bias;
    return 5;
}

static float *dropout_field(layer_spec *ls)
{
    return LAYER_SETTINGS_FLOAT(mha_settings, dropout, ls);
}

static const layer_hyper mha_hyper[] = {{"dropout", 0, 1, 0, 1, dropout_field},
                                        {NULL, 0, 0, 0, 0, NULL}};

/* ---- shapes ---- */

/* The sizes every pass reads. */
typedef struct mha_dims {
    int H, dk, dv, T, E;
    size_t wq, wk, wv, wo, bq, bk, bv, bo; /* parameter offsets from p_off */
    size_t n_w;                            /* floats of the four kernels */
} mha_dims;

/* From the plan, which keeps the settings that decide sizes (model.h: kh
 * heads, kw key_dim, sh value_dim, sw use_bias). */
static mha_dims dims_of(const layer_plan *lp)
{
    mha_dims m;
    m.H = lp->kh, m.dk = lp->kw, m.dv = lp->sh;
    m.T = lp->in.h, m.E = lp->in.c;
    size_t H = (size_t)m.H, E = (size_t)m.E, hk = H * (size_t)m.dk, hv = H * (size_t)m.dv;
    m.wq = 0;
    m.wk = hk * E;
    m.wv = 2 * hk * E;
    m.wo = 2 * hk * E + hv * E;
    m.n_w = m.wo + E * hv;
    m.bq = m.n_w;
    m.bk = m.bq + hk;
    m.bv = m.bk + hk;
    m.bo = m.bv + hv;
    return m;
}

/* Per sample: the saved tensors (the projections Z = [Q K V], the weights,
 * their mask and the context) and the scratch (the dropped weights or
 * their gradient, dC, dZ). */
static size_t z_width(const mha_dims *m)
{
    return (size_t)m->H * (2 * (size_t)m->dk + (size_t)m->dv);
}
static size_t saved_per_row(const mha_dims *m)
{
    return (size_t)m->T * (z_width(m) + (size_t)m->H * ((size_t)m->dv + 2 * (size_t)m->T));
}
static size_t work_per_row(const mha_dims *m)
{
    return (size_t)m->T * (z_width(m) + (size_t)m->H * ((size_t)m->dv + (size_t)m->T));
}

static int mha_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    if (lp->in.rank != 2) {
        char s[48];
        shape_format(lp->in, s, sizeof s);
        snprintf(msg, len, "multi_head_attention takes a sequence [T, E], but gets %s %s; give "
                           "the data as [n, T, F] (or data.input_shape: [T, F])",
                 lp->in.rank == 3 ? "an image" : "flat samples", s);
        return 1;
    }
    mha_settings d = settings(ls);
    lp->kh = d.heads, lp->kw = d.key_dim, lp->sh = d.value_dim, lp->sw = d.use_bias;
    mha_dims m = dims_of(lp);
    size_t E = (size_t)m.E;
    lp->out = lp->in;
    lp->n_params = m.n_w + (d.use_bias ? 2 * (size_t)m.H * (size_t)m.dk +
                                             (size_t)m.H * (size_t)m.dv + E
                                       : 0);
    lp->n_saved = saved_per_row(&m);
    lp->n_work = work_per_row(&m);
    return 0;
}

/* The projections, the scores and the contexts, per sample. */
static double mha_macs(const layer_plan *lp)
{
    mha_dims m = dims_of(lp);
    double T = m.T, E = m.E, H = m.H;
    return T * E * H * (2.0 * m.dk + 2.0 * m.dv) + H * T * T * (m.dk + m.dv);
}

/* ---- init (Keras 3: glorot_uniform over each kernel's input and output
 * axes, as a dense layer's; zero biases) ---- */

static void glorot(rng_state *r, float *W, size_t n_out, size_t n_in)
{
    float limit = sqrtf(6.0f / (float)(n_in + n_out));
    for (size_t i = 0; i < n_out * n_in; i++)
        W[i] = (2.0f * rng_uniform(r) - 1.0f) * limit;
}

static void mha_init(const layer_spec *ls, const layer_plan *lp, uint64_t seed, float *P)
{
    mha_settings d = settings(ls);
    mha_dims m = dims_of(lp);
    size_t E = (size_t)m.E, hk = (size_t)m.H * (size_t)m.dk, hv = (size_t)m.H * (size_t)m.dv;
    float *W = P + lp->p_off;
    rng_state r;
    rng_seed(&r, seed, 1000 + (uint64_t)lp->index);
    glorot(&r, W + m.wq, hk, E);
    glorot(&r, W + m.wk, hk, E);
    glorot(&r, W + m.wv, hv, E);
    glorot(&r, W + m.wo, E, hv);
    if (d.use_bias)
        memset(W + m.bq, 0, (2 * hk + hv + E) * sizeof(float));
}

/* ---- forward and backward, one model at a time ---- */

/* Model k's slots, packed for the pass's n samples in room for the batch's
 * B: Z [n, T, zw] (row t of sample b: Q's heads, then K's, then V's, each
 * head's dk or dv columns together), the weights P and their mask M [H, n,
 * T, T], the context C [n, T, H dv] (head h's columns h dv ..); scratch A
 * [H, n, T, T], dC like C, dZ like Z. The projections are then one product
 * each over every head (Z = X [Wq; Wk; Wv]^T, Y = C Wo^T, and their
 * gradients), and head h's (sample b) problems lie one stride (T rows of Z
 * or C) from the next. */
typedef struct mha_slots {
    float *Z, *P, *M, *C; /* saved */
    float *A, *dC, *dZ;   /* scratch */
} mha_slots;

static mha_slots slots_of(const layer_pass *p, const mha_dims *m, int k)
{
    size_t B = (size_t)p->batch, BT = B * (size_t)m->T;
    size_t z = BT * z_width(m), c = BT * (size_t)m->H * (size_t)m->dv;
    size_t tt = BT * (size_t)m->H * (size_t)m->T;
    mha_slots s;
    float *sv = p->saved + (size_t)k * p->s_saved, *w = p->work + (size_t)k * p->s_work;
    s.Z = sv;
    s.P = s.Z + z;
    s.M = s.P + tt;
    s.C = s.M + tt;
    s.A = w;
    s.dC = s.A + tt;
    s.dZ = s.dC + c;
    return s;
}

/* Whether model k's weights go through dropout: a rate above 0. Its mask
 * is drawn in every forward pass then (all 1 outside training, as a
 * gradient taken without dropout reads it too), and applied in backward;
 * at rate 0 the weights are used as they are. */
static int drops(const layer_pass *p, int k) { return settings(p->ls[k]).dropout > 0.0f; }

static void mha_forward(const layer_pass *p)
{
    const backend_ops *be = p->be;
    backend_ctx *ctx = p->ctx;
    mha_settings d0 = settings(p->ls[0]);
    mha_dims m = dims_of(p->lp);
    int n = p->rows, T = m.T, E = m.E, H = m.H, dk = m.dk, dv = m.dv, BT = n * T;
    int zw = (int)z_width(&m), cw = H * dv, hk = H * dk;
    size_t tt = (size_t)T * (size_t)T, ntt = (size_t)n * tt, zt = (size_t)T * (size_t)zw;
    size_t ct = (size_t)T * (size_t)cw;
    float scale = 1.0f / sqrtf((float)dk);
    for (int k = 0; k < p->count; k++) {
        const float *X = p->X + (size_t)k * p->sX, *W = p->W + (size_t)k * p->sP + p->lp->p_off;
        float *Y = p->Y + (size_t)k * p->sY;
        mha_slots s = slots_of(p, &m, k);
        /* The projections of every head, one product. */
        be->gemm(ctx, 0, 1, BT, zw, E, 1.0f, X, E, 0, W + m.wq, E, 0, 0.0f, s.Z, zw, 0, 1);
        if (d0.use_bias)
            be->bias_act(ctx, s.Z, 0, W + m.bq, 0, BT, zw, ACT_LINEAR, 1);
        /* The weights, per (head, sample), then their dropout (drops). */
        for (int h = 0; h < H; h++)
            be->gemm(ctx, 0, 1, T, T, dk, scale, s.Z + (size_t)h * dk, zw, zt,
                     s.Z + (size_t)(hk + h * dk), zw, zt, 0.0f, s.P + (size_t)h * ntt, T, tt, n);
        be->attn_softmax_fwd(ctx, s.P, 0, p->tokens ? p->tokens + (size_t)k * p->s_tokens : NULL,
                             0, n, H, T, d0.causal, 1);
        const float *A = s.P;
        if (drops(p, k)) {
            float rate = p->training ? settings(p->ls[k]).dropout : 0.0f;
            uint64_t key = p->seed[k] * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(p->lp->index + 1);
            size_t per = (size_t)p->batch * (size_t)H * tt;
            be->dropout_fwd(ctx, s.A, s.P, s.M, 0, (size_t)H * ntt, &rate, &key,
                            p->counter * per, 1);
            A = s.A;
        }
        /* The context, each head into its columns; then the output projection. */
        for (int h = 0; h < H; h++)
            be->gemm(ctx, 0, 0, T, dv, T, 1.0f, A + (size_t)h * ntt, T, tt,
                     s.Z + (size_t)(2 * hk + h * dv), zw, zt, 0.0f, s.C + (size_t)h * dv, cw, ct,
                     n);
        be->gemm(ctx, 0, 1, BT, E, cw, 1.0f, s.C, cw, 0, W + m.wo, cw, 0, 0.0f, Y, E, 0, 1);
        if (d0.use_bias)
            be->bias_act(ctx, Y, 0, W + m.bo, 0, BT, E, ACT_LINEAR, 1);
    }
}

static int mha_backward(const layer_pass *p)
{
    const backend_ops *be = p->be;
    backend_ctx *ctx = p->ctx;
    mha_settings d0 = settings(p->ls[0]);
    mha_dims m = dims_of(p->lp);
    int n = p->rows, T = m.T, E = m.E, H = m.H, dk = m.dk, dv = m.dv, BT = n * T;
    int zw = (int)z_width(&m), cw = H * dv, hk = H * dk;
    size_t tt = (size_t)T * (size_t)T, ntt = (size_t)n * tt, zt = (size_t)T * (size_t)zw;
    size_t ct = (size_t)T * (size_t)cw;
    float scale = 1.0f / sqrtf((float)dk);
    for (int k = 0; k < p->count; k++) {
        const float *X = p->X + (size_t)k * p->sX, *W = p->W + (size_t)k * p->sP + p->lp->p_off;
        float *G = p->G + (size_t)k * p->sP + p->lp->p_off;
        const float *dY = p->dY + (size_t)k * p->sd;
        float *dX = p->dX ? p->dX + (size_t)k * p->sd : NULL;
        mha_slots s = slots_of(p, &m, k);
        /* The output projection: its gradients, and dC. */
        if (d0.use_bias)
            be->bias_grad(ctx, G + m.bo, 0, dY, 0, BT, E, 1);
        be->gemm(ctx, 1, 0, E, cw, BT, 1.0f, dY, E, 0, s.C, cw, 0, 0.0f, G + m.wo, cw, 0, 1);
        be->gemm(ctx, 0, 0, BT, cw, E, 1.0f, dY, E, 0, W + m.wo, cw, 0, 0.0f, s.dC, cw, 0, 1);
        /* dV from the dropped weights (P itself at rate 0); then their
         * gradient, through the dropout mask and the softmax, into the
         * scores' (A). */
        int drop = drops(p, k);
        if (drop) {
            be->copy(ctx, s.A, s.P, 0, (size_t)H * ntt, 1);
            be->mul(ctx, s.A, 0, s.M, 0, (size_t)H * ntt, 1);
        }
        const float *Ad = drop ? s.A : s.P;
        for (int h = 0; h < H; h++)
            be->gemm(ctx, 1, 0, T, dv, T, 1.0f, Ad + (size_t)h * ntt, T, tt, s.dC + (size_t)h * dv,
                     cw, ct, 0.0f, s.dZ + (size_t)(2 * hk + h * dv), zw, zt, n);
        for (int h = 0; h < H; h++)
            be->gemm(ctx, 0, 1, T, T, dv, 1.0f, s.dC + (size_t)h * dv, cw, ct,
                     s.Z + (size_t)(2 * hk + h * dv), zw, zt, 0.0f, s.A + (size_t)h * ntt, T, tt,
                     n);
        if (drop)
            be->mul(ctx, s.A, 0, s.M, 0, (size_t)H * ntt, 1);
        be->attn_softmax_bwd(ctx, s.A, 0, s.P, 0, n, H, T, 1);
        for (int h = 0; h < H; h++) {
            const float *Ah = s.A + (size_t)h * ntt;
            be->gemm(ctx, 0, 0, T, dk, T, scale, Ah, T, tt, s.Z + (size_t)(hk + h * dk), zw, zt,
                     0.0f, s.dZ + (size_t)h * dk, zw, zt, n);
            be->gemm(ctx, 1, 0, T, dk, T, scale, Ah, T, tt, s.Z + (size_t)h * dk, zw, zt, 0.0f,
                     s.dZ + (size_t)(hk + h * dk), zw, zt, n);
        }
        /* The projections' gradients and dX, one product each over every head. */
        be->gemm(ctx, 1, 0, zw, E, BT, 1.0f, s.dZ, zw, 0, X, E, 0, 0.0f, G + m.wq, E, 0, 1);
        if (d0.use_bias)
            be->bias_grad(ctx, G + m.bq, 0, s.dZ, 0, BT, zw, 1);
        if (dX)
            be->gemm(ctx, 0, 0, BT, E, zw, 1.0f, s.dZ, zw, 0, W + m.wq, E, 0, 0.0f, dX, E, 0, 1);
    }
    return 0;
}

static int mha_tensors(const layer_plan *lp, layer_tensor *t)
{
    mha_dims m = dims_of(lp);
    int64_t E = m.E, hk = (int64_t)m.H * m.dk, hv = (int64_t)m.H * m.dv;
    size_t o = lp->p_off;
    t[0] = (layer_tensor){"q_proj.weight", 2, {hk, E}, o + m.wq, (size_t)(hk * E)};
    t[1] = (layer_tensor){"k_proj.weight", 2, {hk, E}, o + m.wk, (size_t)(hk * E)};
    t[2] = (layer_tensor){"v_proj.weight", 2, {hv, E}, o + m.wv, (size_t)(hv * E)};
    t[3] = (layer_tensor){"out_proj.weight", 2, {E, hv}, o + m.wo, (size_t)(E * hv)};
    if (!lp->sw)
        return 4;
    t[4] = (layer_tensor){"q_proj.bias", 1, {hk}, o + m.bq, (size_t)hk};
    t[5] = (layer_tensor){"k_proj.bias", 1, {hk}, o + m.bk, (size_t)hk};
    t[6] = (layer_tensor){"v_proj.bias", 1, {hv}, o + m.bv, (size_t)hv};
    t[7] = (layer_tensor){"out_proj.bias", 1, {E}, o + m.bo, (size_t)E};
    return 8;
}

/* ---- export: the projections as MatMuls, the heads by Reshape and
 * Transpose [N, H, T, d], the scores' softmax over the keys, the context
 * and the output projection. Keys that take no part (padding, whose mask
 * comes from the input ids, onnx_mask; later steps, causal) get -1e9 added
 * to their scores, and the weights are multiplied by the same 0/1 mask, so
 * that a row with no key (a padded query) is 0 as attn_rows.h makes it. ---- */

/* x [N, T, E] projected by tensor k (and bias k + 4) into [N, H, T, d]. */
static void mha_heads(onnx_graph *g, const layer_plan *lp, const char *x, const char **w,
                      int k, int dh, const char *what, char *out)
{
    mha_dims m = dims_of(lp);
    char p[ONNX_NAME_MAX], r[ONNX_NAME_MAX], name[32];
    snprintf(name, sizeof name, "%s.proj", what);
    onnx_linear(g, x, w[k], lp->sw ? w[k + 4] : NULL, p, lp->index, name);
    int64_t shape[4] = {-1, m.T, m.H, dh};
    static const int64_t perm[4] = {0, 2, 1, 3};
    snprintf(name, sizeof name, "%s.split", what);
    onnx_reshape(g, p, shape, 4, r, lp->index, name);
    snprintf(name, sizeof name, "%s.heads", what);
    onnx_transpose(g, r, perm, 4, out, lp->index, name);
}

static int mha_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp, const char *x,
                    char *y, char *msg, size_t len)
{
    (void)msg;
    (void)len;
    mha_dims m = dims_of(lp);
    int i = lp->index, T = m.T, causal = settings(ls).causal;
    const char *w[8];
    if (!onnx_weights(g, lp, lp->sw ? 8 : 4, w))
        return 1;
    char q[ONNX_NAME_MAX], k[ONNX_NAME_MAX], v[ONNX_NAME_MAX], kt[ONNX_NAME_MAX],
        s[ONNX_NAME_MAX], a[ONNX_NAME_MAX], b[ONNX_NAME_MAX], c[ONNX_NAME_MAX],
        keep[ONNX_NAME_MAX] = "", add[ONNX_NAME_MAX] = "";
    mha_heads(g, lp, x, w, 0, m.dk, "q", q);
    mha_heads(g, lp, x, w, 1, m.dk, "k", k);
    mha_heads(g, lp, x, w, 2, m.dv, "v", v);
    static const int64_t kperm[4] = {0, 1, 3, 2};
    onnx_transpose(g, k, kperm, 4, kt, i, "k.t");
    const char *in[3] = {q, kt, NULL};
    onnx_op(g, "MatMul", in, 2, a, i, "scores.raw");
    float scale = 1.0f / sqrtf((float)m.dk);
    int64_t scalar = 0;
    onnx_floats(g, &scale, &scalar, 0, b, i, "scale");
    in[0] = a;
    in[1] = b;
    onnx_op(g, "Mul", in, 2, s, i, "scores");
    /* The keys that take part: keep [T, T] (causal) or [N, 1, T, T] (mask). */
    if (causal) {
        float *lower = malloc((size_t)T * (size_t)T * sizeof(float));
        if (!lower) {
            snprintf(msg, len, "out of memory");
            return 1;
        }
        for (int r = 0; r < T; r++)
            for (int j = 0; j < T; j++)
                lower[(size_t)r * (size_t)T + (size_t)j] = j <= r ? 1.0f : 0.0f;
        int64_t dims[2] = {T, T};
        onnx_floats(g, lower, dims, 2, keep, i, "causal");
        free(lower);
    }
    if (lp->mask_in) {
        int64_t qs[4] = {-1, 1, T, 1}, ks[4] = {-1, 1, 1, T};
        const char *mf = onnx_mask(g, ONNX_MASK_FLOAT);
        onnx_reshape(g, mf, qs, 4, a, i, "mask.queries");
        onnx_reshape(g, mf, ks, 4, b, i, "mask.keys");
        in[0] = a;
        in[1] = b;
        onnx_op(g, "Mul", in, 2, c, i, "mask.pairs");
        if (causal) {
            in[0] = c;
            in[1] = keep;
            onnx_op(g, "Mul", in, 2, a, i, "mask.keep");
            str_copy(keep, sizeof keep, a);
        } else {
            str_copy(keep, sizeof keep, c);
        }
    }
    const char *weights = NULL;
    if (keep[0]) {
        float one = 1.0f, big = 1e9f;
        onnx_floats(g, &one, &scalar, 0, a, i, "one");
        in[0] = keep;
        in[1] = a;
        onnx_op(g, "Sub", in, 2, b, i, "mask.off"); /* 0 or -1 */
        onnx_floats(g, &big, &scalar, 0, a, i, "big");
        in[0] = b;
        in[1] = a;
        onnx_op(g, "Mul", in, 2, add, i, "mask.add");
        in[0] = s;
        in[1] = add;
        onnx_op(g, "Add", in, 2, c, i, "scores.masked");
        str_copy(s, sizeof s, c);
    }
    onnx_value_name(a, i, "softmax");
    in[0] = s;
    onnx_node_begin(g, "Softmax", in, 1, a);
    onnx_attr_int(g, "axis", -1);
    onnx_node_end(g);
    weights = a;
    if (keep[0]) {
        in[0] = a;
        in[1] = keep;
        onnx_op(g, "Mul", in, 2, b, i, "weights");
        weights = b;
    }
    /* The context [N, H, T, dv] to [N, T, H*dv], then the output projection. */
    in[0] = weights;
    in[1] = v;
    onnx_op(g, "MatMul", in, 2, c, i, "context");
    static const int64_t perm[4] = {0, 2, 1, 3};
    onnx_transpose(g, c, perm, 4, a, i, "context.t");
    int64_t shape[3] = {-1, T, (int64_t)m.H * m.dv};
    onnx_reshape(g, a, shape, 3, c, i, "context.heads");
    onnx_linear(g, c, w[3], lp->sw ? w[7] : NULL, y, i, "out");
    return 0;
}

const layer_ops layer_multi_head_attention_ops = {
    .name = "multi_head_attention",
    .inner = mha_inner,
    .hint = "write " MHA_EXAMPLE,
    .example = MHA_EXAMPLE,
    .keras_args = mha_keras,
    .parse = mha_parse,
    .to_json = mha_json,
    .abbrev = mha_abbrev,
    .fuse_key = mha_fuse_key,
    .hyper = mha_hyper,
    .plan = mha_plan,
    .init = mha_init,
    .forward = mha_forward,
    .backward = mha_backward,
    .takes_mask = 1,
    .takes_sequence = 1,
    .tensors = mha_tensors,
    .macs = mha_macs,
    .onnx = mha_onnx,
};
