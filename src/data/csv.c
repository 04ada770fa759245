/*
 * csv: comma-separated numbers, one sample per line, an optional header row
 * (detected by a field that is not a number) and one integer label column.
 * Two passes over the file in memory: count and check the shape, then parse.
 */
#include "data/data_impl.h"
#include "util/util.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CSV_MAX_FILE ((size_t)64 << 30)

typedef struct csv_line {
    const char *s, *e; /* the line without its \r\n */
    uint64_t number;   /* 1-based */
} csv_line;

typedef struct csv_reader {
    const char *p, *end;
    uint64_t number;
} csv_reader;

/* The next line that is not blank; 0 at the end of the buffer. */
static int next_line(csv_reader *r, csv_line *line)
{
    while (r->p < r->end) {
        const char *s = r->p;
        const char *nl = memchr(s, '\n', (size_t)(r->end - s));
        const char *e = nl ? nl : r->end;
        r->p = nl ? nl + 1 : r->end;
        r->number++;
        if (e > s && e[-1] == '\r')
            e--;
        const char *q = s;
        while (q < e && (*q == ' ' || *q == '\t'))
            q++;
        if (q == e)
            continue;
        line->s = s;
        line->e = e;
        line->number = r->number;
        return 1;
    }
    return 0;
}

static uint64_t count_fields(const csv_line *line)
{
    uint64_t n = 1;
    for (const char *q = line->s; q < line->e; q++) {
        q = memchr(q, ',', (size_t)(line->e - q));
        if (!q)
            break;
        n++;
    }
    return n;
}

/* The field starting at *p (trimmed, one level of quotes removed); moves *p
 * past the comma. */
static void next_field(const char **p, const char *e, const char **fs, const char **fe)
{
    const char *s = *p;
    const char *c = memchr(s, ',', (size_t)(e - s));
    const char *end = c ? c : e;
    *p = c ? c + 1 : e;
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (end - s >= 2 && *s == '"' && end[-1] == '"') {
        s++;
        end--;
    }
    *fs = s;
    *fe = end;
}

/* Parse [s, e) as a number; 1 when the whole field is one. */
static int parse_number(const char *s, const char *e, double *v)
{
    if (s == e || isspace((unsigned char)*s))
        return 0;
    /* Fast path: short integers, the common case of pixel data. */
    const char *q = s;
    int neg = 0;
    if (*q == '-' || *q == '+')
        neg = *q++ == '-';
    if (q < e && e - q <= 15) {
        const char *d = q;
        int64_t acc = 0;
        while (d < e && *d >= '0' && *d <= '9')
            acc = acc * 10 + (*d++ - '0');
        if (d == e) {
            *v = neg ? -(double)acc : (double)acc;
            return 1;
        }
    }
    char *end;
    *v = strtod(s, &end);
    return end == e;
}

/* Resolve the label column; header may be NULL. */
static cohort_status find_label(const char *path, const csv_line *header, uint64_t nf,
                                const char *want, uint64_t *col, cohort_error *err)
{
    if (want && *want) {
        int digits = 1;
        for (const char *c = want; *c; c++)
            digits &= isdigit((unsigned char)*c) != 0;
        if (digits) {
            char *end;
            unsigned long long v = strtoull(want, &end, 10);
            if (v >= nf)
                return cohort_fail(err, COHORT_ERR_INPUT,
                                   "%s: label column %s is out of range: the file has %llu "
                                   "columns (0 to %llu)",
                                   path, want, (unsigned long long)nf,
                                   (unsigned long long)nf - 1);
            *col = v;
            return COHORT_OK;
        }
        if (!header)
            return cohort_fail(err, COHORT_ERR_INPUT,
                               "%s: label column '%s' is given by name, but the file has no "
                               "header row",
                               path, want);
    }
    const char *name = want && *want ? want : "label";
    size_t nl = strlen(name);
    if (header) {
        const char *p = header->s;
        for (uint64_t i = 0; i < nf; i++) {
            const char *fs, *fe;
            next_field(&p, header->e, &fs, &fe);
            if ((size_t)(fe - fs) == nl && memcmp(fs, name, nl) == 0) {
                *col = i;
                return COHORT_OK;
            }
        }
    }
    if (want && *want)
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: no column named '%s' in the header", path,
                           want);
    *col = nf - 1;
    if (header) {
        const char *p = header->s, *fs = p, *fe = p;
        for (uint64_t i = 0; i < nf; i++)
            next_field(&p, header->e, &fs, &fe);
        cohort_log(COHORT_LOG_WARN,
                   "%s: the header names no column 'label', so the last, column %llu ('%.*s'), "
                   "is taken as the label; set data.label_column to say which",
                   path, (unsigned long long)(nf - 1), fe - fs > 60 ? 60 : (int)(fe - fs), fs);
    }
    return COHORT_OK;
}

/* 1 when the header row has a field that is exactly `name`. */
static int header_has(const csv_line *header, uint64_t nf, const char *name)
{
    if (!header)
        return 0;
    size_t nl = strlen(name);
    const char *p = header->s;
    for (uint64_t i = 0; i < nf; i++) {
        const char *fs, *fe;
        next_field(&p, header->e, &fs, &fe);
        if ((size_t)(fe - fs) == nl && memcmp(fs, name, nl) == 0)
            return 1;
    }
    return 0;
}

/* Columns are counted from 0 in messages, as data.label_column counts them. */
static cohort_status bad_value(const char *path, uint64_t line, uint64_t col, int is_label,
                               const char *fs, const char *fe, const char *why, cohort_error *err)
{
    int len = fe - fs > 60 ? 60 : (int)(fe - fs);
    return cohort_fail(err, COHORT_ERR_INPUT, "%s:%llu: column %llu (counted from 0, as "
                                              "label_column is)%s: '%.*s'%s %s%s",
                       path, (unsigned long long)line, (unsigned long long)col,
                       is_label ? ", the label" : "", len, fs, fe - fs > 60 ? "..." : "", why,
                       is_label ? "; labels must be integers from 0, or text (classes in sorted "
                                  "order)"
                                : "");
}

/* The longest text label kept, in bytes. */
#define CSV_MAX_NAME 200

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * Text labels: when a field of the label column is not a number, the
 * distinct fields of that column (numbers too) are the classes, sorted by
 * strcmp; *names receives them (NULL and *n 0 when every label is a
 * number). r is left where it was.
 */
static cohort_status text_labels(const char *path, csv_reader r, uint64_t nf, uint64_t label,
                                 uint64_t rows, char ***names, int32_t *n, cohort_error *err)
{
    *names = NULL;
    *n = 0;
    csv_reader scan = r;
    csv_line line;
    int text = 0;
    for (uint64_t row = 0; row < rows && !text && next_line(&scan, &line); row++) {
        const char *p = line.s, *fs = p, *fe = p;
        double v;
        for (uint64_t c = 0; c <= label && c < nf; c++)
            next_field(&p, line.e, &fs, &fe);
        text = !parse_number(fs, fe, &v);
    }
    if (!text)
        return COHORT_OK;
    char **all = calloc((size_t)rows ? (size_t)rows : 1, sizeof *all);
    if (!all)
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", path);
    cohort_status st = COHORT_OK;
    uint64_t got = 0;
    scan = r;
    for (uint64_t row = 0; row < rows && next_line(&scan, &line); row++) {
        const char *p = line.s, *fs = p, *fe = p;
        for (uint64_t c = 0; c <= label && c < nf; c++)
            next_field(&p, line.e, &fs, &fe);
        size_t len = (size_t)(fe - fs);
        if (len == 0 || len > CSV_MAX_NAME || memchr(fs, 0, len)) {
            st = cohort_fail(err, COHORT_ERR_INPUT,
                             "%s:%llu: the label is %s; a text label has 1 to %d characters",
                             path, (unsigned long long)line.number, len ? "too long" : "empty",
                             CSV_MAX_NAME);
            break;
        }
        if (!(all[got] = malloc(len + 1))) {
            st = cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        memcpy(all[got], fs, len);
        all[got++][len] = 0;
    }
    if (!st) {
        qsort(all, (size_t)got, sizeof *all, cmp_str);
        uint64_t u = 0;
        for (uint64_t i = 0; i < got; i++) {
            if (u && strcmp(all[u - 1], all[i]) == 0) {
                free(all[i]);
                continue;
            }
            all[u++] = all[i];
        }
        *names = all;
        *n = (int32_t)u;
        return COHORT_OK;
    }
    for (uint64_t i = 0; i < got; i++)
        free(all[i]);
    free(all);
    return st;
}

/* label: the label's column, or nf for none (then dim is nf and y unused).
 * names: text labels (text_labels), or NULL for integer labels. */
static cohort_status parse_rows(const char *path, csv_reader *r, uint64_t nf, uint64_t label,
                                uint64_t rows, char *const *names, int32_t n_names, float *x,
                                int32_t *y, cohort_error *err)
{
    uint64_t dim = label < nf ? nf - 1 : nf;
    csv_line line;
    for (uint64_t row = 0; row < rows && next_line(r, &line); row++) {
        const char *p = line.s;
        float *xr = x + row * dim;
        for (uint64_t c = 0; c < nf; c++) {
            const char *fs, *fe;
            double v;
            next_field(&p, line.e, &fs, &fe);
            if (c == label && names) {
                char key[CSV_MAX_NAME + 1];
                const char *kp = key;
                size_t len = (size_t)(fe - fs) <= CSV_MAX_NAME ? (size_t)(fe - fs) : CSV_MAX_NAME;
                memcpy(key, fs, len);
                key[len] = 0;
                char *const *at = bsearch(&kp, names, (size_t)n_names, sizeof *names, cmp_str);
                y[row] = at ? (int32_t)(at - names) : 0;
                continue;
            }
            if (!parse_number(fs, fe, &v))
                return bad_value(path, line.number, c, c == label, fs, fe, "is not a number", err);
            if (!isfinite(v))
                return bad_value(path, line.number, c, c == label, fs, fe,
                                 "is not a finite number", err);
            if (c == label) {
                if (v < 0 || v > DATA_MAX_LABEL || v != floor(v))
                    return cohort_fail(err, COHORT_ERR_INPUT,
                                       "%s:%llu: label '%.*s' is not an integer in [0, %d]", path,
                                       (unsigned long long)line.number,
                                       fe - fs > 60 ? 60 : (int)(fe - fs), fs, DATA_MAX_LABEL);
                y[row] = (int32_t)v;
            } else {
                *xr++ = (float)v;
            }
        }
    }
    return COHORT_OK;
}

/*
 * Read a CSV file: comma-separated numbers, an optional header (the first
 * row, when one of its fields is not a number), blank lines skipped, \n or
 * \r\n line ends. The label column is label_column (a header name, or a
 * 0-based index as digits), else the column named "label", else the last;
 * labels must be integers in [0, 2^31 - 2]. Messages give "path:LINE" and
 * column numbers from 0, as label_column counts. On error *out is NULL; COHORT_ERR_IO when the file
 * cannot be read, COHORT_ERR_INPUT when its content is wrong.
 */
cohort_status data_read_csv(const char *path, const char *label_column, cohort_dataset **out,
                            cohort_error *err)
{
    return data_read_csv_opt(path, label_column, 0, out, err);
}

/* data_read_csv, and when unlabeled_dim > 0 a file of exactly that many
 * columns, no label_column and no column named "label" holds features only. */
cohort_status data_read_csv_opt(const char *path, const char *label_column, int64_t unlabeled_dim,
                                cohort_dataset **out, cohort_error *err)
{
    if (!out)
        return cohort_fail(err, COHORT_ERR_USAGE, "data_read_csv: out is NULL");
    *out = NULL;
    if (!path)
        return cohort_fail(err, COHORT_ERR_USAGE, "data_read_csv: missing path");
    char *text;
    size_t len;
    cohort_status st = file_read_all(path, CSV_MAX_FILE, &text, &len, err);
    if (st)
        return st;
    const char *start = text;
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
        start += 3;

    csv_reader r = {start, text + len, 0};
    csv_line first, line, header_line;
    const csv_line *header = NULL;
    float *x = NULL;
    int32_t *y = NULL;
    char **names = NULL;
    int32_t n_names = 0;
    if (!next_line(&r, &first)) {
        st = cohort_fail(err, COHORT_ERR_INPUT, "%s: empty file", path);
        goto done;
    }
    uint64_t nf = count_fields(&first);
    const char *p = first.s;
    for (uint64_t i = 0; i < nf && !header; i++) {
        const char *fs, *fe;
        double v;
        next_field(&p, first.e, &fs, &fe);
        if (!parse_number(fs, fe, &v)) {
            header_line = first;
            header = &header_line;
        }
    }
    uint64_t rows = header ? 0 : 1;
    while (next_line(&r, &line)) {
        uint64_t m = count_fields(&line);
        if (m != nf) {
            st = cohort_fail(err, COHORT_ERR_INPUT, "%s:%llu: expected %llu fields, found %llu",
                             path, (unsigned long long)line.number, (unsigned long long)nf,
                             (unsigned long long)m);
            goto done;
        }
        rows++;
    }
    if (rows == 0) {
        st = cohort_fail(err, COHORT_ERR_INPUT, "%s: no data rows (only a header)", path);
        goto done;
    }
    int unlabeled = unlabeled_dim > 0 && nf == (uint64_t)unlabeled_dim &&
                    !(label_column && *label_column) && !header_has(header, nf, "label");
    if (nf < 2 && !unlabeled) {
        st = cohort_fail(err, COHORT_ERR_INPUT,
                         "%s: only one column; expected features and a label", path);
        goto done;
    }
    uint64_t label = nf, dim = nf;
    if (!unlabeled) {
        if ((st = find_label(path, header, nf, label_column, &label, err)))
            goto done;
        dim = nf - 1;
        if ((st = data_alloc_y(rows, path, &y, err)))
            goto done;
    }
    if ((st = data_alloc_x(rows, dim, path, &x, err)))
        goto done;
    r.p = start;
    r.number = 0;
    if (header)
        next_line(&r, &line);
    if (!unlabeled && (st = text_labels(path, r, nf, label, rows, &names, &n_names, err)))
        goto done;
    if ((st = parse_rows(path, &r, nf, label, rows, names, n_names, x, y, err)))
        goto done;
    char source[1100];
    snprintf(source, sizeof source, "csv:%s", path);
    st = unlabeled ? data_make_unlabeled(x, (int64_t)rows, (int64_t)dim, NULL, source, out, err)
                   : data_make(x, y, (int64_t)rows, (int64_t)dim, NULL, source, out, err);
    x = NULL;
    y = NULL;
    if (!st && names) {
        (*out)->class_names = names;
        names = NULL;
    }
done:
    if (names)
        for (int32_t i = 0; i < n_names; i++)
            free(names[i]);
    free(names);
    free(text);
    free(x);
    free(y);
    return st;
}
