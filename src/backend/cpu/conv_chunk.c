/* The image chunks of the CPU backend's fused convolution ops (cpu.h). */
#include "backend/cpu/cpu.h"

/* At most B/32 images a chunk (rounded up): the parts of a context take
 * whole chunks, so with fewer chunks the last part to finish holds up the
 * others (13 chunks on 2 threads: 7 against 6). */
int conv_chunk_images(size_t floats, int B)
{
    size_t n = floats ? CONV_CHUNK_FLOATS / floats : 1, most = B > 0 ? ((size_t)B + 31) / 32 : 1;
    n = n < most ? n : most;
    return n < 1 ? 1 : (int)n;
}

int conv_wgrad_chunk(size_t floats, int pixels, int B)
{
    int n = conv_chunk_images(floats, B), by_rows = pixels > 0 ? (1024 + pixels - 1) / pixels : 1;
    int most = B > 0 ? (B + 23) / 24 : 1; /* at least about 24 chunks, as conv_chunk_images */
    by_rows = by_rows < most ? by_rows : most;
    n = n > by_rows ? n : by_rows;
    return n > B ? (B > 0 ? B : 1) : n;
}
