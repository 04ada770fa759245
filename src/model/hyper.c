/*
 * hyper: the settings of a model spec that may change between two epochs
 * without changing its shapes or its memory plan, so that a model keeps its
 * weights and optimizer state across the change (PBT's hyperparam_mutations).
 * They are the optimizer's scalars and the layers' settings their entries of
 * the layer table list (a dropout rate, a kernel regularizer), all floats of
 * the spec; a layer's width, the batch size or the optimizer's kind would
 * change shapes and are not among them.
 */
#include "model/model.h"
#include "layers/layer.h"
#include "optim/optim.h"
#include "util/util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct hyper_key {
    const char *name;  /* after "optimizer." or "layers.N." */
    double lo, hi;     /* the values it takes */
    int lo_open, hi_open;
} hyper_key;

/* The setting key of the layer kind `kind` (NULL: of any kind, the first
 * in the table's order), or NULL. */
static const layer_hyper *layer_key(const layer_ops *kind, const char *key)
{
    int n;
    const layer_ops *const *kinds = layer_kinds(&n);
    for (int k = 0; k < n; k++)
        for (const layer_hyper *h = kinds[k]->hyper; (!kind || kinds[k] == kind) && h && h->key;
             h++)
            if (strcmp(h->key, key) == 0)
                return h;
    return NULL;
}

/* The optimizer's: lr and the keys its table marks (optim/optim.h), with
 * the plan's ranges; positive ones from FLT_MIN, as training flushes
 * denormals to zero. */
static int optimizer_key(const char *name, hyper_key *out)
{
    optim_range range = OPTIM_POSITIVE;
    if (strcmp(name, "lr") != 0) {
        const optim_key *k = optim_key_any(name);
        if (!k || !k->pbt || k->range == OPTIM_BOOL)
            return 0;
        range = k->range;
    }
    *out = (hyper_key){name, 0, range == OPTIM_UNIT ? 1 : HUGE_VAL, 0, 1};
    if (range == OPTIM_POSITIVE)
        out->lo = FLT_MIN;
    return 1;
}

/* The key of path into *out, and its layer's path (layers.N.KEY, or
 * layers.N.J.KEY inside a block; layer[0] -1: the optimizer's); 0 when
 * path is no mutable setting. */
static int find(const char *path, int *layer, hyper_key *out)
{
    int n = 0, m = 0;
    layer[0] = layer[1] = -1;
    if (!strncmp(path, "optimizer.", 10))
        return optimizer_key(path + 10, out);
    if (sscanf(path, "layers.%d.%n", &layer[0], &n) != 1 || n <= 0 || layer[0] < 0 ||
        layer[0] >= COHORT_MAX_LAYERS)
        return 0;
    if (path[n] >= '0' && path[n] <= '9') {
        if (sscanf(path + n, "%d.%n", &layer[1], &m) != 1 || m <= 0 || layer[1] < 0 ||
            layer[1] >= COHORT_MAX_LAYERS)
            return 0;
        n += m;
    }
    const layer_hyper *h = layer_key(NULL, path + n);
    if (!h)
        return 0;
    *out = (hyper_key){h->key, h->lo, h->hi, h->lo_open, h->hi_open};
    return 1;
}

int model_hyper_known(const char *path)
{
    int layer[2];
    hyper_key k;
    return find(path, layer, &k);
}

float *model_hyper_field(model_spec *spec, const char *path)
{
    int at[2];
    hyper_key k;
    if (!find(path, at, &k))
        return NULL;
    if (at[0] < 0) {
        optim_spec *o = &spec->opt;
        if (!strcmp(k.name, "lr"))
            return &o->lr;
        const optim_key *ok = optim_key_of(o->kind, k.name);
        return ok ? optim_field(o, ok) : NULL;
    }
    int li = layer_at_path(spec->layers, spec->n_layers, at[0], at[1]);
    if (li < 0)
        return NULL;
    layer_spec *l = &spec->layers[li];
    const layer_hyper *h = layer_key(l->kind, k.name);
    return h ? h->field(l) : NULL;
}

int model_hyper_allows(const char *path, double v, char *range, size_t size)
{
    int at[2];
    hyper_key key, *k = &key;
    if (!find(path, at, k))
        return 0;
    if (range) {
        char hi[32];
        if (isinf(k->hi))
            snprintf(hi, sizeof hi, "inf");
        else
            str_format(hi, sizeof hi, "%g", k->hi);
        str_format(range, size, "%c%g, %s%c", k->lo_open ? '(' : '[', k->lo, hi,
                 k->hi_open ? ')' : ']');
    }
    return (k->lo_open ? v > k->lo : v >= k->lo) && (k->hi_open ? v < k->hi : v <= k->hi);
}
