/*
 * The CUDA runtime, emulated on the CPU for the plugin's own sources
 * (docs/cuda.md, "The CUDA emulation": what it is for and its limits).
 *
 * - Devices: COHORT_EMU_GPUS of them (default 1), each of COHORT_EMU_GPU_MEM
 *   bytes (default 128M); CUDA_VISIBLE_DEVICES picks and renumbers them as the
 *   driver does. The first call that needs a device in a process creates its
 *   context, which takes COHORT_EMU_CTX_MEM (default 4M) of its memory, as a
 *   real context takes some 500 MB of a GPU's. Accounting is per process, or
 *   with COHORT_EMU_SHARED_MEM=FILE shared by the processes that name FILE.
 * - Memory: cudaMalloc is host memory (256-byte aligned, the exact size, so
 *   that AddressSanitizer sees an overrun) filled with 0xff bytes, a NaN as
 *   float or double, so that an element no kernel wrote shows. A registry of
 *   the allocations checks every copy, memset and kernel pointer argument.
 * - Streams: work runs at once, or with COHORT_EMU_DEFERRED=1 only when the
 *   host waits for it (cudaStreamSynchronize, cudaEventSynchronize, a copy to
 *   pageable memory, cudaFree's device synchronization): a missing wait, or a
 *   host buffer reused before the copy that reads it ran, shows as wrong data.
 *   A copy from pageable memory takes its bytes at the call, as CUDA does.
 * - Kernels: the blocks of a grid in a shuffled order; a block's threads as
 *   fibers (ucontext) started in a shuffled order, each running until it
 *   waits at __syncthreads() or at a warp shuffle, then resumed in a shuffled
 *   order once every thread of the block (of the warp) is there. A barrier
 *   that not every thread reaches is a fault (cudaErrorLaunchFailure), as is
 *   a kernel's pointer argument outside device memory.
 * COHORT_EMU_SEED (default 1) seeds the shuffles.
 */
#include "emu.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <deque>
#include <set>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#endif

void *emu_dlopen(const char *name, int flags);
void *emu_dlsym(void *handle, const char *name);
int emu_dlclose(void *handle);
char *emu_dlerror(void);

struct emu_stream {
    int dev;
    std::mutex q_lock, run_lock;
    std::deque<std::function<void()>> q;
};

struct emu_event {
    emu_stream *s;
};

namespace emu {

thread_local thread_state *self;
thread_local block_coords coords;

namespace {

const int MAX_DEVS = 16;

struct config {
    int gpus;
    size_t total, ctx_mem;
    bool deferred, no_driver, no_cublas;
    uint64_t seed;
    int driver;
    std::vector<int> visible; /* ordinal -> emulated GPU */
};

config load_config()
{
    config c;
    const char *v = getenv("COHORT_EMU_GPUS");
    c.gpus = v ? atoi(v) : 1;
    if (c.gpus < 0 || c.gpus > MAX_DEVS)
        c.gpus = 1;
    c.total = env_bytes("COHORT_EMU_GPU_MEM", (size_t)128 << 20);
    c.ctx_mem = env_bytes("COHORT_EMU_CTX_MEM", (size_t)4 << 20);
    v = getenv("COHORT_EMU_DEFERRED");
    c.deferred = v && atoi(v) != 0;
    v = getenv("COHORT_EMU_SEED");
    c.seed = v ? strtoull(v, nullptr, 0) : 1;
    v = getenv("COHORT_EMU_DRIVER");
    c.driver = v ? atoi(v) : CUDART_VERSION;
    c.no_driver = getenv("COHORT_EMU_NO_DRIVER") != nullptr;
    c.no_cublas = getenv("COHORT_EMU_NO_CUBLAS") != nullptr;
    /* As the driver reads CUDA_VISIBLE_DEVICES: indices up to the first
     * invalid one. */
    v = getenv("CUDA_VISIBLE_DEVICES");
    if (!v) {
        for (int i = 0; i < c.gpus; i++)
            c.visible.push_back(i);
    } else {
        const char *p = v;
        while (*p) {
            char *end;
            long i = strtol(p, &end, 10);
            if (end == p || i < 0 || i >= c.gpus)
                break;
            c.visible.push_back((int)i);
            p = *end == ',' ? end + 1 : end;
            if (*end != ',' && *end)
                break;
        }
    }
    return c;
}

const config &cfg()
{
    static const config c = load_config();
    return c;
}

struct alloc_rec {
    size_t size, charge;
    int dev;
};

std::mutex mem_lock;
std::map<uintptr_t, alloc_rec> allocs; /* device memory by start */
std::map<uintptr_t, size_t> pinned;    /* cudaMallocHost's */
size_t used[MAX_DEVS];
bool have_ctx[MAX_DEVS];
std::atomic<int> sticky{0};

/* ---- memory shared between processes -------------------------------------------
 * With COHORT_EMU_SHARED_MEM=FILE, the processes that name the same file see
 * one another's device memory, as processes on one GPU do: each keeps what it
 * uses in a slot of the mapped file (its pid, its bytes per GPU), and a slot
 * whose process is gone counts for nothing. Without it, each process has the
 * GPUs to itself. Call with mem_lock held. */

const int SLOTS = 256;

struct shared_slot {
    int32_t pid, pad;
    uint64_t used[MAX_DEVS];
};

shared_slot *shared;  /* the mapped file, or NULL */
int shared_fd = -1, shared_pid;
shared_slot *my_slot; /* this process's, or NULL until it uses memory */

void shared_open()
{
    static bool tried;
    if (tried && shared_pid == getpid())
        return;
    tried = true;
    shared_pid = getpid();
    my_slot = nullptr;
    const char *path = getenv("COHORT_EMU_SHARED_MEM");
    if (!path || !*path)
        return;
    if (shared) { /* a forked child: the parent's mapping is shared already */
        return;
    }
    shared_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (shared_fd < 0 || ftruncate(shared_fd, (off_t)(SLOTS * sizeof(shared_slot))) != 0) {
        fprintf(stderr, "cuda_emu: COHORT_EMU_SHARED_MEM=%s: %s\n", path, strerror(errno));
        return;
    }
    void *m = mmap(nullptr, SLOTS * sizeof(shared_slot), PROT_READ | PROT_WRITE, MAP_SHARED,
                   shared_fd, 0);
    shared = m == MAP_FAILED ? nullptr : static_cast<shared_slot *>(m);
}

/* Bytes of GPU dev that the other live processes use. */
uint64_t others_used(int dev)
{
    shared_open();
    if (!shared)
        return 0;
    flock(shared_fd, LOCK_EX);
    uint64_t sum = 0;
    for (int i = 0; i < SLOTS; i++) {
        shared_slot *sl = &shared[i];
        if (sl->pid && sl->pid != shared_pid && (kill(sl->pid, 0) == 0 || errno != ESRCH))
            sum += sl->used[dev];
    }
    flock(shared_fd, LOCK_UN);
    return sum;
}

/* This process now uses `bytes` of GPU dev. */
void publish(int dev, uint64_t bytes)
{
    shared_open();
    if (!shared)
        return;
    flock(shared_fd, LOCK_EX);
    if (!my_slot)
        for (int i = 0; i < SLOTS && !my_slot; i++) {
            shared_slot *sl = &shared[i];
            if (!sl->pid || sl->pid == shared_pid || (kill(sl->pid, 0) != 0 && errno == ESRCH)) {
                memset(sl, 0, sizeof *sl);
                sl->pid = shared_pid;
                my_slot = sl;
            }
        }
    if (my_slot)
        my_slot->used[dev] = bytes;
    flock(shared_fd, LOCK_UN);
}

std::mutex streams_lock;
std::set<emu_stream *> streams;
std::set<emu_event *> events;
emu_stream default_stream[MAX_DEVS];

thread_local int cur_dev = 0;
thread_local cudaError_t last_err = cudaSuccess;

cudaError_t ret(cudaError_t e)
{
    if (e != cudaSuccess)
        last_err = e;
    return e;
}

cudaError_t sticky_err() { return (cudaError_t)sticky.load(); }

/* The context of device dev, created (and its memory taken) on first use. */
cudaError_t touch(int dev)
{
    if (cfg().driver < CUDART_VERSION)
        return cudaErrorInsufficientDriver;
    if (dev < 0 || dev >= (int)cfg().visible.size())
        return cudaErrorInvalidDevice;
    std::lock_guard<std::mutex> g(mem_lock);
    if (have_ctx[dev])
        return cudaSuccess;
    if (used[dev] + others_used(dev) + cfg().ctx_mem > cfg().total)
        return cudaErrorMemoryAllocation;
    used[dev] += cfg().ctx_mem;
    publish(dev, used[dev]);
    have_ctx[dev] = true;
    return cudaSuccess;
}

emu_stream *resolve(cudaStream_t s) { return s ? s : &default_stream[cur_dev]; }

void drain(emu_stream *s)
{
    std::lock_guard<std::mutex> run(s->run_lock);
    for (;;) {
        std::function<void()> fn;
        {
            std::lock_guard<std::mutex> g(s->q_lock);
            if (s->q.empty())
                break;
            fn = std::move(s->q.front());
            s->q.pop_front();
        }
        if (!sticky.load())
            fn();
    }
}

/* Every stream of device dev runs what it has queued. */
void device_sync(int dev)
{
    std::lock_guard<std::mutex> g(streams_lock);
    for (emu_stream *s : streams)
        if (s->dev == dev)
            drain(s);
    drain(&default_stream[dev]);
}

bool find_device(const void *p, size_t bytes, alloc_rec *out)
{
    uintptr_t a = (uintptr_t)p;
    std::lock_guard<std::mutex> g(mem_lock);
    auto it = allocs.upper_bound(a);
    if (it == allocs.begin())
        return false;
    --it;
    if (a - it->first >= it->second.size || bytes > it->second.size - (a - it->first))
        return false;
    if (out)
        *out = it->second;
    return true;
}

bool is_pinned(const void *p, size_t bytes)
{
    uintptr_t a = (uintptr_t)p;
    std::lock_guard<std::mutex> g(mem_lock);
    auto it = pinned.upper_bound(a);
    if (it == pinned.begin())
        return false;
    --it;
    return a - it->first < it->second && bytes <= it->second - (a - it->first);
}

/* ---- fibers ---------------------------------------------------------------- */

/* A fiber's stack. Kernels are shallow; the size matters under ASan, whose
 * swapcontext clears the shadow of the whole stack it switches to. */
const size_t STACK = 64 << 10;

enum { T_NEW, T_RUNNING, T_WAIT_BAR, T_WAIT_WARP, T_READY, T_DONE };

} /* namespace */

struct fiber {
    ucontext_t uc;
    char *stack;
    int thread; /* the block thread it runs, -1 when idle */
};

namespace {

struct rng64 {
    uint64_t s;
    uint64_t next()
    {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return s * 0x2545f4914f6cdd1dULL;
    }
    size_t below(size_t n) { return n ? (size_t)(next() % n) : 0; }
};

std::atomic<uint64_t> executors{0};

/* A host thread's block runner: its fibers and the state of the block it runs. */
struct executor {
    ucontext_t sched;
    const void *sched_bottom = nullptr;
    size_t sched_size = 0;
    std::vector<fiber *> all, idle;
    fiber *cur = nullptr;
    kernel_call *call = nullptr;
    std::vector<thread_state> th;
    std::vector<int> order, ready;
    std::vector<int> warp_waiting;
    std::vector<uint64_t> slots; /* [warp][2][32] */
    int T = 0, next_start = 0, done = 0, bar_waiting = 0;
    rng64 rng;

    executor() { rng.s = (cfg().seed + 1) * 0x9e3779b97f4a7c15ULL + executors.fetch_add(1) * 7919; }
    ~executor()
    {
        for (fiber *f : all) {
            munmap(f->stack, STACK);
            delete f;
        }
    }
};

thread_local std::unique_ptr<executor> ex_owner;
thread_local executor *ex;

executor *get_executor()
{
    if (!ex) {
        ex_owner.reset(new executor());
        ex = ex_owner.get();
    }
    return ex;
}

void switch_to(ucontext_t *from, ucontext_t *to, const void *to_bottom, size_t to_size)
{
#ifdef EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, to_bottom, to_size);
    swapcontext(from, to);
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
    (void)to_bottom;
    (void)to_size;
    swapcontext(from, to);
#endif
}

/* Back to the block's scheduler from the running fiber. */
void yield_fiber(fiber *f)
{
    executor *e = ex;
    switch_to(&f->uc, &e->sched, e->sched_bottom, e->sched_size);
}

int take_new(executor *e) { return e->next_start < e->T ? e->order[e->next_start++] : -1; }

void fiber_entry()
{
    executor *e = ex;
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &e->sched_bottom, &e->sched_size);
#endif
    fiber *f = e->cur;
    for (;;) {
        int t;
        while ((t = take_new(e)) >= 0) {
            thread_state *ts = &e->th[(size_t)t];
            ts->f = f;
            ts->state = T_RUNNING;
            f->thread = t;
            self = ts;
            e->call->run();
            ts->state = T_DONE;
            e->done++;
            f->thread = -1;
        }
        yield_fiber(f);
    }
}

void fiber_init(fiber *f)
{
#ifdef EMU_ASAN
    __asan_unpoison_memory_region(f->stack, STACK);
#endif
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack;
    f->uc.uc_stack.ss_size = STACK;
    f->uc.uc_link = nullptr;
    makecontext(&f->uc, fiber_entry, 0);
    f->thread = -1;
}

fiber *fiber_get(executor *e)
{
    if (!e->idle.empty()) {
        fiber *f = e->idle.back();
        e->idle.pop_back();
        return f;
    }
    fiber *f = new fiber();
    void *m = mmap(nullptr, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "cuda_emu: cannot map a fiber stack: %s\n", strerror(errno));
        abort();
    }
    mprotect(m, 4096, PROT_NONE); /* a guard page below the stack */
    f->stack = static_cast<char *>(m);
    fiber_init(f);
    e->all.push_back(f);
    return f;
}

void resume(executor *e, fiber *f)
{
    e->cur = f;
    switch_to(&e->sched, &f->uc, f->stack, STACK);
    if (f->thread < 0)
        e->idle.push_back(f);
}

/* Every thread of one block; false after a fault. */
bool run_block(executor *e, const char *name)
{
    const dim3 &bd = coords.block_dim;
    int T = (int)(bd.x * bd.y * bd.z);
    e->T = T;
    e->th.assign((size_t)T, thread_state());
    for (int t = 0; t < T; t++) {
        thread_state &ts = e->th[(size_t)t];
        ts.tid.x = (unsigned)t % bd.x;
        ts.tid.y = (unsigned)t / bd.x % bd.y;
        ts.tid.z = (unsigned)t / (bd.x * bd.y);
        ts.linear = t;
        ts.state = T_NEW;
    }
    e->order.resize((size_t)T);
    for (int t = 0; t < T; t++)
        e->order[(size_t)t] = t;
    for (int t = T - 1; t > 0; t--)
        std::swap(e->order[(size_t)t], e->order[e->rng.below((size_t)t + 1)]);
    int warps = (T + 31) / 32;
    e->warp_waiting.assign((size_t)warps, 0);
    e->slots.assign((size_t)warps * 64, 0);
    e->ready.clear();
    e->next_start = e->done = e->bar_waiting = 0;
    for (;;) {
        if (e->next_start < T) {
            self = nullptr;
            resume(e, fiber_get(e));
            continue;
        }
        if (!e->ready.empty()) {
            size_t i = e->rng.below(e->ready.size());
            int t = e->ready[i];
            e->ready[i] = e->ready.back();
            e->ready.pop_back();
            thread_state *ts = &e->th[(size_t)t];
            ts->state = T_RUNNING;
            self = ts;
            resume(e, ts->f);
            continue;
        }
        if (e->done == T)
            break;
        int bar = 0, warp = 0, exited = 0;
        for (const thread_state &ts : e->th) {
            bar += ts.state == T_WAIT_BAR;
            warp += ts.state == T_WAIT_WARP;
            exited += ts.state == T_DONE;
        }
        fault(cudaErrorLaunchFailure,
              "%s: block (%u, %u, %u) of %d threads cannot go on: %d wait at __syncthreads, %d "
              "at a warp shuffle, %d have returned (a barrier or shuffle not every thread "
              "reaches)",
              name ? name : "a kernel", coords.block.x, coords.block.y, coords.block.z, T, bar,
              warp, exited);
        for (fiber *f : e->all)
            if (f->thread >= 0) {
                fiber_init(f);
                e->idle.push_back(f);
            }
        self = nullptr;
        return false;
    }
    self = nullptr;
    return true;
}

unsigned gcd(unsigned long long a, unsigned long long b)
{
    while (b) {
        unsigned long long t = a % b;
        a = b;
        b = t;
    }
    return (unsigned)a;
}

void run_grid(dim3 grid, dim3 block, kernel_call *call, const char *name)
{
    executor *e = get_executor();
    e->call = call;
    unsigned long long n = (unsigned long long)grid.x * grid.y * grid.z;
    /* Blocks in the order a*i + b (mod n), a coprime to n: a shuffle that
     * needs no table. */
    unsigned long long a = 1, b = n ? e->rng.below(n) : 0;
    if (n > 2)
        for (int tries = 0; tries < 16; tries++) {
            unsigned long long c = 1 + e->rng.below(n - 1);
            if (gcd(c, n) == 1) {
                a = c;
                break;
            }
        }
    coords.block_dim = block;
    coords.grid_dim = grid;
    for (unsigned long long i = 0; i < n; i++) {
        unsigned long long lin = (a * i + b) % n;
        coords.block.x = (unsigned)(lin % grid.x);
        coords.block.y = (unsigned)(lin / grid.x % grid.y);
        coords.block.z = (unsigned)(lin / ((unsigned long long)grid.x * grid.y));
        if (!run_block(e, name))
            break;
    }
    e->call = nullptr;
}

const char *err_name(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    default: return "cudaErrorUnknown";
    }
}

const char *err_string(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver:
        return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    default: return "unknown error";
    }
}

} /* namespace */

/* ---- the interface of emu.h and cuda_runtime.h ------------------------------ */

size_t env_bytes(const char *name, size_t dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    double x = strtod(v, &end);
    switch (*end) {
    case 'k': case 'K': x *= 1024.0; break;
    case 'm': case 'M': x *= 1048576.0; break;
    case 'g': case 'G': x *= 1073741824.0; break;
    default: break;
    }
    return x > 0 ? (size_t)x : dflt;
}

void fault(cudaError_t e, const char *fmt, ...)
{
    int expect = 0;
    if (!sticky.compare_exchange_strong(expect, (int)e))
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("cuda_emu: device fault: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

bool is_device(const void *p, size_t bytes) { return find_device(p, bytes, nullptr); }

void enqueue(cudaStream_t s, std::function<void()> fn)
{
    emu_stream *st = resolve(s);
    if (!cfg().deferred) {
        if (!sticky.load())
            fn();
        return;
    }
    std::lock_guard<std::mutex> g(st->q_lock);
    st->q.push_back(std::move(fn));
}

cudaError_t dev_alloc(void **p, size_t bytes) { return cudaMalloc(p, bytes); }
cudaError_t dev_free(void *p) { return cudaFree(p); }

void syncthreads()
{
    executor *e = ex;
    thread_state *ts = self;
    ts->state = T_WAIT_BAR;
    if (++e->bar_waiting == e->T) {
        for (int t = 0; t < e->T; t++)
            if (e->th[(size_t)t].state == T_WAIT_BAR) {
                e->th[(size_t)t].state = T_READY;
                e->ready.push_back(t);
            }
        e->bar_waiting = 0;
    }
    yield_fiber(ts->f);
}

uint64_t shfl(unsigned mask, uint64_t v, int src_lane)
{
    executor *e = ex;
    thread_state *ts = self;
    if (mask != 0xffffffffu)
        fault(cudaErrorLaunchFailure, "a warp shuffle with mask %#x: only full warps are emulated",
              mask);
    int warp = ts->linear / 32, lane = ts->linear % 32;
    int wsize = e->T - warp * 32 < 32 ? e->T - warp * 32 : 32;
    size_t base = ((size_t)warp * 2 + (ts->shfl_seq & 1)) * 32;
    e->slots[base + (size_t)lane] = v;
    ts->state = T_WAIT_WARP;
    if (++e->warp_waiting[(size_t)warp] == wsize) {
        for (int l = 0; l < wsize; l++) {
            int t = warp * 32 + l;
            if (e->th[(size_t)t].state == T_WAIT_WARP) {
                e->th[(size_t)t].state = T_READY;
                e->ready.push_back(t);
            }
        }
        e->warp_waiting[(size_t)warp] = 0;
    }
    yield_fiber(ts->f);
    uint64_t r = src_lane >= 0 && src_lane < wsize ? e->slots[base + (size_t)src_lane] : v;
    ts->shfl_seq++;
    return r;
}

cudaError_t launch(dim3 grid, dim3 block, size_t shmem, cudaStream_t s, kernel_call *call,
                   const void *const *ptrs, int n_ptrs, const char *name)
{
    std::shared_ptr<kernel_call> c(call);
    if (sticky.load())
        return ret(sticky_err());
    unsigned long long threads = (unsigned long long)block.x * block.y * block.z;
    if (!threads || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
        !grid.x || !grid.y || !grid.z || grid.x > 0x7fffffffu || grid.y > 65535 ||
        grid.z > 65535 || shmem) {
        fprintf(stderr, "cuda_emu: %s: launch of grid (%u, %u, %u), block (%u, %u, %u), %zu "
                        "bytes of shared memory refused\n",
                name, grid.x, grid.y, grid.z, block.x, block.y, block.z, shmem);
        return ret(cudaErrorInvalidConfiguration);
    }
    for (int i = 0; i < n_ptrs; i++)
        if (ptrs[i] && !is_device(ptrs[i], 1)) {
            fprintf(stderr, "cuda_emu: %s: pointer argument %d (%p) is not device memory\n", name,
                    i + 1, ptrs[i]);
            return ret(cudaErrorInvalidValue);
        }
    if (touch(cur_dev) != cudaSuccess)
        return ret(cudaErrorInitializationError);
    enqueue(s, [c, grid, block, name]() { run_grid(grid, block, c.get(), name); });
    return cudaSuccess;
}

} /* namespace emu */

using emu::cfg;
using emu::ret;

/* ---- devices ---------------------------------------------------------------- */

cudaError_t cudaDriverGetVersion(int *v)
{
    *v = cfg().driver;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v)
{
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count)
{
    *count = 0;
    if (cfg().driver < CUDART_VERSION)
        return ret(cudaErrorInsufficientDriver);
    if (cfg().visible.empty())
        return ret(cudaErrorNoDevice);
    *count = (int)cfg().visible.size();
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d)
{
    *d = emu::cur_dev;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d)
{
    cudaError_t e = emu::touch(d);
    if (e != cudaSuccess)
        return ret(e);
    emu::cur_dev = d;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d)
{
    if (cfg().driver < CUDART_VERSION)
        return ret(cudaErrorInsufficientDriver);
    if (d < 0 || d >= (int)cfg().visible.size())
        return ret(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cohort CUDA emulation %d (CPU)", cfg().visible[(size_t)d]);
    p->totalGlobalMem = cfg().total;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 1;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    cudaError_t e = emu::touch(emu::cur_dev);
    if (e != cudaSuccess)
        return ret(e);
    std::lock_guard<std::mutex> g(emu::mem_lock);
    *total_b = cfg().total;
    uint64_t taken = emu::used[emu::cur_dev] + emu::others_used(emu::cur_dev);
    *free_b = taken < cfg().total ? cfg().total - taken : 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
    emu::device_sync(emu::cur_dev);
    return emu::sticky.load() ? ret(emu::sticky_err()) : cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    if (emu::sticky.load())
        return emu::sticky_err();
    cudaError_t e = emu::last_err;
    emu::last_err = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void)
{
    return emu::sticky.load() ? emu::sticky_err() : emu::last_err;
}

const char *cudaGetErrorString(cudaError_t e) { return emu::err_string(e); }
const char *cudaGetErrorName(cudaError_t e) { return emu::err_name(e); }

/* ---- memory ----------------------------------------------------------------- */

cudaError_t cudaMalloc(void **p, size_t bytes)
{
    *p = nullptr;
    if (emu::sticky.load())
        return ret(emu::sticky_err());
    int dev = emu::cur_dev;
    cudaError_t e = emu::touch(dev);
    if (e != cudaSuccess)
        return ret(e);
    size_t charge = (bytes + 255) / 256 * 256;
    {
        std::lock_guard<std::mutex> g(emu::mem_lock);
        uint64_t taken = emu::used[dev] + emu::others_used(dev);
        if (!bytes || taken > cfg().total || charge > cfg().total - taken)
            return ret(bytes ? cudaErrorMemoryAllocation : cudaErrorInvalidValue);
        emu::used[dev] += charge;
        emu::publish(dev, emu::used[dev]);
    }
    void *m = nullptr;
    if (posix_memalign(&m, 256, bytes) != 0) {
        std::lock_guard<std::mutex> g(emu::mem_lock);
        emu::used[dev] -= charge;
        emu::publish(dev, emu::used[dev]);
        return ret(cudaErrorMemoryAllocation);
    }
    memset(m, 0xff, bytes); /* NaN, as float and as double */
    std::lock_guard<std::mutex> g(emu::mem_lock);
    emu::allocs[(uintptr_t)m] = emu::alloc_rec{bytes, charge, dev};
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p)
{
    if (!p)
        return cudaSuccess;
    emu::alloc_rec r;
    {
        std::lock_guard<std::mutex> g(emu::mem_lock);
        auto it = emu::allocs.find((uintptr_t)p);
        if (it == emu::allocs.end())
            return ret(cudaErrorInvalidValue);
        r = it->second;
    }
    /* cudaFree waits for the device: nothing queued may still use p. */
    emu::device_sync(r.dev);
    {
        std::lock_guard<std::mutex> g(emu::mem_lock);
        emu::allocs.erase((uintptr_t)p);
        emu::used[r.dev] -= r.charge;
        emu::publish(r.dev, emu::used[r.dev]);
    }
    free(p);
    return emu::sticky.load() ? ret(emu::sticky_err()) : cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t bytes)
{
    *p = nullptr;
    cudaError_t e = emu::touch(emu::cur_dev);
    if (e != cudaSuccess)
        return ret(e);
    void *m = malloc(bytes ? bytes : 1);
    if (!m)
        return ret(cudaErrorMemoryAllocation);
    std::lock_guard<std::mutex> g(emu::mem_lock);
    emu::pinned[(uintptr_t)m] = bytes ? bytes : 1;
    *p = m;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p)
{
    if (!p)
        return cudaSuccess;
    {
        std::lock_guard<std::mutex> g(emu::mem_lock);
        if (!emu::pinned.count((uintptr_t)p))
            return ret(cudaErrorInvalidValue);
    }
    emu::device_sync(emu::cur_dev);
    std::lock_guard<std::mutex> g(emu::mem_lock);
    emu::pinned.erase((uintptr_t)p);
    free(p);
    return cudaSuccess;
}

/* ---- streams and events --------------------------------------------------------- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
    (void)flags;
    cudaError_t e = emu::touch(emu::cur_dev);
    if (e != cudaSuccess)
        return ret(e);
    emu_stream *st = new emu_stream();
    st->dev = emu::cur_dev;
    std::lock_guard<std::mutex> g(emu::streams_lock);
    emu::streams.insert(st);
    *s = st;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!s)
        return ret(cudaErrorInvalidResourceHandle);
    /* CUDA lets queued work finish after the call returns. */
    emu::drain(s);
    std::lock_guard<std::mutex> g(emu::streams_lock);
    if (!emu::streams.erase(s))
        return ret(cudaErrorInvalidResourceHandle);
    for (emu_event *ev : emu::events)
        if (ev->s == s)
            ev->s = nullptr;
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    emu::drain(emu::resolve(s));
    return emu::sticky.load() ? ret(emu::sticky_err()) : cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
    (void)flags;
    emu_event *ev = new emu_event();
    ev->s = nullptr;
    std::lock_guard<std::mutex> g(emu::streams_lock);
    emu::events.insert(ev);
    *e = ev;
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    std::lock_guard<std::mutex> g(emu::streams_lock);
    if (!e || !emu::events.erase(e))
        return ret(cudaErrorInvalidResourceHandle);
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    if (!e)
        return ret(cudaErrorInvalidResourceHandle);
    e->s = emu::resolve(s);
    return emu::sticky.load() ? ret(emu::sticky_err()) : cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
    if (!e)
        return ret(cudaErrorInvalidResourceHandle);
    /* Everything its stream has queued: at least the work before the record. */
    if (e->s)
        emu::drain(e->s);
    return emu::sticky.load() ? ret(emu::sticky_err()) : cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e)
{
    if (!e)
        return ret(cudaErrorInvalidResourceHandle);
    if (e->s) {
        std::lock_guard<std::mutex> g(e->s->q_lock);
        if (!e->s->q.empty())
            return cudaErrorNotReady;
    }
    return cudaSuccess;
}

/* ---- copies ------------------------------------------------------------------- */

namespace {

/* Check a copy's two sides; 0 or the error. */
cudaError_t check_copy(void *dst, size_t dbytes, const void *src, size_t sbytes,
                       cudaMemcpyKind &kind)
{
    bool dd = emu::is_device(dst, dbytes), sd = emu::is_device(src, sbytes);
    if (kind == cudaMemcpyDefault)
        kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                  : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    bool want_dd = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool want_sd = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (dd != want_dd || sd != want_sd) {
        fprintf(stderr,
                "cuda_emu: a copy of kind %d from %p (%zu bytes, %s) to %p (%zu bytes, %s)\n",
                (int)kind, src, sbytes, sd ? "device" : "not device", dst, dbytes,
                dd ? "device" : "not device");
        return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

/* rows of width bytes, src pitch sp, dst pitch dp. */
void copy_rows(char *d, size_t dp, const char *s, size_t sp, size_t width, size_t rows)
{
    for (size_t r = 0; r < rows; r++)
        memcpy(d + r * dp, s + r * sp, width);
}

cudaError_t copy_2d(void *dst, size_t dp, const void *src, size_t sp, size_t width, size_t rows,
                    cudaMemcpyKind kind, cudaStream_t s)
{
    if (emu::sticky.load())
        return ret(emu::sticky_err());
    if (!width || !rows)
        return cudaSuccess;
    if (width > dp || width > sp)
        return ret(cudaErrorInvalidValue);
    size_t dbytes = dp * (rows - 1) + width, sbytes = sp * (rows - 1) + width;
    cudaError_t e = check_copy(dst, dbytes, src, sbytes, kind);
    if (e != cudaSuccess)
        return ret(e);
    char *d = static_cast<char *>(dst);
    const char *sc = static_cast<const char *>(src);
    if (kind == cudaMemcpyHostToDevice && !emu::is_pinned(src, sbytes)) {
        /* Pageable: CUDA takes the bytes before the call returns. */
        auto buf = std::make_shared<std::vector<char>>(width * rows);
        copy_rows(buf->data(), width, sc, sp, width, rows);
        emu::enqueue(s, [=]() { copy_rows(d, dp, buf->data(), width, width, rows); });
    } else if (kind == cudaMemcpyDeviceToHost && !emu::is_pinned(dst, dbytes)) {
        /* Pageable: the call returns when the copy is done. */
        emu::drain(emu::resolve(s));
        if (!emu::sticky.load())
            copy_rows(d, dp, sc, sp, width, rows);
    } else {
        emu::enqueue(s, [=]() { copy_rows(d, dp, sc, sp, width, rows); });
    }
    return emu::sticky.load() ? ret(emu::sticky_err()) : cudaSuccess;
}

} /* namespace */

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s)
{
    return copy_2d(dst, bytes, src, bytes, bytes, 1, kind, s);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind, cudaStream_t s)
{
    return copy_2d(dst, dpitch, src, spitch, width, height, kind, s);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind)
{
    cudaError_t e = copy_2d(dst, bytes, src, bytes, bytes, 1, kind, nullptr);
    if (e == cudaSuccess)
        emu::device_sync(emu::cur_dev);
    return emu::sticky.load() ? ret(emu::sticky_err()) : e;
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t s)
{
    if (emu::sticky.load())
        return ret(emu::sticky_err());
    if (!bytes)
        return cudaSuccess;
    if (!emu::is_device(dst, bytes))
        return ret(cudaErrorInvalidValue);
    emu::enqueue(s, [=]() { memset(dst, value, bytes); });
    return cudaSuccess;
}

/* ---- the loader's view (emu_dl.h) ----------------------------------------------- */

namespace {
char driver_tag, cublas_tag;
thread_local char dl_msg[512];
thread_local bool dl_msg_set;

void dl_fail(const char *fmt, const char *name)
{
    snprintf(dl_msg, sizeof dl_msg, fmt, name);
    dl_msg_set = true;
}
} /* namespace */

void *emu_dlopen(const char *name, int flags)
{
    if (name && strstr(name, "libcuda.so")) {
        if (cfg().no_driver) {
            dl_fail("%s: cannot open shared object file: No such file or directory", name);
            return nullptr;
        }
        return &driver_tag;
    }
    if (name && strstr(name, "libcublas.so")) {
        if (cfg().no_cublas) {
            dl_fail("%s: cannot open shared object file: No such file or directory", name);
            return nullptr;
        }
        return &cublas_tag;
    }
    return dlopen(name, flags);
}

void *emu_dlsym(void *handle, const char *name)
{
    if (handle == &cublas_tag || handle == &driver_tag) {
        void *p = handle == &cublas_tag ? emu_cublas_symbol(name) : nullptr;
        if (!p)
            dl_fail("undefined symbol: %s", name);
        return p;
    }
    return dlsym(handle, name);
}

int emu_dlclose(void *handle)
{
    return handle == &cublas_tag || handle == &driver_tag ? 0 : dlclose(handle);
}

char *emu_dlerror(void)
{
    if (dl_msg_set) {
        dl_msg_set = false;
        return dl_msg;
    }
    return dlerror();
}
