/*
 * hyper: the settings of a model spec that may change between two epochs
 * without changing its shapes or its memory plan, so that a model keeps its
 * weights and optimizer state across the change (PBT's hyperparam_mutations).
 * They are the optimizer's scalars, the dropout rates and the kernel
 * regularizers, all floats of the spec; a layer's width, the batch size or
 * the optimizer's kind would change shapes and are not among them.
 */
#include "model/model.h"
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

/* A layer's settings. */
static const hyper_key layer_keys[] = {
    {"dropout", 0, 1, 0, 1},
    {"kernel_regularizer.l1", 0, HUGE_VAL, 0, 1},
    {"kernel_regularizer.l2", 0, HUGE_VAL, 0, 1},
};

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

/* The key of path into *out, and its layer index (-1: the optimizer's);
 * 0 when path is no mutable setting. */
static int find(const char *path, int *layer, hyper_key *out)
{
    int n = 0;
    *layer = -1;
    if (!strncmp(path, "optimizer.", 10))
        return optimizer_key(path + 10, out);
    if (sscanf(path, "layers.%d.%n", layer, &n) != 1 || n <= 0 || *layer < 0 ||
        *layer >= COHORT_MAX_LAYERS)
        return 0;
    for (size_t i = 0; i < sizeof layer_keys / sizeof layer_keys[0]; i++)
        if (!strcmp(path + n, layer_keys[i].name)) {
            *out = layer_keys[i];
            return 1;
        }
    return 0;
}

int model_hyper_known(const char *path)
{
    int layer;
    hyper_key k;
    return find(path, &layer, &k);
}

float *model_hyper_field(model_spec *spec, const char *path)
{
    int li;
    hyper_key k;
    if (!find(path, &li, &k))
        return NULL;
    if (li < 0) {
        optim_spec *o = &spec->opt;
        if (!strcmp(k.name, "lr"))
            return &o->lr;
        const optim_key *ok = optim_key_of(o->kind, k.name);
        return ok ? optim_field(o, ok) : NULL;
    }
    if (li >= spec->n_layers)
        return NULL;
    layer_spec *l = &spec->layers[li];
    if (!strcmp(k.name, "dropout"))
        return l->kind == LAYER_DROPOUT ? &l->rate : NULL;
    if (l->kind != LAYER_DENSE && l->kind != LAYER_CONV2D)
        return NULL;
    return !strcmp(k.name, "kernel_regularizer.l1") ? &l->l1 : &l->l2;
}

int model_hyper_allows(const char *path, double v, char *range, size_t size)
{
    int li;
    hyper_key key, *k = &key;
    if (!find(path, &li, k))
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
