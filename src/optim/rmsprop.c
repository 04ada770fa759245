/* rmsprop: Keras's RMSprop, with momentum or centered (the update:
 * optim/rmsprop.h). */
#include "optim/optim.h"

static const optim_key keys[] = {
    OPTIM_KEY("rho", rho, OPTIM_UNIT, 0.9f, 1),
    OPTIM_KEY_MOMENTUM,
    OPTIM_KEY("centered", centered, OPTIM_BOOL, 0.0f, 0),
    OPTIM_KEY_EPSILON,
};

/* The mean square; then the momentum or the average gradient. */
static int slots(const optim_spec *o) { return o->momentum > 0.0f || o->centered ? 2 : 1; }

static const char *check(const optim_spec *o)
{
    return o->centered && o->momentum > 0.0f
               ? "centered together with momentum is not supported (it needs a third optimizer "
                 "slot); use one of them"
               : NULL;
}

static void scalars(const optim_spec *o, float lr, int64_t t, optim_memo *memo,
                    optim_scalars *out)
{
    (void)t, (void)memo;
    rmsprop_scalars *s = &out->rmsprop;
    s->lr = lr;
    s->rho = o->rho;
    s->c = (float)(1.0 - (double)o->rho); /* in double, rounded once, as Keras */
    s->momentum = o->momentum;
    s->eps = o->eps;
    s->centered = o->centered;
}

const optim_entry optim_rmsprop = {
    .name = "rmsprop",
    .lr = 0.001f,
    .keys = keys,
    .n_keys = OPTIM_COUNT(keys),
    .slots = slots,
    .check = check,
    .scalars = scalars,
};
