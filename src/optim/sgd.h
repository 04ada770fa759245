/*
 * sgd's per-weight update (Keras's SGD): with momentum, v = momentum v - lr g
 * and w += v (nesterov: w += momentum v - lr g); without, w -= lr g. The
 * one form of it: the CPU loop, the CPU's fused dense step (mirrored in
 * vectors), the CUDA kernel and the tests all run this. Included by
 * optim/update.h.
 */
#ifndef COHORT_OPTIM_SGD_H
#define COHORT_OPTIM_SGD_H

typedef enum { SGD_PLAIN, SGD_MOMENTUM, SGD_NESTEROV } sgd_mode;

/* One model's step: its rate, momentum and which form (momentum 0: plain,
 * and the model has no velocity of its own). */
typedef struct sgd_scalars {
    float lr, momentum;
    int mode; /* sgd_mode */
} sgd_scalars;

/* w, v: one weight and its velocity (v unused when plain; `unused`: sgd
 * keeps no second slot). */
static inline OPTIM_HD void sgd_update(float *w, float g, float *v, float *unused,
                                       const sgd_scalars *s)
{
    (void)unused;
    if (s->mode == SGD_PLAIN) {
        *w -= s->lr * g;
        return;
    }
    float vi = s->momentum * *v - s->lr * g;
    *v = vi;
    *w += s->mode == SGD_NESTEROV ? s->momentum * vi - s->lr * g : vi;
}

#endif
