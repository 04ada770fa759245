/*
 * nadam's per-weight update (Keras's Nadam): m += (g - m)(1 - beta_1),
 * v += (g^2 - v)(1 - beta_2), w -= lr (nm m + ng g) / (sqrt(v nv) + eps), with
 * the step's factors nm, ng and nv from Keras's momentum schedule (made on
 * the host: optim/nadam.c). The one form of it: the CPU loop, the CUDA
 * kernel and the tests all run this. Included by optim/update.h.
 */
#ifndef COHORT_OPTIM_NADAM_H
#define COHORT_OPTIM_NADAM_H

typedef struct nadam_scalars {
    float lr;
    float c1, c2; /* 1 - beta_1, 1 - beta_2, in double, rounded once (as Keras) */
    float eps;
    /* With u_i = beta_1 (1 - 0.5 * 0.96^i) and P_t = u_1...u_t:
     * nm = u_{t+1} / (1 - P_{t+1}), ng = (1 - u_t) / (1 - P_t),
     * nv = 1 / (1 - beta_2^t) */
    float nm, ng, nv;
} nadam_scalars;

/* w, m, v: one weight and its two moments. */
static inline OPTIM_HD void nadam_update(float *w, float g, float *m, float *v,
                                         const nadam_scalars *s)
{
    float mi = *m + (g - *m) * s->c1;
    float vi = *v + (g * g - *v) * s->c2;
    *m = mi;
    *v = vi;
    float mhat = s->nm * mi + s->ng * g;
    *w -= s->lr * mhat / (sqrtf(vi * s->nv) + s->eps);
}

#endif
