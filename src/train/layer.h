/*
 * layer: the table of layer operations, one entry per layer kind. An entry
 * plans its layer (output shape, the exact sizes of its parameters, state,
 * saved tensors and workspace), initializes its parameters, runs its forward
 * and backward passes through the backend's batched primitives, and names
 * the tensors it writes to a weight file. The layout and the trainer loop
 * over this table; nothing outside an entry knows what kind a layer is.
 */
#ifndef COHORT_LAYER_H
#define COHORT_LAYER_H

#include "backend/backend_impl.h"
#include "model/model.h"

#include <stdint.h>

/*
 * One pass of one layer over `count` models of a group (a range of it). Every
 * pointer is device memory at the range's first model, with the per-model
 * stride beside it (a stride of 0: one copy read by every model).
 */
typedef struct layer_pass {
    const backend_ops *be;
    backend_ctx *ctx;
    const layer_plan *lp;
    const layer_spec *const *ls; /* ls[k]: this layer's spec in model k of the range */
    const uint64_t *seed;        /* [count]: each model's seed (dropout masks) */
    int count, rows;             /* models, samples in the batch */
    int batch;                   /* the batch size B the buffers hold */
    int training;                /* 0: inference (no dropout, moving statistics) */
    uint64_t counter;            /* the step's number: unique dropout masks */
    const unsigned char *active; /* [count] or NULL: 0 for a model no longer trained, whose
                                  * batch-norm moving statistics stay as they are */
    const float *X;              /* input activations [rows, in] */
    float *Y;                    /* output activations [rows, out] */
    size_t sX, sY;
    float *W, *G;                /* the model's parameters and gradients, stride sP */
    size_t sP;
    float *saved, *stat, *work;  /* this layer's saved tensors, its per-model ones, scratch */
    size_t s_saved, s_stat, s_work;
    /* backward: dY [rows, out] in, dX [rows, in] out (NULL: the first
     * layer, whose input gradient nobody needs); dX == dY for entries with
     * grad_in_place */
    float *dY, *dX;
    size_t sd;
    /* dense, first layer: its input transposed for the backend's
     * dense_forward (NULL: unused), ldt columns */
    const float *XT;
    int ldt;
    size_t sXT; /* XT's stride between models: 0 for one input read by all */
    /* backward: where not NULL, the optimizer step the first n_fused
     * parameters may take at once (the backend's dense_step) */
    const optim_step *step;
    opt_kind opt;
    float *s1, *s2;              /* optimizer slots, laid out as W */
    float *host;                 /* [4 * count] host scratch for per-model settings */
} layer_pass;

/* A tensor of a weight file: layers.{index}.{suffix}. */
typedef struct layer_tensor {
    const char *suffix;
    int ndim;
    int64_t shape[4];
    size_t off, n;   /* where it lies in the model's parameters (floats) */
} layer_tensor;

typedef struct layer_ops {
    /* Fill lp's output shape and sizes (out, n_params, n_fused, n_state,
     * alias, n_saved, n_stat, n_work, the window) for input shape lp->in.
     * On a shape the layer cannot take, returns non-zero with the reason in
     * msg (the caller adds model, layer and file:line). */
    int (*plan)(const layer_spec *ls, layer_plan *lp, char *msg, size_t len);
    /* Initial parameters and state (Keras's initializers) into the model's
     * parameters P, from the model's seed. NULL: none. */
    void (*init)(const layer_spec *ls, const layer_plan *lp, uint64_t seed, float *P);
    void (*forward)(const layer_pass *p);
    /* Returns 1 when the first n_fused parameters took their optimizer
     * step (then their gradients were not stored), else 0. */
    int (*backward)(const layer_pass *p);
    /* backward writes dX over dY (element-wise layers) */
    int grad_in_place;
    /* backward reads the layer's own output Y (an activation's derivative) */
    int reads_output;
    /* forward may write its output over its input, where the layer before it
     * does not read its own output in backward (an activation after a batch
     * normalization): one pass and one activation buffer less */
    int may_overwrite_input;
    /* the input may be one copy read by every model (stride 0) */
    int shares_input;
    /* each output value is the input value at its place, or a function of
     * it and of per-feature settings (dropout, activation, batch norm; a
     * flatten): a flat input flattened from an image stays in that image's
     * order, which a dense or batch-norm layer's weight file follows */
    int keeps_order;
    /* forward may read the input transposed (XT), kept in the first
     * n_fused floats of its gradients (which a fused step never writes):
     * the first layer's for as long as its batch stays, a later layer's
     * made at every forward pass (step.c) */
    int uses_xt;
    /* The tensors of the weight file (at most 4) in file order; returns
     * their count. */
    int (*tensors)(const layer_plan *lp, layer_tensor *t);
    /* Reorder tensor i between the model's parameters (internal layout) and
     * the file's: to_file 1 copies P's n floats at t->off into file, 0 the
     * other way. NULL: the same order. */
    void (*convert)(const layer_plan *lp, int i, float *P, float *file, int to_file);
    /* Multiply-adds per sample of the forward pass (0: none worth counting). */
    double (*macs)(const layer_plan *lp);
} layer_ops;

/* The entry of kind k. */
const layer_ops *layer_ops_of(layer_kind k);

/* TensorFlow's output size and leading padding of a window of size k,
 * stride s over n pixels. */
void window_dim(int n, int k, int s, pad_kind pad, int *out, int *pad_before);

/* The window geometry of lp over `rows` images. */
window_geom layer_window(const layer_plan *lp, int rows);

/* Entries, one per file. */
extern const layer_ops layer_dense_ops, layer_dropout_ops, layer_conv2d_ops, layer_max_pool_ops,
    layer_avg_pool_ops, layer_global_avg_pool_ops, layer_flatten_ops, layer_batch_norm_ops,
    layer_activation_ops;

#endif
