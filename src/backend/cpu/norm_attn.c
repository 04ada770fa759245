/*
 * backend/cpu/norm_attn: layer normalization (and attention's own ops) on
 * the CPU, a row or a column at a time through backend/norm_rows.h's
 * functions, which the CUDA plugin runs too.
 */
#include "backend/cpu/norm_attn.h"
#include "backend/attn_rows.h"
#include "backend/norm_rows.h"

void cpu_ln_fwd(backend_ctx *c, float *Y, size_t sY, const float *X, size_t sX,
                const float *gamma, const float *beta, size_t sp, float *stat, size_t sst,
                const float *eps, int rows, int C, int count)
{
    (void)c;
    for (int k = 0; k < count; k++)
        for (int r = 0; r < rows; r++) {
            size_t o = (size_t)r * (size_t)C;
            ln_row_fwd(Y + k * sY + o, X + k * sX + o, gamma + k * sp, beta + k * sp,
                       stat ? stat + k * sst + 2 * (size_t)r : NULL, eps[k], C);
        }
}

void cpu_ln_bwd(backend_ctx *c, float *dX, size_t sdX, const float *dY, size_t sdY,
                const float *X, size_t sX, const float *gamma, size_t sp, const float *stat,
                size_t sst, float *dgamma, float *dbeta, size_t sg, int rows, int C, int count)
{
    (void)c;
    for (int k = 0; k < count; k++) {
        const float *dy = dY + k * sdY, *x = X + k * sX, *st = stat + k * sst;
        for (int j = 0; j < C; j++)
            ln_col_grad(dgamma + k * sg + j, dbeta + k * sg + j, dy, C, x, C, st, rows, j);
        if (dX)
            for (int r = 0; r < rows; r++) {
                size_t o = (size_t)r * (size_t)C;
                ln_row_bwd(dX + k * sdX + o, dy + o, x + o, gamma + k * sp, st + 2 * (size_t)r,
                           C);
            }
    }
}

void cpu_attn_softmax_fwd(backend_ctx *c, float *S, size_t sS, const float *tokens,
                          size_t s_tokens, int n, int H, int T, int causal, int count)
{
    (void)c;
    size_t rows = (size_t)H * (size_t)n * (size_t)T;
    for (int k = 0; k < count; k++)
        for (size_t r = 0; r < rows; r++) {
            size_t b = r / (size_t)T % (size_t)n, i = r % (size_t)T;
            const float *tok = tokens ? tokens + k * s_tokens + b * (size_t)T : NULL;
            attn_row_softmax(S + k * sS + r * (size_t)T, tok, causal, (int)i, T);
        }
}

void cpu_attn_softmax_bwd(backend_ctx *c, float *dS, size_t sdS, const float *P, size_t sP,
                          int n, int H, int T, int count)
{
    (void)c;
    size_t rows = (size_t)H * (size_t)n * (size_t)T;
    for (int k = 0; k < count; k++)
        for (size_t r = 0; r < rows; r++)
            attn_row_softmax_bwd(dS + k * sdS + r * (size_t)T, P + k * sP + r * (size_t)T, T);
}
