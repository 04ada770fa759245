/*
 * util: errors, logging, deterministic random numbers, small string and file
 * helpers shared by every module. Owns no state but the log callback.
 */
#ifndef COHORT_UTIL_H
#define COHORT_UTIL_H

#include "cohort.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define COHORT_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* Fill err (may be NULL) with st and the formatted message; returns st. */
cohort_status cohort_fail(cohort_error *err, cohort_status st, const char *fmt, ...) COHORT_PRINTF(3, 4);

/* Prefix err's message with "prefix: ", keeping its status; returns it. */
cohort_status cohort_fail_prefix(cohort_error *err, const char *fmt, ...) COHORT_PRINTF(2, 3);

void cohort_log(cohort_log_level level, const char *fmt, ...) COHORT_PRINTF(2, 3);

/* ---- random numbers: splitmix64-seeded xoshiro256**, one per purpose ---- */
typedef struct rng_state { uint64_t s[4]; } rng_state;

void rng_seed(rng_state *r, uint64_t seed, uint64_t stream);
uint64_t rng_next(rng_state *r);
/* Uniform in [0, 1) with 24 random bits. */
float rng_uniform(rng_state *r);
/* Uniform integer in [0, n), unbiased. */
uint64_t rng_below(rng_state *r, uint64_t n);
/* A stateless hash of (key, counter): the top 24 bits of splitmix64's
 * finalizer, the same on every backend. Inline: dropout calls it once per
 * element. */
static inline uint32_t rng_hash_bits24(uint64_t key, uint64_t counter)
{
    uint64_t z = (key ^ (counter * 0x9e3779b97f4a7c15ULL)) + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (uint32_t)(z >> 40);
}

/* rng_hash_bits24 / 2^24: the hash as a float in [0, 1), exact. */
static inline float rng_hash_uniform(uint64_t key, uint64_t counter)
{
    return (float)rng_hash_bits24(key, counter) * (1.0f / 16777216.0f);
}

/* ---- strings ---- */
/* Copy src into dst of size n, always NUL-terminated; returns 0 when it fit. */
int str_copy(char *dst, size_t n, const char *src);
/* malloc'd copy, or NULL on out of memory. */
char *str_dup(const char *s);
/* The two ends of every number cohort reads or writes as text (the plan,
 * results.json, CSV, checkpoints, report.html, safetensors metadata,
 * messages): strtod and vsnprintf in the C locale, whatever the process's.
 * A host program (a Python session, a C program that called
 * setlocale(LC_ALL, "")) may have set LC_NUMERIC to a language that writes
 * 0,5: there strtod stops at the '.' of 0.2, and printf writes 0,2, which no
 * JSON, YAML or CSV reader takes. Threads cohort starts run in the global
 * locale, so the C locale is taken per call, not per entry point. Library
 * code formats numbers with these (or sb_printf, cohort_fail, which use
 * them), never with the bare C library functions. */
double str_to_double(const char *s, char **end);
int str_vformat(char *buf, size_t n, const char *fmt, va_list ap) COHORT_PRINTF(3, 0);
int str_format(char *buf, size_t n, const char *fmt, ...) COHORT_PRINTF(3, 4);
/* Parse "4GiB", "512MiB", "100KiB", "12B", "4096" into bytes; 0 on success. */
int parse_bytes(const char *s, uint64_t *out);
/* Print bytes as "1.50 MiB" into buf. */
const char *format_bytes(uint64_t bytes, char *buf, size_t n);

/* ---- growable byte buffer ---- */
typedef struct strbuf { char *data; size_t len, cap; int failed; } strbuf;
void sb_init(strbuf *b);
void sb_free(strbuf *b);
void sb_putn(strbuf *b, const char *s, size_t n);
void sb_puts(strbuf *b, const char *s);
void sb_printf(strbuf *b, const char *fmt, ...) COHORT_PRINTF(2, 3);
/* Append s as a JSON string literal, quotes included. */
void sb_json_str(strbuf *b, const char *s);
/* Append a double as JSON (NaN and Inf become null). */
void sb_json_num(strbuf *b, double v);
/* Append a finite float with the fewest digits that read back as the same
 * float (0.001, not 0.00100000005). */
void sb_json_float(strbuf *b, float v);

/* ---- memory ---- */
/* A buffer of `bytes`, 64-byte aligned, freed with free(). From 1 MiB on
 * it is whole 2 MiB pages, marked for huge pages (transparent huge pages in
 * "madvise" mode): a page fault costs about 10 us on the virtual machines
 * cohort runs on, so that 4 KiB pages cost 0.4 s a GB on first touch, huge
 * ones 0.06 s (measured on an AMD EPYC VM). For datasets, file bytes,
 * model pools and the host copies of model state. */
void *mem_alloc_big(size_t bytes);

/* ---- files ---- */
/* Read a whole file into a malloc'd buffer (NUL-terminated). Refuses files
 * over max_bytes. */
cohort_status file_read_all(const char *path, size_t max_bytes, char **data, size_t *len,
                            cohort_error *err);
/* What a file of st_mode `mode` is, for messages ("a FIFO", "a symbolic
 * link", ...). */
const char *file_kind_str(unsigned mode);
/* open(path, flags) of a regular file (flags: O_RDONLY, O_RDWR, O_CREAT
 * (mode 0644), O_NOFOLLOW ...), never blocking in the open (a FIFO with no
 * writer).
 * Returns the descriptor (close-on-exec, blocking) or -1 with err naming
 * path and what it is instead ("not a regular file (a FIFO)"). */
int file_open_regular(const char *path, int flags, cohort_error *err);
/* The same, read-only, as a stdio stream; NULL with err on error. */
FILE *file_fopen_regular(const char *path, cohort_error *err);
/* COHORT_OK when path does not exist or is a regular file (not a link to
 * one); else err says what it is: file_write_atomic would replace it. */
cohort_status file_check_replaceable(const char *path, cohort_error *err);
/* Write data to path atomically: path.tmp, fsync, rename, fsync of the
 * directory. On error the old file at path is untouched. A path that is
 * anything but a regular file (a symbolic link, FIFO, device, directory)
 * is refused, never replaced. */
cohort_status file_write_atomic(const char *path, const void *data, size_t len, cohort_error *err);
/* The same, the file's bytes the parts one after another (without a copy
 * of them in one buffer). */
typedef struct file_part {
    const void *data;
    size_t len;
} file_part;
cohort_status file_write_atomic_parts(const char *path, const file_part *parts, int n_parts,
                                      cohort_error *err);
/* What file_write_atomic_ex makes durable against a crash of the machine
 * (a killed process loses nothing either way: the rename is atomic).
 * FILE_SYNC_DATA: the file's bytes are fsynced before it is renamed into
 * place, so that its name never points at a file the disk lost part of;
 * FILE_SYNC_NAME: its folder is fsynced after the rename, so the new name
 * itself survives. Without FILE_SYNC_NAME the caller syncs the folder
 * later (file_sync_dir), once for many files, before it writes anything
 * that says those files are there. */
enum { FILE_SYNC_DATA = 1, FILE_SYNC_NAME = 2 };
cohort_status file_write_atomic_ex(const char *path, const file_part *parts, int n_parts,
                                   int flags, cohort_error *err);
/* fsync of a folder: the names renamed into it are durable (nothing when
 * file_set_durable is off). */
void file_sync_dir(const char *dir);
/* Make path name the file src names (a hard link, through a temporary
 * renamed over path): a second name for bytes already written and synced,
 * at the cost of a folder entry. The rename is not synced (file_sync_dir).
 * Refuses a path that is not a regular file, as file_write_atomic does. */
cohort_status file_link_atomic(const char *src, const char *path, cohort_error *err);
/* Whether file_write_atomic fsyncs (default 1). Off, a crash of the machine
 * (not of cohort) can lose the last writes; tests that write thousands of
 * files turn it off, as SQLite's synchronous=OFF does. */
void file_set_durable(int on);
/* NULL, or the path of the first file_write_atomic of this process that
 * failed for lack of space (ENOSPC, EDQUOT): the disk is full. */
const char *file_out_of_space(void);
/* Latch path as the first write that failed for lack of space, unless one is
 * latched already: a worker process's full disk, told to its parent. */
void file_note_out_of_space(const char *path);
/* mkdir -p. */
cohort_status dir_make(const char *path, cohort_error *err);

double now_seconds(void);

/* The calling thread's floating-point mode with denormals flushed to zero
 * (inputs and results), as TensorFlow runs its CPU kernels; returns the mode
 * to hand back to fp_restore. A no-op where the processor has no such mode. */
unsigned fp_flush_denormals(void);
void fp_restore(unsigned saved);

#endif
