/*
 * io: the files a run writes and reads: safetensors weights, results.json,
 * per-model history CSV. Every writer is atomic (temporary file, fsync,
 * rename): a reader never sees a half-written file.
 */
#ifndef COHORT_IO_H
#define COHORT_IO_H

#include "cohort.h"
#include "model/model.h"

#include <stdint.h>

/* One named F32 tensor. */
typedef struct st_tensor {
    char name[128];
    int ndim;
    int64_t shape[4];
    float *data;      /* writer: borrowed; reader: owned by the st_file */
} st_tensor;

typedef struct st_file {
    int n;
    st_tensor *t;
    char *metadata_json; /* the __metadata__ object as JSON text, or NULL */
    char *blob;          /* reader's storage */
} st_file;

/* Write tensors (F32, little endian) with __metadata__ entries given as
 * key/value string pairs. Atomic. */
cohort_status st_write(const char *path, const st_tensor *t, int n, const char *const *meta_kv,
                       int n_meta, cohort_error *err);
/* The same, synced as file_write_atomic_ex's flags say (FILE_SYNC_DATA,
 * FILE_SYNC_NAME; st_write: both). */
cohort_status st_write_ex(const char *path, const st_tensor *t, int n, const char *const *meta_kv,
                          int n_meta, int sync, cohort_error *err);

/* Read a safetensors file. Only F32 tensors are accepted; every offset and
 * shape is checked against the file's size before it is trusted. */
cohort_status st_read(const char *path, st_file *out, cohort_error *err);
/* A __metadata__ value (malloc'd copy), or NULL when absent. */
char *st_meta_get(const st_file *f, const char *key);
const st_tensor *st_find(const st_file *f, const char *name);
void st_free(st_file *f);

#endif
