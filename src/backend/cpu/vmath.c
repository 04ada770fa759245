/* The math unit's array functions (vmath.h): each path's vector body
 * (vmath_isa.h), then the rest of the array on the scalar path. */
#include "backend/cpu/vmath.h"

#include <stdatomic.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define SFX avx512
#define TGT __attribute__((target("avx512f")))
#define VT __m512
#define MT __mmask16
#define IT __m512i
#define VL 16
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, v) _mm512_storeu_ps(p, v)
#define VSET1(c) _mm512_set1_ps(c)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VSUB(a, b) _mm512_sub_ps(a, b)
#define VMUL(a, b) _mm512_mul_ps(a, b)
#define VDIV(a, b) _mm512_div_ps(a, b)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VMIN(a, b) _mm512_min_ps(a, b)
#define VMAX(a, b) _mm512_max_ps(a, b)
#define VAND(a, b) _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)))
#define VOR(a, b) _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)))
#define VXOR(a, b) _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)))
#define VLT(a, b) _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ)
#define VGE(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ)
#define VNAN(a) _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q)
#define VSEL(m, a, b) _mm512_mask_blend_ps(m, b, a)
#define VBITS(v) _mm512_castps_si512(v)
#define VFLOAT(i) _mm512_castsi512_ps(i)
#define VISET1(i) _mm512_set1_epi32(i)
#define VIADD(i, j) _mm512_add_epi32(i, j)
#define VISUB(i, j) _mm512_sub_epi32(i, j)
#define VISRA1(i) _mm512_srai_epi32(i, 1)
#define VISHL23(i) _mm512_slli_epi32(i, 23)
#include "backend/cpu/vmath_isa.h"
#undef SFX
#undef TGT
#undef VT
#undef MT
#undef IT
#undef VL
#undef VLOAD
#undef VSTORE
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

#define SFX avx2
#define TGT __attribute__((target("avx2,fma")))
#define VT __m256
#define MT __m256
#define IT __m256i
#define VL 8
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, v) _mm256_storeu_ps(p, v)
#define VSET1(c) _mm256_set1_ps(c)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VSUB(a, b) _mm256_sub_ps(a, b)
#define VMUL(a, b) _mm256_mul_ps(a, b)
#define VDIV(a, b) _mm256_div_ps(a, b)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VMIN(a, b) _mm256_min_ps(a, b)
#define VMAX(a, b) _mm256_max_ps(a, b)
#define VAND(a, b) _mm256_and_ps(a, b)
#define VOR(a, b) _mm256_or_ps(a, b)
#define VXOR(a, b) _mm256_xor_ps(a, b)
#define VLT(a, b) _mm256_cmp_ps(a, b, _CMP_LT_OQ)
#define VGE(a, b) _mm256_cmp_ps(a, b, _CMP_GE_OQ)
#define VNAN(a) _mm256_cmp_ps(a, a, _CMP_UNORD_Q)
#define VSEL(m, a, b) _mm256_blendv_ps(b, a, m)
#define VBITS(v) _mm256_castps_si256(v)
#define VFLOAT(i) _mm256_castsi256_ps(i)
#define VISET1(i) _mm256_set1_epi32(i)
#define VIADD(i, j) _mm256_add_epi32(i, j)
#define VISUB(i, j) _mm256_sub_epi32(i, j)
#define VISRA1(i) _mm256_srai_epi32(i, 1)
#define VISHL23(i) _mm256_slli_epi32(i, 23)
#include "backend/cpu/vmath_isa.h"
#endif

/* The rest of vm_map's array from element i, one at a time. */
static void vm_run_rest(vm_op op, float *y, const float *x, size_t i, size_t n)
{
    switch (op) {
    case VM_EXP: for (; i < n; i++) y[i] = vm_exp1(x[i]); break;
    case VM_SIGMOID: for (; i < n; i++) y[i] = vm_sigmoid1(x[i]); break;
    case VM_TANH: for (; i < n; i++) y[i] = vm_tanh1(x[i]); break;
    case VM_ERF: for (; i < n; i++) y[i] = vm_erf1(x[i]); break;
    case VM_GELU: for (; i < n; i++) y[i] = vm_gelu1(x[i]); break;
    case VM_SILU: for (; i < n; i++) y[i] = vm_silu1(x[i]); break;
    case VM_GELU_GRAD: for (; i < n; i++) y[i] = vm_qnan1(y[i] * vm_gelu_grad1(x[i])); break;
    case VM_SILU_GRAD: for (; i < n; i++) y[i] = vm_qnan1(y[i] * vm_silu_grad1(x[i])); break;
    case VM_N_OPS: break;
    }
}

void vm_map_isa(cpu_isa isa, vm_op op, float *y, const float *x, size_t n)
{
    size_t done = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa == ISA_AVX512)
        done = vm_run_avx512(op, y, x, n);
    else if (isa == ISA_AVX2)
        done = vm_run_avx2(op, y, x, n);
#else
    (void)isa;
#endif
    vm_run_rest(op, y, x, done, n);
}

void vm_map(vm_op op, float *y, const float *x, size_t n)
{
    /* cpu_isa_detect once per process (it reads the environment). */
    static atomic_int isa = -1;
    int i = atomic_load_explicit(&isa, memory_order_relaxed);
    if (i < 0) {
        i = (int)cpu_isa_detect();
        atomic_store_explicit(&isa, i, memory_order_relaxed);
    }
    vm_map_isa((cpu_isa)i, op, y, x, n);
}

const char *vm_op_name(vm_op op)
{
    static const char *const names[VM_N_OPS] = {"exp",  "sigmoid", "tanh",      "erf",
                                                "gelu", "silu",    "gelu_grad", "silu_grad"};
    return (unsigned)op < VM_N_OPS ? names[op] : "?";
}
