/*
 * The math unit's element functions (vmath.h) written once over an abstract
 * vector, included once per path (vmath.c: AVX-512 and AVX2; vmath.h: the
 * scalar path, a vector of one lane) with these defined:
 *   SFX                  suffix of the function names
 *   TGT                  the target attribute of every function here
 *   VT, MT, IT           the float vector, a lane mask, an int32 vector
 *   VSET1 VADD VSUB VMUL VDIV   the plain ops
 *   VFMA(a, b, c)        a*b + c rounded once
 *   VMIN(a, b) VMAX(a, b)   a < b ? a : b and a > b ? a : b (x86's minps
 *                        and maxps: b where a or b is NaN)
 *   VAND VOR VXOR(a, b)  bitwise, on the floats' bits
 *   VLT(a, b) VGE(a, b) VNAN(a)   masks: a < b, a >= b, a is NaN
 *   VSEL(m, a, b)        m ? a : b, lane by lane
 *   VBITS(v) VFLOAT(i)   a float vector's bits as int32 and back
 *   VISET1 VIADD VISUB VISRA1 VISHL23   int32: broadcast, +, -, >> 1
 *                        (arithmetic), << 23
 * and, for the array body (vm_run), VL (the lanes), VLOAD and VSTORE
 * (unaligned).
 * (vmath.c undefines them after each inclusion.)
 *
 * Every path runs the same operations in the same order on the same
 * constants, each IEEE-rounded (fused multiply-adds where written, nowhere
 * else: vmath.c is compiled with -ffp-contract=off, GCC's -std=c11 default), so
 * an element's result depends neither on the path that computed it nor on
 * its neighbours. Keep it so: no instruction here may exist on one path
 * only (no rcp14, scalef or getexp), and no constant may differ; every NaN
 * result is the quiet NaN 0x7fc00000 (VM_QNAN). The
 * coefficients are float minimax fits of this project's own (relative error
 * for exp, tanh and erf near 0, absolute for erf beyond), refitted after
 * rounding each one to float; tests/test_vmath.c holds the error bounds.
 */
#define VM_CAT2(a, b) a##_##b
#define VM_CAT(a, b) VM_CAT2(a, b)
#define VM_FN(name) VM_CAT(name, SFX)
#define VM_INLINE static inline __attribute__((always_inline, unused)) TGT

#define VM_SIGN(x) VAND(x, VFLOAT(VISET1(INT32_MIN)))
#define VM_ABS(x) VAND(x, VFLOAT(VISET1(0x7fffffff)))
/* NaN results as the one quiet NaN 0x7fc00000: an operation on two NaNs
 * returns one of them, which one depends on an operand order that the
 * compiler may choose differently on each path. */
#define VM_QNAN(y) VSEL(VNAN(y), VFLOAT(VISET1(0x7fc00000)), y)

/*
 * exp(x). x = n ln2 + r with n = round(x / ln2) (the shifter 1.5 * 2^23:
 * ties to even) and |r| <= ln2/2; ln2 in two parts (Cody and Waite: for
 * |n| <= 160, n * 0x1.63p-1 and x minus it are exact); e^r by a degree 6
 * polynomial (relative error 3e-9); 2^n as 2^(n>>1) * 2^(n - (n>>1)), both
 * normal, so that the last multiply alone rounds, from the denormals
 * (x > -103.98) to FLT_MAX (x < 88.73). NaN gives NaN, +inf inf, -inf 0.
 */
VM_INLINE VT VM_FN(vm_exp_v)(VT x)
{
    const VT shifter = VSET1(0x1.8p23f);
    VT xc = VMAX(VMIN(x, VSET1(89.0f)), VSET1(-110.0f)); /* NaN: 89 */
    VT kf = VFMA(xc, VSET1(0x1.715476p+0f), shifter);
    VT n = VSUB(kf, shifter);
    VT r = VFMA(n, VSET1(-0x1.63p-1f), xc);
    r = VFMA(n, VSET1(0x1.bd0106p-13f), r);
    VT p = VSET1(0x1.6a4f52p-10f);
    p = VFMA(p, r, VSET1(0x1.12397cp-7f));
    p = VFMA(p, r, VSET1(0x1.5558aep-5f));
    p = VFMA(p, r, VSET1(0x1.555492p-3f));
    p = VFMA(p, r, VSET1(0x1.fffffcp-2f));
    p = VFMA(p, r, VSET1(1.0f));
    p = VFMA(p, r, VSET1(1.0f));
    IT ni = VISUB(VBITS(kf), VBITS(shifter));
    IT n1 = VISRA1(ni);
    IT n2 = VISUB(ni, n1);
    VT s1 = VFLOAT(VISHL23(VIADD(n1, VISET1(127))));
    VT s2 = VFLOAT(VISHL23(VIADD(n2, VISET1(127))));
    VT y = VMUL(VMUL(p, s1), s2);
    return VSEL(VNAN(x), VFLOAT(VISET1(0x7fc00000)), y);
}

/* 1 / (1 + exp(-x)). */
VM_INLINE VT VM_FN(vm_sigmoid_v)(VT x)
{
    VT e = VM_FN(vm_exp_v)(VXOR(x, VFLOAT(VISET1(INT32_MIN))));
    return VM_QNAN(VDIV(VSET1(1.0f), VADD(VSET1(1.0f), e)));
}

/* tanh(x) = sign(x) tanh(|x|): below |x| = 0.625 |x| + |x|^3 P(x^2) (P of
 * degree 5, relative error 2e-10), above 1 - 2 / (exp(2|x|) + 1), which is 1
 * from 9.01 on. tanh(-0) = -0, NaN gives NaN. */
VM_INLINE VT VM_FN(vm_tanh_v)(VT x)
{
    VT ax = VM_ABS(x);
    VT x2 = VMUL(x, x);
    VT p = VSET1(0x1.1a3efep-9f);
    p = VFMA(p, x2, VSET1(-0x1.0c6368p-7f));
    p = VFMA(p, x2, VSET1(0x1.63a5e6p-6f));
    p = VFMA(p, x2, VSET1(-0x1.b9f18ep-5f));
    p = VFMA(p, x2, VSET1(0x1.11107ap-3f));
    p = VFMA(p, x2, VSET1(-0x1.555554p-2f));
    VT small = VFMA(VMUL(ax, x2), p, ax);
    VT e = VM_FN(vm_exp_v)(VADD(ax, ax));
    VT big = VSUB(VSET1(1.0f), VDIV(VSET1(2.0f), VADD(e, VSET1(1.0f))));
    return VM_QNAN(VOR(VSEL(VLT(ax, VSET1(0.625f)), small, big), VM_SIGN(x)));
}

/*
 * erf(x), in three pieces of |x|: below 0.875 x + x P(x^2) (P of degree 5,
 * relative error 1.4e-8); [0.875, 2.25) and [2.25, 3.9192059) one degree 10
 * polynomial each in |x| minus the piece's centre (absolute error 2.8e-8 and
 * 3.6e-9), with the sign of x; 1 from 3.9192059 on, where erf(x) rounds to 1.
 * erf(-0) = -0, NaN gives NaN.
 */
VM_INLINE VT VM_FN(vm_erf_v)(VT x)
{
    VT ax = VM_ABS(x);
    VT x2 = VMUL(x, x);
    VT p = VSET1(-0x1.3c5e94p-11f);
    p = VFMA(p, x2, VSET1(0x1.47c6cap-8f));
    p = VFMA(p, x2, VSET1(-0x1.b6a24ap-6f));
    p = VFMA(p, x2, VSET1(0x1.ce1bfp-4f));
    p = VFMA(p, x2, VSET1(-0x1.8126eep-2f));
    p = VFMA(p, x2, VSET1(0x1.06eba6p-3f));
    VT small = VFMA(x, p, x);
    MT far = VGE(ax, VSET1(2.25f));
#define VM_C(a, b) VSEL(far, VSET1(b), VSET1(a))
    VT t = VSUB(ax, VM_C(1.5625f, 0x1.8ad444p+1f));
    VT q = VM_C(-0x1.3b37ep-11f, 0x1.28a844p-16f);
    q = VFMA(q, t, VM_C(0x1.728d5p-10f, 0x1.683768p-17f));
    q = VFMA(q, t, VM_C(-0x1.dda7fcp-11f, -0x1.19f7bap-13f));
    q = VFMA(q, t, VM_C(-0x1.70b40ap-8f, 0x1.45a08cp-12f));
    q = VFMA(q, t, VM_C(0x1.132446p-6f, -0x1.12f0a2p-11f));
    q = VFMA(q, t, VM_C(-0x1.079bfep-7f, 0x1.6c4dep-11f));
    q = VFMA(q, t, VM_C(-0x1.8a2376p-5f, -0x1.68bfc8p-11f));
    q = VFMA(q, t, VM_C(0x1.04541ep-3f, 0x1.06427cp-11f));
    q = VFMA(q, t, VM_C(-0x1.3a48e8p-3f, -0x1.0cf22cp-12f));
    q = VFMA(q, t, VM_C(0x1.92470ap-4f, 0x1.5d0f8ep-14f));
    q = VFMA(q, t, VM_C(0x1.f21cap-1f, 0x1.fffe5p-1f));
#undef VM_C
    q = VMIN(VSET1(1.0f), q); /* NaN stays NaN */
    q = VSEL(VGE(ax, VSET1(0x1.f5a88ap+1f)), VSET1(1.0f), q);
    VT big = VOR(q, VM_SIGN(x));
    return VM_QNAN(VSEL(VLT(ax, VSET1(0.875f)), small, big));
}

/* The activations of backend/act_math.h, in its order of operations, with
 * these exp and erf: gelu(z) = z/2 (1 + erf(z / sqrt 2)), gelu'(z) =
 * (1 + erf(z / sqrt 2)) / 2 + z exp(-z^2/2) / sqrt(2 pi), silu(z) = z s,
 * silu'(z) = s (1 + z (1 - s)), s = sigmoid(z). */
VM_INLINE VT VM_FN(vm_gelu_v)(VT z)
{
    VT e = VM_FN(vm_erf_v)(VMUL(z, VSET1(0.70710678118654752f)));
    return VM_QNAN(VMUL(VMUL(VSET1(0.5f), z), VADD(VSET1(1.0f), e)));
}

VM_INLINE VT VM_FN(vm_gelu_grad_v)(VT z)
{
    VT e = VM_FN(vm_erf_v)(VMUL(z, VSET1(0.70710678118654752f)));
    VT g = VM_FN(vm_exp_v)(VMUL(VMUL(VSET1(-0.5f), z), z));
    return VM_QNAN(VADD(VMUL(VSET1(0.5f), VADD(VSET1(1.0f), e)),
                        VMUL(VMUL(z, VSET1(0.39894228040143268f)), g)));
}

VM_INLINE VT VM_FN(vm_silu_v)(VT z) { return VM_QNAN(VMUL(z, VM_FN(vm_sigmoid_v)(z))); }

VM_INLINE VT VM_FN(vm_silu_grad_v)(VT z)
{
    VT s = VM_FN(vm_sigmoid_v)(z);
    return VM_QNAN(VMUL(s, VADD(VSET1(1.0f), VMUL(z, VSUB(VSET1(1.0f), s)))));
}

#ifdef VL
/* The first n / VL * VL elements of vm_map(op, y, x, n): their count. */
static TGT size_t VM_FN(vm_run)(vm_op op, float *y, const float *x, size_t n)
{
    size_t i = 0;
#define VM_LOOP(f)                                                                                 \
    for (; i + VL <= n; i += VL)                                                                   \
        VSTORE(y + i, VM_FN(f)(VLOAD(x + i)));                                                     \
    break
#define VM_LOOP_MUL(f)                                                                             \
    for (; i + VL <= n; i += VL)                                                                   \
        VSTORE(y + i, VM_QNAN(VMUL(VLOAD(y + i), VM_FN(f)(VLOAD(x + i)))));                        \
    break
    switch (op) {
    case VM_EXP: VM_LOOP(vm_exp_v);
    case VM_SIGMOID: VM_LOOP(vm_sigmoid_v);
    case VM_TANH: VM_LOOP(vm_tanh_v);
    case VM_ERF: VM_LOOP(vm_erf_v);
    case VM_GELU: VM_LOOP(vm_gelu_v);
    case VM_SILU: VM_LOOP(vm_silu_v);
    case VM_GELU_GRAD: VM_LOOP_MUL(vm_gelu_grad_v);
    case VM_SILU_GRAD: VM_LOOP_MUL(vm_silu_grad_v);
    case VM_N_OPS: break;
    }
#undef VM_LOOP
#undef VM_LOOP_MUL
    return i;
}
#endif

#undef VM_SIGN
#undef VM_ABS
#undef VM_QNAN
#undef VM_INLINE
#undef VM_FN
#undef VM_CAT
#undef VM_CAT2
