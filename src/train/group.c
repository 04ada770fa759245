/*
 * The training group: K same-shaped models whose every array is [K, ...], so
 * that each op is one batched call. One slab holds all of it (layout.c).
 */
#include "io/io.h"
#include "train/train.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct train_group {
    model_layout L;
    int K;
    const model_spec *spec[64];
    cohort_device *dev;
    const backend_ops *be;
    backend_ctx *ctx;
    pool_account acct;
    char *slab;
    float *params, *grads, *opt_m, *opt_v, *act, *delta[2], *mask, *best;
    int32_t *labels;
    double *stats;
    /* host-side, [K] each */
    float lr[64], momentum[64], beta1[64], beta2[64], eps[64], wd[64], rate[64];
    int nesterov[64];
    unsigned char active[64];
    uint64_t key[64];
    int64_t t; /* optimizer steps taken */
    int64_t *order; /* [K, n] shuffle orders for the current fit */
    float *host;    /* [P] host scratch */
    int stats_every; /* steps between metric reads */
    int model_major; /* one model's whole step after another (CPU), not op by op over K */
    int can_share;   /* the first layer is dense: K models can read one input copy */
    int shared;      /* every member draws the same shuffle order (shared_order) */
    int in_shared;   /* the batch in the input region is one copy read by all K */
    int in_slot;     /* with in_shared: which of the K input slots holds the batch */
    /* The first layer's forward pass from its input transposed (the
     * backend's dense_forward): ldt columns; 0 where unused. Input slot s's
     * transpose is kept in model s's weight gradient, which the fused step
     * (dense_step) never writes; xt_ready[s] says it is current. */
    int xt_ldt;
    unsigned char xt_ready[64];
};

const char *model_state_str(model_state s)
{
    switch (s) {
    case MODEL_PENDING: return "pending";
    case MODEL_RUNNING: return "running";
    case MODEL_OK: return "ok";
    case MODEL_FAILED: return "failed";
    case MODEL_DIVERGED: return "diverged";
    }
    return "unknown";
}

void model_init_params(const model_spec *spec, const model_layout *L, float *host)
{
    for (int j = 0; j < L->n_dense; j++) {
        const dense_layout *d = &L->dense[j];
        rng_state r;
        rng_seed(&r, spec->seed, 1000 + (uint64_t)d->spec_index);
        float limit = sqrtf(6.0f / (float)(d->in + d->out));
        size_t n = (size_t)d->in * (size_t)d->out;
        for (size_t i = 0; i < n; i++)
            host[d->w_off + i] = (2.0f * rng_uniform(&r) - 1.0f) * limit;
        memset(host + d->b_off, 0, (size_t)d->out * sizeof(float));
    }
}

cohort_status model_load_params(const model_spec *spec, const model_layout *L, const char *path,
                                float *host, cohort_error *err)
{
    st_file f;
    cohort_status st = st_read(path, &f, err);
    if (st)
        return cohort_fail_prefix(err, "model '%s': init_from", spec->name);
    for (int j = 0; j < L->n_dense && !st; j++) {
        const dense_layout *d = &L->dense[j];
        for (int part = 0; part < 2 && !st; part++) {
            char name[64];
            snprintf(name, sizeof name, "layers.%d.%s", d->spec_index, part ? "bias" : "weight");
            const st_tensor *t = st_find(&f, name);
            int64_t want0 = d->out, want1 = part ? 0 : d->in;
            int ok = t && t->ndim == (part ? 1 : 2) && t->shape[0] == want0 &&
                     (part || t->shape[1] == want1);
            if (!t) {
                st = cohort_fail(err, COHORT_ERR_INPUT,
                                 "model '%s': init_from %s has no tensor %s", spec->name, path,
                                 name);
            } else if (!ok) {
                char shape[64] = "";
                for (int i = 0; i < t->ndim; i++)
                    snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld",
                             i ? ", " : "", (long long)t->shape[i]);
                if (part)
                    st = cohort_fail(err, COHORT_ERR_INPUT,
                                     "model '%s': init_from %s: %s has shape [%s], the model "
                                     "needs [%d]",
                                     spec->name, path, name, shape, d->out);
                else
                    st = cohort_fail(err, COHORT_ERR_INPUT,
                                     "model '%s': init_from %s: %s has shape [%s], the model "
                                     "needs [%d, %d]",
                                     spec->name, path, name, shape, d->out, d->in);
            } else {
                size_t n = part ? (size_t)d->out : (size_t)d->out * (size_t)d->in;
                memcpy(host + (part ? d->b_off : d->w_off), t->data, n * sizeof(float));
            }
        }
    }
    st_free(&f);
    return st;
}

cohort_status group_create(const model_spec *const *specs, int K, int n_in, int n_classes,
                           cohort_device *dev, int threads, train_group **out, cohort_error *err)
{
    *out = NULL;
    if (K < 1 || K > 64)
        return cohort_fail(err, COHORT_ERR_USAGE, "a group holds 1 to 64 models, not %d", K);
    train_group *g = calloc(1, sizeof *g);
    if (!g)
        return cohort_fail(err, COHORT_ERR_NOMEM, "model '%s': out of host memory", specs[0]->name);
    /* The group's layout: the first spec's shapes, with the union of the
     * buffers any member needs. */
    model_spec merged = *specs[0];
    for (int k = 1; k < K; k++) {
        if (!model_can_fuse(specs[0], specs[k])) {
            free(g);
            return cohort_fail(err, COHORT_ERR_USAGE, "models '%s' and '%s' cannot share a group",
                               specs[0]->name, specs[k]->name);
        }
        if (specs[k]->opt.momentum > merged.opt.momentum)
            merged.opt.momentum = specs[k]->opt.momentum;
        if (specs[k]->early_stop.enabled && specs[k]->early_stop.restore_best)
            merged.early_stop = specs[k]->early_stop;
    }
    cohort_status st = model_layout_make(&merged, n_in, n_classes, K, &g->L, err);
    if (st) {
        free(g);
        return st;
    }
    g->K = K;
    g->dev = dev;
    g->be = dev->be;
    g->stats_every = strcmp(dev->be->name, "cpu") ? 16 : 1;
    /* On a CPU each model's step runs start to end before the next one's, so
     * its gradients are still in cache when the optimizer reads them; a GPU
     * gets every op batched over the whole group instead. */
    g->model_major = !strcmp(dev->be->name, "cpu");
    g->can_share = specs[0]->n_layers > 0 && specs[0]->layers[0].kind == LAYER_DENSE;
    g->shared = g->can_share;
    for (int k = 1; k < K; k++)
        if (!model_same_order(specs[0], specs[k]))
            g->shared = 0;
    for (int k = 0; k < K; k++) {
        const model_spec *s = specs[k];
        g->spec[k] = s;
        g->lr[k] = s->opt.lr;
        g->momentum[k] = s->opt.momentum;
        g->nesterov[k] = s->opt.nesterov;
        g->beta1[k] = s->opt.beta1;
        g->beta2[k] = s->opt.beta2;
        g->eps[k] = s->opt.eps;
        g->wd[k] = s->opt.kind == OPT_ADAMW ? s->opt.weight_decay : 0.0f;
        g->active[k] = 1;
    }
    st = g->be->ctx_create(dev->be_dev, threads, &g->ctx, err);
    if (st) {
        free(g);
        return st;
    }
    const dense_layout *d0 = &g->L.dense[0];
    int ldt = g->be->xt_ld ? g->be->xt_ld(g->ctx, g->L.B) : 0;
    if (ldt > 0 && g->model_major && g->can_share && (size_t)ldt <= (size_t)d0->out)
        g->xt_ldt = ldt;
    const model_layout *L = &g->L;
    g->slab = pool_alloc(dev->pool, L->total_bytes, &g->acct, specs[0]->name, err);
    if (!g->slab) {
        group_free(g);
        return COHORT_ERR_NOMEM;
    }
    g->be->memzero(g->ctx, g->slab, L->total_bytes);
    size_t KP = (size_t)K * L->n_params;
    g->params = (float *)(g->slab + L->buf_off[BUF_PARAMS]);
    g->grads = (float *)(g->slab + L->buf_off[BUF_GRADS]);
    g->opt_m = (float *)(g->slab + L->buf_off[BUF_OPT]);
    g->opt_v = L->opt_slots == 2 ? g->opt_m + KP : NULL;
    g->act = (float *)(g->slab + L->buf_off[BUF_ACT]);
    g->delta[0] = (float *)(g->slab + L->buf_off[BUF_DELTA]);
    g->delta[1] = g->delta[0] + (size_t)K * (size_t)L->B * (size_t)L->max_width;
    g->mask = (float *)(g->slab + L->buf_off[BUF_MASK]);
    g->labels = (int32_t *)(g->slab + L->buf_off[BUF_LABELS]);
    g->stats = (double *)(g->slab + L->buf_off[BUF_STATS]);
    g->best = L->keep_best ? (float *)(g->slab + L->buf_off[BUF_BEST]) : NULL;

    float *host = g->host = malloc(L->n_params * sizeof(float));
    if (!host) {
        group_free(g);
        return cohort_fail(err, COHORT_ERR_NOMEM, "model '%s': out of host memory", specs[0]->name);
    }
    for (int k = 0; k < K && !st; k++) {
        if (specs[k]->init_from[0])
            st = model_load_params(specs[k], L, specs[k]->init_from, host, err);
        else
            model_init_params(specs[k], L, host);
        if (!st)
            group_set_params(g, k, host);
    }
    if (st) {
        group_free(g);
        return st;
    }
    *out = g;
    return COHORT_OK;
}

int group_help_join(train_group *g)
{
    return g->be->help_join && g->be->help_run ? g->be->help_join(g->ctx) : -1;
}

void group_help_run(train_group *g, int slot) { g->be->help_run(g->ctx, slot); }

void group_free(train_group *g)
{
    if (!g)
        return;
    if (g->slab)
        pool_release(g->dev->pool, g->slab, &g->acct);
    if (g->ctx)
        g->be->ctx_free(g->ctx);
    free(g->order);
    free(g->host);
    free(g);
}

const model_layout *group_layout(const train_group *g) { return &g->L; }
uint64_t group_peak_bytes(const train_group *g) { return g->acct.peak; }

void group_get_params(train_group *g, int k, float *host)
{
    g->be->copy_d2h(g->ctx, host, g->params + (size_t)k * g->L.n_params,
                    g->L.n_params * sizeof(float));
}

void group_set_params(train_group *g, int k, const float *host)
{
    g->be->copy_h2d(g->ctx, g->params + (size_t)k * g->L.n_params, host,
                    g->L.n_params * sizeof(float));
}

/* ---- one step ---------------------------------------------------------- */

static float *act_region(train_group *g, int i)
{
    return g->act + (size_t)g->K * (size_t)g->L.B * g->L.act_off[i];
}

/* Width of activation region i: the input (i = 0) or spec layer i-1's output. */
static size_t layer_width(const train_group *g, int i)
{
    size_t end = i < g->spec[0]->n_layers ? g->L.act_off[i + 1] : g->L.act_width;
    return end - g->L.act_off[i];
}

/* Models [k0, k0 + kc) of the group; every op below works on such a range. */
typedef struct krange {
    int k0, kc;
} krange;

/* Model k0's part of a [K, ...] buffer whose per-model stride is s floats. */
#define AT(p, s, r) ((p) + (size_t)(r).k0 * (s))

/* Dropout mask of spec layer i (width w) for models r; stride B * w. */
static float *mask_at(train_group *g, int i, size_t w, krange r)
{
    size_t B = (size_t)g->L.B;
    return AT(g->mask + (size_t)g->K * B * g->L.mask_off[i], B * w, r);
}

/* Activation region i of models r, and its per-model stride: the input is
 * one copy for all (stride 0) when the batch was loaded shared. */
static float *act_at(train_group *g, int i, krange r, size_t *stride)
{
    *stride = (size_t)g->L.B * layer_width(g, i);
    if (i == 0 && g->in_shared) {
        *stride = 0;
        return act_region(g, 0) + (size_t)g->in_slot * (size_t)g->L.B * (size_t)g->L.n_in;
    }
    return AT(act_region(g, i), *stride, r);
}

/* The input of model r.k0 transposed, for dense_forward, made if it is not
 * current; NULL where the group does not use it. */
static float *input_transposed(train_group *g, krange r, int rows)
{
    if (!g->xt_ldt)
        return NULL;
    int slot = g->in_shared ? g->in_slot : r.k0;
    size_t sx;
    const float *X = act_at(g, 0, r, &sx);
    float *xt = g->grads + (size_t)slot * g->L.n_params + g->L.dense[0].w_off;
    if (!g->xt_ready[slot]) {
        g->be->transpose(g->ctx, xt, g->xt_ldt, X, g->L.n_in, rows, g->L.n_in);
        g->xt_ready[slot] = 1;
    }
    return xt;
}

/* Forward pass of `rows` rows already in the input region. `counter` makes
 * dropout masks unique per step; training=0 disables dropout. */
static void forward(train_group *g, krange r, int rows, int training, uint64_t counter)
{
    const model_layout *L = &g->L;
    const model_spec *s = g->spec[0];
    const backend_ops *be = g->be;
    size_t B = (size_t)L->B, P = L->n_params;
    int K = r.kc, j = 0;
    for (int i = 0; i < s->n_layers; i++) {
        size_t sx, sy;
        float *X = act_at(g, i, r, &sx), *Y = act_at(g, i + 1, r, &sy);
        if (s->layers[i].kind == LAYER_DENSE) {
            const dense_layout *d = &L->dense[j++];
            float *xt = i == 0 && K == 1 ? input_transposed(g, r, rows) : NULL;
            if (xt)
                be->dense_forward(g->ctx, Y, d->out, xt, g->xt_ldt,
                                  AT(g->params, P, r) + d->w_off, rows, d->out, d->in);
            else
                be->gemm(g->ctx, 0, 1, rows, d->out, d->in, 1.0f, X, d->in, sx,
                         AT(g->params, P, r) + d->w_off, d->in, P, 0.0f, Y, d->out, sy, K);
            be->bias_act(g->ctx, Y, sy, AT(g->params, P, r) + d->b_off, P, rows, d->out, d->act,
                         K);
        } else {
            size_t w = layer_width(g, i);
            if (training) {
                for (int k = r.k0; k < r.k0 + r.kc; k++) {
                    g->rate[k] = g->spec[k]->layers[i].rate;
                    g->key[k] = g->spec[k]->seed * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(i + 1);
                }
                be->dropout_fwd(g->ctx, Y, X, mask_at(g, i, w, r), B * w, (size_t)rows * w,
                                g->rate + r.k0, g->key + r.k0, counter * B * w, K);
            } else {
                be->copy(g->ctx, Y, X, B * w, (size_t)rows * w, K);
            }
        }
    }
}

/* Loss of the output against the labels; with grad, the output's gradient
 * goes to delta[0]. Adds to stats. */
static void loss_pass(train_group *g, krange r, int rows, int grad)
{
    const model_layout *L = &g->L;
    size_t B = (size_t)L->B, sd = B * (size_t)L->max_width, so;
    float *out = act_at(g, g->spec[0]->n_layers, r, &so);
    float *d = grad ? AT(g->delta[0], sd, r) : NULL;
    size_t sy = g->in_shared ? 0 : B;
    const int32_t *y = g->labels + (g->in_shared ? (size_t)g->in_slot : (size_t)r.k0) * B;
    float scale = 1.0f / (float)rows;
    if (g->spec[0]->loss == LOSS_SCE)
        g->be->softmax_xent(g->ctx, out, so, y, sy, d, sd, g->stats + 4 * r.k0, rows, L->n_out,
                            scale, r.kc);
    else
        g->be->mse(g->ctx, out, so, y, sy, d, sd, g->stats + 4 * r.k0, rows, L->n_out, scale,
                   r.kc);
}

/* The optimizer settings of models r for the step that makes the count t. */
static optim_step optim_of(train_group *g, krange r, int64_t t)
{
    int k0 = r.k0;
    optim_step o = {g->lr + k0, g->momentum + k0, g->beta1 + k0, g->beta2 + k0, g->eps + k0,
                    g->wd + k0, g->nesterov + k0, g->active + k0, t};
    return o;
}

/*
 * Gradients of models r from delta[0]. With t > 0 (the step count after
 * this step) the weights of each dense layer take their optimizer step as
 * soon as their gradient is known, where the backend can fuse the two
 * (dense_step); returns 1 when it did, and optimize() then steps the biases
 * alone. The input gradient of a layer is taken first: it needs the weights
 * before their step.
 */
static int backward(train_group *g, krange r, int rows, int64_t t)
{
    const model_layout *L = &g->L;
    const model_spec *s = g->spec[0];
    const backend_ops *be = g->be;
    size_t B = (size_t)L->B, P = L->n_params, sd = B * (size_t)L->max_width;
    int K = r.kc, j = L->n_dense - 1, cur = 0, stepped = 0;
    int is_dz = s->loss == LOSS_SCE; /* softmax + cross-entropy give dZ directly */
    float *W = AT(g->params, P, r), *G = AT(g->grads, P, r);
    optim_step o = optim_of(g, r, t);
    float *s1 = L->opt_slots ? AT(g->opt_m, P, r) : NULL;
    float *s2 = g->opt_v ? AT(g->opt_v, P, r) : NULL;
    for (int i = s->n_layers - 1; i >= 0; i--) {
        float *d = AT(g->delta[cur], sd, r);
        if (s->layers[i].kind == LAYER_DROPOUT) {
            size_t w = layer_width(g, i);
            be->mul(g->ctx, d, sd, mask_at(g, i, w, r), B * w, (size_t)rows * w, K);
            is_dz = 0;
            continue;
        }
        const dense_layout *dl = &L->dense[j];
        size_t sx, sy, w = dl->w_off;
        float *X = act_at(g, i, r, &sx), *Y = act_at(g, i + 1, r, &sy);
        if (!is_dz)
            be->act_backward(g->ctx, d, sd, Y, sy, (size_t)rows * (size_t)dl->out, dl->act, K);
        be->bias_grad(g->ctx, G + dl->b_off, P, d, sd, rows, dl->out, K);
        if (j > 0)
            be->gemm(g->ctx, 0, 0, rows, dl->in, dl->out, 1.0f, d, dl->out, sd, W + w, dl->in, P,
                     0.0f, AT(g->delta[1 - cur], sd, r), dl->in, sd, K);
        stepped = t > 0 && be->dense_step &&
                  be->dense_step(g->ctx, s->opt.kind, W + w, s1 ? s1 + w : NULL,
                                 s2 ? s2 + w : NULL, P, d, dl->out, sd, X, dl->in, sx, rows,
                                 dl->out, dl->in, &o, K);
        if (!stepped) {
            /* The gradients overwrite the transposed inputs kept there. */
            be->gemm(g->ctx, 1, 0, dl->out, dl->in, rows, 1.0f, d, dl->out, sd, X, dl->in, sx,
                     0.0f, G + w, dl->in, P, K);
            memset(g->xt_ready, 0, sizeof g->xt_ready);
        }
        if (j == 0)
            break;
        cur = 1 - cur;
        j--;
        is_dz = 0;
    }
    return stepped;
}

/* One optimizer step of models r; t is the step count after it. With
 * biases_only, the weights took theirs in backward(). */
static void optimize(train_group *g, krange r, int64_t t, int biases_only)
{
    optim_step o = optim_of(g, r, t);
    size_t P = g->L.n_params;
    float *w = AT(g->params, P, r), *gr = AT(g->grads, P, r);
    float *m = g->L.opt_slots ? AT(g->opt_m, P, r) : NULL;
    float *v = g->opt_v ? AT(g->opt_v, P, r) : NULL;
    for (int j = 0; j < (biases_only ? g->L.n_dense : 1); j++) {
        size_t off = biases_only ? g->L.dense[j].b_off : 0;
        size_t n = biases_only ? (size_t)g->L.dense[j].out : P;
        if (g->spec[0]->opt.kind == OPT_SGD)
            g->be->sgd(g->ctx, w + off, gr + off, m ? m + off : NULL, P, n, &o, r.kc);
        else
            g->be->adam(g->ctx, w + off, gr + off, m + off, v + off, P, n, &o, r.kc);
    }
}

/* Forward and loss of the batch in the input region for every model: one
 * model after another on a CPU, op by op over the group elsewhere. */
static void infer_batch(train_group *g, int rows)
{
    int step = g->model_major ? 1 : g->K;
    for (int k0 = 0; k0 < g->K; k0 += step) {
        krange r = {k0, step};
        forward(g, r, rows, 0, 0);
        loss_pass(g, r, rows, 0);
    }
}

/* One training step of models r on the batch in the input region; t is
 * the step count after it. */
static void train_step(train_group *g, krange r, int rows, uint64_t counter, int64_t t)
{
    forward(g, r, rows, 1, counter);
    loss_pass(g, r, rows, 1);
    optimize(g, r, t, backward(g, r, rows, t));
}

/* Load rows ix[k * stride + r] of d for the models: once for all when every
 * model reads the same rows (stride 0) and the first layer allows it. */
static void load_batch(train_group *g, const data_view *d, const int64_t *ix, size_t stride,
                       int rows)
{
    g->in_shared = stride == 0 && g->can_share;
    g->in_slot = 0;
    memset(g->xt_ready, 0, sizeof g->xt_ready);
    int count = g->in_shared ? 1 : g->K;
    g->be->load_rows(g->ctx, g->act, (size_t)g->L.B * (size_t)g->L.n_in, d->x, d->dim, ix, stride,
                     rows, count);
    g->be->load_labels(g->ctx, g->labels, (size_t)g->L.B, d->y, ix, stride, rows, count);
}

/* The most steps a block takes (train_block). */
#define BLOCK_MAX 64

/*
 * Steps in the next block, at most `left`. A shared order needs one input
 * slot per step of the block (K of them); own orders reuse slot 0, so their
 * blocks may be longer (bench/fused: 64 steps ran 4% faster than 16 for 32
 * models). A stop request (Ctrl-C) is seen between blocks, so a block holds
 * at most BLOCK_FLOPS of work: a fraction of a second on one core.
 */
#define BLOCK_FLOPS 16e9
static int block_steps(const train_group *g, int64_t left)
{
    int cap = g->shared ? g->K : BLOCK_MAX;
    double step_flops = model_train_flops(&g->L, g->L.B) * g->K;
    int by_work = step_flops > 0 ? (int)(BLOCK_FLOPS / step_flops) : cap;
    if (by_work < cap)
        cap = by_work < 1 ? 1 : by_work;
    return left < cap ? (int)left : cap;
}

/* Rows in batch `step` of n samples in batches of B (the last may be short). */
static int batch_rows(int64_t n, int64_t step, int B)
{
    return n - step * B < B ? (int)(n - step * B) : B;
}

/* Load batch `step` of `order` into input slot `slot`; returns its rows. */
static int load_slot(train_group *g, const data_view *d, const int64_t *order, int64_t step,
                     int slot)
{
    size_t B = (size_t)g->L.B, in = (size_t)g->L.n_in;
    int rows = batch_rows(d->n, step, g->L.B);
    const int64_t *ix = order + step * (int64_t)B;
    g->xt_ready[slot] = 0;
    g->be->load_rows(g->ctx, g->act + (size_t)slot * B * in, 0, d->x, d->dim, ix, 0, rows, 1);
    g->be->load_labels(g->ctx, g->labels + (size_t)slot * B, 0, d->y, ix, 0, rows, 1);
    return rows;
}

/*
 * S steps from `step` of every active model of a group, on a CPU (S <= K
 * under a shared order, S <= BLOCK_MAX otherwise):
 * each model takes its S steps in a row, so its parameters and optimizer
 * state stay in cache for S steps instead of one. Under a shared order the
 * S batches are loaded once, into the K input slots, for the whole group;
 * otherwise each model loads its own batch into slot 0 before each step.
 * Each model computes exactly what it would step by step.
 */
static void train_block(train_group *g, const data_view *d, const int64_t *order, int64_t step,
                        int S, uint64_t counter)
{
    int rows[BLOCK_MAX];
    for (int s = 0; g->shared && s < S; s++)
        rows[s] = load_slot(g, d, order, step + s, s);
    g->in_shared = 1;
    int64_t t0 = g->t;
    for (int k = 0; k < g->K; k++) {
        krange r = {k, 1};
        if (!g->active[k])
            continue;
        for (int s = 0; s < S; s++) {
            g->in_slot = g->shared ? s : 0;
            if (!g->shared)
                rows[s] = load_slot(g, d, order + (size_t)k * (size_t)d->n, step + s, 0);
            train_step(g, r, rows[s], counter + (uint64_t)s, t0 + s + 1);
        }
    }
    g->t = t0 + S;
    g->in_slot = 0;
}

/* ---- evaluation ---------------------------------------------------------- */

static void read_stats(train_group *g, double *host)
{
    g->be->copy_d2h(g->ctx, host, g->stats, (size_t)g->K * 4 * sizeof(double));
}

void group_evaluate(train_group *g, const data_view *d, double *loss, double *accuracy,
                    int32_t *pred)
{
    int K = g->K, B = g->L.B, n_out = g->L.n_out;
    int64_t idx[1024];
    double st[64 * 4];
    g->be->memzero(g->ctx, g->stats, (size_t)K * 4 * sizeof(double));
    int64_t *ix = B <= 1024 ? idx : malloc((size_t)B * sizeof *ix);
    /* The outputs (probabilities after loss_pass) of every model, per batch. */
    size_t out_n = (size_t)K * (size_t)B * (size_t)n_out;
    float *out = pred ? malloc(out_n * sizeof *out) : NULL;
    const float *res = act_region(g, g->spec[0]->n_layers);
    if (pred && !out)
        for (int64_t i = 0; i < (int64_t)K * d->n; i++)
            pred[i] = -1; /* out of memory: no class rather than a wrong one */
    for (int64_t r0 = 0; ix && r0 < d->n; r0 += B) {
        int rows = (int)(d->n - r0 < B ? d->n - r0 : B);
        for (int r = 0; r < rows; r++)
            ix[r] = r0 + r;
        load_batch(g, d, ix, 0, rows);
        infer_batch(g, rows);
        if (!out)
            continue;
        g->be->copy_d2h(g->ctx, out, res, out_n * sizeof *out);
        for (int k = 0; k < K; k++)
            for (int r = 0; r < rows; r++)
                pred[(int64_t)k * d->n + r0 + r] =
                    output_class(out + ((size_t)k * (size_t)B + (size_t)r) * (size_t)n_out, n_out);
    }
    free(out);
    if (ix != idx)
        free(ix);
    read_stats(g, st);
    for (int k = 0; k < K; k++) {
        loss[k] = d->n ? st[4 * k] / (double)d->n : NAN;
        accuracy[k] = d->n ? st[4 * k + 1] / (double)d->n : NAN;
    }
}

void group_predict(train_group *g, int k, const data_view *d, float *out)
{
    int B = g->L.B, n_out = g->L.n_out;
    int64_t *ix = malloc((size_t)B * sizeof *ix);
    if (!ix)
        return;
    float *res = act_region(g, g->spec[0]->n_layers) + (size_t)k * (size_t)B * (size_t)n_out;
    for (int64_t r0 = 0; r0 < d->n; r0 += B) {
        int rows = (int)(d->n - r0 < B ? d->n - r0 : B);
        for (int r = 0; r < rows; r++)
            ix[r] = r0 + r;
        load_batch(g, d, ix, 0, rows);
        krange one = {k, 1};
        forward(g, one, rows, 0, 0);
        loss_pass(g, one, rows, 0); /* applies softmax to the logits */
        g->be->copy_d2h(g->ctx, out + r0 * n_out, res, (size_t)rows * (size_t)n_out * sizeof(float));
    }
    free(ix);
}

int output_class(const float *row, int n_out)
{
    if (n_out == 1)
        return (int)lrintf(row[0]);
    int arg = 0;
    for (int j = 1; j < n_out; j++)
        if (row[j] > row[arg])
            arg = j;
    return arg;
}

/* ---- fit ------------------------------------------------------------------ */

static void shuffle_order(int64_t *order, int64_t n, uint64_t seed, int epoch, int shuffle)
{
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    if (!shuffle)
        return;
    /* Each epoch's order depends on (seed, epoch) alone, so a resumed run
     * draws exactly the orders an uninterrupted one would. */
    rng_state r;
    rng_seed(&r, seed, 0x5000 + (uint64_t)epoch);
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)rng_below(&r, (uint64_t)i + 1);
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

static int monitor_is_max(const char *monitor) { return strstr(monitor, "accuracy") != NULL; }

static double monitor_value(const char *monitor, const epoch_metrics *m)
{
    if (strcmp(monitor, "loss") == 0)
        return m->loss;
    if (strcmp(monitor, "accuracy") == 0)
        return m->accuracy;
    if (strcmp(monitor, "val_accuracy") == 0)
        return m->val_accuracy;
    return m->val_loss;
}

static cohort_status fit(train_group *g, const data_view *train, const data_view *val,
                         const train_callbacks *cb, const train_start *start, train_result *res,
                         cohort_error *err)
{
    const model_layout *L = &g->L;
    int K = g->K, B = L->B;
    int64_t n = train->n, steps = (n + B - 1) / B;
    int has_val = val && val->n > 0;
    int max_epochs = 0, e0 = start ? start->epoch : 0;
    int64_t s0 = start ? start->step : 0;
    for (int k = 0; k < K; k++)
        if (g->spec[k]->epochs > max_epochs)
            max_epochs = g->spec[k]->epochs;
    free(g->order);
    g->order = malloc((size_t)(g->shared ? 1 : K) * (size_t)(n > 0 ? n : 1) * sizeof *g->order);
    for (int k = 0; k < K; k++) {
        if (!start) {
            epoch_metrics *h = res[k].history;
            memset(&res[k], 0, sizeof res[k]);
            res[k].history = h;
            res[k].best_value = NAN;
        }
        res[k].state = MODEL_RUNNING;
        res[k].error[0] = 0;
        g->active[k] = 1;
        if (!res[k].history || !g->order) {
            res[k].state = MODEL_FAILED;
            str_copy(res[k].error, sizeof res[k].error, "out of host memory");
            g->active[k] = 0;
        }
    }
    if (!g->order)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of host memory");
    /* On a CPU, groups of two or more train in blocks of steps (train_block). */
    int blocked = g->model_major && K > 1;
    /* Every epoch takes every step, so the step count follows from the start. */
    g->t = (int64_t)e0 * steps + s0;
    double t0 = now_seconds(), st[64 * 4];
    cohort_status ret = COHORT_OK;

    for (int epoch = e0 + 1; epoch <= max_epochs; epoch++) {
        int any = 0;
        for (int k = 0; k < K; k++) {
            if (g->active[k] && epoch > g->spec[k]->epochs) {
                g->active[k] = 0;
                res[k].state = MODEL_OK;
            }
            any |= g->active[k];
        }
        if (!any)
            break;
        double te = now_seconds();
        for (int k = 0; k < (g->shared ? 1 : K); k++)
            shuffle_order(g->order + (size_t)k * (size_t)n, n, model_order_seed(g->spec[k]), epoch,
                          g->spec[k]->shuffle);
        int64_t first = epoch == e0 + 1 ? s0 : 0;
        for (int k = 0; k < K; k++) {
            st[4 * k] = first ? res[k].part_loss : 0.0;
            st[4 * k + 1] = first ? res[k].part_correct : 0.0;
            st[4 * k + 2] = st[4 * k + 3] = 0.0;
        }
        g->be->copy_h2d(g->ctx, g->stats, st, (size_t)K * 4 * sizeof(double));
        for (int64_t step = first; step < steps; step++) {
            uint64_t counter = (uint64_t)(epoch - 1) * (uint64_t)steps + (uint64_t)step;
            if (blocked) {
                /* The step index below is the block's last. */
                int S = block_steps(g, steps - step);
                train_block(g, train, g->order, step, S, counter);
                step += S - 1;
            } else {
                krange all = {0, K};
                int rows = batch_rows(n, step, B);
                load_batch(g, train, g->order + step * B, g->shared ? 0 : (size_t)n, rows);
                train_step(g, all, rows, counter, ++g->t);
            }
            int rows = batch_rows(n, step, B);
            /* Reading the metrics back is a host sync on a GPU: there, every
             * 16 steps and at the end of the epoch; on the CPU, every step. */
            if (g->stats_every > 1 && (step + 1) % g->stats_every != 0 && step + 1 < steps &&
                !(cb && cb->stop && *cb->stop))
                continue;
            read_stats(g, st);
            for (int k = 0; k < K; k++) {
                if (!g->active[k])
                    continue;
                if (!isfinite(st[4 * k + 2]) || !isfinite(st[4 * k])) {
                    g->active[k] = 0;
                    res[k].state = MODEL_DIVERGED;
                    snprintf(res[k].error, sizeof res[k].error,
                             "loss became %s at epoch %d, step %lld%s; lower the learning rate "
                             "(now %g)",
                             isnan(st[4 * k + 2]) ? "NaN" : "Inf", epoch, (long long)step + 1,
                             g->stats_every > 1 || blocked ? " or before" : "", (double)g->lr[k]);
                    res[k].epochs_run = epoch - 1;
                    continue;
                }
                if (cb && cb->on_step) {
                    int64_t done = step * B + rows;
                    cb->on_step(cb->user, k, epoch, step + 1, steps, st[4 * k] / (double)done,
                                st[4 * k + 1] / (double)done);
                }
            }
            if (cb && cb->stop && *cb->stop && step + 1 < steps) {
                for (int k = 0; k < K; k++) {
                    res[k].part_loss = st[4 * k];
                    res[k].part_correct = st[4 * k + 1];
                }
                if (cb->on_checkpoint && cb->on_checkpoint(cb->user, epoch - 1, step + 1, res, err))
                    return cohort_fail_prefix(err, "checkpoint");
                ret = COHORT_ERR_INTERRUPTED;
                break;
            }
        }
        if (ret)
            break;
        double vl[64], va[64];
        if (has_val)
            group_evaluate(g, val, vl, va, NULL);
        double secs = now_seconds() - te;
        for (int k = 0; k < K; k++) {
            if (!g->active[k])
                continue;
            /* A loss can stay finite while the weights run off to Inf (dead
             * ReLUs, saturated outputs): check the weights too. */
            group_get_params(g, k, g->host);
            size_t bad = 0;
            for (size_t i = 0; i < L->n_params; i++)
                bad += !isfinite(g->host[i]);
            if (bad) {
                g->active[k] = 0;
                res[k].state = MODEL_DIVERGED;
                snprintf(res[k].error, sizeof res[k].error,
                         "%zu weights became NaN or Inf in epoch %d; lower the learning rate "
                         "(now %g)",
                         bad, epoch, (double)g->lr[k]);
                res[k].epochs_run = epoch - 1;
                continue;
            }
            epoch_metrics *m = &res[k].history[epoch - 1];
            m->loss = st[4 * k] / (double)n;
            m->accuracy = st[4 * k + 1] / (double)n;
            m->val_loss = has_val ? vl[k] : NAN;
            m->val_accuracy = has_val ? va[k] : NAN;
            m->seconds = secs;
            res[k].epochs_run = epoch;
            res[k].part_loss = res[k].part_correct = 0.0;
            const early_stop_spec *es = &g->spec[k]->early_stop;
            const char *mon = es->enabled ? es->monitor : has_val ? "val_loss" : "loss";
            double v = monitor_value(mon, m), delta = es->enabled ? es->min_delta : 0.0;
            double best = res[k].best_value;
            int is_max = monitor_is_max(mon);
            int improved = isfinite(v) &&
                           (isnan(best) || (is_max ? v > best + delta : v < best - delta));
            if (improved) {
                res[k].best_value = v;
                res[k].wait = 0;
                res[k].best_epoch = epoch;
                res[k].best = *m;
                if (g->best)
                    g->be->copy(g->ctx, g->best + (size_t)k * L->n_params,
                                g->params + (size_t)k * L->n_params, 0, L->n_params, 1);
            } else {
                res[k].wait++;
            }
            if (cb && cb->on_epoch) {
                cohort_error e;
                e.message[0] = 0;
                if (cb->on_epoch(cb->user, k, epoch, m, improved, &e)) {
                    g->active[k] = 0;
                    res[k].state = MODEL_FAILED;
                    str_copy(res[k].error, sizeof res[k].error, e.message);
                    continue;
                }
            }
            /* Keras: stop once `patience` epochs in a row did not improve. */
            if (es->enabled && !improved && res[k].wait >= es->patience &&
                epoch < g->spec[k]->epochs) {
                g->active[k] = 0;
                res[k].state = MODEL_OK;
                res[k].stopped_early = 1;
            }
        }
        if (cb && cb->on_checkpoint && cb->on_checkpoint(cb->user, epoch, 0, res, err)) {
            ret = cohort_fail_prefix(err, "checkpoint");
            break;
        }
        if (cb && cb->stop && *cb->stop && epoch < max_epochs) {
            ret = COHORT_ERR_INTERRUPTED;
            break;
        }
    }
    double secs = now_seconds() - t0;
    for (int k = 0; k < K; k++) {
        if (res[k].state == MODEL_RUNNING)
            res[k].state = ret ? MODEL_FAILED : MODEL_OK;
        if (ret == COHORT_ERR_INTERRUPTED && res[k].state == MODEL_FAILED && !res[k].error[0])
            str_copy(res[k].error, sizeof res[k].error, "interrupted");
        else if (ret && res[k].state == MODEL_FAILED && !res[k].error[0])
            str_copy(res[k].error, sizeof res[k].error, err->message);
        if (res[k].state == MODEL_OK && g->best && res[k].best_epoch > 0 &&
            g->spec[k]->early_stop.enabled && g->spec[k]->early_stop.restore_best)
            g->be->copy(g->ctx, g->params + (size_t)k * L->n_params,
                        g->best + (size_t)k * L->n_params, 0, L->n_params, 1);
        res[k].seconds += secs;
    }
    return ret;
}

/*
 * Denormals are flushed to zero while a group trains. Adam's first moment of
 * a weight whose gradient is always zero (a border pixel of every image)
 * decays by beta1 each step into the denormal range, where each vector op on
 * it takes a microcode assist of a hundred cycles or more: measured, 3% of
 * the large seed model's m was denormal after one epoch. Such values shift a
 * weight by less than 1e-30 of its size, so the results do not change.
 */
cohort_status group_fit(train_group *g, const data_view *train, const data_view *val,
                        const train_callbacks *cb, const train_start *start, train_result *res,
                        cohort_error *err)
{
    unsigned fp = fp_flush_denormals();
    cohort_status st = fit(g, train, val, cb, start, res, err);
    fp_restore(fp);
    return st;
}

void group_get_state(train_group *g, int k, float *params, float *m, float *v, float *best)
{
    size_t P = g->L.n_params, off = (size_t)k * P, bytes = P * sizeof(float);
    group_get_params(g, k, params);
    if (m && g->L.opt_slots >= 1)
        g->be->copy_d2h(g->ctx, m, g->opt_m + off, bytes);
    if (v && g->opt_v)
        g->be->copy_d2h(g->ctx, v, g->opt_v + off, bytes);
    if (best && g->best)
        g->be->copy_d2h(g->ctx, best, g->best + off, bytes);
}

void group_set_state(train_group *g, int k, const float *params, const float *m, const float *v,
                     const float *best)
{
    size_t P = g->L.n_params, off = (size_t)k * P, bytes = P * sizeof(float);
    group_set_params(g, k, params);
    if (m && g->L.opt_slots >= 1)
        g->be->copy_h2d(g->ctx, g->opt_m + off, m, bytes);
    if (v && g->opt_v)
        g->be->copy_h2d(g->ctx, g->opt_v + off, v, bytes);
    if (best && g->best)
        g->be->copy_h2d(g->ctx, g->best + off, best, bytes);
}

int group_opt_slots(const train_group *g) { return g->L.opt_slots; }
int group_keeps_best(const train_group *g) { return g->best != NULL; }

void group_loss_grad(train_group *g, const data_view *d, int dropout, uint64_t counter,
                     double *loss, float *grad)
{
    int K = g->K, B = g->L.B, rows = (int)(d->n < B ? d->n : B);
    int64_t ix[1024];
    for (int r = 0; r < rows && r < 1024; r++)
        ix[r] = r;
    load_batch(g, d, ix, 0, rows);
    g->be->memzero(g->ctx, g->stats, (size_t)K * 4 * sizeof(double));
    krange all = {0, K};
    forward(g, all, rows, dropout, counter);
    loss_pass(g, all, rows, 1);
    backward(g, all, rows, 0);
    double st[64 * 4];
    read_stats(g, st);
    for (int k = 0; k < K; k++)
        loss[k] = st[4 * k] / rows;
    g->be->copy_d2h(g->ctx, grad, g->grads, (size_t)K * g->L.n_params * sizeof(float));
}
