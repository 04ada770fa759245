/*
 * rmsprop's per-weight update (Keras's RMSprop): vel = rho vel + (1 - rho) g^2;
 * centered: avg = rho avg + (1 - rho) g and d = vel - avg^2 + eps, else
 * d = vel + eps; inc = lr g / sqrt(d); with momentum, mom = momentum mom + inc
 * and w -= mom, else w -= inc. The one form of it: the CPU loop, the CUDA
 * kernel and the tests all run this. Included by optim/update.h.
 */
#ifndef COHORT_OPTIM_RMSPROP_H
#define COHORT_OPTIM_RMSPROP_H

typedef struct rmsprop_scalars {
    float lr, rho;
    float c; /* 1 - rho, in double, rounded once (as Keras) */
    float momentum, eps;
    int centered;
} rmsprop_scalars;

/* w, vel: one weight and its mean square; s2 its momentum or its average
 * gradient (read only by models with momentum or centered). */
static inline OPTIM_HD void rmsprop_update(float *w, float g, float *vel, float *s2,
                                           const rmsprop_scalars *s)
{
    float vi = s->rho * *vel + s->c * (g * g);
    *vel = vi;
    float d = vi + s->eps;
    if (s->centered) {
        float ai = s->rho * *s2 + s->c * g;
        *s2 = ai;
        d = vi - ai * ai + s->eps;
    }
    float inc = s->lr * g / sqrtf(d);
    if (s->momentum > 0.0f) {
        inc = s->momentum * *s2 + inc;
        *s2 = inc;
    }
    *w -= inc;
}

#endif
