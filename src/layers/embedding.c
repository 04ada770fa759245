/*
 * layers/embedding: the Embedding layer, its syntax, spec and compute, as
 * Keras's: a sample of T token ids becomes the sequence [T, output_dim] of
 * their rows of a trained table W [input_dim, output_dim] (torch.nn.Embedding's
 * weight), initialized uniform in [-0.05, 0.05]. It reads the model's input,
 * so it is the first layer; its data are read as ids and each is checked to
 * be in [0, input_dim) before anything trains (layer_ops.tokens, data/tokens.c).
 * mask_zero makes id 0 padding: its output carries the token mask on
 * (layer_plan.mask_out) to the layers that honour it, and, as in Keras,
 * input_dim counts id 0 (a vocabulary of V words takes input_dim V + 1).
 * Backward: the table's gradient is the rows of dY added by id, in row order
 * (the backend's scatter_add_rows), the same bits on every thread count.
 */
#include "io/onnx.h"
#include "layers/pass.h"
#include "plan/keys.h"
#include "util/util.h"

#include <stdio.h>
#include <string.h>

/* ---- syntax and spec: {embedding: {input_dim: 30, output_dim: 64, mask_zero: false}},
 * or {embedding: [30, 64]} (Keras's Embedding(30, 64)) ---- */

typedef struct embedding_settings {
    int input_dim;  /* ids in [0, input_dim) */
    int output_dim; /* the width of a row */
    int mask_zero;  /* id 0 is padding (Keras's mask_zero, false) */
} embedding_settings;
LAYER_SETTINGS_OF(embedding_settings);

static embedding_settings settings(const layer_spec *ls) { return embedding_settings_of(ls); }

/* An id is a float of the data: exact below 2^24. */
#define EMBEDDING_IDS_MAX (1 << 24)

static const char *const embedding_inner[] = {"input_dim", "output_dim", "mask_zero", NULL};

static const layer_keras_arg embedding_keras[] = {
    {"embeddings_initializer", "an embedding starts uniform in [-0.05, 0.05] (Keras's default); "
                               "give other weights with init_from"},
    {NULL, NULL}};

static cohort_status embedding_parse(const layer_syntax *s, layer_spec *ls)
{
    embedding_settings d = {0, 0, 0};
    const yctx *c = s->c;
    const ynode *v = s->value;
    char got[80], what[200];
    long long n;
    cohort_status st;
    if (v && v->type == YNODE_SEQ && v->n == 2) { /* Keras's positional (input_dim, output_dim) */
        snprintf(what, sizeof what, "input_dim of the embedding at %s", s->where);
        if ((st = yget_int(c, v->vals[0], what, 1, EMBEDDING_IDS_MAX, &n)))
            return st;
        d.input_dim = (int)n;
        snprintf(what, sizeof what, "output_dim of the embedding at %s", s->where);
        if ((st = yget_int(c, v->vals[1], what, 1, LAYER_UNITS_MAX, &n)))
            return st;
        d.output_dim = (int)n;
        embedding_settings_put(ls, &d);
        return COHORT_OK;
    }
    if (!v || v->type != YNODE_MAP)
        return ynode_fail(c, v ? v : s->node,
                          "embedding of %s of %s must be a map like {input_dim: 30, "
                          "output_dim: 64, mask_zero: false} (or [input_dim, output_dim]), got %s",
                          s->where, s->label, v ? ynode_describe(v, got, sizeof got) : "nothing");
    if ((st = plan_check_keys(c, v, embedding_inner, "in the embedding of %s of %s",
                              s->where, s->label)))
        return st;
    static const char *const need[2] = {"input_dim", "output_dim"};
    const long long top[2] = {EMBEDDING_IDS_MAX, LAYER_UNITS_MAX};
    int *field[2] = {&d.input_dim, &d.output_dim};
    for (int i = 0; i < 2; i++) {
        const ynode *x = ymap_get(v, need[i]);
        if (!x)
            return ynode_fail(c, v, "the embedding of %s of %s needs %s (like "
                                    "{input_dim: 30, output_dim: 64}: ids in [0, input_dim), rows "
                                    "of output_dim values)",
                              s->where, s->label, need[i]);
        snprintf(what, sizeof what, "%s of the embedding at %s", need[i], s->where);
        if ((st = yget_int(c, x, what, 1, top[i], &n)))
            return st;
        *field[i] = (int)n;
    }
    const ynode *x = ymap_get(v, "mask_zero");
    if (x) {
        snprintf(what, sizeof what, "mask_zero of the embedding at %s", s->where);
        if ((st = yget_bool(c, x, what, &d.mask_zero)))
            return st;
        if (d.mask_zero && d.input_dim < 2)
            return ynode_fail(c, x, "the embedding of %s of %s has mask_zero with "
                                    "input_dim %d: id 0 is padding, so there is no word; a "
                                    "vocabulary of V words takes input_dim V + 1",
                              s->where, s->label, d.input_dim);
    }
    embedding_settings_put(ls, &d);
    return COHORT_OK;
}

static void embedding_json(const layer_spec *ls, strbuf *b)
{
    embedding_settings d = settings(ls);
    sb_printf(b, "\"embedding\":{\"input_dim\":%d,\"output_dim\":%d,\"mask_zero\":%s}",
              d.input_dim, d.output_dim, d.mask_zero ? "true" : "false");
}

static int embedding_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    embedding_settings d = settings(ls);
    return snprintf(buf, n, "emb%dx%d%s", d.input_dim, d.output_dim, d.mask_zero ? "m" : "");
}

static int embedding_fuse_key(const layer_spec *ls, int *key)
{
    embedding_settings d = settings(ls);
    key[0] = d.input_dim;
    key[1] = d.output_dim;
    key[2] = d.mask_zero;
    return 3;
}

static int64_t embedding_tokens(const layer_spec *ls) { return settings(ls).input_dim; }

/* ---- shapes, init, forward, backward, weight file ---- */

static int embedding_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    embedding_settings d = settings(ls);
    if (lp->index != 0) {
        snprintf(msg, len, "an embedding reads token ids, the model's input: make it the first "
                           "layer (layers.0)");
        return 1;
    }
    if (lp->in.rank != 1) {
        char s[48];
        shape_format(lp->in, s, sizeof s);
        snprintf(msg, len, "an embedding takes samples of T token ids (data [n, T]), got samples "
                           "of shape %s", s);
        return 1;
    }
    lp->out = shape_seq(lp->in.c, d.output_dim);
    lp->n_params = (size_t)d.input_dim * (size_t)d.output_dim;
    lp->mask_out = d.mask_zero;
    return 0;
}

/* Keras: RandomUniform(-0.05, 0.05). */
static void embedding_init(const layer_spec *ls, const layer_plan *lp, uint64_t seed, float *P)
{
    rng_state r;
    rng_seed(&r, seed, 1000 + (uint64_t)lp->index);
    float *W = P + lp->p_off;
    for (size_t i = 0; i < lp->n_params; i++)
        W[i] = (2.0f * rng_uniform(&r) - 1.0f) * 0.05f;
    (void)ls;
}

static void embedding_forward(const layer_pass *p)
{
    const layer_plan *lp = p->lp;
    int T = lp->in.c, E = lp->out.c;
    p->be->gather_rows(p->ctx, p->Y, p->sY, p->X, p->sX, p->W + lp->p_off, p->sP, p->rows * T, E,
                       p->count);
}

static int embedding_backward(const layer_pass *p)
{
    const layer_plan *lp = p->lp;
    int T = lp->in.c, E = lp->out.c;
    p->be->scatter_add_rows(p->ctx, p->G + lp->p_off, p->sP, p->X, p->sX, p->dY, p->sd,
                            p->rows * T, settings(p->ls[0]).input_dim, E, p->count);
    return 0;
}

static int embedding_tensors(const layer_plan *lp, layer_tensor *t)
{
    int64_t E = lp->out.c, V = (int64_t)(lp->n_params / (size_t)E);
    t[0] = (layer_tensor){"weight", 2, {V, E}, lp->p_off, lp->n_params};
    return 1;
}

/* ---- export: the ids cast to integers, then Gather of the table's rows ---- */

static int embedding_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp,
                          const char *x, char *y, char *msg, size_t len)
{
    (void)ls;
    (void)msg;
    (void)len;
    char ids[ONNX_NAME_MAX], out[ONNX_NAME_MAX];
    const char *in[2] = {NULL, ids};
    if (!onnx_weights(g, lp, 1, in))
        return 1;
    onnx_value_name(ids, lp->index, "ids");
    onnx_node_begin(g, "Cast", &x, 1, ids);
    onnx_attr_int(g, "to", 7); /* INT64 */
    onnx_node_end(g);
    onnx_value_name(out, lp->index, "gather");
    onnx_node_begin(g, "Gather", in, 2, out);
    onnx_attr_int(g, "axis", 0);
    onnx_node_end(g);
    str_copy(y, ONNX_NAME_MAX, out);
    return 0;
}

const layer_ops layer_embedding_ops = {
    .name = "embedding",
    .inner = embedding_inner,
    .hint = "write {embedding: {input_dim: 30, output_dim: 64, mask_zero: true}}",
    .example = "{embedding: {input_dim: 30, output_dim: 64}}",
    .keras_args = embedding_keras,
    .parse = embedding_parse,
    .to_json = embedding_json,
    .abbrev = embedding_abbrev,
    .fuse_key = embedding_fuse_key,
    .plan = embedding_plan,
    .tokens = embedding_tokens,
    .init = embedding_init,
    .forward = embedding_forward,
    .backward = embedding_backward,
    .shares_input = 1,
    .tensors = embedding_tensors,
    .onnx = embedding_onnx,
};
