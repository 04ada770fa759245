/* adagrad: Keras's Adagrad (the update: optim/adagrad.h). */
#include "optim/optim.h"

static const optim_key keys[] = {
    OPTIM_KEY("initial_accumulator_value", init_accum, OPTIM_NONNEG, 0.1f, 0),
    OPTIM_KEY_EPSILON,
};

static int slots(const optim_spec *o)
{
    (void)o;
    return 1; /* the accumulator */
}

/* Keras starts the accumulators at initial_accumulator_value. */
static float slot_init(const optim_spec *o) { return o->init_accum; }

static void scalars(const optim_spec *o, float lr, int64_t t, optim_memo *memo,
                    optim_scalars *out)
{
    (void)t, (void)memo;
    out->adagrad.lr = lr;
    out->adagrad.eps = o->eps;
}

const optim_entry optim_adagrad = {
    .name = "adagrad",
    .lr = 0.001f,
    .keys = keys,
    .n_keys = OPTIM_COUNT(keys),
    .slots = slots,
    .slot_init = slot_init,
    .scalars = scalars,
};
