/*
 * optim: the optimizer table. One entry per optimizer, in its own file
 * (optim/NAME.c, with its per-weight update in optim/NAME.h): its plan keys
 * with their defaults and ranges (also its JSON and its PBT-mutable
 * settings), its slots of state per weight, and the scalars of one step of
 * one model, which its update reads. plan/, model/ and train/ go through
 * the table and name no optimizer.
 */
#ifndef COHORT_OPTIM_H
#define COHORT_OPTIM_H

#include "model/model.h"
#include "optim/update.h"

#include <stddef.h>
#include <stdint.h>

/* The values a key takes, as the plan checks them. */
typedef enum optim_range {
    OPTIM_POSITIVE, /* > 0, and a normal float */
    OPTIM_NONNEG,   /* >= 0 */
    OPTIM_UNIT,     /* in [0, 1) */
    OPTIM_BOOL      /* true or false (an int field) */
} optim_range;

/* One setting of an optimizer, besides lr (which all have). */
typedef struct optim_key {
    const char *name;  /* as the plan and the spec's JSON spell it */
    size_t offset;     /* of its field in optim_spec: a float, an int for OPTIM_BOOL */
    optim_range range;
    float def;         /* Keras's default */
    int pbt;           /* PBT may change it between epochs (model/hyper.c) */
} optim_key;

/* The entries of an array of keys. */
#define OPTIM_COUNT(keys) ((int)(sizeof(keys) / sizeof((keys)[0])))
#define OPTIM_KEY(name, field, range, def, pbt) {name, offsetof(optim_spec, field), range, def, pbt}
/* The keys several optimizers share, with Keras's defaults. */
#define OPTIM_KEY_MOMENTUM OPTIM_KEY("momentum", momentum, OPTIM_UNIT, 0.0f, 1)
#define OPTIM_KEY_BETA_1 OPTIM_KEY("beta_1", beta1, OPTIM_UNIT, 0.9f, 1)
#define OPTIM_KEY_BETA_2 OPTIM_KEY("beta_2", beta2, OPTIM_UNIT, 0.999f, 1)
#define OPTIM_KEY_EPSILON OPTIM_KEY("epsilon", eps, OPTIM_POSITIVE, 1e-7f, 1)

/* What an entry's scalars may keep on the host from one step of a model
 * to its next (nadam: the momentum schedule's running product). All zero:
 * nothing kept yet. */
typedef struct optim_memo {
    double prod;
    int64_t t;
} optim_memo;

typedef struct optim_entry {
    const char *name; /* the plan's name, "adam" */
    float lr;         /* Keras's default learning rate */
    /* Its keys besides lr, in the order of its JSON. */
    const optim_key *keys;
    int n_keys;
    /* Floats of state per weight (0 to 2): s1, then s2. */
    int (*slots)(const optim_spec *o);
    /* Optional (NULL: zeros): what s1 starts at. */
    float (*slot_init)(const optim_spec *o);
    /* Optional: why o's settings do not go together (a phrase), or NULL. */
    const char *(*check)(const optim_spec *o);
    /* The scalars of the step that makes the count t (t >= 1) at rate lr
     * (the scheduled one); memo is the model's, kept between its steps. */
    void (*scalars)(const optim_spec *o, float lr, int64_t t, optim_memo *memo,
                    optim_scalars *out);
} optim_entry;

/* The entry of kind (a valid kind). */
const optim_entry *optim_entry_of(opt_kind kind);
/* o reset to kind's defaults: Keras's for each of its keys, zero for what
 * it does not take, no clip and no schedule. */
void optim_defaults(optim_spec *o, opt_kind kind);
/* The key of kind named `name` (lr excluded), or NULL. */
const optim_key *optim_key_of(opt_kind kind, const char *name);
/* The first entry's key of that name, or NULL: a key's range is the same
 * in every optimizer that takes it. */
const optim_key *optim_key_any(const char *name);
/* Key k's field of o: a float, or an int for OPTIM_BOOL. */
void *optim_field(optim_spec *o, const optim_key *k);
const void *optim_field_c(const optim_spec *o, const optim_key *k);
/* Floats of state per weight of o's optimizer. */
int optim_slots(const optim_spec *o);
/* Every key an optimizer map may hold, NULL-terminated: name, lr,
 * learning_rate, each entry's keys (once each, in table order), the clips
 * and schedule. */
const char *const *optim_plan_keys(void);
/* The keys of kind for a message: "lr, beta_1, beta_2, epsilon" (buf, size
 * bytes, returned). */
const char *optim_keys_list(opt_kind kind, char *buf, size_t size);

#endif
