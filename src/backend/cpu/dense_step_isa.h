/*
 * The body of kern_dense_step for one vector ISA, included once per ISA by
 * dense_step.c with these defined:
 *   SFX          suffix of the function names (avx512, avx2)
 *   TGT          the target attribute of every function here
 *   VT, VL       the vector type and its lanes
 *   VLOAD VSTORE VSET1 VZERO VFMA VADD VSUB VMUL VDIV VSQRT
 * VFMA(a, b, c) is a*b + c with one rounding; the others are the plain ops.
 */
#define CAT2(a, b) a##_##b
#define CAT(a, b) CAT2(a, b)
#define FN(name) CAT(name, SFX)

/* The rows of one register tile; columns go by NV vectors. */
#define TILE_J 6
#define TILE_V 4

/* The optimizer step of VL consecutive weights from their gradient g. */
static inline __attribute__((always_inline)) TGT void FN(update)(float *w, float *s1, float *s2,
                                                                VT g, const step_scalars *o)
{
    VT W = VLOAD(w);
    switch (o->kind) {
    case STEP_SGD:
        W = VSUB(W, VMUL(VSET1(o->lr), g));
        break;
    case STEP_MOMENTUM: {
        VT v = VSUB(VMUL(VSET1(o->momentum), VLOAD(s1)), VMUL(VSET1(o->lr), g));
        VSTORE(s1, v);
        W = VADD(W, v);
        break;
    }
    case STEP_NESTEROV: {
        VT mom = VSET1(o->momentum), lg = VMUL(VSET1(o->lr), g);
        VT v = VSUB(VMUL(mom, VLOAD(s1)), lg);
        VSTORE(s1, v);
        W = VADD(W, VSUB(VMUL(mom, v), lg));
        break;
    }
    case STEP_ADAM: {
        if (o->decay != 0.0f)
            W = VSUB(W, VMUL(W, VSET1(o->decay)));
        VT m = VLOAD(s1), v = VLOAD(s2);
        m = VADD(m, VMUL(VSUB(g, m), VSET1(o->c1)));
        v = VADD(v, VMUL(VSUB(VMUL(g, g), v), VSET1(o->c2)));
        VSTORE(s1, m);
        VSTORE(s2, v);
        W = VSUB(W, VDIV(VMUL(VSET1(o->alpha), m), VADD(VSQRT(v), VSET1(o->eps))));
        break;
    }
    }
    VSTORE(w, W);
}

/*
 * One tile: nj rows of G from row j (nj <= TILE_J), nv vectors of columns
 * from column c (nv <= TILE_V). nj and nv are constants at every call, so
 * the accumulators live in registers.
 */
static inline __attribute__((always_inline)) TGT void
FN(tile)(float *W, float *s1, float *s2, size_t ldw, const float *dZ, size_t ldd, const float *X,
         size_t ldx, int rows, const step_scalars *o, const int nj, const int nv)
{
    VT acc[TILE_J][TILE_V];
    for (int a = 0; a < nj; a++)
        for (int q = 0; q < nv; q++)
            acc[a][q] = VZERO();
    for (int r = 0; r < rows; r++) {
        const float *x = X + (size_t)r * ldx, *d = dZ + (size_t)r * ldd;
        VT xv[TILE_V];
        for (int q = 0; q < nv; q++)
            xv[q] = VLOAD(x + q * VL);
        for (int a = 0; a < nj; a++) {
            VT b = VSET1(d[a]);
            for (int q = 0; q < nv; q++)
                acc[a][q] = VFMA(b, xv[q], acc[a][q]);
        }
    }
    for (int a = 0; a < nj; a++)
        for (int q = 0; q < nv; q++) {
            size_t off = (size_t)a * ldw + (size_t)q * VL;
            FN(update)(W + off, s1 ? s1 + off : NULL, s2 ? s2 + off : NULL, acc[a][q], o);
        }
}

/* Rows [j, j + nj) over the vector columns [0, nvec * VL), nj a constant. */
static inline __attribute__((always_inline)) TGT void
FN(rows)(float *W, float *s1, float *s2, size_t ldw, const float *dZ, size_t ldd, const float *X,
         size_t ldx, int rows, int nvec, const step_scalars *o, const int nj)
{
    int q = 0;
    for (; q + TILE_V <= nvec; q += TILE_V) {
        size_t c = (size_t)q * VL;
        FN(tile)(W + c, s1 ? s1 + c : NULL, s2 ? s2 + c : NULL, ldw, dZ, ldd, X + c, ldx, rows, o,
                 nj, TILE_V);
    }
    for (; q < nvec; q++) {
        size_t c = (size_t)q * VL;
        FN(tile)(W + c, s1 ? s1 + c : NULL, s2 ? s2 + c : NULL, ldw, dZ, ldd, X + c, ldx, rows, o,
                 nj, 1);
    }
}

/* The vector columns of rows [j0, j1); the caller does the scalar tail. */
static TGT void FN(dense_step)(float *W, float *s1, float *s2, const float *dZ, size_t ldd,
                               const float *X, size_t ldx, int rows, int n_in, int j0, int j1,
                               const step_scalars *o)
{
    int nvec = n_in / VL;
    size_t ldw = (size_t)n_in;
    for (int j = j0; j < j1;) {
        int nj = j1 - j < TILE_J ? j1 - j : TILE_J;
        size_t off = (size_t)j * ldw;
        float *w = W + off, *a = s1 ? s1 + off : NULL, *b = s2 ? s2 + off : NULL;
        const float *d = dZ + j;
        switch (nj) {
        case 6: FN(rows)(w, a, b, ldw, d, ldd, X, ldx, rows, nvec, o, 6); break;
        case 5: FN(rows)(w, a, b, ldw, d, ldd, X, ldx, rows, nvec, o, 5); break;
        case 4: FN(rows)(w, a, b, ldw, d, ldd, X, ldx, rows, nvec, o, 4); break;
        case 3: FN(rows)(w, a, b, ldw, d, ldd, X, ldx, rows, nvec, o, 3); break;
        case 2: FN(rows)(w, a, b, ldw, d, ldd, X, ldx, rows, nvec, o, 2); break;
        default: FN(rows)(w, a, b, ldw, d, ldd, X, ldx, rows, nvec, o, 1); break;
        }
        j += nj;
    }
}

#undef TILE_J
#undef TILE_V
#undef FN
#undef CAT
#undef CAT2
