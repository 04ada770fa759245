/*
 * layers/pooling: the compute the window poolings share (max_pooling2d,
 * average_pooling2d, global_average_pooling2d and the 1-D max and average
 * poolings), written once in pooling.c: the backend's window kernels over the
 * window of the layer's plan (kh, kw, strides and padding in layer_plan; a
 * sequence [T, C] is the image T x 1). Max pooling keeps the int32 position
 * of each output's maximum from forward to backward.
 */
#ifndef COHORT_LAYERS_POOLING_H
#define COHORT_LAYERS_POOLING_H

#include "layers/pass.h"

/* Sets lp->n_saved to what max pooling keeps: one int32 per output value
 * (lp->out set). */
void pool_max_saved(layer_plan *lp);
/* Y = the maximum of each window, its position kept; dX from dY through the
 * kept positions (returns 0: nothing stepped). */
void pool_max_forward(const layer_pass *p);
int pool_max_backward(const layer_pass *p);
/* Y = the mean of each window over its real pixels; its gradient. */
void pool_avg_forward(const layer_pass *p);
int pool_avg_backward(const layer_pass *p);

#endif
