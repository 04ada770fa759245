/*
 * Finite-difference gradient checks of every layer, activation and loss,
 * through the training group (K = 2 models of different seeds, so the
 * batching over models is checked too).
 */
#include "check.h"
#include "layer_text.h"
#include "device/device.h"
#include "layers/pass.h"
#include "train/train.h"
#include "util/util.h"

static device_registry *reg;
/* > 0: make_data's inputs are token ids in [0, tiny_vocab) (an embedding's). */
static int tiny_vocab;

/* 16 samples: flat ones of 6 features, or images of up to 7 x 5 x 2. */
#define TINY_N 16
#define TINY_DIM 70
typedef struct tiny_data {
    cohort_dataset ds;
    float x[TINY_N * TINY_DIM];
    int32_t y[TINY_N];
} tiny_data;

/* Where set, fills the samples' x [TINY_N, dim] after make_data's draws
 * (padded token sequences for the masked checks). */
static void (*fill_x)(float *x, int dim);

/* make_data gives token ids (1 to 5, 0 for padding) of flat samples [T]
 * instead of uniform values: sample i has a word of i % 5 tokens (at most
 * T), after its padding where i is odd and before it where even (sample 0:
 * all padding); the word is the same whatever T and its padding. */
static int token_data;

static float token_at(int i, int t, int T)
{
    int len = i % 5 < T ? i % 5 : T, pre = i % 2 ? T - len : 0;
    return t >= pre && t < pre + len ? (float)(1 + (3 * (t - pre) + i) % 5) : 0.0f;
}

static void make_data(tiny_data *t, sample_shape in, int classes)
{
    rng_state r;
    rng_seed(&r, 42, 0);
    memset(&t->ds, 0, sizeof t->ds);
    t->ds.n = TINY_N;
    t->ds.dim = (int64_t)shape_size(in);
    t->ds.x = t->x;
    t->ds.y = t->y;
    t->ds.n_classes = classes;
    for (int i = 0; i < TINY_N * t->ds.dim; i++)
        t->x[i] = token_data ? token_at(i / (int)t->ds.dim, i % (int)t->ds.dim, (int)t->ds.dim)
                  : tiny_vocab ? (float)(rng_next(&r) % (uint64_t)tiny_vocab)
                             : 2.0f * rng_uniform(&r) - 1.0f;
    for (int i = 0; i < TINY_N; i++)
        t->y[i] = (int32_t)(i % classes);
    if (fill_x)
        fill_x(t->x, (int)t->ds.dim);
}

/* Compare analytic and central-difference gradients for every parameter of
 * models on samples of shape `in`; training 1: dropout masks and batch
 * statistics, as in a training step. */
static void grad_check_shape(const char *what, model_spec *spec, sample_shape in, int classes,
                             int training)
{
    tiny_data t;
    make_data(&t, in, classes);
    data_view v = data_view_all(&t.ds);
    model_spec s2 = *spec;
    s2.seed = spec->seed + 7;
    const model_spec *specs[2] = {spec, &s2};
    train_group *g;
    cohort_error err;
    cohort_status st = group_create(specs, 2, in, classes, &reg->dev[0], 1, &g, &err);
    CHECK_MSG(st == COHORT_OK, "%s: %s", what, err.message);
    if (st)
        return;
    const model_layout *L = group_layout(g);
    size_t P = L->n_params;
    float *grad = malloc(2 * P * sizeof(float)), *dummy = malloc(2 * P * sizeof(float));
    float *p = malloc(P * sizeof(float));
    double loss[2], lp[2], lm[2];
    /* Biases start at zero, which puts a ReLU whose inputs are all zero
     * exactly on its kink; move every parameter off its initial value. */
    rng_state r;
    rng_seed(&r, 7, 7);
    for (int k = 0; k < 2; k++) {
        group_get_params(g, k, p);
        for (size_t i = 0; i < P; i++)
            p[i] += 0.2f * (rng_uniform(&r) - 0.5f);
        group_set_params(g, k, p);
    }
    group_loss_grad(g, &v, training, 3, loss, grad);
    int bad = 0, kinks = 0;
    double worst = 0;
    for (int k = 0; k < 2; k++) {
        group_get_params(g, k, p);
        for (size_t i = 0; i < P; i++) {
            /* Central differences with steps h, h/2 and h/4: where they
             * disagree the loss is not smooth here (a ReLU crossed its kink,
             * a pooling window's maximum changed), and the parameter is
             * skipped; elsewhere they must match the gradient. */
            float keep = p[i];
            float h = 1e-3f * (fabsf(keep) > 1.0f ? fabsf(keep) : 1.0f);
            double num[3];
            for (int s = 0; s < 3; s++) {
                float hs = h / (float)(1 << s);
                p[i] = keep + hs;
                group_set_params(g, k, p);
                group_loss_grad(g, &v, training, 3, lp, dummy);
                p[i] = keep - hs;
                group_set_params(g, k, p);
                group_loss_grad(g, &v, training, 3, lm, dummy);
                num[s] = (lp[k] - lm[k]) / (2.0 * (double)hs);
            }
            p[i] = keep;
            group_set_params(g, k, p);
            double ana = grad[k * P + i];
            if (fabs(num[0] - num[1]) > 1e-3 + 0.01 * fabs(num[0]) ||
                fabs(num[1] - num[2]) > 1e-3 + 0.01 * fabs(num[1])) {
                kinks++;
                continue;
            }
            double rel = fabs(num[0] - ana) / fmax(fabs(num[0]) + fabs(ana), 1e-3);
            if (rel > worst)
                worst = rel;
            if (rel > 2e-2 && fabs(num[0] - ana) > 2e-4) {
                if (bad++ < 3)
                    fprintf(stderr, "%s: model %d param %zu: analytic %.6g numeric %.6g\n", what,
                            k, i, ana, num[0]);
            }
        }
    }
    CHECK_MSG(kinks * 10 < (int)(2 * P), "%s: %d of %zu parameters sit on a kink", what, kinks,
              2 * P);
    CHECK_MSG(bad == 0, "%s: %d of %zu gradients off (worst relative error %.3g)", what, bad,
              2 * P, worst);
    /* The two models differ (different seeds), so their gradients must too. */
    int differ = 0;
    for (size_t i = 0; i < P; i++)
        differ |= grad[i] != grad[P + i];
    CHECK_MSG(differ, "%s: both models of the group got the same gradient", what);
    free(grad);
    free(dummy);
    free(p);
    group_free(g);
}

static void grad_check(const char *what, model_spec *spec, int classes, int training)
{
    grad_check_shape(what, spec, shape_flat(6), classes, training);
}

/* A layer of an image model. */
static layer_spec conv(int filters, int k, int stride, pad_kind pad, act_kind act)
{
    return layer_conv(filters, k, stride, pad, act, 1);
}
static layer_spec pool(const char *kind, int k, int stride, pad_kind pad)
{
    return layer_pooling(kind, k, stride, pad);
}
static layer_spec plain(const char *kind) { return layer_text("%s", kind); }
static layer_spec bnorm(void) { return layer_bnorm(0.9f, 1e-3f); }

static void image_check(const char *what, sample_shape in, int training, int n,
                        const layer_spec *layers)
{
    model_spec s;
    model_spec_defaults(&s);
    str_copy(s.name, sizeof s.name, "img");
    s.batch_size = TINY_N;
    s.n_layers = n + 1;
    for (int i = 0; i < n; i++)
        s.layers[i] = layers[i];
    s.layers[n] = layer_dense(3, ACT_SOFTMAX);
    grad_check_shape(what, &s, in, 3, training);
}

/* Every image layer, both paddings, strides 1 and 2, odd sizes (7 x 5). */
static void image_checks(void)
{
    sample_shape odd = shape_image(7, 5, 2), one = shape_image(5, 4, 1);
    image_check("conv valid 3x3 s1 + flatten", odd, 0, 2,
                (layer_spec[]){conv(3, 3, 1, PAD_VALID, ACT_TANH), plain("flatten")});
    image_check("conv same 3x3 s2 + max pool 2", odd, 0, 3,
                (layer_spec[]){conv(3, 3, 2, PAD_SAME, ACT_SIGMOID),
                               pool("max_pooling2d", 2, 2, PAD_VALID), plain("flatten")});
    image_check("conv same 2x2 s1 + avg pool 3 s2 same + global avg", odd, 0, 3,
                (layer_spec[]){conv(4, 2, 1, PAD_SAME, ACT_TANH),
                               pool("average_pooling2d", 3, 2, PAD_SAME),
                               plain("global_average_pooling2d")});
    image_check("conv valid s2 + max pool same s1", odd, 0, 3,
                (layer_spec[]){conv(3, 3, 2, PAD_VALID, ACT_LINEAR),
                               pool("max_pooling2d", 2, 1, PAD_SAME), plain("flatten")});
    image_check("conv gelu + conv silu + flatten", odd, 0, 3,
                (layer_spec[]){conv(3, 2, 1, PAD_VALID, ACT_GELU),
                               conv(2, 3, 2, PAD_SAME, ACT_SILU), plain("flatten")});
    image_check("conv + conv (input gradient of a conv)", odd, 0, 3,
                (layer_spec[]){conv(3, 2, 1, PAD_VALID, ACT_TANH),
                               conv(2, 3, 2, PAD_SAME, ACT_TANH), plain("flatten")});
    image_check("conv + batch norm (training) + tanh + avg pool", odd, 1, 5,
                (layer_spec[]){conv(3, 3, 1, PAD_SAME, ACT_LINEAR), bnorm(),
                               layer_act(ACT_TANH),
                               pool("average_pooling2d", 2, 2, PAD_SAME), plain("flatten")});
    image_check("dense on an image (flattened) + batch norm + dropout", one, 1, 3,
                (layer_spec[]){layer_dense(6, ACT_TANH),
                               bnorm(), layer_dropout(0.3f)});
    image_check("batch norm on the input", one, 1, 3,
                (layer_spec[]){bnorm(), conv(2, 3, 1, PAD_SAME, ACT_TANH), plain("flatten")});
}

/* Dense, dropout, activation and batch norm on a sequence [T, F] act on
 * its last axis, each step a row; flatten keeps the steps' order. */
static void sequence_checks(void)
{
    sample_shape seq = shape_seq(5, 3);
    image_check("dense on a sequence + tanh + flatten", seq, 0, 3,
                (layer_spec[]){layer_dense(4, ACT_LINEAR), layer_act(ACT_TANH), plain("flatten")});
    image_check("dense + dropout + dense on a sequence + batch norm", seq, 1, 5,
                (layer_spec[]){layer_dense(4, ACT_SIGMOID), layer_dropout(0.3f),
                               layer_dense(2, ACT_TANH), bnorm(), plain("flatten")});
    image_check("dense gelu + silu on a sequence + flatten", seq, 0, 3,
                (layer_spec[]){layer_dense(4, ACT_GELU), layer_act(ACT_SILU), plain("flatten")});
    /* layer_normalization: on the input sequence, after a dense layer, on a
     * flat sample (the input's gradient of a later one included), and on a
     * flattened image (its features in the image's order). */
    layer_spec ln = layer_text("{layer_normalization: {epsilon: 0.01}}");
    image_check("layer norm on a sequence + dense + layer norm + flatten", seq, 0, 4,
                (layer_spec[]){ln, layer_dense(4, ACT_TANH), plain("layer_normalization"),
                               plain("flatten")});
    image_check("flatten + layer norm + dense + layer norm", seq, 0, 4,
                (layer_spec[]){plain("flatten"), ln, layer_dense(6, ACT_GELU),
                               plain("layer_normalization")});
    image_check("conv + flatten + layer norm", shape_image(5, 4, 2), 0, 3,
                (layer_spec[]){conv(3, 3, 1, PAD_SAME, ACT_TANH), plain("flatten"), ln});
    image_check("conv + layer norm on the channels + flatten", shape_image(5, 4, 2), 0, 3,
                (layer_spec[]){conv(3, 3, 1, PAD_SAME, ACT_TANH), ln, plain("flatten")});
}

/* ---- the recurrent layers, with and without a token mask ---- */

/*
 * A kind only this binary has (layer_register), standing in for a mask_zero
 * embedding: flat samples of T token values in, the sequence [T, E] of
 * x[t] * w + b out, with the token mask (0: padding) on it. w and b [E] are
 * trained, so the gradient reaching the layer before a recurrent layer (or
 * a masked pooling, mask_checks) is checked too. Plain loops over host
 * memory: CPU devices only.
 */
enum { TOK_E = 3 };

static int tok_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    (void)ls;
    if (lp->in.rank != 1) {
        snprintf(msg, len, "token_seq takes flat samples of tokens");
        return 1;
    }
    lp->out = shape_seq(lp->in.c, TOK_E);
    lp->n_params = 2 * TOK_E;
    lp->mask_out = 1;
    return 0;
}

static void tok_init(const layer_spec *ls, const layer_plan *lp, uint64_t seed, float *P)
{
    (void)ls;
    (void)seed;
    for (int e = 0; e < TOK_E; e++) {
        P[lp->p_off + e] = 0.5f + 0.3f * (float)e;
        P[lp->p_off + TOK_E + e] = 0.1f * (float)(e - 1);
    }
}

static void tok_forward(const layer_pass *p)
{
    int T = p->lp->in.c;
    for (int k = 0; k < p->count; k++) {
        const float *x = p->X + (size_t)k * p->sX, *w = p->W + (size_t)k * p->sP + p->lp->p_off;
        float *y = p->Y + (size_t)k * p->sY;
        for (int i = 0; i < p->rows * T; i++)
            for (int e = 0; e < TOK_E; e++)
                y[i * TOK_E + e] = x[i] * w[e] + w[TOK_E + e];
    }
}

static int tok_backward(const layer_pass *p)
{
    int T = p->lp->in.c;
    for (int k = 0; k < p->count; k++) {
        const float *x = p->X + (size_t)k * p->sX, *dy = p->dY + (size_t)k * p->sd;
        float *g = p->G + (size_t)k * p->sP + p->lp->p_off;
        for (int e = 0; e < 2 * TOK_E; e++)
            g[e] = 0.0f;
        for (int i = 0; i < p->rows * T; i++)
            for (int e = 0; e < TOK_E; e++) {
                g[e] += x[i] * dy[i * TOK_E + e];
                g[TOK_E + e] += dy[i * TOK_E + e];
            }
    }
    return 0;
}

static const layer_ops tok_ops = {
    .name = "token_seq",
    .fuse_key = layer_fuse_any,
    .plan = tok_plan,
    .init = tok_init,
    .forward = tok_forward,
    .backward = tok_backward,
};

/* A flatten that takes a masked sequence (and drops the mask), only this
 * binary's: to look at a masked layer's outputs, padded steps included. */
static int take_flat_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    (void)ls;
    (void)msg;
    (void)len;
    lp->out = shape_flat((int)shape_size(lp->in));
    return 0;
}

static void take_flat_forward(const layer_pass *p)
{
    p->be->copy(p->ctx, p->Y, p->X, p->sY, (size_t)p->rows * shape_size(p->lp->in), p->count);
}

static int take_flat_backward(const layer_pass *p)
{
    if (p->dX)
        p->be->copy(p->ctx, p->dX, p->dY, p->sd, (size_t)p->rows * shape_size(p->lp->in),
                    p->count);
    return 0;
}

static const layer_ops take_flat_ops = {
    .name = "take_flat",
    .fuse_key = layer_fuse_any,
    .plan = take_flat_plan,
    .forward = take_flat_forward,
    .backward = take_flat_backward,
    .takes_mask = 1,
};

/* Samples of T tokens, rows padded with 0 before (pad_mode 1) or after (2)
 * their 1..T-1 real steps (a different count per row; one row unpadded). */
static int pad_mode;

static void fill_tokens(float *x, int T)
{
    rng_state r;
    rng_seed(&r, 9, 9);
    for (int i = 0; i < TINY_N; i++) {
        int real = i == 0 ? T : 1 + i % (T - 1);
        for (int t = 0; t < T; t++) {
            int pad = pad_mode == 1 ? t < T - real : t >= real;
            x[i * T + t] = pad ? 0.0f : 0.2f + 0.8f * rng_uniform(&r);
        }
    }
}

static void rnn_spec(model_spec *s, int masked, const char *first, const char *second)
{
    model_spec_defaults(s);
    str_copy(s->name, sizeof s->name, "rnn");
    s->batch_size = TINY_N;
    s->n_layers = 0;
    if (masked)
        s->layers[s->n_layers++] = layer_text("token_seq");
    s->layers[s->n_layers++] = layer_text("%s", first);
    if (second)
        s->layers[s->n_layers++] = layer_text("%s", second);
    s->layers[s->n_layers++] = layer_dense(3, ACT_SOFTMAX);
}

/* Model k's outputs for the TINY_N samples of x (shape in), from params p. */
static int rnn_outputs(const model_spec *spec, sample_shape in, const float *x, const float *p,
                       size_t P, float *out)
{
    tiny_data t;
    make_data(&t, in, 3);
    memcpy(t.x, x, (size_t)TINY_N * shape_size(in) * sizeof(float));
    data_view v = data_view_all(&t.ds);
    const model_spec *specs[1] = {spec};
    train_group *g;
    cohort_error err;
    if (group_create(specs, 1, in, 3, &reg->dev[0], 1, &g, &err) != COHORT_OK) {
        CHECK_MSG(0, "padding check: %s", err.message);
        return 1;
    }
    CHECK(group_layout(g)->n_params == P);
    if (p)
        group_set_params(g, 0, p);
    group_predict(g, 0, &v, out);
    group_free(g);
    return 0;
}

/* Padding changes nothing: each sample's real steps, padded before or
 * after to T = 6, give the outputs of the same steps unpadded (a model of
 * T = 3 with the same parameters, on the samples with 3 real steps). */
static void padding_check(const char *first, const char *second)
{
    enum { TL = 6, TS = 3 };
    model_spec s;
    rnn_spec(&s, 1, first, second);
    tiny_data t;
    make_data(&t, shape_flat(TS), 3);
    float shortx[TINY_N * TS], pre[TINY_N * TL], post[TINY_N * TL];
    for (int i = 0; i < TINY_N * TS; i++)
        shortx[i] = 0.2f + 0.8f * (0.5f + 0.5f * t.x[i]);
    for (int i = 0; i < TINY_N; i++)
        for (int q = 0; q < TL; q++) {
            pre[i * TL + q] = q < TL - TS ? 0.0f : shortx[i * TS + q - (TL - TS)];
            post[i * TL + q] = q < TS ? shortx[i * TS + q] : 0.0f;
        }
    /* The parameters of a T = 6 group, moved off their initial values. */
    tiny_data d6;
    make_data(&d6, shape_flat(TL), 3);
    const model_spec *specs[1] = {&s};
    train_group *g;
    cohort_error err;
    if (group_create(specs, 1, shape_flat(TL), 3, &reg->dev[0], 1, &g, &err) != COHORT_OK) {
        CHECK_MSG(0, "padding check: %s", err.message);
        return;
    }
    size_t P = group_layout(g)->n_params;
    float *p = malloc(P * sizeof *p);
    group_get_params(g, 0, p);
    group_free(g);
    rng_state r;
    rng_seed(&r, 3, 3);
    for (size_t i = 0; i < P; i++)
        p[i] += 0.3f * (rng_uniform(&r) - 0.5f);
    float want[TINY_N * 3], got_pre[TINY_N * 3], got_post[TINY_N * 3];
    if (rnn_outputs(&s, shape_flat(TS), shortx, p, P, want) ||
        rnn_outputs(&s, shape_flat(TL), pre, p, P, got_pre) ||
        rnn_outputs(&s, shape_flat(TL), post, p, P, got_post)) {
        free(p);
        return;
    }
    int bad_pre = 0, bad_post = 0;
    for (int i = 0; i < TINY_N * 3; i++) {
        bad_pre += !(fabsf(got_pre[i] - want[i]) <= 1e-6f);
        bad_post += !(fabsf(got_post[i] - want[i]) <= 1e-6f);
    }
    CHECK_MSG(bad_pre == 0, "%s%s%s: %d of %d outputs with padding before differ from the "
              "unpadded sequence's", first, second ? " + " : "", second ? second : "", bad_pre,
              TINY_N * 3);
    CHECK_MSG(bad_post == 0, "%s%s%s: %d of %d outputs with padding after differ from the "
              "unpadded sequence's", first, second ? " + " : "", second ? second : "", bad_post,
              TINY_N * 3);
    /* And the padding is not ignored for nothing: tokens in its place change them. */
    for (int i = 0; i < TINY_N * TL; i++)
        if (post[i] == 0.0f)
            post[i] = 0.7f;
    rnn_outputs(&s, shape_flat(TL), post, p, P, got_post);
    int moved = 0;
    for (int i = 0; i < TINY_N * 3; i++)
        moved += got_post[i] != want[i];
    CHECK_MSG(moved > 0, "%s: the steps after the real ones changed no output", first);
    free(p);
}

/* A bidirectional layer with return_sequences gives 0 at padded steps (both
 * directions), and the real steps' outputs: flatten + a dense layer whose
 * weights read only one output value at a time show each. */
static void bi_zero_check(void)
{
    enum { TL = 5 };
    model_spec s;
    rnn_spec(&s, 1, "{bidirectional: {lstm: 2, return_sequences: true}}", "take_flat");
    tiny_data t;
    make_data(&t, shape_flat(TL), 3);
    pad_mode = 2;
    fill_tokens(t.x, TL);
    data_view v = data_view_all(&t.ds);
    const model_spec *specs[1] = {&s};
    train_group *g;
    cohort_error err;
    if (group_create(specs, 1, shape_flat(TL), 3, &reg->dev[0], 1, &g, &err) != COHORT_OK) {
        CHECK_MSG(0, "bidirectional zeros: %s", err.message);
        return;
    }
    const model_layout *L = group_layout(g);
    size_t P = L->n_params;
    float *p = malloc(P * sizeof *p), out[TINY_N * 3];
    group_get_params(g, 0, p);
    /* The dense layer (last) [3, TL*4]: output 0 reads value q alone. */
    const layer_plan *d = &L->layers[L->n_layers - 1];
    int in = (int)shape_size(d->in), zeros = 0, nonzeros = 0, should = 0;
    for (int q = 0; q < in; q++) {
        memset(p + d->p_off, 0, d->n_params * sizeof *p);
        p[d->p_off + q] = 1.0f; /* W[0][q] */
        group_set_params(g, 0, p);
        group_predict(g, 0, &v, out);
        for (int i = 0; i < TINY_N; i++) {
            int step = q / 4, real = i == 0 ? TL : 1 + i % (TL - 1);
            /* softmax of (y, 0, 0): y = 0 exactly where its probability is 1/3 */
            int zero = out[i * 3] == out[i * 3 + 1];
            if (step >= real) {
                should++;
                zeros += zero;
            } else {
                nonzeros += !zero;
            }
        }
    }
    CHECK_MSG(zeros == should && should > 0, "bidirectional return_sequences: %d of %d outputs "
              "at padded steps are 0", zeros, should);
    CHECK_MSG(nonzeros > 0, "bidirectional return_sequences: every real step's output is 0");
    free(p);
    group_free(g);
}

static void rnn_checks(void)
{
    static const char *cells[] = {"lstm", "gru"};
    sample_shape seq = shape_seq(5, 3);
    for (int c = 0; c < 2; c++) {
        char one[64], seq1[96], what[160];
        snprintf(one, sizeof one, "{%s: 4}", cells[c]);
        snprintf(seq1, sizeof seq1, "{%s: 3, return_sequences: true}", cells[c]);
        model_spec s;
        snprintf(what, sizeof what, "%s, last step", cells[c]);
        rnn_spec(&s, 0, one, NULL);
        grad_check_shape(what, &s, seq, 3, 1);
        snprintf(what, sizeof what, "%s return_sequences + %s", cells[c], cells[1 - c]);
        char other[64];
        snprintf(other, sizeof other, "{%s: 4}", cells[1 - c]);
        rnn_spec(&s, 0, seq1, other);
        grad_check_shape(what, &s, seq, 3, 1);
        snprintf(what, sizeof what, "%s return_sequences + flatten", cells[c]);
        rnn_spec(&s, 0, seq1, "flatten");
        grad_check_shape(what, &s, seq, 3, 1);
        snprintf(what, sizeof what, "%s of one step", cells[c]);
        rnn_spec(&s, 0, one, NULL);
        grad_check_shape(what, &s, shape_seq(1, 3), 3, 1);
        /* Masked: padding before and after, the mask through a sequence. */
        fill_x = fill_tokens;
        for (pad_mode = 1; pad_mode <= 2; pad_mode++) {
            snprintf(what, sizeof what, "%s masked, padding %s", cells[c],
                     pad_mode == 1 ? "before" : "after");
            rnn_spec(&s, 1, one, NULL);
            grad_check_shape(what, &s, shape_flat(5), 3, 1);
            snprintf(what, sizeof what, "%s return_sequences masked + %s, padding %s", cells[c],
                     cells[1 - c], pad_mode == 1 ? "before" : "after");
            rnn_spec(&s, 1, seq1, other);
            grad_check_shape(what, &s, shape_flat(5), 3, 1);
        }
        fill_x = NULL;
        padding_check(one, NULL);
        padding_check(seq1, other);
        /* bidirectional: both directions' gradients, the reverse one's
         * masked start, and 0 at padded steps with return_sequences. */
        char bi[96], biseq[96];
        snprintf(bi, sizeof bi, "{bidirectional: {%s: 3}}", cells[c]);
        snprintf(biseq, sizeof biseq, "{bidirectional: {%s: 2, return_sequences: true}}",
                 cells[c]);
        snprintf(what, sizeof what, "bidirectional %s", cells[c]);
        rnn_spec(&s, 0, bi, NULL);
        grad_check_shape(what, &s, seq, 3, 1);
        snprintf(what, sizeof what, "bidirectional %s return_sequences + %s", cells[c],
                 cells[1 - c]);
        rnn_spec(&s, 0, biseq, other);
        grad_check_shape(what, &s, seq, 3, 1);
        snprintf(what, sizeof what, "bidirectional %s return_sequences + flatten", cells[c]);
        rnn_spec(&s, 0, biseq, "flatten");
        grad_check_shape(what, &s, seq, 3, 1);
        fill_x = fill_tokens;
        for (pad_mode = 1; pad_mode <= 2; pad_mode++) {
            snprintf(what, sizeof what, "bidirectional %s masked, padding %s", cells[c],
                     pad_mode == 1 ? "before" : "after");
            rnn_spec(&s, 1, bi, NULL);
            grad_check_shape(what, &s, shape_flat(5), 3, 1);
            snprintf(what, sizeof what, "bidirectional %s return_sequences masked + %s, "
                     "padding %s", cells[c], cells[1 - c], pad_mode == 1 ? "before" : "after");
            rnn_spec(&s, 1, biseq, other);
            grad_check_shape(what, &s, shape_flat(5), 3, 1);
        }
        fill_x = NULL;
        padding_check(bi, NULL);
        padding_check(biseq, other);
    }
    bi_zero_check();
}

/* ---- multi_head_attention: heads of key_dim other than E / H, causal,
 * without biases, value_dim of its own, dropout on the weights, and under a
 * token mask (padding before and after; a masked gru after it) ---- */
static void attention_checks(void)
{
    static const char *const layers[] = {
        "{multi_head_attention: {num_heads: 2, key_dim: 3}}",
        "{multi_head_attention: {num_heads: 1, key_dim: 4, causal: true}}",
        "{multi_head_attention: {num_heads: 3, key_dim: 2, value_dim: 4, use_bias: false}}",
        "{multi_head_attention: {num_heads: 2, key_dim: 2, dropout: 0.3, causal: true}}",
    };
    sample_shape seq = shape_seq(5, 3);
    model_spec s;
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
        rnn_spec(&s, 0, layers[i], "flatten");
        grad_check_shape(layers[i], &s, seq, 3, 1);
    }
    /* Two in a row, with a layer norm between: the input gradient of one. */
    rnn_spec(&s, 0, layers[0], "layer_normalization");
    s.layers[3] = s.layers[2];
    s.layers[2] = layer_text("%s", layers[1]);
    s.layers[4] = s.layers[3];
    s.layers[3] = plain("flatten");
    s.n_layers = 5;
    grad_check_shape("attention + attention causal + layer norm", &s, seq, 3, 1);
    fill_x = fill_tokens;
    for (pad_mode = 1; pad_mode <= 2; pad_mode++)
        for (int c = 0; c < 2; c++) {
            char what[160];
            snprintf(what, sizeof what, "%s masked + gru, padding %s", layers[c],
                     pad_mode == 1 ? "before" : "after");
            rnn_spec(&s, 1, layers[c], "{gru: 3}");
            grad_check_shape(what, &s, shape_flat(5), 3, 1);
        }
    fill_x = NULL;
    /* Padded keys get no weight: a sequence's real steps padded before or
     * after give the outputs of the steps alone (a masked gru after). */
    padding_check(layers[0], "{gru: 3}");
    padding_check(layers[1], "{lstm: 3}");
    padding_check(layers[2], "{gru: 2}");
}

/* Conv1D (valid, same and causal, strided and dilated) and the 1-D
 * poolings on sequences [T, C] of odd lengths. */
static layer_spec conv1d(int filters, int k, int stride, int dilation, const char *pad,
                         act_kind act)
{
    return layer_text("{conv1d: %d, kernel_size: %d, strides: %d, dilation_rate: %d, padding: "
                      "%s, activation: %s}",
                      filters, k, stride, dilation, pad, act_name(act));
}

static void conv1d_checks(void)
{
    sample_shape seq = shape_seq(9, 2);
    image_check("conv1d causal k3 d2 + conv1d same k2 d3 + flatten", seq, 0, 3,
                (layer_spec[]){conv1d(3, 3, 1, 2, "causal", ACT_TANH),
                               conv1d(2, 2, 1, 3, "same", ACT_SIGMOID), plain("flatten")});
    image_check("conv1d valid k3 s2 + avg pool 1d 2 + flatten", seq, 0, 3,
                (layer_spec[]){conv1d(3, 3, 2, 1, "valid", ACT_LINEAR),
                               layer_text("{average_pooling1d: 2}"), plain("flatten")});
    image_check("conv1d valid k2 + max pool 1d 2 + flatten", seq, 0, 3,
                (layer_spec[]){conv1d(2, 2, 1, 1, "valid", ACT_TANH),
                               layer_text("{max_pooling1d: 2}"), plain("flatten")});
    image_check("conv1d same k4 + avg pool 1d 3 s1 same + global avg 1d", seq, 0, 3,
                (layer_spec[]){conv1d(4, 4, 1, 1, "same", ACT_TANH),
                               layer_text("{average_pooling1d: 3, strides: 1, padding: same}"),
                               plain("global_average_pooling1d")});
    image_check("conv1d valid k2 d4 + max pool 1d 2 s1 same + global max 1d", seq, 0, 3,
                (layer_spec[]){conv1d(3, 2, 1, 4, "valid", ACT_TANH),
                               layer_text("{max_pooling1d: 2, strides: 1, padding: same}"),
                               plain("global_max_pooling1d")});
    image_check("conv1d causal s2 without a bias + conv1d causal k3 d2", seq, 0, 3,
                (layer_spec[]){layer_text("{conv1d: 3, kernel_size: 2, strides: 2, padding: "
                                          "causal, use_bias: false}"),
                               conv1d(2, 3, 1, 2, "causal", ACT_TANH), plain("flatten")});
}

/* The loss of `layers` on token data of T steps (pre- or post-padded as
 * make_data pads), model 0 of a group of 2, with the parameters P (NULL:
 * its own, then copied out into P_out where not NULL), at most TOKEN_P_MAX. */
#define TOKEN_P_MAX 64
static double token_loss(int T, int n, const layer_spec *layers, const float *P, float *P_out)
{
    tiny_data t;
    token_data = 1;
    make_data(&t, shape_flat(T), 3);
    token_data = 0;
    data_view v = data_view_all(&t.ds);
    model_spec s;
    model_spec_defaults(&s);
    str_copy(s.name, sizeof s.name, "tok");
    s.batch_size = TINY_N;
    s.n_layers = n;
    for (int i = 0; i < n; i++)
        s.layers[i] = layers[i];
    const model_spec *specs[2] = {&s, &s};
    train_group *g;
    cohort_error err;
    double loss[2] = {NAN, NAN};
    if (group_create(specs, 2, shape_flat(T), 3, &reg->dev[0], 1, &g, &err)) {
        CHECK_MSG(0, "token model of %d steps: %s", T, err.message);
        return NAN;
    }
    size_t np = group_layout(g)->n_params;
    CHECK(np <= TOKEN_P_MAX);
    if (np > TOKEN_P_MAX) {
        group_free(g);
        return NAN;
    }
    float *grad = malloc(2 * (np ? np : 1) * sizeof *grad);
    if (P) {
        group_set_params(g, 0, P);
        group_set_params(g, 1, P);
    } else if (P_out) {
        group_get_params(g, 0, P_out);
    }
    group_loss_grad(g, &v, 0, 3, loss, grad);
    free(grad);
    group_free(g);
    return loss[0];
}

/* The global 1-D poolings under a token mask: gradients through them (the
 * dense layer before them is checked, pre- and post-padded samples, one all
 * padding); and the padding does not count: the words padded to 7 steps
 * give the loss they give at 4 steps, where the longest fill the sequence. */
static void mask_checks(void)
{
    const char *pools[] = {"global_average_pooling1d", "global_max_pooling1d"};
    for (int q = 0; q < 2; q++) {
        layer_spec l[] = {plain("token_seq"), layer_dense(4, ACT_TANH), plain(pools[q]),
                          layer_dense(3, ACT_SOFTMAX)};
        model_spec s;
        model_spec_defaults(&s);
        str_copy(s.name, sizeof s.name, "mask");
        s.batch_size = TINY_N;
        s.n_layers = 4;
        memcpy(s.layers, l, sizeof l);
        char what[96];
        snprintf(what, sizeof what, "masked %s (pre- and post-padding)", pools[q]);
        token_data = 1;
        grad_check_shape(what, &s, shape_flat(6), 3, 0);
        token_data = 0;

        float P[TOKEN_P_MAX];
        double at4 = token_loss(4, 4, l, NULL, P), at7 = token_loss(7, 4, l, P, NULL);
        CHECK_MSG(isfinite(at4) && fabs(at4 - at7) <= 1e-6 * fabs(at4),
                  "masked %s: loss %.9g on words in 4 steps, %.9g padded to 7", pools[q], at4,
                  at7);
    }
    /* conv1d and the windowed poolings take no mask, as in tf.keras: the
     * layout refuses them after the mask's layer, naming it. */
    const char *no_mask[] = {"{conv1d: 2, kernel_size: 2}", "{max_pooling1d: 2}",
                             "{average_pooling1d: 2}"};
    for (int q = 0; q < 3; q++) {
        model_spec s;
        model_spec_defaults(&s);
        str_copy(s.name, sizeof s.name, "nomask");
        s.batch_size = TINY_N;
        s.n_layers = 4;
        s.layers[0] = plain("token_seq");
        s.layers[1] = layer_text("%s", no_mask[q]);
        s.layers[2] = plain("flatten");
        s.layers[3] = layer_dense(3, ACT_SOFTMAX);
        model_layout L;
        cohort_error err;
        cohort_status st = model_layout_make(&s, shape_flat(6), 3, 1, &L, &err);
        char want[160];
        snprintf(want, sizeof want, "%s cannot take the mask of the embedding at layers.0",
                 s.layers[1].kind->name);
        CHECK_MSG(st != COHORT_OK && strstr(err.message, want), "%s after a mask: %s",
                  no_mask[q], st ? err.message : "accepted");
    }
}

/* A Transformer encoder layer (two residual blocks: [layer_normalization,
 * multi_head_attention] and [layer_normalization, dense gelu, dense]) under
 * a token mask, padding before and after: the mask passes through both
 * blocks to the attention and to the masked gru after them. */
static void masked_encoder_checks(void)
{
    model_spec s;
    fill_x = fill_tokens;
    for (pad_mode = 1; pad_mode <= 2; pad_mode++) {
        char what[96];
        model_spec_defaults(&s);
        str_copy(s.name, sizeof s.name, "enc");
        s.batch_size = TINY_N;
        layers_text(&s, "[token_seq, {residual: [layer_normalization, {multi_head_attention: "
                        "{num_heads: 2, key_dim: 2}}]}, {residual: [layer_normalization, {dense: "
                        "6, activation: gelu}, {dense: 3}]}, {gru: 3}, {dense: 3, activation: "
                        "softmax}]");
        snprintf(what, sizeof what, "encoder layer masked + gru, padding %s",
                 pad_mode == 1 ? "before" : "after");
        grad_check_shape(what, &s, shape_flat(5), 3, 1);
    }
    fill_x = NULL;
}

static void spec_mlp(model_spec *s, act_kind hidden, act_kind out, int out_units, loss_kind loss)
{
    model_spec_defaults(s);
    str_copy(s->name, sizeof s->name, "g");
    s->batch_size = 16;
    s->loss = loss;
    s->n_layers = 3;
    s->layers[0] = layer_dense(5, hidden);
    s->layers[1] = layer_dense(4, hidden);
    s->layers[2] = layer_dense(out_units, out);
}

/* Residual blocks, x + f(x): the gradient that skips f must reach the dense
 * layer before the block (a residual that dropped it, or added it twice,
 * fails here); a block on the model's input, which every model of the
 * group reads at once; blocks of element-wise layers; two in a row; a
 * block on an image. */
static void residual_checks(void)
{
    static const char *const lists[] = {
        "[{dense: 5, activation: tanh}, {residual: [{dense: 7, activation: tanh}, {dense: 5}]}, "
        "{dense: 3, activation: softmax}]",
        "[{residual: [{dense: 4, activation: sigmoid}, {dense: 6, activation: tanh}]}, "
        "{dense: 3, activation: softmax}]",
        "[{dense: 5, activation: linear}, {residual: [{activation: tanh}]}, "
        "{residual: [{dense: 8, activation: tanh}, {dropout: 0.3}, {dense: 5}]}, "
        "{dense: 3, activation: softmax}]",
        "[{dense: 5, activation: sigmoid}, {residual: [{dense: 5, activation: relu}]}, "
        "{activation: tanh}, {dense: 3, activation: softmax}]",
    };
    for (size_t i = 0; i < sizeof lists / sizeof lists[0]; i++) {
        model_spec s;
        spec_mlp(&s, ACT_TANH, ACT_SOFTMAX, 3, LOSS_SCE);
        layers_text(&s, lists[i]);
        grad_check(lists[i], &s, 3, 1);
    }
    model_spec s;
    spec_mlp(&s, ACT_TANH, ACT_SOFTMAX, 3, LOSS_SCE);
    layers_text(&s, "[{conv2d: 2, kernel_size: 3, padding: same, activation: tanh}, {residual: "
                    "[{conv2d: 3, kernel_size: 2, padding: same, activation: tanh}, {conv2d: 2, "
                    "kernel_size: 3, padding: same}]}, flatten, {dense: 3, activation: softmax}]");
    grad_check_shape("residual of conv2d layers", &s, shape_image(5, 4, 1), 3, 0);
    /* A Transformer's feed-forward block on a sequence [T, E]. */
    spec_mlp(&s, ACT_TANH, ACT_SOFTMAX, 3, LOSS_SCE);
    layers_text(&s, "[{dense: 4, activation: tanh}, {residual: [layer_normalization, {dense: 8, "
                    "activation: gelu}, {dense: 4}]}, flatten, {dense: 3, activation: softmax}]");
    grad_check_shape("residual [layer_normalization, dense gelu, dense] on a sequence", &s,
                     shape_seq(3, 5), 3, 0);
}

/* A batch of more than 1024 rows: the loss of group_loss_grad over all of
 * its rows is the loss group_evaluate gives for the same data (a fixed
 * index array of 1024 once read past its end here; ASan sees it). */
static void big_batch_check(void)
{
    enum { N = 1500, D = 6 };
    cohort_dataset ds;
    memset(&ds, 0, sizeof ds);
    float *x = malloc(N * D * sizeof *x);
    int32_t *y = malloc(N * sizeof *y);
    CHECK(x && y);
    if (!x || !y)
        return;
    rng_state r;
    rng_seed(&r, 5, 0);
    for (int i = 0; i < N * D; i++)
        x[i] = 2.0f * rng_uniform(&r) - 1.0f;
    for (int i = 0; i < N; i++)
        y[i] = (int32_t)(i % 3);
    ds.n = N;
    ds.dim = D;
    ds.x = x;
    ds.y = y;
    ds.n_classes = 3;
    data_view v = data_view_all(&ds);
    model_spec s;
    spec_mlp(&s, ACT_TANH, ACT_SOFTMAX, 3, LOSS_SCE);
    s.batch_size = 2048;
    const model_spec *specs[1] = {&s};
    train_group *g;
    cohort_error err;
    cohort_status st = group_create(specs, 1, shape_flat(D), 3, &reg->dev[0], 1, &g, &err);
    CHECK_MSG(st == COHORT_OK, "batch of 2048: %s", err.message);
    if (!st) {
        float *grad = malloc(group_layout(g)->n_params * sizeof *grad);
        double loss = NAN, eloss;
        eval_metrics em;
        CHECK(grad != NULL);
        if (grad)
            group_loss_grad(g, &v, 0, 0, &loss, grad);
        group_evaluate(g, &v, &em, NULL);
        eloss = em.loss;
        CHECK_MSG(isfinite(loss) && fabs(loss - eloss) <= 1e-5 * fabs(eloss),
                  "batch of %d rows: group_loss_grad's loss %.8g, group_evaluate's %.8g", N, loss,
                  eloss);
        free(grad);
        group_free(g);
    }
    free(x);
    free(y);
}

/* The embedding's table (rows of ids some samples repeat, rows no sample
 * reads: a zero gradient) and a position embedding after it, in place over
 * the embedding's output, or on a real-valued sequence as the first layer
 * (longer than the sequence: its last rows get a zero gradient); with
 * mask_zero into recurrent layers that skip the padded steps. */
static void token_checks(void)
{
    tiny_vocab = 9;
    sample_shape ids = shape_flat(5);
    image_check("embedding + flatten", ids, 0, 2,
                (layer_spec[]){layer_text("{embedding: {input_dim: 9, output_dim: 3}}"),
                               plain("flatten")});
    image_check("embedding + position_embedding + dense on the sequence + flatten", ids, 0, 4,
                (layer_spec[]){layer_text("{embedding: [9, 4]}"),
                               layer_text("{position_embedding: 7}"),
                               layer_dense(3, ACT_TANH), plain("flatten")});
    image_check("embedding + dense + position_embedding (a copy) + flatten", ids, 0, 4,
                (layer_spec[]){layer_text("{embedding: [9, 4]}"), layer_dense(3, ACT_TANH),
                               layer_text("{position_embedding: 5}"), plain("flatten")});
    /* mask_zero: id 0 (about one id in 9 here) is padding for the recurrent
     * layer after it; the mask passes through the position embedding. */
    image_check("masked embedding + lstm", ids, 0, 2,
                (layer_spec[]){layer_text("{embedding: {input_dim: 9, output_dim: 3, "
                                          "mask_zero: true}}"),
                               layer_text("{lstm: 3}")});
    image_check("masked embedding + position_embedding + gru", ids, 0, 3,
                (layer_spec[]){layer_text("{embedding: {input_dim: 9, output_dim: 3, "
                                          "mask_zero: true}}"),
                               layer_text("{position_embedding: 5}"), layer_text("{gru: 3}")});
    tiny_vocab = 0;
    image_check("position_embedding on the input + dense + flatten", shape_seq(4, 3), 0, 3,
                (layer_spec[]){layer_text("{position_embedding: 6}"), layer_dense(2, ACT_TANH),
                               plain("flatten")});
}

int main(void)
{
    cohort_error err;
    if (devices_discover(&reg, &err)) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    model_spec s;
    static const act_kind acts[] = {ACT_RELU, ACT_SIGMOID, ACT_TANH, ACT_LINEAR, ACT_GELU,
                                    ACT_SILU};
    static const char *names[] = {"relu", "sigmoid", "tanh", "linear", "gelu", "silu"};
    for (int a = 0; a < 6; a++) {
        char what[64];
        spec_mlp(&s, acts[a], ACT_SOFTMAX, 3, LOSS_SCE);
        snprintf(what, sizeof what, "%s + softmax/cross-entropy", names[a]);
        grad_check(what, &s, 3, 0);
        spec_mlp(&s, acts[a], ACT_LINEAR, 3, LOSS_MSE);
        snprintf(what, sizeof what, "%s + mse (one-hot)", names[a]);
        grad_check(what, &s, 3, 0);
        spec_mlp(&s, ACT_TANH, acts[a], 1, LOSS_MSE);
        snprintf(what, sizeof what, "%s output + mse (1 unit)", names[a]);
        grad_check(what, &s, 3, 0);
    }
    /* Dropout between dense layers and on the input, with fixed masks. */
    spec_mlp(&s, ACT_SIGMOID, ACT_SOFTMAX, 3, LOSS_SCE);
    s.n_layers = 5;
    s.layers[4] = s.layers[2];
    s.layers[3] = layer_dropout(0.3f);
    s.layers[2] = s.layers[1];
    s.layers[1] = layer_dropout(0.5f);
    grad_check("dense/dropout/dense/dropout/dense", &s, 3, 1);
    s.n_layers = 3;
    s.layers[0] = layer_dropout(0.25f);
    s.layers[1] = layer_dense(5, ACT_TANH);
    s.layers[2] = layer_dense(3, ACT_SOFTMAX);
    grad_check("input dropout", &s, 3, 1);
    /* gelu and silu as layers of their own: after a dense layer that reads
     * its output (a copy), after a dropout (written over its input), and
     * one after the other. */
    s.n_layers = 5;
    s.layers[0] = layer_dense(5, ACT_TANH);
    s.layers[1] = layer_act(ACT_GELU);
    s.layers[2] = layer_dropout(0.2f);
    s.layers[3] = layer_act(ACT_SILU);
    s.layers[4] = layer_dense(3, ACT_SOFTMAX);
    grad_check("dense/gelu/dropout/silu/dense", &s, 3, 1);
    s.layers[2] = layer_act(ACT_GELU);
    grad_check("dense/gelu/gelu/silu/dense", &s, 3, 0);
    /* A single layer: softmax regression. */
    spec_mlp(&s, ACT_RELU, ACT_SOFTMAX, 3, LOSS_SCE);
    s.n_layers = 1;
    s.layers[0] = layer_dense(3, ACT_SOFTMAX);
    grad_check("softmax regression", &s, 3, 0);
    image_checks();
    sequence_checks();
    CHECK(layer_register(&tok_ops) == 0 && layer_register(&take_flat_ops) == 0);
    rnn_checks();
    residual_checks();
    attention_checks();
    masked_encoder_checks();
    conv1d_checks();
    mask_checks();
    token_checks();
    big_batch_check();
    devices_free(reg);
    return check_done("test_grad");
}
