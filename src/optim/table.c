/*
 * The optimizer table: every entry by kind, and what plan/, model/ and the
 * trainer ask of an optimizer through it (names, defaults, keys, slots).
 */
#include "optim/optim.h"

#include "util/util.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

extern const optim_entry optim_sgd, optim_adam, optim_adamw, optim_rmsprop, optim_adagrad,
    optim_nadam;

static const optim_entry *const entries[] = {
    [OPT_SGD] = &optim_sgd,         [OPT_ADAM] = &optim_adam,
    [OPT_ADAMW] = &optim_adamw,     [OPT_RMSPROP] = &optim_rmsprop,
    [OPT_ADAGRAD] = &optim_adagrad, [OPT_NADAM] = &optim_nadam,
};
_Static_assert(sizeof entries / sizeof entries[0] == OPT_KIND_COUNT,
               "one entry per optimizer kind");

const optim_entry *optim_entry_of(opt_kind kind) { return entries[kind]; }

const char *opt_name(opt_kind kind)
{
    return (unsigned)kind < OPT_KIND_COUNT ? entries[kind]->name : "unknown";
}

void *optim_field(optim_spec *o, const optim_key *k) { return (char *)o + k->offset; }

const void *optim_field_c(const optim_spec *o, const optim_key *k)
{
    return (const char *)o + k->offset;
}

void optim_defaults(optim_spec *o, opt_kind kind)
{
    const optim_entry *e = entries[kind];
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->lr = e->lr;
    for (int i = 0; i < e->n_keys; i++) {
        const optim_key *k = &e->keys[i];
        if (k->range == OPTIM_BOOL)
            *(int *)optim_field(o, k) = k->def != 0.0f;
        else
            *(float *)optim_field(o, k) = k->def;
    }
    o->schedule.warmup_target = NAN;
}

const optim_key *optim_key_of(opt_kind kind, const char *name)
{
    const optim_entry *e = entries[kind];
    for (int i = 0; i < e->n_keys; i++)
        if (strcmp(e->keys[i].name, name) == 0)
            return &e->keys[i];
    return NULL;
}

const optim_key *optim_key_any(const char *name)
{
    for (int kind = 0; kind < OPT_KIND_COUNT; kind++) {
        const optim_key *k = optim_key_of((opt_kind)kind, name);
        if (k)
            return k;
    }
    return NULL;
}

int optim_slots(const optim_spec *o) { return entries[o->kind]->slots(o); }

/* The union of the entries' keys between the common ones: made once. */
#define MAX_PLAN_KEYS 64
static const char *plan_keys[MAX_PLAN_KEYS];
static pthread_once_t plan_keys_once = PTHREAD_ONCE_INIT;

static void add_key(int *n, const char *name)
{
    for (int i = 0; i < *n; i++)
        if (strcmp(plan_keys[i], name) == 0)
            return;
    if (*n < MAX_PLAN_KEYS - 1)
        plan_keys[(*n)++] = name;
}

static void make_plan_keys(void)
{
    static const char *const first[] = {"name", "lr", "learning_rate"};
    static const char *const last[] = {"clipnorm", "global_clipnorm", "clipvalue", "schedule"};
    int n = 0;
    for (size_t i = 0; i < (size_t)OPTIM_COUNT(first); i++)
        add_key(&n, first[i]);
    for (int kind = 0; kind < OPT_KIND_COUNT; kind++)
        for (int i = 0; i < entries[kind]->n_keys; i++)
            add_key(&n, entries[kind]->keys[i].name);
    for (size_t i = 0; i < (size_t)OPTIM_COUNT(last); i++)
        add_key(&n, last[i]);
    plan_keys[n] = NULL;
}

const char *const *optim_plan_keys(void)
{
    pthread_once(&plan_keys_once, make_plan_keys);
    return plan_keys;
}

const char *optim_keys_list(opt_kind kind, char *buf, size_t size)
{
    const optim_entry *e = entries[kind];
    size_t at = (size_t)snprintf(buf, size, "lr");
    for (int i = 0; i < e->n_keys && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, ", %s", e->keys[i].name);
    return buf;
}
