#include "backend/cpu/dense_step.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int dense_fuses(opt_kind kind) { return kind == OPT_SGD || kind == OPT_ADAM || kind == OPT_ADAMW; }

dense_update dense_update_of(opt_kind kind, const optim_scalars *s)
{
    dense_update u = {FUSE_ADAM, *s};
    if (kind == OPT_SGD)
        u.kind = s->sgd.mode == SGD_PLAIN      ? FUSE_SGD
                 : s->sgd.mode == SGD_NESTEROV ? FUSE_NESTEROV
                                               : FUSE_MOMENTUM;
    return u;
}

void kern_dense_update(float *w, const float *g, float *s1, float *s2, size_t n,
                       const dense_update *u)
{
    /* The scalars copied here: stores to w cannot change a local. */
    const optim_scalars c = u->s;
    switch (u->kind) {
    case FUSE_GRAD:
        memcpy(w, g, n * sizeof *w);
        break;
    case FUSE_SGD:
        for (size_t i = 0; i < n; i++)
            sgd_update(w + i, g[i], NULL, NULL, &c.sgd);
        break;
    case FUSE_MOMENTUM:
    case FUSE_NESTEROV:
        for (size_t i = 0; i < n; i++)
            sgd_update(w + i, g[i], s1 + i, NULL, &c.sgd);
        break;
    case FUSE_ADAM:
        for (size_t i = 0; i < n; i++)
            adam_update(w + i, g[i], s1 + i, s2 + i, &c.adam);
        break;
    }
}

void part_range(int n, int unit, int part, int parts, int *a, int *b)
{
    int units = (n + unit - 1) / unit;
    int end = units * (part + 1) / parts * unit;
    *a = units * part / parts * unit;
    *b = end < n ? end : n;
}

/* Columns [c0, n_in) of rows [j0, j1): G a chunk of columns at a time, then
 * kern_dense_update over the chunk. */
static void dense_step_scalar(float *W, float *s1, float *s2, const float *dZ, size_t ldd,
                              const float *X, size_t ldx, int rows, int n_in, int c0, int j0,
                              int j1, const dense_update *o)
{
    enum { CHUNK = 64 };
    float g[CHUNK];
    for (int j = j0; j < j1; j++)
        for (int c1 = c0; c1 < n_in; c1 += CHUNK) {
            int n = n_in - c1 < CHUNK ? n_in - c1 : CHUNK;
            for (int c = 0; c < n; c++) {
                const float *x = X + c1 + c;
                float acc = 0.0f;
                for (int r = 0; r < rows; r++)
                    acc = fmaf(dZ[(size_t)r * ldd + (size_t)j], x[(size_t)r * ldx], acc);
                g[c] = acc;
            }
            size_t i = (size_t)j * (size_t)n_in + (size_t)c1;
            kern_dense_update(W + i, g, s1 ? s1 + i : NULL, s2 ? s2 + i : NULL, (size_t)n, o);
        }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define SFX avx512
#define TGT __attribute__((target("avx512f")))
#define VT __m512
#define VL 16
#define NV 4 /* 6 x 4 accumulators, 4 loads, a broadcast: 29 of 32 registers */
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, x) _mm512_storeu_ps(p, x)
#define VSET1(x) _mm512_set1_ps(x)
#define VZERO() _mm512_setzero_ps()
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VSUB(a, b) _mm512_sub_ps(a, b)
#define VMUL(a, b) _mm512_mul_ps(a, b)
#define VDIV(a, b) _mm512_div_ps(a, b)
#define VSQRT(a) _mm512_sqrt_ps(a)
#define PIPE_UPDATE
#include "backend/cpu/dense_step_isa.h"
#undef SFX
#undef TGT
#undef VT
#undef VL
#undef NV
#undef VLOAD
#undef VSTORE
#undef VSET1
#undef VZERO
#undef VFMA
#undef VADD
#undef VSUB
#undef VMUL
#undef VDIV
#undef VSQRT
#undef PIPE_UPDATE

#define SFX avx2
#define TGT __attribute__((target("avx2,fma")))
#define VT __m256
#define VL 8
#define NV 2 /* 6 x 2 accumulators, 2 loads, a broadcast: 15 of 16 registers */
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, x) _mm256_storeu_ps(p, x)
#define VSET1(x) _mm256_set1_ps(x)
#define VZERO() _mm256_setzero_ps()
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VSUB(a, b) _mm256_sub_ps(a, b)
#define VMUL(a, b) _mm256_mul_ps(a, b)
#define VDIV(a, b) _mm256_div_ps(a, b)
#define VSQRT(a) _mm256_sqrt_ps(a)
#include "backend/cpu/dense_step_isa.h"

#endif

void kern_dense_step(cpu_isa isa, float *W, float *s1, float *s2, const float *dZ, size_t ldd,
                     const float *X, size_t ldx, int rows, int n_in, int j0, int j1,
                     const dense_update *o)
{
    int done = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    size_t ldw = (size_t)n_in;
    if (isa == ISA_AVX512) {
        dense_step_avx512(W, s1, s2, dZ, ldd, X, ldx, rows, n_in, ldw, j0, j1, o);
        done = n_in / 16 * 16;
    }
    /* AVX-512's last 8 columns or more of a row (a width of 1000: 8 of
     * them) in one AVX2 vector: the scalar tail, one sum at a time along a
     * column of X, took 6% of a 784-1000-1000-10 Adam epoch on a Zen 5 for
     * 0.8% of the work. Each sum is the same FMA chain over the rows in
     * order, so the same bits. */
    if (isa >= ISA_AVX2 && n_in - done >= 8) {
        dense_step_avx2(W + done, s1 ? s1 + done : NULL, s2 ? s2 + done : NULL, dZ, ldd, X + done,
                        ldx, rows, n_in - done, ldw, j0, j1, o);
        done += (n_in - done) / 8 * 8;
    }
#else
    (void)isa;
#endif
    if (done < n_in)
        dense_step_scalar(W, s1, s2, dZ, ldd, X, ldx, rows, n_in, done, j0, j1, o);
}

int kern_dense_stripe(int rows, int nvec, int vl, int tile_v)
{
    size_t row_bytes = (size_t)(rows > 0 ? rows : 1) * (size_t)vl * sizeof(float);
    if ((size_t)nvec * row_bytes <= DENSE_STRIPE_BYTES)
        return nvec > 0 ? nvec : 1;
    int v = (int)(DENSE_STRIPE_BYTES / row_bytes) / tile_v * tile_v;
    return v < 2 * tile_v ? 2 * tile_v : v;
}

/*
 * Rounded to AVX-512's vector under AVX2 too: the paths depend on this width
 * (a later layer's forward from its input transposed where it fits in the
 * layer's gradient, kern_small_nt's transposed form where it fits on the
 * stack, else OpenBLAS, whose sums are in another order), and AVX2 and
 * AVX-512 must take the same ones to give the same bits. Rounded to 8 under
 * AVX2, 33 rows of 785 inputs took the own kernels there and OpenBLAS under
 * AVX-512. The AVX2 kernels read only the vectors the rows need.
 */
int kern_dense_fwd_ld(cpu_isa isa, int rows)
{
    (void)isa;
    return (rows + DECIDE_VL - 1) / DECIDE_VL * DECIDE_VL;
}

#if defined(__x86_64__) && defined(__GNUC__)
/*
 * dst (8 x 8, leading dimension ldd) = src (8 x 8, lds) transposed. Each
 * vector starts as the same four columns of rows i and i + 4 (a load and an
 * insert, which needs no shuffle port); a 4 x 4 transpose in each 128-bit
 * lane then leaves whole columns: 16 shuffles for 64 floats, where unpacks,
 * shuffles and cross-lane permutes of whole rows took 32 (3% faster on an
 * Intel Xeon, whose stores limit it more; see kern_transpose).
 */
__attribute__((target("avx"))) static void transpose8(float *dst, size_t ldd, const float *src,
                                                      size_t lds)
{
    __m256 t[8];
    for (int i = 0; i < 4; i++) {
        const float *a = src + (size_t)i * lds, *b = src + (size_t)(i + 4) * lds;
        t[i] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(a)), _mm_loadu_ps(b), 1);
        t[i + 4] =
            _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(a + 4)), _mm_loadu_ps(b + 4), 1);
    }
    /* t[h + i], h = 0 or 4: columns h .. h + 3 of rows i (low lane) and
     * i + 4 (high lane). */
    for (int h = 0; h < 8; h += 4) {
        __m256 lo01 = _mm256_unpacklo_ps(t[h], t[h + 1]), hi01 = _mm256_unpackhi_ps(t[h], t[h + 1]);
        __m256 lo23 = _mm256_unpacklo_ps(t[h + 2], t[h + 3]),
               hi23 = _mm256_unpackhi_ps(t[h + 2], t[h + 3]);
        _mm256_storeu_ps(dst + (size_t)h * ldd, _mm256_shuffle_ps(lo01, lo23, 0x44));
        _mm256_storeu_ps(dst + (size_t)(h + 1) * ldd, _mm256_shuffle_ps(lo01, lo23, 0xee));
        _mm256_storeu_ps(dst + (size_t)(h + 2) * ldd, _mm256_shuffle_ps(hi01, hi23, 0x44));
        _mm256_storeu_ps(dst + (size_t)(h + 3) * ldd, _mm256_shuffle_ps(hi01, hi23, 0xee));
    }
}

/*
 * dst (16 x 16, leading dimension ldd) = src (16 x 16, lds) transposed: 64
 * shuffles for 256 floats, where 8 x 8 blocks take 128. Shuffles have one
 * port on an Intel core, and the 8 x 8 blocks made the transpose of each
 * batch's inputs 4.5% of the seed run's cycles there.
 */
__attribute__((target("avx512f"))) static void transpose16(float *dst, size_t ldd,
                                                            const float *src, size_t lds)
{
    __m512 r[16], t[16], u[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_loadu_ps(src + (size_t)i * lds);
    /* In each 128-bit lane: pairs of rows interleaved, then groups of four
     * rows: u[4g + j], lane L, is column 4L + j of rows 4g .. 4g + 3. */
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        u[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xee);
        u[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    /* Then the lanes: column 4L + j gathers lane L of u[j], u[4 + j],
     * u[8 + j], u[12 + j]. */
    for (int j = 0; j < 4; j++) {
        __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);
        __m512 w0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xdd);
        __m512 v1 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
        __m512 w1 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xdd);
        _mm512_storeu_ps(dst + (size_t)j * ldd, _mm512_shuffle_f32x4(v0, v1, 0x88));
        _mm512_storeu_ps(dst + (size_t)(8 + j) * ldd, _mm512_shuffle_f32x4(v0, v1, 0xdd));
        _mm512_storeu_ps(dst + (size_t)(4 + j) * ldd, _mm512_shuffle_f32x4(w0, w1, 0x88));
        _mm512_storeu_ps(dst + (size_t)(12 + j) * ldd, _mm512_shuffle_f32x4(w0, w1, 0xdd));
    }
}

/*
 * The blocks (b x b, by `block`) of rows [0, rb) and columns [0, cb), in
 * bands of 64 rows with the columns outermost in each: a band's stores then
 * fill the 4 lines of each row of XT it writes one after the other, where
 * rows outermost left each line half written (AVX2) or its lines far apart
 * in time, for the next band of rows to fetch again. On an Intel Xeon, a
 * 64 x 784 batch: AVX2 5.1 us against 10.4, AVX-512 5.0 against 5.9.
 */
static void transpose_bands(void (*block)(float *, size_t, const float *, size_t), int b,
                            float *XT, size_t ldt, const float *X, size_t ldx, int rb, int cb)
{
    enum { BAND = 64 };
    for (int rc = 0; rc < rb; rc += BAND)
        for (int c0 = 0; c0 < cb; c0 += b)
            for (int r0 = rc; r0 < rb && r0 < rc + BAND; r0 += b)
                block(XT + (size_t)c0 * ldt + (size_t)r0, ldt, X + (size_t)r0 * ldx + (size_t)c0,
                      ldx);
}
#endif

void kern_transpose(cpu_isa isa, float *XT, size_t ldt, const float *X, size_t ldx, int rows,
                    int cols)
{
    int rb = 0, cb = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa != ISA_NONE) {
        int b = isa == ISA_AVX512 ? 16 : 8;
        rb = rows / b * b;
        cb = cols / b * b;
        transpose_bands(isa == ISA_AVX512 ? transpose16 : transpose8, b, XT, ldt, X, ldx, rb, cb);
    }
#else
    (void)isa;
#endif
    /* What the blocks left: the last rows, then the last columns. */
    for (int c = 0; c < cols; c++)
        for (int r = c < cb ? rb : 0; r < rows; r++)
            XT[(size_t)c * ldt + (size_t)r] = X[(size_t)r * ldx + (size_t)c];
}

void kern_dense_fwd(cpu_isa isa, float *Y, size_t ldy, const float *W, const float *XT, size_t ldt,
                    int rows, int n_in, int j0, int j1)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa == ISA_AVX512) {
        dense_fwd_avx512(Y, ldy, W, XT, ldt, rows, n_in, j0, j1);
        return;
    }
    if (isa == ISA_AVX2) {
        dense_fwd_avx2(Y, ldy, W, XT, ldt, rows, n_in, j0, j1);
        return;
    }
#endif
    for (int r = 0; r < rows; r++)
        for (int j = j0; j < j1; j++) {
            const float *w = W + (size_t)j * (size_t)n_in;
            float y = 0.0f;
            for (int c = 0; c < n_in; c++)
                y = fmaf(w[c], XT[(size_t)c * ldt + (size_t)r], y);
            Y[(size_t)r * ldy + (size_t)j] = y;
        }
}

/* C's columns [c0, N) of rows [m0, m1): the scalar form of every vector
 * width's sums. B's element (k, n) is B[k * sk + n * sn]. */
static void small_scalar(float *C, size_t ldc, const float *A, size_t lda, const float *B,
                         size_t sk, size_t sn, int m0, int m1, int c0, int N, int K)
{
    for (int m = m0; m < m1; m++)
        for (int n = c0; n < N; n++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++)
                acc = fmaf(A[(size_t)m * lda + (size_t)k], B[(size_t)k * sk + (size_t)n * sn], acc);
            C[(size_t)m * ldc + (size_t)n] = acc;
        }
}

void kern_small_nn(cpu_isa isa, float *C, size_t ldc, const float *A, size_t lda, const float *B,
                   size_t ldb, int m0, int m1, int N, int K)
{
    int done = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa == ISA_AVX512) {
        done = N / 16 * 16;
        if (done)
            small_mm_avx512(C, ldc, A, lda, B, ldb, m0, m1, done / 16, done, K);
    } else if (isa == ISA_AVX2) {
        done = N / 8 * 8;
        if (done)
            small_mm_avx2(C, ldc, A, lda, B, ldb, m0, m1, done / 8, done, K);
    }
#else
    (void)isa;
#endif
    if (done < N)
        small_scalar(C, ldc, A, lda, B, ldb, 1, m0, m1, done, N, K);
}

/*
 * Where the small kernels beat OpenBLAS, measured on an AMD EPYC (AVX2, one
 * core), OpenBLAS against own: forward A·Bᵀ from A transposed and input
 * gradient A·B, 64 x 10 x 128 6.1 and 3.7 us, 64 x 128 x 10 5.7 and 2.9 us;
 * 64 x 10 x 512 23.0 and 14.2 us, 64 x 512 x 10 27.1 and 13.1 us. A·Bᵀ with
 * Bᵀ packed runs its vectors over N, 10 of 16 lanes used for N = 10: slower
 * than OpenBLAS past an inner dimension of about 256 (64 x 10 x 512: 17.1
 * against 21.2 us), so it is used up to SMALL_NT_PACK_K. A·B's columns past
 * the last whole vector are scalar: at most an eighth of them (43264 x 9 x
 * 16, a 3 x 3 convolution's input gradient: 8 columns in a vector, 1 alone,
 * and OpenBLAS was faster). A fused group's convolutions take the same path
 * where they qualify (43264 x 16 x 9, a 3 x 3 convolution's forward over 64
 * images of 26 x 26: 685 against 244 us; 10816 x 144 x 32, an input
 * gradient: 4221 against 2217 us).
 */
#define SMALL_NN_K 32       /* the inner dimension of A·B at most */
#define SMALL_NT_PACK_K 192 /* the inner dimension of A·Bᵀ with Bᵀ packed at most */

typedef enum { NT_SCALAR, NT_TRANSPOSED, NT_PACKED } small_nt_form;

/* How kern_small_nt computes `rows` rows of C. */
static small_nt_form nt_form(cpu_isa isa, int rows, int N, int K, size_t ldb)
{
    if (isa == ISA_NONE || rows <= 0 || N > KERN_SMALL_NT_N)
        return NT_SCALAR;
    if (ldb == (size_t)K && (size_t)kern_dense_fwd_ld(isa, rows) * (size_t)K <= KERN_SMALL_NT_XT)
        return NT_TRANSPOSED;
    int vl = isa == ISA_AVX512 ? 16 : 8;
    size_t np = (size_t)((N + vl - 1) / vl * vl);
    if (K <= SMALL_NT_PACK_K && (size_t)K * np <= KERN_SMALL_NT_PACK)
        return NT_PACKED;
    return NT_SCALAR;
}

/* The scalar columns counted as AVX-512 has them under AVX2 too, so that both
 * ISAs send the same shapes to OpenBLAS (N = 24 went there under AVX-512
 * only, and the two ISAs' weights differed). */
int kern_small_nn_suits(cpu_isa isa, int N, int K)
{
    return isa != ISA_NONE && K <= SMALL_NN_K && N % DECIDE_VL * 8 <= N;
}

/* Parts of fewer rows are never scalar where M's is not: the transposed
 * form only gets more room, and the packed one does not depend on rows. */
int kern_small_nt_suits(cpu_isa isa, int M, int N, int K, size_t ldb)
{
    return nt_form(isa, M, N, K, ldb) != NT_SCALAR;
}

void kern_small_nt(cpu_isa isa, float *C, size_t ldc, const float *A, size_t lda, const float *B,
                   size_t ldb, int m0, int m1, int N, int K)
{
#if defined(__x86_64__) && defined(__GNUC__)
    /* A's rows transposed, or Bᵀ packed: one buffer on the stack for both. */
    float buf[KERN_SMALL_NT_XT > KERN_SMALL_NT_PACK ? KERN_SMALL_NT_XT : KERN_SMALL_NT_PACK];
    int rows = m1 - m0;
    small_nt_form form = nt_form(isa, rows, N, K, ldb);
    if (form == NT_TRANSPOSED) {
        /* B is a dense layer's W (rows of K): the forward kernel, from A's
         * rows transposed, with the same sums (over k in order, one fused
         * multiply-add each), vectors over the rows of C, every lane used. */
        int ldt = kern_dense_fwd_ld(isa, rows);
        kern_transpose(isa, buf, (size_t)ldt, A + (size_t)m0 * lda, lda, rows, K);
        kern_dense_fwd(isa, C + (size_t)m0 * ldc, ldc, B, buf, (size_t)ldt, rows, K, 0, N);
        return;
    }
    if (form == NT_PACKED) {
        /* Bᵀ, its columns past N zero: the vectors read them, and the
         * tile stores only the first N. */
        int vl = isa == ISA_AVX512 ? 16 : 8, np = (N + vl - 1) / vl * vl;
        for (int k = 0; k < K; k++)
            for (int n = 0; n < np; n++)
                buf[(size_t)k * (size_t)np + (size_t)n] =
                    n < N ? B[(size_t)n * ldb + (size_t)k] : 0.0f;
        if (isa == ISA_AVX512)
            small_mm_avx512(C, ldc, A, lda, buf, (size_t)np, m0, m1, np / 16, N, K);
        else
            small_mm_avx2(C, ldc, A, lda, buf, (size_t)np, m0, m1, np / 8, N, K);
        return;
    }
#else
    (void)isa;
#endif
    small_scalar(C, ldc, A, lda, B, 1, ldb, m0, m1, 0, N, K);
}
