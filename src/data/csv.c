/*
 * csv: comma-separated numbers, one sample per line, an optional header row
 * (detected by a field that is not a number) and one integer label column.
 * The file is mapped into memory and cut at line ends into chunks that every
 * core parses in two passes: count each chunk's rows and check their fields,
 * then parse each chunk straight into its rows of x and y. A chunk keeps its
 * first error; the first chunk's with one is reported, so the result and the
 * message are the same for any number of threads.
 */
#include "data/csv_float.h"
#include "data/data_impl.h"
#include "util/json.h"
#include "util/util.h"

#include <ctype.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define CSV_MAX_FILE ((size_t)64 << 30)
#define CSV_MAX_THREADS 16
/* Chunks per thread: a thread slowed by other work on the machine leaves
 * its last chunks to the others. */
#define CSV_CHUNKS_PER_THREAD 4
/* The least a chunk holds: a smaller file is parsed by the calling thread
 * alone, without starting any. */
#define CSV_MIN_CHUNK ((size_t)1 << 20)

static size_t split_min_chunk; /* 0: CSV_MIN_CHUNK */
static int split_threads;      /* 0: the cores */

void data_csv_set_split(size_t min_chunk, int threads)
{
    split_min_chunk = min_chunk;
    split_threads = threads;
}

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
    for (const char *q = line->s; q < line->e; q++)
        n += *q == ','; /* a loop the compiler vectorizes */
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
    if (data_float_hex(s, e))
        return 0;
    char *end;
    *v = str_to_double(s, &end);
    return end == e;
}

/* What seems to separate the fields of a line without a comma: "';'",
 * "tabs" or "spaces" (np.savetxt's default); NULL for none of them. */
static const char *other_separator(const csv_line *line)
{
    const char *s = line->s, *e = line->e;
    while (s < e && (*s == ' ' || *s == '\t'))
        s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    size_t n = (size_t)(e - s);
    if (memchr(s, ';', n))
        return "';'";
    if (memchr(s, '\t', n))
        return "tabs";
    if (memchr(s, ' ', n))
        return "spaces";
    return NULL;
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
                   "is taken as the label; set data.label_column (cohort eval and predict: "
                   "--label-column) to say which",
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
 * Text labels, once a field of the label column is not a number: the
 * distinct fields of that column (numbers too) are the classes, sorted by
 * strcmp; *names receives them. r (the rows) is left where it was.
 */
static cohort_status text_labels(const char *path, csv_reader r, uint64_t nf, uint64_t label,
                                 uint64_t rows, char ***names, int32_t *n, cohort_error *err)
{
    *names = NULL;
    *n = 0;
    char **all = calloc((size_t)rows ? (size_t)rows : 1, sizeof *all);
    if (!all)
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", path);
    cohort_status st = COHORT_OK;
    uint64_t got = 0;
    csv_line line;
    for (uint64_t row = 0; row < rows && next_line(&r, &line); row++) {
        const char *p = line.s, *fs = p, *fe = p;
        for (uint64_t c = 0; c <= label && c < nf; c++)
            next_field(&p, line.e, &fs, &fe);
        size_t len = (size_t)(fe - fs);
        if (len == 0 || len > CSV_MAX_NAME) {
            st = cohort_fail(err, COHORT_ERR_INPUT,
                             "%s:%llu: the label is %s; a text label has 1 to %d characters",
                             path, (unsigned long long)line.number, len ? "too long" : "empty",
                             CSV_MAX_NAME);
            break;
        }
        /* Labels are class names in results.json and the weights' metadata:
         * JSON text, which other bytes would make unreadable (to cohort's
         * report, compare and --resume too) after the whole run. */
        if (memchr(fs, 0, len) || !json_utf8_valid(fs, len)) {
            st = cohort_fail(err, COHORT_ERR_INPUT,
                             "%s:%llu: the label %s; a text label is UTF-8 text without NUL bytes",
                             path, (unsigned long long)line.number,
                             memchr(fs, 0, len) ? "holds a NUL byte" : "is not valid UTF-8");
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

/* What every chunk's parse reads and writes. */
typedef struct csv_file {
    const char *path;
    uint64_t nf;        /* fields per line */
    uint64_t label;     /* the label's column, or nf for none (then dim is nf, y unused) */
    uint64_t dim;       /* features per row */
    char *const *names; /* text labels (text_labels), or NULL */
    int32_t n_names;
    float *x;           /* [rows, dim] */
    int32_t *y;         /* [rows] */
    float *t;           /* [rows, t_dim] the targets as numbers (label or label_columns) */
    uint64_t t_dim;
    const uint64_t *tcol; /* label_columns: column c's target index + 1 (0: a feature); NULL */
} csv_file;

/* The first error of one kind in a chunk, and where it is. */
typedef struct csv_fault {
    cohort_status st; /* COHORT_OK: none */
    uint64_t line, col;
    cohort_error err;
} csv_fault;

/* Whole lines [s, e) of the file. */
typedef struct csv_chunk {
    const char *s, *e;
    uint64_t line0;     /* the lines before s, blank ones too */
    uint64_t lines;     /* count pass: the lines in it */
    uint64_t rows;      /* count pass: the rows (lines not blank) */
    uint64_t row0;      /* the rows before s */
    uint64_t bad_line;  /* count pass: 0, or the first line (from line0) without nf fields */
    uint64_t bad_fields; /* the fields that line has */
    int text;           /* parse pass: a label that is not a number: text labels */
    int real;           /* parse pass: a number label that is not a class: real targets */
    csv_fault value;    /* parse pass: the first feature that is not a number */
    csv_fault label;    /* parse pass: the first number label that is out of range */
} csv_chunk;

static void fault_set(csv_fault *f, uint64_t line, uint64_t col, cohort_status st)
{
    f->st = st;
    f->line = line;
    f->col = col;
}

/* a before b in the file. */
static int fault_before(const csv_fault *a, const csv_fault *b)
{
    if (!a->st)
        return 0;
    if (!b->st)
        return 1;
    return a->line < b->line || (a->line == b->line && a->col < b->col);
}

/* Count pass: the chunk's lines and rows, stopping at the first line that
 * does not have nf fields. */
static void chunk_count(const csv_file *f, csv_chunk *c)
{
    csv_reader r = {c->s, c->e, 0};
    csv_line line;
    while (next_line(&r, &line)) {
        uint64_t m = count_fields(&line);
        if (m != f->nf) {
            c->bad_line = line.number;
            c->bad_fields = m;
            return;
        }
        c->rows++;
    }
    c->lines = r.number;
}

/* The field at *p as a float into *v; NULL, or why it is not one (with
 * [*fs, *fe) the field). Moves *p past the field's comma. */
static const char *field_float(const char **p, const char *e, float *v, const char **fs,
                               const char **fe)
{
    /* Most fields are a bare number up to the comma: one pass over it. */
    const char *end = data_float_scan(*p, e, v);
    if (end && (end == e || *end == ',')) {
        *p = end == e ? e : end + 1;
        return NULL;
    }
    next_field(p, e, fs, fe);
    if (!data_float_parse(*fs, *fe, v))
        return *fs == *fe && *fe == e ? "is not a number (a comma ends the line)"
                                      : "is not a number";
    /* The fast path leaves numbers past FLT_MAX to here: 1e39 would be inf,
     * and a model trained on it a NaN loss. */
    if (!isfinite(*v))
        return isfinite(str_to_double(*fs, NULL)) ? "is beyond float32's range (3.4e38)"
                                           : "is not a finite number";
    return NULL;
}

/* The label field at *p into t[row] and, an integer in range, y[row]; a
 * number that is not a class (-2.5) marks the chunk's labels as real
 * targets, one that is not a number as text (text_labels then numbers
 * them); a non-finite one is the chunk's label fault. Moves *p past it. */
static void row_label(const csv_file *f, csv_chunk *c, const csv_line *line, uint64_t col,
                      const char **p, uint64_t row)
{
    const char *fs, *fe;
    double v;
    next_field(p, line->e, &fs, &fe);
    if (!parse_number(fs, fe, &v)) {
        c->text = 1;
        return;
    }
    if (c->label.st)
        return;
    if (!isfinite((float)v)) {
        fault_set(&c->label, line->number, col,
                  bad_value(f->path, line->number, col, 1, fs, fe,
                            isfinite(v) ? "is beyond float32's range (3.4e38)"
                                        : "is not a finite number",
                            &c->label.err));
        return;
    }
    f->t[row] = (float)v;
    if (v < 0 || v > DATA_MAX_LABEL || v != floor(v))
        c->real = 1;
    else
        f->y[row] = (int32_t)v;
}

/* One line into x[row] and y[row]. Goes on past a fault: a text label
 * further on changes which faults count. */
static void parse_row(const csv_file *f, csv_chunk *c, const csv_line *line, uint64_t row)
{
    const char *p = line->s;
    float *xr = f->x + row * f->dim;
    for (uint64_t col = 0; col < f->nf; col++) {
        if (col == f->label) {
            row_label(f, c, line, col, &p, row);
            continue;
        }
        const char *fs, *fe;
        float *to = f->tcol && f->tcol[col] ? f->t + row * f->t_dim + (f->tcol[col] - 1) : xr++;
        const char *why = field_float(&p, line->e, to, &fs, &fe);
        if (why && !c->value.st)
            fault_set(&c->value, line->number, col,
                      bad_value(f->path, line->number, col, 0, fs, fe, why, &c->value.err));
    }
}

/* Parse pass: every row of the chunk. */
static void chunk_parse(const csv_file *f, csv_chunk *c)
{
    csv_reader r = {c->s, c->e, c->line0};
    csv_line line;
    for (uint64_t row = c->row0; next_line(&r, &line); row++)
        parse_row(f, c, &line, row);
}

/* Text labels: y[row] is the class of the row's label text. */
static void chunk_classes(const csv_file *f, csv_chunk *c)
{
    csv_reader r = {c->s, c->e, c->line0};
    csv_line line;
    for (uint64_t row = c->row0; next_line(&r, &line); row++) {
        const char *p = line.s, *fs = p, *fe = p;
        for (uint64_t col = 0; col <= f->label; col++)
            next_field(&p, line.e, &fs, &fe);
        char key[CSV_MAX_NAME + 1];
        const char *kp = key;
        size_t len = (size_t)(fe - fs) <= CSV_MAX_NAME ? (size_t)(fe - fs) : CSV_MAX_NAME;
        memcpy(key, fs, len);
        key[len] = 0;
        char *const *at = bsearch(&kp, f->names, (size_t)f->n_names, sizeof *f->names, cmp_str);
        f->y[row] = at ? (int32_t)(at - f->names) : 0;
    }
}

/* Chunks handed out one at a time to whichever thread is free. */
typedef struct csv_work {
    const csv_file *f;
    csv_chunk *chunk;
    int n;
    void (*fn)(const csv_file *f, csv_chunk *c);
    atomic_int next;
} csv_work;

static void *work_run(void *arg)
{
    csv_work *w = arg;
    for (int i; (i = atomic_fetch_add(&w->next, 1)) < w->n;)
        w->fn(w->f, &w->chunk[i]);
    return NULL;
}

/* fn on every chunk, on up to `threads` threads, the caller's one of them
 * (it does the work of any that cannot start). */
static void run_chunks(const csv_file *f, csv_chunk *chunk, int n, int threads,
                       void (*fn)(const csv_file *f, csv_chunk *c))
{
    csv_work w = {f, chunk, n, fn, 0};
    pthread_t t[CSV_MAX_THREADS];
    int started = 0;
    while (started < threads - 1 && started < n - 1 &&
           pthread_create(&t[started], NULL, work_run, &w) == 0)
        started++;
    work_run(&w);
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
}

static int split_thread_count(void)
{
    long n = split_threads > 0 ? split_threads : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > CSV_MAX_THREADS ? CSV_MAX_THREADS : (int)n;
}

/* Cut [s, e) after line ends into *n chunks (calloc'd) of about equal size,
 * line0 lines before s; NULL on out of memory. */
static csv_chunk *split_lines(const char *s, const char *e, uint64_t line0, int threads, int *n)
{
    size_t len = (size_t)(e - s);
    size_t min = split_min_chunk ? split_min_chunk : CSV_MIN_CHUNK;
    size_t most = (size_t)threads * CSV_CHUNKS_PER_THREAD;
    size_t k = len / min < most ? len / min : most;
    if (k < 1)
        k = 1;
    csv_chunk *c = calloc(k, sizeof *c);
    if (!c)
        return NULL;
    const char *at = s;
    for (size_t i = 0; i < k; i++) {
        const char *end = i + 1 == k ? e : s + len / k * (i + 1);
        if (end <= at) {
            end = at;
        } else if (end < e) {
            const char *nl = memchr(end - 1, '\n', (size_t)(e - end + 1));
            end = nl ? nl + 1 : e;
        }
        c[i].s = at;
        c[i].e = end;
        at = end;
    }
    c[0].line0 = line0;
    *n = (int)k;
    return c;
}

/*
 * The count pass on every chunk, then each chunk's line0 and row0 from the
 * ones before it; *rows gets the total. Fails with the first line in the file
 * without nf fields.
 */
static cohort_status count_rows(const csv_file *f, csv_chunk *chunk, int n, int threads,
                                uint64_t *rows, cohort_error *err)
{
    run_chunks(f, chunk, n, threads, chunk_count);
    uint64_t line0 = chunk[0].line0, row0 = 0;
    for (int i = 0; i < n; i++) {
        csv_chunk *c = &chunk[i];
        if (c->bad_line)
            return cohort_fail(err, COHORT_ERR_INPUT, "%s:%llu: expected %llu fields, found %llu",
                               f->path, (unsigned long long)(line0 + c->bad_line),
                               (unsigned long long)f->nf, (unsigned long long)c->bad_fields);
        c->line0 = line0;
        c->row0 = row0;
        line0 += c->lines;
        row0 += c->rows;
    }
    *rows = row0;
    return COHORT_OK;
}

/* The first fault in the file: text labels fault only where a value does,
 * number labels also where they are out of range. */
static cohort_status first_fault(const csv_chunk *chunk, int n, int text, cohort_error *err)
{
    for (int i = 0; i < n; i++) {
        const csv_chunk *c = &chunk[i];
        const csv_fault *f = !text && fault_before(&c->label, &c->value) ? &c->label : &c->value;
        if (f->st) {
            if (err)
                *err = f->err;
            return f->st;
        }
    }
    return COHORT_OK;
}

/*
 * Parse every row into f->x, f->y and f->t (the parse pass, then the text
 * labels' classes where a label is not a number: *names, *n_names); *real:
 * a number label is not a class. Errors: a text label's (text_labels), then
 * the first fault in the file.
 */
static cohort_status parse_rows(csv_file *f, csv_reader body, csv_chunk *chunk, int n,
                                int threads, uint64_t rows, char ***names, int32_t *n_names,
                                int *real, cohort_error *err)
{
    run_chunks(f, chunk, n, threads, chunk_parse);
    int text = 0;
    for (int i = 0; i < n; i++)
        text |= chunk[i].text;
    *real = 0;
    for (int i = 0; i < n && !text; i++)
        *real |= chunk[i].real;
    cohort_status st;
    if (text && (st = text_labels(f->path, body, f->nf, f->label, rows, names, n_names, err)))
        return st;
    if ((st = first_fault(chunk, n, text, err)))
        return st;
    if (text) {
        f->names = *names;
        f->n_names = *n_names;
        run_chunks(f, chunk, n, threads, chunk_classes);
    }
    return COHORT_OK;
}

/* A file's bytes with a NUL after them, mapped or read. */
typedef struct csv_text {
    const char *p;
    size_t len;
    void *map;      /* NULL: p was read into memory (free) */
    size_t map_len;
} csv_text;

/*
 * Map the file: its pages come from the page cache as the threads parse
 * them. Reading a 184 MB file into memory instead cost a quarter of the CPU
 * time of the whole read, most of it in zeroing fresh pages. An anonymous page
 * after a file that fills its last page provides the NUL (the kernel zeroes
 * the rest of a last page it does not fill). A file truncated while it is
 * parsed raises SIGBUS, as it does for any reader that maps it. Where the
 * file cannot be mapped, file_read_all reads it (and words its errors).
 */
static cohort_status text_open(const char *path, csv_text *t, cohort_error *err)
{
    memset(t, 0, sizeof *t);
    /* O_NONBLOCK: a FIFO is not waited for; file_read_all refuses it. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    long page = sysconf(_SC_PAGESIZE);
    struct stat sb;
    if (fd >= 0 && page > 0 && fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0 &&
        (uint64_t)sb.st_size <= CSV_MAX_FILE) {
        size_t n = (size_t)sb.st_size, span = (n / (size_t)page + 1) * (size_t)page;
        char *base = mmap(NULL, span, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base != MAP_FAILED) {
            if (mmap(base, n, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0) == base) {
                close(fd);
                *t = (csv_text){base, n, base, span};
                return COHORT_OK;
            }
            munmap(base, span);
        }
    }
    if (fd >= 0)
        close(fd);
    char *text;
    cohort_status st = file_read_all(path, CSV_MAX_FILE, &text, &t->len, err);
    t->p = text;
    return st;
}

static void text_close(csv_text *t)
{
    if (t->map)
        munmap(t->map, t->map_len);
    else
        free((char *)t->p);
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
    return data_read_csv_cols(path, label_column, NULL, unlabeled_dim, out, err);
}

/* The columns of label_columns ("a,b" or "3,4") into tcol (column c's
 * target index + 1); *k gets how many. */
static cohort_status find_targets(const char *path, const csv_line *header, uint64_t nf,
                                  const char *list, uint64_t *tcol, uint64_t *k,
                                  cohort_error *err)
{
    *k = 0;
    for (const char *p = list; *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char name[128];
        if (len == 0 || len >= sizeof name)
            return cohort_fail(err, COHORT_ERR_INPUT, "%s: label_columns '%s': an empty or too "
                                                      "long column name",
                               path, list);
        memcpy(name, p, len);
        name[len] = 0;
        uint64_t col;
        cohort_status st = find_label(path, header, nf, name, &col, err);
        if (st)
            return st;
        if (tcol[col])
            return cohort_fail(err, COHORT_ERR_INPUT, "%s: label_columns names column %llu twice",
                               path, (unsigned long long)col);
        tcol[col] = ++*k;
        p += len + (comma != NULL);
    }
    if (*k >= nf)
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: label_columns takes every column; no feature is left", path);
    return COHORT_OK;
}

cohort_status data_read_csv_cols(const char *path, const char *label_column,
                                 const char *label_columns, int64_t unlabeled_dim,
                                 cohort_dataset **out, cohort_error *err)
{
    if (!out)
        return cohort_fail(err, COHORT_ERR_USAGE, "data_read_csv: out is NULL");
    *out = NULL;
    if (!path)
        return cohort_fail(err, COHORT_ERR_USAGE, "data_read_csv: missing path");
    csv_text t;
    cohort_status st = text_open(path, &t, err);
    if (st)
        return st;
    const char *text = t.p, *start = text;
    size_t len = t.len;
    if (len >= 2 && (unsigned char)text[0] == 0x1f && (unsigned char)text[1] == 0x8b) {
        text_close(&t); /* gzip's magic: it had been reported as "no data rows" */
        return cohort_fail(err, COHORT_ERR_INPUT,
                           "%s: a gzip file, and a CSV is read as plain text: gunzip it first",
                           path);
    }
    if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
        start += 3;

    csv_reader r = {start, text + len, 0};
    csv_line first, header_line;
    const csv_line *header = NULL;
    csv_chunk *chunk = NULL;
    float *x = NULL, *targets = NULL;
    int32_t *y = NULL;
    uint64_t *tcol = NULL;
    char **names = NULL;
    int32_t n_names = 0;
    if (!next_line(&r, &first)) {
        st = cohort_fail(err, COHORT_ERR_INPUT, "%s: empty file", path);
        goto done;
    }
    if (memchr(first.s, '\r', (size_t)(first.e - first.s))) {
        st = cohort_fail(err, COHORT_ERR_INPUT,
                         "%s:%llu: a carriage return (\\r) inside the line: lines must end "
                         "with \\n or \\r\\n, not \\r alone (an old Mac text file?)",
                         path, (unsigned long long)first.number);
        goto done;
    }
    uint64_t nf = count_fields(&first);
    const char *p = first.s;
    /* A header has a name; an empty field (a value missing from the first
     * row) does not make one, or that row would be dropped unseen. */
    for (uint64_t i = 0; i < nf && !header; i++) {
        const char *fs, *fe;
        double v;
        next_field(&p, first.e, &fs, &fe);
        if (fs < fe && !parse_number(fs, fe, &v)) {
            header_line = first;
            header = &header_line;
        }
    }
    /* The rows: after the header, or from the first line. */
    csv_reader body = header ? r : (csv_reader){first.s, r.end, first.number - 1};
    int threads = split_thread_count(), n_chunks;
    if (!(chunk = split_lines(body.p, body.end, body.number, threads, &n_chunks))) {
        st = cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    csv_file f = {.path = path, .nf = nf, .label = nf, .dim = nf};
    uint64_t rows = 0;
    if ((st = count_rows(&f, chunk, n_chunks, threads, &rows, err)))
        goto done;
    if (rows == 0) {
        st = cohort_fail(err, COHORT_ERR_INPUT, "%s: no data rows (only a header)", path);
        goto done;
    }
    int multi = label_columns && *label_columns;
    int unlabeled = unlabeled_dim > 0 && nf == (uint64_t)unlabeled_dim && !multi &&
                    !(label_column && *label_column) && !header_has(header, nf, "label");
    if (nf < 2 && !unlabeled) {
        const char *sep = other_separator(&first);
        if (sep)
            st = cohort_fail(err, COHORT_ERR_INPUT,
                             "%s: the first line has no comma, and looks separated by %s; "
                             "cohort reads comma-separated values only (pandas: "
                             "to_csv(sep=','), numpy: savetxt(delimiter=','))",
                             path, sep);
        else
            st = cohort_fail(err, COHORT_ERR_INPUT,
                             "%s: only one column; expected features and a label", path);
        goto done;
    }
    if (multi) {
        /* label_columns: real-valued targets, no classes. */
        if (!(tcol = calloc(nf, sizeof *tcol))) {
            st = cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory", path);
            goto done;
        }
        if ((st = find_targets(path, header, nf, label_columns, tcol, &f.t_dim, err)))
            goto done;
        f.tcol = tcol;
        f.dim = nf - f.t_dim;
    } else if (!unlabeled) {
        if ((st = find_label(path, header, nf, label_column, &f.label, err)))
            goto done;
        f.dim = nf - 1;
        f.t_dim = 1;
    }
    if (!unlabeled && ((st = data_alloc_y(rows, path, &y, err)) ||
                       (st = data_alloc_x(rows, f.t_dim, path, &targets, err))))
        goto done;
    if (y)
        memset(y, 0, (size_t)rows * sizeof *y);
    if ((st = data_alloc_x(rows, f.dim, path, &x, err)))
        goto done;
    f.x = x;
    f.y = y;
    f.t = targets;
    int real = 0;
    if ((st = parse_rows(&f, body, chunk, n_chunks, threads, rows, &names, &n_names, &real, err)))
        goto done;
    char source[1100];
    snprintf(source, sizeof source, "csv:%s", path);
    /* Real targets (label_columns, or a label that is not a class) have no
     * classes: y stays zeros; text labels have no targets. */
    if (real || multi)
        memset(y, 0, (size_t)rows * sizeof *y);
    st = unlabeled ? data_make_unlabeled(x, (int64_t)rows, (int64_t)f.dim, NULL, source, out, err)
                   : data_make(x, y, (int64_t)rows, (int64_t)f.dim, NULL, source, out, err);
    x = NULL;
    y = NULL;
    if (!st && names) {
        (*out)->class_names = names;
        names = NULL;
    } else if (!st && targets) {
        (*out)->t = targets;
        (*out)->t_dim = (int64_t)f.t_dim;
        targets = NULL;
        if (real || multi)
            (*out)->n_classes = 0;
    }
done:
    free(targets);
    free(tcol);
    if (names)
        for (int32_t i = 0; i < n_names; i++)
            free(names[i]);
    free(names);
    free(chunk);
    text_close(&t);
    free(x);
    free(y);
    return st;
}
