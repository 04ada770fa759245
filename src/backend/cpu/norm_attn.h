/*
 * backend/cpu/norm_attn: the CPU backend's ops of layer normalization
 * (backend_impl.h's ln_fwd, ln_bwd) and of attention, over count models.
 * Each row's and column's sums are backend/norm_rows.h's, in a fixed order;
 * the threads take whole rows (or columns): no result depends on them.
 */
#ifndef COHORT_BACKEND_CPU_NORM_ATTN_H
#define COHORT_BACKEND_CPU_NORM_ATTN_H

#include "backend/backend_impl.h"

/* The context's threads run fn(arg, part, parts) for every part (backend_cpu.c's
 * team_run; on the calling thread alone below its threshold of `work`
 * multiply-adds). */
void cpu_team_run(backend_ctx *c, void (*fn)(void *, int, int), void *arg, double work);

void cpu_ln_fwd(backend_ctx *c, float *Y, size_t sY, const float *X, size_t sX,
                const float *gamma, const float *beta, size_t sp, float *stat, size_t sst,
                const float *eps, int rows, int C, int count);
void cpu_ln_bwd(backend_ctx *c, float *dX, size_t sdX, const float *dY, size_t sdY,
                const float *X, size_t sX, const float *gamma, size_t sp, const float *stat,
                size_t sst, float *dgamma, float *dbeta, size_t sg, int rows, int C, int count);

void cpu_attn_softmax_fwd(backend_ctx *c, float *S, size_t sS, const float *tokens,
                          size_t s_tokens, int n, int H, int T, int causal, int count);
void cpu_attn_softmax_bwd(backend_ctx *c, float *dS, size_t sdS, const float *P, size_t sP,
                          int n, int H, int T, int count);

#endif
