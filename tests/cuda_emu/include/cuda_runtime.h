/*
 * cuda_runtime.h for the CUDA emulation (tests/cuda_emu): the part of the
 * CUDA runtime API and of CUDA C++'s device dialect that the plugin's sources
 * (src/backend/cuda: kernels.cu, backend_cuda.cu) use, so that they compile with the host C++
 * compiler and run on the CPU. The runtime is emu_runtime.cc; a kernel launch
 * `k<<<grid, block, shmem, stream>>>(args)` reaches it as
 * `k * emu_launch_cfg("k", grid, block, shmem, stream)(args)`, the one rewrite the
 * build makes to the sources (tests/cuda_emu/CMakeLists.txt).
 *
 * Device code: a block's threads are fibers on one host thread that switch at
 * __syncthreads() and at each warp shuffle; threadIdx is the running fiber's,
 * blockIdx, blockDim and gridDim the host thread's. __shared__ variables are
 * static thread_local: one copy per host thread, which runs one block at a
 * time.
 */
#ifndef COHORT_EMU_CUDA_RUNTIME_H
#define COHORT_EMU_CUDA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <type_traits>
#include <utility>

#define CUDART_VERSION 13000

/* ---- types --------------------------------------------------------------- */

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
    cudaErrorUnknown = 999
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
} cudaMemcpyKind;

typedef struct emu_stream *cudaStream_t;
typedef struct emu_event *cudaEvent_t;

#define cudaStreamDefault 0x0
#define cudaStreamNonBlocking 0x1
#define cudaEventDefault 0x0
#define cudaEventDisableTiming 0x2

struct uint3 {
    unsigned x, y, z;
};

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int major, minor;
    int multiProcessorCount;
    int warpSize;
    int maxThreadsPerBlock;
};

/* ---- the runtime API (emu_runtime.cc) -------------------------------------- */

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaDriverGetVersion(int *version);
cudaError_t cudaRuntimeGetVersion(int *version);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);

cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s = nullptr);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t s = nullptr);
cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t s = nullptr);

/* ---- device code ------------------------------------------------------------ */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static thread_local

namespace emu {

/* One thread of the running block. */
struct thread_state {
    uint3 tid;
    int linear;            /* threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * z) */
    unsigned shfl_seq;     /* shuffles done: which of a warp's two exchange slots is next */
    int state;             /* emu_runtime.cc's */
    struct fiber *f;
};

struct block_coords {
    uint3 block;
    dim3 block_dim, grid_dim;
};

extern thread_local thread_state *self;
extern thread_local block_coords coords;

/* Wait until every thread of the block has arrived. */
void syncthreads();
/* Exchange 8 bytes with the lane `src_lane` of the calling thread's warp:
 * every lane of the warp must call it (mask: all lanes). */
uint64_t shfl(unsigned mask, uint64_t v, int src_lane);

template <typename T> T shfl_xor(unsigned mask, T v, int lane_mask)
{
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a word");
    uint64_t w = 0;
    memcpy(&w, &v, sizeof v);
    w = shfl(mask, w, (self->linear & 31) ^ lane_mask);
    T r;
    memcpy(&r, &w, sizeof r);
    return r;
}

/* ---- launches ---------------------------------------------------------------- */

/* The closure a launch queues: run(thread) calls the kernel for one thread. */
struct kernel_call {
    virtual ~kernel_call() {}
    virtual void run() = 0;
};

/* Queue (or run, outside the deferred mode) a grid of the kernel call. args:
 * its pointer arguments, which must be device memory (or NULL). */
cudaError_t launch(dim3 grid, dim3 block, size_t shmem, cudaStream_t s, kernel_call *call,
                   const void *const *ptrs, int n_ptrs, const char *name);

template <typename T> void collect_ptr(const void **out, int &n, const T &v)
{
    if constexpr (std::is_pointer<T>::value)
        out[n++] = (const void *)v;
    (void)out;
    (void)n;
    (void)v;
}

template <typename F, typename Tup> struct call_impl final : kernel_call {
    F *f;
    Tup args;
    call_impl(F *fn, Tup &&a) : f(fn), args(std::move(a)) {}
    void run() override { std::apply(f, args); }
};

struct launch_cfg {
    const char *name;
    dim3 grid, block;
    size_t shmem;
    cudaStream_t stream;
};

template <typename... A> struct pending {
    launch_cfg cfg;
    std::tuple<A...> args;
};

struct cfg_maker {
    launch_cfg cfg;
    template <typename... A> pending<std::decay_t<A>...> operator()(A &&...a) const
    {
        return pending<std::decay_t<A>...>{cfg, std::tuple<std::decay_t<A>...>(std::forward<A>(a)...)};
    }
};

/* kernel * emu_launch_cfg(...)(args): the arguments converted to the kernel's
 * parameter types at the launch, as CUDA does, and kept by value. */
template <typename... P, typename... A> void operator*(void (*f)(P...), pending<A...> &&p)
{
    static_assert(sizeof...(P) == sizeof...(A), "a kernel launch with the wrong argument count");
    using tup = std::tuple<std::decay_t<P>...>;
    tup converted = std::apply([](auto &&...a) { return tup(static_cast<std::decay_t<P>>(a)...); },
                               std::move(p.args));
    const void *ptrs[sizeof...(P) + 1];
    int n = 0;
    std::apply([&](const auto &...a) { (collect_ptr(ptrs, n, a), ...); }, converted);
    auto *call = new call_impl<void(P...), tup>(f, std::move(converted));
    launch(p.cfg.grid, p.cfg.block, p.cfg.shmem, p.cfg.stream, call, ptrs, n, p.cfg.name);
}

} /* namespace emu */

inline emu::cfg_maker emu_launch_cfg(const char *name, dim3 grid, dim3 block, size_t shmem = 0,
                                     cudaStream_t s = nullptr)
{
    return emu::cfg_maker{emu::launch_cfg{name, grid, block, shmem, s}};
}

#define threadIdx (::emu::self->tid)
#define blockIdx (::emu::coords.block)
#define blockDim (::emu::coords.block_dim)
#define gridDim (::emu::coords.grid_dim)

inline void __syncthreads() { emu::syncthreads(); }

template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
    (void)width;
    return emu::shfl_xor(mask, v, lane_mask);
}

/* Division rounded to nearest (IEEE: the host's float division). */
inline float __fdiv_rn(float a, float b) { return a / b; }
inline int __float2int_rn(float x) { return (int)__builtin_nearbyintf(x); }

#endif
