/*
 * The training group: creation (its one slab from the device's pool, its
 * parameters from each model's seed or init_from file) and the copies of
 * its parameters and optimizer state to and from host memory.
 */
#include "io/io.h"
#include "optim/optim.h"
#include "train/group_impl.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *model_state_str(model_state s)
{
    switch (s) {
    case MODEL_PENDING: return "pending";
    case MODEL_RUNNING: return "running";
    case MODEL_OK: return "ok";
    case MODEL_FAILED: return "failed";
    case MODEL_DIVERGED: return "diverged";
    case MODEL_INTERRUPTED: return "interrupted";
    case MODEL_PRUNED: return "pruned";
    }
    return "unknown";
}

void model_init_params(const model_spec *spec, const model_layout *L, float *host)
{
    memset(host, 0, L->n_params * sizeof(float));
    for (int i = 0; i < L->n_layers; i++) {
        const layer_ops *ops = L->layers[i].kind;
        if (ops->init)
            ops->init(&spec->layers[i], &L->layers[i], spec->seed, host);
    }
}

static void shape_str(const int64_t *shape, int ndim, char *buf, size_t len)
{
    buf[0] = 0;
    for (int i = 0; i < ndim; i++)
        snprintf(buf + strlen(buf), len - strlen(buf), "%s%lld", i ? ", " : "",
                 (long long)shape[i]);
}

/* The index of the first of n floats at p (any alignment) that is NaN or
 * infinite, or -1. */
static int64_t first_not_finite(const void *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, (const char *)p + i * sizeof v, sizeof v);
        if (!isfinite(v))
            return (int64_t)i;
    }
    return -1;
}

cohort_status model_load_params(const model_spec *spec, const model_layout *L, const char *path,
                                float *host, cohort_error *err)
{
    st_file f;
    cohort_status st = st_read(path, &f, err);
    if (st)
        return cohort_fail_prefix(err, "model '%s': init_from", spec->name);
    /* What the file does not hold (a layer without tensors) starts as init. */
    model_init_params(spec, L, host);
    for (int i = 0; i < L->n_layers && !st; i++) {
        const layer_plan *lp = &L->layers[i];
        const layer_ops *ops = lp->kind;
        layer_tensor t[LAYER_TENSORS_MAX];
        int n = ops->tensors ? ops->tensors(lp, t) : 0;
        for (int j = 0; j < n && !st; j++) {
            char name[64], at[32];
            layer_plan_name(lp, at, sizeof at);
            snprintf(name, sizeof name, "%s.%s", at, t[j].suffix);
            const st_tensor *ft = st_find(&f, name);
            int ok = ft && ft->ndim == t[j].ndim;
            for (int d = 0; ok && d < t[j].ndim; d++)
                ok = ft->shape[d] == t[j].shape[d];
            int64_t bad = ok ? first_not_finite(ft->data, t[j].n) : -1;
            if (!ft) {
                st = cohort_fail(err, COHORT_ERR_INPUT,
                                 "model '%s': init_from %s has no tensor %s", spec->name, path,
                                 name);
            } else if (bad >= 0) {
                /* Else the model "diverged" at its first step, and the advice
                 * was to lower the learning rate. */
                float v;
                memcpy(&v, (const char *)ft->data + (size_t)bad * sizeof v, sizeof v);
                st = cohort_fail(err, COHORT_ERR_INPUT,
                                 "model '%s': init_from %s: %s[%lld] is %s; a model cannot start "
                                 "from weights that are not finite",
                                 spec->name, path, name, (long long)bad,
                                 isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
            } else if (!ok) {
                char have[64], want[64];
                shape_str(ft->shape, ft->ndim, have, sizeof have);
                shape_str(t[j].shape, t[j].ndim, want, sizeof want);
                st = cohort_fail(err, COHORT_ERR_INPUT,
                                 "model '%s': init_from %s: %s has shape [%s], the model needs "
                                 "[%s]",
                                 spec->name, path, name, have, want);
            } else if (ops->convert) {
                ops->convert(lp, j, host, (float *)ft->data, 0);
            } else {
                memcpy(host + t[j].off, ft->data, t[j].n * sizeof(float));
            }
        }
    }
    st_free(&f);
    return st;
}

/* The capabilities of the group's backend, the sharing of its input, whether
 * dense layers may fuse their step into backward, and the transposed-input
 * path of its first layer. */
static void group_configure(train_group *g, const model_spec *const *specs, int K)
{
    const model_layout *L = &g->L;
    g->first_trained = L->n_layers;
    for (int i = L->n_layers - 1; i >= 0; i--)
        if (L->layers[i].n_params)
            g->first_trained = i;
    /* K models can read one input copy when the layers up to the first
     * that reads it (aliases pass it on) take a stride of 0. */
    g->can_share = 1;
    int first = 0;
    while (first < L->n_layers && L->layers[first].alias)
        first++;
    if (first < L->n_layers)
        g->can_share = L->layers[first].kind->shares_input;
    g->shared = g->can_share;
    for (int k = 1; k < K; k++)
        if (!model_same_order(specs[0], specs[k]))
            g->shared = 0;
    g->fuse_step = g->be->dense_step && g->be->fuses && g->be->fuses(g->ctx, specs[0]->opt.kind);
    for (int k = 0; k < K; k++)
        if (model_needs_full_grads(specs[k]))
            g->fuse_step = 0;
    /* The transposed input lives in gradients that only a fused step leaves
     * alone; the first layer's is one slot's for the group, so it must read
     * a shared input. */
    int ldt = g->be->xt_ld ? g->be->xt_ld(g->ctx, L->B) : 0;
    if (ldt <= 0 || !g->fuse_step || !g->be->model_major)
        return;
    g->xt_ld = ldt;
    for (int i = 0; i < L->n_layers; i++) {
        const layer_plan *lp = &L->layers[i];
        g->xt_layer[i] = (i > 0 || g->can_share) && lp->kind->uses_xt && lp->in.rank != 2 &&
                         (size_t)ldt * shape_size(lp->in) <= lp->n_fused;
    }
}

/* Every model's class weights, 1 for a model without class_weight. */
static void upload_class_weights(train_group *g)
{
    int n = g->L.n_cw;
    for (int k = 0; k < g->K; k++) {
        for (int i = 0; i < n; i++)
            g->host[i] = g->spec[k]->n_class_weight ? g->spec[k]->class_weight[i] : 1.0f;
        g->be->copy_h2d(g->ctx, g->classw + (size_t)k * (size_t)n, g->host, (size_t)n * sizeof(float));
    }
}

cohort_status group_create(const model_spec *const *specs, int K, sample_shape in,
                           int n_classes, cohort_device *dev, int threads, train_group **out,
                           cohort_error *err)
{
    *out = NULL;
    if (K < 1 || K > COHORT_MAX_GROUP)
        return cohort_fail(err, COHORT_ERR_USAGE, "a group holds 1 to %d models, not %d",
                           COHORT_MAX_GROUP, K);
    for (int k = 1; k < K; k++)
        if (!model_can_fuse(specs[0], specs[k]))
            return cohort_fail(err, COHORT_ERR_USAGE, "models '%s' and '%s' cannot share a group",
                               specs[0]->name, specs[k]->name);
    train_group *g = calloc(1, sizeof *g);
    if (!g)
        return cohort_fail(err, COHORT_ERR_NOMEM, "model '%s': out of host memory", specs[0]->name);
    model_spec merged;
    model_group_spec(specs, K, &merged);
    cohort_status st = model_layout_make(&merged, in, n_classes, K, &g->L, err);
    if (st) {
        free(g);
        return st;
    }
    g->K = K;
    g->dev = dev;
    g->be = dev->be;
    for (int k = 0; k < K; k++) {
        const model_spec *s = specs[k];
        g->spec[k] = s;
        g->lr[k] = s->opt.lr;
        g->clipnorm[k] = s->opt.clipnorm;
        g->global_clipnorm[k] = s->opt.global_clipnorm;
        g->clipvalue[k] = s->opt.clipvalue;
        g->seed[k] = s->seed;
        g->smoothing[k] = s->label_smoothing;
        g->huber_delta[k] = s->huber_delta;
        g->active[k] = 1;
    }
    st = g->be->ctx_create(dev->be_dev, threads, &g->ctx, err);
    if (st) {
        free(g);
        return st;
    }
    g->be = backend_resolve(g->be); /* a GPU's ops are its plugin's */
    group_configure(g, specs, K);
    const model_layout *L = &g->L;
    g->slab = mem_pool_alloc(dev->mem_pool, L->total_bytes, &g->acct, specs[0]->name, err);
    if (!g->slab) {
        group_free(g);
        return COHORT_ERR_NOMEM;
    }
    /* The context's own device scratch (a GPU's cuBLAS workspace and partial
     * sums) from the pool too, beside the slab and not in the models' bytes:
     * the planner counts one per job (device_ctx_bytes). */
    uint64_t ws = device_ctx_bytes(dev);
    if (ws && g->be->ctx_workspace) {
        g->ctx_ws = mem_pool_alloc(dev->mem_pool, (size_t)ws, NULL, specs[0]->name, err);
        if (!g->ctx_ws) {
            group_free(g);
            return COHORT_ERR_NOMEM;
        }
        g->be->ctx_workspace(g->ctx, g->ctx_ws, (size_t)ws);
    }
    g->be->memzero(g->ctx, g->slab, L->total_bytes);
    size_t KP = (size_t)K * L->p_stride;
#define BUF(i) (g->slab + L->buf_off[i])
    g->params = (float *)BUF(BUF_PARAMS);
    g->grads = (float *)BUF(BUF_GRADS);
    g->opt_m = (float *)BUF(BUF_OPT);
    g->opt_v = L->opt_slots == 2 ? g->opt_m + KP : NULL;
    g->act = (float *)BUF(BUF_ACT);
    g->delta[0] = (float *)BUF(BUF_DELTA);
    g->delta[1] = g->delta[0] + (size_t)K * (size_t)L->B * (size_t)L->max_width;
    g->saved = (float *)BUF(BUF_SAVED);
    g->stat = (float *)BUF(BUF_STAT);
    g->work = (float *)BUF(BUF_WORK);
    g->labels = (int32_t *)BUF(BUF_LABELS);
    g->targets = (float *)BUF(BUF_TARGETS);
    g->classw = L->buf_bytes[BUF_CLASSW] ? (float *)BUF(BUF_CLASSW) : NULL;
    g->stats = (double *)BUF(BUF_STATS);
    g->best = L->keep_best ? (float *)BUF(BUF_BEST) : NULL;
    g->norms = (double *)BUF(BUF_NORMS);
#undef BUF

    size_t host_n = L->n_params > (size_t)L->n_cw ? L->n_params : (size_t)L->n_cw;
    float *host = g->host = mem_alloc_big((host_n ? host_n : 1) * sizeof(float));
    if (!host) {
        group_free(g);
        return cohort_fail(err, COHORT_ERR_NOMEM, "model '%s': out of host memory", specs[0]->name);
    }
    if (g->classw)
        upload_class_weights(g);
    float (*slot_init)(const optim_spec *) = optim_entry_of(specs[0]->opt.kind)->slot_init;
    for (int k = 0; k < K && slot_init; k++) {
        /* A first slot that does not start at zero (Adagrad's accumulators). */
        float v = slot_init(&specs[k]->opt);
        for (size_t i = 0; i < L->n_params; i++)
            host[i] = v;
        g->be->copy_h2d(g->ctx, g->opt_m + (size_t)k * L->p_stride, host,
                        L->n_params * sizeof(float));
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
    /* The context first: ctx_free waits for the work it queued, which may
     * still write the slab and its workspace; released before, a
     * preallocated block could be another group's (another thread's) while
     * that work ran. */
    if (g->ctx)
        g->be->ctx_free(g->ctx);
    if (g->slab)
        mem_pool_release(g->dev->mem_pool, g->slab, &g->acct);
    if (g->ctx_ws)
        mem_pool_release(g->dev->mem_pool, g->ctx_ws, NULL);
    free(g->order);
    free(g->host);
    free(g);
}

const model_layout *group_layout(const train_group *g) { return &g->L; }

const backend_ops *group_backend(const train_group *g) { return g->be; }
uint64_t group_peak_bytes(const train_group *g) { return g->acct.peak; }

void group_get_params(train_group *g, int k, float *host)
{
    g->be->copy_d2h(g->ctx, host, g->params + (size_t)k * g->L.p_stride,
                    g->L.n_params * sizeof(float));
}

void group_set_params(train_group *g, int k, const float *host)
{
    g->be->copy_h2d(g->ctx, g->params + (size_t)k * g->L.p_stride, host,
                    g->L.n_params * sizeof(float));
}

void group_get_state(train_group *g, int k, float *params, float *m, float *v, float *best)
{
    size_t off = (size_t)k * g->L.p_stride, bytes = g->L.n_params * sizeof(float);
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
    size_t off = (size_t)k * g->L.p_stride, bytes = g->L.n_params * sizeof(float);
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

const char *group_device_error(const train_group *g)
{
    const char *e = g->be->ctx_error ? g->be->ctx_error(g->ctx) : NULL;
    return e ? e : "";
}
