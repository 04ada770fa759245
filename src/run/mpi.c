/*
 * MPI ranks: each rank trains its share of the plan (the split of shard.c)
 * into DIR/.ranks/R, a directory of its own (its lock, its results.json)
 * whose models/, history/ and checkpoints/ are links to DIR's. So weights
 * and checkpoints of every rank are in DIR as they are written, and only
 * rank 0 writes DIR/results.json: a merge of the ranks' results.json, made
 * while they train (from the shared filesystem, at most once a second) and
 * at the end (from the records every rank sends it). Only the main thread
 * calls MPI; waits poll with a sleep so that a finished rank leaves its
 * core to the ranks still training.
 */
#include "io/report.h"
#include "run/shard.h"

#include <mpi.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct cohort_mpi {
    int rank, size, local_rank, local_size;
    char dir[COHORT_PATH_MAX];           /* the shared output directory */
    char rank_dir[COHORT_PATH_MAX + 32]; /* dir/.ranks/R */
    int lock_fd;                         /* rank 0: dir/.lock */
    cohort_event_fn forward;
    void *forward_user;
    double last_merge;
    int started;                         /* MPI_Init was called here */
};

static const char *const SHARED_SUBS[] = {"models", "history", "checkpoints"};

cohort_status mpi_create(cohort_mpi **out, cohort_error *err)
{
    *out = NULL;
    cohort_mpi *m = calloc(1, sizeof *m);
    if (!m)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    m->lock_fd = -1;
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            free(m);
            return cohort_fail(err, COHORT_ERR_DEVICE, "MPI_Init failed");
        }
        m->started = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &m->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &m->size);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, m->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &m->local_rank);
    MPI_Comm_size(node, &m->local_size);
    MPI_Comm_free(&node);
    *out = m;
    return COHORT_OK;
}

int mpi_rank(const cohort_mpi *m) { return m->rank; }
int mpi_size(const cohort_mpi *m) { return m->size; }

void mpi_end(cohort_mpi *m)
{
    if (!m)
        return;
    if (m->started)
        MPI_Finalize();
    if (m->lock_fd >= 0)
        close(m->lock_fd);
    free(m);
}

/* ---- agreeing on a status ------------------------------------------------------- */

/* Every rank learns the first rank whose st is not OK and its message;
 * returns that status (OK when none). */
static cohort_status agree(cohort_mpi *m, cohort_status st, cohort_error *err)
{
    int mine = st ? m->rank : m->size, first = m->size;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (first == m->size)
        return COHORT_OK;
    int code = (int)st;
    char msg[sizeof err->message];
    if (m->rank == first)
        str_copy(msg, sizeof msg, err->message);
    MPI_Bcast(&code, 1, MPI_INT, first, MPI_COMM_WORLD);
    MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, first, MPI_COMM_WORLD);
    if (m->size > 1 && strncmp(msg, "rank ", 5) != 0)
        return cohort_fail(err, (cohort_status)code, "rank %d: %s", first, msg);
    return cohort_fail(err, (cohort_status)code, "%s", msg);
}

/* ---- merging the ranks' results ------------------------------------------------- */

static void results_path(char *buf, size_t n, const char *dir)
{
    if (snprintf(buf, n, "%s/results.json", dir) >= (int)n)
        buf[0] = 0; /* too long: names no file */
}

/* Merge n parsed results (some may be NULL: skipped) into dir/results.json. */
static cohort_status write_merged(const cohort_mpi *m, json_value **trees, const int *ranks,
                                  int n, int flags, shard_merge_info *info, cohort_error *err)
{
    shard_source *src = calloc((size_t)(n ? n : 1), sizeof *src);
    if (!src)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    int k = 0;
    for (int i = 0; i < n; i++)
        if (trees[i]) {
            src[k].name = ranks[i] >= 0 ? "a rank's results" : "results.json";
            src[k].results = trees[i];
            src[k].rank = ranks[i];
            k++;
        }
    cohort_status st = COHORT_OK;
    if (k > 0) {
        strbuf b;
        sb_init(&b);
        char extra[64];
        snprintf(extra, sizeof extra, "\"ranks\": %d", m->size);
        st = shard_merge(src, k, flags, extra, &b, info, err);
        char path[COHORT_PATH_MAX + 32];
        results_path(path, sizeof path, m->dir);
        if (!st)
            st = file_write_atomic(path, b.data, b.len, err);
        sb_free(&b);
    }
    free(src);
    return st;
}

/* Rank 0, while the ranks train: DIR/results.json from what their
 * results.json say now. Best effort: a rank's file being replaced or a
 * failed merge leaves the last one. */
static void merge_live(cohort_mpi *m)
{
    m->last_merge = now_seconds();
    json_value **trees = calloc((size_t)m->size, sizeof *trees);
    int *ranks = calloc((size_t)m->size, sizeof *ranks);
    if (trees && ranks) {
        for (int r = 0; r < m->size; r++) {
            char dir[COHORT_PATH_MAX + 64];
            snprintf(dir, sizeof dir, "%s/.ranks/%d", m->dir, r);
            cohort_error ignored;
            if (report_load_results(dir, &trees[r], &ignored))
                trees[r] = NULL;
            ranks[r] = r;
        }
        cohort_error ignored;
        write_merged(m, trees, ranks, m->size, SHARD_MERGE_PREFER_ENDED, NULL, &ignored);
        for (int r = 0; r < m->size; r++)
            json_free(trees[r]);
    }
    free(trees);
    free(ranks);
}

static void on_event(const cohort_event *ev, void *user)
{
    cohort_mpi *m = user;
    if (m->forward)
        m->forward(ev, m->forward_user);
    if (m->rank == 0 && (ev->kind == COHORT_EVENT_EPOCH_END || ev->kind == COHORT_EVENT_MODEL_END) &&
        now_seconds() - m->last_merge >= 1.0)
        merge_live(m);
}

/* ---- preparing the output directory --------------------------------------------- */

static cohort_status lock_dir(cohort_mpi *m, cohort_error *err)
{
    char path[COHORT_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/.lock", m->dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return cohort_fail(err, COHORT_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        close(fd);
        return cohort_fail(err, COHORT_ERR_USAGE,
                           "%s is in use by another cohort train (pid %s); wait for it to end, "
                           "or train into another --out directory",
                           m->dir, pid[0] ? pid : "unknown");
    }
    char pid[32];
    int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
        close(fd);
        return cohort_fail(err, COHORT_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    }
    m->lock_fd = fd;
    /* Holding the lock, a temporary file here is a killed run's. */
    DIR *d = opendir(m->dir);
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strstr(de->d_name, ".tmp.")) {
            char p[2 * COHORT_PATH_MAX];
            snprintf(p, sizeof p, "%s/%s", m->dir, de->d_name);
            unlink(p);
        }
    if (d)
        closedir(d);
    return COHORT_OK;
}

/* The rank numbers R of dir/.ranks/R that exist, into *out (malloc'd). */
static int old_ranks(const cohort_mpi *m, int **out)
{
    char path[COHORT_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/.ranks", m->dir);
    *out = NULL;
    DIR *d = opendir(path);
    if (!d)
        return 0;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        long r = strtol(de->d_name, &end, 10);
        if (end == de->d_name || *end || r < 0 || r > 1000000)
            continue;
        if (n == cap) {
            int *g = realloc(*out, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *g);
            if (!g)
                break;
            *out = g;
        }
        (*out)[n++] = (int)r;
    }
    closedir(d);
    return n;
}

/*
 * --resume: one results.json from DIR's and every old rank's (a model that
 * ended wins), written as DIR/results.json and as the results.json of each
 * rank of this run, from which cohort_run_create resumes its share.
 */
static cohort_status merge_for_resume(cohort_mpi *m, cohort_error *err)
{
    int *old = NULL, n_old = old_ranks(m, &old);
    json_value **trees = calloc((size_t)n_old + 1, sizeof *trees);
    int *ranks = calloc((size_t)n_old + 1, sizeof *ranks);
    cohort_status st = trees && ranks ? COHORT_OK
                                      : cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    char path[COHORT_PATH_MAX + 64];
    results_path(path, sizeof path, m->dir);
    if (!st && access(path, F_OK) == 0)
        st = report_load_results(m->dir, &trees[0], err);
    ranks[0] = -1;
    for (int i = 0; !st && i < n_old; i++) {
        char dir[COHORT_PATH_MAX + 64];
        snprintf(dir, sizeof dir, "%s/.ranks/%d", m->dir, old[i]);
        results_path(path, sizeof path, dir);
        ranks[i + 1] = -1;
        if (access(path, F_OK) == 0)
            st = report_load_results(dir, &trees[i + 1], err);
    }
    int any = 0;
    for (int i = 0; !st && i <= n_old; i++)
        any |= trees[i] != NULL;
    if (!st && any)
        st = write_merged(m, trees, ranks, n_old + 1, SHARD_MERGE_PREFER_ENDED, NULL, err);
    for (int i = 0; trees && i <= n_old; i++)
        json_free(trees[i]);
    free(trees);
    free(ranks);
    free(old);
    if (st || !any)
        return st;
    char *text = NULL;
    size_t len;
    results_path(path, sizeof path, m->dir);
    st = file_read_all(path, (size_t)1 << 30, &text, &len, err);
    for (int r = 0; !st && r < m->size; r++) {
        char dir[COHORT_PATH_MAX + 64];
        snprintf(dir, sizeof dir, "%s/.ranks/%d", m->dir, r);
        st = dir_make(dir, err);
        results_path(path, sizeof path, dir);
        if (!st)
            st = file_write_atomic(path, text, len, err);
    }
    free(text);
    return st;
}

/* Without --resume: the ranks' results of an earlier run go. */
static void clear_old_results(cohort_mpi *m)
{
    int *old = NULL, n_old = old_ranks(m, &old);
    for (int i = 0; i < n_old; i++) {
        char path[COHORT_PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/.ranks/%d/results.json", m->dir, old[i]);
        unlink(path);
    }
    free(old);
}

static cohort_status prepare_root(cohort_mpi *m, int resume, cohort_error *err)
{
    cohort_status st = dir_make(m->dir, err);
    if (!st)
        st = lock_dir(m, err);
    for (int i = 0; !st && i < 3; i++) {
        char sub[COHORT_PATH_MAX + 16];
        snprintf(sub, sizeof sub, "%s/%s", m->dir, SHARED_SUBS[i]);
        st = dir_make(sub, err);
    }
    if (!st && resume)
        st = merge_for_resume(m, err);
    else if (!st)
        clear_old_results(m);
    return st;
}

/* dir/.ranks/R with links to dir's shared folders. */
static cohort_status prepare_rank_dir(cohort_mpi *m, cohort_error *err)
{
    snprintf(m->rank_dir, sizeof m->rank_dir, "%s/.ranks/%d", m->dir, m->rank);
    cohort_status st = dir_make(m->rank_dir, err);
    for (int i = 0; !st && i < 3; i++) {
        char link_path[COHORT_PATH_MAX + 64], target[64], now[64];
        snprintf(link_path, sizeof link_path, "%s/%s", m->rank_dir, SHARED_SUBS[i]);
        snprintf(target, sizeof target, "../../%s", SHARED_SUBS[i]);
        if (symlink(target, link_path) == 0)
            continue;
        ssize_t n = errno == EEXIST ? readlink(link_path, now, sizeof now - 1) : -1;
        if (n >= 0)
            now[n] = 0;
        if (n < 0 || strcmp(now, target) != 0)
            st = cohort_fail(err, COHORT_ERR_IO, "%s: cannot link it to %s: %s", link_path,
                             target, n >= 0 ? "it links elsewhere" : strerror(errno));
    }
    return st;
}

/* The cores this rank may use: those it is bound to when the launcher
 * bound it, else the node's cores shared among its ranks on the node. */
static int rank_threads(const cohort_mpi *m)
{
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    int bound = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        bound = CPU_COUNT(&set);
    if (bound > 0 && bound < online)
        return bound;
    long t = (online > 0 ? online : 1) / (m->local_size > 0 ? m->local_size : 1);
    return t > 0 ? (int)t : 1;
}

cohort_status mpi_prepare(cohort_mpi *m, cohort_run_options *opt, const char *out_dir,
                          cohort_error *err)
{
    cohort_status st = COHORT_OK;
    if (str_copy(m->dir, sizeof m->dir, out_dir))
        st = cohort_fail(err, COHORT_ERR_USAGE, "%s: path too long", out_dir);
    if (!st && m->rank == 0)
        st = prepare_root(m, opt->resume, err);
    /* Rank 0 first: the others then find DIR made and locked. */
    int code = (int)st;
    MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (code) {
        char msg[sizeof err->message];
        if (m->rank == 0)
            str_copy(msg, sizeof msg, err->message);
        MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, 0, MPI_COMM_WORLD);
        return cohort_fail(err, (cohort_status)code, "%s", msg);
    }
    st = prepare_rank_dir(m, err);
    if ((st = agree(m, st, err)))
        return st;
    opt->shard_index = m->rank;
    opt->shard_count = m->size;
    opt->out_dir = m->rank_dir;
    if (opt->threads <= 0)
        opt->threads = rank_threads(m);
    m->forward = opt->on_event;
    m->forward_user = opt->user;
    opt->on_event = on_event;
    opt->user = m;
    return COHORT_OK;
}

/* ---- GPUs of this rank ------------------------------------------------------------ */

static void pin_gpus(const cohort_mpi *m, cohort_run *run)
{
    int usable[COHORT_MAX_DEVICES], gpus[COHORT_MAX_DEVICES], mine[COHORT_MAX_DEVICES];
    int n = devices_usable(run->devices, usable, COHORT_MAX_DEVICES), ng = 0, nm = 0;
    for (int j = 0; j < n; j++)
        if (!strcmp(run->devices->dev[usable[j]].info.kind, "cuda"))
            gpus[ng++] = usable[j];
    if (ng == 0)
        return;
    if (ng >= m->local_size) {
        for (int g = m->local_rank; g < ng; g += m->local_size)
            mine[nm++] = gpus[g];
    } else {
        mine[nm++] = gpus[m->local_rank % ng];
    }
    double load[COHORT_MAX_DEVICES] = {0};
    for (int i = 0; i < run->n; i++) {
        model_entry *e = &run->m[i];
        if (e->spec->device[0] || e->done)
            continue;
        int best = -1;
        for (int k = 0; k < nm; k++)
            if (e->planned_bytes <= pool_limit(run->devices->dev[mine[k]].pool) &&
                (best < 0 || load[k] < load[best]))
                best = k;
        if (best < 0)
            continue; /* fits none of them: where placement put it */
        e->device = mine[best];
        load[best] += model_train_flops(&e->L, run->train.n) * e->spec->epochs;
    }
}

cohort_status mpi_ready(cohort_mpi *m, cohort_run *run, cohort_status st, cohort_error *err)
{
    if ((st = agree(m, st, err)))
        return st;
    pin_gpus(m, run);
    return COHORT_OK;
}

/* ---- the end -------------------------------------------------------------------- */

/* Wait for every rank without spinning a core: rank 0 merges meanwhile. */
static void wait_all(cohort_mpi *m)
{
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    for (;;) {
        int done = 0;
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (done)
            return;
        if (m->rank == 0 && now_seconds() - m->last_merge >= 1.0)
            merge_live(m);
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* How bad a rank's outcome is: the job's status is the worst. */
static int severity(cohort_status st)
{
    switch (st) {
    case COHORT_OK: return 0;
    case COHORT_ERR_PARTIAL: return 1;
    case COHORT_ERR_INTERRUPTED: return 3;
    default: return 2;
    }
}

cohort_status mpi_finish(cohort_mpi *m, cohort_run *run, cohort_status st,
                         shard_merge_info *summary, cohort_error *err)
{
    char *text = NULL;
    size_t len = 0;
    cohort_error local;
    if (run) {
        char path[COHORT_PATH_MAX + 64];
        results_path(path, sizeof path, m->rank_dir);
        if (run_write_results(run, &local) || file_read_all(path, (size_t)1 << 30, &text, &len,
                                                            &local)) {
            if (severity(st) < 2) {
                st = local.status;
                *err = local;
            }
            text = NULL;
            len = 0;
        }
    }
    if (len > (size_t)1 << 30)
        len = 0;
    wait_all(m);
    int mine[2] = {(int)st, (int)len};
    int *all = m->rank == 0 ? calloc((size_t)m->size * 2, sizeof *all) : NULL;
    int *counts = m->rank == 0 ? calloc((size_t)m->size, sizeof *counts) : NULL;
    int *displs = m->rank == 0 ? calloc((size_t)m->size, sizeof *displs) : NULL;
    MPI_Gather(mine, 2, MPI_INT, all, 2, MPI_INT, 0, MPI_COMM_WORLD);
    char *texts = NULL;
    long total = 0;
    if (m->rank == 0 && all && counts && displs) {
        for (int r = 0; r < m->size; r++) {
            counts[r] = all[2 * r + 1];
            displs[r] = (int)total;
            total += counts[r];
        }
        if (total > (long)1 << 30)
            total = -1;
        texts = total >= 0 ? malloc((size_t)total + 1) : NULL;
    }
    /* Rank 0 tells whether it can take the texts; if not, nobody sends. */
    int can = m->rank == 0 ? texts != NULL : 0;
    MPI_Bcast(&can, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (can)
        MPI_Gatherv(text ? text : "", mine[1], MPI_CHAR, texts, counts, displs, MPI_CHAR, 0,
                    MPI_COMM_WORLD);
    free(text);
    cohort_status job = COHORT_OK;
    if (m->rank == 0) {
        if (!can) {
            job = cohort_fail(err, COHORT_ERR_NOMEM, "out of memory gathering the ranks' results");
        } else {
            int worst = 0, worst_rank = -1;
            for (int r = 0; r < m->size; r++)
                if (severity((cohort_status)all[2 * r]) > worst) {
                    worst = severity((cohort_status)all[2 * r]);
                    worst_rank = r;
                }
            json_value **trees = calloc((size_t)m->size, sizeof *trees);
            int *ranks = calloc((size_t)m->size, sizeof *ranks);
            cohort_status mst = trees && ranks ? COHORT_OK
                                               : cohort_fail(&local, COHORT_ERR_NOMEM, "out of memory");
            for (int r = 0; !mst && r < m->size; r++) {
                char jerr[128];
                ranks[r] = r;
                if (counts[r] == 0)
                    continue; /* a rank that could not write results: its models are missing */
                trees[r] = json_parse(texts + displs[r], (size_t)counts[r], jerr, sizeof jerr);
                if (!trees[r])
                    mst = cohort_fail(&local, COHORT_ERR_INTERNAL, "rank %d sent results that "
                                      "do not parse: %s", r, jerr);
            }
            shard_merge_info info;
            memset(&info, 0, sizeof info);
            if (!mst)
                mst = write_merged(m, trees, ranks, m->size, 0, &info, &local);
            for (int r = 0; trees && r < m->size; r++)
                json_free(trees[r]);
            free(trees);
            free(ranks);
            if (!mst && report_write(m->dir, &local) != COHORT_OK)
                cohort_log(COHORT_LOG_WARN, "no report.html: %s", local.message);
            if (summary)
                *summary = info;
            if (mst) {
                job = mst;
                *err = local;
            } else if (worst == 3 || worst == 2) {
                job = (cohort_status)all[2 * worst_rank];
                if (worst_rank != 0)
                    cohort_fail(err, job, "rank %d: %s", worst_rank,
                                job == COHORT_ERR_INTERRUPTED ? "interrupted; finished models "
                                "are in results.json" : "see its messages");
            } else if (info.not_ok || info.missing) {
                job = cohort_fail(err, COHORT_ERR_PARTIAL, "%d of %d models did not finish",
                                  info.not_ok + info.missing,
                                  info.plan_models ? info.plan_models : info.models);
            }
        }
    }
    free(all);
    free(counts);
    free(displs);
    free(texts);
    int code = (int)job;
    MPI_Bcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD);
    char msg[sizeof err->message];
    if (m->rank == 0)
        str_copy(msg, sizeof msg, code ? err->message : "");
    MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (code)
        cohort_fail(err, (cohort_status)code, "%s", msg);
    return (cohort_status)code;
}
