/*
 * The CUDA backend's element-wise, reduction and image-window kernels. Each
 * computes what the CPU kernel of the same name computes (src/backend/cpu/
 * kernels.c), with the same operations in the same order per element; it is
 * built with -fmad=false so that a*b+c rounds twice, as the CPU code does.
 * Reductions (bias_grad, the loss sums, batch norm) run in a fixed order and
 * the window backward passes are gathers, not atomic scatters: the same bits
 * every run.
 */
#include "backend/cuda/kernels_cuda.h"
#include "backend/rnn_cell.h"

extern "C" {
#include "model/model.h"
#include "backend/act_math.h"
#include "backend/norm_rows.h"
#include "backend/attn_rows.h"
}

#include <math.h>

namespace {

const int THREADS = 256;

/* Blocks along x for n elements per model: enough to fill the GPU with all
 * models together, the rest by grid-stride loops. */
unsigned blocks_for(size_t n, int count)
{
    size_t want = (n + THREADS - 1) / THREADS;
    size_t cap = (size_t)(8192 / (count > 0 ? count : 1));
    if (cap < 1)
        cap = 1;
    if (want > cap)
        want = cap;
    return (unsigned)(want ? want : 1);
}

dim3 grid_for(size_t n, int count) { return dim3(blocks_for(n, count), (unsigned)count, 1); }

#define ELEMENTS(i, n)                                                                        \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                   \
         i += (size_t)gridDim.x * blockDim.x)

/* Y is (rows, cols) per model, bias (cols) or NULL: Y = act(Y + bias). */
__global__ void k_bias_act(float *Y, size_t sY, const float *bias, size_t sb, int rows, int cols,
                           int act)
{
    float *y = Y + blockIdx.y * sY;
    const float *b = bias ? bias + blockIdx.y * sb : NULL; /* NULL: the activation alone */
    size_t n = (size_t)rows * (size_t)cols;
    ELEMENTS(i, n)
    {
        float z = b ? y[i] + b[i % (size_t)cols] : y[i];
        switch (act) {
        case ACT_RELU: y[i] = z > 0.0f ? z : 0.0f; break;
        case ACT_SIGMOID: y[i] = 1.0f / (1.0f + expf(-z)); break;
        case ACT_TANH: y[i] = tanhf(z); break;
        case ACT_GELU: y[i] = act_gelu(z); break;
        case ACT_SILU: y[i] = act_silu(z); break;
        default: y[i] = z; break;
        }
    }
}

/* d, Y are (n) per model: d *= act'(z), written through the output Y
 * (gelu, silu: Y is the input z itself, act_needs_input). */
__global__ void k_act_backward(float *D, size_t sd, const float *Y, size_t sY, size_t n, int act)
{
    float *d = D + blockIdx.y * sd;
    const float *y = Y + blockIdx.y * sY;
    ELEMENTS(i, n)
    {
        switch (act) {
        case ACT_RELU: d[i] = y[i] > 0.0f ? d[i] : 0.0f; break;
        case ACT_SIGMOID: d[i] *= y[i] * (1.0f - y[i]); break;
        case ACT_TANH: d[i] *= 1.0f - y[i] * y[i]; break;
        case ACT_GELU: d[i] *= act_gelu_grad(y[i]); break;
        case ACT_SILU: d[i] *= act_silu_grad(y[i]); break;
        default: break;
        }
    }
}

/* dZ is (rows, cols) per model, db (cols): column sums. Block (32, 8): 32
 * columns, 8 row phases summed in a fixed order. Block z takes rows
 * [z * rpc, (z + 1) * rpc): with one chunk (PART NULL) the sums go to DB,
 * else chunk z's to PART[(k * chunks + z) * cols + j] and
 * k_bias_grad_finish adds the chunks in order. */
__global__ void k_bias_grad(float *DB, size_t sdb, const float *DZ, size_t sdZ, int rows, int cols,
                            int rpc, float *PART)
{
    __shared__ float part[8][33];
    const float *dz = DZ + blockIdx.y * sdZ;
    int j = blockIdx.x * 32 + threadIdx.x;
    int r0 = (int)blockIdx.z * rpc, r1 = rows - r0 < rpc ? rows : r0 + rpc;
    float s = 0.0f;
    if (j < cols)
        for (int r = r0 + (int)threadIdx.y; r < r1; r += 8)
            s += dz[(size_t)r * (size_t)cols + (size_t)j];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && j < cols) {
        float t = part[0][threadIdx.x];
        for (int p = 1; p < 8; p++)
            t += part[p][threadIdx.x];
        if (PART)
            PART[((size_t)blockIdx.y * gridDim.z + blockIdx.z) * (size_t)cols + (size_t)j] = t;
        else
            DB[blockIdx.y * sdb + (size_t)j] = t;
    }
}

/* DB[k, j] = the chunks' column sums of k_bias_grad, chunk 0 first. */
__global__ void k_bias_grad_finish(float *DB, size_t sdb, const float *PART, int cols, int chunks)
{
    int j = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (j >= cols)
        return;
    const float *p = PART + (size_t)blockIdx.y * (size_t)chunks * (size_t)cols + (size_t)j;
    float t = p[0];
    for (int c = 1; c < chunks; c++)
        t += p[(size_t)c * (size_t)cols];
    DB[blockIdx.y * sdb + (size_t)j] = t;
}

/* rng_hash_uniform of src/util/util.c, bit for bit. */
__device__ __forceinline__ float hash_uniform(uint64_t key, uint64_t counter)
{
    uint64_t x = key ^ (counter * 0x9e3779b97f4a7c15ULL);
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z = z ^ (z >> 31);
    return (float)(z >> 40) * (1.0f / 16777216.0f);
}

__global__ void k_dropout_fwd(float *Y, const float *X, float *M, size_t st, size_t n,
                              cu_dropout_args a, uint64_t counter0)
{
    int k = blockIdx.y;
    float *y = Y + k * st, *m = M + k * st;
    const float *x = X + k * st;
    float rate = a.rate[k], keep = a.keep[k];
    uint64_t key = a.key[k];
    ELEMENTS(i, n)
    {
        float v = hash_uniform(key, counter0 + i) >= rate ? keep : 0.0f;
        m[i] = v;
        y[i] = x[i] * v;
    }
}

__global__ void k_mul(float *D, size_t sd, const float *M, size_t sm, size_t n)
{
    float *d = D + blockIdx.y * sd;
    const float *m = M + blockIdx.y * sm;
    ELEMENTS(i, n) { d[i] *= m[i]; }
}

/* Model k's n bytes at B + k * sb as floats at D + k * sd: byte / 255 with
 * one rounding, the host's host_row_of_bytes whatever nvcc's flags. */
__global__ void k_bytes_to_float(float *D, size_t sd, const uint8_t *B, size_t sb, size_t n)
{
    float *d = D + blockIdx.y * sd;
    const uint8_t *b = B + blockIdx.y * sb;
    ELEMENTS(i, n) { d[i] = __fdiv_rn((float)b[i], 255.0f); }
}

__global__ void k_copy(float *D, const float *S, size_t st, size_t n)
{
    float *d = D + blockIdx.y * st;
    const float *s = S + blockIdx.y * st;
    ELEMENTS(i, n) { d[i] = s[i]; }
}

__global__ void k_add(float *Y, size_t sy, const float *A, size_t sa, const float *B, size_t sb,
                      size_t n)
{
    float *y = Y + blockIdx.y * sy;
    const float *a = A + blockIdx.y * sa;
    if (B) {
        const float *b = B + blockIdx.y * sb;
        ELEMENTS(i, n) { y[i] = a[i] + b[i]; }
    } else {
        ELEMENTS(i, n) { y[i] = a[i]; }
    }
}

/* The larger of two (value, index) candidates; ties go to the lower index,
 * so a warp finds the first maximum, as the CPU's sequential scan does. */
__device__ __forceinline__ void argmax_merge(float &v, int &idx, float ov, int oi)
{
    if (ov > v || (ov == v && oi < idx)) {
        v = ov;
        idx = oi;
    }
}

__device__ __forceinline__ void warp_argmax(float &v, int &idx)
{
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        argmax_merge(v, idx, ov, oi);
    }
}

/* Butterfly sums: every lane ends with the same bits (a + b == b + a). */
__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ double warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

const int LOSS_WARPS = 8;

/* Adds the per-warp sums of one model in warp order and updates its stats
 * (the loss op of backend_impl.h). */
__device__ void stats_finish(double *stats, double wl, double wr, double wsq, int rows)
{
    __shared__ double part[3][LOSS_WARPS];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        part[0][warp] = wl;
        part[1][warp] = wr;
        part[2][warp] = wsq;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double loss = 0.0, right = 0.0, sq = 0.0;
        for (int w = 0; w < LOSS_WARPS; w++) {
            loss += part[0][w];
            right += part[1][w];
            sq += part[2][w];
        }
        stats[STAT_LOSS_SUM] += loss;
        stats[STAT_RIGHT] += right;
        stats[STAT_BATCH_LOSS] = rows ? loss / rows : 0.0;
        stats[STAT_SQ_SUM] += sq;
    }
}

/* Target j of row r: the label one-hot (one output: the label as a number)
 * or the row's own value, as the CPU's target_at. */
__device__ __forceinline__ float target_at(const int32_t *y, const float *t, int r, int j, int cols)
{
    if (t)
        return t[(size_t)r * (size_t)cols + (size_t)j];
    return cols == 1 ? (float)y[r] : (j == y[r] ? 1.0f : 0.0f);
}

/* The argmax over the warp of v[0..cols) (first largest). */
__device__ int warp_argmax_of(const float *v, int cols, int lane)
{
    float mx = -INFINITY;
    int arg = 0x7fffffff;
    for (int j = lane; j < cols; j += 32)
        argmax_merge(mx, arg, v[j], j);
    warp_argmax(mx, arg);
    return arg == 0x7fffffff ? 0 : arg;
}

/* One block per model, one warp per row (rows w, w + 8, ...): the loss op
 * of backend_impl.h with the CPU kernel's formulas (kern_loss). */
__global__ void k_loss(cu_loss_args a, float *Z, size_t sZ, const int32_t *Y, size_t sy,
                       const float *T, size_t st, float *DZ, size_t sdZ, double *stats, int rows,
                       int cols, float grad_scale)
{
    int k = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int32_t *y = Y ? Y + k * sy : nullptr;
    const float *t = T ? T + k * st : nullptr;
    const float *cw = a.class_weight ? a.class_weight + (size_t)k * (size_t)a.n_cw : nullptr;
    float s = a.smoothing[k], delta = a.delta[k];
    int keep = a.out_act == ACT_LINEAR;
    double wl = 0.0, wr = 0.0, wsq = 0.0;
    for (int r = warp; r < rows; r += LOSS_WARPS) {
        float *z = Z + k * sZ + (size_t)r * (size_t)cols;
        float *d = DZ ? DZ + k * sdZ + (size_t)r * (size_t)cols : nullptr;
        float w = 1.0f;
        if (cw) {
            int c = !t ? y[r] : cols == 1 ? __float2int_rn(t[r])
                                          : warp_argmax_of(t + (size_t)r * (size_t)cols, cols, lane);
            c = c < 0 ? 0 : c >= a.n_cw ? a.n_cw - 1 : c;
            w = cw[c];
        }
        float scale = grad_scale * w;
        int arg = a.metric == METRIC_ARGMAX ? warp_argmax_of(z, cols, lane) : 0;
        double l = 0.0;
        if (a.kind == LOSS_SCE || a.kind == LOSS_CCE) {
            float mx = -INFINITY;
            for (int j = lane; j < cols; j += 32)
                mx = fmaxf(mx, z[j]);
            for (int o = 16; o > 0; o >>= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            float part = 0.0f;
            for (int j = lane; j < cols; j += 32)
                part += expf(z[j] - mx);
            float sum = warp_sum(part), inv = 1.0f / sum, off = s / (float)cols;
            double lse = log((double)sum) + (double)mx, pl = 0.0;
            float ts = 0.0f;
            for (int j = lane; j < cols; j += 32) {
                float tj = target_at(y, t, r, j, cols) * (1.0f - s) + off;
                if (tj != 0.0f)
                    pl += (double)tj * (lse - (double)z[j]);
                ts += tj;
            }
            l = warp_sum_d(pl);
            float tsum = warp_sum(ts);
            for (int j = lane; j < cols; j += 32) {
                float tj = target_at(y, t, r, j, cols) * (1.0f - s) + off;
                float p = expf(z[j] - mx) * inv;
                if (d)
                    d[j] = p * scale * tsum - tj * scale;
                if (!keep)
                    z[j] = p;
            }
        } else if (a.kind == LOSS_BCE) {
            double pl = 0.0, ok = 0.0;
            for (int j = lane; j < cols; j += 32) {
                float raw = target_at(y, t, r, j, cols), tj = raw * (1.0f - s) + 0.5f * s;
                float zj = z[j], p = 1.0f / (1.0f + expf(-zj));
                pl += (double)fmaxf(zj, 0.0f) - (double)zj * tj + log1p(exp(-fabs((double)zj)));
                ok += raw == (zj > 0.0f ? 1.0f : 0.0f);
                if (d)
                    d[j] = (p - tj) * scale / (float)cols;
                if (!keep)
                    z[j] = p;
            }
            l = warp_sum_d(pl) / cols;
            wr += warp_sum_d(ok) / cols;
        } else {
            double pl = 0.0, ae = 0.0, se = 0.0;
            for (int j = lane; j < cols; j += 32) {
                float e = z[j] - target_at(y, t, r, j, cols), ab = fabsf(e);
                float sign = e > 0.0f ? 1.0f : e < 0.0f ? -1.0f : 0.0f, g;
                ae += ab;
                se += (double)e * e;
                if (a.kind == LOSS_MAE) {
                    pl += ab;
                    g = sign;
                } else if (a.kind == LOSS_HUBER) {
                    pl += ab <= delta ? 0.5 * (double)e * e
                                      : (double)delta * (ab - 0.5 * (double)delta);
                    g = ab <= delta ? e : delta * sign;
                } else {
                    pl += (double)e * e;
                    g = 2.0f * e;
                }
                if (d)
                    d[j] = g * scale / (float)cols;
            }
            l = warp_sum_d(pl) / cols;
            if (a.metric == METRIC_ERRORS)
                wr += warp_sum_d(ae) / cols;
            wsq += warp_sum_d(se) / cols; /* STAT_SQ_SUM, whatever the metric (kern_loss) */
        }
        if (a.metric == METRIC_ARGMAX) {
            int want = t ? warp_argmax_of(t + (size_t)r * (size_t)cols, cols, lane) : y[r];
            wr += arg == want;
        }
        wl += (double)w * l;
    }
    stats_finish(stats + STATS_PER_MODEL * k, wl, wr, wsq, rows);
}

/* Each model's weights through its optimizer's per-weight function, the
 * one the CPU runs (optim/NAME.h). */
__global__ void k_optimize(opt_kind kind, float *W, const float *G, float *S1, float *S2,
                           size_t st, size_t n, cu_optim_args a)
{
    int k = blockIdx.y;
    if (!a.active[k])
        return;
    float *w = W + k * st, *s1 = S1 ? S1 + k * st : nullptr, *s2 = S2 ? S2 + k * st : nullptr;
    const float *g = G + k * st;
    const optim_scalars sc = a.sc[k];
    switch (kind) {
#define K_OPTIMIZE_CASE(KIND, member, update)                                                 \
    case OPT_##KIND:                                                                          \
        ELEMENTS(i, n) { update(w + i, g[i], s1 ? s1 + i : nullptr, s2 ? s2 + i : nullptr, &sc.member); } \
        break;
        OPTIM_UPDATES(K_OPTIMIZE_CASE)
#undef K_OPTIMIZE_CASE
    case OPT_KIND_COUNT: break;
    }
}

/* ---- clipping and regularizers -------------------------------------------- */

const int SUM_THREADS = 256;

/* The block's sum of v (one double per thread), thread order fixed: a tree
 * over shared memory. Every thread gets the total. */
__device__ double block_sum(double v)
{
    __shared__ double part[SUM_THREADS];
    __shared__ double total;
    part[threadIdx.x] = v;
    __syncthreads();
    for (int half = SUM_THREADS / 2; half > 0; half >>= 1) {
        if ((int)threadIdx.x < half)
            part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        total = part[0];
    __syncthreads();
    double r = total;
    __syncthreads(); /* part and total may be reused by the caller's next sum */
    return r;
}

/* Block x of model k sums its chunk [x * per, (x + 1) * per) of the n
 * elements: each thread over a fixed stride, then the block's tree. */
__device__ __forceinline__ void chunk_of(size_t n, size_t per, size_t &i0, size_t &i1)
{
    i0 = (size_t)blockIdx.x * per;
    i1 = n - i0 < per ? n : i0 + per;
}

/* acc[k] (+)= sum of x^2. One chunk (PART NULL): into acc; else chunk x's
 * sum to PART[k * chunks + x] and k_sum_finish adds them in order. */
__global__ void k_sum_sq(double *acc, const float *X, size_t st, size_t n, int add, size_t per,
                         double *PART)
{
    int k = blockIdx.y;
    const float *x = X + k * st;
    size_t i0, i1;
    chunk_of(n, per, i0, i1);
    double v = 0.0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += SUM_THREADS)
        v += (double)x[i] * (double)x[i];
    v = block_sum(v);
    if (threadIdx.x == 0) {
        if (PART)
            PART[(size_t)k * gridDim.x + blockIdx.x] = v;
        else
            acc[k] = (add ? acc[k] : 0.0) + v;
    }
}

__global__ void k_sum_finish(double *acc, const double *PART, int chunks, int add)
{
    int k = blockIdx.y;
    const double *p = PART + (size_t)k * (size_t)chunks;
    double v = p[0];
    for (int c = 1; c < chunks; c++)
        v += p[c];
    acc[k] = (add ? acc[k] : 0.0) + v;
}

__global__ void k_clip_norm(float *X, size_t st, size_t n, const double *acc, cu_pair_args a)
{
    int k = blockIdx.y;
    float c = a.a[k];
    if (!(c > 0.0f))
        return;
    double norm = sqrt(acc[k]);
    float f = (float)((double)c / (norm > (double)c ? norm : (double)c));
    float *x = X + k * st;
    ELEMENTS(i, n) { x[i] *= f; }
}

__global__ void k_clip_value(float *X, size_t st, size_t n, cu_pair_args a)
{
    int k = blockIdx.y;
    float c = a.a[k];
    if (!(c > 0.0f))
        return;
    float *x = X + k * st;
    ELEMENTS(i, n) { x[i] = fminf(fmaxf(x[i], -c), c); }
}

__global__ void k_reg_grad(float *G, const float *W, size_t st, size_t n, cu_pair_args a)
{
    int k = blockIdx.y;
    float l1 = a.a[k], l2 = a.b[k];
    if (l1 == 0.0f && l2 == 0.0f)
        return;
    float two_l2 = 2.0f * l2, *g = G + k * st;
    const float *w = W + k * st;
    ELEMENTS(i, n)
    {
        float wi = w[i];
        float sign = (float)((wi > 0.0f) - (wi < 0.0f));
        g[i] += two_l2 * wi + l1 * sign;
    }
}

/* The penalty of model k's weights into its stats. */
__device__ __forceinline__ void penalty_add(double *stats, int k, float l1, float l2, double sq,
                                            double ab, int rows)
{
    double p = (double)l2 * sq + (double)l1 * ab;
    stats[STATS_PER_MODEL * k + STAT_LOSS_SUM] += (double)rows * p;
    stats[STATS_PER_MODEL * k + STAT_BATCH_LOSS] += p;
}

/* Sums of w^2 and |w| over chunks as k_sum_sq's: one chunk (PART NULL)
 * adds the penalty to stats; else chunk x's two sums go to
 * PART[(k * chunks + x) * 2] and k_reg_penalty_finish adds them in order. */
__global__ void k_reg_penalty(double *stats, const float *W, size_t st, size_t n,
                              cu_pair_args a, int rows, size_t per, double *PART)
{
    int k = blockIdx.y;
    float l1 = a.a[k], l2 = a.b[k];
    if (l1 == 0.0f && l2 == 0.0f)
        return;
    const float *w = W + k * st;
    size_t i0, i1;
    chunk_of(n, per, i0, i1);
    double sq = 0.0, ab = 0.0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += SUM_THREADS) {
        double x = (double)w[i];
        sq += x * x;
        ab += fabs(x);
    }
    sq = block_sum(sq);
    ab = block_sum(ab);
    if (threadIdx.x == 0) {
        if (PART) {
            PART[((size_t)k * gridDim.x + blockIdx.x) * 2] = sq;
            PART[((size_t)k * gridDim.x + blockIdx.x) * 2 + 1] = ab;
        } else {
            penalty_add(stats, k, l1, l2, sq, ab, rows);
        }
    }
}

__global__ void k_reg_penalty_finish(double *stats, const double *PART, int chunks,
                                     cu_pair_args a, int rows)
{
    int k = blockIdx.y;
    float l1 = a.a[k], l2 = a.b[k];
    if (l1 == 0.0f && l2 == 0.0f)
        return;
    const double *p = PART + (size_t)k * (size_t)chunks * 2;
    double sq = p[0], ab = p[1];
    for (int c = 1; c < chunks; c++) {
        sq += p[2 * c];
        ab += p[2 * c + 1];
    }
    penalty_add(stats, k, l1, l2, sq, ab, rows);
}

/* Chunks of a two-stage sum over n items (at least `least` each, at most
 * MAX_CHUNKS) whose partial sums, `part` bytes a chunk, fit the scratch;
 * 1: one stage. A function of the shapes alone, so the sums' order, and so
 * their bits, are the same every run. */
const int MAX_CHUNKS = 64;

int chunks_for(size_t n, size_t least, size_t part, size_t scratch)
{
    size_t c = n / least;
    if (c > (size_t)MAX_CHUNKS)
        c = MAX_CHUNKS;
    while (c > 1 && c * part > scratch)
        c /= 2;
    return c > 1 ? (int)c : 1;
}

/* ---- image windows (NHWC) ------------------------------------------------ */

/* The outputs o, lo <= o <= hi, of one axis whose window (k wide, stride st,
 * `pad` positions of padding before the image) covers input position i:
 * o*st - pad <= i < o*st - pad + k and 0 <= o < n_out. Empty when lo > hi. */
__device__ __forceinline__ void covering(int i, int pad, int k, int st, int n_out, int &lo,
                                         int &hi)
{
    int t = i + pad - k + 1; /* the least o*st */
    lo = t <= 0 ? 0 : (t + st - 1) / st;
    hi = (i + pad) / st;
    if (hi > n_out - 1)
        hi = n_out - 1;
}

/* The part [a, b) of output o's window along one axis that is inside the
 * image of n positions. */
__device__ __forceinline__ void inside(int o, int st, int pad, int k, int n, int &a, int &b)
{
    int o0 = o * st - pad;
    a = o0 > 0 ? o0 : 0;
    b = o0 + k < n ? o0 + k : n;
}

/* col (n*oh*ow, kh*kw*c) per model from X (n, h, w, c): one thread per col
 * element, so that neighbouring threads read neighbouring channels. */
__global__ void k_im2col(float *COL, size_t scol, const float *X, size_t sX, window_geom g)
{
    float *col = COL + blockIdx.y * scol;
    const float *x = X + blockIdx.y * sX;
    int kwc = g.kw * g.c, krow = g.kh * kwc;
    size_t n = (size_t)g.n * (size_t)g.oh * (size_t)g.ow * (size_t)krow;
    ELEMENTS(i, n)
    {
        int row = (int)(i / (size_t)krow), q = (int)(i - (size_t)row * (size_t)krow);
        int ky = q / kwc, kx = q % kwc / g.c, ch = q % g.c;
        int ox = row % g.ow, oy = row / g.ow % g.oh, img = row / g.ow / g.oh;
        int dh = g.dh > 1 ? g.dh : 1, dw = g.dw > 1 ? g.dw : 1;
        int iy = oy * g.sh + ky * dh - g.pad_top, ix = ox * g.sw + kx * dw - g.pad_left;
        bool in = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
        col[i] = in ? x[(((size_t)img * g.h + iy) * g.w + ix) * g.c + ch] : 0.0f;
    }
}

/* dX (n, h, w, c) per model from col: one thread per pixel and channel sums
 * the col entries read from it, outputs in row-major order (the order a
 * sequential scatter over col adds them in). A dilated window (taps dh, dw
 * apart) spans (k - 1)*d + 1 pixels, and an output within that span reads
 * this pixel only where its offset is a multiple of d (one tap at most). */
__global__ void k_col2im(float *DX, size_t sdX, const float *COL, size_t scol, window_geom g)
{
    float *dx = DX + blockIdx.y * sdX;
    const float *col = COL + blockIdx.y * scol;
    size_t krow = (size_t)g.kh * (size_t)g.kw * (size_t)g.c;
    size_t n = (size_t)g.n * (size_t)g.h * (size_t)g.w * (size_t)g.c;
    int dh = g.dh > 1 ? g.dh : 1, dw = g.dw > 1 ? g.dw : 1;
    ELEMENTS(i, n)
    {
        int pix = (int)(i / (size_t)g.c), ch = (int)(i - (size_t)pix * (size_t)g.c);
        int ix = pix % g.w, iy = pix / g.w % g.h, img = pix / g.w / g.h;
        int y0, y1, x0, x1;
        covering(iy, g.pad_top, (g.kh - 1) * dh + 1, g.sh, g.oh, y0, y1);
        covering(ix, g.pad_left, (g.kw - 1) * dw + 1, g.sw, g.ow, x0, x1);
        float s = 0.0f;
        for (int oy = y0; oy <= y1; oy++) {
            int ky = iy + g.pad_top - oy * g.sh;
            if (ky % dh)
                continue;
            ky /= dh;
            for (int ox = x0; ox <= x1; ox++) {
                int kx = ix + g.pad_left - ox * g.sw;
                if (kx % dw)
                    continue;
                kx /= dw;
                size_t row = ((size_t)img * g.oh + oy) * g.ow + ox;
                s += col[row * krow + ((size_t)ky * g.kw + kx) * g.c + ch];
            }
        }
        dx[i] = s;
    }
}

/* Y, arg (n, oh, ow, c) per model from X (n, h, w, c): one thread per output
 * scans its window row by row; a later pixel wins only when larger. */
__global__ void k_maxpool_fwd(float *Y, size_t sY, int32_t *ARG, size_t sarg, const float *X,
                              size_t sX, window_geom g)
{
    float *y = Y + blockIdx.y * sY;
    int32_t *arg = ARG + blockIdx.y * sarg;
    const float *x = X + blockIdx.y * sX;
    size_t n = (size_t)g.n * (size_t)g.oh * (size_t)g.ow * (size_t)g.c;
    ELEMENTS(i, n)
    {
        int pix = (int)(i / (size_t)g.c), ch = (int)(i - (size_t)pix * (size_t)g.c);
        int ox = pix % g.ow, oy = pix / g.ow % g.oh, img = pix / g.ow / g.oh;
        const float *xi = x + (size_t)img * g.h * g.w * g.c + ch;
        int ya, yb, xa, xb;
        inside(oy, g.sh, g.pad_top, g.kh, g.h, ya, yb);
        inside(ox, g.sw, g.pad_left, g.kw, g.w, xa, xb);
        float best = -INFINITY;
        int at = -1; /* stays -1 only for a window all padding, which TF geometry never has */
        for (int iy = ya; iy < yb; iy++)
            for (int ix = xa; ix < xb; ix++) {
                float v = xi[((size_t)iy * g.w + ix) * g.c];
                if (at < 0 || v > best) {
                    best = v;
                    at = iy * g.w + ix;
                }
            }
        y[i] = at < 0 ? 0.0f : best; /* kern_maxpool_fwd: 0 and -1 */
        arg[i] = at;
    }
}

/* dX (n, h, w, c) per model: one thread per pixel and channel sums the dY
 * of the windows covering it whose arg is that pixel, in output order. */
__global__ void k_maxpool_bwd(float *DX, size_t sdX, const float *DY, size_t sdY,
                              const int32_t *ARG, size_t sarg, window_geom g)
{
    float *dx = DX + blockIdx.y * sdX;
    const float *dy = DY + blockIdx.y * sdY;
    const int32_t *arg = ARG + blockIdx.y * sarg;
    size_t n = (size_t)g.n * (size_t)g.h * (size_t)g.w * (size_t)g.c;
    ELEMENTS(i, n)
    {
        int pix = (int)(i / (size_t)g.c), ch = (int)(i - (size_t)pix * (size_t)g.c);
        int ix = pix % g.w, iy = pix / g.w % g.h, img = pix / g.w / g.h;
        int y0, y1, x0, x1;
        covering(iy, g.pad_top, g.kh, g.sh, g.oh, y0, y1);
        covering(ix, g.pad_left, g.kw, g.sw, g.ow, x0, x1);
        int me = iy * g.w + ix;
        float s = 0.0f;
        for (int oy = y0; oy <= y1; oy++)
            for (int ox = x0; ox <= x1; ox++) {
                size_t o = (((size_t)img * g.oh + oy) * g.ow + ox) * g.c + ch;
                if (arg[o] == me)
                    s += dy[o];
            }
        dx[i] = s;
    }
}

/* Y (n, oh, ow, c) per model: one thread per output sums its window's
 * pixels inside the image in float, in kern_avgpool_fwd's order, and
 * multiplies by 1/pixels as it does (0 for a window with none). */
__global__ void k_avgpool_fwd(float *Y, size_t sY, const float *X, size_t sX, window_geom g)
{
    float *y = Y + blockIdx.y * sY;
    const float *x = X + blockIdx.y * sX;
    size_t n = (size_t)g.n * (size_t)g.oh * (size_t)g.ow * (size_t)g.c;
    ELEMENTS(i, n)
    {
        int pix = (int)(i / (size_t)g.c), ch = (int)(i - (size_t)pix * (size_t)g.c);
        int ox = pix % g.ow, oy = pix / g.ow % g.oh, img = pix / g.ow / g.oh;
        const float *xi = x + (size_t)img * g.h * g.w * g.c + ch;
        int ya, yb, xa, xb;
        inside(oy, g.sh, g.pad_top, g.kh, g.h, ya, yb);
        inside(ox, g.sw, g.pad_left, g.kw, g.w, xa, xb);
        int pixels = (yb - ya) * (xb - xa);
        float s = 0.0f;
        for (int iy = ya; iy < yb; iy++)
            for (int ix = xa; ix < xb; ix++)
                s += xi[((size_t)iy * g.w + ix) * g.c];
        y[i] = pixels > 0 ? s * (1.0f / (float)pixels) : 0.0f;
    }
}

/* dX (n, h, w, c) per model: one thread per pixel and channel sums, in
 * output order, dY / (pixels inside the window) of each window covering it. */
__global__ void k_avgpool_bwd(float *DX, size_t sdX, const float *DY, size_t sdY, window_geom g)
{
    float *dx = DX + blockIdx.y * sdX;
    const float *dy = DY + blockIdx.y * sdY;
    size_t n = (size_t)g.n * (size_t)g.h * (size_t)g.w * (size_t)g.c;
    ELEMENTS(i, n)
    {
        int pix = (int)(i / (size_t)g.c), ch = (int)(i - (size_t)pix * (size_t)g.c);
        int ix = pix % g.w, iy = pix / g.w % g.h, img = pix / g.w / g.h;
        int y0, y1, x0, x1;
        covering(iy, g.pad_top, g.kh, g.sh, g.oh, y0, y1);
        covering(ix, g.pad_left, g.kw, g.sw, g.ow, x0, x1);
        float s = 0.0f;
        for (int oy = y0; oy <= y1; oy++) {
            int ya, yb;
            inside(oy, g.sh, g.pad_top, g.kh, g.h, ya, yb);
            for (int ox = x0; ox <= x1; ox++) {
                int xa, xb;
                inside(ox, g.sw, g.pad_left, g.kw, g.w, xa, xb);
                size_t o = (((size_t)img * g.oh + oy) * g.ow + ox) * g.c + ch;
                s += dy[o] * (1.0f / (float)((yb - ya) * (xb - xa))); /* dy * inv, as the CPU */
            }
        }
        dx[i] = s;
    }
}

/* ---- sequences [n, T, C] -------------------------------------------------- */

/* A step of sample i is taken unless its token (tok [n, T], or none) is 0. */
__device__ __forceinline__ bool step_taken(const float *tok, int i, int T, int t)
{
    return !tok || tok[(size_t)i * T + t] != 0.0f;
}

/* Y, arg (n, C) per model: one thread per sample and channel scans the
 * steps in order, as kern_seq_pool_fwd: max (a later step wins only when
 * larger; none taken: 0 and -1) or the sum divided by the steps taken. */
__global__ void k_seq_pool_fwd(int max, float *Y, size_t sY, int32_t *ARG, size_t sarg,
                               const float *X, size_t sX, const float *TOK, size_t stok, int n,
                               int T, int C)
{
    float *y = Y + blockIdx.y * sY;
    const float *x = X + blockIdx.y * sX;
    const float *tok = TOK ? TOK + blockIdx.y * stok : nullptr;
    size_t total = (size_t)n * (size_t)C;
    ELEMENTS(e, total)
    {
        int i = (int)(e / (size_t)C), ch = (int)(e - (size_t)i * (size_t)C);
        const float *xi = x + (size_t)i * T * C + ch;
        float v = 0.0f;
        int at = -1, taken = 0;
        for (int t = 0; t < T; t++) {
            if (!step_taken(tok, i, T, t))
                continue;
            float u = xi[(size_t)t * C];
            if (max) {
                if (taken == 0 || u > v) {
                    v = u;
                    at = t;
                }
            } else {
                v += u;
            }
            taken++;
        }
        if (max)
            ARG[blockIdx.y * sarg + e] = at;
        else if (taken)
            v /= (float)taken;
        y[e] = v;
    }
}

/* dX (n, T, C) per model: one thread per element; max, dY where arg is this
 * step; mean, dY / (steps taken) at a step taken; 0 elsewhere. */
__global__ void k_seq_pool_bwd(int max, float *DX, size_t sdX, const float *DY, size_t sdY,
                               const int32_t *ARG, size_t sarg, const float *TOK, size_t stok,
                               int n, int T, int C)
{
    float *dx = DX + blockIdx.y * sdX;
    const float *dy = DY + blockIdx.y * sdY;
    const float *tok = TOK ? TOK + blockIdx.y * stok : nullptr;
    size_t total = (size_t)n * (size_t)T * (size_t)C;
    ELEMENTS(e, total)
    {
        int ch = (int)(e % (size_t)C), st = (int)(e / (size_t)C);
        int t = st % T, i = st / T;
        size_t o = (size_t)i * C + ch;
        float d = 0.0f;
        if (max) {
            if (ARG[blockIdx.y * sarg + o] == t)
                d = dy[o];
        } else if (step_taken(tok, i, T, t)) {
            int taken = 0;
            for (int u = 0; u < T; u++)
                taken += step_taken(tok, i, T, u);
            d = dy[o] / (float)taken;
        }
        dx[e] = d;
    }
}

/* ---- batch normalization ------------------------------------------------- */

/* Row phases of a batch-norm block, whose shape is (32, BN_PHASES). */
const int BN_PHASES = 16;
/* Channels whose inference scales a block keeps in shared memory (16 KiB). */
const int BN_SCALES = 4096;

/* Where a thread of a batch-norm block works. The block takes channels
 * blockIdx.x * cw + j, j < cw = min(C, 32); lane l takes channel j = l % cw
 * of the rows first, first + step, ... with sub = 32 / cw rows side by side
 * in a warp (so that a warp reads 32 neighbouring floats even when C < 32). */
struct bn_lane {
    int cw, sub, j, s, ch, first, step;
    bool on; /* it has a channel and rows */
};

__device__ bn_lane bn_lane_of(int C)
{
    bn_lane b;
    b.cw = C < 32 ? C : 32;
    b.sub = 32 / b.cw;
    b.j = (int)threadIdx.x % b.cw;
    b.s = (int)threadIdx.x / b.cw;
    b.ch = (int)blockIdx.x * b.cw + b.j;
    b.on = b.s < b.sub && b.ch < C;
    b.first = (int)threadIdx.y * b.sub + b.s;
    b.step = BN_PHASES * b.sub;
    return b;
}

/* The block's sums of u and v for each thread's channel, into every thread's
 * tu and tv: the partial sums of one channel added in a fixed order (phase,
 * then sub-row), so every run gives the same bits. Threads without a channel
 * pass 0. Call once per kernel, from every thread of the block. */
__device__ void bn_block_sums(const bn_lane &b, double u, double v, double &tu, double &tv)
{
    __shared__ double pu[BN_PHASES][32], pv[BN_PHASES][32], ru[32], rv[32];
    pu[threadIdx.y][threadIdx.x] = u;
    pv[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.y == 0 && (int)threadIdx.x < b.cw) {
        double su = 0.0, sv = 0.0;
        for (int p = 0; p < BN_PHASES; p++)
            for (int s = 0; s < b.sub; s++) {
                su += pu[p][s * b.cw + (int)threadIdx.x];
                sv += pv[p][s * b.cw + (int)threadIdx.x];
            }
        ru[threadIdx.x] = su;
        rv[threadIdx.x] = sv;
    }
    __syncthreads();
    tu = ru[b.j];
    tv = rv[b.j];
}

/* A two-stage batch-norm reduction's partial sums: per model k, chunk z and
 * channel, three doubles (the two sums, and the reference the forward pass
 * sums about). */
__device__ __forceinline__ double *bn_part(double *PART, int k, int z, int chunks, int C, int ch)
{
    return PART + (((size_t)k * (size_t)chunks + (size_t)z) * (size_t)C + (size_t)ch) * 3;
}

/* Stage one over many rows: block (g, k, z) sums rows [z * rpc, (z + 1) *
 * rpc) of its channels as the one-stage kernels sum all of them, into
 * bn_part(PART, k, z): forward (DY NULL) x - ref and its square, ref the
 * channel's first value; backward dy and dy * (x - mean). */
__global__ void k_bn_partial(double *PART, const float *X, size_t sX, const float *DY, size_t sdY,
                             const float *STAT, size_t sst, int rows, int C, int rpc)
{
    int k = blockIdx.y, z = blockIdx.z;
    const float *x = X + k * sX;
    bn_lane b = bn_lane_of(C);
    int r0 = z * rpc, r1 = rows - r0 < rpc ? rows : r0 + rpc;
    double u = 0.0, v = 0.0;
    float ref = 0.0f;
    if (b.on && !DY) {
        ref = x[b.ch];
        for (int r = r0 + b.first; r < r1; r += b.step) {
            double d = (double)x[(size_t)r * C + b.ch] - (double)ref;
            u += d;
            v += d * d;
        }
    } else if (b.on) {
        const float *dy = DY + k * sdY;
        ref = STAT[k * sst + b.ch];
        for (int r = r0 + b.first; r < r1; r += b.step) {
            size_t o = (size_t)r * C + b.ch;
            u += (double)dy[o];
            v += (double)dy[o] * ((double)x[o] - (double)ref);
        }
    }
    bn_block_sums(b, u, v, u, v);
    if (b.on && b.s == 0 && threadIdx.y == 0) {
        double *p = bn_part(PART, k, z, (int)gridDim.z, C, b.ch);
        p[0] = u;
        p[1] = v;
        p[2] = (double)ref;
    }
}

/* Stage two's sums of a channel: the chunks' partial sums, chunk 0 first
 * (every block of the channel adds them alike, so all see the same bits). */
__device__ void bn_part_sums(const double *PART, int k, int chunks, int C, int ch, double &u,
                             double &v)
{
    const double *p = bn_part(const_cast<double *>(PART), k, 0, chunks, C, ch);
    u = p[0];
    v = p[1];
    for (int z = 1; z < chunks; z++) {
        p += (size_t)C * 3;
        u += p[0];
        v += p[1];
    }
}

/* X, Y (rows, C) per model; gamma, beta, mov_mean, mov_var (C); stat (2, C).
 * Sums of x and x*x in double, then Y in place-safe order (each element is
 * read and written by one thread). With PART (two stages) the sums are
 * k_bn_partial's and block z writes rows [z * rpc, (z + 1) * rpc); without,
 * one block sums and writes every row (rpc = rows). */
__global__ void k_bn_fwd_train(float *Y, size_t sY, const float *X, size_t sX,
                               const float *GAMMA, const float *BETA, float *MM, float *MV,
                               size_t sp, float *STAT, size_t sst, int rows, int C, cu_bn_args a,
                               const double *PART, int rpc)
{
    int k = blockIdx.y;
    float *y = Y + k * sY;
    const float *x = X + k * sX;
    bn_lane b = bn_lane_of(C);
    int r0 = (int)blockIdx.z * rpc, r1 = rows - r0 < rpc ? rows : r0 + rpc;
    /* As kern_bn_fwd_train: sums about the channel's first value (the
     * variance stays exact for a large mean), mean and variance in double,
     * Y = (X - mean) * (float)(gamma * inv_std) + beta. rows > 0 here. */
    double s1 = 0.0, s2 = 0.0;
    float ref = 0.0f;
    if (!PART) {
        if (b.on) {
            ref = x[b.ch];
            for (int r = b.first; r < rows; r += b.step) {
                double d = (double)x[(size_t)r * C + b.ch] - (double)ref;
                s1 += d;
                s2 += d * d;
            }
        }
        bn_block_sums(b, s1, s2, s1, s2);
    } else if (b.on) {
        /* The reference from stage one: row 0 may be Y's already. */
        ref = (float)bn_part(const_cast<double *>(PART), k, 0, (int)gridDim.z, C, b.ch)[2];
        bn_part_sums(PART, k, (int)gridDim.z, C, b.ch, s1, s2);
    }
    if (!b.on)
        return;
    double dm = s1 / rows, var = s2 / rows - dm * dm;
    var = var > 0.0 ? var : 0.0;
    double mu = (double)ref + dm, inv = 1.0 / sqrt(var + (double)a.eps[k]);
    size_t p = k * sp + b.ch;
    float m = (float)mu, scale = (float)((double)GAMMA[p] * inv), be = BETA[p];
    if (b.s == 0 && threadIdx.y == 0 && blockIdx.z == 0) {
        float *stat = STAT + k * sst, mom = a.momentum[k];
        stat[b.ch] = m;
        stat[C + b.ch] = (float)inv;
        MM[p] = mom * MM[p] + (1.0f - mom) * m;
        MV[p] = mom * MV[p] + (1.0f - mom) * (float)var;
    }
    for (int r = r0 + b.first; r < r1; r += b.step) {
        size_t o = (size_t)r * C + b.ch;
        y[o] = (x[o] - m) * scale + be;
    }
}

/* X, Y (rows, C) per model: Y = gamma * (X - mov_mean) * inv_std + beta. */
__global__ void k_bn_fwd_infer(float *Y, size_t sY, const float *X, size_t sX,
                               const float *GAMMA, const float *BETA, const float *MM,
                               const float *MV, size_t sp, int rows, int C, cu_bn_args a)
{
    int k = blockIdx.y;
    float *y = Y + k * sY;
    const float *x = X + k * sX;
    float eps = a.eps[k];
    /* kern_bn_fwd_infer's scale, in double, rounded once: worked out once per
     * channel by each block (not a double sqrt and division per element),
     * for a tile of up to BN_SCALES channels at a time (one tile, the whole
     * tensor, where the channels fit). */
    __shared__ float scales[BN_SCALES];
    for (int c0 = 0; c0 < C; c0 += BN_SCALES) {
        int w = C - c0 < BN_SCALES ? C - c0 : BN_SCALES;
        /* Every thread is done with the tile before. (With blockDim.x
         * dividing BN_SCALES and the grid's stride, a thread writes and
         * reads only its own residue of the tile, so this wait is never
         * what orders them; it keeps that an accident of the shapes.) */
        if (c0 > 0)
            __syncthreads();
        for (int j = (int)threadIdx.x; j < w; j += (int)blockDim.x) {
            size_t p = k * sp + (size_t)(c0 + j);
            scales[j] = (float)((double)GAMMA[p] / sqrt((double)MV[p] + (double)eps));
        }
        __syncthreads();
        size_t n = (size_t)rows * (size_t)w;
        ELEMENTS(i, n)
        {
            size_t j = i % (size_t)w, o = i / (size_t)w * (size_t)C + (size_t)c0 + j;
            size_t p = k * sp + (size_t)c0 + j;
            y[o] = (x[o] - MM[p]) * scales[j] + BETA[p];
        }
    }
}

/* dY, X, dX (rows, C) per model; gamma (C), stat (2, C), dgamma, dbeta (C):
 * sums of dY and dY*xhat in double, then dX when DX is not NULL. With PART
 * (two stages) the sums are k_bn_partial's and block z writes rows
 * [z * rpc, (z + 1) * rpc) of dX; without, one block does all (rpc = rows). */
__global__ void k_bn_bwd(float *DX, size_t sdX, const float *DY, size_t sdY, const float *X,
                         size_t sX, const float *GAMMA, size_t sp, const float *STAT, size_t sst,
                         float *DG, float *DB, size_t sg, int rows, int C, const double *PART,
                         int rpc)
{
    int k = blockIdx.y;
    const float *dy = DY + k * sdY, *x = X + k * sX, *stat = STAT + k * sst;
    bn_lane b = bn_lane_of(C);
    int r0 = (int)blockIdx.z * rpc, r1 = rows - r0 < rpc ? rows : r0 + rpc;
    /* As kern_bn_bwd: sums of dY and dY * (X - mean) in double, then
     * dX = A dY + B (X - mean) + D with kern_bn_bwd's A, B and D. */
    float m = 0.0f;
    double sd = 0.0, sdx = 0.0;
    if (!PART) {
        if (b.on) {
            m = stat[b.ch];
            for (int r = b.first; r < rows; r += b.step) {
                size_t o = (size_t)r * C + b.ch;
                sd += (double)dy[o];
                sdx += (double)dy[o] * ((double)x[o] - (double)m);
            }
        }
        bn_block_sums(b, sd, sdx, sd, sdx);
    } else if (b.on) {
        m = stat[b.ch];
        bn_part_sums(PART, k, (int)gridDim.z, C, b.ch, sd, sdx);
    }
    if (!b.on)
        return;
    double inv = (double)stat[C + b.ch], dg = sdx * inv;
    if (b.s == 0 && threadIdx.y == 0 && blockIdx.z == 0) {
        DG[k * sg + b.ch] = (float)dg;
        DB[k * sg + b.ch] = (float)sd;
    }
    if (!DX)
        return;
    float *dx = DX + k * sdX;
    double ga = (double)GAMMA[k * sp + b.ch] * inv, n = (double)rows;
    float A = (float)ga, Bc = (float)(-ga * inv * dg / n), D = (float)(-ga * sd / n);
    for (int r = r0 + b.first; r < r1; r += b.step) {
        size_t o = (size_t)r * C + b.ch;
        dx[o] = A * dy[o] + Bc * (x[o] - m) + D;
    }
}

/* Elements of a (a, b, c, d) tensor. */
size_t elems4(int a, int b, int c, int d) { return (size_t)a * (size_t)b * (size_t)c * (size_t)d; }

/* Blocks along x of a batch-norm launch: 32 channels each, or C when fewer. */
unsigned bn_groups(int C) { return (unsigned)(C < 32 ? 1 : (C + 31) / 32); }

/* ---- the recurrent layers' steps: one thread per unit of a row, grid.y
 * the model; the formulas are rnn_cell.h's, as the CPU's kern_lstm_* ---- */

__device__ const float *rnn_row(const float *x, int ld, size_t st, int k, int r)
{
    return x + (size_t)k * st + (size_t)r * (size_t)ld;
}

__device__ float *rnn_row(float *x, int ld, size_t st, int k, int r)
{
    return x + (size_t)k * st + (size_t)r * (size_t)ld;
}

__device__ bool rnn_padded(const rnn_step &s, int k, int r)
{
    return s.tok && *rnn_row(s.tok, s.ld_t, s.s_t, k, r) == 0.0f;
}

/* The output's copy in y, where the step has one. */
__device__ void rnn_out(const rnn_step &s, int k, int r, int j, bool pad, float h)
{
    if (s.y)
        rnn_row(s.y, s.ld_y, s.s_y, k, r)[j] = pad && s.zero_out ? 0.0f : h;
}

/* This step's output gradient of unit j of row r (0 where none). */
__device__ float rnn_dy(const rnn_step &s, int k, int r, int j, bool pad)
{
    return s.dy && !(pad && s.zero_out) ? rnn_row(s.dy, s.ld_dy, s.s_dy, k, r)[j] : 0.0f;
}

__global__ void k_lstm_fwd(rnn_step s)
{
    int k = (int)blockIdx.y, H = s.H;
    ELEMENTS(e, (size_t)s.rows * (size_t)H)
    {
        int r = (int)(e / (size_t)H), j = (int)(e % (size_t)H);
        float *c = rnn_row(s.c, s.ld_c, s.s_c, k, r) + j;
        float *h = rnn_row(s.h, s.ld_h, s.s_h, k, r) + j;
        float cp = s.c_prev ? rnn_row(s.c_prev, s.ld_c, s.s_c, k, r)[j] : 0.0f;
        bool pad = rnn_padded(s, k, r);
        if (pad) {
            *c = cp;
            *h = s.h_prev ? rnn_row(s.h_prev, s.ld_hp, s.s_hp, k, r)[j] : 0.0f;
        } else {
            *h = lstm_unit_fwd(rnn_row(s.gates, s.ld_g, s.s_g, k, r) + j, H, cp, c);
        }
        rnn_out(s, k, r, j, pad, *h);
    }
}

__global__ void k_lstm_bwd(rnn_step s)
{
    int k = (int)blockIdx.y, H = s.H;
    ELEMENTS(e, (size_t)s.rows * (size_t)H)
    {
        int r = (int)(e / (size_t)H), j = (int)(e % (size_t)H);
        float *z = rnn_row(s.gates, s.ld_g, s.s_g, k, r) + j;
        float *dh = rnn_row(s.dh, H, s.s_d, k, r) + j, *dc = rnn_row(s.dc, H, s.s_d, k, r) + j;
        bool pad = rnn_padded(s, k, r);
        float g = (s.first ? 0.0f : *dh) + rnn_dy(s, k, r, j, pad);
        float d = s.first ? 0.0f : *dc;
        if (pad) {
            z[0] = z[H] = z[2 * H] = z[3 * H] = 0.0f;
            *dh = g;
            *dc = d;
            continue;
        }
        float cp = s.c_prev ? rnn_row(s.c_prev, s.ld_c, s.s_c, k, r)[j] : 0.0f;
        lstm_unit_bwd(z, H, rnn_row(s.c, s.ld_c, s.s_c, k, r)[j], cp, g, &d);
        *dc = d;
        *dh = 0.0f;
    }
}

__global__ void k_gru_fwd(rnn_step s)
{
    int k = (int)blockIdx.y, H = s.H;
    const float *b = s.bias + (size_t)k * s.s_b;
    ELEMENTS(e, (size_t)s.rows * (size_t)H)
    {
        int r = (int)(e / (size_t)H), j = (int)(e % (size_t)H);
        float *R = rnn_row(s.rec, s.ld_r, s.s_r, k, r) + j;
        float *h = rnn_row(s.h, s.ld_h, s.s_h, k, r) + j;
        float hp = s.h_prev ? rnn_row(s.h_prev, s.ld_hp, s.s_hp, k, r)[j] : 0.0f;
        for (int q = 0; q < 3; q++)
            R[q * H] = (s.h_prev ? R[q * H] : 0.0f) + b[q * H + j];
        bool pad = rnn_padded(s, k, r);
        if (pad)
            *h = hp;
        else
            *h = gru_unit_fwd(rnn_row(s.gates, s.ld_g, s.s_g, k, r) + j, R, H, hp);
        rnn_out(s, k, r, j, pad, *h);
    }
}

__global__ void k_gru_bwd(rnn_step s)
{
    int k = (int)blockIdx.y, H = s.H;
    ELEMENTS(e, (size_t)s.rows * (size_t)H)
    {
        int r = (int)(e / (size_t)H), j = (int)(e % (size_t)H);
        float *x = rnn_row(s.gates, s.ld_g, s.s_g, k, r) + j;
        float *R = rnn_row(s.rec, s.ld_r, s.s_r, k, r) + j;
        float *dh = rnn_row(s.dh, H, s.s_d, k, r) + j;
        bool pad = rnn_padded(s, k, r);
        float g = (s.first ? 0.0f : *dh) + rnn_dy(s, k, r, j, pad);
        if (pad) {
            x[0] = x[H] = x[2 * H] = 0.0f;
            R[0] = R[H] = R[2 * H] = 0.0f;
            *dh = g;
            continue;
        }
        float hp = s.h_prev ? rnn_row(s.h_prev, s.ld_hp, s.s_hp, k, r)[j] : 0.0f;
        *dh = gru_unit_bwd(x, R, H, hp, g);
    }
}

/* Rows a chunk of a two-stage batch-norm reduction takes at least: 32 per
 * row phase of a block. */
const int BN_CHUNK_ROWS = 32 * BN_PHASES;

/* The chunks of a batch-norm reduction over `rows` (1: one stage, *part
 * NULL) and the rows each takes, *rpc; a function of the shapes alone. */
int bn_chunks(int rows, int C, int count, void *scratch, size_t scratch_bytes, int *rpc,
              double **part)
{
    int chunks = chunks_for((size_t)rows, (size_t)BN_CHUNK_ROWS,
                            (size_t)C * (size_t)count * 3 * sizeof(double),
                            scratch ? scratch_bytes : 0);
    *rpc = chunks > 1 ? (rows + chunks - 1) / chunks : rows;
    chunks = chunks > 1 ? (rows + *rpc - 1) / *rpc : 1; /* no empty chunk */
    *part = chunks > 1 ? static_cast<double *>(scratch) : nullptr;
    return chunks;
}

} /* namespace */

cudaError_t cu_bias_act(cudaStream_t s, float *Y, size_t sY, const float *bias, size_t sb,
                        int rows, int cols, int act, int count)
{
    if (count <= 0 || rows <= 0 || cols <= 0)
        return cudaSuccess;
    k_bias_act<<<grid_for((size_t)rows * (size_t)cols, count), THREADS, 0, s>>>(Y, sY, bias, sb,
                                                                                rows, cols, act);
    return cudaGetLastError();
}

cudaError_t cu_act_backward(cudaStream_t s, float *d, size_t sd, const float *Y, size_t sY,
                            size_t n, int act, int count)
{
    if (count <= 0 || n == 0 || act == ACT_LINEAR || act == ACT_SOFTMAX)
        return cudaSuccess;
    k_act_backward<<<grid_for(n, count), THREADS, 0, s>>>(d, sd, Y, sY, n, act);
    return cudaGetLastError();
}

cudaError_t cu_bias_grad(cudaStream_t s, float *db, size_t sdb, const float *dZ, size_t sdZ,
                         int rows, int cols, int count, void *scratch, size_t scratch_bytes)
{
    if (count <= 0 || cols <= 0)
        return cudaSuccess;
    int r = rows > 0 ? rows : 0;
    int chunks = chunks_for((size_t)r, 512, (size_t)cols * (size_t)count * sizeof(float),
                            scratch ? scratch_bytes : 0);
    int rpc = chunks > 1 ? (r + chunks - 1) / chunks : (r > 0 ? r : 1);
    chunks = chunks > 1 ? (r + rpc - 1) / rpc : 1; /* no empty chunk */
    float *part = chunks > 1 ? static_cast<float *>(scratch) : nullptr;
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)count, (unsigned)chunks);
    k_bias_grad<<<grid, dim3(32, 8), 0, s>>>(db, sdb, dZ, sdZ, r, cols, rpc, part);
    if (part)
        k_bias_grad_finish<<<dim3((unsigned)((cols + THREADS - 1) / THREADS), (unsigned)count),
                             THREADS, 0, s>>>(db, sdb, part, cols, chunks);
    return cudaGetLastError();
}

cudaError_t cu_dropout_fwd(cudaStream_t s, float *Y, const float *X, float *mask, size_t st,
                           size_t n, const cu_dropout_args *a, uint64_t counter0, int count)
{
    if (count <= 0 || n == 0)
        return cudaSuccess;
    k_dropout_fwd<<<grid_for(n, count), THREADS, 0, s>>>(Y, X, mask, st, n, *a, counter0);
    return cudaGetLastError();
}

cudaError_t cu_mul(cudaStream_t s, float *d, size_t sd, const float *mask, size_t sm, size_t n,
                   int count)
{
    if (count <= 0 || n == 0)
        return cudaSuccess;
    k_mul<<<grid_for(n, count), THREADS, 0, s>>>(d, sd, mask, sm, n);
    return cudaGetLastError();
}

cudaError_t cu_bytes_to_float(cudaStream_t s, float *dst, size_t sd, const uint8_t *src,
                              size_t sb, size_t n, int count)
{
    if (count <= 0 || n == 0)
        return cudaSuccess;
    k_bytes_to_float<<<grid_for(n, count), THREADS, 0, s>>>(dst, sd, src, sb, n);
    return cudaGetLastError();
}

cudaError_t cu_copy(cudaStream_t s, float *dst, const float *src, size_t st, size_t n, int count)
{
    if (count <= 0 || n == 0)
        return cudaSuccess;
    k_copy<<<grid_for(n, count), THREADS, 0, s>>>(dst, src, st, n);
    return cudaGetLastError();
}

cudaError_t cu_add(cudaStream_t s, float *Y, size_t sY, const float *A, size_t sA, const float *B,
                   size_t sB, size_t n, int count)
{
    if (count <= 0 || n == 0)
        return cudaSuccess;
    k_add<<<grid_for(n, count), THREADS, 0, s>>>(Y, sY, A, sA, B, sB, n);
    return cudaGetLastError();
}

cudaError_t cu_loss(cudaStream_t s, const cu_loss_args *a, float *Z, size_t sZ, const int32_t *y,
                    size_t sy, const float *t, size_t st, float *dZ, size_t sdZ, double *stats,
                    int rows, int cols, float grad_scale, int count)
{
    if (count <= 0 || cols <= 0)
        return cudaSuccess;
    k_loss<<<dim3(1, (unsigned)count), 32 * LOSS_WARPS, 0, s>>>(
        *a, Z, sZ, y, sy, t, st, dZ, sdZ, stats, rows < 0 ? 0 : rows, cols, grad_scale);
    return cudaGetLastError();
}

cudaError_t cu_optimize(cudaStream_t s, opt_kind kind, float *w, const float *g, float *s1,
                        float *s2, size_t st, size_t n, const cu_optim_args *a, int count)
{
    if (count <= 0 || n == 0)
        return cudaSuccess;
    k_optimize<<<grid_for(n, count), THREADS, 0, s>>>(kind, w, g, s1, s2, st, n, *a);
    return cudaGetLastError();
}

/* Elements a chunk of a two-stage sum takes at least: 32 per thread. */
const size_t SUM_CHUNK = 32 * 256;

cudaError_t cu_sum_sq(cudaStream_t s, double *acc, const float *x, size_t st, size_t n, int add,
                      int count, void *scratch, size_t scratch_bytes)
{
    if (count <= 0)
        return cudaSuccess;
    int chunks = chunks_for(n, SUM_CHUNK, (size_t)count * sizeof(double), scratch ? scratch_bytes : 0);
    size_t per = chunks > 1 ? (n + (size_t)chunks - 1) / (size_t)chunks : (n ? n : 1);
    chunks = chunks > 1 ? (int)((n + per - 1) / per) : 1;
    double *part = chunks > 1 ? static_cast<double *>(scratch) : nullptr;
    k_sum_sq<<<dim3((unsigned)chunks, (unsigned)count), SUM_THREADS, 0, s>>>(acc, x, st, n, add,
                                                                             per, part);
    if (part)
        k_sum_finish<<<dim3(1, (unsigned)count), 1, 0, s>>>(acc, part, chunks, add);
    return cudaGetLastError();
}

cudaError_t cu_clip_norm(cudaStream_t s, float *x, size_t st, size_t n, const double *acc,
                         const cu_pair_args *a, int count)
{
    if (count <= 0 || n == 0)
        return cudaSuccess;
    k_clip_norm<<<grid_for(n, count), THREADS, 0, s>>>(x, st, n, acc, *a);
    return cudaGetLastError();
}

cudaError_t cu_clip_value(cudaStream_t s, float *x, size_t st, size_t n, const cu_pair_args *a,
                          int count)
{
    if (count <= 0 || n == 0)
        return cudaSuccess;
    k_clip_value<<<grid_for(n, count), THREADS, 0, s>>>(x, st, n, *a);
    return cudaGetLastError();
}

cudaError_t cu_reg_grad(cudaStream_t s, float *g, const float *w, size_t st, size_t n,
                        const cu_pair_args *a, int count)
{
    if (count <= 0 || n == 0)
        return cudaSuccess;
    k_reg_grad<<<grid_for(n, count), THREADS, 0, s>>>(g, w, st, n, *a);
    return cudaGetLastError();
}

cudaError_t cu_reg_penalty(cudaStream_t s, double *stats, const float *w, size_t st, size_t n,
                           const cu_pair_args *a, int rows, int count, void *scratch,
                           size_t scratch_bytes)
{
    if (count <= 0)
        return cudaSuccess;
    int chunks =
        chunks_for(n, SUM_CHUNK, (size_t)count * 2 * sizeof(double), scratch ? scratch_bytes : 0);
    size_t per = chunks > 1 ? (n + (size_t)chunks - 1) / (size_t)chunks : (n ? n : 1);
    chunks = chunks > 1 ? (int)((n + per - 1) / per) : 1;
    double *part = chunks > 1 ? static_cast<double *>(scratch) : nullptr;
    k_reg_penalty<<<dim3((unsigned)chunks, (unsigned)count), SUM_THREADS, 0, s>>>(
        stats, w, st, n, *a, rows, per, part);
    if (part)
        k_reg_penalty_finish<<<dim3(1, (unsigned)count), 1, 0, s>>>(stats, part, chunks, *a, rows);
    return cudaGetLastError();
}

cudaError_t cu_im2col(cudaStream_t s, float *col, size_t scol, const float *X, size_t sX,
                      const window_geom *g, int count)
{
    size_t n = elems4(g->n, g->oh, g->ow, g->kh * g->kw * g->c);
    if (count <= 0 || n == 0)
        return cudaSuccess;
    k_im2col<<<grid_for(n, count), THREADS, 0, s>>>(col, scol, X, sX, *g);
    return cudaGetLastError();
}

cudaError_t cu_col2im(cudaStream_t s, float *dX, size_t sdX, const float *col, size_t scol,
                      const window_geom *g, int count)
{
    size_t n = elems4(g->n, g->h, g->w, g->c);
    if (count <= 0 || n == 0)
        return cudaSuccess;
    k_col2im<<<grid_for(n, count), THREADS, 0, s>>>(dX, sdX, col, scol, *g);
    return cudaGetLastError();
}

cudaError_t cu_maxpool_fwd(cudaStream_t s, float *Y, size_t sY, int32_t *arg, size_t sarg,
                           const float *X, size_t sX, const window_geom *g, int count)
{
    size_t n = elems4(g->n, g->oh, g->ow, g->c);
    if (count <= 0 || n == 0)
        return cudaSuccess;
    k_maxpool_fwd<<<grid_for(n, count), THREADS, 0, s>>>(Y, sY, arg, sarg, X, sX, *g);
    return cudaGetLastError();
}

cudaError_t cu_maxpool_bwd(cudaStream_t s, float *dX, size_t sdX, const float *dY, size_t sdY,
                           const int32_t *arg, size_t sarg, const window_geom *g, int count)
{
    size_t n = elems4(g->n, g->h, g->w, g->c);
    if (count <= 0 || n == 0)
        return cudaSuccess;
    k_maxpool_bwd<<<grid_for(n, count), THREADS, 0, s>>>(dX, sdX, dY, sdY, arg, sarg, *g);
    return cudaGetLastError();
}

cudaError_t cu_avgpool_fwd(cudaStream_t s, float *Y, size_t sY, const float *X, size_t sX,
                           const window_geom *g, int count)
{
    size_t n = elems4(g->n, g->oh, g->ow, g->c);
    if (count <= 0 || n == 0)
        return cudaSuccess;
    k_avgpool_fwd<<<grid_for(n, count), THREADS, 0, s>>>(Y, sY, X, sX, *g);
    return cudaGetLastError();
}

cudaError_t cu_avgpool_bwd(cudaStream_t s, float *dX, size_t sdX, const float *dY, size_t sdY,
                           const window_geom *g, int count)
{
    size_t n = elems4(g->n, g->h, g->w, g->c);
    if (count <= 0 || n == 0)
        return cudaSuccess;
    k_avgpool_bwd<<<grid_for(n, count), THREADS, 0, s>>>(dX, sdX, dY, sdY, *g);
    return cudaGetLastError();
}

cudaError_t cu_seq_pool_fwd(cudaStream_t s, int max, float *Y, size_t sY, int32_t *arg,
                            size_t sarg, const float *X, size_t sX, const float *tokens,
                            size_t s_tokens, int n, int T, int C, int count)
{
    size_t e = (size_t)n * (size_t)C;
    if (count <= 0 || e == 0)
        return cudaSuccess;
    k_seq_pool_fwd<<<grid_for(e, count), THREADS, 0, s>>>(max, Y, sY, arg, sarg, X, sX, tokens,
                                                          s_tokens, n, T, C);
    return cudaGetLastError();
}

cudaError_t cu_seq_pool_bwd(cudaStream_t s, int max, float *dX, size_t sdX, const float *dY,
                            size_t sdY, const int32_t *arg, size_t sarg, const float *tokens,
                            size_t s_tokens, int n, int T, int C, int count)
{
    size_t e = (size_t)n * (size_t)T * (size_t)C;
    if (count <= 0 || e == 0)
        return cudaSuccess;
    k_seq_pool_bwd<<<grid_for(e, count), THREADS, 0, s>>>(max, dX, sdX, dY, sdY, arg, sarg,
                                                          tokens, s_tokens, n, T, C);
    return cudaGetLastError();
}

cudaError_t cu_bn_fwd_train(cudaStream_t s, float *Y, size_t sY, const float *X, size_t sX,
                            const float *gamma, const float *beta, float *mov_mean,
                            float *mov_var, size_t sp, float *stat, size_t sst, int rows, int C,
                            const cu_bn_args *a, int count, void *scratch, size_t scratch_bytes)
{
    if (count <= 0 || rows <= 0 || C <= 0)
        return cudaSuccess;
    int rpc;
    double *part;
    int chunks = bn_chunks(rows, C, count, scratch, scratch_bytes, &rpc, &part);
    dim3 grid(bn_groups(C), (unsigned)count, (unsigned)chunks);
    if (part)
        k_bn_partial<<<grid, dim3(32, BN_PHASES), 0, s>>>(part, X, sX, nullptr, 0, nullptr, 0,
                                                          rows, C, rpc);
    k_bn_fwd_train<<<grid, dim3(32, BN_PHASES), 0, s>>>(Y, sY, X, sX, gamma, beta, mov_mean,
                                                        mov_var, sp, stat, sst, rows, C, *a,
                                                        part, rpc);
    return cudaGetLastError();
}

cudaError_t cu_bn_fwd_infer(cudaStream_t s, float *Y, size_t sY, const float *X, size_t sX,
                            const float *gamma, const float *beta, const float *mov_mean,
                            const float *mov_var, size_t sp, int rows, int C,
                            const cu_bn_args *a, int count)
{
    if (count <= 0 || rows <= 0 || C <= 0)
        return cudaSuccess;
    k_bn_fwd_infer<<<grid_for((size_t)rows * (size_t)C, count), THREADS, 0, s>>>(
        Y, sY, X, sX, gamma, beta, mov_mean, mov_var, sp, rows, C, *a);
    return cudaGetLastError();
}

cudaError_t cu_bn_bwd(cudaStream_t s, float *dX, size_t sdX, const float *dY, size_t sdY,
                      const float *X, size_t sX, const float *gamma, size_t sp,
                      const float *stat, size_t sst, float *dgamma, float *dbeta, size_t sg,
                      int rows, int C, int count, void *scratch, size_t scratch_bytes)
{
    if (count <= 0 || rows <= 0 || C <= 0)
        return cudaSuccess;
    int rpc;
    double *part;
    int chunks = bn_chunks(rows, C, count, scratch, scratch_bytes, &rpc, &part);
    dim3 grid(bn_groups(C), (unsigned)count, (unsigned)chunks);
    if (part)
        k_bn_partial<<<grid, dim3(32, BN_PHASES), 0, s>>>(part, X, sX, dY, sdY, stat, sst, rows,
                                                          C, rpc);
    k_bn_bwd<<<grid, dim3(32, BN_PHASES), 0, s>>>(dX, sdX, dY, sdY, X, sX, gamma, sp, stat, sst,
                                                  dgamma, dbeta, sg, rows, C, part, rpc);
    return cudaGetLastError();
}

cudaError_t cu_rnn_step(cudaStream_t s, int kind, const rnn_step *st)
{
    if (st->count <= 0 || st->rows <= 0 || st->H <= 0)
        return cudaSuccess;
    dim3 grid = grid_for((size_t)st->rows * (size_t)st->H, st->count);
    switch (kind) {
    case CU_LSTM_FWD: k_lstm_fwd<<<grid, THREADS, 0, s>>>(*st); break;
    case CU_LSTM_BWD: k_lstm_bwd<<<grid, THREADS, 0, s>>>(*st); break;
    case CU_GRU_FWD: k_gru_fwd<<<grid, THREADS, 0, s>>>(*st); break;
    default: k_gru_bwd<<<grid, THREADS, 0, s>>>(*st); break;
    }
    return cudaGetLastError();
}

/* ---- token ids (an embedding): gather_rows and its adjoint ---- */

namespace {

/* Y[r][j] = W[tok[r]][j], element by element. */
__global__ void k_gather_rows(float *Y, size_t sY, const float *T, size_t sT, const float *W,
                              size_t sW, int n, int dim)
{
    float *y = Y + blockIdx.y * sY;
    const float *t = T + blockIdx.y * sT, *w = W + blockIdx.y * sW;
    ELEMENTS(i, (size_t)n * (size_t)dim)
    {
        size_t r = i / (size_t)dim, j = i % (size_t)dim;
        y[i] = w[(size_t)t[r] * (size_t)dim + j];
    }
}

/* One thread per (column j, group g of table rows, model): it zeroes G[v][j]
 * for the rows v = g, g + groups, ... of its group, then walks every token
 * in order, adding dY[r][j] where tok[r] is in its group. No two threads
 * write one float, and each sum runs over the rows in order, as the CPU's. */
__global__ void k_scatter_add_rows(float *G, size_t sG, const float *T, size_t sT,
                                   const float *DY, size_t sdY, int n, int V, int dim, int groups)
{
    size_t at = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (at >= (size_t)dim * (size_t)groups)
        return;
    int j = (int)(at % (size_t)dim), g = (int)(at / (size_t)dim);
    float *gk = G + blockIdx.y * sG;
    const float *t = T + blockIdx.y * sT, *dy = DY + blockIdx.y * sdY;
    for (int v = g; v < V; v += groups)
        gk[(size_t)v * dim + j] = 0.0f;
    for (int r = 0; r < n; r++) {
        int v = (int)t[r];
        if (v % groups == g)
            gk[(size_t)v * dim + j] += dy[(size_t)r * dim + j];
    }
}

} /* namespace */

cudaError_t cu_gather_rows(cudaStream_t s, float *Y, size_t sY, const float *tok, size_t sT,
                           const float *W, size_t sW, int n, int dim, int count)
{
    if (count <= 0 || n <= 0 || dim <= 0)
        return cudaSuccess;
    k_gather_rows<<<grid_for((size_t)n * (size_t)dim, count), THREADS, 0, s>>>(Y, sY, tok, sT, W,
                                                                               sW, n, dim);
    return cudaGetLastError();
}

cudaError_t cu_scatter_add_rows(cudaStream_t s, float *G, size_t sG, const float *tok, size_t sT,
                                const float *dY, size_t sdY, int n, int V, int dim, int count)
{
    if (count <= 0 || V <= 0 || dim <= 0)
        return cudaSuccess;
    /* Enough groups of rows for about 16384 threads in all (a GPU's fill),
     * no more than the rows: each thread reads every token once. */
    long want = 16384 / ((long)dim * count);
    int groups = want < 1 ? 1 : want > V ? V : (int)want;
    size_t threads = (size_t)dim * (size_t)groups;
    dim3 grid((unsigned)((threads + THREADS - 1) / THREADS), (unsigned)count);
    k_scatter_add_rows<<<grid, THREADS, 0, s>>>(G, sG, tok, sT, dY, sdY, n < 0 ? 0 : n, V, dim,
                                                groups);
    return cudaGetLastError();
}

/* ---- layer normalization (backend_impl.h's ln_fwd, ln_bwd): one thread per
 * row, and per column for the parameters' sums, each norm_rows.h's loop, as
 * the CPU runs it ---- */

__global__ void k_ln_fwd(float *Y, size_t sY, const float *X, size_t sX, const float *gamma,
                         const float *beta, size_t sp, float *stat, size_t sst, cu_eps eps,
                         int rows, int C)
{
    size_t k = blockIdx.y;
    ELEMENTS(r, (size_t)rows)
    {
        size_t o = r * (size_t)C;
        ln_row_fwd(Y + k * sY + o, X + k * sX + o, gamma + k * sp, beta + k * sp,
                   stat ? stat + k * sst + 2 * r : NULL, eps.v[k], C);
    }
}

__global__ void k_ln_bwd_dx(float *dX, size_t sdX, const float *dY, size_t sdY, const float *X,
                            size_t sX, const float *gamma, size_t sp, const float *stat,
                            size_t sst, int rows, int C)
{
    size_t k = blockIdx.y;
    ELEMENTS(r, (size_t)rows)
    {
        size_t o = r * (size_t)C;
        ln_row_bwd(dX + k * sdX + o, dY + k * sdY + o, X + k * sX + o, gamma + k * sp,
                   stat + k * sst + 2 * r, C);
    }
}

__global__ void k_ln_grad(float *dgamma, float *dbeta, size_t sg, const float *dY, size_t sdY,
                          const float *X, size_t sX, const float *stat, size_t sst, int rows,
                          int C)
{
    size_t k = blockIdx.y;
    ELEMENTS(j, (size_t)C)
    ln_col_grad(dgamma + k * sg + j, dbeta + k * sg + j, dY + k * sdY, C, X + k * sX, C,
                stat + k * sst, rows, (int)j);
}

cudaError_t cu_ln_fwd(cudaStream_t s, float *Y, size_t sY, const float *X, size_t sX,
                      const float *gamma, const float *beta, size_t sp, float *stat, size_t sst,
                      const float *eps, int rows, int C, int count)
{
    for (int k0 = 0; k0 < count; k0 += CU_EPS_MAX) {
        int m = count - k0 < CU_EPS_MAX ? count - k0 : CU_EPS_MAX;
        cu_eps e;
        for (int k = 0; k < m; k++)
            e.v[k] = eps[k0 + k];
        size_t o = (size_t)k0;
        k_ln_fwd<<<grid_for((size_t)rows, m), THREADS, 0, s>>>(
            Y + o * sY, sY, X + o * sX, sX, gamma + o * sp, beta + o * sp, sp,
            stat ? stat + o * sst : NULL, sst, e, rows, C);
    }
    return cudaGetLastError();
}

cudaError_t cu_ln_bwd(cudaStream_t s, float *dX, size_t sdX, const float *dY, size_t sdY,
                      const float *X, size_t sX, const float *gamma, size_t sp, const float *stat,
                      size_t sst, float *dgamma, float *dbeta, size_t sg, int rows, int C,
                      int count)
{
    if (count <= 0 || rows <= 0 || C <= 0)
        return cudaSuccess;
    k_ln_grad<<<grid_for((size_t)C, count), THREADS, 0, s>>>(dgamma, dbeta, sg, dY, sdY, X, sX,
                                                              stat, sst, rows, C);
    if (dX)
        k_ln_bwd_dx<<<grid_for((size_t)rows, count), THREADS, 0, s>>>(dX, sdX, dY, sdY, X, sX,
                                                                      gamma, sp, stat, sst, rows,
                                                                      C);
    return cudaGetLastError();
}

/* ---- attention's softmax over keys (backend_impl.h's attn_softmax_fwd and
 * _bwd): a thread per row, attn_rows.h's loop, as the CPU runs it ---- */

__global__ void k_attn_softmax_fwd(float *S, size_t sS, const float *tokens, size_t s_tokens,
                                   int n, int H, int T, int causal)
{
    size_t k = blockIdx.y, rows = (size_t)H * (size_t)n * (size_t)T;
    ELEMENTS(r, rows)
    {
        size_t b = r / (size_t)T % (size_t)n, i = r % (size_t)T;
        const float *tok = tokens ? tokens + k * s_tokens + b * (size_t)T : NULL;
        attn_row_softmax(S + k * sS + r * (size_t)T, tok, causal, (int)i, T);
    }
}

__global__ void k_attn_softmax_bwd(float *dS, size_t sdS, const float *P, size_t sP, int n,
                                   int H, int T)
{
    size_t k = blockIdx.y, rows = (size_t)H * (size_t)n * (size_t)T;
    ELEMENTS(r, rows)
    attn_row_softmax_bwd(dS + k * sdS + r * (size_t)T, P + k * sP + r * (size_t)T, T);
}

cudaError_t cu_attn_softmax_fwd(cudaStream_t s, float *S, size_t sS, const float *tokens,
                                size_t s_tokens, int n, int H, int T, int causal, int count)
{
    size_t rows = (size_t)H * (size_t)n * (size_t)T;
    if (count <= 0 || rows == 0)
        return cudaSuccess;
    k_attn_softmax_fwd<<<grid_for(rows, count), THREADS, 0, s>>>(S, sS, tokens, s_tokens, n, H,
                                                                  T, causal);
    return cudaGetLastError();
}

cudaError_t cu_attn_softmax_bwd(cudaStream_t s, float *dS, size_t sdS, const float *P, size_t sP,
                                int n, int H, int T, int count)
{
    size_t rows = (size_t)H * (size_t)n * (size_t)T;
    if (count <= 0 || rows == 0)
        return cudaSuccess;
    k_attn_softmax_bwd<<<grid_for(rows, count), THREADS, 0, s>>>(dS, sdS, P, sP, n, H, T);
    return cudaGetLastError();
}
