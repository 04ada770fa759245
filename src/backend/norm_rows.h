/*
 * backend/norm_rows.h: layer normalization of one vector (a row of C
 * features), forward and backward, and the column sums of its parameters'
 * gradients, as static inline functions that C and CUDA compile alike
 * (NORM_HD): the CPU's loops (backend/cpu/norm_attn.c) and the CUDA plugin's
 * kernels (one thread per row or column, backend/cuda/kernels.cu) run these
 * same sums, in double and in index order, so the two backends agree bit
 * for bit wherever their sqrt does (the plugin is built with -fmad=false).
 *
 *   mean = sum x / C, var = sum (x - mean)^2 / C (biased, as Keras's and
 *   torch's), inv = 1 / sqrt(var + eps), xhat = (x - mean) inv,
 *   y = gamma xhat + beta;
 *   dx = inv (g - mean(g) - xhat mean(g xhat)), g = dy gamma;
 *   dgamma = sum over rows of dy xhat, dbeta = sum over rows of dy.
 */
#ifndef COHORT_BACKEND_NORM_ROWS_H
#define COHORT_BACKEND_NORM_ROWS_H

#include <math.h>

#ifdef __CUDACC__
#define NORM_HD __host__ __device__
#else
#define NORM_HD
#endif

/* y = the row x normalized; stat (NULL: not kept) receives mean and inv. */
static inline NORM_HD void ln_row_fwd(float *y, const float *x, const float *gamma,
                                      const float *beta, float *stat, float eps, int C)
{
    double s = 0.0, v = 0.0;
    for (int j = 0; j < C; j++)
        s += (double)x[j];
    double mean = s / (double)C;
    for (int j = 0; j < C; j++) {
        double d = (double)x[j] - mean;
        v += d * d;
    }
    float m = (float)mean, inv = (float)(1.0 / sqrt(v / (double)C + (double)eps));
    for (int j = 0; j < C; j++)
        y[j] = gamma[j] * ((x[j] - m) * inv) + beta[j];
    if (stat) {
        stat[0] = m;
        stat[1] = inv;
    }
}

/* dx of one row from dy, its input x and its kept stat (mean, inv). */
static inline NORM_HD void ln_row_bwd(float *dx, const float *dy, const float *x,
                                      const float *gamma, const float *stat, int C)
{
    float m = stat[0], inv = stat[1];
    double sg = 0.0, sgx = 0.0;
    for (int j = 0; j < C; j++) {
        float g = dy[j] * gamma[j], xh = (x[j] - m) * inv;
        sg += (double)g;
        sgx += (double)g * (double)xh;
    }
    float a = (float)(sg / (double)C), b = (float)(sgx / (double)C);
    for (int j = 0; j < C; j++) {
        float g = dy[j] * gamma[j], xh = (x[j] - m) * inv;
        dx[j] = inv * (g - a - xh * b);
    }
}

/* Column j's parameter gradients over `rows` rows (leading dimensions ldy,
 * ldx; stat [rows, 2]), the rows in order. */
static inline NORM_HD void ln_col_grad(float *dgamma, float *dbeta, const float *dY, int ldy,
                                       const float *X, int ldx, const float *stat, int rows,
                                       int j)
{
    double sg = 0.0, sb = 0.0;
    for (int r = 0; r < rows; r++) {
        float dy = dY[(size_t)r * (size_t)ldy + (size_t)j];
        float xh = (X[(size_t)r * (size_t)ldx + (size_t)j] - stat[2 * (size_t)r]) *
                   stat[2 * (size_t)r + 1];
        sg += (double)dy * (double)xh;
        sb += (double)dy;
    }
    *dgamma = (float)sg;
    *dbeta = (float)sb;
}

#endif
