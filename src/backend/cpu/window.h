/*
 * The CPU backend's image-layer kernels over NHWC tensors: im2col and its
 * adjoint, max and average pooling, batch normalization. Plain functions of
 * one model over a range of images (or of channels for batch norm), so the
 * backend can hand each range to one thread; no result depends on the split.
 */
#ifndef COHORT_WINDOW_H
#define COHORT_WINDOW_H

#include "backend/backend_impl.h"
#include "backend/cpu/dense_step.h"

#include <stdint.h>

/* X is (n, h, w, c), col is ((i1-i0)*oh*ow, kh*kw*c): the rows of images
 * [i0, i1), image i0's first, as backend_ops.im2col (0 where the window
 * reads padding; taps dh, dw pixels apart). */
void kern_im2col(float *col, const float *X, const window_geom *g, int i0, int i1);

/* The adjoint, dX (n, h, w, c) from col ((i1-i0)*oh*ow, kh*kw*c): the rows
 * of images [i0, i1), image i0's first. Images [i0, i1) of dX are zeroed,
 * then every col element of theirs is added to the pixel it was read from,
 * in the order of col's rows. */
void kern_col2im(float *dX, const float *col, const window_geom *g, int i0, int i1);

/* X is (n, h, w, c); Y and arg are (n, oh, ow, c). Y = the largest pixel of
 * the window inside the image, arg = its iy*w + ix (the first in ky, kx
 * order among equals); a window with no pixel inside gives 0 and -1. */
void kern_maxpool_fwd(float *Y, int32_t *arg, const float *X, const window_geom *g, int i0, int i1);

/* dX (n, h, w, c) = 0, then dX[i][arg][ch] += dY[i][y][x][ch] for images
 * [i0, i1); arg < 0 adds nothing. */
void kern_maxpool_bwd(float *dX, const float *dY, const int32_t *arg, const window_geom *g, int i0,
                      int i1);

/* Y (n, oh, ow, c) = the mean of the window's pixels inside X (n, h, w, c);
 * 0 for a window with none. */
void kern_avgpool_fwd(float *Y, const float *X, const window_geom *g, int i0, int i1);

/* dX (n, h, w, c) = 0, then each dY (n, oh, ow, c) divided evenly among its
 * window's pixels inside the image. */
void kern_avgpool_bwd(float *dX, const float *dY, const window_geom *g, int i0, int i1);

/* Global pooling of sequences [n, T, C] into Y [n, C], samples [i0, i1),
 * as backend_ops.seq_pool_fwd: max (arg the step) or mean, over the steps
 * whose token (tokens [n, T], NULL: all) is not 0. */
void kern_seq_pool_fwd(int max, float *Y, int32_t *arg, const float *X, const float *tokens,
                       int T, int C, int i0, int i1);
/* Its gradient dX [n, T, C] from dY [n, C], samples [i0, i1). */
void kern_seq_pool_bwd(int max, float *dX, const float *dY, const int32_t *arg,
                       const float *tokens, int T, int C, int i0, int i1);

/*
 * Batch normalization of X (rows, C) over the rows, channels [c0, c1):
 * mean and biased variance in double, stat[ch] = mean, stat[C + ch] =
 * 1/sqrt(var + eps), Y = gamma*(X - mean)*inv_std + beta, and the moving
 * statistics mov = momentum*mov + (1 - momentum)*batch's. Y may be X.
 */
void kern_bn_fwd_train(float *Y, const float *X, const float *gamma, const float *beta,
                       float *mov_mean, float *mov_var, float *stat, int rows, int C,
                       float momentum, float eps, int c0, int c1);

/* Y (rows, C) = gamma*(X - mov_mean)/sqrt(mov_var + eps) + beta, channels
 * [c0, c1). Y may be X. */
void kern_bn_fwd_infer(float *Y, const float *X, const float *gamma, const float *beta,
                       const float *mov_mean, const float *mov_var, int rows, int C, float eps,
                       int c0, int c1);

/* The gradients of kern_bn_fwd_train, channels [c0, c1): dbeta = sum of dY,
 * dgamma = sum of dY*xhat over the rows (double), and where dX is not NULL
 * dX = gamma*inv_std*(dY - dbeta/rows - xhat*dgamma/rows). dX may be dY. */
void kern_bn_bwd(float *dX, const float *dY, const float *X, const float *gamma, const float *stat,
                 float *dgamma, float *dbeta, int rows, int C, int c0, int c1);

/*
 * Convolutions whose windows hold few values (kc = kh*kw*c: a first layer
 * on one channel has 9), where OpenBLAS's sgemm runs at a quarter of its
 * rate (measured: 26 GFLOP/s forward, 35 weight gradient, on 2704 x 32 x 9).
 * kern_conv_small_wgrad: G[f][k] = sum over r, in order, of dY[r][f] *
 * col[r][k], for F filters (W [F, kc]); needs conv_small_ok.
 */
#define CONV_SMALL_KC 12
int conv_small_ok(int kc, int F);
void kern_conv_small_wgrad(cpu_isa isa, float *G, const float *dY, const float *col, int rows,
                           int F, int kc);

/*
 * The products of a convolution, Y[i][j] = sum over k < K, in order, of
 * A[i*ar + k*ac] * B[k*ldb + j], for M x N with N % 16 == 0 (gemm_own_ok):
 * six rows by sixteen columns at a time in registers, where OpenBLAS's
 * sgemm packs both operands of these small products first. Measured on the
 * Keras convnet's second layer, one core: forward (A = col, B = W
 * transposed) 90 against 75 GFLOP/s, input gradient (A = dY, B = W) 90
 * against 74. (A's strides would serve Aᵀ too, but the weight gradient,
 * with its long inner dimension, runs at half OpenBLAS's rate this way.)
 * With AVX-512 (isa) six rows by 32 columns, where N allows. Both kernels
 * give the same bits for every ISA: each element is its own sum over k.
 */
int gemm_own_ok(int N);
/* Columns of B a panel of kern_gemm_own reads by every row group before
 * the next (a B over GEMM_B_NEAR bytes); the pool cuts products by it too. */
#define GEMM_PANEL 64
void kern_gemm_own(cpu_isa isa, float *Y, size_t ldy, const float *A, size_t ar, size_t ac,
                   const float *B, size_t ldb, int M, int N, int K);

/*
 * A convolution's forward product Y = col·B for the rows of images [i0, i1)
 * without col: kern_gemm_own with A = kern_im2col's rows, each broadcast
 * read from X where im2col would have copied it from. Needs
 * conv_fwd_own_ok: N % 16 == 0, an undilated window, none reading padding (`valid`, or
 * `same` where the kernel is 1 x 1). The same bits as im2col and then
 * kern_gemm_own: each element the same sum over k in the same order. The
 * Keras convnet's second layer (one image a chunk: 121 rows of 288) had
 * spent a fifth of its forward copying 384-byte runs into col.
 */
int conv_fwd_own_ok(const window_geom *g, int N);
void kern_conv_fwd_own(cpu_isa isa, float *Y, size_t ldy, const float *X, const window_geom *g,
                       int i0, int i1, const float *B, size_t ldb, int N);

#endif
