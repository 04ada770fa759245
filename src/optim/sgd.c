/* sgd: Keras's SGD, with momentum and nesterov (the update: optim/sgd.h). */
#include "optim/optim.h"

static const optim_key keys[] = {
    OPTIM_KEY_MOMENTUM,
    OPTIM_KEY("nesterov", nesterov, OPTIM_BOOL, 0.0f, 0),
};

/* The velocity, where there is momentum. */
static int slots(const optim_spec *o) { return o->momentum > 0.0f ? 1 : 0; }

static void scalars(const optim_spec *o, float lr, int64_t t, optim_memo *memo,
                    optim_scalars *out)
{
    (void)t, (void)memo;
    out->sgd.lr = lr;
    out->sgd.momentum = o->momentum;
    out->sgd.mode = o->momentum == 0.0f ? SGD_PLAIN : o->nesterov ? SGD_NESTEROV : SGD_MOMENTUM;
}

const optim_entry optim_sgd = {
    .name = "sgd",
    .lr = 0.01f,
    .keys = keys,
    .n_keys = OPTIM_COUNT(keys),
    .slots = slots,
    .scalars = scalars,
};
