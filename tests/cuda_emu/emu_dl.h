/*
 * Force-included (-include) into the emulated build of backend_cuda.cu: its
 * dlopen of libcuda.so.1 and libcublas.so.13 and its dlsym of cuBLAS's entry
 * points reach the emulation (emu_runtime.cc) instead of the system's loader.
 * Every other name goes to the real dlopen. COHORT_EMU_NO_DRIVER and
 * COHORT_EMU_NO_CUBLAS make the two libraries missing.
 */
#ifndef COHORT_EMU_DL_H
#define COHORT_EMU_DL_H

#include <dlfcn.h>

void *emu_dlopen(const char *name, int flags);
void *emu_dlsym(void *handle, const char *name);
int emu_dlclose(void *handle);
char *emu_dlerror(void);

#define dlopen emu_dlopen
#define dlsym emu_dlsym
#define dlclose emu_dlclose
#define dlerror emu_dlerror

#endif
