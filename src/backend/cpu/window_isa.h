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

/* nr rows of Y (at most six) by nv vectors of columns from column j, nr
 * and nv constants. */
static inline __attribute__((always_inline)) TGT void
FN(gemm_tile)(float *Y, size_t ldy, const float *A, size_t ar, size_t ac, const float *B,
              size_t ldb, int i, int j, int K, const int nr, const int nv)
{
    VT s[6][2];
    for (int r = 0; r < nr; r++)
        for (int q = 0; q < nv; q++)
            s[r][q] = VZERO();
    const float *a = A + (size_t)i * ar, *w = B + j;
    for (size_t k = 0; k < (size_t)K; k++, w += ldb) {
        VT wv[2];
        for (int q = 0; q < nv; q++)
            wv[q] = VLOAD(w + q * VL);
        for (int r = 0; r < nr; r++) {
            VT b = VSET1(a[(size_t)r * ar + k * ac]);
            for (int q = 0; q < nv; q++)
                s[r][q] = VFMA(b, wv[q], s[r][q]);
        }
    }
    for (int r = 0; r < nr; r++)
        for (int q = 0; q < nv; q++)
            VSTORE(Y + (size_t)(i + r) * ldy + (size_t)j + (size_t)q * VL, s[r][q]);
}

/* Rows [i, i + nr) by columns [j0, j1) (multiples of VL): two vectors at a
 * time (2 nr accumulators), a last single one where the range leaves it. */
static inline __attribute__((always_inline)) TGT void
FN(gemm_rows)(float *Y, size_t ldy, const float *A, size_t ar, size_t ac, const float *B,
              size_t ldb, int i, int j0, int j1, int K, const int nr)
{
    int j = j0;
    for (; j + 2 * VL <= j1; j += 2 * VL)
        FN(gemm_tile)(Y, ldy, A, ar, ac, B, ldb, i, j, K, nr, 2);
    if (j < j1)
        FN(gemm_tile)(Y, ldy, A, ar, ac, B, ldb, i, j, K, nr, 1);
}

/* Rows [i0, M) by columns [j0, j1): groups of six rows, then the rest as
 * one group of fewer rows (its own constant, so the accumulators stay in
 * registers: one row at a time had left them a chain of dependent
 * multiply-adds, which took a 64-row product twice as long). */
static TGT void FN(gemm_block)(float *Y, size_t ldy, const float *A, size_t ar, size_t ac,
                               const float *B, size_t ldb, int M, int j0, int j1, int K)
{
    int i = 0;
    for (; i + 6 <= M; i += 6)
        FN(gemm_rows)(Y, ldy, A, ar, ac, B, ldb, i, j0, j1, K, 6);
    switch (M - i) {
    case 5: FN(gemm_rows)(Y, ldy, A, ar, ac, B, ldb, i, j0, j1, K, 5); break;
    case 4: FN(gemm_rows)(Y, ldy, A, ar, ac, B, ldb, i, j0, j1, K, 4); break;
    case 3: FN(gemm_rows)(Y, ldy, A, ar, ac, B, ldb, i, j0, j1, K, 3); break;
    case 2: FN(gemm_rows)(Y, ldy, A, ar, ac, B, ldb, i, j0, j1, K, 2); break;
    case 1: FN(gemm_rows)(Y, ldy, A, ar, ac, B, ldb, i, j0, j1, K, 1); break;
    default: break;
    }
}

/* Y = A·B, N a multiple of VL. Where B is small (a convolution's filters)
 * every row group reads all of it from a near cache; a larger B (a dense
 * layer's weights, in its input gradient) goes by panels of GEMM_PANEL
 * columns, each read by every row group before the next. Each element is
 * one tile's sum either way. */
static TGT void FN(gemm_own)(float *Y, size_t ldy, const float *A, size_t ar, size_t ac,
                             const float *B, size_t ldb, int M, int N, int K)
{
    if ((size_t)K * (size_t)N * sizeof(float) <= GEMM_B_NEAR) {
        FN(gemm_block)(Y, ldy, A, ar, ac, B, ldb, M, 0, N, K);
        return;
    }
    for (int j = 0; j < N; j += GEMM_PANEL)
        FN(gemm_block)(Y, ldy, A, ar, ac, B, ldb, M, j, j + GEMM_PANEL < N ? j + GEMM_PANEL : N,
                       K);
}

/* gemm_tile with A the im2col rows left unmade: row r's window is kh runs
 * of `run` floats, run ky at at[r] + ky * sy, and its k-th value that of
 * run k / run. The same multiply-adds in the same order as gemm_tile over
 * the made rows, so the same bits. */
static inline __attribute__((always_inline)) TGT void
FN(conv_tile)(float *Y, size_t ldy, const float *const *at, size_t sy, int kh, int run,
              const float *B, size_t ldb, int i, int j, const int nr, const int nv)
{
    VT s[6][2];
    for (int r = 0; r < nr; r++)
        for (int q = 0; q < nv; q++)
            s[r][q] = VZERO();
    const float *w = B + j;
    for (int ky = 0; ky < kh; ky++) {
        const float *a[6];
        for (int r = 0; r < nr; r++)
            a[r] = at[r] + (size_t)ky * sy;
        for (int k = 0; k < run; k++, w += ldb) {
            VT wv[2];
            for (int q = 0; q < nv; q++)
                wv[q] = VLOAD(w + q * VL);
            for (int r = 0; r < nr; r++) {
                VT b = VSET1(a[r][k]);
                for (int q = 0; q < nv; q++)
                    s[r][q] = VFMA(b, wv[q], s[r][q]);
            }
        }
    }
    for (int r = 0; r < nr; r++)
        for (int q = 0; q < nv; q++)
            VSTORE(Y + (size_t)(i + r) * ldy + (size_t)j + (size_t)q * VL, s[r][q]);
}

static inline __attribute__((always_inline)) TGT void
FN(conv_rows)(float *Y, size_t ldy, const float *const *at, size_t sy, int kh, int run,
              const float *B, size_t ldb, int i, int j0, int j1, const int nr)
{
    int j = j0;
    for (; j + 2 * VL <= j1; j += 2 * VL)
        FN(conv_tile)(Y, ldy, at, sy, kh, run, B, ldb, i, j, nr, 2);
    if (j < j1)
        FN(conv_tile)(Y, ldy, at, sy, kh, run, B, ldb, i, j, nr, 1);
}

/* Rows [0, M) of images [i0, ...) by columns [j0, j1), in groups of six as
 * gemm_block: each group's window starts found by stepping a pixel cursor
 * (image, y, x) along, no division a row. */
static TGT void FN(conv_block)(float *Y, size_t ldy, const float *X, const window_geom *g, int i0,
                               int M, const float *B, size_t ldb, int j0, int j1)
{
    const size_t c = (size_t)g->c, sy = (size_t)g->w * c, img = (size_t)g->h * sy;
    const int run = g->kw * g->c;
    int im = i0, y = 0, x = 0;
    for (int i = 0; i < M; i += 6) {
        const float *at[6];
        int nr = M - i < 6 ? M - i : 6;
        for (int r = 0; r < nr; r++) {
            at[r] = X + (size_t)im * img + (size_t)y * (size_t)g->sh * sy +
                    (size_t)x * (size_t)g->sw * c;
            if (++x == g->ow) {
                x = 0;
                if (++y == g->oh)
                    y = 0, im++;
            }
        }
        switch (nr) {
        case 6: FN(conv_rows)(Y, ldy, at, sy, g->kh, run, B, ldb, i, j0, j1, 6); break;
        case 5: FN(conv_rows)(Y, ldy, at, sy, g->kh, run, B, ldb, i, j0, j1, 5); break;
        case 4: FN(conv_rows)(Y, ldy, at, sy, g->kh, run, B, ldb, i, j0, j1, 4); break;
        case 3: FN(conv_rows)(Y, ldy, at, sy, g->kh, run, B, ldb, i, j0, j1, 3); break;
        case 2: FN(conv_rows)(Y, ldy, at, sy, g->kh, run, B, ldb, i, j0, j1, 2); break;
        default: FN(conv_rows)(Y, ldy, at, sy, g->kh, run, B, ldb, i, j0, j1, 1); break;
        }
    }
}

/* kern_conv_fwd_own for one ISA: B by panels where it is large, as gemm_own. */
static TGT void FN(conv_fwd_own)(float *Y, size_t ldy, const float *X, const window_geom *g,
                                 int i0, int i1, const float *B, size_t ldb, int N)
{
    int M = (i1 - i0) * g->oh * g->ow;
    size_t K = (size_t)g->kh * (size_t)g->kw * (size_t)g->c;
    if (K * (size_t)N * sizeof(float) <= GEMM_B_NEAR) {
        FN(conv_block)(Y, ldy, X, g, i0, M, B, ldb, 0, N);
        return;
    }
    for (int j = 0; j < N; j += GEMM_PANEL)
        FN(conv_block)(Y, ldy, X, g, i0, M, B, ldb, j, j + GEMM_PANEL < N ? j + GEMM_PANEL : N);
}

/* VL filters at a time from filter *f, one register of sums per k, as long
 * as VL of them are left; *f is then the first filter left. */
static TGT void FN(conv_small_wgrad)(float *G, const float *dY, const float *col, int rows,
                                     int F, int kc, int *f)
{
    int f0 = *f;
#if VL == 16
    /* Two vectors of filters a pass where there are (2 x 12 sums, two loads
     * of dY and a broadcast: 27 of AVX-512's 32 registers), so that each
     * broadcast of col feeds two multiply-adds: with one, the broadcasts
     * were as many as the multiply-adds, and the Keras convnet's first
     * layer (kc 9, 32 filters) ran at 37 GFLOP/s a core. Each sum is the
     * same, in the same order. */
    for (; f0 + 2 * VL <= F; f0 += 2 * VL) {
        VT acc[2][CONV_SMALL_KC];
        for (int k = 0; k < CONV_SMALL_KC; k++)
            acc[0][k] = acc[1][k] = VZERO();
        for (int r = 0; r < rows; r++) {
            VT d0 = VLOAD(dY + (size_t)r * F + f0), d1 = VLOAD(dY + (size_t)r * F + f0 + VL);
            const float *c = col + (size_t)r * kc;
            for (int k = 0; k < CONV_SMALL_KC; k++)
                if (k < kc) {
                    VT b = VSET1(c[k]);
                    acc[0][k] = VFMA(b, d0, acc[0][k]);
                    acc[1][k] = VFMA(b, d1, acc[1][k]);
                }
        }
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < kc; k++) {
                float t[VL];
                VSTORE(t, acc[h][k]);
                for (int j = 0; j < VL; j++)
                    G[(size_t)(f0 + h * VL + j) * kc + k] = t[j];
            }
    }
#endif
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
