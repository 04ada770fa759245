#include "util/util.h"
#include "util/test_hooks.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

/* ---- errors ---------------------------------------------------------- */

const char *cohort_status_str(cohort_status st)
{
    switch (st) {
    case COHORT_OK: return "ok";
    case COHORT_ERR_USAGE: return "usage error";
    case COHORT_ERR_INPUT: return "input error";
    case COHORT_ERR_NOMEM: return "out of memory";
    case COHORT_ERR_IO: return "i/o error";
    case COHORT_ERR_DEVICE: return "device error";
    case COHORT_ERR_DIVERGED: return "diverged";
    case COHORT_ERR_INTERRUPTED: return "interrupted";
    case COHORT_ERR_PARTIAL: return "some models failed";
    case COHORT_ERR_INTERNAL: return "internal error";
    }
    return "unknown error";
}

cohort_status cohort_fail(cohort_error *err, cohort_status st, const char *fmt, ...)
{
    if (err) {
        err->status = st;
        va_list ap;
        va_start(ap, fmt);
        str_vformat(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return st;
}

cohort_status cohort_fail_prefix(cohort_error *err, const char *fmt, ...)
{
    if (!err)
        return COHORT_ERR_INTERNAL;
    char prefix[512], old[sizeof err->message];
    va_list ap;
    va_start(ap, fmt);
    str_vformat(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err->message, sizeof old);
    /* A message cut short at the buffer's end is still the best we have. */
    if (snprintf(err->message, sizeof err->message, "%s: %s", prefix, old) >= (int)sizeof err->message)
        err->message[sizeof err->message - 1] = 0;
    return err->status;
}

/* ---- logging --------------------------------------------------------- */

static cohort_log_fn log_fn;
static void *log_user;

void cohort_set_log(cohort_log_fn fn, void *user)
{
    log_fn = fn;
    log_user = user;
}

void cohort_log(cohort_log_level level, const char *fmt, ...)
{
    if (!log_fn)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    str_vformat(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_fn(level, msg, log_user);
}

/* ---- random numbers -------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void rng_seed(rng_state *r, uint64_t seed, uint64_t stream)
{
    uint64_t x = seed ^ (stream * 0xd1b54a32d192ed03ULL);
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_next(rng_state *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float rng_uniform(rng_state *r) { return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f); }

uint64_t rng_below(rng_state *r, uint64_t n)
{
    /* Rejection sampling: drop the top values that would bias the modulo. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t v;
    do
        v = rng_next(r);
    while (v >= limit);
    return v % n;
}

/* ---- strings --------------------------------------------------------- */

int str_copy(char *dst, size_t n, const char *src)
{
    size_t len = strlen(src);
    if (n == 0)
        return -1;
    if (len >= n) {
        memcpy(dst, src, n - 1);
        dst[n - 1] = 0;
        return -1;
    }
    memcpy(dst, src, len + 1);
    return 0;
}

char *str_dup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

static locale_t c_locale;
static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;

static void c_locale_make(void) { c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0); }

double str_to_double(const char *s, char **end)
{
    pthread_once(&c_locale_once, c_locale_make);
    return c_locale ? strtod_l(s, end, c_locale) : strtod(s, end);
}

int str_vformat(char *buf, size_t n, const char *fmt, va_list ap)
{
    pthread_once(&c_locale_once, c_locale_make);
    /* uselocale is this thread's alone, and cheap (a thread-local pointer):
     * the host program's other threads keep their locale. */
    locale_t old = c_locale ? uselocale(c_locale) : (locale_t)0;
    int r = vsnprintf(buf, n, fmt, ap);
    if (old)
        uselocale(old);
    return r;
}

int str_format(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = str_vformat(buf, n, fmt, ap);
    va_end(ap);
    return r;
}

int parse_bytes(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    double v = str_to_double(s, &end);
    if (end == s || errno || !(v >= 0))
        return -1;
    while (*end == ' ')
        end++;
    static const struct { const char *suffix; double mult; } units[] = {
        {"", 1},           {"B", 1},
        {"KiB", 1024.0},   {"MiB", 1048576.0},     {"GiB", 1073741824.0},
        {"TiB", 1099511627776.0},
        {"KB", 1e3},       {"MB", 1e6},           {"GB", 1e9},  {"TB", 1e12},
        {"K", 1024.0},     {"M", 1048576.0},       {"G", 1073741824.0},
    };
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].suffix) == 0) {
            double b = v * units[i].mult;
            if (b > 1.8e19)
                return -1;
            *out = (uint64_t)b;
            return 0;
        }
    }
    return -1;
}

const char *format_bytes(uint64_t bytes, char *buf, size_t n)
{
    static const char *suffix[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int i = 0;
    while (v >= 1024.0 && i < 4) {
        v /= 1024.0;
        i++;
    }
    if (i == 0)
        snprintf(buf, n, "%llu B", (unsigned long long)bytes);
    else
        str_format(buf, n, "%.2f %s", v, suffix[i]);
    return buf;
}

/* ---- strbuf ---------------------------------------------------------- */

void sb_init(strbuf *b) { memset(b, 0, sizeof *b); }

void sb_free(strbuf *b)
{
    free(b->data);
    sb_init(b);
}

static int sb_reserve(strbuf *b, size_t extra)
{
    if (b->failed)
        return -1;
    if (b->len + extra + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

void sb_putn(strbuf *b, const char *s, size_t n)
{
    if (sb_reserve(b, n))
        return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = 0;
}

void sb_puts(strbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }

void sb_printf(strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = str_vformat(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || sb_reserve(b, (size_t)n))
        return;
    va_start(ap, fmt);
    str_vformat(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void sb_json_str(strbuf *b, const char *s)
{
    sb_putn(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': sb_putn(b, "\\\"", 2); break;
        case '\\': sb_putn(b, "\\\\", 2); break;
        case '\n': sb_putn(b, "\\n", 2); break;
        case '\r': sb_putn(b, "\\r", 2); break;
        case '\t': sb_putn(b, "\\t", 2); break;
        default:
            if (*p < 0x20)
                sb_printf(b, "\\u%04x", *p);
            else
                sb_putn(b, (const char *)p, 1);
        }
    }
    sb_putn(b, "\"", 1);
}

void sb_json_num(strbuf *b, double v)
{
    if (!isfinite(v))
        sb_puts(b, "null");
    else if (v == floor(v) && fabs(v) < 1e15)
        sb_printf(b, "%.0f", v);
    else
        sb_printf(b, "%.9g", v);
}

void sb_json_float(strbuf *b, float v)
{
    char buf[32];
    for (int digits = 7; digits <= 9; digits++) {
        str_format(buf, sizeof buf, "%.*g", digits, (double)v);
        if ((float)str_to_double(buf, NULL) == v)
            break;
    }
    sb_puts(b, buf);
}

/* ---- memory ---------------------------------------------------------- */

void *mem_alloc_big(size_t bytes)
{
    enum { HUGE_PAGE = 2 << 20 }; /* not HUGE: <math.h> has a macro of that name */
    void *p = NULL;
    if (bytes < HUGE_PAGE / 2) {
        size_t n = (bytes + 63) / 64 * 64;
        return posix_memalign(&p, 64, n ? n : 64) == 0 ? p : NULL;
    }
    if (bytes > SIZE_MAX - HUGE_PAGE)
        return NULL;
    size_t n = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    if (posix_memalign(&p, HUGE_PAGE, n) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, n, MADV_HUGEPAGE); /* advice: failure is harmless */
#endif
    return p;
}

/* ---- files ----------------------------------------------------------- */

const char *file_kind_str(unsigned mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFLNK: return "a symbolic link";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    default: return "not a regular file";
    }
}

int file_open_regular(const char *path, int flags, cohort_error *err)
{
    /* O_NONBLOCK: opening a FIFO for reading waits for a writer, forever
     * where none comes; it is refused below instead. */
    int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP && (flags & O_NOFOLLOW))
            cohort_fail(err, COHORT_ERR_IO, "%s: a symbolic link, which cohort does not follow "
                                            "here; remove it", path);
        else
            cohort_fail(err, COHORT_ERR_IO, "%s: cannot open: %s", path, strerror(e));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int is_dir = S_ISDIR(st.st_mode);
        close(fd);
        cohort_fail(err, COHORT_ERR_IO, "%s: not a regular file (%s)", path,
                    is_dir ? "a directory" : file_kind_str((unsigned)st.st_mode));
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

FILE *file_fopen_regular(const char *path, cohort_error *err)
{
    int fd = file_open_regular(path, O_RDONLY, err);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (fd >= 0 && !f) {
        close(fd);
        cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory opening", path);
    }
    return f;
}

cohort_status file_check_replaceable(const char *path, cohort_error *err)
{
    struct stat st;
    if (lstat(path, &st) != 0 || S_ISREG(st.st_mode))
        return COHORT_OK;
    return cohort_fail(err, COHORT_ERR_IO,
                       "%s: %s, not a regular file; cohort writes a file by replacing it, and "
                       "replaces only regular files: remove it, or give another path",
                       path, file_kind_str((unsigned)st.st_mode));
}

cohort_status file_read_all(const char *path, size_t max_bytes, char **data, size_t *len,
                            cohort_error *err)
{
    *data = NULL;
    *len = 0;
    FILE *f = file_fopen_regular(path, err);
    if (!f)
        return err ? err->status : COHORT_ERR_IO;
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return cohort_fail(err, COHORT_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max_bytes) {
        fclose(f);
        return cohort_fail(err, COHORT_ERR_INPUT, "%s: file is %lld bytes, more than the %zu allowed",
                           path, (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = mem_alloc_big(n + 1);
    if (!buf) {
        fclose(f);
        return cohort_fail(err, COHORT_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || got != n) {
        free(buf);
        return cohort_fail(err, COHORT_ERR_IO, "%s: read failed", path);
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return COHORT_OK;
}

static int durable = 1;

void file_set_durable(int on) { durable = on; }

/* The first write that failed for lack of space (ENOSPC, EDQUOT): latched
 * for the process, so a run can stop writing once the disk is full. */
static _Atomic int out_of_space, out_of_space_claimed;
static char out_of_space_path[PATH_MAX];

static void note_no_space(const char *path, int e)
{
    if ((e == ENOSPC || e == EDQUOT) && !atomic_exchange(&out_of_space_claimed, 1)) {
        str_copy(out_of_space_path, sizeof out_of_space_path, path);
        atomic_store(&out_of_space, 1);
    }
}

const char *file_out_of_space(void) { return out_of_space ? out_of_space_path : NULL; }

void file_note_out_of_space(const char *path) { note_no_space(path, ENOSPC); }

cohort_status file_write_atomic(const char *path, const void *data, size_t len, cohort_error *err)
{
    file_part part = {data, len};
    return file_write_atomic_ex(path, &part, 1, FILE_SYNC_DATA | FILE_SYNC_NAME, err);
}

cohort_status file_write_atomic_parts(const char *path, const file_part *parts, int n_parts,
                                      cohort_error *err)
{
    return file_write_atomic_ex(path, parts, n_parts, FILE_SYNC_DATA | FILE_SYNC_NAME, err);
}

/* The folder of path (".": none named) into dir. */
static void dir_of(const char *path, char *dir, size_t n)
{
    str_copy(dir, n, path);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        slash[1] = 0; /* "/" */
    else if (slash)
        *slash = 0;
    else
        str_copy(dir, n, ".");
}

void file_sync_dir(const char *dir)
{
    int dfd = durable ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
}

/* Create the temporary path.tmp.PID (into tmp) for writing: a new file,
 * O_EXCL and O_NOFOLLOW, so nothing planted at its name is followed or
 * written through. One a killed process of the same pid left is removed
 * first (only when there is one: the unlink of a name that is not there
 * cost a system call a file). */
static int create_temporary(const char *path, char *tmp, size_t n)
{
    snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    int fd = open(tmp, flags, 0644);
    if (fd < 0 && errno == EEXIST && unlink(tmp) == 0)
        fd = open(tmp, flags, 0644);
    return fd;
}

cohort_status file_write_atomic_ex(const char *path, const file_part *parts, int n_parts,
                                   int flags, cohort_error *err)
{
    /* A link, FIFO or device at path is refused, not replaced by a regular
     * file (predict --out /dev/full replaced the system's /dev/full when
     * run as root). */
    cohort_status cs = file_check_replaceable(path, err);
    if (cs)
        return cs;
    char tmp[PATH_MAX + 32];
    int fd = create_temporary(path, tmp, sizeof tmp);
    if (fd < 0) {
        int e = errno;
        note_no_space(path, e);
        /* Named as the caller's path: the temporary is ours, not the user's. */
        return cohort_fail(err, COHORT_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    }
    int full = test_hook_disk_full();
    for (int i = 0; i < n_parts; i++) {
        const char *p = parts[i].data;
        size_t left = parts[i].len;
        while (left > 0) {
            ssize_t w = full ? -1 : write(fd, p, left);
            if (full)
                errno = ENOSPC;
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                int e = errno;
                note_no_space(path, e);
                close(fd);
                unlink(tmp);
                return cohort_fail(err, COHORT_ERR_IO, "%s: write failed: %s", path, strerror(e));
            }
            p += w;
            left -= (size_t)w;
        }
    }
    /* The bytes reach the disk before the name can point at them: after a
     * crash of the machine the name is the old file or the whole new one. */
    if (durable && (flags & FILE_SYNC_DATA) && fsync(fd) != 0) {
        int e = errno;
        note_no_space(path, e);
        close(fd);
        unlink(tmp);
        return cohort_fail(err, COHORT_ERR_IO, "%s: fsync failed: %s", path, strerror(e));
    }
    /* Tests widen the window between writing and renaming, to kill a run
     * inside it. */
    long slow_us = test_hook_slow_write_us();
    if (slow_us > 0)
        usleep((useconds_t)slow_us);
    if (close(fd) != 0) {
        int e = errno;
        note_no_space(path, e);
        unlink(tmp);
        return cohort_fail(err, COHORT_ERR_IO, "%s: close failed: %s", path, strerror(e));
    }
    if ((cs = file_check_replaceable(path, err))) {
        unlink(tmp);
        return cs;
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return cohort_fail(err, COHORT_ERR_IO, "%s: rename failed: %s", path, strerror(e));
    }
    test_hook_file_written();
    /* Make the rename itself durable (else the caller syncs the folder
     * later, once for many files: file_sync_dir). */
    if (flags & FILE_SYNC_NAME) {
        char dir[PATH_MAX];
        dir_of(path, dir, sizeof dir);
        file_sync_dir(dir);
    }
    return COHORT_OK;
}

cohort_status file_link_atomic(const char *src, const char *path, cohort_error *err)
{
    cohort_status cs = file_check_replaceable(path, err);
    if (cs)
        return cs;
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int r = link(src, tmp);
    if (r != 0 && errno == EEXIST && unlink(tmp) == 0)
        r = link(src, tmp);
    if (r != 0 || test_hook_disk_full()) {
        int e = r != 0 ? errno : ENOSPC;
        if (r == 0)
            unlink(tmp);
        note_no_space(path, e);
        return cohort_fail(err, COHORT_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    }
    if ((cs = file_check_replaceable(path, err))) {
        unlink(tmp);
        return cs;
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return cohort_fail(err, COHORT_ERR_IO, "%s: rename failed: %s", path, strerror(e));
    }
    test_hook_file_written();
    return COHORT_OK;
}

cohort_status dir_make(const char *path, cohort_error *err)
{
    char buf[PATH_MAX];
    if (str_copy(buf, sizeof buf, path))
        return cohort_fail(err, COHORT_ERR_IO, "%s: path too long", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return cohort_fail(err, COHORT_ERR_IO, "%s: cannot create directory: %s", buf,
                                   strerror(errno));
            struct stat st;
            if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
                return cohort_fail(err, COHORT_ERR_IO, "%s: exists and is not a directory", buf);
            *p = c;
            if (c == 0)
                break;
        }
    }
    return COHORT_OK;
}

#if defined(__SSE2__)
/* MXCSR bits: flush-to-zero (15) and denormals-are-zero (6). */
#define FP_FTZ_DAZ 0x8040u
unsigned fp_flush_denormals(void)
{
    unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | FP_FTZ_DAZ);
    return saved;
}
void fp_restore(unsigned saved) { _mm_setcsr(saved); }
#else
unsigned fp_flush_denormals(void) { return 0; }
void fp_restore(unsigned saved) { (void)saved; }
#endif

double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
