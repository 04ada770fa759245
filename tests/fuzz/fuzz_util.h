/*
 * fuzz_util: helpers shared by the libFuzzer targets of tests/fuzz/: the
 * readers take file names, so each input is written to a file in /dev/shm
 * (per process, reused every run), plain or gzip-compressed.
 */
#ifndef COHORT_FUZZ_UTIL_H
#define COHORT_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static char fuzz_paths[4][96];

/* Remove the scratch files at exit (libFuzzer exits normally at the end of
 * -max_total_time or -runs). */
static void fuzz_cleanup(void)
{
    for (int i = 0; i < 4; i++)
        if (fuzz_paths[i][0])
            unlink(fuzz_paths[i]);
}

/* The path of this process's scratch file number `slot` (0..3). */
static inline const char *fuzz_path(int slot)
{
    if (!fuzz_paths[slot][0]) {
        static int registered;
        if (!registered++)
            atexit(fuzz_cleanup);
        const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
        snprintf(fuzz_paths[slot], sizeof fuzz_paths[slot], "%s/cohort-fuzz-%ld-%d", dir,
                 (long)getpid(), slot);
    }
    return fuzz_paths[slot];
}

/* Write n bytes to scratch file `slot`, gzip-compressed when gz is set.
 * Aborts on failure: a harness that cannot write its input tests nothing. */
static inline const char *fuzz_write(int slot, const uint8_t *data, size_t n, int gz)
{
    const char *path = fuzz_path(slot);
    if (gz) {
        gzFile g = gzopen(path, "wb1");
        if (!g || (n && gzwrite(g, data, (unsigned)n) != (int)n) || gzclose(g) != Z_OK)
            abort();
        return path;
    }
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0)
        abort();
    return path;
}

/* Little-endian 16-bit value at p. */
static inline size_t fuzz_le16(const uint8_t *p) { return (size_t)p[0] | (size_t)p[1] << 8; }

#endif
