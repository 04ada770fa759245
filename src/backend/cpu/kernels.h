/*
 * Element-wise kernels of the CPU backend: plain functions over pointers and
 * sizes, one model at a time. They are also the reference that other
 * backends are tested against.
 */
#ifndef COHORT_KERNELS_H
#define COHORT_KERNELS_H

#include "model/model.h"
#include "optim/update.h"

#include <stddef.h>
#include <stdint.h>

/* Y is (rows, cols), bias (cols): Y = act(Y + bias); softmax: bias only.
 * Sigmoid, tanh, gelu and silu, and the derivatives of gelu and silu, are
 * the math unit's (vmath.h), the same bits on every ISA. */
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
/* The update of optimizer `kind` over n weights w from their gradients g,
 * with its slots s1 and s2 (NULL where it keeps none) and one model's
 * scalars of this step: its per-weight function (optim/NAME.h) a weight at a
 * time. */
void kern_optimize(opt_kind kind, float *w, const float *g, float *s1, float *s2, size_t n,
                   const optim_scalars *s);
/* Sums in double, in index order. */
double kern_sum_sq(const float *x, size_t n);
double kern_sum_abs(const float *x, size_t n);
void kern_scale(float *x, size_t n, float f);
void kern_clip_value(float *x, size_t n, float c);
/* g += 2 l2 w + l1 sign(w) (sign(0) = 0). */
void kern_reg_grad(float *g, const float *w, size_t n, float l1, float l2);
/* Keras's clip_by_norm factor c / max(norm, c), from the sum of squares. */
float clip_norm_factor(double sum_sq, float c);

/* The recurrent layers' steps (backend_impl.h's lstm_* and gru_* ops) of
 * model k over rows [r0, r1): rnn_cell.h's units, with padding. */
struct rnn_step;
void kern_lstm_fwd(const struct rnn_step *s, int k, int r0, int r1);
void kern_lstm_bwd(const struct rnn_step *s, int k, int r0, int r1);
void kern_gru_fwd(const struct rnn_step *s, int k, int r0, int r1);
void kern_gru_bwd(const struct rnn_step *s, int k, int r0, int r1);

#endif
