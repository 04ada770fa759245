/*
 * The emulation's internals shared by emu_runtime.cc and emu_cublas.cc.
 */
#ifndef COHORT_EMU_H
#define COHORT_EMU_H

#include "cuda_runtime.h"

#include <functional>

namespace emu {

/* Queue fn on stream s (NULL: the device's default stream), or run it now
 * outside the deferred mode. */
void enqueue(cudaStream_t s, std::function<void()> fn);
/* [p, p + bytes) lies inside one device allocation. */
bool is_device(const void *p, size_t bytes);
/* A fault in queued work (a kernel's or a GEMM's): every later call fails
 * with e, as after a real device fault; the message goes to stderr. */
void fault(cudaError_t e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Device memory for the emulation's own use (cuBLAS's workspace). */
cudaError_t dev_alloc(void **p, size_t bytes);
cudaError_t dev_free(void *p);
/* A size from the environment: bytes with an optional K, M or G. */
size_t env_bytes(const char *name, size_t dflt);

} /* namespace emu */

/* The cuBLAS side of emu_dlsym. */
void *emu_cublas_symbol(const char *name);

#endif
