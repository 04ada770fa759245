/*
 * The CUDA backend's element-wise and reduction kernels. Each computes what
 * the CPU kernel of the same name computes (src/backend/cpu/kernels.c), with
 * the same operations in the same order per element; it is built with
 * -fmad=false so that a*b+c rounds twice, as the CPU code does. Reductions
 * (bias_grad, the loss sums) run in a fixed order: the same bits every run.
 */
#include "backend/cuda/kernels_cuda.h"

extern "C" {
#include "model/model.h"
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

/* Y is (rows, cols) per model, bias (cols): Y = act(Y + bias). */
__global__ void k_bias_act(float *Y, size_t sY, const float *bias, size_t sb, int rows, int cols,
                           int act)
{
    float *y = Y + blockIdx.y * sY;
    const float *b = bias + blockIdx.y * sb;
    size_t n = (size_t)rows * (size_t)cols;
    ELEMENTS(i, n)
    {
        float z = y[i] + b[i % (size_t)cols];
        switch (act) {
        case ACT_RELU: y[i] = z > 0.0f ? z : 0.0f; break;
        case ACT_SIGMOID: y[i] = 1.0f / (1.0f + expf(-z)); break;
        case ACT_TANH: y[i] = tanhf(z); break;
        default: y[i] = z; break;
        }
    }
}

/* d, Y are (n) per model: d *= act'(z), written through the output Y. */
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
        default: break;
        }
    }
}

/* dZ is (rows, cols) per model, db (cols): column sums. Block (32, 8): 32
 * columns, 8 row phases summed in a fixed order. */
__global__ void k_bias_grad(float *DB, size_t sdb, const float *DZ, size_t sdZ, int rows, int cols)
{
    __shared__ float part[8][33];
    const float *dz = DZ + blockIdx.y * sdZ;
    int j = blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (j < cols)
        for (int r = threadIdx.y; r < rows; r += 8)
            s += dz[(size_t)r * (size_t)cols + (size_t)j];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && j < cols) {
        float t = part[0][threadIdx.x];
        for (int p = 1; p < 8; p++)
            t += part[p][threadIdx.x];
        DB[blockIdx.y * sdb + (size_t)j] = t;
    }
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

__global__ void k_copy(float *D, const float *S, size_t st, size_t n)
{
    float *d = D + blockIdx.y * st;
    const float *s = S + blockIdx.y * st;
    ELEMENTS(i, n) { d[i] = s[i]; }
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

/* Adds the per-warp sums of one model in warp order and updates its stats. */
__device__ void stats_finish(double *stats, double wl, int wc, int rows)
{
    __shared__ double loss_part[LOSS_WARPS];
    __shared__ int correct_part[LOSS_WARPS];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        loss_part[warp] = wl;
        correct_part[warp] = wc;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double loss = 0.0;
        int correct = 0;
        for (int w = 0; w < LOSS_WARPS; w++) {
            loss += loss_part[w];
            correct += correct_part[w];
        }
        stats[0] += loss;
        stats[1] += correct;
        stats[2] = rows ? loss / rows : 0.0;
    }
}

/* One block per model, one warp per row (rows w, w + 8, ...). Z (rows,
 * cols) logits become probabilities; dZ = (p - onehot) * grad_scale. */
__global__ void k_softmax_xent(float *Z, size_t sZ, const int32_t *Y, size_t sy, float *DZ,
                               size_t sdZ, double *stats, int rows, int cols, float grad_scale)
{
    int k = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int32_t *y = Y + k * sy;
    double wl = 0.0;
    int wc = 0;
    for (int r = warp; r < rows; r += LOSS_WARPS) {
        float *z = Z + k * sZ + (size_t)r * (size_t)cols;
        float mx = -INFINITY;
        int arg = 0x7fffffff;
        for (int j = lane; j < cols; j += 32)
            argmax_merge(mx, arg, z[j], j);
        warp_argmax(mx, arg);
        int label = y[r];
        double zl = (double)z[label] - (double)mx;
        __syncwarp(); /* every lane has read z[label] before any overwrites it */
        float part = 0.0f;
        for (int j = lane; j < cols; j += 32) {
            float e = expf(z[j] - mx);
            z[j] = e;
            part += e;
        }
        float sum = warp_sum(part);
        float inv = 1.0f / sum;
        for (int j = lane; j < cols; j += 32)
            z[j] *= inv;
        if (DZ) {
            float *d = DZ + k * sdZ + (size_t)r * (size_t)cols;
            for (int j = lane; j < cols; j += 32) {
                float g = z[j] * grad_scale;
                d[j] = j == label ? g - grad_scale : g;
            }
        }
        /* -log p[label] = log(sum) - (z[label] - max), as the CPU has it. */
        wl += log((double)sum) - zl;
        wc += arg == label;
    }
    stats_finish(stats + 4 * k, wl, wc, rows);
}

/* One block per model, one warp per row: mean squared error against
 * onehot(y) (cols > 1) or y itself (cols == 1). */
__global__ void k_mse(const float *Yo, size_t sY, const int32_t *Y, size_t sy, float *DY,
                      size_t sdY, double *stats, int rows, int cols, float grad_scale)
{
    int k = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int32_t *y = Y + k * sy;
    double wl = 0.0;
    int wc = 0;
    for (int r = warp; r < rows; r += LOSS_WARPS) {
        const float *o = Yo + k * sY + (size_t)r * (size_t)cols;
        int label = y[r];
        double se = 0.0;
        float mx = -INFINITY;
        int arg = 0x7fffffff;
        for (int j = lane; j < cols; j += 32) {
            float t = cols == 1 ? (float)label : (j == label ? 1.0f : 0.0f);
            float e = o[j] - t;
            se += (double)e * e;
            argmax_merge(mx, arg, o[j], j);
            if (DY)
                DY[k * sdY + (size_t)r * (size_t)cols + (size_t)j] =
                    2.0f * e * grad_scale / (float)cols;
        }
        se = warp_sum_d(se);
        warp_argmax(mx, arg);
        wl += se / cols;
        if (cols == 1) {
            /* lrintf: round half to even; out of range or NaN never matches. */
            float v = o[0];
            wc += !isnan(v) && fabsf(v) < 2147483520.0f && __float2int_rn(v) == label;
        } else {
            wc += arg == label;
        }
    }
    stats_finish(stats + 4 * k, wl, wc, rows);
}

__global__ void k_sgd(float *W, const float *G, float *V, size_t st, size_t n, cu_sgd_args a)
{
    int k = blockIdx.y;
    if (!a.active[k])
        return;
    float *w = W + k * st;
    const float *g = G + k * st;
    float lr = a.lr[k], mom = a.momentum[k];
    if (!V || mom == 0.0f) {
        ELEMENTS(i, n) { w[i] -= lr * g[i]; }
        return;
    }
    float *v = V + k * st;
    if (a.nesterov[k]) {
        ELEMENTS(i, n)
        {
            v[i] = mom * v[i] - lr * g[i];
            w[i] += mom * v[i] - lr * g[i];
        }
    } else {
        ELEMENTS(i, n)
        {
            v[i] = mom * v[i] - lr * g[i];
            w[i] += v[i];
        }
    }
}

__global__ void k_adam(float *W, const float *G, float *M, float *V, size_t st, size_t n,
                       cu_adam_args a)
{
    int k = blockIdx.y;
    if (!a.active[k])
        return;
    float *w = W + k * st, *m = M + k * st, *v = V + k * st;
    const float *g = G + k * st;
    float alpha = a.alpha[k], c1 = a.c1[k], c2 = a.c2[k], eps = a.eps[k], d = a.decay[k];
    ELEMENTS(i, n)
    {
        float wi = w[i];
        if (d != 0.0f)
            wi -= wi * d;
        float gi = g[i];
        float mi = m[i] + (gi - m[i]) * c1;
        float vi = v[i] + (gi * gi - v[i]) * c2;
        m[i] = mi;
        v[i] = vi;
        w[i] = wi - alpha * mi / (sqrtf(vi) + eps);
    }
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
                         int rows, int cols, int count)
{
    if (count <= 0 || cols <= 0)
        return cudaSuccess;
    dim3 grid((unsigned)((cols + 31) / 32), (unsigned)count);
    k_bias_grad<<<grid, dim3(32, 8), 0, s>>>(db, sdb, dZ, sdZ, rows, cols);
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

cudaError_t cu_copy(cudaStream_t s, float *dst, const float *src, size_t st, size_t n, int count)
{
    if (count <= 0 || n == 0)
        return cudaSuccess;
    k_copy<<<grid_for(n, count), THREADS, 0, s>>>(dst, src, st, n);
    return cudaGetLastError();
}

cudaError_t cu_softmax_xent(cudaStream_t s, float *Z, size_t sZ, const int32_t *y, size_t sy,
                            float *dZ, size_t sdZ, double *stats, int rows, int cols,
                            float grad_scale, int count)
{
    if (count <= 0 || cols <= 0)
        return cudaSuccess;
    k_softmax_xent<<<dim3(1, (unsigned)count), 32 * LOSS_WARPS, 0, s>>>(
        Z, sZ, y, sy, dZ, sdZ, stats, rows < 0 ? 0 : rows, cols, grad_scale);
    return cudaGetLastError();
}

cudaError_t cu_mse(cudaStream_t s, const float *Y, size_t sY, const int32_t *y, size_t sy,
                   float *dY, size_t sdY, double *stats, int rows, int cols, float grad_scale,
                   int count)
{
    if (count <= 0 || cols <= 0)
        return cudaSuccess;
    k_mse<<<dim3(1, (unsigned)count), 32 * LOSS_WARPS, 0, s>>>(Y, sY, y, sy, dY, sdY, stats,
                                                               rows < 0 ? 0 : rows, cols,
                                                               grad_scale);
    return cudaGetLastError();
}

cudaError_t cu_sgd(cudaStream_t s, float *w, const float *g, float *v, size_t st, size_t n,
                   const cu_sgd_args *a, int count)
{
    if (count <= 0 || n == 0)
        return cudaSuccess;
    k_sgd<<<grid_for(n, count), THREADS, 0, s>>>(w, g, v, st, n, *a);
    return cudaGetLastError();
}

cudaError_t cu_adam(cudaStream_t s, float *w, const float *g, float *m, float *v, size_t st,
                    size_t n, const cu_adam_args *a, int count)
{
    if (count <= 0 || n == 0)
        return cudaSuccess;
    k_adam<<<grid_for(n, count), THREADS, 0, s>>>(w, g, m, v, st, n, *a);
    return cudaGetLastError();
}
