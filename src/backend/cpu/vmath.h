/*
 * The CPU backend's math unit: exp, sigmoid, tanh, erf and the gelu and
 * silu activations (with their derivatives) over arrays of floats, in
 * AVX-512, AVX2 + FMA and scalar code (vmath_isa.h, the one source of all
 * three) in place of glibc's scalar expf, tanhf and erff.
 *
 * Bit-identity rule: an element's result depends on its input alone, never
 * on the path that computed it (the vector body, the scalar tail of an
 * array, AVX-512, AVX2, or the one-element functions below), so the rows of
 * a model give the same bits wherever a fused group places them and
 * whatever COHORT_CPU_KERNELS asks; a NaN result is always the quiet NaN
 * 0x7fc00000. The results are not glibc's bits but
 * as close to the exact values: tests/test_vmath.c asserts, against double
 * precision, exp within 1 ulp, erf 1.5, tanh 2, sigmoid 2.5 (glibc's expf in
 * the same form: 2.03), and the activations within 2 to 3 ulp of their
 * largest term.
 */
#ifndef COHORT_CPU_VMATH_H
#define COHORT_CPU_VMATH_H

#include "backend/cpu/isa.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The functions of vm_map: y[i] = f(x[i]), or, for the _GRAD ones,
 * y[i] *= f'(x[i]) (y the gradient of the output, x the input z). */
typedef enum {
    VM_EXP,
    VM_SIGMOID,   /* 1 / (1 + exp(-x)) */
    VM_TANH,
    VM_ERF,
    VM_GELU,      /* x/2 (1 + erf(x / sqrt 2)), Keras's exact gelu */
    VM_SILU,      /* x sigmoid(x) */
    VM_GELU_GRAD, /* y *= gelu'(x) */
    VM_SILU_GRAD, /* y *= silu'(x) */
    VM_N_OPS
} vm_op;

/* f over x[0, n) into y[0, n) (see vm_op); y == x is allowed (in place),
 * other overlaps are not. The widest path cpu_isa_detect allows. */
void vm_map(vm_op op, float *y, const float *x, size_t n);
/* The same on the path of `isa` (ISA_NONE: scalar), which must be one the
 * processor has: for tests and benchmarks. Same bits as vm_map. */
void vm_map_isa(cpu_isa isa, vm_op op, float *y, const float *x, size_t n);
/* "exp", "sigmoid", ... */
const char *vm_op_name(vm_op op);

static inline void vm_exp(float *y, const float *x, size_t n) { vm_map(VM_EXP, y, x, n); }
static inline void vm_sigmoid(float *y, const float *x, size_t n) { vm_map(VM_SIGMOID, y, x, n); }
static inline void vm_tanh(float *y, const float *x, size_t n) { vm_map(VM_TANH, y, x, n); }
static inline void vm_erf(float *y, const float *x, size_t n) { vm_map(VM_ERF, y, x, n); }

/* The scalar path, one element at a time, for loops that are not over a
 * contiguous array: vm_exp1(x) has the bits of vm_exp over {x}. Compiled
 * where they are used, hence only in C built as the project builds it
 * (-std=c11: no contraction of a*b + c into an fma). */
static inline float vm_bits_float(int32_t i)
{
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}
static inline int32_t vm_float_bits(float f)
{
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return i;
}
static inline float vm_and1(float a, float b)
{
    return vm_bits_float(vm_float_bits(a) & vm_float_bits(b));
}
static inline float vm_or1(float a, float b)
{
    return vm_bits_float(vm_float_bits(a) | vm_float_bits(b));
}
static inline float vm_xor1(float a, float b)
{
    return vm_bits_float(vm_float_bits(a) ^ vm_float_bits(b));
}

#define SFX scalar
#define TGT
#define VT float
#define MT int
#define IT int32_t
#define VSET1(c) (c)
#define VADD(a, b) ((a) + (b))
#define VSUB(a, b) ((a) - (b))
#define VMUL(a, b) ((a) * (b))
#define VDIV(a, b) ((a) / (b))
#define VFMA(a, b, c) fmaf(a, b, c)
#define VMIN(a, b) ((a) < (b) ? (a) : (b))
#define VMAX(a, b) ((a) > (b) ? (a) : (b))
#define VAND(a, b) vm_and1(a, b)
#define VOR(a, b) vm_or1(a, b)
#define VXOR(a, b) vm_xor1(a, b)
#define VLT(a, b) ((a) < (b))
#define VGE(a, b) ((a) >= (b))
#define VNAN(a) ((a) != (a))
#define VSEL(m, a, b) ((m) ? (a) : (b))
#define VBITS(v) vm_float_bits(v)
#define VFLOAT(i) vm_bits_float(i)
#define VISET1(i) ((int32_t)(i))
#define VIADD(i, j) ((i) + (j))
#define VISUB(i, j) ((i) - (j))
#define VISRA1(i) ((i) >> 1) /* arithmetic in GCC and Clang */
#define VISHL23(i) ((int32_t)((uint32_t)(i) << 23))
#include "backend/cpu/vmath_isa.h"
#undef SFX
#undef TGT
#undef VT
#undef MT
#undef IT
#undef VSET1
#undef VADD
#undef VSUB
#undef VMUL
#undef VDIV
#undef VFMA
#undef VMIN
#undef VMAX
#undef VAND
#undef VOR
#undef VXOR
#undef VLT
#undef VGE
#undef VNAN
#undef VSEL
#undef VBITS
#undef VFLOAT
#undef VISET1
#undef VIADD
#undef VISUB
#undef VISRA1
#undef VISHL23

static inline float vm_exp1(float x) { return vm_exp_v_scalar(x); }
static inline float vm_sigmoid1(float x) { return vm_sigmoid_v_scalar(x); }
static inline float vm_tanh1(float x) { return vm_tanh_v_scalar(x); }
static inline float vm_erf1(float x) { return vm_erf_v_scalar(x); }
static inline float vm_gelu1(float x) { return vm_gelu_v_scalar(x); }
static inline float vm_silu1(float x) { return vm_silu_v_scalar(x); }
static inline float vm_gelu_grad1(float x) { return vm_gelu_grad_v_scalar(x); }
static inline float vm_silu_grad1(float x) { return vm_silu_grad_v_scalar(x); }
/* NaN as vmath's one NaN 0x7fc00000, other values as they are: for a
 * product of NaNs (d * vm_gelu_grad1(z)), the same on every path. */
static inline float vm_qnan1(float y) { return y != y ? vm_bits_float(0x7fc00000) : y; }

#endif
