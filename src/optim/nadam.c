/* nadam: Keras's Nadam (the update: optim/nadam.h) and its momentum
 * schedule's factors, made per step in double on the host. */
#include "optim/optim.h"

#include <math.h>

static const optim_key keys[] = {OPTIM_KEY_BETA_1, OPTIM_KEY_BETA_2, OPTIM_KEY_EPSILON};

static int slots(const optim_spec *o)
{
    (void)o;
    return 2; /* m, v */
}

/* Keras's momentum factor u_i = beta1 (1 - 0.5 * 0.96^i). */
static double u_of(double beta1, int64_t i) { return beta1 * (1.0 - 0.5 * pow(0.96, (double)i)); }

/* u_1...u_t: one factor more than the last step's, or (a first step, a
 * resumed fit) the product over again. */
static double product(double beta1, int64_t t, optim_memo *m)
{
    if (m->t == 0 || m->t > t || m->t < t - 1) {
        m->prod = 1.0;
        m->t = 0;
    }
    while (m->t < t)
        m->prod *= u_of(beta1, ++m->t);
    return m->prod;
}

static void scalars(const optim_spec *o, float lr, int64_t t, optim_memo *memo,
                    optim_scalars *out)
{
    nadam_scalars *s = &out->nadam;
    double b1 = (double)o->beta1, p = product(b1, t, memo);
    double u = u_of(b1, t), u_next = u_of(b1, t + 1);
    s->lr = lr;
    s->c1 = (float)(1.0 - (double)o->beta1); /* in double, rounded once, as Keras */
    s->c2 = (float)(1.0 - (double)o->beta2);
    s->eps = o->eps;
    s->nm = (float)(u_next / (1.0 - p * u_next));
    s->ng = (float)((1.0 - u) / (1.0 - p));
    s->nv = (float)(1.0 / (1.0 - pow((double)o->beta2, (double)t)));
}

const optim_entry optim_nadam = {
    .name = "nadam",
    .lr = 0.001f,
    .keys = keys,
    .n_keys = OPTIM_COUNT(keys),
    .slots = slots,
    .scalars = scalars,
};
