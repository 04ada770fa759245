/*
 * adam's and adamw's per-weight update (Keras's Adam and AdamW): the
 * decoupled decay w -= w * decay (adamw; decay = weight_decay * lr), then
 * m += (g - m)(1 - beta_1), v += (g^2 - v)(1 - beta_2) and
 * w -= alpha m / (sqrt(v) + eps), alpha = lr sqrt(1 - beta_2^t) / (1 - beta_1^t).
 * The one form of it: the CPU loop, the CPU's fused dense step (mirrored in
 * vectors), the CUDA kernel and the tests all run this. Included by
 * optim/update.h.
 */
#ifndef COHORT_OPTIM_ADAM_H
#define COHORT_OPTIM_ADAM_H

#include <math.h>
#include <stdint.h>

typedef struct adam_scalars {
    float alpha;  /* lr sqrt(1 - beta_2^t) / (1 - beta_1^t), in double, rounded once */
    float c1, c2; /* 1 - beta_1, 1 - beta_2, in double, rounded once (as Keras) */
    float eps;
    float decay;  /* weight_decay * lr (adamw); 0: none */
} adam_scalars;

/* The scalars of step t (1-based) at rate lr. */
static inline void adam_scalars_at(float lr, float beta1, float beta2, float eps,
                                   float weight_decay, int64_t t, adam_scalars *s)
{
    double b1t = pow((double)beta1, (double)t), b2t = pow((double)beta2, (double)t);
    s->alpha = (float)((double)lr * sqrt(1.0 - b2t) / (1.0 - b1t));
    s->c1 = (float)(1.0 - (double)beta1);
    s->c2 = (float)(1.0 - (double)beta2);
    s->eps = eps;
    s->decay = weight_decay != 0.0f ? weight_decay * lr : 0.0f;
}

/* w, m, v: one weight and its two moments. */
static inline OPTIM_HD void adam_update(float *w, float g, float *m, float *v,
                                        const adam_scalars *s)
{
    float wi = *w;
    /* Tested, not always applied: w - w * 0 is NaN for an infinite w. */
    if (s->decay != 0.0f)
        wi -= wi * s->decay;
    float mi = *m + (g - *m) * s->c1;
    float vi = *v + (g * g - *v) * s->c2;
    *m = mi;
    *v = vi;
    *w = wi - s->alpha * mi / (sqrtf(vi) + s->eps);
}

#endif
