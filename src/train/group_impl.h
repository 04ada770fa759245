/*
 * The training group's insides, shared by the trainer's files: group.c
 * (create, free, parameter I/O), step.c (one step: forward, loss, backward,
 * optimizer), evaluate.c (evaluation and prediction) and fit.c (the epoch
 * loop and its policy: metrics, divergence, early stopping, checkpoints).
 * K same-shaped models whose every array is [K, ...], so that each op is one
 * batched call; one slab holds all of it (model/layout.c).
 */
#ifndef COHORT_GROUP_IMPL_H
#define COHORT_GROUP_IMPL_H

#include "layers/pass.h"
#include "optim/optim.h"
#include "train/train.h"

struct train_group {
    model_layout L;
    int K;
    const model_spec *spec[COHORT_MAX_GROUP];
    cohort_device *dev;
    const backend_ops *be;
    backend_ctx *ctx;
    mem_account acct;
    char *slab;
    void *ctx_ws; /* the context's scratch from the pool (device_ctx_bytes), or NULL */
    float *params, *grads, *opt_m, *opt_v, *act, *delta[2], *saved, *stat, *work, *best;
    int32_t *labels;
    float *targets; /* [K or slots, B, n_out] target rows, for every loss but SCE */
    float *classw;  /* [K, n_cw] class weights, NULL: none */
    int tgt_rows;   /* the batch's targets are rows in targets (else labels) */
    double *stats;
    double *norms; /* [K] device scratch: a sum of squares per model (clipping) */
    /* host-side, [K] each */
    /* lr is each model's learning rate (reduce_lr_on_plateau lowers it);
     * lr_step the rate of the step being taken (under a schedule, the
     * schedule's); sc the optimizer's scalars of that step (its entry's,
     * optim/optim.h), memo what its entry keeps between a model's steps */
    float lr[COHORT_MAX_GROUP], lr_step[COHORT_MAX_GROUP];
    optim_scalars sc[COHORT_MAX_GROUP];
    optim_memo memo[COHORT_MAX_GROUP];
    float clipnorm[COHORT_MAX_GROUP], global_clipnorm[COHORT_MAX_GROUP],
        clipvalue[COHORT_MAX_GROUP];
    /* Dense layers may take their weights' step inside backward (the
     * backend's dense_step): the optimizer is one it fuses and no member's
     * gradient must be whole first (a clip or a kernel regularizer). */
    int fuse_step;
    float smoothing[COHORT_MAX_GROUP], huber_delta[COHORT_MAX_GROUP]; /* the loss's */
    unsigned char active[COHORT_MAX_GROUP];
    uint64_t seed[COHORT_MAX_GROUP];
    float hp[4 * COHORT_MAX_GROUP]; /* the layers' per-model settings of one pass */
    int64_t t;      /* optimizer steps taken */
    int64_t *order; /* [K, n] shuffle orders for the current fit */
    float *host;    /* [P] host scratch */
    int first_trained; /* the first layer with parameters: backward stops there */
    int can_share;     /* the first layers can read one input copy for all K models */
    int shared;        /* every member draws the same shuffle order (shared_order) */
    int in_shared;     /* the batch in the input region is one copy read by all K */
    int in_slot;       /* with in_shared: which of the K input slots holds the batch */
    /* Layer i's forward pass from its input transposed (uses_xt) where
     * xt_layer[i], xt_ld columns (the backend's for a batch), kept in the
     * weight part of the layer's gradients, which the fused step never
     * writes, where it fits there (not a classifier's last layer). The
     * first layer's: input slot s's transpose, kept in model s's gradient,
     * xt_ready[s] saying it is current; a later layer's: made afresh at
     * every pass, in each model's own gradient. */
    unsigned char xt_layer[COHORT_MAX_LAYERS];
    int xt_ld;
    unsigned char xt_ready[COHORT_MAX_GROUP];
};

/* Models [k0, k0 + count) of the group; every op works on such a range. */
typedef struct krange {
    int k0, count;
} krange;

/* Model k0's part of a [K, ...] buffer whose per-model stride is s floats. */
#define AT(p, s, r) ((p) + (size_t)(r).k0 * (s))

/* The activations of region i (0: the input; i + 1: layer i's output) for
 * models r, and their per-model stride (0: one input copy read by all). */
float *group_act(train_group *g, int i, krange r, size_t *stride);

/* Load rows ix[k * stride + r] of d for the models (once for all where
 * stride is 0 and the first layers allow it). */
void group_load_batch(train_group *g, const data_view *d, const int64_t *ix, size_t stride,
                      int rows);
/* Forward pass of `rows` rows in the input region; training 0: inference. */
void group_forward(train_group *g, krange r, int rows, int training, uint64_t counter);
/* The loss of the output against the labels, added to the stats; with grad,
 * the output's gradient goes to delta[0]. */
void group_loss_pass(train_group *g, krange r, int rows, int grad);
/* Gradients from delta[0]; with t > 0 the weights that can take their step
 * at once do (stepped[i] says which layers did). */
void group_backward(train_group *g, krange r, int rows, int64_t t, unsigned char *stepped);
/* One training step of every active model of the group at `step` of the
 * epoch (or a block of steps on a CPU); returns the steps taken. */
int group_train_steps(train_group *g, const data_view *d, const int64_t *order, int64_t step,
                      int64_t steps, uint64_t counter);
void group_read_stats(train_group *g, double *host);
/* The kernel regularizers' penalties of models r, from their weights now,
 * added to the loss stats as a loss over `rows` rows would be (the reported
 * loss includes them, as Keras's does); after the loss pass. */
void group_reg_penalty(train_group *g, krange r, int rows);
/* The learning rate of model k's update after `step` updates. */
float group_lr_at(const train_group *g, int k, int64_t step);
/* Rows in batch `step` of n samples in batches of B (the last may be short). */
int group_batch_rows(int64_t n, int64_t step, int B);

#endif
