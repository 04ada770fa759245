/*
 * hyper: the settings of a model spec that may change between two epochs
 * without changing its shapes or its memory plan, so that a model keeps its
 * weights and optimizer state across the change (PBT's hyperparam_mutations).
 * They are the optimizer's scalars, the dropout rates and the kernel
 * regularizers, all floats of the spec; a layer's width, the batch size or
 * the optimizer's kind would change shapes and are not among them.
 */
#include "model/model.h"
#include "util/util.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define OPTS_ADAM ((1u << OPT_ADAM) | (1u << OPT_ADAMW) | (1u << OPT_NADAM))

typedef struct hyper_key {
    const char *name;  /* after "optimizer." or "layers.N." */
    int layer;         /* 1: a layer's setting, 0: the optimizer's */
    unsigned opts;     /* optimizer: the kinds that use it (bits of opt_kind) */
    double lo, hi;     /* the values it takes */
    int lo_open, hi_open;
} hyper_key;

/* lr and epsilon from FLT_MIN: training flushes denormals to zero. */
static const hyper_key keys[] = {
    {"lr", 0, ~0u, FLT_MIN, HUGE_VAL, 0, 1},
    {"momentum", 0, (1u << OPT_SGD) | (1u << OPT_RMSPROP), 0, 1, 0, 0},
    {"beta_1", 0, OPTS_ADAM, 0, 1, 0, 1},
    {"beta_2", 0, OPTS_ADAM, 0, 1, 0, 1},
    {"epsilon", 0, OPTS_ADAM | (1u << OPT_RMSPROP) | (1u << OPT_ADAGRAD), FLT_MIN, HUGE_VAL, 0,
     1},
    {"weight_decay", 0, 1u << OPT_ADAMW, 0, HUGE_VAL, 0, 1},
    {"rho", 0, 1u << OPT_RMSPROP, 0, 1, 0, 1},
    {"dropout", 1, 0, 0, 1, 0, 1},
    {"kernel_regularizer.l1", 1, 0, 0, HUGE_VAL, 0, 1},
    {"kernel_regularizer.l2", 1, 0, 0, HUGE_VAL, 0, 1},
};

/* The entry of path, and its layer index (-1: the optimizer's); NULL when
 * path is no mutable setting. */
static const hyper_key *find(const char *path, int *layer)
{
    const char *rest = NULL;
    *layer = -1;
    int n = 0;
    if (!strncmp(path, "optimizer.", 10))
        rest = path + 10;
    else if (sscanf(path, "layers.%d.%n", layer, &n) == 1 && n > 0 && *layer >= 0 &&
             *layer < COHORT_MAX_LAYERS)
        rest = path + n;
    for (size_t i = 0; rest && i < sizeof keys / sizeof keys[0]; i++)
        if (keys[i].layer == (*layer >= 0) && !strcmp(rest, keys[i].name))
            return &keys[i];
    return NULL;
}

int model_hyper_known(const char *path)
{
    int layer;
    return find(path, &layer) != NULL;
}

float *model_hyper_field(model_spec *spec, const char *path)
{
    int li;
    const hyper_key *k = find(path, &li);
    if (!k)
        return NULL;
    if (li < 0) {
        optim_spec *o = &spec->opt;
        if (!(k->opts & (1u << o->kind)))
            return NULL;
        float *f[] = {&o->lr, &o->momentum, &o->beta1, &o->beta2, &o->eps, &o->weight_decay,
                      &o->rho};
        return f[k - keys];
    }
    if (li >= spec->n_layers)
        return NULL;
    layer_spec *l = &spec->layers[li];
    if (!strcmp(k->name, "dropout"))
        return l->kind == LAYER_DROPOUT ? &l->rate : NULL;
    if (l->kind != LAYER_DENSE && l->kind != LAYER_CONV2D)
        return NULL;
    return !strcmp(k->name, "kernel_regularizer.l1") ? &l->l1 : &l->l2;
}

int model_hyper_allows(const char *path, double v, char *range, size_t size)
{
    int li;
    const hyper_key *k = find(path, &li);
    if (!k)
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
