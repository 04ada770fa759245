/*
 * data_impl: helpers shared by the readers of src/data/ and by nothing else:
 * capped allocation of the x and y arrays, assembly of a cohort_dataset, and
 * a byte source over a file region that is stored or deflated (NPY and NPZ).
 */
#ifndef COHORT_DATA_IMPL_H
#define COHORT_DATA_IMPL_H

#include "data/data.h"

#include <stdint.h>
#include <stdio.h>
#include <zlib.h>

struct stat;

/*
 * gz_cache.c: the inflated bytes of a gzip file, kept in a file of the cache
 * directory and mapped by later runs (the file's header says where and what
 * is checked). gz_cache_get: 1 with *m the bytes of the source `src` whose
 * gzip trailer holds crc and isize, mapped read-only and checked against crc;
 * 0 (and *m empty) on a miss or with the cache off. gz_cache_put: keep len
 * bytes inflated from src, at least GZ_CACHE_MIN of them; failures are
 * silent (a cache). gz_cache_release unmaps what gz_cache_get mapped.
 */
#define GZ_CACHE_HEAD 128
#define GZ_CACHE_MIN ((size_t)1 << 20)
typedef struct gz_cache_map {
    void *base;               /* the mapping, header and all; NULL: none */
    size_t map_len;
    const unsigned char *data; /* the inflated bytes, GZ_CACHE_HEAD into base */
    size_t len;
} gz_cache_map;
int gz_cache_get(const struct stat *src, uint32_t crc, uint32_t isize, gz_cache_map *m);
void gz_cache_put(const struct stat *src, uint32_t crc, const void *data, size_t len);
void gz_cache_release(gz_cache_map *m);
/* 1 where the cache is built in (with libdeflate, which inflates at once). */
int gz_cache_built(void);

/* Free x8_block as data_free does: unmap it where map_len is not 0 (a cached
 * inflated file), else free() it. */
void data_block_free(void *block, size_t map_len);

/* No dataset may hold more than this many bytes of float32 inputs. */
#define DATA_MAX_X_BYTES ((uint64_t)16 << 30)
/* The largest label: 1 + it must still fit n_classes (int32). */
#define DATA_MAX_LABEL (INT32_MAX - 1)

/*
 * Decimal text to float, exactly as (float)strtod, numpy's loadtxt then
 * astype(float32) (csv_float.c; its fast path is data_float_scan of
 * csv_float.h): 1 when the whole of [s, e) is a number strtod takes (inf and
 * nan too; not hexadecimal, which numpy refuses; no leading space), with *out
 * its value; 0 otherwise. The byte at e must not continue a number (a comma,
 * a quote, a space, a line end or NUL, as in a CSV line): strtod reads up to
 * it.
 */
int data_float_parse(const char *s, const char *e, float *out);

/* Tests: split every CSV into chunks of at least min_chunk bytes, parsed on
 * up to `threads` threads; 0, 0 restores the defaults (1 MiB, the cores). */
void data_csv_set_split(size_t min_chunk, int threads);

/* COHORT_ERR_INPUT, naming `path`, when n * dim floats overflow or pass
 * DATA_MAX_X_BYTES; COHORT_OK otherwise. Allocates nothing. */
cohort_status data_check_x(uint64_t n, uint64_t dim, const char *path, cohort_error *err);

/* COHORT_ERR_INPUT for the value of array `who` (shape[ndim], C order) at
 * flat index `at` that is not a finite float32: "x[3, 2] is nan" (the NPY
 * reader's, and in-memory data's). */
cohort_status data_not_finite(const char *name, const char *who, const uint64_t *shape, int ndim,
                              uint64_t at, double value, cohort_error *err);

/*
 * Allocate x [n, dim] (64-byte aligned, free with free()). Fails with
 * COHORT_ERR_INPUT, naming `path`, when n * dim overflows or passes
 * DATA_MAX_X_BYTES, and with COHORT_ERR_NOMEM when malloc fails.
 */
cohort_status data_alloc_x(uint64_t n, uint64_t dim, const char *path, float **x,
                           cohort_error *err);

/* Allocate y [n] (64-byte aligned); errors as data_alloc_x. */
cohort_status data_alloc_y(uint64_t n, const char *path, int32_t **y, cohort_error *err);

/* The shape of a sample whose dims (those after n) are dims[0..ndims): none
 * or one is flat, two (H, W) is (H, W, 1), three is (H, W, C), more are
 * flattened. Rank 0 (no shape) when a size passes INT32_MAX. */
sample_shape data_shape_of(const uint64_t *dims, int ndims);

/*
 * Wrap x and y (ownership passes to this call in every case: on error they
 * are freed) into a new dataset with n_classes = 1 + the largest label and
 * source copied from `source`. Labels must already be in [0, DATA_MAX_LABEL].
 * shape: one sample's, of dim values; NULL or rank 0: flat. A sample of more
 * than INT32_MAX values is COHORT_ERR_INPUT (no model takes it).
 */
cohort_status data_make(float *x, int32_t *y, int64_t n, int64_t dim, const sample_shape *shape,
                        const char *source, cohort_dataset **out, cohort_error *err);

/* As data_make for a dataset without labels: y is allocated as zeros,
 * has_labels and n_classes are 0. Takes ownership of x in every case. */
cohort_status data_make_unlabeled(float *x, int64_t n, int64_t dim, const sample_shape *shape,
                                  const char *source, cohort_dataset **out, cohort_error *err);

/*
 * A byte source: `left` bytes starting at the current position of f, either
 * stored as they are or as a raw deflate stream of `in_left` bytes. When
 * check_crc is set, data_src_finish compares the CRC-32 of all the bytes
 * with want_crc (zip members).
 */
typedef struct data_src {
    FILE *f;
    char name[1200];   /* "path" or "path: member x.npy", for messages */
    uint64_t left;     /* bytes the source still claims to hold */
    uint64_t in_left;  /* deflated: compressed bytes not yet read from f */
    int deflated;
    int z_live;        /* zs is initialized */
    int z_end;         /* the deflate stream ended */
    z_stream zs;
    unsigned char *in; /* deflated: input buffer */
    int check_crc;
    uint32_t crc, want_crc;
} data_src;

/* Prepare src over f; `deflated` starts a raw inflate of in_left bytes.
 * On error (COHORT_ERR_NOMEM) src needs no data_src_close. */
cohort_status data_src_open(data_src *src, FILE *f, const char *name, uint64_t left,
                            int deflated, uint64_t in_left, cohort_error *err);

/* Read up to n bytes into buf; *got < n only at the end of the data. Fails
 * with COHORT_ERR_IO on a read error, COHORT_ERR_INPUT on a corrupt stream. */
cohort_status data_src_read(data_src *src, void *buf, size_t n, size_t *got, cohort_error *err);

/* Read exactly n bytes, or fail with "NAME: truncated: expected N bytes of
 * WHAT, got M" (COHORT_ERR_INPUT). */
cohort_status data_src_read_exact(data_src *src, void *buf, size_t n, const char *what,
                                  cohort_error *err);

/* Read what is left and check the CRC when asked; COHORT_ERR_INPUT on a
 * mismatch. Does not close. */
cohort_status data_src_finish(data_src *src, cohort_error *err);

/* Release the inflate state (not the FILE). Safe to call twice. */
void data_src_close(data_src *src);

/* An array read from an .npy stream, converted to x floats or y labels.
 * DATA_NPY_TOKENS is x read as token ids (data_options.tokens): an integer
 * array's values as they are, uint8 unscaled. */
typedef enum data_npy_role { DATA_NPY_X, DATA_NPY_Y, DATA_NPY_TOKENS } data_npy_role;

typedef struct data_npy_array {
    int64_t n, dim;  /* rows, and the product of the other dimensions */
    sample_shape shape; /* role X: one row's (data_shape_of) */
    float *x;        /* role X: [n, dim], owned by the caller */
    int32_t *y;      /* role Y: [n] class labels, owned by the caller; NULL for targets
                        that are not all class numbers */
    float *t;        /* role Y: real-valued targets [n, dim] (float, bool or multi-column
                        arrays), owned by the caller; NULL for integer labels */
    char dtype[12];  /* numpy's name of the file's dtype: "uint8", "float32", "bool" */
    int ints;        /* role TOKENS: an integer dtype, read as it is (cohort_dataset.x_ints) */
} data_npy_array;

/*
 * Parse an .npy stream (versions 1.0, 2.0, 3.0; either byte order; C or
 * Fortran order, returned in C order) from src and convert it. X: f2, f4, f8,
 * |u1 (scaled by 1/255), another integer type or bool (as is); TOKENS as X
 * but |u1 as it is too; a value that
 * is not a finite float32 (NaN, inf, 1e39 in f8) is an error naming its index.
 * Y: an integer type of shape [n] or [n, 1] is class
 * labels in [0, DATA_MAX_LABEL]; floats, booleans and rows of several
 * values are targets t (and labels too where one value a row is always a
 * class number). Checks that src claims at least
 * the bytes the header declares before allocating. On error out is zeroed
 * and nothing is left allocated.
 */
cohort_status data_npy_read(data_src *src, data_npy_role role, data_npy_array *out,
                            cohort_error *err);

/* x from one .npy and y from another into a dataset: checks that the row
 * counts agree ("x has 100 rows, y has 99"). Takes ownership of both. The
 * dataset gets x's dtype and ints. */
cohort_status data_npy_pair(data_npy_array *x, data_npy_array *y, const char *source,
                            cohort_dataset **out, cohort_error *err);
/* x alone into a dataset without labels (data_make_unlabeled), with x's dtype
 * and ints. Takes ownership of x. */
cohort_status data_npy_alone(data_npy_array *x, const char *source, cohort_dataset **out,
                             cohort_error *err);

#endif
