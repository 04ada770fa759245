/*
 * The recurrent layers' products on the CPU (backend_cpu.c's rnn_fwd and
 * rnn_bwd): C (+)= A·B over a few rows at a time, a step of a chunk of a
 * batch's sequences. Each element of C is its own chain of fused
 * multiply-adds over k in order, from the value it adds to (acc) or from 0,
 * whatever the ISA, the vector width or the rows taken together: a
 * sequence's results do not depend on the rows beside it, nor on the path.
 */
#ifndef COHORT_CPU_RNN_GEMM_H
#define COHORT_CPU_RNN_GEMM_H

#include "backend/cpu/isa.h"

#include <stddef.h>

/* C[i][j] = c0 + sum over k < K of A[i*lda + k] * B[k*ldb + j], for i < M,
 * j < N, with c0 = C[i][j] where acc is set, else init[j] (NULL: 0); B is
 * K x N, row-major. */
void kern_rnn_gemm(cpu_isa isa, float *C, size_t ldc, const float *A, size_t lda, const float *B,
                   size_t ldb, int M, int N, int K, int acc, const float *init);

/* WT[k*ldt + j] = W[j*ldw + k] for j < rows, k < cols: a kernel turned for
 * kern_rnn_gemm. */
void kern_rnn_transpose(float *WT, size_t ldt, const float *W, size_t ldw, int rows, int cols);

#endif
