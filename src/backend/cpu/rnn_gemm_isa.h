/*
 * kern_rnn_gemm for one vector ISA, included once per ISA by rnn_gemm.c with
 *   SFX, TGT, VT, VL, VLOAD, VSTORE, VSET1, VZERO, VFMA
 * defined (as window_isa.h's) and undefined again at its end.
 */
#define RCAT2(a, b) a##_##b
#define RCAT(a, b) RCAT2(a, b)
#define RFN(name) RCAT(name, SFX)

/* nr rows (at most six) by nv vectors from column j: the accumulators stay
 * in registers over all of k. */
static inline __attribute__((always_inline)) TGT void
RFN(rnn_tile)(float *C, size_t ldc, const float *A, size_t lda, const float *B, size_t ldb, int j,
              int K, int acc, const float *init, const int nr, const int nv)
{
    VT s[6][2];
    for (int r = 0; r < nr; r++)
        for (int q = 0; q < nv; q++)
            s[r][q] = acc    ? VLOAD(C + (size_t)r * ldc + (size_t)j + (size_t)q * VL)
                      : init ? VLOAD(init + (size_t)j + (size_t)q * VL)
                             : VZERO();
    const float *b = B + j;
    for (int k = 0; k < K; k++, b += ldb) {
        VT bv[2];
        for (int q = 0; q < nv; q++)
            bv[q] = VLOAD(b + q * VL);
        for (int r = 0; r < nr; r++) {
            VT a = VSET1(A[(size_t)r * lda + (size_t)k]);
            for (int q = 0; q < nv; q++)
                s[r][q] = VFMA(a, bv[q], s[r][q]);
        }
    }
    for (int r = 0; r < nr; r++)
        for (int q = 0; q < nv; q++)
            VSTORE(C + (size_t)r * ldc + (size_t)j + (size_t)q * VL, s[r][q]);
}

/* nr rows by the vector columns of [j0, j1): two vectors at a time, then one. */
static inline __attribute__((always_inline)) TGT void
RFN(rnn_rows)(float *C, size_t ldc, const float *A, size_t lda, const float *B, size_t ldb, int j0,
              int j1, int K, int acc, const float *init, const int nr)
{
    int j = j0;
    for (; j + 2 * VL <= j1; j += 2 * VL)
        RFN(rnn_tile)(C, ldc, A, lda, B, ldb, j, K, acc, init, nr, 2);
    for (; j + VL <= j1; j += VL)
        RFN(rnn_tile)(C, ldc, A, lda, B, ldb, j, K, acc, init, nr, 1);
}

/* Columns [j0, j1) (whole vectors) of rows [0, M): six rows at a time, the
 * rest as one group of its own size (a constant: registers again). */
static TGT void RFN(rnn_block)(float *C, size_t ldc, const float *A, size_t lda, const float *B,
                               size_t ldb, int M, int j0, int j1, int K, int acc,
                               const float *init)
{
    int i = 0;
    for (; i + 6 <= M; i += 6)
        RFN(rnn_rows)(C + (size_t)i * ldc, ldc, A + (size_t)i * lda, lda, B, ldb, j0, j1, K, acc,
                      init, 6);
    float *c = C + (size_t)i * ldc;
    const float *a = A + (size_t)i * lda;
    switch (M - i) {
    case 5: RFN(rnn_rows)(c, ldc, a, lda, B, ldb, j0, j1, K, acc, init, 5); break;
    case 4: RFN(rnn_rows)(c, ldc, a, lda, B, ldb, j0, j1, K, acc, init, 4); break;
    case 3: RFN(rnn_rows)(c, ldc, a, lda, B, ldb, j0, j1, K, acc, init, 3); break;
    case 2: RFN(rnn_rows)(c, ldc, a, lda, B, ldb, j0, j1, K, acc, init, 2); break;
    case 1: RFN(rnn_rows)(c, ldc, a, lda, B, ldb, j0, j1, K, acc, init, 1); break;
    default: break;
    }
}

/* The vector columns by panels of RNN_PANEL (B's panel stays in the L1
 * cache through every row group); returns where the vectors end. */
static TGT int RFN(rnn_gemm)(float *C, size_t ldc, const float *A, size_t lda, const float *B,
                             size_t ldb, int M, int N, int K, int acc,
                             const float *init)
{
    int nv = N / VL * VL;
    for (int j = 0; j < nv; j += RNN_PANEL)
        RFN(rnn_block)(C, ldc, A, lda, B, ldb, M, j, j + RNN_PANEL < nv ? j + RNN_PANEL : nv, K,
                       acc, init);
    return nv;
}

#undef RFN
#undef RCAT
#undef RCAT2
#undef SFX
#undef TGT
#undef VT
#undef VL
#undef VLOAD
#undef VSTORE
#undef VSET1
#undef VZERO
#undef VFMA
