/*
 * layers/conv: what every convolution shares (conv2d, conv1d), written once
 * in conv2d.c: the syntax of its filters and kernel keys, and the compute,
 * im2col + GEMM over the window of the layer's plan (kh, kw, strides,
 * padding and dilation in layer_plan; a sequence [T, C] is the image T x 1),
 * the fused per-model ops where the backend has them, and the weights'
 * layout W [filters, kh, kw, c] then the bias [filters], which a file holds
 * as torch does, [filters, c, kh, kw].
 */
#ifndef COHORT_LAYERS_CONV_H
#define COHORT_LAYERS_CONV_H

#include "layers/pass.h"

/* ---- syntax and spec ---- */

/* The layer's filters (its value, in [1, LAYER_UNITS_MAX]) into *filters
 * and its kernel_size's node into *kernel: an error at file:line where it
 * has none, with an example of `example_kernel`. */
cohort_status conv_parse_filters(const layer_syntax *s, const layer_spec *ls, int example_kernel,
                                 int *filters, const ynode **kernel);
/* The JSON's ,"activation", ,"use_bias" and ,"kernel_regularizer" parts. */
void conv_json_kernel(strbuf *b, const layer_spec *ls, int use_bias);
/* The `cohort plan` form: prefix, the filters, the activation ("c32relu"). */
int conv_abbrev(const layer_spec *ls, const char *prefix, int filters, char *buf, size_t n);
/* layer_ops.with_act and .hyper (the kernel regularizer's PBT keys). */
int conv_with_act(const layer_spec *ls, act_kind a, char *buf, size_t n);
extern const layer_hyper conv_hyper[];

/* ---- shapes and compute ---- */

/* The parameters (layer_plan.n_params), scratch per row of the batch
 * (n_work) and saved tensors (n_saved: gelu's, silu's input) of a
 * convolution of `filters` over lp's window (lp->kh, kw, in, out and batch
 * set). */
void conv_plan_sizes(layer_plan *lp, int filters, int use_bias);
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
