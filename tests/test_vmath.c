/*
 * The CPU math unit (backend/cpu/vmath.h): each function against double
 * precision libm over every 4093rd float bit pattern (a million inputs,
 * both signs, denormals to infinities), every 127th of |x| in [1/8, 16)
 * (another million), and the edges of its pieces and of its range, within a
 * stated error bound; and the bit-identity rule: the
 * AVX-512, AVX2 and scalar paths, the vector body and the scalar tail at
 * every offset, in place or not, and the one-element functions give the
 * same bits for every input.
 */
#include "backend/cpu/vmath.h"
#include "backend/act_math.h"
#include "check.h"

#include <float.h>
#include <stdint.h>

/* The spacing of floats at |v| (v double): 2^(e - 23) for v in [2^e,
 * 2^(e+1)), 2^-149 among the denormals, as a double. */
static double ulp_at(double v)
{
    v = fabs(v);
    if (v < 0x1p-126)
        return 0x1p-149;
    if (v >= FLT_MAX)
        return 0x1p104;
    int e;
    frexp(v, &e); /* v = m 2^e, m in [0.5, 1) */
    return ldexp(1.0, e - 24);
}

/* The exact function, in double, of a float input. */
static double ref_of(vm_op op, float xf)
{
    double x = xf, s;
    switch (op) {
    case VM_EXP: return exp(x);
    case VM_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case VM_TANH: return tanh(x);
    case VM_ERF: return erf(x);
    case VM_GELU: return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case VM_SILU: return x / (1.0 + exp(-x));
    case VM_GELU_GRAD:
        return 0.5 * (1.0 + erf(x / sqrt(2.0))) + x * exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
    case VM_SILU_GRAD:
        s = 1.0 / (1.0 + exp(-x));
        return s * (1.0 + x * (1.0 - s));
    case VM_N_OPS: break;
    }
    return NAN;
}

/* glibc's float function, as the CPU backend computed it before: only for
 * the printed comparison. */
static float glibc_of(vm_op op, float x)
{
    switch (op) {
    case VM_EXP: return expf(x);
    case VM_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case VM_TANH: return tanhf(x);
    case VM_ERF: return erff(x);
    case VM_GELU: return act_gelu(x);
    case VM_SILU: return act_silu(x);
    case VM_GELU_GRAD: return act_gelu_grad(x);
    case VM_SILU_GRAD: return act_silu_grad(x);
    case VM_N_OPS: break;
    }
    return NAN;
}

/*
 * The unit an error is counted in: an ulp of the exact result, and for the
 * activations made of several terms, at least an ulp of the term that
 * rounding cannot avoid (float arithmetic, Keras's and act_math.h's alike,
 * loses the rest to cancellation): gelu's z/2 (1 + erf) where 1 + erf
 * cancels (z < 0), gelu' and silu''s sums of terms up to about 1 and |z|.
 * sigmoid(x) = 1 / (1 + exp(-x)) is 0 below x = -88.72, where exp(-x)
 * overflows (glibc's form alike): its error is counted in units of at least
 * FLT_MIN (below which training flushes results to 0 anyway), silu's in
 * |z| FLT_MIN.
 */
static double unit_of(vm_op op, float x, double ref)
{
    double u = ulp_at(ref), ax = fabs((double)x);
    switch (op) {
    case VM_SIGMOID: return fmax(u, 0x1p-126);
    case VM_SILU: return fmax(u, ax * 0x1p-126);
    case VM_GELU: return fmax(u, ulp_at(0.5 * ax));
    case VM_GELU_GRAD: return fmax(u, 0x1p-24);
    case VM_SILU_GRAD: return fmax(u, fmax(1.0, ax) * 0x1p-24);
    default: return u;
    }
}

/* The bound per op, in units of unit_of; the measured maxima (AMD EPYC,
 * AVX-512, December 2026), and glibc's float forms' over the same inputs:
 * exp 0.85 (glibc 0.50), sigmoid 2.03 (2.03), tanh 1.30 (2.17), erf 1.16
 * (0.82), gelu 1.67 (1.67), silu 2.38 (2.36), gelu' 1.65 (1.64), silu' 2.07
 * (1.97). */
static const double bound[VM_N_OPS] = {
    [VM_EXP] = 1.0,  [VM_SIGMOID] = 2.5, [VM_TANH] = 2.0,      [VM_ERF] = 1.5,
    [VM_GELU] = 2.0, [VM_SILU] = 3.0,    [VM_GELU_GRAD] = 2.0, [VM_SILU_GRAD] = 3.0,
};

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* The inputs: the two sweeps, then the edges (each with its 4
 * neighbours on either side). *n gets the count; the caller frees. */
static float *inputs(size_t *n)
{
    static const float edges[] = {
        0.0f, 1.0f, 0x1p-149f, 0x1p-126f, 0x1.fffffcp-127f, FLT_MAX, 0x1p-24f, 0x1p-12f,
        0.625f, 0.875f, 2.25f, 0x1.f5a88ap+1f,          /* tanh's and erf's pieces */
        0.88137358f, 9.01f, 0x1.8p23f,                   /* tanh: the big piece's start, 1 */
        88.7228394f, 88.7228317f, 87.3365479f, 89.0f,    /* exp's overflow, the normals' end */
        103.972076f, 103.278931f, 110.0f, 0.34657359f,   /* exp's underflow, r's edge */
        1.2784645f, 0.7517915f, 5.0f, 10.0f, 16.6355324f, 17.0f, 30.0f,
    };
    size_t ne = sizeof edges / sizeof edges[0];
    size_t cap = (1ull << 32) / 4093 + 2 + (0x41800000u - 0x3e000000u) / 127 * 2 + 2 + ne * 2 * 9 + 4;
    float *x = malloc(cap * sizeof *x);
    if (!x)
        abort();
    size_t k = 0;
    /* A quarter of them under the sanitizers, which run this 10x slower. */
    uint32_t thin = getenv("COHORT_SANITIZED") ? 4 : 1;
    for (uint64_t u = 0; u < (1ull << 32); u += 4093 * thin)
        x[k++] = from_bits((uint32_t)u);
    /* Denser over |x| in [1/8, 16), where every piece starts and ends. */
    for (uint32_t u = 0x3e000000u; u < 0x41800000u; u += 127 * thin) {
        x[k++] = from_bits(u);
        x[k++] = from_bits(u | 0x80000000u);
    }
    for (size_t e = 0; e < ne; e++)
        for (int sign = 0; sign < 2; sign++) {
            float v = sign ? -edges[e] : edges[e];
            for (int d = -4; d <= 4; d++) {
                uint32_t b = bits_of(v);
                float w = from_bits(b + (uint32_t)d);
                if ((bits_of(w) & 0x7fffffffu) > 0x7f800000u && !(isnan(v)))
                    continue; /* past infinity */
                if (d < 0 && (b & 0x7fffffffu) < (uint32_t)-d)
                    continue; /* below zero: wraps */
                x[k++] = w;
            }
        }
    x[k++] = INFINITY;
    x[k++] = -INFINITY;
    x[k++] = NAN;
    x[k++] = -NAN;
    *n = k;
    return x;
}

/* The error of op over x against double libm, on the scalar path (the other
 * paths are checked equal to it below). */
static void check_accuracy(vm_op op, const float *x, size_t n)
{
    float *y = malloc(n * sizeof *y);
    if (!y)
        abort();
    if (op == VM_GELU_GRAD || op == VM_SILU_GRAD)
        for (size_t i = 0; i < n; i++)
            y[i] = 1.0f; /* y *= f'(x) */
    vm_map_isa(ISA_NONE, op, y, x, n);
    double worst = 0, worst_glibc = 0;
    float worst_x = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double ref = ref_of(op, x[i]);
        if (isnan(ref)) {
            if (!isnan(y[i]) && bad++ < 5)
                fprintf(stderr, "%s(%a) = %a, not NaN\n", vm_op_name(op), (double)x[i],
                        (double)y[i]);
            continue;
        }
        if (isinf(ref) || fabs(ref) > FLT_MAX) {
            /* Overflows: exp past 88.72 must give +inf (rounding to FLT_MAX
             * is within an ulp only where ref rounds to it). */
            if (!(isinf(y[i]) && (y[i] > 0) == (ref > 0)) && fabs(ref) > 0x1.ffffffp127) {
                if (bad++ < 5)
                    fprintf(stderr, "%s(%a) = %a, not %g\n", vm_op_name(op), (double)x[i],
                            (double)y[i], ref);
            }
            continue;
        }
        double u = unit_of(op, x[i], ref);
        double e = fabs((double)y[i] - ref) / u;
        if (!(e <= bound[op])) {
            if (bad++ < 5)
                fprintf(stderr, "%s(%a): %a, exact %a: %.2f units\n", vm_op_name(op),
                        (double)x[i], (double)y[i], ref, e);
        }
        if (e > worst) {
            worst = e;
            worst_x = x[i];
        }
        double eg = fabs((double)glibc_of(op, x[i]) - ref) / u;
        if (eg > worst_glibc)
            worst_glibc = eg;
    }
    printf("%-10s max error %.3f (bound %.1f) at %a; glibc's form %.3f\n", vm_op_name(op), worst,
           bound[op], (double)worst_x, worst_glibc);
    CHECK_MSG(bad == 0, "%s: %zu inputs past %.1f units", vm_op_name(op), bad, bound[op]);
    free(y);
}

static int has_isa(cpu_isa isa)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (isa == ISA_AVX512)
        return __builtin_cpu_supports("avx512f");
    if (isa == ISA_AVX2)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    return isa == ISA_NONE;
}

static float one_element(vm_op op, float x, float d)
{
    switch (op) {
    case VM_EXP: return vm_exp1(x);
    case VM_SIGMOID: return vm_sigmoid1(x);
    case VM_TANH: return vm_tanh1(x);
    case VM_ERF: return vm_erf1(x);
    case VM_GELU: return vm_gelu1(x);
    case VM_SILU: return vm_silu1(x);
    case VM_GELU_GRAD: return vm_qnan1(d * vm_gelu_grad1(x));
    case VM_SILU_GRAD: return vm_qnan1(d * vm_silu_grad1(x));
    case VM_N_OPS: break;
    }
    return NAN;
}

/* Same bits from every path, from the body and the tail alike: x run at
 * start offsets 0, 5 and 11 (an input lands in other lanes, and in the
 * tail for some), tails of several lengths, in place and not, each against
 * the one-element function. */
static void check_identity(vm_op op, const float *x, size_t n, int *paths)
{
    static const size_t offsets[] = {0, 5, 11};
    int grad = op == VM_GELU_GRAD || op == VM_SILU_GRAD;
    size_t m = n + 16;
    float *want = malloc(m * sizeof *want), *y = malloc(m * sizeof *y),
          *in = malloc(m * sizeof *in), *d = malloc(m * sizeof *d);
    if (!want || !y || !in || !d)
        abort();
    for (size_t i = 0; i < m; i++)
        d[i] = 1.0f + (float)(i % 7) * 0.25f; /* a gradient that is not all ones */
    size_t mismatches = 0;
    for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; o++) {
        size_t off = offsets[o], len = n - o; /* tails of other lengths too */
        for (size_t i = 0; i < len; i++)
            want[i] = one_element(op, x[i], d[off + i]);
        for (cpu_isa isa = ISA_NONE; isa <= ISA_AVX512; isa++) {
            if (!has_isa(isa))
                continue;
            paths[isa] = 1;
            for (int inplace = 0; inplace < 2; inplace++) {
                memcpy(in + off, x, len * sizeof *x);
                float *dst = inplace && !grad ? in : y;
                if (grad)
                    memcpy(y + off, d + off, len * sizeof *y);
                vm_map_isa(isa, op, dst + off, in + off, len);
                for (size_t i = 0; i < len; i++)
                    if (bits_of(dst[off + i]) != bits_of(want[i]) && mismatches++ < 5)
                        fprintf(stderr, "%s on %s, offset %zu: f(%a) = %a, one-element %a\n",
                                vm_op_name(op), cpu_isa_name(isa), off, (double)x[i],
                                (double)dst[off + i], (double)want[i]);
            }
        }
    }
    CHECK_MSG(mismatches == 0, "%s: %zu results differ between paths", vm_op_name(op),
              mismatches);
    free(want);
    free(y);
    free(in);
    free(d);
}

/* The dispatching vm_map and the named wrappers reach the same function. */
static void check_wrappers(void)
{
    float x[37], a[37], b[37];
    for (int i = 0; i < 37; i++)
        x[i] = (float)(i - 18) * 0.37f;
    vm_exp(a, x, 37);
    vm_map_isa(ISA_NONE, VM_EXP, b, x, 37);
    CHECK(memcmp(a, b, sizeof a) == 0);
    vm_sigmoid(a, x, 37);
    vm_map_isa(ISA_NONE, VM_SIGMOID, b, x, 37);
    CHECK(memcmp(a, b, sizeof a) == 0);
    vm_tanh(a, x, 37);
    vm_map_isa(ISA_NONE, VM_TANH, b, x, 37);
    CHECK(memcmp(a, b, sizeof a) == 0);
    vm_erf(a, x, 37);
    vm_map_isa(ISA_NONE, VM_ERF, b, x, 37);
    CHECK(memcmp(a, b, sizeof a) == 0);
    /* A few values whose bits are certain. */
    CHECK(vm_exp1(0.0f) == 1.0f && vm_exp1(-INFINITY) == 0.0f && vm_exp1(INFINITY) == INFINITY);
    CHECK(vm_tanh1(INFINITY) == 1.0f && vm_tanh1(-30.0f) == -1.0f);
    CHECK(signbit(vm_tanh1(-0.0f)) && signbit(vm_erf1(-0.0f)) && vm_erf1(-0.0f) == 0.0f);
    CHECK(vm_erf1(4.0f) == 1.0f && vm_erf1(-INFINITY) == -1.0f);
    CHECK(vm_sigmoid1(-200.0f) == 0.0f && vm_sigmoid1(200.0f) == 1.0f);
    CHECK(isnan(vm_exp1(NAN)) && isnan(vm_tanh1(NAN)) && isnan(vm_erf1(NAN)));
    CHECK(strcmp(vm_op_name(VM_SILU_GRAD), "silu_grad") == 0);
}

int main(void)
{
    size_t n;
    float *x = inputs(&n);
    int paths[3] = {0, 0, 0};
    for (vm_op op = 0; op < VM_N_OPS; op++)
        check_accuracy(op, x, n);
    for (vm_op op = 0; op < VM_N_OPS; op++)
        check_identity(op, x, n, paths);
    printf("paths compared: scalar%s%s\n", paths[ISA_AVX2] ? ", avx2" : "",
           paths[ISA_AVX512] ? ", avx512" : "");
    check_wrappers();
    free(x);
    return check_done("test_vmath");
}
