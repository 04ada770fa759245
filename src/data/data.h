/*
 * data: dataset readers (IDX with gzip, CSV, NPY, NPZ) into one in-memory
 * form: float32 inputs [n, dim] and int32 labels [n], with the shape of one
 * sample (an image's (H, W, C), channels last; else flat). A dataset is read once
 * per run and shared read-only by every model trained on it.
 */
#ifndef COHORT_DATA_H
#define COHORT_DATA_H

#include "cohort.h"
#include "model/shape.h"

#include <stdint.h>

typedef struct cohort_dataset {
    int64_t n;         /* samples */
    int64_t dim;       /* features per sample: the product of shape */
    sample_shape shape; /* one sample: (H, W, C) for images, channels last, or flat (dim) */
    float *x;          /* [n, dim], row-major, owned; NULL where x8 holds the rows */
    uint8_t *x8;       /* NULL, or [n, dim] bytes, owned, each standing for byte / 255.0f:
                          IDX images, kept as they are in the file (4x less memory than
                          floats, and a quarter of the bytes to gather per batch) */
    void *x8_block;    /* the allocation x8 points into (x8 itself, or an inflated IDX
                          file, header and all), freed with the dataset */
    size_t x8_map_len; /* 0, or x8_block is a mapping of this many bytes (a cached
                          inflated file), unmapped with the dataset */
    int32_t *y;        /* [n], owned; each in [0, n_classes) */
    int32_t n_classes; /* 1 + the largest label; 0 without labels, or with real-valued
                          targets that are not all class numbers */
    float *t;          /* NULL, or [n, t_dim] real-valued targets (owned): float label
                          arrays, CSV label_columns; y then holds them as classes only
                          where t_dim is 1 and every value is a non-negative integer */
    int64_t t_dim;
    int has_labels;    /* 0: read without labels (data_options.unlabeled_dim); y all 0 */
    char **class_names; /* NULL, or n_classes names, owned: text labels (CSV), sorted by
                           strcmp; label i is class_names[i] */
    char x_dtype[12];  /* NPY/NPZ: numpy's name of x's dtype ("uint8", "float32"); "" for
                          CSV, IDX and in-memory data (floats) */
    int x_ints;        /* x holds the integers of an integer NPY/NPZ array as they are
                          (data_options.tokens: token ids, uint8 not scaled) */
    char source[1024]; /* the spec it was read from, for messages */
    unsigned borrowed; /* DATA_BORROW_*: arrays the caller owns (memory:), not freed here */
} cohort_dataset;

enum { DATA_BORROW_X = 1, DATA_BORROW_Y = 2, DATA_BORROW_T = 4 };

/* A read-only window of a dataset: rows [begin, begin + n). */
typedef struct data_view {
    const float *x;
    const uint8_t *x8; /* where x is NULL: the rows as bytes (cohort_dataset.x8) */
    const int32_t *y;  /* class labels (zeros where the dataset has none) */
    const float *t;    /* target rows [n, t_dim], or NULL */
    int64_t t_dim;
    int64_t n, dim;
    sample_shape shape; /* the dataset's */
} data_view;

typedef struct data_options {
    const char *label_column; /* CSV: name or 0-based index; NULL: "label" or last */
    const char *label_columns; /* CSV: "a,b" names or indices of real-valued targets; NULL */
    /* 0: every dataset has labels (training, eval). > 0 (predict: the model's
     * input size): labels are optional; npy:X alone, and a CSV of exactly this
     * many columns with no label_column and none named "label", are read
     * without labels (has_labels 0). < 0: labels optional, input size unknown
     * (npy:X alone only). */
    int64_t unlabeled_dim;
    const cohort_data *memory; /* the datasets of memory:NAME specs, [n_memory] */
    int n_memory;
    /* 1: the models read x as token ids (their first layer is an embedding):
     * an NPY/NPZ array of an integer type is read as it is, uint8 too, which
     * is otherwise scaled by 1/255 (x_ints); data_check_tokens checks them */
    int tokens;
} data_options;

/*
 * Read a dataset from a spec (sample shapes: IDX [n, H, W] and NPY/NPZ
 * [n, H, W] are (H, W, 1), NPY/NPZ [n, H, W, C] and IDX [n, H, W, C] are
 * (H, W, C); [n, d], [n] and CSV are flat; other ranks are flattened):
 *   fashion-mnist:train | fashion-mnist:test   the Debian package's files
 *        (/usr/share/datasets/fashion-mnist, or $COHORT_DATA)
 *   mnist:train | mnist:test                   the same layout under $COHORT_DATA
 *   idx:IMAGES,LABELS      IDX files, plain or .gz
 *   csv:FILE               header optional; label column "label" or the last
 *   npy:X,Y                X float32/float64/uint8 [n, ...], Y integer [n]
 *   npy:X                  inputs only, when opt->unlabeled_dim > 0
 *   npz:FILE               arrays "x" and "y" (or x_train/y_train, or the first two;
 *                          refused when it has both x_train and x_test arrays)
 *   npz:FILE:X,Y           the arrays named X and Y (npz:FILE:X: inputs only, when
 *                          opt->unlabeled_dim != 0)
 * uint8 inputs are scaled to [0, 1], except as tokens (data_options.tokens).
 * On error *out is NULL and err names the
 * file and what is wrong with it; exit status 2 for the CLI (COHORT_ERR_INPUT
 * or COHORT_ERR_IO).
 */
cohort_status data_load(const char *spec, const data_options *opt, cohort_dataset **out,
                        cohort_error *err);

/* The form of a spec alone, no file opened (a plan's datasets are checked
 * as it is read, so that its errors give the plan's line): a known kind,
 * and what it needs after the colon; labeled: npy: needs X,Y (else npy:X
 * is inputs only). data_load checks it first. */
cohort_status data_spec_check(const char *spec, int labeled, cohort_error *err);

/* A dataset over the caller's arrays (cohort_data), read in place: x,
 * labels and targets are borrowed (labels are made, zeros, when there are
 * none); labels are checked to be in range. */
cohort_status data_from_memory(const cohort_data *m, cohort_dataset **out, cohort_error *err);

cohort_status data_read_idx(const char *images, const char *labels, cohort_dataset **out,
                            cohort_error *err);
cohort_status data_read_csv(const char *path, const char *label_column, cohort_dataset **out,
                            cohort_error *err);
/* As data_read_csv_opt, with label_columns ("y1,y2" or "3,4": names or 0-based
 * indices; NULL: one label column) read as real-valued targets [n, k]. A
 * single label column whose numbers are not all classes (-2.5, 0.3) is read
 * as one real-valued target (n_classes 0). */
cohort_status data_read_csv_cols(const char *path, const char *label_column,
                                 const char *label_columns, int64_t unlabeled_dim,
                                 cohort_dataset **out, cohort_error *err);
/* As data_read_csv, with unlabeled_dim as in data_options (0: labels required). */
cohort_status data_read_csv_opt(const char *path, const char *label_column, int64_t unlabeled_dim,
                                cohort_dataset **out, cohort_error *err);
/* y_path NULL: inputs only (has_labels 0). */
cohort_status data_read_npy(const char *x_path, const char *y_path, cohort_dataset **out,
                            cohort_error *err);
cohort_status data_read_npz(const char *path, cohort_dataset **out, cohort_error *err);
/* The arrays named xname and yname (with or without .npy; yname NULL: inputs
 * only, has_labels 0); xname NULL: as data_read_npz. */
cohort_status data_read_npz_named(const char *path, const char *xname, const char *yname,
                                  cohort_dataset **out, cohort_error *err);
/* data_read_npy and data_read_npz_named with data_options.tokens. */
cohort_status data_read_npy_as(const char *x_path, const char *y_path, int tokens,
                               cohort_dataset **out, cohort_error *err);
cohort_status data_read_npz_as(const char *path, const char *xname, const char *yname,
                               int tokens, cohort_dataset **out, cohort_error *err);

/*
 * Token ids (an embedding's input): what data_check_tokens needs of a
 * dataset, found in one pass (data_tokens_scan) and kept for every model
 * that reads it. An id is x's float value, exact below 2^24.
 */
typedef struct data_tokens {
    int64_t bad;  /* the first element (flat index into x) that is no id: negative, or not
                     an integer; -1: none */
    float max;    /* the largest value */
} data_tokens;
void data_tokens_scan(const cohort_dataset *ds, data_tokens *t);
/*
 * COHORT_ERR_INPUT unless every value of ds is a token id in [0, limit):
 * ds holds integers (an integer NPY/NPZ array read as tokens, or CSV or
 * in-memory values that are all integers: not float, bool or IDX data), none
 * negative nor limit or more. The message names `who` (the layer that reads
 * them, "model 'm': embedding (input_dim 30)"), the data, and the element
 * and its value, "x[3, 7] is 31". scan: data_tokens_scan's of ds.
 */
cohort_status data_check_tokens(const cohort_dataset *ds, const data_tokens *scan, int64_t limit,
                                const char *who, cohort_error *err);

void data_free(cohort_dataset *ds);

/*
 * Renumber the labels of ds (with class_names, or none) as the classes
 * `names` (n of them, sorted by strcmp, as a training set's class_names),
 * so that a test set's "dog" is the training set's "dog". names NULL: the
 * classes are numbers, and ds must have numeric labels too. Fails
 * (COHORT_ERR_INPUT, naming `what`, e.g. the training set) when ds has a
 * label not in names, or text labels where numbers are expected or the
 * other way round. On success ds->class_names is freed and n_classes is n
 * (with names).
 */
cohort_status data_align_classes(cohort_dataset *ds, char *const *names, int32_t n,
                                 const char *what, cohort_error *err);

/* Log a warning (cohort_log) naming the classes in [0, n_classes) that no
 * sample of ds has: labels 1..3 make 4 classes, class 0 never seen. Returns
 * how many are empty; 0 for NULL or a dataset without labels. */
int32_t data_warn_empty_classes(const cohort_dataset *ds);

/* Every row of ds; the shape is ds's (flat dim when ds has none). */
data_view data_view_all(const cohort_dataset *ds);
/* Split off the last `fraction` of ds as validation (as Keras does); both
 * views keep ds's shape. */
void data_split(const cohort_dataset *ds, double fraction, data_view *train, data_view *val);

#endif
