/*
 * dataset: the in-memory dataset (allocation, views, the validation split)
 * and data_load, which turns a spec such as "fashion-mnist:train" or
 * "csv:FILE" into a call of the matching reader.
 */
#include "data/data_impl.h"
#include "util/json.h"
#include "util/util.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

cohort_status data_check_x(uint64_t n, uint64_t dim, const char *path, cohort_error *err)
{
    uint64_t count, bytes;
    if (__builtin_mul_overflow(n, dim, &count) || __builtin_mul_overflow(count, 4, &bytes) ||
        bytes > DATA_MAX_X_BYTES)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: %llu samples of %llu values are more than the limit of 16 GiB "
                           "of float32 data",
                           path, (unsigned long long)n, (unsigned long long)dim);
    return COHORT_OK;
}

cohort_status data_alloc_x(uint64_t n, uint64_t dim, const char *path, float **x,
                           cohort_error *err)
{
    *x = NULL;
    cohort_status st = data_check_x(n, dim, path, err);
    if (st)
        return st;
    uint64_t bytes = n * dim * 4;
    if (bytes > SIZE_MAX)
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: %llu bytes do not fit in memory", path,
                           (unsigned long long)bytes);
    *x = mem_alloc_big((size_t)bytes);
    if (!*x)
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory allocating %llu bytes",
                           path, (unsigned long long)bytes);
    return COHORT_OK;
}

cohort_status data_alloc_y(uint64_t n, const char *path, int32_t **y, cohort_error *err)
{
    *y = NULL;
    uint64_t bytes;
    if (__builtin_mul_overflow(n, 4, &bytes) || bytes > DATA_MAX_X_BYTES)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: %llu labels are more than the limit",
                           path, (unsigned long long)n);
    if (bytes > SIZE_MAX)
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: %llu bytes do not fit in memory", path,
                           (unsigned long long)bytes);
    *y = mem_alloc_big((size_t)bytes);
    if (!*y)
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory allocating %llu bytes",
                           path, (unsigned long long)bytes);
    return COHORT_OK;
}

sample_shape data_shape_of(const uint64_t *dims, int ndims)
{
    uint64_t total = 1;
    for (int i = 0; i < ndims; i++)
        if (dims[i] > INT32_MAX || __builtin_mul_overflow(total, dims[i], &total) ||
            total > INT32_MAX)
            return (sample_shape){0, 0, 0, 0};
    if (ndims == 2)
        return shape_image((int)dims[0], (int)dims[1], 1);
    if (ndims == 3)
        return shape_image((int)dims[0], (int)dims[1], (int)dims[2]);
    return shape_flat((int)total);
}

cohort_status data_make(float *x, int32_t *y, int64_t n, int64_t dim, const sample_shape *shape,
                        const char *source, cohort_dataset **out, cohort_error *err)
{
    *out = NULL;
    if (dim > INT32_MAX) {
        free(x);
        free(y);
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: a sample holds %lld values, more than the %d a model input can "
                           "take",
                           source, (long long)dim, INT32_MAX);
    }
    sample_shape s = shape && shape->rank ? *shape : shape_flat((int)dim);
    if ((int64_t)shape_size(s) != dim) {
        free(x);
        free(y);
        return cohort_fail(err, COHORT_ERR_INTERNAL, "%s: sample shape of %zu values for %lld",
                           source, shape_size(s), (long long)dim);
    }
    int32_t max = -1;
    for (int64_t i = 0; i < n; i++) {
        if (y[i] < 0) {
            int label = (int)y[i];
            free(x);
            free(y);
            return cohort_fail(err, COHORT_ERR_INTERNAL, "%s: negative label %d at row %lld",
                               source, label, (long long)i);
        }
        if (y[i] > max)
            max = y[i];
    }
    cohort_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) {
        free(x);
        free(y);
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", source);
    }
    ds->n = n;
    ds->dim = dim;
    ds->shape = s;
    ds->x = x;
    ds->y = y;
    ds->n_classes = max + 1;
    ds->has_labels = 1;
    str_copy(ds->source, sizeof ds->source, source);
    *out = ds;
    return COHORT_OK;
}

cohort_status data_make_unlabeled(float *x, int64_t n, int64_t dim, const sample_shape *shape,
                                  const char *source, cohort_dataset **out, cohort_error *err)
{
    *out = NULL;
    int32_t *y;
    cohort_status st = data_alloc_y(n < 0 ? 0 : (uint64_t)n, source, &y, err);
    if (st) {
        free(x);
        return st;
    }
    memset(y, 0, (size_t)(n < 0 ? 0 : n) * sizeof *y);
    if ((st = data_make(x, y, n, dim, shape, source, out, err)))
        return st;
    (*out)->has_labels = 0;
    (*out)->n_classes = 0;
    return COHORT_OK;
}

static int cmp_int32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Count the classes [from, to) as empty, naming the first 8 in list. */
static void note_empty(int32_t from, int32_t to, int32_t *empty, char *list, size_t size)
{
    for (; from < to && *empty <= 8; from++, (*empty)++) {
        size_t len = strlen(list);
        if (*empty < 8)
            snprintf(list + len, size - len, "%s%d", *empty ? ", " : "", (int)from);
        else
            snprintf(list + len, size - len, ", ...");
    }
    if (from < to)
        *empty += to - from;
}

int32_t data_warn_empty_classes(const cohort_dataset *ds)
{
    if (!ds || !ds->has_labels || ds->n_classes <= 0)
        return 0;
    int32_t empty = 0, next = 0; /* next: the lowest class not yet seen nor counted */
    char list[160] = "";
    /* A byte per class while there are no more classes than samples; past
     * that, the labels sorted, so that memory and time follow the file: a
     * label of 2147483646 in a file of two rows made a 2 GiB table and a
     * loop of 2^31 steps. */
    if (ds->n_classes <= ds->n) {
        unsigned char *seen = calloc((size_t)ds->n_classes, 1);
        if (!seen)
            return 0;
        for (int64_t i = 0; i < ds->n; i++)
            seen[ds->y[i]] = 1;
        for (int32_t c = 0; c < ds->n_classes; c++)
            if (seen[c]) {
                note_empty(next, c, &empty, list, sizeof list);
                next = c + 1;
            }
        free(seen);
    } else {
        int32_t *y = malloc((size_t)ds->n * sizeof *y);
        if (!y)
            return 0;
        memcpy(y, ds->y, (size_t)ds->n * sizeof *y);
        qsort(y, (size_t)ds->n, sizeof *y, cmp_int32);
        for (int64_t i = 0; i < ds->n; i++)
            if (y[i] >= next) {
                note_empty(next, y[i], &empty, list, sizeof list);
                next = y[i] + 1;
            }
        free(y);
    }
    note_empty(next, ds->n_classes, &empty, list, sizeof list);
    if (empty)
        cohort_log(COHORT_LOG_WARN,
                   "%s: %d of its %d classes (labels 0 to %d) ha%s no samples: %s; the models "
                   "still get %d outputs. Number the labels from 0 without gaps if that is not "
                   "meant",
                   ds->source, (int)empty, (int)ds->n_classes, (int)ds->n_classes - 1,
                   empty == 1 ? "s" : "ve", list, (int)ds->n_classes);
    return empty;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

cohort_status data_align_classes(cohort_dataset *ds, char *const *names, int32_t n,
                                 const char *what, cohort_error *err)
{
    if (!ds || !ds->has_labels)
        return COHORT_OK;
    if (!names && !ds->class_names)
        return COHORT_OK;
    if (!names || !ds->class_names)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s has %s labels, but %s has %s labels; give both the same kind",
                           ds->source, ds->class_names ? "text" : "numeric", what,
                           names ? "text" : "numeric");
    int32_t *map = malloc((size_t)(ds->n_classes ? ds->n_classes : 1) * sizeof *map);
    if (!map)
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", ds->source);
    for (int32_t i = 0; i < ds->n_classes; i++) {
        char *const *at = bsearch(&ds->class_names[i], names, (size_t)n, sizeof *names, cmp_name);
        if (!at) {
            char list[256] = "";
            for (int32_t j = 0; j < n && strlen(list) < 200; j++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", j ? ", " : "",
                         names[j]);
            cohort_status st = cohort_fail(err, COHORT_ERR_INPUT,
                                           "%s has label '%.80s', which %s does not have (its "
                                           "labels: %s)",
                                           ds->source, ds->class_names[i], what, list);
            free(map);
            return st;
        }
        map[i] = (int32_t)(at - names);
    }
    for (int64_t i = 0; i < ds->n; i++)
        ds->y[i] = map[ds->y[i]];
    free(map);
    for (int32_t i = 0; i < ds->n_classes; i++)
        free(ds->class_names[i]);
    free(ds->class_names);
    ds->class_names = NULL;
    ds->n_classes = n;
    return COHORT_OK;
}

cohort_status data_not_finite(const char *name, const char *who, const uint64_t *shape, int ndim,
                              uint64_t at, double value, cohort_error *err)
{
    char where[256];
    size_t len = 0;
    for (int k = 0; k < ndim && len < sizeof where; k++) {
        uint64_t stride = 1; /* the elements one step of index k spans */
        for (int j = k + 1; j < ndim; j++)
            stride *= shape[j];
        len += (size_t)snprintf(where + len, sizeof where - len, "%s%llu", k ? ", " : "",
                                (unsigned long long)(at / stride % shape[k]));
    }
    return cohort_fail(err, COHORT_ERR_INPUT,
                       "%s: %s[%s] is %g%s; cohort trains on finite numbers only (drop or "
                       "replace them first: np.isfinite(%s) finds them)",
                       name, who, where, value,
                       isfinite(value) ? ", beyond float32's range" : "", who);
}

void data_block_free(void *block, size_t map_len)
{
    if (map_len)
        munmap(block, map_len);
    else
        free(block);
}

/* Frees the dataset and both arrays; NULL is a no-op. */
void data_free(cohort_dataset *ds)
{
    if (!ds)
        return;
    if (ds->class_names)
        for (int32_t i = 0; i < ds->n_classes; i++)
            free(ds->class_names[i]);
    free(ds->class_names);
    if (!(ds->borrowed & DATA_BORROW_X))
        free(ds->x);
    data_block_free(ds->x8_block, ds->x8_map_len);
    if (!(ds->borrowed & DATA_BORROW_Y))
        free(ds->y);
    if (!(ds->borrowed & DATA_BORROW_T))
        free(ds->t);
    free(ds);
}

/* A view of every row of ds (all zero for NULL), with ds's shape (flat dim
 * for a dataset made without one). The view borrows ds. */
data_view data_view_all(const cohort_dataset *ds)
{
    data_view v = {0};
    if (!ds)
        return v;
    v.x = ds->x;
    v.x8 = ds->x8;
    v.y = ds->y;
    v.t = ds->t;
    v.t_dim = ds->t ? ds->t_dim : 0;
    v.n = ds->n;
    v.dim = ds->dim;
    v.shape = ds->shape.rank || ds->dim > INT32_MAX ? ds->shape : shape_flat((int)ds->dim);
    return v;
}

/*
 * train = rows [0, split), val = rows [split, n) with split = int(n * (1 -
 * fraction)), the formula of Keras' validation_split. fraction is clamped to
 * [0, 1] (NaN counts as 0); fraction 0 gives an empty val. Views borrow ds.
 */
void data_split(const cohort_dataset *ds, double fraction, data_view *train, data_view *val)
{
    data_view all = data_view_all(ds);
    if (!(fraction > 0.0))
        fraction = 0.0;
    if (fraction > 1.0)
        fraction = 1.0;
    int64_t split = (int64_t)((double)all.n * (1.0 - fraction));
    if (split < 0)
        split = 0;
    if (split > all.n)
        split = all.n;
    if (train) {
        *train = all;
        train->n = split;
    }
    if (val) {
        *val = all;
        val->n = all.n - split;
        if (all.x || all.x8) {
            val->x = all.x ? all.x + split * all.dim : NULL;
            val->x8 = all.x8 ? all.x8 + split * all.dim : NULL;
            val->y = all.y + split;
            val->t = all.t ? all.t + split * all.t_dim : NULL;
        }
    }
}

/* ---- the spec dispatcher --------------------------------------------- */

static int file_exists(const char *path) { return access(path, F_OK) == 0; }

/* Try dir/name.gz, then dir/name; on success path holds the file. */
static int find_in_dir(const char *dir, const char *name, char *path, size_t n)
{
    snprintf(path, n, "%s/%s.gz", dir, name);
    if (file_exists(path))
        return 1;
    snprintf(path, n, "%s/%s", dir, name);
    return file_exists(path);
}

/*
 * The files of fashion-mnist:train and the like. Looks in $COHORT_DATA/NAME,
 * then $COHORT_DATA itself, then /usr/share/datasets/NAME.
 */
static cohort_status find_standard(const char *spec, const char *dataset, const char *part,
                                   char *images, char *labels, size_t n, cohort_error *err)
{
    const char *prefix = strcmp(part, "train") == 0 ? "train" : "t10k";
    char img_name[64], lbl_name[64];
    snprintf(img_name, sizeof img_name, "%s-images-idx3-ubyte", prefix);
    snprintf(lbl_name, sizeof lbl_name, "%s-labels-idx1-ubyte", prefix);

    char dirs[3][1100];
    int n_dirs = 0;
    const char *env = getenv("COHORT_DATA");
    if (env && *env) {
        snprintf(dirs[n_dirs++], sizeof dirs[0], "%s/%s", env, dataset);
        snprintf(dirs[n_dirs++], sizeof dirs[0], "%s", env);
    }
    snprintf(dirs[n_dirs++], sizeof dirs[0], "/usr/share/datasets/%s", dataset);

    for (int i = 0; i < n_dirs; i++) {
        if (find_in_dir(dirs[i], img_name, images, n)) {
            if (find_in_dir(dirs[i], lbl_name, labels, n))
                return COHORT_OK;
            snprintf(labels, n, "%s/%s.gz", dirs[i], lbl_name);
            return cohort_fail(err, COHORT_ERR_IO, "%s: %s: not found (the images are in %s)",
                               spec, labels, dirs[i]);
        }
    }
    char looked[3400] = "";
    for (int i = 0; i < n_dirs; i++) {
        size_t len = strlen(looked);
        snprintf(looked + len, sizeof looked - len, "%s%s", i ? ", " : "", dirs[i]);
    }
    snprintf(images, n, "%s/%s.gz", dirs[n_dirs - 1], img_name);
    if (strcmp(dataset, "fashion-mnist") == 0)
        return cohort_fail(err, COHORT_ERR_IO,
                           "%s: %s: not found (looked in %s); install it with "
                           "`apt-get install dataset-fashion-mnist` or set COHORT_DATA to a "
                           "directory holding %s.gz and %s.gz",
                           spec, images, looked, img_name, lbl_name);
    return cohort_fail(err, COHORT_ERR_IO,
                       "%s: %s: not found (looked in %s); set COHORT_DATA to a directory "
                       "holding %s.gz and %s.gz",
                       spec, images, looked, img_name, lbl_name);
}

/*
 * Split "A,B" into two paths (data_spec_check has seen a comma with text on
 * both sides). A path may hold a comma: the first split whose left part
 * names an existing file wins, else the first comma.
 */
static cohort_status split_pair(const char *spec, const char *rest, char *a, char *b, size_t n,
                                cohort_error *err)
{
    const char *first = strchr(rest, ','), *cut = first;
    for (const char *c = first; c; c = strchr(c + 1, ',')) {
        size_t len = (size_t)(c - rest);
        if (len < n) {
            memcpy(a, rest, len);
            a[len] = 0;
            if (file_exists(a)) {
                cut = c;
                break;
            }
        }
    }
    size_t len = (size_t)(cut - rest);
    if (len >= n || strlen(cut + 1) >= n)
        return cohort_fail(err, COHORT_ERR_INPUT, "dataset '%s': path too long", spec);
    memcpy(a, rest, len);
    a[len] = 0;
    memcpy(b, cut + 1, strlen(cut + 1) + 1);
    return COHORT_OK;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t ls = strlen(s), lx = strlen(suffix);
    return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

/* npz:FILE or npz:FILE:X,Y (FILE:X for inputs only). The names follow the
 * last colon, unless FILE itself (a path with a colon) exists. */
static cohort_status load_npz(const char *spec, const char *rest, const data_options *opt,
                              cohort_dataset **out, cohort_error *err)
{
    const char *colon = strrchr(rest, ':');
    int tokens = opt && opt->tokens;
    if (!colon || strchr(colon, '/') || file_exists(rest))
        return data_read_npz_as(rest, NULL, NULL, tokens, out, err);
    char path[4096], x[256], y[256];
    size_t plen = (size_t)(colon - rest);
    const char *names = colon + 1, *comma = strchr(names, ',');
    size_t xlen = comma ? (size_t)(comma - names) : strlen(names);
    if (plen == 0 || plen >= sizeof path || xlen == 0 || xlen >= sizeof x ||
        (comma && (!comma[1] || strchr(comma + 1, ',') || strlen(comma + 1) >= sizeof y)))
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "dataset '%s': expected npz:FILE or npz:FILE:X,Y (the names of two "
                           "arrays in FILE, like npz:mnist.npz:x_test,y_test)",
                           spec);
    if (!comma && !(opt && opt->unlabeled_dim != 0))
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "dataset '%s': name two arrays, inputs and labels, like "
                           "npz:FILE:x_test,y_test",
                           spec);
    memcpy(path, rest, plen);
    path[plen] = 0;
    memcpy(x, names, xlen);
    x[xlen] = 0;
    if (comma)
        memcpy(y, comma + 1, strlen(comma + 1) + 1);
    return data_read_npz_as(path, x, comma ? y : NULL, tokens, out, err);
}

/* The reader for spec; fills *out without touching its source. */
/* The class names of m (text labels), copied into ds, which then has as
 * many classes as names; checked as a CSV's text labels are. */
static cohort_status memory_class_names(const cohort_data *m, const char *label,
                                        cohort_dataset *ds, cohort_error *err)
{
    if (!m->class_names)
        return COHORT_OK;
    int64_t n = m->n_class_names;
    if (!m->labels || n < 1 || n > DATA_MAX_LABEL + 1 || n < ds->n_classes)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: %lld class names for labels of %d classes", label, (long long)n,
                           ds->n_classes);
    if (!(ds->class_names = calloc((size_t)n, sizeof *ds->class_names)))
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", label);
    ds->n_classes = (int32_t)n;
    for (int64_t i = 0; i < n; i++) {
        const char *c = m->class_names[i];
        size_t len = c ? strlen(c) : 0;
        if (len < 1 || len > 200 || !json_utf8_valid(c, len))
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s: class name %lld is not 1 to 200 bytes of UTF-8", label,
                               (long long)i);
        if (i && strcmp(m->class_names[i - 1], c) >= 0)
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s: class names must be sorted and distinct ('%s' before '%s')",
                               label, m->class_names[i - 1], c);
        if (!(ds->class_names[i] = strdup(c)))
            return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", label);
    }
    return COHORT_OK;
}

cohort_status data_from_memory(const cohort_data *m, cohort_dataset **out, cohort_error *err)
{
    *out = NULL;
    const char *name = m->name ? m->name : "?";
    int64_t dim = 1;
    int ok = m->x && m->n > 0 && m->sample_rank >= 1 && m->sample_rank <= 3;
    for (int i = 0; ok && i < m->sample_rank; i++) {
        ok = m->sample_shape[i] > 0 && m->sample_shape[i] <= INT32_MAX;
        dim = ok ? dim * m->sample_shape[i] : dim;
        ok = ok && dim <= INT32_MAX;
    }
    if (!ok)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "memory:%s: expected float32 inputs [n, d], [n, T, F] or [n, H, W, C] "
                           "with n > 0 "
                           "(got n %lld, a sample of rank %d)",
                           name, (long long)m->n, m->sample_rank);
    if (m->targets && m->target_dim <= 0)
        return cohort_fail(err, COHORT_ERR_INPUT, "memory:%s: targets need target_dim >= 1", name);
    /* As the NPY reader: NaN or inf would train into a NaN loss that blames
     * the learning rate, or predict a finite-looking answer. */
    char label[96];
    snprintf(label, sizeof label, "memory:%s", name);
    uint64_t xs[4] = {(uint64_t)m->n}, ts[2] = {(uint64_t)m->n, (uint64_t)m->target_dim};
    for (int i = 0; i < m->sample_rank; i++)
        xs[i + 1] = (uint64_t)m->sample_shape[i];
    for (int64_t i = 0; i < m->n * dim; i++)
        if (!isfinite(m->x[i]))
            return data_not_finite(label, "x", xs, 1 + m->sample_rank, (uint64_t)i, m->x[i], err);
    for (int64_t i = 0; m->targets && i < m->n * m->target_dim; i++)
        if (!isfinite(m->targets[i]))
            return data_not_finite(label, "targets", ts, 2, (uint64_t)i, m->targets[i], err);
    cohort_dataset *ds = calloc(1, sizeof *ds);
    if (!ds)
        return cohort_fail(err, COHORT_ERR_NOMEM, "memory:%s: out of memory", name);
    ds->n = m->n;
    ds->dim = dim;
    ds->shape = m->sample_rank == 3   ? shape_image((int)m->sample_shape[0],
                                                    (int)m->sample_shape[1],
                                                    (int)m->sample_shape[2])
                : m->sample_rank == 2 ? shape_seq((int)m->sample_shape[0], (int)m->sample_shape[1])
                                      : shape_flat((int)dim);
    ds->x = (float *)m->x;
    ds->borrowed = DATA_BORROW_X;
    ds->has_labels = m->labels || m->targets;
    if (m->labels) {
        /* A copy, checked: labels index memory (the loss's class, the
         * confusion matrix), and the caller's array may change while the run
         * reads it (Python's on_epoch writing yt[:] = 5 made the test's
         * confusion matrix write out of bounds). x and the targets are read
         * in place: a change to them changes numbers, never an index. */
        if (!(ds->y = malloc((size_t)m->n * sizeof *ds->y))) {
            data_free(ds);
            return cohort_fail(err, COHORT_ERR_NOMEM, "memory:%s: out of memory", name);
        }
        memcpy(ds->y, m->labels, (size_t)m->n * sizeof *ds->y);
        for (int64_t i = 0; i < m->n; i++) {
            if (ds->y[i] < 0 || ds->y[i] > DATA_MAX_LABEL) {
                int bad = ds->y[i];
                data_free(ds);
                return cohort_fail(err, COHORT_ERR_INPUT,
                                   "memory:%s: label %lld is %d; labels must be integers in [0, "
                                   "%d]",
                                   name, (long long)i, bad, DATA_MAX_LABEL);
            }
            if (ds->y[i] + 1 > ds->n_classes)
                ds->n_classes = ds->y[i] + 1;
        }
    } else if (!(ds->y = calloc((size_t)m->n, sizeof *ds->y))) {
        data_free(ds);
        return cohort_fail(err, COHORT_ERR_NOMEM, "memory:%s: out of memory", name);
    }
    if (m->targets) {
        ds->t = (float *)m->targets;
        ds->t_dim = m->target_dim;
        ds->borrowed |= DATA_BORROW_T;
    }
    cohort_status st = memory_class_names(m, label, ds, err);
    if (st) {
        data_free(ds);
        return st;
    }
    *out = ds;
    return COHORT_OK;
}

cohort_status data_spec_check(const char *spec, int labeled, cohort_error *err)
{
    const char *colon = strchr(spec, ':');
    size_t plen = colon ? (size_t)(colon - spec) : 0;
    const char *rest = colon ? colon + 1 : "";
#define PREFIX_IS(s) (colon && plen == strlen(s) && memcmp(spec, s, plen) == 0)
    if (PREFIX_IS("memory"))
        return *rest ? COHORT_OK
                     : cohort_fail(err, COHORT_ERR_INPUT, "dataset '%s': expected memory:NAME",
                                   spec);
    if (PREFIX_IS("fashion-mnist") || PREFIX_IS("mnist")) {
        const char *dataset = PREFIX_IS("mnist") ? "mnist" : "fashion-mnist";
        if (strcmp(rest, "train") != 0 && strcmp(rest, "test") != 0)
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "unknown dataset '%s': expected %s:train or %s:test", spec,
                               dataset, dataset);
        return COHORT_OK;
    }
    if (PREFIX_IS("idx") || (PREFIX_IS("npy") && (labeled || strchr(rest, ',')))) {
        const char *first = strchr(rest, ',');
        if (!first || first == rest || first[1] == 0)
            return cohort_fail(err, COHORT_ERR_INPUT, "dataset '%s': expected %s", spec,
                               PREFIX_IS("idx") ? "idx:IMAGES,LABELS" : "npy:X,Y");
        return COHORT_OK;
    }
    if (PREFIX_IS("npy") || PREFIX_IS("csv") || PREFIX_IS("npz"))
        return *rest ? COHORT_OK
                     : cohort_fail(err, COHORT_ERR_INPUT, "dataset '%s': expected %.3s:FILE",
                                   spec, spec);
#undef PREFIX_IS
    const char *hint = "";
    if (ends_with(spec, ".csv"))
        hint = " (did you mean csv:";
    else if (ends_with(spec, ".npz"))
        hint = " (did you mean npz:";
    if (*hint)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "unknown dataset '%s': expected fashion-mnist:, mnist:, idx:, csv:, "
                           "npy: or npz:%s%s?)",
                           spec, hint, spec);
    return cohort_fail(err, COHORT_ERR_INPUT,
                       "unknown dataset '%s': expected fashion-mnist:, mnist:, idx:, csv:, npy: "
                       "or npz:",
                       spec);
}

static cohort_status load_spec(const char *spec, const data_options *opt, cohort_dataset **out,
                               cohort_error *err)
{
    int labeled = !(opt && opt->unlabeled_dim != 0);
    cohort_status st = data_spec_check(spec, labeled, err);
    if (st)
        return st;
    char a[4096], b[4096];
    const char *colon = strchr(spec, ':');
    size_t plen = (size_t)(colon - spec);
    const char *rest = colon + 1;

#define PREFIX_IS(s) (plen == strlen(s) && memcmp(spec, s, plen) == 0)
    if (PREFIX_IS("memory")) {
        for (int i = 0; opt && i < opt->n_memory; i++)
            if (opt->memory[i].name && strcmp(opt->memory[i].name, rest) == 0)
                return data_from_memory(&opt->memory[i], out, err);
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "dataset '%s': no in-memory dataset named '%s' was given", spec, rest);
    }
    if (PREFIX_IS("fashion-mnist") || PREFIX_IS("mnist")) {
        const char *dataset = PREFIX_IS("mnist") ? "mnist" : "fashion-mnist";
        if ((st = find_standard(spec, dataset, rest, a, b, sizeof a, err)))
            return st;
        return data_read_idx(a, b, out, err);
    }
    int tokens = opt && opt->tokens;
    if (PREFIX_IS("npy") && !strchr(rest, ','))
        return data_read_npy_as(rest, NULL, tokens, out, err); /* inputs only (data_spec_check) */
    if (PREFIX_IS("idx") || PREFIX_IS("npy")) {
        if ((st = split_pair(spec, rest, a, b, sizeof a, err)))
            return st;
        return PREFIX_IS("idx") ? data_read_idx(a, b, out, err)
                                : data_read_npy_as(a, b, tokens, out, err);
    }
    if (PREFIX_IS("csv"))
        return data_read_csv_cols(rest, opt ? opt->label_column : NULL,
                                  opt ? opt->label_columns : NULL, opt ? opt->unlabeled_dim : 0,
                                  out, err);
    return load_npz(spec, rest, opt, out, err); /* npz: the last kind data_spec_check passes */
#undef PREFIX_IS
}

cohort_status data_load(const char *spec, const data_options *opt, cohort_dataset **out,
                        cohort_error *err)
{
    if (!out)
        return cohort_fail(err, COHORT_ERR_USAGE, "data_load: out is NULL");
    *out = NULL;
    if (!spec || !*spec)
        return cohort_fail(err, COHORT_ERR_USAGE, "data_load: empty dataset spec");
    cohort_status st = load_spec(spec, opt, out, err);
    if (st) {
        data_free(*out);
        *out = NULL;
        return st;
    }
    str_copy((*out)->source, sizeof (*out)->source, spec);
    return COHORT_OK;
}
