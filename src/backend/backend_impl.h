/*
 * backend: one table of operations per device kind. The trainer calls only
 * these; every pointer argument marked "dev" is device memory of that backend.
 * Only backends and the trainer include this header.
 *
 * Every compute op is batched over `count` problems (a group of K models):
 * problem k reads A + k*sA, B + k*sB, writes C + k*sC (strides in floats).
 * Hyper-parameter arrays (lr, ...) are host memory of length count.
 */
#ifndef COHORT_BACKEND_IMPL_H
#define COHORT_BACKEND_IMPL_H

#include "cohort.h"
#include "model/model.h"
#include "optim/update.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* Never reused: 8 was briefly taken (2026-12-05); 11: the recurrent steps;
 * 12: dilated windows (window_geom's dh, dw), seq_pool_fwd and _bwd; 13: gather_rows,
 * scatter_add_rows; 14: ctx_workspace (a GPU context's scratch and cuBLAS workspace
 * from the pool); 15: add; 16: the recurrent steps' y and zero_out; 17: conv_fwd_pool,
 * conv_wgrad_pool; 18: rnn_fwd and rnn_bwd (a recurrent direction's steps at once);
 * 19: wgrad. */
#define COHORT_BACKEND_API_VERSION 19

typedef struct backend_ctx backend_ctx; /* one per training group: a stream, a BLAS handle */

/* One optimizer step of `count` models: each model's scalars of this step
 * (its optimizer's entry makes them: optim/optim.h), host memory [count]. */
typedef struct optim_step {
    const optim_scalars *sc;
    const unsigned char *active; /* [count]; 0: leave this model's parameters alone */
} optim_step;

/*
 * The geometry of a 2-D window over NHWC images (convolution, pooling):
 * n images of h x w x c, a kh x kw window moved by (sh, sw), pad_top rows
 * and pad_left columns of padding before the image (and what `same` needs
 * after it), giving oh x ow outputs per channel. A sequence [T, C] is the
 * image of T x 1 pixels. dh, dw: the dilation (Keras's dilation_rate), the
 * pixels from one tap of the window to the next, so that tap (ky, kx) of
 * output (y, x) reads pixel (y*sh + ky*dh - pad_top, x*sw + kx*dw -
 * pad_left); 0 reads as 1, so a geometry that does not set them is the
 * undilated one. Only im2col and col2im (the convolutions) take a dilation.
 */
typedef struct window_geom {
    int n, h, w, c;
    int kh, kw, sh, sw, pad_top, pad_left;
    int oh, ow;
    int dh, dw;
} window_geom;

/* A dilation as the kernels use it: 0 (not set) is 1. */
static inline int window_dilation(int d) { return d > 1 ? d : 1; }

/* The loss settings of one pass: the group's kind, output activation and
 * metric; per-model values in host arrays [count]. */
typedef struct loss_step {
    loss_kind kind;
    act_kind out_act;           /* applied to the outputs first: softmax, sigmoid or none */
    metric_kind metric;
    const float *smoothing;     /* label_smoothing */
    const float *delta;         /* huber */
    const float *class_weight;  /* dev [count, n_cw] (stride n_cw), or NULL: weight 1 */
    int n_cw;
} loss_step;

/* Per-model batch-normalization settings of one pass, host memory, [count]. */
typedef struct bn_step {
    const float *momentum, *epsilon;
} bn_step;

/*
 * One row of bytes as floats, byte / 255.0f each (an IDX image's scale,
 * correctly rounded), for the backends' load_rows. Without a division: the
 * product by 1/255 is wrong in the last bit for 126 of the 256 bytes, and
 * one multiply-add of its residual corrects it, which for all 256 gives the
 * quotient itself (test_data checks every byte). In cache a batch of 64
 * rows of 784 converts in 4.3 us against 9.7-10.7 with divisions (Intel
 * Xeon); in a run the gather waits on memory more than on either.
 */
static inline void host_row_of_bytes(float *__restrict__ dst, const uint8_t *__restrict__ src,
                                     size_t n)
{
    const float r = 1.0f / 255.0f;
    for (size_t i = 0; i < n; i++) {
        float b = (float)src[i], q = b * r;
        dst[i] = fmaf(fmaf(-q, 255.0f, b), r, q);
    }
}

/*
 * One time step of a recurrent layer (lstm, gru) over `rows` sequences of
 * each of `count` models, H units: the operands of the backend's lstm_*
 * and gru_* ops, each op reading those its comment names. Row r of an
 * operand with leading dimension ld_x lies at x + r*ld_x, model k's at
 * + k*s_x (floats), so a step of a sequence batch [rows, T, E] is read in
 * place. tok, where not NULL, marks padding: row r's step is padded where
 * tok[r*ld_t] == 0 (the token of a mask_zero embedding; s_t 0: one for every
 * model). A padded step carries the state over (h = h_prev, c = c_prev) and
 * in backward gives its gates no gradient, passing dL/dh and dL/dc to the
 * step before unchanged. A NULL h_prev (c_prev) is the first step's zero
 * state.
 */
typedef struct rnn_step {
    int rows, H, count;
    float *gates;  /* lstm: Z [rows, 4H] (i, f, g, o); gru: X [rows, 3H] (r, z, n) */
    int ld_g;
    size_t s_g;
    float *rec;    /* gru: R [rows, 3H], the recurrent products */
    int ld_r;
    size_t s_r;
    const float *bias; /* gru: the recurrent bias [3H] */
    size_t s_b;
    float *c;          /* lstm: the cell [rows, H], and the previous step's */
    const float *c_prev;
    int ld_c;
    size_t s_c;
    float *h;          /* forward: the output [rows, H] */
    int ld_h;
    size_t s_h;
    const float *h_prev; /* the previous step's output (gru's backward reads it too) */
    int ld_hp;
    size_t s_hp;
    const float *dy;     /* backward: this step's output gradient, or NULL */
    int ld_dy;
    size_t s_dy;
    float *dh, *dc;      /* backward: [rows, H] each, leading dimension H, stride s_d */
    size_t s_d;
    int first;           /* backward: the last step, whose dh and dc are not read (0) */
    float *y;            /* forward: where not NULL, the output also goes here [rows, H] */
    int ld_y;
    size_t s_y;
    int zero_out;        /* y is 0 at a padded step (Keras's zero_output_for_mask, which its
                          * Bidirectional sets with return_sequences), and in backward a
                          * padded step's dy is not added */
    const float *tok;
    int ld_t;
    size_t s_t;
} rnn_step;

/*
 * Consecutive steps of one direction of a recurrent layer, in the order of
 * its recurrence (the operands of the optional rnn_fwd and rnn_bwd): steps
 * [n] as the step ops take them (each with the same rows, H and count), and
 * each model's kernels and input bias (stride sW): Wih [G*H, F], Whh
 * [G*H, H], b [G*H] (G = 3 for the GRU, 4 for the LSTM). For rnn_fwd, X is
 * the input of steps[0] ([rows, F], leading dimension ld_x, model stride
 * sX), the next step's x_next floats on; wt is scratch [F + H, G*H] per
 * model (stride s_wt) that holds Wih and Whh transposed: rnn_fwd makes it
 * where fill_wt is set and reads it as an earlier call left it otherwise.
 */
typedef struct rnn_seq {
    int gru;
    int n;
    const rnn_step *steps;
    const float *Wih, *Whh, *b;
    size_t sW;
    const float *X;
    ptrdiff_t x_next;
    int F, ld_x;
    size_t sX;
    float *wt;
    size_t s_wt;
    int fill_wt;
} rnn_seq;

typedef struct backend_ops {
    const char *name; /* "cpu", "cuda": for messages only */
    int api_version;
    /* Capabilities, read by the trainer instead of the name. */
    int model_major; /* train a group one model's whole step after another
                      * (a CPU: the model's tensors stay in cache), not op by
                      * op over the group (a GPU) */
    int stats_every; /* steps between reads of the metrics (a host sync) */
    int host_memory; /* device memory is the process's own (survives fork): a
                      * preallocated pool may take it in the parent */

    /* -- contexts and memory -- */
    cohort_status (*ctx_create)(int device, int threads, backend_ctx **out, cohort_error *err);
    /* The first error the device reported on ctx ("" for none): after one,
     * what it copies back is NaN, which the trainer must not take for a
     * diverged model, nor save as weights. Optional (NULL: none can occur). */
    const char *(*ctx_error)(const backend_ctx *ctx);
    void (*ctx_free)(backend_ctx *ctx);
    /* Optional (NULL: the context needs none): device memory, `bytes` from
     * `dev` (256-byte aligned), that the context uses for its own scratch
     * (a GPU: cuBLAS's workspace, the reductions' partial sums) instead of
     * memory of its own, so that the pool counts it. The caller frees it
     * after ctx_free. */
    void (*ctx_workspace)(backend_ctx *ctx, void *dev, size_t bytes);
    /* Raw device memory, 64-byte aligned; NULL when the device has none left. */
    void *(*mem_alloc)(int device, size_t bytes);
    void (*mem_free)(int device, void *p);
    void (*copy_h2d)(backend_ctx *ctx, void *dst_dev, const void *src, size_t bytes);
    void (*copy_d2h)(backend_ctx *ctx, void *dst, const void *src_dev, size_t bytes);
    void (*memzero)(backend_ctx *ctx, void *dst_dev, size_t bytes);
    /* Wait until every op queued on ctx is done. */
    void (*sync)(backend_ctx *ctx);

    /* -- data -- */
    /* dst[k][r][:] = x[idx[k*idx_stride + r]][:], r < rows; x is host memory
     * [n, dim]; dst is dev with stride dst_stride floats per model. Where x
     * is NULL the rows are the bytes of x8 (host, [n, dim]), each value
     * (float)byte / 255.0f, as host_row_of_bytes makes it. */
    void (*load_rows)(backend_ctx *ctx, float *dst, size_t dst_stride, const float *x,
                      const uint8_t *x8, int64_t dim, const int64_t *idx, size_t idx_stride,
                      int rows, int count);
    /* The same for labels: dst[k*dst_stride + r] = y[idx[k*idx_stride + r]]. */
    void (*load_labels)(backend_ctx *ctx, int32_t *dst, size_t dst_stride, const int32_t *y,
                        const int64_t *idx, size_t idx_stride, int rows, int count);

    /* -- compute -- */
    /* Row-major C = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T;
     * C is M x N, the inner dimension is Kd. */
    void (*gemm)(backend_ctx *ctx, int trans_a, int trans_b, int M, int N, int Kd, float alpha,
                 const float *A, int lda, size_t sA, const float *B, int ldb, size_t sB, float beta,
                 float *C, int ldc, size_t sC, int count);
    /* Y[r][j] = act(Y[r][j] + bias[j]) in place; Y rows x cols (stride sY per
     * model), bias stride sb; bias NULL: the activation alone. ACT_SOFTMAX
     * adds the bias only (the loss applies softmax). */
    void (*bias_act)(backend_ctx *ctx, float *Y, size_t sY, const float *bias, size_t sb, int rows,
                     int cols, act_kind act, int count);
    /* dZ = dY * act'(from the activation output Y), in place on d; for an
     * activation that act_needs_input (gelu, silu), Y is its input Z (the
     * layer keeps it from forward to backward). */
    void (*act_backward)(backend_ctx *ctx, float *d, size_t sd, const float *Y, size_t sY,
                         size_t n, act_kind act, int count);
    /* db[j] = sum over rows of dZ[r][j]. */
    void (*bias_grad)(backend_ctx *ctx, float *db, size_t sdb, const float *dZ, size_t sdZ,
                      int rows, int cols, int count);
    /* Inverted dropout: mask[i] = (u(key_k, counter0 + i) >= rate_k) / (1 - rate_k),
     * Y = X * mask, over n elements per model. */
    void (*dropout_fwd)(backend_ctx *ctx, float *Y, const float *X, float *mask, size_t s,
                        size_t n, const float *rate, const uint64_t *key, uint64_t counter0,
                        int count);
    /* d = d * mask, in place (dropout backward): n elements per model, d with
     * stride sd, mask with stride sm. */
    void (*mul)(backend_ctx *ctx, float *d, size_t sd, const float *mask, size_t sm, size_t n,
                int count);
    void (*copy)(backend_ctx *ctx, float *dst, const float *src, size_t s, size_t n, int count);
    /* Y = A + B over n elements per model, strides sY, sA, sB (0: one operand
     * read by every model); B NULL: Y = A. Y may be A or B (a residual's
     * sum and its gradients). */
    void (*add)(backend_ctx *ctx, float *Y, size_t sY, const float *A, size_t sA, const float *B,
                size_t sB, size_t n, int count);
    /*
     * The loss of outputs Z (rows x cols per model, stride sZ) against labels
     * y (t NULL: one-hot when cols > 1, else the label as a number) or target
     * rows t [rows, cols] (stride st). Z holds the last layer's values before
     * o->out_act, which is applied in place (Z becomes the model's output).
     * The cross-entropies work from those logits: softmax (SCE, CCE) and
     * sigmoid (BCE) with targets t(1 - s) + s/C (BCE: s/2); mse, mae and
     * huber take the mean over a row's outputs. Each row's term is scaled by
     * the weight of its class (labels: y; rows: the argmax, or one output
     * rounded). dZ (NULL: none) = the gradient with respect to Z times
     * grad_scale. Doubles in stats (dev), per model k at k*STATS_PER_MODEL
     * (model.h): STAT_LOSS_SUM += the sum of the rows' weighted losses,
     * STAT_RIGHT += the correct predictions (argmax, or binary: the fraction
     * of outputs right at 0.5) or for METRIC_ERRORS the rows' mean |e|,
     * STAT_BATCH_LOSS = this batch's mean loss, STAT_SQ_SUM += the rows'
     * mean e^2.
     */
    void (*loss)(backend_ctx *ctx, const loss_step *o, float *Z, size_t sZ, const int32_t *y,
                 size_t sy, const float *t, size_t st, float *dZ, size_t sdZ, double *stats,
                 int rows, int cols, float grad_scale, int count);
    /* The update of optimizer `kind` (its entry's per-weight function,
     * optim/NAME.h) over n parameters w of each active model from their
     * gradients g, with its slots s1 and s2 (NULL where no model of the group
     * keeps one); strides s (floats). */
    void (*optimize)(backend_ctx *ctx, opt_kind kind, float *w, const float *g, float *s1,
                     float *s2, size_t s, size_t n, const optim_step *o, int count);

    /* -- gradient clipping and regularizers; every per-model setting is
     * host memory [count], and 0 turns it off for that model -- */
    /* acc[k] (+= with add, else =) the sum of x^2 over model k's n floats,
     * summed in double in a fixed order (no result depends on threads);
     * acc is device memory, [count] doubles. */
    void (*sum_sq)(backend_ctx *ctx, double *acc, const float *x, size_t s, size_t n, int add,
                   int count);
    /* x *= c[k] / max(sqrt(acc[k]), c[k]) where c[k] > 0 (Keras's clip_by_norm). */
    void (*clip_norm)(backend_ctx *ctx, float *x, size_t s, size_t n, const double *acc,
                      const float *c, int count);
    /* x = min(max(x, -c[k]), c[k]) where c[k] > 0. */
    void (*clip_value)(backend_ctx *ctx, float *x, size_t s, size_t n, const float *c,
                       int count);
    /* The kernel regularizer's gradient: g += 2 l2[k] w + l1[k] sign(w). */
    void (*reg_grad)(backend_ctx *ctx, float *g, const float *w, size_t s, size_t n,
                     const float *l1, const float *l2, int count);
    /* Its penalty p = l2[k] sum w^2 + l1[k] sum |w| (in double) into the
     * loss stats: STAT_LOSS_SUM += rows * p, STAT_BATCH_LOSS += p. */
    void (*reg_penalty)(backend_ctx *ctx, double *stats, const float *w, size_t s, size_t n,
                        const float *l1, const float *l2, int rows, int count);

    /* -- image layers (NHWC). g describes one model's images; every op is
     * batched over count models, model k at +k*s of each operand. -- */
    /* col[(i*oh + y)*ow + x][(ky*kw + kx)*c + ch] = X[i][y*sh + ky*dh - pad_top]
     * [x*sw + kx*dw - pad_left][ch], 0 where that is padding: the rows of an
     * im2col matrix [n*oh*ow, kh*kw*c]. */
    void (*im2col)(backend_ctx *ctx, float *col, size_t scol, const float *X, size_t sX,
                   const window_geom *g, int count);
    /* The adjoint: dX = 0, then every col element added to the input pixel
     * it was read from. */
    void (*col2im)(backend_ctx *ctx, float *dX, size_t sdX, const float *col, size_t scol,
                   const window_geom *g, int count);
    /* Y[i][y][x][ch] = max of the window over pixels inside the image;
     * arg = the index (iy*w + ix) of the first largest pixel in scan order. */
    void (*maxpool_fwd)(backend_ctx *ctx, float *Y, size_t sY, int32_t *arg, size_t sarg,
                        const float *X, size_t sX, const window_geom *g, int count);
    /* dX = 0, then dX[i][arg][ch] += dY[i][y][x][ch]. */
    void (*maxpool_bwd)(backend_ctx *ctx, float *dX, size_t sdX, const float *dY, size_t sdY,
                        const int32_t *arg, size_t sarg, const window_geom *g, int count);
    /* Y = the mean of the window's pixels inside the image (padding is not
     * counted, as TensorFlow's `same`); global pooling is the h x w window. */
    void (*avgpool_fwd)(backend_ctx *ctx, float *Y, size_t sY, const float *X, size_t sX,
                        const window_geom *g, int count);
    /* dX = 0, then each dY spread evenly over its window's pixels inside the image. */
    void (*avgpool_bwd)(backend_ctx *ctx, float *dX, size_t sdX, const float *dY, size_t sdY,
                        const window_geom *g, int count);
    /* Batch normalization over rows x C (the channel is the last axis), in
     * training: mean and biased variance of each channel over the rows,
     * Y = gamma * (X - mean) / sqrt(var + eps) + beta; saves mean and
     * 1/sqrt(var + eps) in stat ([2, C]: mean, then inv_std; stride sst);
     * moving = momentum * moving + (1 - momentum) * batch statistic for the
     * moving mean and variance (Keras: the biased variance). gamma, beta and
     * mov_mean, mov_var are [C] with stride sp. Sums in double. */
    void (*bn_fwd_train)(backend_ctx *ctx, float *Y, size_t sY, const float *X, size_t sX,
                         const float *gamma, const float *beta, float *mov_mean, float *mov_var,
                         size_t sp, float *stat, size_t sst, int rows, int C, const bn_step *o,
                         int count);
    /* Inference: Y = gamma * (X - mov_mean) / sqrt(mov_var + eps) + beta. */
    void (*bn_fwd_infer)(backend_ctx *ctx, float *Y, size_t sY, const float *X, size_t sX,
                         const float *gamma, const float *beta, const float *mov_mean,
                         const float *mov_var, size_t sp, int rows, int C, const bn_step *o,
                         int count);
    /* The gradients of bn_fwd_train from dY: dgamma, dbeta ([C], stride sg,
     * overwritten) and, where dX is not NULL, dX (xhat = (X - mean) * inv_std
     * from stat): dX = inv_std * (dY*gamma - mean(dY*gamma) - xhat *
     * mean(dY*gamma*xhat)), means over the rows. Sums in double. */
    void (*bn_bwd)(backend_ctx *ctx, float *dX, size_t sdX, const float *dY, size_t sdY,
                   const float *X, size_t sX, const float *gamma, size_t sp, const float *stat,
                   size_t sst, float *dgamma, float *dbeta, size_t sg, int rows, int C,
                   int count);

    /*
     * Optional (NULL: im2col, gemm, bias_act, act_backward, bias_grad and
     * col2im): a convolution of one model, each pass fused per chunk of
     * `chunk` images (conv_chunk_images) so that the chunk's im2col rows stay
     * in cache from im2col to the product. The chunks are fixed by g and
     * chunk alone: no result depends on the thread count. W is [F, kc] with
     * kc = kh*kw*c; bias [F] or NULL. scratch holds ceil(n/chunk) slots of
     * chunk*oh*ow rows of kc floats, slot i at i*chunk*oh*ow*kc; a part uses
     * the slot of its first chunk for all its chunks.
     * conv_fwd: Y = act(im2col(X)·Wᵀ + bias), Y [n*oh*ow, F]; wt is scratch of
 * F*kc floats (W transposed, for the backend's own kernels).
     * conv_wgrad: dY = dY * act'(Y) in place, then per chunk i, with the
     * chunk's im2col rows made again from X, partial[i] = dYᵀ·col [F, kc]
     * and its column sums of dY [F] (partial: ceil(n/chunk) * (F*kc + F)
     * floats); G and db (NULL: none) = the partials added in chunk order.
     * conv_bwd_data: dX = col2im(dY·W).
     */
    void (*conv_fwd)(backend_ctx *ctx, float *Y, float *scratch, float *wt, const float *X,
                     const float *W, const float *bias, const window_geom *g, int F,
                     act_kind act, int chunk);
    void (*conv_wgrad)(backend_ctx *ctx, float *G, float *db, float *dY, const float *Y,
                       const float *X, float *scratch, float *partial, const window_geom *g,
                       int F, act_kind act, int chunk);
    void (*conv_bwd_data)(backend_ctx *ctx, float *dX, float *scratch, const float *dY,
                          const float *W, const window_geom *g, int F, int chunk);

    /*
     * Optional (NULL: conv_fwd then maxpool_fwd; conv_wgrad after
     * maxpool_bwd): a convolution and the max pooling after it in one pass
     * over the chunks, so that each chunk's output is pooled, and its
     * gradient scattered back, while it is in cache (a convnet's first
     * layer: 11 MiB a batch of 128 otherwise written, then read again). pg
     * is the pooling's window over Y as images (n, oh, ow, F).
     * conv_fwd_pool: conv_fwd, then per chunk maxpool_fwd of its images into
     * P and arg. conv_wgrad_pool: per chunk maxpool_bwd of its images from
     * dP and arg into dY, then conv_wgrad. The same bits as the separate
     * ops: each image is pooled and scattered alone.
     */
    void (*conv_fwd_pool)(backend_ctx *ctx, float *Y, float *scratch, float *wt, const float *X,
                          const float *W, const float *bias, const window_geom *g, int F,
                          act_kind act, int chunk, float *P, int32_t *arg,
                          const window_geom *pg);
    void (*conv_wgrad_pool)(backend_ctx *ctx, float *G, float *db, float *dY, const float *Y,
                            const float *X, float *scratch, float *partial,
                            const window_geom *g, int F, act_kind act, int chunk,
                            const float *dP, const int32_t *arg, const window_geom *pg);

    /* Optional (NULL, or a return of 0: gemm into the gradients, then
     * optimize): the weight gradient of a dense layer taken by the optimizer
     * at once; returns 1 when done, the same answer for every call on one
     * context (the trainer then steps only the biases itself). For
     * each active model k, G = dZᵀ·X (dZ rows x n_out, leading dimension ldd;
     * X rows x n_in, ldx) updates W (n_out x n_in) and its optimizer slots s1
     * and s2 (NULL where the group keeps none) exactly as optimize would from
     * G, without storing G. Strides: sW for W, s1 and s2. kind is one that
     * fuses says it takes: the trainer never asks for another, nor for a
     * model whose gradient must be whole first (clipping, regularizers). */
    int (*fuses)(backend_ctx *ctx, opt_kind kind); /* with dense_step */
    int (*dense_step)(backend_ctx *ctx, opt_kind kind, float *W, float *s1, float *s2, size_t sW,
                      const float *dZ, int ldd, size_t sdZ, const float *X, int ldx, size_t sX,
                      int rows, int n_out, int n_in, const optim_step *o, int count);
    /* Optional (NULL, or xt_ld returning 0: gemm): a dense layer's forward
     * pass from its input transposed. xt_ld: the columns XT needs for `rows`
     * rows; transpose: XT[c*ldt + r] = X[r*ldx + c]; dense_forward: for
     * each of `count` models, Y = X·Wᵀ (Y rows x n_out, leading dimension
     * ldy), strides sY, sXT (0: one input for all) and sW. */
    int (*xt_ld)(backend_ctx *ctx, int rows);
    void (*transpose)(backend_ctx *ctx, float *XT, int ldt, const float *X, int ldx, int rows,
                      int cols);
    void (*dense_forward)(backend_ctx *ctx, float *Y, int ldy, size_t sY, const float *XT,
                          int ldt, size_t sXT, const float *W, size_t sW, int rows, int n_out,
                          int n_in, int count);
    /* Optional (NULL, or help_join returning -1: no helpers): a thread of the
     * runner with nothing left to start lends itself to a running context.
     * help_join counts it in and returns its slot; the caller must keep ctx
     * alive meanwhile and must not call it twice at once on one ctx.
     * help_run then takes a part of ctx's jobs until ctx_free, and returns;
     * ctx_free waits for it. No result depends on the number of helpers. */
    int (*help_join)(backend_ctx *ctx);
    void (*help_run)(backend_ctx *ctx, int slot);

    /* -- recurrent layers: one time step (rnn_step, backend/rnn_cell.h's
     * units); the products with the kernels are the caller's GEMMs -- */
    /* LSTM: gates holds the pre-activations (the input's and the previous
     * output's products with the kernels, and the bias) and receives the
     * gates; c receives the cell (from c_prev), h the output. */
    void (*lstm_fwd)(backend_ctx *ctx, const rnn_step *s);
    /* Its gradients, from gates, c and c_prev as lstm_fwd left them: dh and
     * dc hold dL/dh and dL/dc from the later steps (first: 0), to which dy
     * adds this step's output gradient. gates receives dL/d(pre-activations),
     * dc dL/dc_prev, dh the part of dL/dh_prev that is not the gates'
     * gradient times the recurrent kernel (0; all of it at a padded step). */
    void (*lstm_bwd)(backend_ctx *ctx, const rnn_step *s);
    /* GRU (reset_after): gates holds the input's products with their bias
     * and receives the gates; rec holds the recurrent products (not read
     * where h_prev is NULL: 0) and receives them plus `bias`; h the output. */
    void (*gru_fwd)(backend_ctx *ctx, const rnn_step *s);
    /* Its gradients, from gates, rec and h_prev as gru_fwd left them, dh and
     * dy as lstm_bwd's: gates receives dL/d(input products), rec
     * dL/d(recurrent products with their bias), dh the direct part of
     * dL/dh_prev (z dh; all of it at a padded step). */
    void (*gru_bwd)(backend_ctx *ctx, const rnn_step *s);
    /* Optional (NULL: gemm and the step ops above, a step at a time): the
     * steps of q at once, each row's recurrence on its own. rnn_fwd: for
     * i = 0..n-1, the input's products b + x·Wihᵀ into gates, then where
     * steps[i].h_prev is not NULL the recurrent products h_prev·Whhᵀ added
     * to gates (lstm) or written to rec (gru), then lstm_fwd or gru_fwd of
     * steps[i]. rnn_bwd: for i = n-1 down to 0, lstm_bwd or gru_bwd of
     * steps[i], then where steps[i].h_prev is not NULL, dh += (gates (lstm)
     * or rec (gru))·Whh. Each element of a product is its own sum over k in
     * order, from the value it adds to (a fused multiply-add each), so no
     * result depends on how the rows are split. */
    void (*rnn_fwd)(backend_ctx *ctx, const rnn_seq *q);
    void (*rnn_bwd)(backend_ctx *ctx, const rnn_seq *q);
    /* Optional (NULL, or a return of 0: gemm): G = dZᵀ·X of each of count
     * models, overwritten: dZ [rows, n_out] (leading dimension ldd, stride
     * sdZ), X [rows, n_in] (ldx, sX), G [n_out, n_in] contiguous (stride
     * sG); each element one sum over the rows in order, whatever the split.
     * The recurrent layers' weight gradients over all rows*T steps. */
    int (*wgrad)(backend_ctx *ctx, float *G, size_t sG, const float *dZ, int ldd, size_t sdZ,
                 const float *X, int ldx, size_t sX, int rows, int n_out, int n_in, int count);

    /* -- sequences: n samples of T steps x C features per model, [n, T, C] -- */
    /* Global pooling over the steps into Y [n, C]: max (arg [n, C] = the
     * step of the first largest value, later steps winning only when larger;
     * with no step to take, Y 0 and arg -1) or, max 0, the mean (the steps'
     * sum in step order, divided by their count; 0 with none). tokens (NULL:
     * every step is taken) are each model's input rows [n, T] of token ids
     * as floats, stride s_tokens (0: one copy for all); a step whose token
     * is 0 is padding (Keras's mask_zero) and is not taken. */
    void (*seq_pool_fwd)(backend_ctx *ctx, int max, float *Y, size_t sY, int32_t *arg,
                         size_t sarg, const float *X, size_t sX, const float *tokens,
                         size_t s_tokens, int n, int T, int C, int count);
    /* Its gradient dX [n, T, C]: max, dY at arg's step and 0 at the others;
     * mean, dY divided by the count of steps taken at each of them, 0 at
     * padding. */
    void (*seq_pool_bwd)(backend_ctx *ctx, int max, float *dX, size_t sdX, const float *dY,
                         size_t sdY, const int32_t *arg, size_t sarg, const float *tokens,
                         size_t s_tokens, int n, int T, int C, int count);

    /* -- token ids (an embedding). tok holds n ids as floats (exact below
     * 2^24), each in [0, V) (checked with the data, data_check_tokens), at
     * stride sT per model (0: one input read by every model). -- */
    /* Y[r][:] = W[tok[r]][:] for r < n: row tok[r] of each model's table W
     * [V, dim] (stride sW) into Y [n, dim] (stride sY). */
    void (*gather_rows)(backend_ctx *ctx, float *Y, size_t sY, const float *tok, size_t sT,
                        const float *W, size_t sW, int n, int dim, int count);
    /* The adjoint: G = 0 ([V, dim], stride sG), then G[tok[r]][:] += dY[r][:]
     * for r = 0, 1, ..., n - 1 in that order (dY [n, dim], stride sdY), so
     * that each sum is the same bits on every backend and thread count. */
    void (*scatter_add_rows)(backend_ctx *ctx, float *G, size_t sG, const float *tok, size_t sT,
                             const float *dY, size_t sdY, int n, int V, int dim, int count);

    /* -- layer normalization over the last axis: rows vectors of C features
     * per model; the formulas and their order of summation are
     * backend/norm_rows.h's, in double. -- */
    /* Y = gamma * (X - mean) / sqrt(var + eps[k]) + beta per row (mean and
     * biased variance of the row); stat [rows, 2] (stride sst; NULL: not
     * kept) receives each row's mean and 1/sqrt(var + eps). gamma and beta
     * [C] with stride sp; eps host memory [count]. */
    void (*ln_fwd)(backend_ctx *ctx, float *Y, size_t sY, const float *X, size_t sX,
                   const float *gamma, const float *beta, size_t sp, float *stat, size_t sst,
                   const float *eps, int rows, int C, int count);
    /* Its gradients from dY: dgamma and dbeta ([C], stride sg, overwritten;
     * each a sum over the rows in order) and, where dX is not NULL, dX. */
    void (*ln_bwd)(backend_ctx *ctx, float *dX, size_t sdX, const float *dY, size_t sdY,
                   const float *X, size_t sX, const float *gamma, size_t sp, const float *stat,
                   size_t sst, float *dgamma, float *dbeta, size_t sg, int rows, int C,
                   int count);

    /* -- attention's softmax over keys: S [H, n, T, T] per model (head h,
     * sample b, query i, key j; stride sS), the rows' formulas
     * backend/attn_rows.h's. tokens (NULL: none) are each model's input
     * rows [n, T] (stride s_tokens, 0: shared): a key whose token is 0
     * takes no part, nor any key of a query whose token is 0 (its row is
     * 0); causal: key j > query i takes none. -- */
    /* S = softmax(S) over each row's keys, in place. */
    void (*attn_softmax_fwd)(backend_ctx *ctx, float *S, size_t sS, const float *tokens,
                             size_t s_tokens, int n, int H, int T, int causal, int count);
    /* dS = P * (dS - sum over the row of P * dS), in place (P the weights). */
    void (*attn_softmax_bwd)(backend_ctx *ctx, float *dS, size_t sdS, const float *P, size_t sP,
                             int n, int H, int T, int count);
} backend_ops;

/* The CPU backend (what else it offers: backend/cpu/cpu.h). */
const backend_ops *backend_cpu(void);
/* The CUDA backend if the plugin is built, loads and finds a GPU; else NULL
 * with the reason in why. Loading it initializes CUDA in this process. */
const backend_ops *backend_cuda(char *why, size_t why_len);
/* The table whose ops serve a context that be->ctx_create made: the loaded
 * plugin's for the lazy GPU table (backend_cuda_lazy), else be itself. */
const backend_ops *backend_resolve(const backend_ops *be);

#endif
