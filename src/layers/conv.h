/*
 * layers/conv: the compute every convolution shares (conv2d, conv1d),
 * written once in conv2d.c: im2col + GEMM over the window of the layer's
 * plan (kh, kw, strides, padding and dilation in layer_plan; a sequence
 * [T, C] is the image T x 1), the fused per-model ops where the backend has
 * them, and the weights' layout W [filters, kh, kw, c] then the bias
 * [filters], which a file holds as torch does, [filters, c, kh, kw].
 */
#ifndef COHORT_LAYERS_CONV_H
#define COHORT_LAYERS_CONV_H

#include "layers/pass.h"

/* The scratch per row of the batch (layer_plan.n_work) of a convolution of
 * `filters` over lp's window (lp->kh, kw, in, out and batch set). */
size_t conv_work_per_row(const layer_plan *lp, int filters);
/* Keras's glorot_uniform kernel (fan_in kh*kw*c, fan_out kh*kw*filters)
 * and a zero bias, from the model's seed. */
void conv_glorot_init(const layer_plan *lp, int filters, int use_bias, uint64_t seed, float *P);
/* Y = act(conv(X) + bias); its gradients (returns 0: nothing stepped). */
void conv_run_forward(const layer_pass *p, int use_bias);
int conv_run_backward(const layer_pass *p, int use_bias);
/* Tensor i of t (0: the kernel, 1: the bias) between the model's layout and
 * the file's [filters, c, kh*kw], as layer_ops.convert. */
void conv_reorder(const layer_plan *lp, const layer_tensor *t, int i, float *P, float *file,
                  int to_file);
/* Multiply-adds per sample. */
double conv_macs(const layer_plan *lp);

#endif
