/* models: the models list and defaults: each model's keys checked, defaults
 * merged in, the sweep and search applied, its spec built (settings.c, the layer
 * table), names checked unique; and the warning for a default no model uses. */
#include "plan/plan_impl.h"

#include "layers/layer.h"
#include "optim/optim.h"

#include <stdlib.h>
#include <string.h>

const char *const plan_model_keys[] = {
    "name",    "layers", "epochs",         "batch_size", "shuffle",   "seed",
    "optimizer", "loss", "early_stopping", "device",     "init_from", "metrics",
    "class_weight", "reduce_lr_on_plateau", NULL};

/* A model's layers, each parsed by its kind's entry (layers/syntax.c), and
 * the last one checked against the loss. */
static cohort_status build_layers(const yctx *c, const ynode *t, const char *label,
                                  model_spec *s)
{
    char got[80];
    const ynode *n = ymap_get(t, "layers");
    if (!n)
        return ynode_fail(c, t, "%s has no layers (like layers: [{dense: 10, activation: "
                                "softmax}])",
                          label);
    if (n->type != YNODE_SEQ)
        return ynode_fail(c, n, "layers of %s must be a list of layers, got %s", label,
                          ynode_describe(n, got, sizeof got));
    if (n->n == 0)
        return ynode_fail(c, n, "layers of %s is empty; give at least one layer, like "
                                "[{dense: 10, activation: softmax}]",
                          label);
    if (n->n > COHORT_MAX_LAYERS)
        return ynode_fail(c, n->vals[COHORT_MAX_LAYERS], "%s has %zu layers, more than the %d allowed",
                          label, n->n, COHORT_MAX_LAYERS);
    cohort_status st = layer_parse_list(c, n, label, s->layers, COHORT_MAX_LAYERS, &s->n_layers);
    return st ? st : plan_check_output(c, n->vals[n->n - 1], label, s);
}

static int name_char_ok(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch && strchr("_.=+-", ch));
}

static cohort_status check_name(const yctx *c, const ynode *n, char *out)
{
    cohort_status st = yget_str(c, n, "name", out, COHORT_NAME_MAX);
    if (st)
        return st;
    for (const char *p = out; *p; p++)
        if (!name_char_ok((unsigned char)*p))
            return ynode_fail(c, n, "model name '%s' may hold only letters, digits and _ . = + - "
                                    "(it becomes a file name)",
                              out);
    /* ".", ".." and hidden files: --overwrite clears a run's files but not
     * hidden ones, which would then mix with the next run's. */
    if (out[0] == '.')
        return ynode_fail(c, n, "model name '%s' starts with '.'; it becomes a file name, and "
                                "one starting with '.' is hidden (or the folder itself): start "
                                "it with a letter or digit",
                          out);
    return COHORT_OK;
}

/* The maps of settings a model holds, and how messages call them. */
static const struct {
    const char *key;
    const char *what;
} model_maps[] = {{"optimizer", "the optimizer"},
                  {"loss", "the loss"},
                  {"early_stopping", "early_stopping"},
                  {"reduce_lr_on_plateau", "reduce_lr_on_plateau"}};

const char *const *plan_model_map_keys(const char *key)
{
    if (!strcmp(key, "optimizer"))
        return optim_plan_keys(); /* the optimizer table's */
    if (!strcmp(key, "loss"))
        return plan_loss_keys;
    if (!strcmp(key, "early_stopping"))
        return plan_early_stop_keys;
    if (!strcmp(key, "reduce_lr_on_plateau"))
        return plan_plateau_keys;
    return NULL;
}

/* Keys of a model's map (its own, defaults, or merged and swept) and of the
 * maps it holds: the one check of them. `where` names the map ("in model
 * 'm'"), label its owner ("model 'm'", "defaults"). */
static cohort_status check_model_keys(const yctx *c, const ynode *m, const char *where,
                                      const char *label)
{
    cohort_status st = plan_check_keys(c, m, plan_model_keys, "%s", where);
    for (int i = 0; i < COUNT(model_maps) && !st; i++)
        st = plan_check_keys(c, ymap_get(m, model_maps[i].key),
                             plan_model_map_keys(model_maps[i].key), "in %s of %s",
                             model_maps[i].what, label);
    return st;
}

/* Fill s from a merged (and swept) model tree t; name is final. */
static cohort_status build_model(const yctx *c, const ynode *t, const char *name,
                                 const data_spec *data, model_spec *s)
{
    char label[COHORT_NAME_MAX + 16], where[COHORT_NAME_MAX + 24], got[80];
    model_spec_defaults(s);
    str_copy(s->name, sizeof s->name, name);
    s->line = t->line;
    snprintf(label, sizeof label, "model '%s'", s->name);
    cohort_status st;
    const ynode *v;
    long long ll;
    /* Again on the merged model: a sweep or search value can be a map. */
    snprintf(where, sizeof where, "in %s", label);
    if ((st = check_model_keys(c, t, where, label)))
        return st;
    if ((st = plan_build_loss(c, ymap_get(t, "loss"), label, s)))
        return st;
    if ((st = plan_build_class_weight(c, ymap_get(t, "class_weight"), label, s)))
        return st;
    if ((st = build_layers(c, t, label, s)))
        return st;
    if ((v = ymap_get(t, "epochs"))) {
        if ((st = yget_int(c, v, "epochs", 1, 100000, &ll)))
            return st;
        s->epochs = (int)ll;
    }
    if ((v = ymap_get(t, "batch_size"))) {
        if ((st = yget_int(c, v, "batch_size", 1, 1 << 20, &ll)))
            return st;
        s->batch_size = (int)ll;
    }
    if ((v = ymap_get(t, "shuffle")) && (st = yget_bool(c, v, "shuffle", &s->shuffle)))
        return st;
    if ((v = ymap_get(t, "seed"))) {
        unsigned long long seed;
        if ((st = yget_u64(c, v, "seed", &seed)))
            return st;
        s->seed = seed;
    }
    if ((st = plan_build_optimizer(c, ymap_get(t, "optimizer"), label, &s->opt)))
        return st;
    if ((st = plan_build_early_stop(c, ymap_get(t, "early_stopping"), label, data, &s->early_stop)))
        return st;
    if ((st = plan_build_plateau(c, ymap_get(t, "reduce_lr_on_plateau"), label, data, &s->opt,
                            &s->plateau)))
        return st;
    if ((v = ymap_get(t, "device")) && !ynode_is_null(v)) {
        if (v->type != YNODE_SCALAR || !plan_device_name_ok(v->str, 1) ||
            str_copy(s->device, sizeof s->device, v->str))
            return ynode_fail(c, v, "device of %s must be like cpu:0, gpu:1 or gpu:1/0, got %s",
                              label, ynode_describe(v, got, sizeof got));
    }
    if ((v = ymap_get(t, "init_from")) && !ynode_is_null(v) &&
        (st = plan_yget_path(c, v, 0, "init_from", s->init_from, sizeof s->init_from)))
        return st;
    if ((v = ymap_get(t, "metrics"))) {
        if (v->type != YNODE_SEQ || v->n == 0)
            return ynode_fail(c, v, "metrics of %s must be a list of accuracy, mae, rmse (the "
                                    "loss and accuracy are always reported for classification, "
                                    "mae and rmse for regression), got %s",
                              label, ynode_describe(v, got, sizeof got));
        for (size_t i = 0; i < v->n; i++)
            if ((st = plan_check_metric(c, v->vals[i], label)))
                return st;
    }
    return COHORT_OK;
}

/* Spell learning_rate as lr in an optimizer map; a --set value beats the
 * file's, two in the file are an error. */
static cohort_status canon_optimizer(const yctx *c, ynode *o)
{
    if (!o || o->type != YNODE_MAP)
        return COHORT_OK;
    int b = ymap_find(o, "learning_rate");
    if (b < 0)
        return COHORT_OK;
    int a = ymap_find(o, "lr");
    if (a >= 0) {
        int a_set = o->keys[a]->origin != NULL, b_set = o->keys[b]->origin != NULL;
        if (a_set == b_set)
            return ynode_fail(c, o->keys[b], "the optimizer has both 'lr' and 'learning_rate' "
                                             "(the same setting); keep one");
        if (a_set) {
            ymap_remove(o, (size_t)b);
            return COHORT_OK;
        }
        ymap_remove(o, (size_t)a);
        b = ymap_find(o, "learning_rate");
    }
    char *lr = str_dup("lr");
    if (!lr)
        return ynode_nomem(c);
    free(o->keys[b]->str);
    o->keys[b]->str = lr;
    return COHORT_OK;
}

/* The defaults' optimizer/early_stopping/reduce_lr_on_plateau value d made a map the model's map
 * can merge into: "adam" becomes {name: adam}, a switch becomes {}. */
static ynode *as_merge_map(ynode *d, int optimizer)
{
    if (d->type == YNODE_MAP)
        return d;
    ynode *m = ynode_new(YNODE_MAP, d->line, d->origin);
    if (!m)
        return NULL;
    m->inherited = d->inherited;
    if (optimizer && d->type == YNODE_SCALAR && !ynode_is_null(d)) {
        ynode *k = ynode_scalar("name", d->line, d->origin);
        ynode *v = ynode_clone(d, 0);
        if (!k || !v || ynode_append(m, k, v)) {
            ynode_free(k);
            ynode_free(v);
            ynode_free(m);
            return NULL;
        }
        k->inherited = d->inherited;
    }
    return m;
}

/* A new tree: defaults (marked inherited) with the model's keys on top;
 * optimizer and early_stopping maps merge key by key. */
static cohort_status merge_model(const yctx *c, const ynode *defaults, const ynode *own,
                                 ynode **out)
{
    *out = NULL;
    ynode *m = defaults ? ynode_clone(defaults, 1) : ynode_new(YNODE_MAP, own->line, own->origin);
    if (!m)
        return ynode_nomem(c);
    m->line = own->line;
    m->origin = own->origin;
    m->inherited = 0;
    for (size_t i = 0; i < own->n; i++) {
        const ynode *k = own->keys[i], *v = own->vals[i];
        int is_opt = strcmp(k->str, "optimizer") == 0;
        int di = ymap_find(m, k->str);
        int by_key = is_opt || strcmp(k->str, "early_stopping") == 0 ||
                     strcmp(k->str, "reduce_lr_on_plateau") == 0;
        if (by_key && v->type == YNODE_MAP && di >= 0) {
            ynode *d = as_merge_map(m->vals[di], is_opt);
            if (!d) {
                ynode_free(m);
                return ynode_nomem(c);
            }
            if (d != m->vals[di]) {
                ynode_free(m->vals[di]);
                m->vals[di] = d;
            }
            for (size_t j = 0; j < v->n; j++) {
                ynode *sk = ynode_clone(v->keys[j], 0), *sv = ynode_clone(v->vals[j], 0);
                if (!sk || !sv || ymap_set(d, sk, sv)) {
                    ynode_free(sk);
                    ynode_free(sv);
                    ynode_free(m);
                    return ynode_nomem(c);
                }
            }
            continue;
        }
        ynode *ck = ynode_clone(k, 0), *cv = ynode_clone(v, 0);
        if (!ck || !cv || ymap_set(m, ck, cv)) {
            ynode_free(ck);
            ynode_free(cv);
            ynode_free(m);
            return ynode_nomem(c);
        }
    }
    *out = m;
    return COHORT_OK;
}

typedef struct name_ref {
    const char *name;
    int index;
} name_ref;

static int cmp_name_ref(const void *a, const void *b)
{
    const name_ref *x = a, *y = b;
    int r = strcmp(x->name, y->name);
    return r ? r : (x->index > y->index) - (x->index < y->index);
}

/* Names must be unique: report the first model (in plan order) whose name an
 * earlier model already has. */
/* per_entry: the models each entry of the models list makes (the sweep's
 * combinations times the search's draws), in the order of the list. */
static cohort_status check_unique_names(const yctx *c, const cohort_plan *plan, size_t per_entry)
{
    int n = plan->n_models;
    /* models/NAME.best.safetensors holds model NAME's best epoch: a model
     * named NAME.best would write its weights over them. */
    for (int i = 0; i < n; i++) {
        const model_spec *m = &plan->models[i];
        size_t len = strlen(m->name);
        if (len >= 5 && strcmp(m->name + len - 5, ".best") == 0)
            return cohort_fail(c->err, COHORT_ERR_INPUT,
                               "%s:%d: model name '%s' ends in .best, which names a model's "
                               "best-epoch weights (models/NAME.best.safetensors); choose another",
                               c->file, m->line, m->name);
    }
    name_ref *refs = malloc((size_t)n * sizeof *refs);
    if (!refs)
        return ynode_nomem(c);
    for (int i = 0; i < n; i++)
        refs[i] = (name_ref){plan->models[i].name, i};
    qsort(refs, (size_t)n, sizeof *refs, cmp_name_ref);
    int dup = -1, first = -1;
    for (int i = 1; i < n; i++) {
        /* Sorted by (name, index): the second of a run of equal names is its
         * earliest repeat, the first is the original. */
        if (strcmp(refs[i].name, refs[i - 1].name) == 0 &&
            (i < 2 || strcmp(refs[i - 1].name, refs[i - 2].name) != 0) &&
            (dup < 0 || refs[i].index < dup)) {
            dup = refs[i].index;
            first = refs[i - 1].index;
        }
    }
    free(refs);
    if (dup < 0)
        return COHORT_OK;
    const model_spec *d = &plan->models[dup], *f = &plan->models[first];
    /* Two models of one entry have their names from the sweep; two entries
     * on one line (a flow list, JSON) are the plan's own duplicate. */
    if ((size_t)dup / per_entry == (size_t)first / per_entry)
        return cohort_fail(c->err, COHORT_ERR_INPUT,
                           "%s:%d: the sweep gives two models the name '%s'; model names must be "
                           "unique",
                           c->file, d->line, d->name);
    if (d->line == f->line)
        return cohort_fail(c->err, COHORT_ERR_INPUT,
                           "%s:%d: duplicate model name '%s' (models.%zu and models.%zu); model "
                           "names must be unique",
                           c->file, d->line, d->name, (size_t)first / per_entry,
                           (size_t)dup / per_entry);
    return cohort_fail(c->err, COHORT_ERR_INPUT,
                       "%s:%d: duplicate model name '%s' (first at line %d); model names must be "
                       "unique",
                       c->file, d->line, d->name, f->line);
}

/* Model `i` of the plan's list (own), merged with defaults and swept, into
 * plan->models; the first error of its combinations, if any. */
static cohort_status build_plan_model(const yctx *c, ynode *own, size_t i, const ynode *defaults,
                                      const plan_sweep *sw, const plan_sweep *search,
                                      cohort_plan *plan)
{
    char got[80];
    cohort_status st = COHORT_OK;
    char base[COHORT_NAME_MAX], label[COHORT_NAME_MAX + 32], where[COHORT_NAME_MAX + 48];
    if (own->type != YNODE_MAP)
        return ynode_fail(c, own, "models.%zu must be a map with a name and layers, got %s", i,
                          ynode_describe(own, got, sizeof got));
    const ynode *name = ymap_get(own, "name");
    if (!name)
        return ynode_fail(c, own, "models.%zu has no name", i);
    if ((st = check_name(c, name, base)))
        return st;
    snprintf(label, sizeof label, "model '%s'", base);
    snprintf(where, sizeof where, "in model '%s'", base);
    if ((st = check_model_keys(c, own, where, label)) ||
        (st = canon_optimizer(c, ymap_get(own, "optimizer"))))
        return st;
    ynode *merged;
    if ((st = merge_model(c, defaults, own, &merged)))
        return st;
    /* The sweep's combinations, each with every draw of the search. */
    for (size_t k = 0; k < sw->combos * search->combos && st == COHORT_OK; k++) {
        ynode *t = sw->n || search->n ? ynode_clone(merged, 0) : merged;
        char suffix[COHORT_NAME_MAX + 64], drawn[COHORT_NAME_MAX + 64];
        char full[3 * COHORT_NAME_MAX + 192];
        suffix[0] = drawn[0] = 0;
        if (!t) {
            st = ynode_nomem(c);
            break;
        }
        if (sw->n)
            st = plan_sweep_apply(c, sw, k / search->combos, t, label, suffix, sizeof suffix);
        if (!st && search->n)
            st = plan_sweep_apply(c, search, k % search->combos, t, label, drawn, sizeof drawn);
        if (st == COHORT_OK) {
            snprintf(full, sizeof full, "%s%s%s", base, suffix, drawn);
            if (strlen(full) >= COHORT_NAME_MAX)
                st = ynode_fail(c, name, "the name the sweep gives %s, '%.60s...', is too long "
                                         "(at most %d characters)",
                                label, full, COHORT_NAME_MAX - 1);
        }
        model_spec *s = &plan->models[plan->n_models];
        if (st == COHORT_OK)
            st = build_model(c, t, full, &plan->data, s);
        if (st == COHORT_OK) {
            s->shared_order = plan->shared_order;
            if ((s->config_json = model_spec_to_json(s)))
                plan->n_models++;
            else
                st = ynode_nomem(c);
        }
        if (t != merged)
            ynode_free(t);
    }
    ynode_free(merged);
    return st;
}

/* Remove the entry whose key is `key` from map or from a map it holds;
 * returns whether it was found. */
static int drop_key(ynode *map, const ynode *key)
{
    for (size_t i = 0; i < map->n; i++) {
        if (map->keys[i] == key) {
            ymap_remove(map, i);
            return 1;
        }
        if (map->vals[i]->type == YNODE_MAP && drop_key(map->vals[i], key))
            return 1;
    }
    return 0;
}

cohort_status plan_build_models(const yctx *c, plan_errs *pe, ynode *root,
                                cohort_plan *plan, int *built)
{
    char got[80];
    *built = 0;
    ynode *models = ymap_get(root, "models");
    cohort_status st = COHORT_OK;
    if (!models)
        st = ynode_fail(c, root, "the plan has no 'models' list");
    else if (models->type != YNODE_SEQ)
        st = ynode_fail(c, models, "models must be a list of models, got %s",
                        ynode_describe(models, got, sizeof got));
    else if (models->n == 0)
        st = ynode_fail(c, models, "models is empty; give at least one model with a name and "
                                   "layers");
    else if (models->n > COHORT_MAX_MODELS)
        st = ynode_fail(c, models, "the plan has %zu models, more than the %d allowed",
                        models->n, COHORT_MAX_MODELS);
    if (st)
        return plan_errs_add(pe, c, st, NULL);

    /* Defaults' own mistakes are reported once here; a model that inherits
     * one fails at the same line, which plan_errs_add counts, not repeats. */
    ynode *defaults = ymap_get(root, "defaults");
    if (defaults && ynode_is_null(defaults))
        defaults = NULL;
    if (defaults) {
        if (defaults->type != YNODE_MAP) {
            st = ynode_fail(c, defaults, "defaults must be a map of model keys, got %s",
                            ynode_describe(defaults, got, sizeof got));
            return plan_errs_add(pe, c, st, NULL);
        }
        int ni = ymap_find(defaults, "name");
        if (ni >= 0 && (st = PLAN_STAGE(pe, c,
                                        ynode_fail(c, defaults->keys[ni], "'name' cannot be in "
                                                   "defaults; each model has its own"))))
            return st;
        /* Each unknown key is reported and dropped, so that the models
         * inherit none of them and report their own mistakes. */
        for (int k = 0; k < PLAN_MAX_ERRORS; k++) {
            c->failed->node = NULL;
            st = check_model_keys(c, defaults, "in defaults", "defaults");
            if (!st || (st = plan_errs_add(pe, c, st, c->failed)) || !c->failed->node ||
                !drop_key(defaults, c->failed->node))
                break;
        }
        if (st || (st = PLAN_STAGE(pe, c, canon_optimizer(c, ymap_get(defaults, "optimizer")))))
            return st;
    }

    const ynode *sweep_node = ymap_get(root, "sweep"), *search_node = ymap_get(root, "search");
    plan_sweep sweep, search;
    int before = pe->n;
    if ((st = PLAN_STAGE(pe, c, plan_search_parse(c, search_node, &search))) ||
        (st = PLAN_STAGE(pe, c, plan_sweep_parse(c, sweep_node, &sweep)))) {
        plan_sweep_free(&search);
        return st;
    }
    if (pe->n > before) { /* the sweep or search: no model can be named */
        plan_sweep_free(&search);
        plan_sweep_free(&sweep);
        return COHORT_OK;
    }
    /* Each factor is at most COHORT_MAX_MODELS: the product fits a size_t. */
    size_t per_entry = sweep.combos * search.combos;
    size_t total = models->n * per_entry;
    if (total > COHORT_MAX_MODELS || !(plan->models = calloc(total, sizeof *plan->models))) {
        plan_sweep_free(&sweep);
        plan_sweep_free(&search);
        if (total <= COHORT_MAX_MODELS)
            return ynode_nomem(c);
        st = ynode_fail(c, search.n ? search_node : sweep_node,
                        "the %s makes %zu models, more than the %d allowed",
                        search.n && sweep.n ? "sweep with the search" : search.n ? "search" : "sweep",
                        total, COHORT_MAX_MODELS);
        return plan_errs_add(pe, c, st, NULL);
    }

    /* A model's error does not stop the others'. */
    before = pe->n;
    for (size_t i = 0; i < models->n && st == COHORT_OK; i++)
        st = PLAN_STAGE(pe, c,
                        build_plan_model(c, models->vals[i], i, defaults, &sweep, &search, plan));
    plan_sweep_free(&sweep);
    plan_sweep_free(&search);
    if (st || pe->n > before)
        return st;
    if ((st = PLAN_STAGE(pe, c, check_unique_names(c, plan, per_entry))))
        return st;
    *built = pe->n == before;
    return COHORT_OK;
}

cohort_status plan_warn_unused_defaults(const yctx *c, const ynode *root,
                                        const cohort_plan *plan)
{
    const ynode *o = ymap_get(ymap_get(root, "defaults"), "optimizer");
    if (!o || o->type != YNODE_MAP)
        return COHORT_OK;
    for (size_t i = 0; i < o->n; i++) {
        const char *k = o->keys[i]->str;
        if (!optim_key_any(k))
            continue; /* name, lr, the clips, the schedule: every optimizer's */
        int used = 0;
        for (int m = 0; m < plan->n_models && !used; m++)
            used = optim_key_of(plan->models[m].opt.kind, k) != NULL;
        if (used)
            continue;
        /* The models, by optimizer: "adam: a, b, c; sgd: d". */
        strbuf b;
        sb_init(&b);
        for (int kind = 0; kind < OPT_KIND_COUNT; kind++) {
            int n = 0;
            for (int m = 0; m < plan->n_models; m++) {
                if ((int)plan->models[m].opt.kind != kind)
                    continue;
                if (n < 4)
                    sb_printf(&b, "%s%s%s", n ? ", " : b.len ? "; " : "",
                              n ? "" : opt_name((opt_kind)kind), n ? "" : ": ");
                if (n < 4)
                    sb_puts(&b, plan->models[m].name);
                else if (n == 4)
                    sb_puts(&b, ", ...");
                n++;
            }
        }
        if (b.failed) {
            sb_free(&b);
            return ynode_nomem(c);
        }
        const ynode *key = o->keys[i];
        char where[COHORT_PATH_MAX + 32];
        if (key->origin)
            snprintf(where, sizeof where, "--set %s", key->origin);
        else
            snprintf(where, sizeof where, "%s:%d", c->file, key->line);
        cohort_log(COHORT_LOG_WARN, "%s: defaults.optimizer.%s is used by none of the models: "
                                    "no model's optimizer takes it (%s)",
                   where, k, b.data);
        sb_free(&b);
    }
    return COHORT_OK;
}
