/*
 * The weight gradient of a dense layer fused with the optimizer step on its
 * weights, for the CPU: G = dZᵀ·X is computed one register tile at a time
 * and each tile goes straight into the update of W and the optimizer state,
 * so G is never written to memory, nor zeroed, nor read back. Per element,
 * the update is exactly the optimizer's own function's (optim/sgd.h,
 * optim/adam.h: same operations, same order, no contraction); G's sums run
 * over the rows in order, one fused multiply-add per row, whatever the
 * vector width.
 */
#ifndef COHORT_DENSE_STEP_H
#define COHORT_DENSE_STEP_H

#include "backend/cpu/isa.h"
#include "optim/update.h"

#include <stddef.h>
#include <stdint.h>

/* Rows of W per register tile of both kernels: a split of the rows between
 * threads on multiples of it changes no sum. */
#define DENSE_TILE_ROWS 6

/* kern_dense_step packs dZ's columns of each row group when there are at
 * most this many rows (a batch), and reads them in place past it. */
#define DENSE_PACK_ROWS 512

/* Bytes of X (rows x columns) that kern_dense_step's row groups read
 * whole, one after another; past it, the columns go in stripes of at most
 * this much (kern_dense_stripe), each through every row group. */
#ifndef DENSE_STRIPE_BYTES
#define DENSE_STRIPE_BYTES (512 * 1024)
#endif

/* Vectors of vl columns per stripe of kern_dense_step for `rows` rows of
 * nvec vectors, in whole register tiles of tile_v vectors, two at least
 * (the pipelined update needs two): nvec where X fits whole. */
int kern_dense_stripe(int rows, int nvec, int vl, int tile_v);

/* Part `part` of `parts` of [0, n), cut on multiples of `unit`: [*a, *b).
 * The CPU pool's split of every job: rows of W by DENSE_TILE_ROWS, columns
 * of a transpose by its 8 x 8 blocks, batch rows one by one. */
void part_range(int n, int unit, int part, int parts, int *a, int *b);

/* What kern_dense_step does with each element of G: store it in W (no
 * step: a convolution's weight gradient, whose chunks' partial sums are
 * added afterwards), or one of the updates it fuses, each the vector form
 * of its optimizer's per-weight function (optim/sgd.h, optim/adam.h). */
typedef enum { FUSE_SGD, FUSE_MOMENTUM, FUSE_NESTEROV, FUSE_ADAM, FUSE_GRAD } fuse_kind;

/* One model's update in the fused step: its form and its optimizer's
 * scalars of this step. */
typedef struct dense_update {
    fuse_kind kind;
    optim_scalars s;
} dense_update;

/* Whether kern_dense_step fuses optimizer `kind` (sgd, adam, adamw). */
int dense_fuses(opt_kind kind);
/* The fused update of one model of optimizer `kind` (one dense_fuses
 * takes) from its scalars s. */
dense_update dense_update_of(opt_kind kind, const optim_scalars *s);

/* The update of n weights w from their gradients g, slots s1 and s2 as in
 * kern_dense_step, one weight at a time by the optimizer's own function:
 * the scalar columns of kern_dense_step, and the reference its vectors are
 * tested against. */
void kern_dense_update(float *w, const float *g, float *s1, float *s2, size_t n,
                       const dense_update *u);

/*
 * Rows [j0, j1) of one dense layer: G[j][c] = sum over r < rows of
 * dZ[r*ldd + j] * X[r*ldx + c], c < n_in, and the step on W[j*n_in + c] with
 * slots s1 (momentum velocity or Adam's m) and s2 (Adam's v), laid out as W.
 */
void kern_dense_step(cpu_isa isa, float *W, float *s1, float *s2, const float *dZ, size_t ldd,
                     const float *X, size_t ldx, int rows, int n_in, int j0, int j1,
                     const dense_update *u);

/* The vector width, in floats, that the choices between paths count in
 * under every ISA (AVX-512's): the same shapes take the same paths, and so
 * give the same bits, under AVX2 and AVX-512. */
#define DECIDE_VL 16

/*
 * The forward pass of a dense layer from its input transposed:
 * Y[r*ldy + j] = sum over c < n_in, in order, of W[j*n_in + c] * XT[c*ldt + r]
 * (one fused multiply-add each), for r < rows and j in [j0, j1). XT holds
 * kern_dense_fwd_ld(isa, rows) columns: ldt at least that, and the columns
 * past `rows` are read but never affect Y.
 */
int kern_dense_fwd_ld(cpu_isa isa, int rows);
void kern_transpose(cpu_isa isa, float *XT, size_t ldt, const float *X, size_t ldx, int rows,
                    int cols);
void kern_dense_fwd(cpu_isa isa, float *Y, size_t ldy, const float *W, const float *XT, size_t ldt,
                    int rows, int n_in, int j0, int j1);

/*
 * Small products, as the layers after an MLP's first run them: rows
 * [m0, m1) of C (M x N, ldc) = A (M x K, lda) · B, with B K x N (ldb) for
 * kern_small_nn and N x K (ldb) for kern_small_nt, as cblas_sgemm with alpha
 * 1 and beta 0. Every element is a sum over k in order, one fused
 * multiply-add each (the first a plain product), whatever the vector width.
 * kern_small_nt, for N at most KERN_SMALL_NT_N, transposes A's rows on the
 * stack for kern_dense_fwd where B is W-like (ldb == K) and K times the rows
 * (rounded up to DECIDE_VL) fit in KERN_SMALL_NT_XT floats; else it packs Bᵀ
 * where K is short enough (see dense_step.c) and K * N fits in
 * KERN_SMALL_NT_PACK floats (both in one 128 KiB buffer on the stack); else
 * it runs the scalar form.
 *
 * kern_small_nn_suits and kern_small_nt_suits: 1 where those shapes run
 * faster than OpenBLAS's (measured), for an M x N x K product. Like
 * kern_dense_fwd_ld, they answer the same under AVX2 and AVX-512 (they
 * count in DECIDE_VL floats), so that both ISAs take the same paths.
 */
#define KERN_SMALL_NT_N 16
#define KERN_SMALL_NT_PACK 16384
#define KERN_SMALL_NT_XT 32768
void kern_small_nn(cpu_isa isa, float *C, size_t ldc, const float *A, size_t lda, const float *B,
                   size_t ldb, int m0, int m1, int N, int K);
void kern_small_nt(cpu_isa isa, float *C, size_t ldc, const float *A, size_t lda, const float *B,
                   size_t ldb, int m0, int m1, int N, int K);
int kern_small_nn_suits(cpu_isa isa, int N, int K);
int kern_small_nt_suits(cpu_isa isa, int M, int N, int K, size_t ldb);

#endif
