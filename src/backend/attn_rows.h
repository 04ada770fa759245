/*
 * backend/attn_rows.h: the softmax of one row of attention scores over its
 * keys, forward and backward, as static inline functions that C and CUDA
 * compile alike (ATTN_HD): the CPU's loops (backend/cpu/norm_attn.c) and
 * the CUDA plugin's kernels (a thread per row) run these same sums.
 *
 * Row i of sample b (T keys): key j takes part unless its token is padding
 * (tok[j] == 0, where tok is not NULL) or, causal, j > i; a row whose query
 * is padding (tok[i] == 0) takes none. Keras 3's masked softmax: the
 * weights of keys that take no part are 0, and a row with none is all 0.
 *   forward:  p_j = exp(s_j - max) / sum over the keys that take part
 *   backward: ds_j = p_j (dp_j - sum_k p_k dp_k)   (sums in double)
 */
#ifndef COHORT_BACKEND_ATTN_ROWS_H
#define COHORT_BACKEND_ATTN_ROWS_H

#include <math.h>

#ifdef __CUDACC__
#define ATTN_HD __host__ __device__
#else
#define ATTN_HD
#endif

static inline ATTN_HD int attn_key_in(const float *tok, int causal, int i, int j)
{
    return !(causal && j > i) && (!tok || tok[j] != 0.0f);
}

/* s: the row's T scores, replaced by its weights. */
static inline ATTN_HD void attn_row_softmax(float *s, const float *tok, int causal, int i, int T)
{
    int any = !tok || tok[i] != 0.0f;
    float mx = -INFINITY;
    for (int j = 0; j < T && any; j++)
        if (attn_key_in(tok, causal, i, j) && s[j] > mx)
            mx = s[j];
    if (!any || mx == -INFINITY) {
        for (int j = 0; j < T; j++)
            s[j] = 0.0f;
        return;
    }
    double sum = 0.0;
    for (int j = 0; j < T; j++) {
        float e = attn_key_in(tok, causal, i, j) ? expf(s[j] - mx) : 0.0f;
        s[j] = e;
        sum += (double)e;
    }
    float inv = (float)(1.0 / sum);
    for (int j = 0; j < T; j++)
        s[j] *= inv;
}

/* d: the row's gradient with respect to its weights p, replaced by the
 * gradient with respect to its scores. */
static inline ATTN_HD void attn_row_softmax_bwd(float *d, const float *p, int T)
{
    double dot = 0.0;
    for (int j = 0; j < T; j++)
        dot += (double)p[j] * (double)d[j];
    float c = (float)dot;
    for (int j = 0; j < T; j++)
        d[j] = p[j] * (d[j] - c);
}

#endif
