/*
 * The body of kern_dense_step for one vector ISA, included once per ISA by
 * dense_step.c with these defined:
 *   SFX          suffix of the function names (avx512, avx2)
 *   TGT          the target attribute of every function here
 *   VT, VL       the vector type and its lanes
 *   NV           vectors of columns per register tile: TILE_J x NV
 *                accumulators, NV loads and a broadcast must fit the
 *                ISA's vector registers (32 for AVX-512, 16 for AVX2)
 *   VLOAD VSTORE VSET1 VZERO VFMA VADD VSUB VMUL VDIV VSQRT
 *   PIPE_UPDATE  (optional) the step's update pipelined into the sums (see
 *                FN(tile)); where the registers allow it (AVX-512: with 16,
 *                AVX2 spilled and ran 13% slower)
 * VFMA(a, b, c) is a*b + c with one rounding; the others are the plain ops.
 */
#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define FN(name) CAT(name, SFX)

/* The rows of one register tile; columns go by NV vectors. */
#define TILE_J DENSE_TILE_ROWS
#define TILE_V NV
#ifndef PF_DIST
#define PF_DIST 2
#endif

/* The optimizer step of VL consecutive weights from their gradient g: the
 * vector form of sgd_update (optim/sgd.h) and adam_update (optim/adam.h),
 * the same operations in the same order, so the same bits per lane. kind
 * is o->kind, passed apart so that a caller can make it a constant, and so
 * is decay (0: Adam without weight decay, 1: o's decay decides). */
static inline __attribute__((always_inline)) TGT void FN(update)(float *w, float *s1, float *s2,
                                                                VT g, const dense_update *o,
                                                                const fuse_kind kind,
                                                                const int decay)
{
    if (kind == FUSE_GRAD) {
        VSTORE(w, g);
        return;
    }
    VT W = VLOAD(w);
    const sgd_scalars *sg = &o->s.sgd;
    const adam_scalars *ad = &o->s.adam;
    switch (kind) {
    case FUSE_GRAD: break;
    case FUSE_SGD:
        W = VSUB(W, VMUL(VSET1(sg->lr), g));
        break;
    case FUSE_MOMENTUM: {
        VT v = VSUB(VMUL(VSET1(sg->momentum), VLOAD(s1)), VMUL(VSET1(sg->lr), g));
        VSTORE(s1, v);
        W = VADD(W, v);
        break;
    }
    case FUSE_NESTEROV: {
        VT mom = VSET1(sg->momentum), lg = VMUL(VSET1(sg->lr), g);
        VT v = VSUB(VMUL(mom, VLOAD(s1)), lg);
        VSTORE(s1, v);
        W = VADD(W, VSUB(VMUL(mom, v), lg));
        break;
    }
    case FUSE_ADAM: {
        if (decay && ad->decay != 0.0f)
            W = VSUB(W, VMUL(W, VSET1(ad->decay)));
        VT m = VLOAD(s1), v = VLOAD(s2);
        m = VADD(m, VMUL(VSUB(g, m), VSET1(ad->c1)));
        v = VADD(v, VMUL(VSUB(VMUL(g, g), v), VSET1(ad->c2)));
        VSTORE(s1, m);
        VSTORE(s2, v);
        W = VSUB(W, VDIV(VMUL(VSET1(ad->alpha), m), VADD(VSQRT(v), VSET1(ad->eps))));
        break;
    }
    }
    VSTORE(w, W);
}

/*
 * A full tile's gradient whose update is pending: n vectors (nj * TILE_V,
 * row a's vector q at a * TILE_V + q) for the weights from w.
 */
typedef struct {
    float *w, *s1, *s2;
    int n;
    float g[TILE_J * TILE_V * VL] __attribute__((aligned(64)));
} FN(pending);

/* The update of the pending tile's vector u. */
static inline __attribute__((always_inline)) TGT void FN(pend_one)(FN(pending) *p, int u,
                                                                  size_t ldw, const dense_update *o,
                                                                  const fuse_kind kind,
                                                                  const int decay)
{
    const int has1 = kind == FUSE_ADAM || p->s1, has2 = kind == FUSE_ADAM || p->s2;
    size_t off = (size_t)(u / TILE_V) * ldw + (size_t)(u % TILE_V) * VL;
    FN(update)(p->w + off, has1 ? p->s1 + off : NULL, has2 ? p->s2 + off : NULL,
               VLOAD(p->g + u * VL), o, kind, decay);
}

/*
 * One tile: nj rows of G from row j (nj <= TILE_J), nv vectors of columns
 * from column c (nv <= TILE_V). nj and nv are constants at every call, so
 * the accumulators live in registers.
 *
 * With pend (a full tile, nv == TILE_V), the update is software-pipelined:
 * this tile's sums carry out the previous tile's update, a vector every
 * other row, and leave this tile's gradient in pend for the next. Each
 * weight gets the same operations as without, so the same bits; the
 * update's loads of W and the slots and its square root and division
 * (about 22 cycles a 16-lane vector of both on an Intel Xeon) then run
 * among the multiply-adds instead of after them: bench/kernels there,
 * interleaved, 0-10% faster on the 784-wide steps (3.5% on average). What
 * it cannot hide: on that core the 512-bit square root and division hold
 * one of the two FMA ports for about 9 cycles a vector, and the update's
 * other ten operations need the same two ports, so the step stays at about
 * two thirds of the sums' speed alone (100-110 against 140-150 GFLOP/s).
 */
static inline __attribute__((always_inline)) TGT void
FN(tile)(float *W, float *s1, float *s2, size_t ldw, const float *dZ, size_t ldd, const float *X,
         size_t ldx, int rows, const dense_update *o, const int nj, const int nv,
         const fuse_kind kind, const int decay, FN(pending) *pend)
{
    int u = 0;
    /* Adam always has both slots: with kind a constant, no test of them. */
    const int has1 = kind == FUSE_ADAM || s1, has2 = kind == FUSE_ADAM || s2;
    VT acc[TILE_J][TILE_V];
    for (int a = 0; a < nj; a++)
        for (int q = 0; q < nv; q++)
            acc[a][q] = VZERO();
    /* The weights and slots the update after the next tile reads: 3 * nj
     * streams, too many for the hardware prefetcher to find alone, and the
     * update waited on them (half the kernel's cycles on an AMD EPYC). The
     * sums below hide the fetch. Only the first line of each row: an
     * AVX-512 tile's rows are 4 lines, and the hardware takes the other 3
     * once it is led to the row; prefetching all 4 (72 prefetches a tile)
     * was 4% slower on an Intel Xeon (bench/kernels, 784-wide steps, 8
     * interleaved runs), and on the Zen 5 within 2% either way. */
    for (int a = 0; a < nj; a++) {
        size_t off = (size_t)a * ldw + (size_t)(PF_DIST * nv * VL);
        _mm_prefetch((const char *)(W + off), _MM_HINT_T0);
        if (has1)
            _mm_prefetch((const char *)(s1 + off), _MM_HINT_T0);
        if (has2)
            _mm_prefetch((const char *)(s2 + off), _MM_HINT_T0);
    }
    for (int r = 0; r < rows; r++) {
        const float *x = X + (size_t)r * ldx, *d = dZ + (size_t)r * ldd;
        VT xv[TILE_V];
#if NV * VL == 16
        /* The next tile's cache line of this row of X: the rows are far
         * apart (a row of inputs each), and fetched one tile ahead the sums
         * stop waiting on them (bench/kernels on an AMD EPYC: 8% on the
         * 784-wide step). Only where a tile's columns are one line (AVX2);
         * AVX-512's four lines a row are left to the hardware, unmeasured. */
        _mm_prefetch((const char *)(x + nv * VL), _MM_HINT_T0);
#endif
        for (int q = 0; q < nv; q++)
            xv[q] = VLOAD(x + q * VL);
        for (int a = 0; a < nj; a++) {
            VT b = VSET1(d[a]);
            for (int q = 0; q < nv; q++)
                acc[a][q] = VFMA(b, xv[q], acc[a][q]);
        }
        if (pend && (r & 1) && u < pend->n) {
            FN(pend_one)(pend, u, ldw, o, kind, decay);
            u++;
        }
    }
    if (pend) {
        /* What the row loop left of the last tile's update, then this
         * tile's gradient in its place. */
        for (; u < pend->n; u++)
            FN(pend_one)(pend, u, ldw, o, kind, decay);
        for (int a = 0; a < nj; a++)
            for (int q = 0; q < nv; q++)
                VSTORE(pend->g + (a * TILE_V + q) * VL, acc[a][q]);
        pend->w = W;
        pend->s1 = s1;
        pend->s2 = s2;
        pend->n = nj * TILE_V;
        return;
    }
    for (int a = 0; a < nj; a++)
        for (int q = 0; q < nv; q++) {
            size_t off = (size_t)a * ldw + (size_t)q * VL;
            FN(update)(W + off, has1 ? s1 + off : NULL, has2 ? s2 + off : NULL, acc[a][q], o,
                       kind, decay);
        }
}

/* Rows [j, j + nj) over the vector columns [0, nvec * VL), nj a constant. */
static inline __attribute__((always_inline)) TGT void
FN(rows)(float *W, float *s1, float *s2, size_t ldw, const float *dZ, size_t ldd, const float *X,
         size_t ldx, int rows, int nvec, const dense_update *o, const int nj, const fuse_kind kind,
         const int decay)
{
    int q = 0;
    /* The full tiles' updates pipelined where there are two or more (a
     * gradient alone is stored as it is). */
    FN(pending) *pp = NULL;
#ifdef PIPE_UPDATE
    FN(pending) pend;
    if (nvec >= 2 * TILE_V && kind != FUSE_GRAD) {
        pend.n = 0;
        pp = &pend;
    }
#endif
    for (; q + TILE_V <= nvec; q += TILE_V) {
        size_t c = (size_t)q * VL;
        FN(tile)(W + c, s1 ? s1 + c : NULL, s2 ? s2 + c : NULL, ldw, dZ, ldd, X + c, ldx, rows, o,
                 nj, TILE_V, kind, decay, pp);
    }
    for (int u = 0; pp && u < pp->n; u++)
        FN(pend_one)(pp, u, ldw, o, kind, decay);
    for (; q < nvec; q++) {
        size_t c = (size_t)q * VL;
        FN(tile)(W + c, s1 ? s1 + c : NULL, s2 ? s2 + c : NULL, ldw, dZ, ldd, X + c, ldx, rows, o,
                 nj, 1, kind, decay, NULL);
    }
}

/* nvec vectors of columns of rows [j0, j1), W's rows (and the slots') ldw
 * floats apart. */
static TGT void FN(dense_step_cols)(float *W, float *s1, float *s2, const float *dZ, size_t ldd,
                                    const float *X, size_t ldx, int rows, int nvec, size_t ldw,
                                    int j0, int j1, const dense_update *o)
{
    float pack[DENSE_PACK_ROWS * TILE_J];
    /* The scalars copied here: stores to W cannot change a local, so they
     * stay in registers instead of being loaded again after every store. */
    const dense_update sc = *o;
    o = &sc;
    for (int j = j0; j < j1;) {
        int nj = j1 - j < TILE_J ? j1 - j : TILE_J;
        size_t off = (size_t)j * ldw;
        float *w = W + off, *a = s1 ? s1 + off : NULL, *b = s2 ? s2 + off : NULL;
        const float *d = dZ + j;
        size_t ld = ldd;
        /* The tile's dZ columns, packed: every tile of these rows reads them,
         * and in place they are one cache line per row at a stride of ldd
         * floats, which for ldd a multiple of 256 (a 512-wide layer) sends
         * all the rows to 2 of the 64 sets of a 32 KiB L1: they were missed
         * again on every tile. */
        if (rows <= DENSE_PACK_ROWS && nvec > 0) {
            for (int r = 0; r < rows; r++)
                for (int k = 0; k < nj; k++)
                    pack[r * TILE_J + k] = d[(size_t)r * ldd + (size_t)k];
            d = pack;
            ld = TILE_J;
        }
        switch (nj) {
        case 6:
            /* Full row groups with Adam, most of the work, get the update
             * without its switch (the kind a constant) */
            if (o->kind == FUSE_ADAM && o->s.adam.decay == 0.0f)
                FN(rows)(w, a, b, ldw, d, ld, X, ldx, rows, nvec, o, 6, FUSE_ADAM, 0);
            else if (o->kind == FUSE_ADAM)
                FN(rows)(w, a, b, ldw, d, ld, X, ldx, rows, nvec, o, 6, FUSE_ADAM, 1);
            else if (o->kind == FUSE_GRAD)
                FN(rows)(w, a, b, ldw, d, ld, X, ldx, rows, nvec, o, 6, FUSE_GRAD, 0);
            else
                FN(rows)(w, a, b, ldw, d, ld, X, ldx, rows, nvec, o, 6, o->kind, 1);
            break;
        case 5: FN(rows)(w, a, b, ldw, d, ld, X, ldx, rows, nvec, o, 5, o->kind, 1); break;
        case 4: FN(rows)(w, a, b, ldw, d, ld, X, ldx, rows, nvec, o, 4, o->kind, 1); break;
        case 3: FN(rows)(w, a, b, ldw, d, ld, X, ldx, rows, nvec, o, 3, o->kind, 1); break;
        case 2: FN(rows)(w, a, b, ldw, d, ld, X, ldx, rows, nvec, o, 2, o->kind, 1); break;
        default: FN(rows)(w, a, b, ldw, d, ld, X, ldx, rows, nvec, o, 1, o->kind, 1); break;
        }
        j += nj;
    }
}

/* The vector columns of n_in columns of rows [j0, j1), W's rows (and the
 * slots') ldw floats apart; the caller does the scalar tail. Every row
 * group reads its columns of X over all the rows: where X is bigger than a
 * core's L2 (a batch of 1024 of 784 inputs: 3 MiB), each row group fetched
 * it again from L3, and the step ran at that bandwidth's pace. In stripes
 * of columns (kern_dense_stripe) each stripe stays in L2 for all the row
 * groups; each element of G is the same sum. */
static TGT void FN(dense_step)(float *W, float *s1, float *s2, const float *dZ, size_t ldd,
                               const float *X, size_t ldx, int rows, int n_in, size_t ldw,
                               int j0, int j1, const dense_update *o)
{
    int nvec = n_in / VL, stripe = kern_dense_stripe(rows, nvec, VL, TILE_V);
    for (int v0 = 0; v0 < nvec; v0 += stripe) {
        size_t c = (size_t)v0 * VL;
        FN(dense_step_cols)(W + c, s1 ? s1 + c : NULL, s2 ? s2 + c : NULL, dZ, ldd, X + c, ldx,
                            rows, nvec - v0 < stripe ? nvec - v0 : stripe, ldw, j0, j1, o);
    }
}

/*
 * Forward tile: Y[r][j + a] = sum over c < n_in of W[(j + a) * n_in + c] *
 * XT[c * ldt + r] for a < nj, r in [r0, r0 + nv * VL) (rows past `rows`
 * are computed and dropped).
 */
static inline __attribute__((always_inline)) TGT void
FN(fwd_tile)(float *Y, size_t ldy, const float *W, int n_in, const float *XT, size_t ldt, int r0,
             int rows, const int nj, const int nv)
{
    VT acc[TILE_J][TILE_V];
    for (int a = 0; a < nj; a++)
        for (int q = 0; q < nv; q++)
            acc[a][q] = VZERO();
    for (int c = 0; c < n_in; c++) {
        const float *x = XT + (size_t)c * ldt + r0;
        VT xv[TILE_V];
        for (int q = 0; q < nv; q++)
            xv[q] = VLOAD(x + q * VL);
        for (int a = 0; a < nj; a++) {
            VT b = VSET1(W[(size_t)a * (size_t)n_in + (size_t)c]);
            for (int q = 0; q < nv; q++)
                acc[a][q] = VFMA(b, xv[q], acc[a][q]);
        }
    }
    float buf[TILE_J][TILE_V * VL];
    for (int a = 0; a < nj; a++)
        for (int q = 0; q < nv; q++)
            VSTORE(buf[a] + q * VL, acc[a][q]);
    int end = r0 + nv * VL < rows ? r0 + nv * VL : rows;
    for (int r = r0; r < end; r++)
        for (int a = 0; a < nj; a++)
            Y[(size_t)r * ldy + (size_t)a] = buf[a][r - r0];
}

static inline __attribute__((always_inline)) TGT void
FN(fwd_rows)(float *Y, size_t ldy, const float *W, int n_in, const float *XT, size_t ldt, int rows,
             const int nj)
{
    int nvec = (rows + VL - 1) / VL, q = 0;
    for (; q + TILE_V <= nvec; q += TILE_V)
        FN(fwd_tile)(Y, ldy, W, n_in, XT, ldt, q * VL, rows, nj, TILE_V);
    switch (nvec - q) {
#if NV > 3
    case 3: FN(fwd_tile)(Y, ldy, W, n_in, XT, ldt, q * VL, rows, nj, 3); break;
#endif
#if NV > 2
    case 2: FN(fwd_tile)(Y, ldy, W, n_in, XT, ldt, q * VL, rows, nj, 2); break;
#endif
    case 1: FN(fwd_tile)(Y, ldy, W, n_in, XT, ldt, q * VL, rows, nj, 1); break;
    default: break;
    }
}

/* Columns [j0, j1) of Y = X·Wᵀ, X given transposed (XT: n_in x ldt, ldt a
 * multiple of VL at least rows). */
static TGT void FN(dense_fwd)(float *Y, size_t ldy, const float *W, const float *XT, size_t ldt,
                              int rows, int n_in, int j0, int j1)
{
    for (int j = j0; j < j1;) {
        int nj = j1 - j < TILE_J ? j1 - j : TILE_J;
        const float *w = W + (size_t)j * (size_t)n_in;
        float *y = Y + j;
        switch (nj) {
        case 6: FN(fwd_rows)(y, ldy, w, n_in, XT, ldt, rows, 6); break;
        case 5: FN(fwd_rows)(y, ldy, w, n_in, XT, ldt, rows, 5); break;
        case 4: FN(fwd_rows)(y, ldy, w, n_in, XT, ldt, rows, 4); break;
        case 3: FN(fwd_rows)(y, ldy, w, n_in, XT, ldt, rows, 3); break;
        case 2: FN(fwd_rows)(y, ldy, w, n_in, XT, ldt, rows, 2); break;
        default: FN(fwd_rows)(y, ldy, w, n_in, XT, ldt, rows, 1); break;
        }
        j += nj;
    }
}

/*
 * A small product's register tile: C[a][q * VL + l] = sum over k < K, in
 * order, of A[a * lda + k] * B[k * ldb + q * VL + l], one fused multiply-add
 * each, for a < nj and q < nv; only the first ncols columns are stored (B
 * has nv * VL readable columns). nj and nv are constants at every call.
 */
static inline __attribute__((always_inline)) TGT void
FN(mm_tile)(float *C, size_t ldc, const float *A, size_t lda, const float *B, size_t ldb, int K,
            const int nj, const int nv, int ncols)
{
    VT acc[TILE_J][TILE_V];
    for (int a = 0; a < nj; a++)
        for (int q = 0; q < nv; q++)
            acc[a][q] = VZERO();
    for (int k = 0; k < K; k++) {
        const float *b = B + (size_t)k * ldb;
        VT bv[TILE_V];
        for (int q = 0; q < nv; q++)
            bv[q] = VLOAD(b + q * VL);
        for (int a = 0; a < nj; a++) {
            VT x = VSET1(A[(size_t)a * lda + (size_t)k]);
            for (int q = 0; q < nv; q++)
                acc[a][q] = VFMA(x, bv[q], acc[a][q]);
        }
    }
    if (ncols == nv * VL) {
        for (int a = 0; a < nj; a++)
            for (int q = 0; q < nv; q++)
                VSTORE(C + (size_t)a * ldc + (size_t)q * VL, acc[a][q]);
        return;
    }
    float buf[TILE_V * VL];
    for (int a = 0; a < nj; a++) {
        for (int q = 0; q < nv; q++)
            VSTORE(buf + q * VL, acc[a][q]);
        for (int c = 0; c < ncols; c++)
            C[(size_t)a * ldc + (size_t)c] = buf[c];
    }
}

/* Rows [m, m + nj) of C over columns [0, nvec * VL) (vectors of B), the
 * last ncols_last columns of the last vector group stored (see mm_tile). */
static inline __attribute__((always_inline)) TGT void
FN(mm_rows)(float *C, size_t ldc, const float *A, size_t lda, const float *B, size_t ldb, int K,
            int nvec, int ncols, const int nj)
{
    int q = 0;
    for (; q + TILE_V <= nvec; q += TILE_V) {
        int n = ncols - q * VL < TILE_V * VL ? ncols - q * VL : TILE_V * VL;
        FN(mm_tile)(C + (size_t)q * VL, ldc, A, lda, B + (size_t)q * VL, ldb, K, nj, TILE_V, n);
    }
    for (; q < nvec; q++) {
        int n = ncols - q * VL < VL ? ncols - q * VL : VL;
        FN(mm_tile)(C + (size_t)q * VL, ldc, A, lda, B + (size_t)q * VL, ldb, K, nj, 1, n);
    }
}

/* Rows [m0, m1) of C = A·B over the columns [0, ncols) that B's nvec
 * vectors hold (ncols <= nvec * VL; B readable over nvec * VL columns). */
static TGT void FN(small_mm)(float *C, size_t ldc, const float *A, size_t lda, const float *B,
                             size_t ldb, int m0, int m1, int nvec, int ncols, int K)
{
    for (int m = m0; m < m1;) {
        int nj = m1 - m < TILE_J ? m1 - m : TILE_J;
        float *c = C + (size_t)m * ldc;
        const float *a = A + (size_t)m * lda;
        switch (nj) {
        case 6: FN(mm_rows)(c, ldc, a, lda, B, ldb, K, nvec, ncols, 6); break;
        case 5: FN(mm_rows)(c, ldc, a, lda, B, ldb, K, nvec, ncols, 5); break;
        case 4: FN(mm_rows)(c, ldc, a, lda, B, ldb, K, nvec, ncols, 4); break;
        case 3: FN(mm_rows)(c, ldc, a, lda, B, ldb, K, nvec, ncols, 3); break;
        case 2: FN(mm_rows)(c, ldc, a, lda, B, ldb, K, nvec, ncols, 2); break;
        default: FN(mm_rows)(c, ldc, a, lda, B, ldb, K, nvec, ncols, 1); break;
        }
        m += nj;
    }
}

#undef TILE_J
#undef TILE_V
#undef FN
#undef CAT
#undef CAT2
