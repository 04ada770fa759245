/*
 * backend/act_math.h: the activations whose derivative is made from their
 * input z (gelu, silu), one form for every backend: the CPU's kernels
 * (backend/cpu/kernels.c) and the CUDA plugin's (backend/cuda/kernels.cu)
 * compile these same functions, and the tests compare the two.
 *   gelu(z) = z/2 (1 + erf(z / sqrt 2))        Keras's exact form
 *   gelu'(z) = (1 + erf(z / sqrt 2)) / 2 + z exp(-z^2 / 2) / sqrt(2 pi)
 *   silu(z) = z sigmoid(z)                     Keras's silu, also swish
 *   silu'(z) = s (1 + z (1 - s)), s = sigmoid(z)
 */
#ifndef COHORT_BACKEND_ACT_MATH_H
#define COHORT_BACKEND_ACT_MATH_H

#include <math.h>

#ifdef __CUDACC__
#define ACT_HD __host__ __device__
#else
#define ACT_HD
#endif

#define ACT_RSQRT2 0.70710678118654752f    /* 1 / sqrt(2) */
#define ACT_RSQRT2PI 0.39894228040143268f  /* 1 / sqrt(2 pi) */

static inline ACT_HD float act_gelu(float z) { return 0.5f * z * (1.0f + erff(z * ACT_RSQRT2)); }

static inline ACT_HD float act_gelu_grad(float z)
{
    return 0.5f * (1.0f + erff(z * ACT_RSQRT2)) + z * ACT_RSQRT2PI * expf(-0.5f * z * z);
}

static inline ACT_HD float act_silu(float z) { return z * (1.0f / (1.0f + expf(-z))); }

static inline ACT_HD float act_silu_grad(float z)
{
    float s = 1.0f / (1.0f + expf(-z));
    return s * (1.0f + z * (1.0f - s));
}

#endif
