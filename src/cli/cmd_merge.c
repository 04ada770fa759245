/* cohort merge DIR... --out DIR: join the output directories of a plan's shards. */
#include "cli/cli.h"
#include "io/report.h"
#include "io/results.h"
#include "run/shard.h"
#include "util/json.h"
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *help =
    "usage: cohort merge DIR_0 DIR_1 ... --out DIR\n"
    "\n"
    "Join the output directories of `cohort train PLAN --shard I/N` into one: DIR/results.json\n"
    "with every model in plan order, models/*.safetensors and history/*.csv (hard links where\n"
    "the filesystem allows, else copies), checkpoints of unfinished models (so that\n"
    "`cohort train PLAN --out DIR --resume` finishes them) and a new DIR/report.html.\n"
    "\n"
    "options:\n"
    "  --out DIR          the merged output directory (required; not one of the shards)\n"
    "  -h, --help         show this help\n"
    "\n"
    "exit status: 0 every model of the plan merged and ok (or pruned), 1 some failed or are\n"
    "             missing from the shards (listed), 2 usage or input error (nothing merged)\n";

static void cell(char *buf, size_t n, double v, const char *fmt)
{
    if (isfinite(v))
        snprintf(buf, n, fmt, v);
    else
        snprintf(buf, n, "-");
}

/* The table of cohort train's end (table.c: val_loss, then accuracy columns
 * for classifiers and error columns for regressions), from results, with a
 * rank column when the records have one. */
static void print_table(FILE *out, const json_value *results)
{
    const json_value *models = json_get(results, "models");
    int w = 5, ranked = 0, cls = 0, reg = 0;
    for (size_t i = 0; models && i < models->n; i++) {
        const json_value *m = &models->items[i], *h = json_get(m, "history");
        int l = (int)strlen(json_str(json_get(m, "name"), ""));
        w = l > w ? l : w;
        ranked |= json_get(m, "rank") != NULL;
        reg |= json_get(h, "mae") != NULL;
        cls |= h && json_get(h, "mae") == NULL;
    }
    fprintf(out, "%-*s  %-11s  %s%-7s  %9s  %6s  %8s  %8s", w, "model", "status",
            ranked ? "rank  " : "", "device", "params", "epochs", "best_ep", "val_loss");
    if (cls)
        fprintf(out, "  %8s  %8s", "val_acc", "test_acc");
    if (reg)
        fprintf(out, "  %8s  %8s", "val_mae", "test_mae");
    fprintf(out, "  %8s\n", "seconds");
    for (size_t i = 0; models && i < models->n; i++) {
        const json_value *m = &models->items[i], *best = json_get(m, "best"),
                         *test = json_get(m, "test");
        char p[32], ep[16], be[16], vl[16], va[16], ta[16], vm[16], tm[16], sec[16],
            rank[16] = "";
        cell(p, sizeof p, json_num(json_get(m, "params"), NAN), "%.0f");
        cell(ep, sizeof ep, json_num(json_get(m, "epochs_run"), NAN), "%.0f");
        cell(be, sizeof be, json_num(json_get(best, "epoch"), NAN), "%.0f");
        cell(vl, sizeof vl, json_num(json_get(best, "val_loss"), NAN), "%.4f");
        cell(va, sizeof va, json_num(json_get(best, "val_accuracy"), NAN), "%.4f");
        cell(ta, sizeof ta, json_num(json_get(test, "accuracy"), NAN), "%.4f");
        cell(vm, sizeof vm, json_num(json_get(best, "val_mae"), NAN), "%.4f");
        cell(tm, sizeof tm, json_num(json_get(test, "mae"), NAN), "%.4f");
        cell(sec, sizeof sec, json_num(json_get(m, "seconds"), NAN), "%.1f");
        if (ranked)
            snprintf(rank, sizeof rank, "%-4.0f  ", json_num(json_get(m, "rank"), NAN));
        fprintf(out, "%-*s  %-11s  %s%-7s  %9s  %6s  %8s  %8s", w,
                json_str(json_get(m, "name"), "?"), json_str(json_get(m, "status"), "?"), rank,
                json_str(json_get(m, "device"), "-"), p, ep, be, vl);
        if (cls)
            fprintf(out, "  %8s  %8s", va, ta);
        if (reg)
            fprintf(out, "  %8s  %8s", vm, tm);
        fprintf(out, "  %8s\n", sec);
    }
}

void print_results_file_table(FILE *out, const char *dir)
{
    json_value *results;
    cohort_error err;
    if (results_load(dir, &results, &err)) {
        fprintf(stderr, "cohort: %s\n", err.message);
        return;
    }
    print_table(out, results);
    json_free(results);
}

/* dst becomes src's content: a hard link when possible, else a copy
 * (atomic: through dst.tmp). src must be a regular file (bring checked
 * it; a link would be linked or copied as its target) and dst, where it
 * exists, too: never replaced when it is a link, FIFO or device. 0 on
 * success, else errno (EEXIST: dst is not a regular file). */
static int link_or_copy(const char *src, const char *dst)
{
    struct stat a, b;
    if (lstat(src, &a) != 0)
        return errno;
    if (!S_ISREG(a.st_mode))
        return EINVAL;
    if (lstat(dst, &b) == 0 && !S_ISREG(b.st_mode))
        return EEXIST;
    if (lstat(dst, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
        return 0;
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dst, (long)getpid());
    unlink(tmp);
    if (link(src, tmp) == 0) {
        /* link() does not follow a link: src swapped for one since the
         * lstat above gives a link here, refused. */
        int e = lstat(tmp, &b) != 0 ? errno : !S_ISREG(b.st_mode) ? EINVAL : 0;
        if (!e && lstat(dst, &a) == 0 && !S_ISREG(a.st_mode))
            e = EEXIST;
        if (!e && rename(tmp, dst) == 0)
            return 0;
        e = e ? e : errno;
        unlink(tmp);
        return e;
    }
    int in = open(src, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (in < 0)
        return errno == ELOOP ? EINVAL : errno;
    if (fstat(in, &a) != 0 || !S_ISREG(a.st_mode)) {
        close(in);
        return EINVAL;
    }
    int out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (out < 0) {
        int e = errno;
        close(in);
        return e;
    }
    char buf[1 << 16];
    int e = 0;
    for (;;) {
        ssize_t r = read(in, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            e = errno;
        if (r <= 0)
            break;
        for (ssize_t off = 0; off < r && !e;) {
            ssize_t w = write(out, buf + off, (size_t)(r - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0)
                e = errno;
            else
                off += w;
        }
        if (e)
            break;
    }
    close(in);
    if (fsync(out) != 0 && !e)
        e = errno;
    if (close(out) != 0 && !e)
        e = errno;
    if (!e && lstat(dst, &b) == 0 && !S_ISREG(b.st_mode))
        e = EEXIST;
    if (!e && rename(tmp, dst) != 0)
        e = errno;
    if (e)
        unlink(tmp);
    return e;
}

/* A path inside an output directory, as results.json gives it: relative, no "..". */
static int safe_rel(const char *rel)
{
    return rel[0] && rel[0] != '/' && !strstr(rel, "..");
}

/* What dir/rel is, reached through real directories only: 0 a regular
 * file, ENOENT none there, else EINVAL with `bad` the first thing on the
 * way that is not what it should be (a link to a directory or a file, a
 * FIFO, a device) and *mode its st_mode. */
static int regular_under(const char *dir, const char *rel, char *bad, size_t n_bad,
                         unsigned *mode)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/", dir);
    if (n < 0 || (size_t)n >= sizeof path || str_copy(path + n, sizeof path - (size_t)n, rel))
        return ENAMETOOLONG;
    for (char *p = path + n;; p++) {
        if (*p != '/' && *p)
            continue;
        char c = *p;
        *p = 0;
        struct stat st;
        if (lstat(path, &st) != 0)
            return errno;
        if (c ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)) {
            *mode = (unsigned)st.st_mode;
            str_copy(bad, n_bad, path);
            return EINVAL;
        }
        if (!c)
            return 0;
        *p = c;
    }
}

/* Bring one file of a shard into the merged directory; a missing optional
 * file is skipped. 0 on success; else prints why and returns 2. */
static int bring(const char *from_dir, const char *rel, const char *out, int optional)
{
    if (!safe_rel(rel))
        return cli_usage_error("merge", "%s/results.json: the path '%s' leaves the directory",
                               from_dir, rel);
    char src[PATH_MAX], dst[PATH_MAX], bad[PATH_MAX];
    snprintf(src, sizeof src, "%s/%s", from_dir, rel);
    snprintf(dst, sizeof dst, "%s/%s", out, rel);
    unsigned mode = 0;
    int e = regular_under(from_dir, rel, bad, sizeof bad, &mode);
    if (e == ENOENT && optional)
        return 0;
    if (e == EINVAL)
        return cli_usage_error("merge", "%s is %s; a shard directory holds only the regular files "
                               "and directories cohort train made, so it is not merged",
                               bad, file_kind_str(mode));
    if (!e)
        e = link_or_copy(src, dst);
    struct stat st;
    if (e == EEXIST && lstat(dst, &st) == 0)
        return cli_usage_error("merge", "%s is %s, not a regular file; merge does not replace it: "
                               "remove it, or merge into another directory",
                               dst, file_kind_str((unsigned)st.st_mode));
    if (e)
        return cli_usage_error("merge", "cannot bring %s into %s: %s", src, dst,
                               e == EINVAL ? "not a regular file" : strerror(e));
    return 0;
}

/* Hold DIR/.lock as cohort train does, so that no run writes DIR meanwhile. */
static int lock_dir(const char *out)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/.lock", out);
    cohort_error err;
    int fd = file_open_regular(path, O_RDWR | O_CREAT | O_NOFOLLOW, &err);
    if (fd < 0) {
        cli_usage_error("merge", "%s", err.message);
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        cli_usage_error("merge", "%s is in use by a cohort train; wait for it to end, or merge "
                        "into another --out directory", out);
        return -1;
    }
    return fd;
}

/* Whether a cohort train holds dir's lock (it is writing there): its
 * results.json and files would be of two moments. Says so when it does. */
static int shard_in_use(const char *dir)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/.lock", dir);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (fd >= 0)
            close(fd);
        return 0; /* no lock file: no run has it */
    }
    int busy = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    char pid[32] = "";
    ssize_t n = busy ? pread(fd, pid, sizeof pid - 1, 0) : 0;
    pid[n > 0 ? n : 0] = 0;
    pid[strcspn(pid, "\n")] = 0;
    close(fd);
    if (busy)
        cli_usage_error("merge", "%s is in use by a cohort train (pid %s), which is still "
                        "writing it; merge once it has ended", dir, pid[0] ? pid : "unknown");
    return busy;
}

static int merge_files(const shard_source *src, int n, const char *out)
{
    const char *subs[] = {"models", "history", "checkpoints"};
    char sub[PATH_MAX];
    cohort_error err;
    for (int i = 0; i < 3; i++) {
        snprintf(sub, sizeof sub, "%s/%s", out, subs[i]);
        if (dir_make(sub, &err))
            return cli_usage_error("merge", "%s", err.message);
    }
    for (int s = 0; s < n; s++) {
        const json_value *models = json_get(src[s].results, "models");
        for (size_t i = 0; i < models->n; i++) {
            const json_value *m = &models->items[i];
            const char *name = json_str(json_get(m, "name"), "");
            if (!name[0] || strchr(name, '/') || strstr(name, ".."))
                return cli_usage_error("merge", "%s/results.json: '%s' is not a model name",
                                       src[s].name, name);
            const char *w = json_str(json_get(m, "weights"), NULL),
                       *bw = json_str(json_get(m, "best_weights"), NULL);
            char rel[PATH_MAX];
            if ((w && bring(src[s].name, w, out, 0)) || (bw && bring(src[s].name, bw, out, 0)))
                return 2;
            snprintf(rel, sizeof rel, "history/%s.csv", name);
            if (bring(src[s].name, rel, out, 1))
                return 2;
            /* An unfinished model's checkpoint: --resume in the merged DIR finishes it. */
            snprintf(rel, sizeof rel, "checkpoints/%s.safetensors", name);
            if (strcmp(json_str(json_get(m, "status"), ""), "ok") &&
                bring(src[s].name, rel, out, 1))
                return 2;
        }
    }
    return bring(src[0].name, "plan.yaml", out, 1);
}

int cmd_merge(int argc, char **argv)
{
    const char *out = NULL;
    const char **dirs = calloc((size_t)argc, sizeof *dirs);
    int n = 0;
    if (!dirs)
        return 2;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(help, stdout);
            free(dirs);
            return 0;
        } else if (cli_opt_value(argc, argv, &i, "--out", &v)) {
            out = v;
        } else if (argv[i][0] == '-') {
            free(dirs);
            static const char *const opts[] = {"--out", "--help", NULL};
            return cli_unknown_option("merge", argv[i], NULL, opts, 0);
        } else {
            dirs[n++] = argv[i];
        }
    }
    if (!out || !*out || n == 0) {
        free(dirs);
        return cli_usage_error("merge", "needs the shards' directories and --out DIR (see cohort "
                               "merge --help)");
    }
    int rc = 2, lock = -1;
    cohort_error err;
    shard_source *src = calloc((size_t)n, sizeof *src);
    json_value **trees = calloc((size_t)n, sizeof *trees);
    strbuf b, extra;
    sb_init(&b);
    sb_init(&extra);
    char real_out[PATH_MAX];
    if (!src || !trees)
        goto done;
    if (!realpath(out, real_out))
        real_out[0] = 0; /* not there yet: made once the shards are read */
    sb_puts(&extra, "\"merged_from\": [");
    for (int s = 0; s < n; s++) {
        char path[PATH_MAX], real[PATH_MAX];
        snprintf(path, sizeof path, "%s/results.json", dirs[s]);
        if (access(path, F_OK) != 0) {
            cli_usage_error("merge", "%s has no results.json: not an output directory of "
                            "cohort train, or its run has not started", dirs[s]);
            goto done;
        }
        if (realpath(dirs[s], real) && !strcmp(real, real_out)) {
            cli_usage_error("merge", "--out %s is one of the shards; merge into a new directory",
                            out);
            goto done;
        }
        for (int t = 0; t < s; t++) {
            char other[PATH_MAX];
            if (realpath(dirs[t], other) && !strcmp(real, other)) {
                cli_usage_error("merge", "%s is given twice (as %s and %s)", real, dirs[t],
                                dirs[s]);
                goto done;
            }
        }
        if (shard_in_use(dirs[s]))
            goto done;
        if (results_load(dirs[s], &trees[s], &err)) {
            cli_usage_error("merge", "%s", err.message);
            goto done;
        }
        src[s].name = dirs[s];
        src[s].results = trees[s];
        src[s].rank = -1;
        sb_puts(&extra, s ? ", " : "");
        sb_json_str(&extra, dirs[s]);
    }
    sb_puts(&extra, "]");
    shard_merge_info info;
    if (shard_merge(src, n, 0, extra.data, &b, &info, &err)) {
        cli_usage_error("merge", "%s", err.message);
        goto done;
    }
    if (dir_make(out, &err)) {
        cli_usage_error("merge", "%s", err.message);
        goto done;
    }
    if ((lock = lock_dir(out)) < 0 || merge_files(src, n, out))
        goto done;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/results.json", out);
    if (file_write_atomic(path, b.data, b.len, &err)) {
        cli_usage_error("merge", "%s", err.message);
        goto done;
    }
    print_results_file_table(stdout, out);
    if (report_write(out, &err))
        fprintf(stderr, "cohort merge: warning: no report.html: %s\n", err.message);
    fprintf(stderr, "cohort merge: %d model%s from %d director%s into %s: %d ok",
            info.models, info.models == 1 ? "" : "s", n, n == 1 ? "y" : "ies", out,
            info.models - info.not_ok - info.pruned);
    if (info.pruned)
        fprintf(stderr, ", %d pruned", info.pruned);
    if (info.not_ok)
        fprintf(stderr, ", %d not (see results.json)", info.not_ok);
    fputc('\n', stderr);
    if (info.missing)
        fprintf(stderr, "cohort merge: warning: the plan has %d models, %d of them (plan index "
                "%s) in none of the directories; merge again with every shard's directory\n",
                info.plan_models, info.missing, info.missing_list);
    rc = info.not_ok || info.missing ? 1 : 0;
done:
    if (lock >= 0)
        close(lock);
    for (int s = 0; trees && s < n; s++)
        json_free(trees[s]);
    free(trees);
    free(src);
    free(dirs);
    sb_free(&b);
    sb_free(&extra);
    return rc;
}
