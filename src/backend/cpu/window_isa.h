/*
 * The convolutions' own products (window.h) for one vector ISA, included
 * once per ISA by window.c with these defined:
 *   SFX        suffix of the function names (avx512, avx2)
 *   TGT        the target attribute of every function here
 *   VT, VL     the vector type and its lanes
 *   VLOAD VSTORE VSET1 VZERO VFMA
 * and undefined again at its end. Each element is its own sum over k, in
 * order, one fused multiply-add each: the same bits in every ISA.
 */
#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define FN(name) CAT(name, SFX)

/* Six rows of Y by nv vectors of columns from column j, nv a constant. */
static inline __attribute__((always_inline)) TGT void
FN(gemm_tile)(float *Y, size_t ldy, const float *A, size_t ar, size_t ac, const float *B,
              size_t ldb, int i, int j, int K, const int nv)
{
    VT s[6][2];
    for (int r = 0; r < 6; r++)
        for (int q = 0; q < nv; q++)
            s[r][q] = VZERO();
    const float *a = A + (size_t)i * ar, *w = B + j;
    for (size_t k = 0; k < (size_t)K; k++, w += ldb) {
        VT wv[2];
        for (int q = 0; q < nv; q++)
            wv[q] = VLOAD(w + q * VL);
        for (int r = 0; r < 6; r++) {
            VT b = VSET1(a[(size_t)r * ar + k * ac]);
            for (int q = 0; q < nv; q++)
                s[r][q] = VFMA(b, wv[q], s[r][q]);
        }
    }
    for (int r = 0; r < 6; r++)
        for (int q = 0; q < nv; q++)
            VSTORE(Y + (size_t)(i + r) * ldy + (size_t)j + (size_t)q * VL, s[r][q]);
}

/* Rows of six by two vectors of columns (12 accumulators), a last single
 * vector where N leaves one, then the last rows one at a time; N a
 * multiple of VL. */
static TGT void FN(gemm_own)(float *Y, size_t ldy, const float *A, size_t ar, size_t ac,
                             const float *B, size_t ldb, int M, int N, int K)
{
    int i = 0;
    for (; i + 6 <= M; i += 6) {
        int j = 0;
        for (; j + 2 * VL <= N; j += 2 * VL)
            FN(gemm_tile)(Y, ldy, A, ar, ac, B, ldb, i, j, K, 2);
        if (j < N)
            FN(gemm_tile)(Y, ldy, A, ar, ac, B, ldb, i, j, K, 1);
    }
    for (; i < M; i++) {
        const float *a = A + (size_t)i * ar;
        for (int j = 0; j < N; j += VL) {
            VT acc = VZERO();
            for (size_t k = 0; k < (size_t)K; k++)
                acc = VFMA(VSET1(a[k * ac]), VLOAD(B + k * ldb + (size_t)j), acc);
            VSTORE(Y + (size_t)i * ldy + (size_t)j, acc);
        }
    }
}

/* VL filters at a time from filter *f, one register of sums per k, as long
 * as VL of them are left; *f is then the first filter left. */
static TGT void FN(conv_small_wgrad)(float *G, const float *dY, const float *col, int rows,
                                     int F, int kc, int *f)
{
    int f0 = *f;
    for (; f0 + VL <= F; f0 += VL) {
        VT acc[CONV_SMALL_KC];
        for (int k = 0; k < CONV_SMALL_KC; k++)
            acc[k] = VZERO();
        for (int r = 0; r < rows; r++) {
            VT d = VLOAD(dY + (size_t)r * F + f0);
            const float *c = col + (size_t)r * kc;
            for (int k = 0; k < CONV_SMALL_KC; k++)
                if (k < kc)
                    acc[k] = VFMA(VSET1(c[k]), d, acc[k]);
        }
        for (int k = 0; k < kc; k++) {
            float t[VL];
            VSTORE(t, acc[k]);
            for (int j = 0; j < VL; j++)
                G[(size_t)(f0 + j) * kc + k] = t[j];
        }
    }
    *f = f0;
}

#undef FN
#undef CAT
#undef CAT2
#undef SFX
#undef TGT
#undef VT
#undef VL
#undef VLOAD
#undef VSTORE
#undef VSET1
#undef VZERO
#undef VFMA
