/*
 * test_data_numpy: the readers against numpy on the variants people save.
 * tests/data_numpy.py writes NPY, NPZ, CSV and IDX files the way numpy (and
 * zipfile, gzip, pandas-style writers) produce them, with what numpy reads
 * from each (np.load, np.loadtxt) as raw float32/int32 files, and a
 * manifest: "ok" cases must load with exactly numpy's values, labels and
 * sample shape; "err" cases must fail with COHORT_ERR_INPUT and a message
 * holding the manifest's fragment (which names the file and where).
 * Skipped (77) without /usr/bin/python3 and numpy.
 */
#include "check.h"
#include "backend/backend_impl.h"
#include "data/data.h"
#include "util/util.h"

#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

static char dir[64];

/* The whole of DIR/NAME.SUFFIX into *buf (malloc'd); its length, or -1. */
static long read_ref(const char *name, const char *suffix, void **buf)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.%s", dir, name, suffix);
    *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!*buf || fread(*buf, 1, (size_t)n, f) != (size_t)n)
        n = -1;
    fclose(f);
    return n;
}

/* The spec with DIR replaced by the case directory. */
static void expand(const char *spec, char *out, size_t n)
{
    size_t at = 0;
    for (const char *p = spec; *p && at + 1 < n;) {
        if (strncmp(p, "DIR", 3) == 0) {
            at += (size_t)snprintf(out + at, n - at, "%s", dir);
            p += 3;
        } else {
            out[at++] = *p++;
        }
    }
    out[at < n ? at : n - 1] = 0;
}

/* Bitwise equality, so that -0.0 and 0.0 differ and NaN equals NaN. */
static int64_t first_float_diff(const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof a[i]) != 0)
            return i;
    return -1;
}

/* ok NAME SPEC N DIM N_CLASSES T_DIM SHAPE: NAME.x (float32) [N, DIM],
 * NAME.y (int32) [N] where N_CLASSES > 0, NAME.t (float32) [N, T_DIM] where
 * T_DIM > 0; SHAPE "HxWxC" or "flat". */
static void check_ok(const char *name, const char *spec, int64_t n, int64_t dim,
                     int32_t n_classes, int64_t t_dim, const char *shape)
{
    cohort_error err;
    cohort_dataset *ds = NULL;
    cohort_status st = data_load(spec, NULL, &ds, &err);
    CHECK_MSG(st == COHORT_OK, "%s: %s", name, err.message);
    if (st)
        return;
    CHECK_MSG(ds->n == n && ds->dim == dim, "%s: read [%lld, %lld], numpy has [%lld, %lld]", name,
              (long long)ds->n, (long long)ds->dim, (long long)n, (long long)dim);
    CHECK_MSG(ds->n_classes == n_classes, "%s: %d classes, expected %d", name, ds->n_classes,
              n_classes);
    CHECK_MSG(ds->t_dim == t_dim && (t_dim == 0) == (ds->t == NULL), "%s: targets of %lld, expected %lld",
              name, (long long)ds->t_dim, (long long)t_dim);
    char got_shape[64];
    if (ds->shape.rank == 3)
        snprintf(got_shape, sizeof got_shape, "%dx%dx%d", ds->shape.h, ds->shape.w, ds->shape.c);
    else
        snprintf(got_shape, sizeof got_shape, "flat");
    CHECK_MSG(strcmp(got_shape, shape) == 0, "%s: sample shape %s, expected %s", name, got_shape,
              shape);
    if (ds->n != n || ds->dim != dim) {
        data_free(ds);
        return;
    }
    void *ref;
    long len = read_ref(name, "x", &ref);
    CHECK_MSG(len == (long)(n * dim * 4), "%s: reference x has %ld bytes", name, len);
    if (len == (long)(n * dim * 4)) {
        float *x = ds->x;
        if (!x && ds->x8 && (x = malloc((size_t)(n * dim) * sizeof *x)))
            host_row_of_bytes(x, ds->x8, (size_t)(n * dim));
        int64_t at = x ? first_float_diff(x, ref, n * dim) : 0;
        CHECK_MSG(at < 0, "%s: x[%lld] is %.9g, numpy reads %.9g", name, (long long)at,
                  x ? (double)x[at] : 0.0, (double)((float *)ref)[at]);
        if (x != ds->x)
            free(x);
    }
    free(ref);
    if (n_classes > 0) {
        len = read_ref(name, "y", &ref);
        CHECK_MSG(len == (long)(n * 4), "%s: reference y has %ld bytes", name, len);
        if (len == (long)(n * 4)) {
            int64_t at = -1;
            for (int64_t i = 0; i < n && at < 0; i++)
                if (ds->y[i] != ((int32_t *)ref)[i])
                    at = i;
            CHECK_MSG(at < 0, "%s: y[%lld] is %d, numpy reads %d", name, (long long)at,
                      at < 0 ? 0 : ds->y[at], at < 0 ? 0 : ((int32_t *)ref)[at]);
        }
        free(ref);
    }
    if (t_dim > 0 && ds->t) {
        len = read_ref(name, "t", &ref);
        CHECK_MSG(len == (long)(n * t_dim * 4), "%s: reference t has %ld bytes", name, len);
        if (len == (long)(n * t_dim * 4)) {
            int64_t at = first_float_diff(ds->t, ref, n * t_dim);
            CHECK_MSG(at < 0, "%s: t[%lld] is %.9g, numpy reads %.9g", name, (long long)at,
                      at < 0 ? 0.0 : (double)ds->t[at], at < 0 ? 0.0 : (double)((float *)ref)[at]);
        }
        free(ref);
    }
    data_free(ds);
}

static void check_err(const char *name, const char *spec, const char *fragment)
{
    cohort_error err;
    cohort_dataset *ds = (cohort_dataset *)1;
    cohort_status st = data_load(spec, NULL, &ds, &err);
    CHECK_MSG(st == COHORT_ERR_INPUT && ds == NULL, "%s: status %d, wanted an input error", name,
              (int)st);
    if (st == COHORT_OK)
        data_free(ds);
    else
        CHECK_MSG(strstr(err.message, fragment) != NULL, "%s: \"%s\" lacks \"%s\"", name,
                  err.message, fragment);
}

/* Split a tab-separated line in place into at most n fields; their count. */
static int split_tabs(char *line, char **f, int n)
{
    int k = 0;
    for (char *p = line; k < n;) {
        f[k++] = p;
        char *t = strchr(p, '\t');
        if (!t)
            break;
        *t = 0;
        p = t + 1;
    }
    return k;
}

int main(void)
{
    if (access("/usr/bin/python3", X_OK) != 0)
        check_skip("test_data_numpy", "no /usr/bin/python3");
    snprintf(dir, sizeof dir, "/tmp/test_data_numpy.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char cmd[1024]; /* ctest runs it in the source tree */
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/data_numpy.py %s", dir);
    int rc = system(cmd);
    if (rc != 0) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "test_data_numpy: could not remove %s\n", dir);
        if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77)
            check_skip("test_data_numpy", "numpy is not installed");
        fprintf(stderr, "test_data_numpy: data_numpy.py failed (%d)\n", rc);
        return 1;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/manifest.tsv", dir);
    FILE *m = fopen(path, "r");
    CHECK(m != NULL);
    char line[4096];
    int cases = 0;
    while (m && fgets(line, sizeof line, m)) {
        line[strcspn(line, "\n")] = 0;
        char *f[8] = {0}, spec[2048];
        int k = split_tabs(line, f, 8);
        if (k < 4)
            continue;
        expand(f[2], spec, sizeof spec);
        if (strcmp(f[0], "ok") == 0 && k == 8)
            check_ok(f[1], spec, atoll(f[3]), atoll(f[4]), atoi(f[5]), atoll(f[6]), f[7]);
        else if (strcmp(f[0], "err") == 0)
            check_err(f[1], spec, f[3]);
        else
            CHECK_MSG(0, "manifest line '%s' is malformed", line);
        cases++;
    }
    if (m)
        fclose(m);
    CHECK_MSG(cases >= 60, "only %d cases in the manifest", cases);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "test_data_numpy: could not remove %s\n", dir);
    return check_done("test_data_numpy");
}
