/*
 * One training step of a group: the batch gathered into the input region,
 * every layer's forward pass from the layer table, the loss and the kernel
 * regularizers' penalty, the backward pass (layers that can fuse their
 * optimizer step into their weight gradient do, in groups that neither clip
 * nor regularize), the regularizers' gradients and the clips, and the
 * optimizer over the rest, at each model's scheduled rate. On a CPU each model's steps
 * run start to end before the next model's (model_major), so its tensors
 * stay in cache; elsewhere each op is batched over the whole group.
 */
#include "train/group_impl.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Width of activation region i (0: the input; i + 1: layer i's output). */
static size_t region_width(const train_group *g, int i)
{
    return i == 0 ? (size_t)g->L.n_in : shape_size(g->L.layers[i - 1].out);
}

float *group_act(train_group *g, int i, krange r, size_t *stride)
{
    const model_layout *L = &g->L;
    while (i > 0 && L->layers[i - 1].alias)
        i--; /* an alias's output is its input */
    size_t B = (size_t)L->B, off = i == 0 ? 0 : L->layers[i - 1].act_off;
    *stride = B * region_width(g, i);
    if (i == 0 && g->in_shared) {
        *stride = 0;
        return g->act + (size_t)g->in_slot * B * (size_t)L->n_in;
    }
    return AT(g->act + (size_t)g->K * B * off, *stride, r);
}

/* Input slot `slot` (a model's own, or the shared one) transposed, made if
 * it is not current. */
static const float *slot_transposed(train_group *g, int slot, const float *X, int rows)
{
    float *xt = g->grads + (size_t)slot * g->L.p_stride + g->L.layers[0].p_off;
    if (!g->xt_ready[slot]) {
        g->be->transpose(g->ctx, xt, g->xt_ld, X, g->L.n_in, rows, g->L.n_in);
        g->xt_ready[slot] = 1;
    }
    return xt;
}

/* The input of models r transposed, for the first layer's forward pass,
 * with its stride between models in *sxt (0 when they share one); NULL
 * where the group does not use it. */
static const float *input_transposed(train_group *g, krange r, int rows, size_t *sxt)
{
    *sxt = 0;
    if (!g->xt_layer[0])
        return NULL;
    size_t sx;
    const float *X = group_act(g, 0, r, &sx);
    if (g->in_shared)
        return slot_transposed(g, g->in_slot, X, rows);
    for (int k = 0; k < r.count; k++)
        slot_transposed(g, r.k0 + k, X + (size_t)k * sx, rows);
    *sxt = g->L.p_stride;
    return g->grads + (size_t)r.k0 * g->L.p_stride + g->L.layers[0].p_off;
}

/* Layer p's input (a later layer's: the models' own activations) of
 * every model of the pass transposed into its gradient of that layer. */
static const float *layer_input_transposed(train_group *g, const layer_pass *p)
{
    int in = (int)shape_size(p->lp->in);
    for (int k = 0; k < p->count; k++)
        g->be->transpose(g->ctx, p->G + (size_t)k * p->sP + p->lp->p_off, g->xt_ld,
                         p->X + (size_t)k * p->sX, in, p->rows, in);
    return p->G + p->lp->p_off;
}

/* Layer i's pass over models r: its tensors and their strides. */
static layer_pass pass_of(train_group *g, int i, krange r, int rows, const layer_spec **ls)
{
    const model_layout *L = &g->L;
    const layer_plan *lp = &L->layers[i];
    size_t B = (size_t)L->B, K = (size_t)g->K, P = L->p_stride;
    for (int k = 0; k < r.count; k++)
        ls[k] = &g->spec[r.k0 + k]->layers[i];
    layer_pass p;
    memset(&p, 0, sizeof p);
    p.be = g->be;
    p.ctx = g->ctx;
    p.lp = lp;
    p.ls = ls;
    p.seed = g->seed + r.k0;
    p.count = r.count;
    p.rows = rows;
    p.batch = L->B;
    p.X = group_act(g, i, r, &p.sX);
    p.Y = group_act(g, i + 1, r, &p.sY);
    p.sP = P;
    p.W = AT(g->params, P, r);
    p.G = AT(g->grads, P, r);
    p.s_saved = B * lp->n_saved;
    p.saved = AT(g->saved + K * B * lp->saved_off, p.s_saved, r);
    p.s_stat = L->stat_width;
    p.stat = AT(g->stat, p.s_stat, r) + lp->stat_off;
    p.s_work = B * L->work_width;
    p.work = AT(g->work, p.s_work, r);
    p.sd = B * (size_t)L->max_width;
    p.host = g->hp;
    if (lp->mask_in)
        p.tokens = group_act(g, 0, r, &p.s_tokens);
    if (lp->pair >= 0) {
        const layer_plan *pp = &L->layers[lp->pair];
        p.pair_X = group_act(g, lp->pair, r, &p.s_pair_X);
        p.s_pair_saved = B * pp->n_saved;
        p.pair_saved = AT(g->saved + K * B * pp->saved_off, p.s_pair_saved, r);
    }
    return p;
}

void group_forward(train_group *g, krange r, int rows, int training, uint64_t counter)
{
    const layer_spec *ls[COHORT_MAX_GROUP], *ls_next[COHORT_MAX_GROUP];
    for (int i = 0; i < g->L.n_layers; i++) {
        layer_pass p = pass_of(g, i, r, rows, ls);
        p.training = training;
        p.counter = counter;
        p.active = g->active + r.k0;
        if (i == 0) {
            p.XT = input_transposed(g, r, rows, &p.sXT);
        } else if (g->xt_layer[i]) {
            p.XT = layer_input_transposed(g, &p);
            p.sXT = g->L.p_stride;
        }
        p.ldt = g->xt_ld;
        const layer_ops *ops = g->L.layers[i].kind;
        /* A pair the backend fuses (layer_ops.forward_next); the next layer
         * reads no transposed input there. */
        if (ops->forward_next && i + 1 < g->L.n_layers && !g->xt_layer[i + 1]) {
            layer_pass q = pass_of(g, i + 1, r, rows, ls_next);
            q.training = training;
            q.counter = counter;
            q.active = p.active;
            q.ldt = g->xt_ld;
            if (ops->forward_next(&p, &q)) {
                i++;
                continue;
            }
        }
        ops->forward(&p);
    }
}

void group_loss_pass(train_group *g, krange r, int rows, int grad)
{
    const model_layout *L = &g->L;
    size_t B = (size_t)L->B, sd = B * (size_t)L->max_width, so;
    float *out = group_act(g, L->n_layers, r, &so);
    float *d = grad ? AT(g->delta[0], sd, r) : NULL;
    size_t slot = g->in_shared ? (size_t)g->in_slot : (size_t)r.k0;
    size_t sy = g->in_shared ? 0 : B, st = sy * (size_t)L->n_out;
    const int32_t *y = g->labels + slot * B;
    const float *t = g->tgt_rows ? g->targets + slot * B * (size_t)L->n_out : NULL;
    /* Class weights are of training, as Keras's fit has them: validation
     * and test losses are unweighted. */
    const float *cw = grad && g->classw ? g->classw + (size_t)r.k0 * (size_t)L->n_cw : NULL;
    loss_step o = {g->spec[0]->loss, L->out_act,   L->metric, g->smoothing + r.k0,
                   g->huber_delta + r.k0, cw, L->n_cw};
    g->be->loss(g->ctx, &o, out, so, y, sy, t, st, d, sd, g->stats + STATS_PER_MODEL * r.k0, rows, L->n_out,
                1.0f / (float)rows, r.count);
}

float group_lr_at(const train_group *g, int k, int64_t step)
{
    return (float)model_lr_at(&g->spec[k]->opt, (double)g->lr[k], step);
}

/* The optimizer settings of models r for the step that makes the count t:
 * each model's learning rate at step t - 1 of its schedule, and its
 * optimizer's scalars at that rate (none for t = 0: no step). */
static optim_step optim_of(train_group *g, krange r, int64_t t)
{
    const optim_entry *e = optim_entry_of(g->spec[0]->opt.kind);
    for (int k = r.k0; k < r.k0 + r.count; k++) {
        g->lr_step[k] = group_lr_at(g, k, t > 0 ? t - 1 : 0);
        if (t > 0)
            e->scalars(&g->spec[k]->opt, g->lr_step[k], t, &g->memo[k], &g->sc[k]);
    }
    optim_step o = {g->sc + r.k0, g->active + r.k0};
    return o;
}

/* Layer i's backward pass over models r: dY in delta[cur], dX in the other
 * delta (dY itself for an entry with grad_in_place; NULL for the first
 * trained layer), and the optimizer step o where backward may take it. */
static layer_pass backward_pass_of(train_group *g, int i, krange r, int rows, int cur,
                                   const optim_step *o, int64_t t, const layer_spec **ls)
{
    const model_layout *L = &g->L;
    size_t P = L->p_stride;
    layer_pass p = pass_of(g, i, r, rows, ls);
    p.dY = AT(g->delta[cur], p.sd, r);
    if (i > g->first_trained)
        p.dX = L->layers[i].kind->grad_in_place ? p.dY : AT(g->delta[1 - cur], p.sd, r);
    if (t > 0 && g->fuse_step) {
        p.step = o;
        p.opt = g->spec[0]->opt.kind;
        p.s1 = L->opt_slots ? AT(g->opt_m, P, r) : NULL;
        p.s2 = g->opt_v ? AT(g->opt_v, P, r) : NULL;
    }
    return p;
}

void group_backward(train_group *g, krange r, int rows, int64_t t, unsigned char *stepped)
{
    const model_layout *L = &g->L;
    const layer_spec *ls[COHORT_MAX_GROUP], *ls_prev[COHORT_MAX_GROUP];
    optim_step o = optim_of(g, r, t);
    int cur = 0;
    memset(stepped, 0, (size_t)L->n_layers);
    for (int i = L->n_layers - 1; i >= g->first_trained; i--) {
        const layer_ops *ops = L->layers[i].kind;
        layer_pass p = backward_pass_of(g, i, r, rows, cur, &o, t, ls);
        /* Layer i and the one before it as a pair the backend fuses
         * (layer_ops.backward_next): its dY is this layer's dX. */
        const layer_ops *prev = i > g->first_trained ? L->layers[i - 1].kind : NULL;
        if (prev && prev->backward_next && p.dX != p.dY) {
            layer_pass b = backward_pass_of(g, i - 1, r, rows, 1 - cur, &o, t, ls_prev);
            int st = prev->backward_next(&b, &p);
            if (st >= 0) {
                stepped[i - 1] = (unsigned char)st;
                if (!b.dX || b.dX == b.dY)
                    cur = 1 - cur;
                i--;
                continue;
            }
        }
        stepped[i] = (unsigned char)ops->backward(&p);
        if (p.dX && p.dX != p.dY)
            cur = 1 - cur;
    }
    /* A stored gradient overwrites the transposed input kept there. */
    if (g->xt_layer[0] && !stepped[0])
        memset(g->xt_ready, 0, sizeof g->xt_ready);
}

/* One optimizer step of models r over what backward did not step; t is the
 * step count after it. */
static void optimize(train_group *g, krange r, int64_t t, const unsigned char *stepped)
{
    const model_layout *L = &g->L;
    optim_step o = optim_of(g, r, t);
    size_t P = L->p_stride;
    float *w = AT(g->params, P, r), *gr = AT(g->grads, P, r);
    float *m = L->opt_slots ? AT(g->opt_m, P, r) : NULL;
    float *v = g->opt_v ? AT(g->opt_v, P, r) : NULL;
    int any = 0;
    for (int i = 0; i < L->n_layers; i++)
        any |= stepped[i];
    /* Every trained parameter in one call, or each layer's unstepped part. */
    for (int i = 0; i < (any ? L->n_layers : 1); i++) {
        const layer_plan *lp = &L->layers[i];
        size_t off = any ? lp->p_off + (stepped[i] ? lp->n_fused : 0) : 0;
        size_t n = any ? lp->p_off + lp->n_params - off : L->n_trained;
        if (n == 0)
            continue;
        g->be->optimize(g->ctx, g->spec[0]->opt.kind, w + off, gr + off, m ? m + off : NULL,
                        v ? v + off : NULL, P, n, &o, r.count);
    }
}

/* The kernel (a dense or conv2d layer's first tensor) of layer i. */
static layer_tensor kernel_of(const layer_plan *lp)
{
    layer_tensor t[LAYER_TENSORS_MAX];
    lp->kind->tensors(lp, t);
    return t[0];
}

/* Layer i's regularizer factors of models r into l1, l2; returns whether
 * any model has one. */
static int reg_of(const train_group *g, int i, krange r, float *l1, float *l2)
{
    int any = 0;
    for (int k = 0; k < r.count; k++) {
        const layer_spec *ls = &g->spec[r.k0 + k]->layers[i];
        l1[k] = ls->l1;
        l2[k] = ls->l2;
        any |= ls->l1 != 0.0f || ls->l2 != 0.0f;
    }
    return any;
}

void group_reg_penalty(train_group *g, krange r, int rows)
{
    float l1[COHORT_MAX_GROUP], l2[COHORT_MAX_GROUP];
    size_t P = g->L.p_stride;
    for (int i = 0; i < g->L.n_layers; i++) {
        if (!reg_of(g, i, r, l1, l2))
            continue;
        layer_tensor t = kernel_of(&g->L.layers[i]);
        g->be->reg_penalty(g->ctx, g->stats + STATS_PER_MODEL * r.k0, AT(g->params, P, r) + t.off, P, t.n, l1,
                           l2, rows, r.count);
    }
}

/* Which of models r set a clip of kind c (their values into out, 0 for
 * none); returns whether any does. */
static int clip_of(const float *c, krange r, float *out)
{
    int any = 0;
    for (int k = 0; k < r.count; k++)
        any |= (out[k] = c[r.k0 + k]) > 0.0f;
    return any;
}

/*
 * What Keras does to the gradients between the backward pass and the
 * update, in its order: the kernel regularizers' gradients join the loss's
 * (the penalty is part of the loss), then the clip: per variable (each
 * layer's kernel, bias, gamma, beta alone), over all of a model's trained
 * variables, or per element.
 */
static void adjust_grads(train_group *g, krange r)
{
    const model_layout *L = &g->L;
    size_t P = L->p_stride;
    float a[COHORT_MAX_GROUP], b[COHORT_MAX_GROUP];
    float *w = AT(g->params, P, r), *gr = AT(g->grads, P, r);
    double *acc = g->norms + r.k0;
    for (int i = 0; i < L->n_layers; i++)
        if (reg_of(g, i, r, a, b)) {
            layer_tensor t = kernel_of(&L->layers[i]);
            g->be->reg_grad(g->ctx, gr + t.off, w + t.off, P, t.n, a, b, r.count);
        }
    if (clip_of(g->clipnorm, r, a))
        for (int i = 0; i < L->n_layers; i++) {
            const layer_plan *lp = &L->layers[i];
            const layer_ops *ops = lp->kind;
            layer_tensor t[LAYER_TENSORS_MAX];
            int n = lp->n_params && ops->tensors ? ops->tensors(lp, t) : 0;
            for (int j = 0; j < n; j++) {
                if (t[j].off + t[j].n > L->n_trained)
                    continue; /* moving statistics: not a trained variable */
                if (j > 0 && t[j].off == t[j - 1].off)
                    continue; /* a file's alone, over the one before (lstm's bias_hh_l0) */
                g->be->sum_sq(g->ctx, acc, gr + t[j].off, P, t[j].n, 0, r.count);
                g->be->clip_norm(g->ctx, gr + t[j].off, P, t[j].n, acc, a, r.count);
            }
        }
    if (clip_of(g->global_clipnorm, r, a)) {
        g->be->sum_sq(g->ctx, acc, gr, P, L->n_trained, 0, r.count);
        g->be->clip_norm(g->ctx, gr, P, L->n_trained, acc, a, r.count);
    }
    if (clip_of(g->clipvalue, r, a))
        g->be->clip_value(g->ctx, gr, P, L->n_trained, a, r.count);
}

/* One training step of models r on the batch in the input region; t is
 * the step count after it. */
static void train_step(train_group *g, krange r, int rows, uint64_t counter, int64_t t)
{
    unsigned char stepped[COHORT_MAX_LAYERS];
    group_forward(g, r, rows, 1, counter);
    group_loss_pass(g, r, rows, 1);
    group_reg_penalty(g, r, rows);
    group_backward(g, r, rows, t, stepped);
    if (!g->fuse_step)
        adjust_grads(g, r);
    optimize(g, r, t, stepped);
}

/* The targets of rows ix into slot `slot` (dst stride: per model): target
 * rows where the loss takes rows and d has them as wide as the output,
 * else class labels (made one-hot, or taken as a number, by the loss). */
static void load_targets(train_group *g, const data_view *d, size_t slot, size_t stride_models,
                         const int64_t *ix, size_t stride, int rows, int count)
{
    size_t B = (size_t)g->L.B, w = (size_t)g->L.n_out;
    g->tgt_rows = g->spec[0]->loss != LOSS_SCE && d->t && d->t_dim == (int64_t)w;
    if (g->tgt_rows)
        g->be->load_rows(g->ctx, g->targets + slot * B * w, stride_models * w, d->t, NULL,
                         d->t_dim, ix, stride, rows, count);
    else
        g->be->load_labels(g->ctx, g->labels + slot * B, stride_models, d->y, ix, stride, rows,
                           count);
}

void group_load_batch(train_group *g, const data_view *d, const int64_t *ix, size_t stride,
                      int rows)
{
    g->in_shared = stride == 0 && g->can_share;
    g->in_slot = 0;
    memset(g->xt_ready, 0, sizeof g->xt_ready);
    int count = g->in_shared ? 1 : g->K;
    g->be->load_rows(g->ctx, g->act, (size_t)g->L.B * (size_t)g->L.n_in, d->x, d->x8, d->dim, ix,
                     stride, rows, count);
    load_targets(g, d, 0, (size_t)g->L.B, ix, stride, rows, count);
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

int group_batch_rows(int64_t n, int64_t step, int B)
{
    return n - step * B < B ? (int)(n - step * B) : B;
}

/* Load batch `step` of `order` into input slot `slot`; returns its rows. */
static int load_slot(train_group *g, const data_view *d, const int64_t *order, int64_t step,
                     int slot)
{
    size_t B = (size_t)g->L.B, in = (size_t)g->L.n_in;
    int rows = group_batch_rows(d->n, step, g->L.B);
    const int64_t *ix = order + step * (int64_t)B;
    g->xt_ready[slot] = 0;
    g->be->load_rows(g->ctx, g->act + (size_t)slot * B * in, 0, d->x, d->x8, d->dim, ix, 0, rows,
                     1);
    load_targets(g, d, (size_t)slot, 0, ix, 0, rows, 1);
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

int group_train_steps(train_group *g, const data_view *d, const int64_t *order, int64_t step,
                      int64_t steps, uint64_t counter)
{
    /* On a CPU, groups of two or more train in blocks of steps. */
    if (g->be->model_major && g->K > 1) {
        int S = block_steps(g, steps - step);
        train_block(g, d, order, step, S, counter);
        return S;
    }
    krange all = {0, g->K};
    int rows = group_batch_rows(d->n, step, g->L.B);
    group_load_batch(g, d, order + step * g->L.B, g->shared ? 0 : (size_t)d->n, rows);
    train_step(g, all, rows, counter, ++g->t);
    return 1;
}

void group_read_stats(train_group *g, double *host)
{
    g->be->copy_d2h(g->ctx, host, g->stats, (size_t)g->K * STATS_PER_MODEL * sizeof(double));
}

void group_loss_grad(train_group *g, const data_view *d, int dropout, uint64_t counter,
                     double *loss, float *grad)
{
    int K = g->K, B = g->L.B, rows = (int)(d->n < B ? d->n : B);
    int64_t *ix = malloc((size_t)(rows > 0 ? rows : 1) * sizeof *ix);
    if (!ix) {
        for (int k = 0; k < K; k++)
            loss[k] = NAN;
        return;
    }
    for (int r = 0; r < rows; r++)
        ix[r] = r;
    group_load_batch(g, d, ix, 0, rows);
    free(ix);
    g->be->memzero(g->ctx, g->stats, (size_t)K * STATS_PER_MODEL * sizeof(double));
    krange all = {0, K};
    unsigned char stepped[COHORT_MAX_LAYERS];
    group_forward(g, all, rows, dropout, counter);
    group_loss_pass(g, all, rows, 1);
    group_backward(g, all, rows, 0, stepped);
    double st[COHORT_MAX_GROUP * STATS_PER_MODEL];
    group_read_stats(g, st);
    for (int k = 0; k < K; k++)
        loss[k] = st[STATS_PER_MODEL * k + STAT_LOSS_SUM] / rows;
    for (int k = 0; k < K; k++)
        g->be->copy_d2h(g->ctx, grad + (size_t)k * g->L.n_params, g->grads + (size_t)k * g->L.p_stride,
                        g->L.n_params * sizeof(float));
}
