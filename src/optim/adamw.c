/* adamw: Keras's AdamW, Adam with decoupled weight decay (the update:
 * optim/adam.h's, with decay). */
#include "optim/optim.h"

static const optim_key keys[] = {OPTIM_KEY_BETA_1, OPTIM_KEY_BETA_2, OPTIM_KEY_EPSILON,
                                 OPTIM_KEY("weight_decay", weight_decay, OPTIM_NONNEG, 0.004f, 1)};

static int slots(const optim_spec *o)
{
    (void)o;
    return 2; /* m, v */
}

static void scalars(const optim_spec *o, float lr, int64_t t, optim_memo *memo,
                    optim_scalars *out)
{
    (void)memo;
    adam_scalars_at(lr, o->beta1, o->beta2, o->eps, o->weight_decay, t, &out->adam);
}

const optim_entry optim_adamw = {
    .name = "adamw",
    .lr = 0.001f,
    .keys = keys,
    .n_keys = OPTIM_COUNT(keys),
    .slots = slots,
    .scalars = scalars,
};
