/*
 * The recurrent layers' products on the CPU (rnn_gemm.h): register tiles of
 * six rows by two vectors, AVX-512 or AVX2 (rnn_gemm_isa.h), and the columns
 * past the last whole vector one at a time; every element the same chain of
 * fused multiply-adds on each path.
 */
#include "backend/cpu/rnn_gemm.h"

#include <math.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

/* Columns of B a panel takes through all the rows (64 x 64 floats of a
 * 64-unit layer's kernel: 16 KiB, in the L1 cache). */
#define RNN_PANEL 64

#if defined(__AVX2__) && defined(__FMA__)
#define SFX avx512
#define TGT __attribute__((target("avx512f")))
#define VT __m512
#define VL 16
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, x) _mm512_storeu_ps(p, x)
#define VSET1(x) _mm512_set1_ps(x)
#define VZERO() _mm512_setzero_ps()
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#include "backend/cpu/rnn_gemm_isa.h"

#define SFX avx2
#define TGT
#define VT __m256
#define VL 8
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, x) _mm256_storeu_ps(p, x)
#define VSET1(x) _mm256_set1_ps(x)
#define VZERO() _mm256_setzero_ps()
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#include "backend/cpu/rnn_gemm_isa.h"
#endif

void kern_rnn_gemm(cpu_isa isa, float *C, size_t ldc, const float *A, size_t lda, const float *B,
                   size_t ldb, int M, int N, int K, int acc, const float *init)
{
    int j0 = 0;
#if defined(__AVX2__) && defined(__FMA__)
    if (isa == ISA_AVX512)
        j0 = rnn_gemm_avx512(C, ldc, A, lda, B, ldb, M, N, K, acc, init);
    else /* the build's baseline has AVX2: ISA_NONE (OpenBLAS asked for) takes it too */
        j0 = rnn_gemm_avx2(C, ldc, A, lda, B, ldb, M, N, K, acc, init);
#else
    (void)isa;
#endif
    for (int i = 0; i < M; i++) {
        float *c = C + (size_t)i * ldc;
        const float *a = A + (size_t)i * lda;
        for (int j = j0; j < N; j++) {
            float s = acc ? c[j] : init ? init[j] : 0.0f;
            for (int k = 0; k < K; k++)
                s = fmaf(a[k], B[(size_t)k * ldb + (size_t)j], s);
            c[j] = s;
        }
    }
}

void kern_rnn_transpose(float *WT, size_t ldt, const float *W, size_t ldw, int rows, int cols)
{
    for (int j = 0; j < rows; j++)
        for (int k = 0; k < cols; k++)
            WT[(size_t)k * ldt + (size_t)j] = W[(size_t)j * ldw + (size_t)k];
}
