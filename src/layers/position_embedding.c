/*
 * layers/position_embedding: a learned position embedding, its syntax, spec
 * and compute. A table P [sequence_length, width] (Glorot uniform, as
 * keras_hub.layers.PositionEmbedding's), whose first T rows are added to a
 * sequence [T, width]: Y = X + P[:T], which is Keras's x +
 * PositionEmbedding(sequence_length)(x). sequence_length is the longest
 * sequence it takes. A token mask passes through it. Backward: dX = dY (in
 * place), dP[:T] = dY summed over the samples, dP[T:] = 0.
 */
#include "io/onnx.h"
#include "layers/pass.h"
#include "util/util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- syntax and spec: {position_embedding: SEQUENCE_LENGTH} ---- */

typedef struct position_settings {
    int length; /* sequence_length: the table's rows */
} position_settings;
LAYER_SETTINGS_OF(position_settings);

static const layer_keras_arg position_keras[] = {
    {"sequence_length", "the sequence length is the position embedding's value: "
                        "{position_embedding: 24} (keras_hub's PositionEmbedding(sequence_length="
                        "24))"},
    {NULL, NULL}};

static cohort_status position_parse(const layer_syntax *s, layer_spec *ls)
{
    char what[200];
    long long n;
    snprintf(what, sizeof what, "sequence_length of the position_embedding at %s",
             s->where);
    cohort_status st = yget_int(s->c, s->value, what, 1, LAYER_WINDOW_MAX, &n);
    if (st)
        return st;
    position_settings_put(ls, &(position_settings){(int)n});
    return COHORT_OK;
}

static void position_json(const layer_spec *ls, strbuf *b)
{
    sb_printf(b, "\"position_embedding\":%d", position_settings_of(ls).length);
}

static int position_abbrev(const layer_spec *ls, char *buf, size_t n)
{
    return snprintf(buf, n, "pos%d", position_settings_of(ls).length);
}

static int position_fuse_key(const layer_spec *ls, int *key)
{
    key[0] = position_settings_of(ls).length;
    return 1;
}

/* ---- shapes, init, forward, backward, weight file ---- */

static int position_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    int L = position_settings_of(ls).length;
    char s[48];
    shape_format(lp->in, s, sizeof s);
    if (lp->in.rank != 2) {
        snprintf(msg, len, "position_embedding takes a sequence [T, width] (after an embedding, "
                           "or data [n, T, F]), got %s",
                 s);
        return 1;
    }
    if (lp->in.h > L) {
        snprintf(msg, len, "position_embedding has sequence_length %d, but its input %s has %d "
                           "steps; give it at least {position_embedding: %d}",
                 L, s, lp->in.h, lp->in.h);
        return 1;
    }
    lp->out = lp->in;
    lp->n_params = (size_t)L * (size_t)lp->in.c;
    return 0;
}

/* keras_hub: glorot_uniform over [sequence_length, width]. */
static void position_init(const layer_spec *ls, const layer_plan *lp, uint64_t seed, float *P)
{
    size_t L = (size_t)position_settings_of(ls).length, E = (size_t)lp->in.c;
    rng_state r;
    rng_seed(&r, seed, 1000 + (uint64_t)lp->index);
    float limit = sqrtf(6.0f / (float)(L + E));
    float *W = P + lp->p_off;
    for (size_t i = 0; i < L * E; i++)
        W[i] = (2.0f * rng_uniform(&r) - 1.0f) * limit;
}

static void position_forward(const layer_pass *p)
{
    const layer_plan *lp = p->lp;
    int cols = (int)shape_size(lp->in);
    size_t n = (size_t)p->rows * (size_t)cols;
    if (p->Y != p->X) /* not written over its input (layer_plan.alias) */
        for (int k = 0; k < p->count; k++)
            p->be->copy(p->ctx, p->Y + k * p->sY, p->X + k * p->sX, 0, n, 1);
    p->be->bias_act(p->ctx, p->Y, p->sY, p->W + lp->p_off, p->sP, p->rows, cols, ACT_LINEAR,
                    p->count);
}

static int position_backward(const layer_pass *p)
{
    const layer_plan *lp = p->lp;
    int cols = (int)shape_size(lp->in);
    float *G = p->G + lp->p_off;
    p->be->bias_grad(p->ctx, G, p->sP, p->dY, p->sd, p->rows, cols, p->count);
    size_t rest = lp->n_params - (size_t)cols; /* the rows past T */
    for (int k = 0; rest && k < p->count; k++)
        p->be->memzero(p->ctx, G + k * p->sP + cols, rest * sizeof(float));
    return 0;
}

static int position_tensors(const layer_plan *lp, layer_tensor *t)
{
    int64_t E = lp->in.c, L = (int64_t)(lp->n_params / (size_t)E);
    t[0] = (layer_tensor){"weight", 2, {L, E}, lp->p_off, lp->n_params};
    return 1;
}

/* ---- export: Add of the table's first T rows (a Slice where the table is
 * longer than the sequence) ---- */

static int position_onnx(onnx_graph *g, const layer_spec *ls, const layer_plan *lp,
                         const char *x, char *y, char *msg, size_t len)
{
    (void)msg;
    (void)len;
    const char *in[4] = {x, NULL, NULL, NULL};
    if (!onnx_weights(g, lp, 1, in + 1))
        return 1;
    char rows[ONNX_NAME_MAX], start[ONNX_NAME_MAX], end[ONNX_NAME_MAX], axes[ONNX_NAME_MAX];
    if (lp->in.h < position_settings_of(ls).length) {
        int64_t zero = 0, T = lp->in.h;
        onnx_ints(g, &zero, 1, start, lp->index, "pos.start");
        onnx_ints(g, &T, 1, end, lp->index, "pos.end");
        onnx_ints(g, &zero, 1, axes, lp->index, "pos.axes");
        const char *s[4] = {in[1], start, end, axes};
        onnx_op(g, "Slice", s, 4, rows, lp->index, "pos.rows");
        in[1] = rows;
    }
    onnx_op(g, "Add", in, 2, y, lp->index, "pos.add");
    return 0;
}

const layer_ops layer_position_embedding_ops = {
    .name = "position_embedding",
    .example = "{position_embedding: SEQUENCE_LENGTH}",
    .keras_args = position_keras,
    .parse = position_parse,
    .to_json = position_json,
    .abbrev = position_abbrev,
    .fuse_key = position_fuse_key,
    .plan = position_plan,
    .init = position_init,
    .forward = position_forward,
    .backward = position_backward,
    .grad_in_place = 1,
    .may_overwrite_input = 1,
    .takes_mask = 1,
    .takes_sequence = 1,
    .tensors = position_tensors,
    .onnx = position_onnx,
};
