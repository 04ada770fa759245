/*
 * backend/rnn_cell.h: one unit of one time step of the recurrent layers
 * (lstm, gru), forward and backward, as static inline functions that C and
 * CUDA compile alike (RNN_HD): the CPU's step kernels (backend/cpu/kernels.c),
 * the CUDA plugin's (backend/cuda/kernels.cu) and the tests run these, so the
 * backends differ only where their expf does.
 *
 * A unit's gates lie H floats apart in a step's row of pre-activations, in
 * torch's order: LSTM (i, f, g, o), GRU (r, z, n). What a padded step does
 * (the state carried over) is the step kernels' part, not the unit's.
 */
#ifndef COHORT_BACKEND_RNN_CELL_H
#define COHORT_BACKEND_RNN_CELL_H

#include <math.h>

#ifdef __CUDACC__
#define RNN_HD __host__ __device__
#else
#define RNN_HD
#endif

static inline RNN_HD float rnn_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/*
 * tanh from expf, which glibc computes several times faster than its tanhf
 * (whose expm1f took 38% of an LSTM's epoch): 1 - 2 / (e^2x + 1), and below
 * |x| = 1/4, where that difference would lose relative precision, the series
 * x - x^3/3 + 2x^5/15 - 17x^7/315 + 62x^9/2835 (its next term is under 1e-8
 * relative there). Within a few float ulps of tanh (test_cuda checks 5e-7
 * relative over a range of x); saturates to +-1 where e^2x overflows.
 */
static inline RNN_HD float rnn_tanh(float x)
{
    float a = fabsf(x);
    if (a < 0.25f) {
        float x2 = x * x;
        return x * (1.0f + x2 * (-1.0f / 3.0f +
                                 x2 * (2.0f / 15.0f + x2 * (-17.0f / 315.0f + x2 * (62.0f / 2835.0f)))));
    }
    float t = 1.0f - 2.0f / (expf(2.0f * a) + 1.0f);
    return x < 0.0f ? -t : t;
}

/*
 * LSTM (Keras's and torch's): i = sigmoid(z_i), f = sigmoid(z_f),
 * g = tanh(z_g), o = sigmoid(z_o); c = f c_prev + i g; h = o tanh(c).
 * z[0], z[H], z[2H], z[3H] hold the unit's pre-activations and receive its
 * gates; *c receives the cell; returns h.
 */
static inline RNN_HD float lstm_unit_fwd(float *z, int H, float c_prev, float *c)
{
    float i = rnn_sigmoid(z[0]), f = rnn_sigmoid(z[H]);
    float g = rnn_tanh(z[2 * H]), o = rnn_sigmoid(z[3 * H]);
    float cn = f * c_prev + i * g;
    z[0] = i;
    z[H] = f;
    z[2 * H] = g;
    z[3 * H] = o;
    *c = cn;
    return o * rnn_tanh(cn);
}

/*
 * Its gradients: from the gates (z, as lstm_unit_fwd left them), the cell c
 * and the previous cell c_prev, dh = dL/dh and *dc = dL/dc from the later
 * steps; z receives dL/d(pre-activations) and *dc dL/dc_prev. The part of
 * dL/dh_prev is the product of z with the recurrent kernel (a GEMM).
 */
static inline RNN_HD void lstm_unit_bwd(float *z, int H, float c, float c_prev, float dh,
                                        float *dc)
{
    float i = z[0], f = z[H], g = z[2 * H], o = z[3 * H];
    float tc = rnn_tanh(c);
    float dct = *dc + dh * o * (1.0f - tc * tc);
    z[0] = dct * g * i * (1.0f - i);
    z[H] = dct * c_prev * f * (1.0f - f);
    z[2 * H] = dct * i * (1.0f - g * g);
    z[3 * H] = dh * tc * o * (1.0f - o);
    *dc = dct * f;
}

/*
 * GRU with reset_after (Keras's default, torch's only form): with x the
 * input's products and hh the recurrent ones, each with its own bias,
 * r = sigmoid(x_r + hh_r), z = sigmoid(x_z + hh_z), n = tanh(x_n + r hh_n),
 * h = z h_prev + (1 - z) n (Keras's order of the terms). x[0], x[H], x[2H]
 * receive the gates r, z, n; hh is read; returns h.
 */
static inline RNN_HD float gru_unit_fwd(float *x, const float *hh, int H, float h_prev)
{
    float r = rnn_sigmoid(x[0] + hh[0]);
    float z = rnn_sigmoid(x[H] + hh[H]);
    float n = rnn_tanh(x[2 * H] + r * hh[2 * H]);
    x[0] = r;
    x[H] = z;
    x[2 * H] = n;
    return z * h_prev + (1.0f - z) * n;
}

/*
 * Its gradients from dh = dL/dh: x (the gates) receives dL/dx (the input
 * products' pre-activations), hh (the recurrent products with their bias)
 * dL/dhh; returns the direct part of dL/dh_prev (z dh), to which the GEMM
 * of dL/dhh with the recurrent kernel adds the rest.
 */
static inline RNN_HD float gru_unit_bwd(float *x, float *hh, int H, float h_prev, float dh)
{
    float r = x[0], z = x[H], n = x[2 * H], hn = hh[2 * H];
    float dn = dh * (1.0f - z) * (1.0f - n * n);
    float dr = dn * hn * r * (1.0f - r);
    float dz = dh * (h_prev - n) * z * (1.0f - z);
    x[0] = dr;
    x[H] = dz;
    x[2 * H] = dn;
    hh[0] = dr;
    hh[H] = dz;
    hh[2 * H] = dn * r;
    return dh * z;
}

#endif
