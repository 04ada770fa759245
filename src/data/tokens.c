/*
 * tokens: a dataset's x as token ids, an embedding's input. The readers give
 * integer NPY/NPZ arrays as they are when asked (data_options.tokens); this
 * file checks, for a layer that takes ids in [0, limit), that every value is
 * one, and names the first that is not: its element, its value, the data.
 */
#include "data/data_impl.h"
#include "util/util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void data_tokens_scan(const cohort_dataset *ds, data_tokens *t)
{
    t->bad = -1;
    t->max = 0.0f;
    if (!ds->x)
        return; /* IDX bytes: data_check_tokens refuses them whole */
    size_t count = (size_t)ds->n * (size_t)ds->dim;
    float max = count ? ds->x[0] : 0.0f;
    for (size_t i = 0; i < count; i++) {
        float v = ds->x[i];
        if (v > max)
            max = v;
        if (t->bad < 0 && !(v >= 0.0f && v == floorf(v)))
            t->bad = (int64_t)i;
    }
    t->max = max;
}

/* "x[3, 7]": element `at` of ds's x, indexed as the file's array [n, ...]. */
static void element(const cohort_dataset *ds, int64_t at, char *buf, size_t n)
{
    int64_t row = at / ds->dim, in = at % ds->dim;
    sample_shape s = ds->shape;
    if (s.rank == 3)
        snprintf(buf, n, "x[%lld, %d, %d, %d]", (long long)row, (int)(in / s.c / s.w),
                 (int)(in / s.c % s.w), (int)(in % s.c));
    else if (s.rank == 2)
        snprintf(buf, n, "x[%lld, %d, %d]", (long long)row, (int)(in / s.c), (int)(in % s.c));
    else
        snprintf(buf, n, "x[%lld, %lld]", (long long)row, (long long)in);
}

cohort_status data_check_tokens(const cohort_dataset *ds, const data_tokens *scan, int64_t limit,
                                const char *who, cohort_error *err)
{
    char at[96];
    if (!ds->x)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s takes integer token ids, but %s holds IDX images (pixels, read "
                           "as byte / 255); give the ids as an integer NPY or NPZ array, or CSV",
                           who, ds->source);
    if (ds->x_dtype[0] && !ds->x_ints) {
        /* float or bool: refused whole, even where every value is an integer
         * (np.save of float tokens is a mistake upstream more often than not) */
        int64_t first = scan->bad >= 0 ? scan->bad : 0;
        element(ds, first, at, sizeof at);
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s takes integer token ids, but %s holds %s values (%s is %.9g); "
                           "save the ids as an integer array (x.astype(np.int32))",
                           who, ds->source, ds->x_dtype, at, (double)ds->x[first]);
    }
    if (scan->bad >= 0) {
        float v = ds->x[scan->bad];
        element(ds, scan->bad, at, sizeof at);
        return cohort_fail(err, COHORT_ERR_INPUT, "%s takes token ids in [0, %lld), but %s has "
                                                  "%s = %.9g, %s",
                           who, (long long)limit, ds->source, at, (double)v,
                           v < 0.0f ? "a negative id" : "not an integer");
    }
    if ((double)scan->max >= (double)limit) {
        size_t count = (size_t)ds->n * (size_t)ds->dim, i = 0;
        while (i < count && (double)ds->x[i] < (double)limit)
            i++;
        element(ds, (int64_t)i, at, sizeof at);
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s takes token ids in [0, %lld), but %s has %s = %.9g (its largest "
                           "id is %.9g: input_dim must be at least %.9g)",
                           who, (long long)limit, ds->source, at, (double)ds->x[i],
                           (double)scan->max, (double)scan->max + 1.0);
    }
    return COHORT_OK;
}
