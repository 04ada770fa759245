/*
 * What the CPU backend offers beyond its ops table (backend_cpu() in
 * backend_impl.h), to the run, the devices and the layers: OpenBLAS's
 * thread count, which of its own kernels run here, and the image chunks of
 * its fused convolution ops. Nothing here concerns another backend.
 */
#ifndef COHORT_BACKEND_CPU_H
#define COHORT_BACKEND_CPU_H

#include <stddef.h>

/* Images per chunk of the fused convolution ops for images whose im2col
 * rows hold `floats` floats each, in batches of B: about CONV_CHUNK_FLOATS
 * of col a chunk (half a 512 KiB L2), at least one image, at most B/32. */
#define CONV_CHUNK_FLOATS 65536
int conv_chunk_images(size_t floats, int B);
/* The chunk of conv_wgrad: as conv_chunk_images, but up to about 1024
 * rows (pixels) a chunk, where B/24 images allow it, so that each chunk's
 * product is large enough to run near the peak and the partial sums stay
 * few. */
int conv_wgrad_chunk(size_t floats, int pixels, int B);

/* OpenBLAS's thread count for CPU contexts of `threads` cores: 1 where the
 * CPU backend's own kernels split the big products over a context's own
 * threads (OpenBLAS's idle workers spin, and would take the cores from
 * them), else `threads`. */
int backend_cpu_blas_threads(int threads);
/* Sets OpenBLAS's thread count to n where it is not n already. OpenBLAS
 * stops its threads for a fork() and starts them again at the next
 * openblas_set_num_threads, and started threads spin on sched_yield for
 * about a tenth of a second before they sleep: on a 2-core machine, time
 * taken from the first batches. Setting it only on a change, and once
 * before the GPU probe's fork (backend_cpu_blas_settle), leaves them
 * stopped where the CPU kernels want one BLAS thread. */
void backend_cpu_set_blas_threads(int n);
/* The BLAS thread count a run on one core would set, set now. */
void backend_cpu_blas_settle(void);
/* The CPU backend's own kernels that run here ("avx512", "avx2"), or
 * "blas" where only OpenBLAS's do (no AVX2, or COHORT_CPU_KERNELS=none). */
const char *backend_cpu_kernels(void);
/* Why those, in a phrase: the rule, or what COHORT_CPU_KERNELS asked for. */
const char *backend_cpu_kernels_why(void);

#endif
