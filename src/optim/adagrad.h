/*
 * adagrad's per-weight update (Keras's Adagrad): acc += g^2;
 * w -= lr g / sqrt(acc + eps). The one form of it: the CPU loop, the CUDA
 * kernel and the tests all run this. Included by optim/update.h.
 */
#ifndef COHORT_OPTIM_ADAGRAD_H
#define COHORT_OPTIM_ADAGRAD_H

typedef struct adagrad_scalars {
    float lr, eps;
} adagrad_scalars;

/* w, acc: one weight and its accumulator (no second slot). */
static inline OPTIM_HD void adagrad_update(float *w, float g, float *acc, float *unused,
                                           const adagrad_scalars *s)
{
    (void)unused;
    float ai = *acc + g * g;
    *acc = ai;
    *w -= s->lr * g / sqrtf(ai + s->eps);
}

#endif
