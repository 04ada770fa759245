/*
 * kernels_cuda: the CUDA backend's own kernels (everything but the GEMMs),
 * each one launch over all `count` models of a group: grid.y is the model,
 * grid.x runs over its elements. Host-side per-model values travel by value.
 */
#ifndef COHORT_KERNELS_CUDA_H
#define COHORT_KERNELS_CUDA_H

extern "C" {
#include "backend/backend_impl.h" /* window_geom */
}

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

/* Models per launch for ops with per-model scalars; larger groups take
 * several launches. */
#define CU_CHUNK 64

typedef struct cu_dropout_args {
    float rate[CU_CHUNK], keep[CU_CHUNK]; /* keep = 1 / (1 - rate), computed on the host */
    uint64_t key[CU_CHUNK];
} cu_dropout_args;

typedef struct cu_loss_args {
    loss_kind kind;
    act_kind out_act;
    metric_kind metric;
    float smoothing[CU_CHUNK], delta[CU_CHUNK];
    const float *class_weight; /* dev [count, n_cw] or NULL */
    int n_cw;
} cu_loss_args;

/* The optimizer's scalars of each model (its entry's, made on the host). */
typedef struct cu_optim_args {
    optim_scalars sc[CU_CHUNK];
    unsigned char active[CU_CHUNK];
} cu_optim_args;

/* One or two per-model settings of a clip or regularizer op (0: off). */
typedef struct cu_pair_args {
    float a[CU_CHUNK], b[CU_CHUNK];
} cu_pair_args;

typedef struct cu_bn_args {
    float momentum[CU_CHUNK], eps[CU_CHUNK];
} cu_bn_args;

/* Every launcher queues on stream s and returns the launch's error. The
 * shapes and formulas are those of the CPU backend (backend_impl.h,
 * cpu/kernels.h); strides are in elements per model. */
cudaError_t cu_bias_act(cudaStream_t s, float *Y, size_t sY, const float *bias, size_t sb,
                        int rows, int cols, int act, int count);
cudaError_t cu_act_backward(cudaStream_t s, float *d, size_t sd, const float *Y, size_t sY,
                            size_t n, int act, int count);
/* Column sums over the rows in a fixed order: in one stage, or where the
 * rows are many, in up to 64 chunks of rows side by side whose partial sums
 * (in scratch, scratch_bytes of device memory; NULL: one stage) a second
 * launch adds in chunk order. The same shapes give the same bits. */
cudaError_t cu_bias_grad(cudaStream_t s, float *db, size_t sdb, const float *dZ, size_t sdZ,
                         int rows, int cols, int count, void *scratch, size_t scratch_bytes);
/* count <= CU_CHUNK. */
cudaError_t cu_dropout_fwd(cudaStream_t s, float *Y, const float *X, float *mask, size_t st,
                           size_t n, const cu_dropout_args *a, uint64_t counter0, int count);
cudaError_t cu_mul(cudaStream_t s, float *d, size_t sd, const float *mask, size_t sm, size_t n,
                   int count);
/* dst[k*sd + i] = src[k*sb + i] / 255 (one rounding), i < n: a batch of bytes
 * made floats on the device (sb 0: one block for every model). */
cudaError_t cu_bytes_to_float(cudaStream_t s, float *dst, size_t sd, const uint8_t *src,
                              size_t sb, size_t n, int count);
cudaError_t cu_copy(cudaStream_t s, float *dst, const float *src, size_t st, size_t n, int count);
/* Y = A + B (B NULL: Y = A), n elements per model at strides sY, sA, sB. */
cudaError_t cu_add(cudaStream_t s, float *Y, size_t sY, const float *A, size_t sA, const float *B,
                   size_t sB, size_t n, int count);
/* The loss op of backend_impl.h; count <= CU_CHUNK. */
cudaError_t cu_loss(cudaStream_t s, const cu_loss_args *a, float *Z, size_t sZ, const int32_t *y,
                    size_t sy, const float *t, size_t st, float *dZ, size_t sdZ, double *stats,
                    int rows, int cols, float grad_scale, int count);
/* The optimize op of backend_impl.h: optimizer kind's per-weight function
 * (optim/NAME.h) over n weights of each model, count <= CU_CHUNK; s1, s2 may
 * be NULL where the optimizer keeps no such slot. */
cudaError_t cu_optimize(cudaStream_t s, opt_kind kind, float *w, const float *g, float *s1,
                        float *s2, size_t st, size_t n, const cu_optim_args *a, int count);
/* The clip and regularizer ops of backend_impl.h, count <= CU_CHUNK; the
 * sums are in a fixed order (no atomics): one block per model, or where the
 * elements are many, up to 64 blocks per model whose partial sums (in
 * scratch, as cu_bias_grad's) a second launch adds in order. a.a is the
 * clip (clip_norm, clip_value) or l1, a.b is l2. */
cudaError_t cu_sum_sq(cudaStream_t s, double *acc, const float *x, size_t st, size_t n, int add,
                      int count, void *scratch, size_t scratch_bytes);
cudaError_t cu_clip_norm(cudaStream_t s, float *x, size_t st, size_t n, const double *acc,
                         const cu_pair_args *a, int count);
cudaError_t cu_clip_value(cudaStream_t s, float *x, size_t st, size_t n, const cu_pair_args *a,
                          int count);
cudaError_t cu_reg_grad(cudaStream_t s, float *g, const float *w, size_t st, size_t n,
                        const cu_pair_args *a, int count);
cudaError_t cu_reg_penalty(cudaStream_t s, double *stats, const float *w, size_t st, size_t n,
                           const cu_pair_args *a, int rows, int count, void *scratch,
                           size_t scratch_bytes);

/* The image ops of backend_impl.h (NHWC, g: one model's geometry, passed by
 * value to the kernels). The backward ops are gathers: each input pixel
 * sums what reaches it in output order, so no two threads write one float. */
cudaError_t cu_im2col(cudaStream_t s, float *col, size_t scol, const float *X, size_t sX,
                      const window_geom *g, int count);
cudaError_t cu_col2im(cudaStream_t s, float *dX, size_t sdX, const float *col, size_t scol,
                      const window_geom *g, int count);
cudaError_t cu_maxpool_fwd(cudaStream_t s, float *Y, size_t sY, int32_t *arg, size_t sarg,
                           const float *X, size_t sX, const window_geom *g, int count);
cudaError_t cu_maxpool_bwd(cudaStream_t s, float *dX, size_t sdX, const float *dY, size_t sdY,
                           const int32_t *arg, size_t sarg, const window_geom *g, int count);
cudaError_t cu_avgpool_fwd(cudaStream_t s, float *Y, size_t sY, const float *X, size_t sX,
                           const window_geom *g, int count);
cudaError_t cu_avgpool_bwd(cudaStream_t s, float *dX, size_t sdX, const float *dY, size_t sdY,
                           const window_geom *g, int count);
/* Global pooling of sequences (backend_impl.h's seq_pool_fwd and _bwd):
 * one thread per output (forward) or per element of dX (backward, a
 * gather), the steps in order as the CPU takes them. */
cudaError_t cu_seq_pool_fwd(cudaStream_t s, int max, float *Y, size_t sY, int32_t *arg,
                            size_t sarg, const float *X, size_t sX, const float *tokens,
                            size_t s_tokens, int n, int T, int C, int count);
cudaError_t cu_seq_pool_bwd(cudaStream_t s, int max, float *dX, size_t sdX, const float *dY,
                            size_t sdY, const int32_t *arg, size_t sarg, const float *tokens,
                            size_t s_tokens, int n, int T, int C, int count);
/* Batch normalization over rows x C; count <= CU_CHUNK. One block per 32
 * channels (fewer when C < 32) of a model reduces over all rows in double,
 * in a fixed order. */
cudaError_t cu_bn_fwd_train(cudaStream_t s, float *Y, size_t sY, const float *X, size_t sX,
                            const float *gamma, const float *beta, float *mov_mean,
                            float *mov_var, size_t sp, float *stat, size_t sst, int rows, int C,
                            const cu_bn_args *a, int count, void *scratch, size_t scratch_bytes);
cudaError_t cu_bn_fwd_infer(cudaStream_t s, float *Y, size_t sY, const float *X, size_t sX,
                            const float *gamma, const float *beta, const float *mov_mean,
                            const float *mov_var, size_t sp, int rows, int C,
                            const cu_bn_args *a, int count);
/* dX may be NULL (the gradients of gamma and beta only); any count. The
 * batch-norm reductions run in two stages over many rows where scratch
 * (scratch_bytes of device memory, or NULL) holds the partial sums. */
cudaError_t cu_bn_bwd(cudaStream_t s, float *dX, size_t sdX, const float *dY, size_t sdY,
                      const float *X, size_t sX, const float *gamma, size_t sp,
                      const float *stat, size_t sst, float *dgamma, float *dbeta, size_t sg,
                      int rows, int C, int count, void *scratch, size_t scratch_bytes);

/* The recurrent layers' steps of backend_impl.h (lstm_fwd, lstm_bwd,
 * gru_fwd, gru_bwd: kind), one launch over every model and unit. */
enum { CU_LSTM_FWD, CU_LSTM_BWD, CU_GRU_FWD, CU_GRU_BWD };
cudaError_t cu_rnn_step(cudaStream_t s, int kind, const rnn_step *st);

/* The token-id ops of backend_impl.h (an embedding), any count. The
 * adjoint gives each table element to one thread, which adds the rows that
 * reach it in row order: the CPU's bits, the same every run. */
cudaError_t cu_gather_rows(cudaStream_t s, float *Y, size_t sY, const float *tok, size_t sT,
                           const float *W, size_t sW, int n, int dim, int count);
cudaError_t cu_scatter_add_rows(cudaStream_t s, float *G, size_t sG, const float *tok, size_t sT,
                                const float *dY, size_t sdY, int n, int V, int dim, int count);

/* Layer normalization (backend_impl.h's ln_fwd and ln_bwd): a thread per
 * row (per column for dgamma, dbeta), norm_rows.h's sums. */
#define CU_EPS_MAX 64
typedef struct cu_eps {
    float v[CU_EPS_MAX]; /* each model's epsilon, by value to the kernel */
} cu_eps;
cudaError_t cu_ln_fwd(cudaStream_t s, float *Y, size_t sY, const float *X, size_t sX,
                      const float *gamma, const float *beta, size_t sp, float *stat, size_t sst,
                      const float *eps, int rows, int C, int count);
cudaError_t cu_ln_bwd(cudaStream_t s, float *dX, size_t sdX, const float *dY, size_t sdY,
                      const float *X, size_t sX, const float *gamma, size_t sp, const float *stat,
                      size_t sst, float *dgamma, float *dbeta, size_t sg, int rows, int C,
                      int count);

/* Attention's softmax over keys (backend_impl.h's attn_softmax_fwd and
 * _bwd): a thread per row, attn_rows.h's sums. */
cudaError_t cu_attn_softmax_fwd(cudaStream_t s, float *S, size_t sS, const float *tokens,
                                size_t s_tokens, int n, int H, int T, int causal, int count);
cudaError_t cu_attn_softmax_bwd(cudaStream_t s, float *dS, size_t sdS, const float *P, size_t sP,
                                int n, int H, int T, int count);

#endif
