/*
 * Element-wise kernels of the CPU backend: plain functions over pointers and
 * sizes, one model at a time. They are also the reference that other
 * backends are tested against.
 */
#ifndef COHORT_KERNELS_H
#define COHORT_KERNELS_H

#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

/* Y is (rows, cols), bias (cols): Y = act(Y + bias); softmax: bias only. */
void kern_bias_act(float *Y, const float *bias, int rows, int cols, act_kind act);
/* The activation alone, over n values: kern_bias_act with bias NULL. */
void kern_bias_act_flat(float *Y, size_t n, act_kind act);
/* d, Y are (n): d *= act'(z) written in terms of the output Y = act(z). */
void kern_act_backward(float *d, const float *Y, size_t n, act_kind act);
/* dZ is (rows, cols), db (cols): db = column sums. */
void kern_bias_grad(float *db, const float *dZ, int rows, int cols);
/* X, Y, mask are (n); element i keeps with probability 1 - rate. */
void kern_dropout_fwd(float *Y, const float *X, float *mask, size_t n, float rate, uint64_t key,
                      uint64_t counter0);
/* One model's loss settings (backend_impl.h's loss_step, for model k). */
typedef struct loss_params {
    loss_kind kind;
    act_kind out_act;   /* applied to Z in place: softmax, sigmoid, or none */
    metric_kind metric;
    float smoothing, delta;
    const float *cw;    /* [n_cw] class weights, or NULL */
    int n_cw;
} loss_params;
/* The loss of outputs Z (rows, cols) against labels y (t NULL) or target
 * rows t (rows, cols); dZ (rows, cols) or NULL; stats as the backend's
 * loss op: [0] += weighted loss sum, [1] += correct (or summed mean |e|),
 * [2] = the batch's mean loss, [3] += summed mean e^2. */
void kern_loss(const loss_params *p, float *Z, const int32_t *y, const float *t, float *dZ,
               double *stats, int rows, int cols, float grad_scale);
/* Keras SGD: v = momentum*v - lr*g; w += v (nesterov: w += momentum*v - lr*g).
 * v may be NULL when momentum is 0: w -= lr*g. */
void kern_sgd(float *w, const float *g, float *v, size_t n, float lr, float momentum, int nesterov);
/* Keras Adam(W): decoupled decay w -= w*wd*lr, then
 * m += (g-m)(1-b1), v += (g^2-v)(1-b2), w -= lr*sqrt(1-b2^t)/(1-b1^t) * m/(sqrt(v)+eps). */
void kern_adam(float *w, const float *g, float *m, float *v, size_t n, float lr, float beta1,
               float beta2, float eps, float weight_decay, int64_t t);
/* Keras's RMSprop over n weights (s2: momentum or average gradient). */
void kern_rmsprop(float *w, const float *g, float *vel, float *s2, size_t n, float lr, float rho,
                  float momentum, int centered, float eps);
/* Keras's Adagrad: acc += g^2; w -= lr g / sqrt(acc + eps). */
void kern_adagrad(float *w, const float *g, float *acc, size_t n, float lr, float eps);
/* Keras's Nadam with the step's factors nm, ng, nv (optim_step). */
void kern_nadam(float *w, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                float beta2, float eps, float nm, float ng, float nv);
/* Sums in double, in index order. */
double kern_sum_sq(const float *x, size_t n);
double kern_sum_abs(const float *x, size_t n);
void kern_scale(float *x, size_t n, float f);
void kern_clip_value(float *x, size_t n, float c);
/* g += 2 l2 w + l1 sign(w) (sign(0) = 0). */
void kern_reg_grad(float *g, const float *w, size_t n, float l1, float l2);
/* Keras's clip_by_norm factor c / max(norm, c), from the sum of squares. */
float clip_norm_factor(double sum_sq, float c);

#endif
