/*
 * backend/cpu/norm_attn: layer normalization (and attention's own ops) on
 * the CPU, over the context's threads. Every row's and column's sums are
 * backend/norm_rows.h's and backend/attn_rows.h's, which the CUDA plugin
 * runs too, in the same order whatever the split: a part is a run of whole
 * rows (or whole columns, for the parameters' gradients), so the results
 * are the same bits for any number of threads.
 *
 * Layer normalization takes LN_ROWS rows at a time with their sums
 * interleaved, forward and backward: each row's sum is still one chain of
 * double adds in index order (ln_row_fwd's, ln_row_bwd's), but four chains
 * in flight hide the adds' latency, which bound the row-at-a-time loop (a
 * 32-wide row's two sums are 64 dependent adds). The parameters' gradients likewise go row by row
 * with one double accumulator per column (ln_col_grad's sums, in row
 * order), instead of a pass over every row for each column.
 */
#include "backend/cpu/norm_attn.h"
#include "backend/attn_rows.h"
#include "backend/cpu/dense_step.h"
#include "backend/norm_rows.h"

/* Rows a part of the pool takes at least: about 2 us of work each. */
#define LN_UNIT 16
/* Rows of ln_fwd whose sums run interleaved. */
#define LN_ROWS 4
/* Columns of ln_bwd's parameter gradients per part's unit (the accumulators
 * of one unit stay in registers). */
#define LN_COLS 16
/* Attention rows per unit. */
#define ATTN_UNIT 64

/* The cost of a row of C features in the multiply-adds that team_run counts
 * work in (about 20 us of a product's per million): one-thread timings on
 * the words Transformer's 2048 x 32 (AMD EPYC Zen 4), ln_fwd 49 us and
 * ln_bwd's two passes 84 us, about 32 each an element. */
static double row_work(int C) { return 32.0 * (double)C; }

typedef struct ln_job {
    float *Y, *stat, *dX, *dgamma, *dbeta;
    const float *X, *dY, *gamma, *beta, *kept; /* kept: ln_bwd's stat */
    const float *eps;
    size_t sY, sX, sdX, sdY, sp, sst, sg;
    int rows, C, count;
} ln_job;

/* The next run of units [*u, u1) within one model of `per` units: model
 * *k, its units [*a, *b); *u moves past them. */
static void next_span(int *u, int u1, int per, int *k, int *a, int *b)
{
    *k = *u / per;
    *a = *u % per;
    *b = *a + (u1 - *u) < per ? *a + (u1 - *u) : per;
    *u += *b - *a;
}

/* LN_ROWS rows of ln_row_fwd, their sums interleaved: the same operations
 * in the same order for each row. */
static void ln_rows4_fwd(float *y, const float *x, const float *gamma, const float *beta,
                         float *stat, float eps, int C)
{
    const float *x0 = x, *x1 = x + C, *x2 = x + 2 * (size_t)C, *x3 = x + 3 * (size_t)C;
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    for (int j = 0; j < C; j++) {
        s0 += (double)x0[j];
        s1 += (double)x1[j];
        s2 += (double)x2[j];
        s3 += (double)x3[j];
    }
    double m0 = s0 / (double)C, m1 = s1 / (double)C, m2 = s2 / (double)C, m3 = s3 / (double)C;
    double v0 = 0.0, v1 = 0.0, v2 = 0.0, v3 = 0.0;
    for (int j = 0; j < C; j++) {
        double d0 = (double)x0[j] - m0, d1 = (double)x1[j] - m1;
        double d2 = (double)x2[j] - m2, d3 = (double)x3[j] - m3;
        v0 += d0 * d0;
        v1 += d1 * d1;
        v2 += d2 * d2;
        v3 += d3 * d3;
    }
    const double mean[LN_ROWS] = {m0, m1, m2, m3}, var[LN_ROWS] = {v0, v1, v2, v3};
    for (int i = 0; i < LN_ROWS; i++) {
        const float *xi = x + (size_t)i * (size_t)C;
        float *yi = y + (size_t)i * (size_t)C;
        float m = (float)mean[i], inv = (float)(1.0 / sqrt(var[i] / (double)C + (double)eps));
        for (int j = 0; j < C; j++)
            yi[j] = gamma[j] * ((xi[j] - m) * inv) + beta[j];
        if (stat) {
            stat[2 * i] = m;
            stat[2 * i + 1] = inv;
        }
    }
}

static void ln_fwd_part(void *p, int part, int parts)
{
    const ln_job *j = p;
    int u0, u1;
    part_range(j->rows * j->count, LN_UNIT, part, parts, &u0, &u1);
    size_t C = (size_t)j->C;
    while (u0 < u1) {
        int k, a, b;
        next_span(&u0, u1, j->rows, &k, &a, &b);
        float *Y = j->Y + k * j->sY, *st = j->stat ? j->stat + k * j->sst : NULL;
        const float *X = j->X + k * j->sX, *g = j->gamma + k * j->sp, *be = j->beta + k * j->sp;
        int r = a;
        for (; r + LN_ROWS <= b; r += LN_ROWS)
            ln_rows4_fwd(Y + (size_t)r * C, X + (size_t)r * C, g, be,
                         st ? st + 2 * (size_t)r : NULL, j->eps[k], j->C);
        for (; r < b; r++)
            ln_row_fwd(Y + (size_t)r * C, X + (size_t)r * C, g, be,
                       st ? st + 2 * (size_t)r : NULL, j->eps[k], j->C);
    }
}

void cpu_ln_fwd(backend_ctx *c, float *Y, size_t sY, const float *X, size_t sX,
                const float *gamma, const float *beta, size_t sp, float *stat, size_t sst,
                const float *eps, int rows, int C, int count)
{
    ln_job j = {.Y = Y, .stat = stat, .X = X, .gamma = gamma, .beta = beta, .eps = eps,
                .sY = sY, .sX = sX, .sp = sp, .sst = sst, .rows = rows, .C = C, .count = count};
    cpu_team_run(c, ln_fwd_part, &j, (double)rows * count * row_work(C));
}

/* Columns [c0, c1) (at most LN_COLS) of one model's parameter gradients:
 * ln_col_grad's sums, every column's over the rows in order. */
static void ln_cols_grad(float *dgamma, float *dbeta, const float *dY, const float *X,
                         const float *stat, int rows, int C, int c0, int c1)
{
    double sg[LN_COLS] = {0}, sb[LN_COLS] = {0};
    int w = c1 - c0;
    for (int r = 0; r < rows; r++) {
        const float *dy = dY + (size_t)r * (size_t)C + c0, *x = X + (size_t)r * (size_t)C + c0;
        float m = stat[2 * (size_t)r], inv = stat[2 * (size_t)r + 1];
        for (int i = 0; i < w; i++) {
            float xh = (x[i] - m) * inv;
            sg[i] += (double)dy[i] * (double)xh;
            sb[i] += (double)dy[i];
        }
    }
    for (int i = 0; i < w; i++) {
        dgamma[c0 + i] = (float)sg[i];
        dbeta[c0 + i] = (float)sb[i];
    }
}

static void ln_grad_part(void *p, int part, int parts)
{
    const ln_job *j = p;
    int per = (j->C + LN_COLS - 1) / LN_COLS, u0, u1;
    part_range(per * j->count, 1, part, parts, &u0, &u1);
    for (int u = u0; u < u1; u++) {
        int k = u / per, c0 = u % per * LN_COLS, c1 = c0 + LN_COLS < j->C ? c0 + LN_COLS : j->C;
        ln_cols_grad(j->dgamma + k * j->sg, j->dbeta + k * j->sg, j->dY + k * j->sdY,
                     j->X + k * j->sX, j->kept + k * j->sst, j->rows, j->C, c0, c1);
    }
}

/* LN_ROWS rows of ln_row_bwd, their sums interleaved as ln_rows4_fwd's:
 * the same operations in the same order for each row. */
static void ln_rows4_bwd(float *dx, const float *dy, const float *x, const float *gamma,
                         const float *stat, int C)
{
    double sg[LN_ROWS] = {0}, sgx[LN_ROWS] = {0};
    float m[LN_ROWS], inv[LN_ROWS];
    for (int i = 0; i < LN_ROWS; i++)
        m[i] = stat[2 * i], inv[i] = stat[2 * i + 1];
    for (int j = 0; j < C; j++)
        for (int i = 0; i < LN_ROWS; i++) {
            size_t o = (size_t)i * (size_t)C + (size_t)j;
            float g = dy[o] * gamma[j], xh = (x[o] - m[i]) * inv[i];
            sg[i] += (double)g;
            sgx[i] += (double)g * (double)xh;
        }
    for (int i = 0; i < LN_ROWS; i++) {
        float a = (float)(sg[i] / (double)C), b = (float)(sgx[i] / (double)C);
        for (int j = 0; j < C; j++) {
            size_t o = (size_t)i * (size_t)C + (size_t)j;
            float g = dy[o] * gamma[j], xh = (x[o] - m[i]) * inv[i];
            dx[o] = inv[i] * (g - a - xh * b);
        }
    }
}

static void ln_dx_part(void *p, int part, int parts)
{
    const ln_job *j = p;
    int u0, u1;
    part_range(j->rows * j->count, LN_UNIT, part, parts, &u0, &u1);
    size_t C = (size_t)j->C;
    while (u0 < u1) {
        int k, a, b;
        next_span(&u0, u1, j->rows, &k, &a, &b);
        float *dX = j->dX + k * j->sdX;
        const float *dY = j->dY + k * j->sdY, *X = j->X + k * j->sX, *g = j->gamma + k * j->sp;
        const float *st = j->kept + k * j->sst;
        int r = a;
        for (; r + LN_ROWS <= b; r += LN_ROWS)
            ln_rows4_bwd(dX + (size_t)r * C, dY + (size_t)r * C, X + (size_t)r * C, g,
                         st + 2 * (size_t)r, j->C);
        for (; r < b; r++)
            ln_row_bwd(dX + (size_t)r * C, dY + (size_t)r * C, X + (size_t)r * C, g,
                       st + 2 * (size_t)r, j->C);
    }
}

void cpu_ln_bwd(backend_ctx *c, float *dX, size_t sdX, const float *dY, size_t sdY,
                const float *X, size_t sX, const float *gamma, size_t sp, const float *stat,
                size_t sst, float *dgamma, float *dbeta, size_t sg, int rows, int C, int count)
{
    ln_job j = {.dX = dX, .dgamma = dgamma, .dbeta = dbeta, .X = X, .dY = dY, .gamma = gamma,
                .kept = stat, .sX = sX, .sdX = sdX, .sdY = sdY, .sp = sp, .sst = sst,
                .sg = sg, .rows = rows, .C = C, .count = count};
    double work = (double)rows * count * row_work(C);
    /* The parameters' gradients read dY before dX (which may be dY) is written. */
    cpu_team_run(c, ln_grad_part, &j, work);
    if (dX)
        cpu_team_run(c, ln_dx_part, &j, work);
}

typedef struct attn_job {
    float *S;
    const float *P, *tokens;
    size_t sS, sP, s_tokens;
    int n, H, T, causal, count;
} attn_job;

static void softmax_fwd_part(void *p, int part, int parts)
{
    const attn_job *j = p;
    int per = j->H * j->n * j->T, u0, u1;
    part_range(per * j->count, ATTN_UNIT, part, parts, &u0, &u1);
    size_t T = (size_t)j->T;
    while (u0 < u1) {
        int k, a, b;
        next_span(&u0, u1, per, &k, &a, &b);
        for (int r = a; r < b; r++) {
            size_t s = (size_t)r / T % (size_t)j->n, i = (size_t)r % T;
            const float *tok = j->tokens ? j->tokens + k * j->s_tokens + s * T : NULL;
            attn_row_softmax(j->S + k * j->sS + (size_t)r * T, tok, j->causal, (int)i, j->T);
        }
    }
}

void cpu_attn_softmax_fwd(backend_ctx *c, float *S, size_t sS, const float *tokens,
                          size_t s_tokens, int n, int H, int T, int causal, int count)
{
    attn_job j = {.S = S, .tokens = tokens, .sS = sS, .s_tokens = s_tokens, .n = n, .H = H,
                  .T = T, .causal = causal, .count = count};
    /* 8192 rows of 16 (the words Transformer's batch): 600 us on one thread
     * (Zen 4), about 200 multiply-adds' time an element, 64 counted. */
    cpu_team_run(c, softmax_fwd_part, &j, 64.0 * H * n * (double)T * T * count);
}

static void softmax_bwd_part(void *p, int part, int parts)
{
    const attn_job *j = p;
    int per = j->H * j->n * j->T, u0, u1;
    part_range(per * j->count, ATTN_UNIT, part, parts, &u0, &u1);
    size_t T = (size_t)j->T;
    while (u0 < u1) {
        int k, a, b;
        next_span(&u0, u1, per, &k, &a, &b);
        for (int r = a; r < b; r++)
            attn_row_softmax_bwd(j->S + k * j->sS + (size_t)r * T, j->P + k * j->sP + (size_t)r * T,
                                 j->T);
    }
}

void cpu_attn_softmax_bwd(backend_ctx *c, float *dS, size_t sdS, const float *P, size_t sP,
                          int n, int H, int T, int count)
{
    attn_job j = {.S = dS, .P = P, .sS = sdS, .sP = sP, .n = n, .H = H, .T = T, .count = count};
    /* The same rows: 140 us. */
    cpu_team_run(c, softmax_bwd_part, &j, 16.0 * H * n * (double)T * T * count);
}
