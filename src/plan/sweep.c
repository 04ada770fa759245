/* sweep: the plan's `sweep` map, checked against the model schema, and the
 * writing of one combination of its values into a model's tree. */
#include "plan/plan.h"

#include "layers/layer.h"
#include "optim/optim.h"
#include "plan/yamltree.h"
#include "util/util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SWEEP_MAX_KEYS 64

static int all_digits(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

static int in_list(const char *s, const char *const *list)
{
    for (int i = 0; list[i]; i++)
        if (strcmp(s, list[i]) == 0)
            return 1;
    return 0;
}

/* Split path (a copy in buf) at dots; returns the number of parts, or -1 for
 * an empty part or too many parts. */
static int split_path(char *buf, char **parts, int max)
{
    int n = 0;
    char *p = buf;
    for (;;) {
        if (n == max)
            return -1;
        parts[n++] = p;
        char *dot = strchr(p, '.');
        if (!dot)
            break;
        *dot = 0;
        p = dot + 1;
    }
    for (int i = 0; i < n; i++)
        if (!parts[i][0])
            return -1;
    return n;
}

static cohort_status bad_key(const yctx *c, const ynode *key, const char *what, const char *hint)
{
    return ynode_fail(c, key, "%s '%.200s' is not a model key%s", what, key->str, hint);
}

/* The keys of four parts: optimizer.schedule.SCHEDULE.KEY (the keys below
 * a schedule are checked where the model is built, with the sweep key's
 * line). */
static int deep_path_ok(char **parts)
{
    static const char *const schedules[] = {"cosine_decay", "exponential_decay",
                                            "piecewise_constant", NULL};
    return strcmp(parts[0], "optimizer") == 0 && strcmp(parts[1], "schedule") == 0 &&
           in_list(parts[2], schedules);
}

static int index_ok(const char *s)
{
    return all_digits(s) && strlen(s) <= 4 && atoi(s) < COHORT_MAX_LAYERS;
}

/* layers.N, layers.N.KEY and layers.N.kernel_regularizer.l1|l2, where N may
 * be N.J: layer J inside the residual at N. */
static cohort_status layers_path(const yctx *c, const ynode *key, const char *what, char **parts,
                                 int n, char *canon, size_t size)
{
    static const char *const reg[] = {"l1", "l2", NULL};
    char hint[300] = "", at[32];
    int np = 2;
    if (n < 2 || !index_ok(parts[1]))
        return bad_key(c, key, what, " (after 'layers.' comes a layer index, like layers.0.dense)");
    snprintf(at, sizeof at, "layers.%d", atoi(parts[1]));
    if (n > 2 && all_digits(parts[2])) {
        if (!index_ok(parts[2]))
            return bad_key(c, key, what, " (after 'layers.N.' comes a layer's key, or the index "
                                         "of a layer inside the residual at N)");
        snprintf(at, sizeof at, "layers.%d.%d", atoi(parts[1]), atoi(parts[2]));
        np = 3;
    }
    int w = -1;
    const char *layer_keys[LAYER_KEYS_MAX];
    int n_layer_keys = layer_all_keys(layer_keys, LAYER_KEYS_MAX);
    if (n == np)
        w = snprintf(canon, size, "%s", at);
    else if (n == np + 2 && strcmp(parts[np], "kernel_regularizer") == 0 &&
             in_list(parts[np + 1], reg))
        w = snprintf(canon, size, "%s.kernel_regularizer.%s", at, parts[np + 1]);
    else if (n == np + 1 && in_list(parts[np], layer_keys))
        w = snprintf(canon, size, "%s.%s", at, parts[np]);
    if (w >= 0 && (size_t)w < size)
        return COHORT_OK;
    if (n == np + 1) {
        const char *near = ysuggest(parts[np], layer_keys, n_layer_keys);
        if (near)
            snprintf(hint, sizeof hint, " (did you mean '%s.%s'?)", at, near);
    }
    return bad_key(c, key, what, hint);
}

cohort_status plan_key_path(const yctx *c, const ynode *key, const char *what, char *canon,
                            size_t size)
{
    char buf[256], hint[300] = "";
    char *parts[5];
    if (str_copy(buf, sizeof buf, key->str))
        return bad_key(c, key, what, " (too long)");
    int n = split_path(buf, parts, 5);
    if (n < 0)
        return bad_key(c, key, what, "");
    const char *p0 = parts[0];
    if (strcmp(p0, "name") == 0 || strcmp(p0, "metrics") == 0)
        return ynode_fail(c, key, "%s '%s' cannot be swept", what, key->str);
    if (!in_list(p0, plan_model_keys)) {
        const char *near = ysuggest(p0, plan_model_keys, plan_key_count(plan_model_keys));
        if (near)
            snprintf(hint, sizeof hint, " (did you mean '%s'?)", near);
        return bad_key(c, key, what, hint);
    }
    /* The parts of a model's maps may be swept, but not the loss's: it is swept whole. */
    const char *const *sub = strcmp(p0, "loss") ? plan_model_map_keys(p0) : NULL;
    if (n == 1) {
        str_copy(canon, size, p0);
        return COHORT_OK;
    }
    if (strcmp(p0, "layers") == 0)
        return layers_path(c, key, what, parts, n, canon, size);
    if (n == 4 && deep_path_ok(parts)) {
        snprintf(canon, size, "optimizer.schedule.%s.%s", parts[2], parts[3]);
        return COHORT_OK;
    }
    if (sub) {
        if (n != 2)
            return bad_key(c, key, what, n == 4 ? " (the parts below optimizer.schedule are "
                                            "SCHEDULE.KEY, like "
                                            "optimizer.schedule.cosine_decay.alpha)"
                                          : "");
        if (!in_list(parts[1], sub)) {
            const char *near = ysuggest(parts[1], sub, plan_key_count(sub));
            if (near)
                snprintf(hint, sizeof hint, " (did you mean '%.100s.%s'?)", p0, near);
            return bad_key(c, key, what, hint);
        }
        int w = snprintf(canon, size, "%s.%s", p0,
                         strcmp(parts[1], "learning_rate") == 0 ? "lr" : parts[1]);
        return w < 0 || (size_t)w >= size ? bad_key(c, key, what, " (too long)") : COHORT_OK;
    }
    snprintf(hint, sizeof hint, " ('%.100s' has no parts to sweep; use '%.100s')", p0, p0);
    return bad_key(c, key, what, hint);
}

cohort_status plan_sweep_parse(const yctx *c, const ynode *sweep, plan_sweep *out)
{
    memset(out, 0, sizeof *out);
    out->combos = 1;
    if (!sweep || ynode_is_null(sweep))
        return COHORT_OK;
    char got[80];
    if (sweep->type != YNODE_MAP)
        return ynode_fail(c, sweep,
                          "sweep must be a map from model keys to lists of values "
                          "(like optimizer.lr: [0.001, 0.0005]), got %s",
                          ynode_describe(sweep, got, sizeof got));
    if (sweep->n == 0)
        return COHORT_OK;
    if (sweep->n > SWEEP_MAX_KEYS)
        return ynode_fail(c, sweep->keys[SWEEP_MAX_KEYS], "sweep has more than %d keys",
                          SWEEP_MAX_KEYS);
    out->keys = calloc(sweep->n, sizeof *out->keys);
    if (!out->keys)
        return ynode_nomem(c);
    cohort_status st = COHORT_OK;
    for (size_t i = 0; i < sweep->n && st == COHORT_OK; i++) {
        plan_sweep_key *k = &out->keys[i];
        k->key = sweep->keys[i];
        k->values = sweep->vals[i];
        st = plan_key_path(c, k->key, "sweep key", k->path, sizeof k->path);
        if (st)
            break;
        const char *dot = strrchr(k->key->str, '.');
        k->label = dot ? dot + 1 : k->key->str;
        for (size_t j = 0; j < i; j++)
            if (strcmp(out->keys[j].path, k->path) == 0) {
                st = ynode_fail(c, k->key, "sweep key '%s' sweeps the same setting as '%s' (line %d)",
                                k->key->str, out->keys[j].key->str, out->keys[j].key->line);
                break;
            }
        if (st)
            break;
        if (k->values->type != YNODE_SEQ || k->values->n == 0) {
            st = ynode_fail(c, k->values, "sweep values of '%s' must be a non-empty list, got %s",
                            k->key->str, ynode_describe(k->values, got, sizeof got));
            break;
        }
        if (k->values->n > COHORT_MAX_MODELS / out->combos) {
            st = ynode_fail(c, k->values, "the sweep makes more than %d combinations",
                            COHORT_MAX_MODELS);
            break;
        }
        out->combos *= k->values->n;
        out->n++;
    }
    if (st)
        plan_sweep_free(out);
    return st;
}

void plan_sweep_free(plan_sweep *s)
{
    for (int i = 0; s->drawn && i < s->n; i++)
        ynode_free(s->drawn[i]);
    free(s->drawn);
    free(s->picked);
    free(s->keys);
    memset(s, 0, sizeof *s);
    s->combos = 1;
}

/* ---- search: random draws ------------------------------------------------ */

#define SEARCH_MAX_SAMPLES COHORT_MAX_MODELS
static const char *const search_keys[] = {"samples", "seed", "space", NULL};
static const char *const dist_names[] = {"uniform", "loguniform", "randint", "choice", NULL};

/* A double in [0, 1) from 53 random bits. */
static double unit_draw(rng_state *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

/* The two bounds of a uniform, loguniform or randint distribution. */
static cohort_status dist_bounds(const yctx *c, const ynode *key, const char *what,
                                 const ynode *args, int kind, double *lo, double *hi)
{
    char got[80];
    const char *name = dist_names[kind];
    if (args->type != YNODE_SEQ || args->n != 2)
        return ynode_fail(c, args, "%s of %s '%s' takes two bounds, like {%s: [%s]}, got %s",
                          name, what, key->str, name,
                          kind == DIST_LOGUNIFORM ? "1.0e-4, 1.0e-2"
                          : kind == DIST_RANDINT  ? "16, 129"
                                                  : "0.0, 0.5",
                          ynode_describe(args, got, sizeof got));
    yrange range = kind == DIST_LOGUNIFORM ? YR_POSITIVE : YR_NONNEG;
    cohort_status st;
    if (kind == DIST_RANDINT) {
        long long a, b;
        if ((st = yget_int(c, args->vals[0], "the low bound of randint", 0, 1LL << 40, &a)) ||
            (st = yget_int(c, args->vals[1], "the high bound of randint", 1, 1LL << 40, &b)))
            return st;
        *lo = (double)a;
        *hi = (double)b;
    } else if ((st = yget_num(c, args->vals[0], name, range, 1, lo)) ||
               (st = yget_num(c, args->vals[1], name, range, 1, hi))) {
        return st;
    }
    if (!(*lo < *hi))
        return ynode_fail(c, args, "%s of %s '%s' needs its low bound below its high "
                                   "bound (randint's high bound is excluded), got [%g, %g]",
                          name, what, key->str, *lo, *hi);
    return COHORT_OK;
}

/* The kind of distribution `dist` of key, its bounds (not for choice) and
 * its arguments. */
static cohort_status dist_kind_parse(const yctx *c, const ynode *key, const char *what,
                                     const ynode *dist, int *kind, double *lo, double *hi,
                                     const ynode **args)
{
    char got[80];
    if (dist->type != YNODE_MAP || dist->n != 1)
        return ynode_fail(c, dist, "%s '%s' takes one distribution, like {loguniform: "
                                   "[1.0e-4, 1.0e-2]} or {choice: [32, 64]}, got %s",
                          what, key->str, ynode_describe(dist, got, sizeof got));
    cohort_status st = yget_enum(c, dist->keys[0], "a search distribution", dist_names,
                                 plan_key_count(dist_names), kind);
    if (st)
        return st;
    *args = dist->vals[0];
    *lo = *hi = 0;
    if (*kind == DIST_CHOICE && ((*args)->type != YNODE_SEQ || (*args)->n == 0))
        return ynode_fail(c, *args, "choice of %s '%s' takes a non-empty list of values, got %s",
                          what, key->str, ynode_describe(*args, got, sizeof got));
    if (*kind != DIST_CHOICE)
        return dist_bounds(c, key, what, *args, *kind, lo, hi);
    return COHORT_OK;
}

/* A draw of uniform, loguniform or randint [lo, hi) from r. */
static double draw_number(int kind, double lo, double hi, rng_state *r)
{
    double u = unit_draw(r);
    if (kind == DIST_RANDINT)
        return lo + (double)rng_below(r, (uint64_t)(hi - lo));
    if (kind == DIST_LOGUNIFORM)
        return exp(log(lo) + (log(hi) - log(lo)) * u);
    return lo + (hi - lo) * u;
}

/* samples draws of key's distribution `dist` (draw i from r[i]) into a new list *lists. */
static cohort_status draw_key(const yctx *c, const ynode *key, const ynode *dist, size_t samples,
                              rng_state *r, ynode **lists, size_t *picked)
{
    int kind;
    double lo, hi;
    const ynode *args;
    cohort_status st = dist_kind_parse(c, key, "search key", dist, &kind, &lo, &hi, &args);
    if (st)
        return st;
    ynode *list = ynode_new(YNODE_SEQ, dist->line, dist->origin);
    if (!list)
        return ynode_nomem(c);
    *lists = list;
    for (size_t i = 0; i < samples; i++) {
        ynode *v;
        char buf[64];
        picked[i] = i;
        if (kind == DIST_CHOICE) {
            picked[i] = (size_t)rng_below(&r[i], (uint64_t)args->n);
            v = ynode_clone(args->vals[picked[i]], 0);
        } else {
            double x = draw_number(kind, lo, hi, &r[i]);
            if (kind == DIST_RANDINT)
                snprintf(buf, sizeof buf, "%lld", (long long)x);
            else
                str_format(buf, sizeof buf, "%.6g", x);
            v = ynode_scalar(buf, dist->line, dist->origin);
        }
        if (!v || ynode_append(list, NULL, v)) {
            ynode_free(v);
            return ynode_nomem(c);
        }
    }
    return COHORT_OK;
}

cohort_status plan_dist_parse(const yctx *c, const ynode *key, const ynode *dist,
                              pbt_mutation *m)
{
    const char *what = "scheduler.hyperparam_mutations key";
    int kind;
    const ynode *args;
    cohort_status st = dist_kind_parse(c, key, what, dist, &kind, &m->lo, &m->hi, &args);
    if (st)
        return st;
    m->kind = (dist_kind)kind;
    m->n_choices = 0;
    if (kind != DIST_CHOICE)
        return COHORT_OK;
    if (args->n > PBT_MAX_CHOICES)
        return ynode_fail(c, args, "choice of %s '%s' has more than %d options", what, key->str,
                          PBT_MAX_CHOICES);
    for (size_t i = 0; i < args->n; i++) {
        double v;
        if ((st = yget_num(c, args->vals[i], "an option of a hyperparam_mutations choice",
                           YR_NONNEG, 1, &v)))
            return st;
        m->choices[m->n_choices++] = v;
    }
    return COHORT_OK;
}

int plan_dist_ends(const pbt_mutation *m, double *ends)
{
    if (m->kind == DIST_CHOICE) {
        memcpy(ends, m->choices, (size_t)m->n_choices * sizeof *ends);
        return m->n_choices;
    }
    ends[0] = m->lo;
    ends[1] = m->kind == DIST_RANDINT ? m->hi - 1 : m->hi;
    return 2;
}

double plan_dist_draw(const pbt_mutation *m, rng_state *r)
{
    if (m->kind == DIST_CHOICE)
        return m->choices[rng_below(r, (uint64_t)m->n_choices)];
    return draw_number(m->kind, m->lo, m->hi, r);
}

cohort_status plan_search_parse(const yctx *c, const ynode *search, plan_sweep *out)
{
    memset(out, 0, sizeof *out);
    out->combos = 1;
    if (!search || ynode_is_null(search))
        return COHORT_OK;
    char got[80];
    if (search->type != YNODE_MAP)
        return ynode_fail(c, search, "search must be a map like {samples: 27, seed: 7, space: "
                                     "{optimizer.lr: {loguniform: [1.0e-4, 1.0e-2]}}}, got %s",
                          ynode_describe(search, got, sizeof got));
    cohort_status st = plan_check_keys(c, search, search_keys, "in search");
    if (st)
        return st;
    const ynode *sn = ymap_get(search, "samples"), *seed = ymap_get(search, "seed"),
                *space = ymap_get(search, "space");
    long long samples;
    unsigned long long sd = 1;
    if (!sn || !space)
        return ynode_fail(c, search, "search needs samples (how many models to draw) and space "
                                     "(what to draw)");
    if ((st = yget_int(c, sn, "search.samples", 1, SEARCH_MAX_SAMPLES, &samples)) ||
        (seed && (st = yget_u64(c, seed, "search.seed", &sd))))
        return st;
    if (space->type != YNODE_MAP || space->n == 0)
        return ynode_fail(c, space, "search.space must be a map from model keys to "
                                    "distributions, got %s",
                          ynode_describe(space, got, sizeof got));
    if (space->n > SWEEP_MAX_KEYS)
        return ynode_fail(c, space->keys[SWEEP_MAX_KEYS], "search.space has more than %d keys",
                          SWEEP_MAX_KEYS);
    out->keys = calloc(space->n, sizeof *out->keys);
    out->drawn = calloc(space->n, sizeof *out->drawn);
    out->picked = calloc(space->n * (size_t)samples, sizeof *out->picked);
    /* One stream per sample: sample i's draws do not depend on the others. */
    rng_state *r = malloc((size_t)samples * sizeof *r);
    if (!out->keys || !out->drawn || !out->picked || !r) {
        free(r);
        plan_sweep_free(out);
        return ynode_nomem(c);
    }
    for (long long i = 0; i < samples; i++)
        rng_seed(&r[i], (uint64_t)sd, (uint64_t)i);
    out->zip = 1;
    out->combos = (size_t)samples;
    for (size_t i = 0; i < space->n && !st; i++) {
        plan_sweep_key *k = &out->keys[i];
        k->key = space->keys[i];
        if ((st = plan_key_path(c, k->key, "search key", k->path, sizeof k->path)))
            break;
        for (size_t j = 0; j < i && !st; j++)
            if (strcmp(out->keys[j].path, k->path) == 0)
                st = ynode_fail(c, k->key, "search key '%s' draws the same setting as '%s' (line %d)",
                                k->key->str, out->keys[j].key->str, out->keys[j].key->line);
        if (st)
            break;
        const char *dot = strrchr(k->key->str, '.');
        k->label = dot ? dot + 1 : k->key->str;
        st = draw_key(c, k->key, space->vals[i], (size_t)samples, r, &out->drawn[i],
                      out->picked + i * (size_t)samples);
        out->n = (int)i + 1;
        k->values = out->drawn[i];
    }
    free(r);
    if (st)
        plan_sweep_free(out);
    return st;
}

/* Set map[key] = a copy of v, the new key carrying the sweep key's line. */
static cohort_status set_copy(const yctx *c, const ynode *sweep_key, ynode *map, const char *key,
                              const ynode *v)
{
    ynode *k = ynode_scalar(key, sweep_key->line, sweep_key->origin);
    ynode *val = ynode_clone(v, 0);
    if (!k || !val || ymap_set(map, k, val)) {
        ynode_free(k);
        ynode_free(val);
        return ynode_nomem(c);
    }
    return COHORT_OK;
}

/* The sub-map of model for optimizer/early_stopping, made a map if it is a
 * name (optimizer: adam) or a switch (early_stopping: true) or missing. */
static cohort_status sub_map(const yctx *c, const plan_sweep_key *k, ynode *model,
                             const char *part, const char *model_label, ynode **out)
{
    int i = ymap_find(model, part);
    if (i >= 0 && model->vals[i]->type == YNODE_MAP) {
        *out = model->vals[i];
        return COHORT_OK;
    }
    if (i >= 0 && model->vals[i]->type == YNODE_SEQ) {
        char got[80];
        return ynode_fail(c, model->vals[i], "%s of %s must be a map to sweep '%s', got %s", part,
                          model_label, k->key->str,
                          ynode_describe(model->vals[i], got, sizeof got));
    }
    ynode *m = ynode_new(YNODE_MAP, k->key->line, k->key->origin);
    if (!m)
        return ynode_nomem(c);
    if (i < 0) {
        ynode *key = ynode_scalar(part, k->key->line, k->key->origin);
        if (!key || ynode_append(model, key, m)) {
            ynode_free(key);
            ynode_free(m);
            return ynode_nomem(c);
        }
    } else {
        ynode *old = model->vals[i];
        m->line = old->line;
        m->origin = old->origin;
        m->inherited = old->inherited;
        model->vals[i] = m;
        if (strcmp(part, "optimizer") == 0 && !ynode_is_null(old)) {
            ynode *key = ynode_scalar("name", old->line, old->origin);
            if (!key || ynode_append(m, key, old)) {
                ynode_free(key);
                ynode_free(old);
                return ynode_nomem(c);
            }
            key->inherited = old->inherited;
        } else {
            ynode_free(old);
        }
    }
    *out = m;
    return COHORT_OK;
}

/* The map at parent[key], made where it is missing or null; another value
 * there cannot take the swept key. */
static cohort_status child_map(const yctx *c, const plan_sweep_key *k, ynode *parent,
                               const char *key, ynode **out)
{
    int i = ymap_find(parent, key);
    if (i >= 0 && parent->vals[i]->type == YNODE_MAP) {
        *out = parent->vals[i];
        return COHORT_OK;
    }
    if (i >= 0 && !ynode_is_null(parent->vals[i])) {
        char got[80];
        return ynode_fail(c, parent->vals[i], "%s must be a map to sweep '%s', got %s", key,
                          k->key->str, ynode_describe(parent->vals[i], got, sizeof got));
    }
    ynode *m = ynode_new(YNODE_MAP, k->key->line, k->key->origin);
    ynode *name = ynode_scalar(key, k->key->line, k->key->origin);
    if (!m || !name || ymap_set(parent, name, m)) {
        ynode_free(m);
        ynode_free(name);
        return ynode_nomem(c);
    }
    *out = m;
    return COHORT_OK;
}

static cohort_status apply_one(const yctx *c, const plan_sweep_key *k, const ynode *v,
                               ynode *model, const char *model_label)
{
    char buf[256];
    char *parts[5];
    str_copy(buf, sizeof buf, k->path);
    int n = split_path(buf, parts, 5);
    if (n == 1)
        return set_copy(c, k->key, model, parts[0], v);
    if (strcmp(parts[0], "layers") != 0) {
        ynode *m = NULL, *scheduler = NULL, *one = NULL;
        cohort_status st = sub_map(c, k, model, parts[0], model_label, &m);
        if (st || n == 2)
            return st ? st : set_copy(c, k->key, m, parts[1], v);
        if ((st = child_map(c, k, m, parts[1], &scheduler)) ||
            (st = child_map(c, k, scheduler, parts[2], &one)))
            return st;
        return set_copy(c, k->key, one, parts[3], v);
    }
    ynode *layers = ymap_get(model, "layers");
    if (!layers || layers->type != YNODE_SEQ)
        return ynode_fail(c, k->key, "sweep key '%s': %s has no list of layers", k->key->str,
                          model_label);
    size_t li = (size_t)atoi(parts[1]);
    if (li >= layers->n)
        return ynode_fail(c, k->key, "sweep key '%s': %s has only %zu layers", k->key->str,
                          model_label, layers->n);
    int np = 2; /* the parts that name the layer */
    if (n > 2 && all_digits(parts[2])) {
        ynode *inner = layer_block_list(layers->vals[li]);
        if (!inner)
            return ynode_fail(c, k->key, "sweep key '%s': layers.%zu of %s is no residual, so it "
                                         "has no layer %s inside",
                              k->key->str, li, model_label, parts[2]);
        size_t j = (size_t)atoi(parts[2]);
        if (j >= inner->n)
            return ynode_fail(c, k->key, "sweep key '%s': the residual at layers.%zu of %s has "
                                         "only %zu layers",
                              k->key->str, li, model_label, inner->n);
        layers = inner;
        li = j;
        np = 3;
    }
    if (n == np) {
        ynode *val = ynode_clone(v, 0);
        if (!val)
            return ynode_nomem(c);
        ynode_free(layers->vals[li]);
        layers->vals[li] = val;
        return COHORT_OK;
    }
    ynode *layer = layers->vals[li];
    if (layer->type != YNODE_MAP) {
        char got[80];
        return ynode_fail(c, layer, "layers.%zu of %s must be a map to sweep '%s', got %s", li,
                          model_label, k->key->str, ynode_describe(layer, got, sizeof got));
    }
    if (n == np + 2) {
        ynode *reg = NULL;
        cohort_status st = child_map(c, k, layer, parts[np], &reg);
        return st ? st : set_copy(c, k->key, reg, parts[np + 1], v);
    }
    return set_copy(c, k->key, layer, parts[np], v);
}

/* Append "-label=value" to suffix, with characters a model name may not
 * hold replaced by '_', and lists or maps shown by their index. */
static int append_label(char *suffix, size_t size, const char *label, const ynode *v, size_t idx)
{
    size_t len = strlen(suffix);
    char val[128];
    if (v->type == YNODE_SCALAR) {
        str_copy(val, sizeof val, v->str);
        for (char *p = val; *p; p++) {
            unsigned char ch = (unsigned char)*p;
            int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                     (ch >= '0' && ch <= '9') || strchr("_.=+-", ch);
            if (!ok)
                *p = '_';
        }
    } else {
        snprintf(val, sizeof val, "%zu", idx);
    }
    int w = snprintf(suffix + len, size - len, "-%s=%s", label, val);
    return w < 0 || (size_t)w >= size - len ? -1 : 0;
}

cohort_status plan_sweep_apply(const yctx *c, const plan_sweep *s, size_t combo, ynode *model,
                               const char *model_label, char *suffix, size_t suffix_size)
{
    size_t idx[SWEEP_MAX_KEYS], draw = combo;
    for (int i = s->n - 1; i >= 0; i--) {
        idx[i] = s->zip ? draw : combo % s->keys[i].values->n;
        combo /= s->zip ? 1 : s->keys[i].values->n;
    }
    suffix[0] = 0;
    /* A search's draws may repeat (choice): its names also say which draw. */
    if (s->zip)
        snprintf(suffix, suffix_size, "-s%0*zu", s->combos > 100 ? (s->combos > 1000 ? 4 : 3) : 2,
                 draw);
    for (int i = 0; i < s->n; i++) {
        const plan_sweep_key *k = &s->keys[i];
        const ynode *v = k->values->vals[idx[i]];
        cohort_status st = apply_one(c, k, v, model, model_label);
        if (st)
            return st;
        size_t shown = s->zip ? s->picked[(size_t)i * s->combos + idx[i]] : idx[i];
        if (append_label(suffix, suffix_size, k->label, v, shown))
            return ynode_fail(c, k->key, "the names the sweep gives %s are too long (at most %d characters)",
                              model_label, COHORT_NAME_MAX - 1);
    }
    return COHORT_OK;
}
