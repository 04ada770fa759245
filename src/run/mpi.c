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
#include "io/results.h"
#include "run/shard.h"
#include "util/util.h"

#include <mpi.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { PEER_RUNNING, PEER_REPORTED, PEER_DEAD };

/* What one rank knows of another. */
typedef struct peer {
    int state;
    char why[256];          /* PEER_DEAD: how it was found */
    struct timespec beat;   /* the last heartbeat time seen */
    double seen;            /* when (our clock) it last changed; 0: never looked */
} peer;

struct cohort_mpi {
    int rank, size, local_rank, local_size;
    char dir[COHORT_PATH_MAX];           /* the shared output directory */
    char rank_dir[COHORT_PATH_MAX + 32]; /* dir/.ranks/R */
    char host[256];
    int lock_fd;                         /* rank 0: dir/.lock */
    cohort_event_fn forward;
    void *forward_user;
    double last_merge, last_beat;
    double dead_after;                   /* seconds without a heartbeat from another node */
    peer *peers;                         /* [size] */
    int started;                         /* MPI_Init was called here */
    int broken;                          /* a rank died: MPI_Finalize would wait for it */
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
    m->peers = calloc((size_t)m->size, sizeof *m->peers);
    if (!m->peers) {
        mpi_end(m);
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    }
    if (gethostname(m->host, sizeof m->host - 1) != 0)
        str_copy(m->host, sizeof m->host, "localhost");
    const char *v = getenv("COHORT_MPI_DEAD_AFTER");
    double after = v ? str_to_double(v, NULL) : 0;
    m->dead_after = after > 0 ? after : 120.0;
    *out = m;
    return COHORT_OK;
}

int mpi_rank(const cohort_mpi *m) { return m->rank; }
int mpi_size(const cohort_mpi *m) { return m->size; }

void mpi_end(cohort_mpi *m)
{
    if (!m)
        return;
    /* With a rank dead, MPI_Finalize would wait for it: the process just
     * ends, and the launcher reports it. */
    if (m->started && !m->broken)
        MPI_Finalize();
    if (m->lock_fd >= 0)
        close(m->lock_fd);
    free(m->peers);
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

/* Merge the n sources into dir/results.json. */
static cohort_status write_merged_from(const cohort_mpi *m, const shard_source *src, int n,
                                       int flags, shard_merge_info *info, cohort_error *err)
{
    strbuf b;
    sb_init(&b);
    char extra[64], path[COHORT_PATH_MAX + 32];
    snprintf(extra, sizeof extra, "\"ranks\": %d", m->size);
    cohort_status st = shard_merge(src, n, flags, extra, &b, info, err);
    results_path(path, sizeof path, m->dir);
    if (!st)
        st = file_write_atomic(path, b.data, b.len, err);
    sb_free(&b);
    return st;
}

/* Rank 0, while the ranks train: DIR/results.json and report.html from
 * what their results.json say now (a dead rank's unfinished models:
 * failed; with others_unfinished, every other rank's too). Best effort: a
 * rank's file not there yet, or a failed merge, leaves the last. */
static void merge_live(cohort_mpi *m, const char *others_unfinished)
{
    m->last_merge = now_seconds();
    json_value **trees = calloc((size_t)m->size, sizeof *trees);
    shard_source *src = calloc((size_t)m->size, sizeof *src);
    int k = 0;
    for (int r = 0; trees && src && r < m->size; r++) {
        char dir[COHORT_PATH_MAX + 64];
        snprintf(dir, sizeof dir, "%s/.ranks/%d", m->dir, r);
        cohort_error ignored;
        if (results_load(dir, &trees[r], &ignored))
            continue;
        src[k].name = "a rank's results";
        src[k].results = trees[r];
        src[k].rank = r;
        src[k].unfinished = m->peers[r].state == PEER_DEAD ? "its rank died before it finished"
                            : r > 0 && others_unfinished ? others_unfinished
                                                         : NULL;
        k++;
    }
    cohort_error ignored;
    if (k && !write_merged_from(m, src, k, SHARD_MERGE_PREFER_ENDED, NULL, &ignored))
        report_write(m->dir, &ignored);
    for (int r = 0; trees && r < m->size; r++)
        json_free(trees[r]);
    free(trees);
    free(src);
}

/* ---- liveness ------------------------------------------------------------------ */

static void alive_path(const cohort_mpi *m, int r, char *buf, size_t n)
{
    if (snprintf(buf, n, "%s/.ranks/%d/alive", m->dir, r) >= (int)n)
        buf[0] = 0;
}

/* This rank is alive: DIR/.ranks/R/alive says "HOST PID", and its time is
 * renewed every two seconds while the rank trains or waits. */
static void heartbeat(cohort_mpi *m)
{
    double now = now_seconds();
    if (now - m->last_beat < 2.0)
        return;
    m->last_beat = now;
    char path[COHORT_PATH_MAX + 64];
    alive_path(m, m->rank, path, sizeof path);
    utimensat(AT_FDCWD, path, NULL, 0);
}

/*
 * Is rank r dead? On this node: its process is gone. On another: its
 * heartbeat has not changed for dead_after seconds of this rank's clock
 * (clocks of nodes need not agree). Fills the peer's why.
 */
static int peer_dead(cohort_mpi *m, int r)
{
    peer *p = &m->peers[r];
    char path[COHORT_PATH_MAX + 64], host[128] = "";
    long pid = 0;
    struct stat sb;
    alive_path(m, r, path, sizeof path);
    if (stat(path, &sb) != 0)
        return 0; /* not there yet: no judgement */
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%127s %ld", host, &pid) != 2)
            host[0] = 0;
        fclose(f);
    }
    if (host[0] && !strcmp(host, m->host) && pid > 0) {
        if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) {
            snprintf(p->why, sizeof p->why, "its process %ld on %s is gone", pid, host);
            return 1;
        }
        return 0;
    }
    double now = now_seconds();
    if (!p->seen || sb.st_mtim.tv_sec != p->beat.tv_sec || sb.st_mtim.tv_nsec != p->beat.tv_nsec) {
        p->beat = sb.st_mtim;
        p->seen = now;
        return 0;
    }
    if (now - p->seen < m->dead_after)
        return 0;
    snprintf(p->why, sizeof p->why, "no heartbeat from process %ld on %s for %d s", pid,
             host[0] ? host : "?", (int)(now - p->seen));
    return 1;
}

static void on_event(const cohort_event *ev, void *user)
{
    cohort_mpi *m = user;
    if (m->forward)
        m->forward(ev, m->forward_user);
    heartbeat(m);
    if (m->rank == 0 && (ev->kind == COHORT_EVENT_MODEL_END ||
                         (ev->kind == COHORT_EVENT_EPOCH_END && now_seconds() - m->last_merge >= 1.0)))
        merge_live(m, NULL);
}

/* ---- preparing the output directory --------------------------------------------- */

static cohort_status lock_dir(cohort_mpi *m, cohort_error *err)
{
    cohort_status st = out_dir_lock(m->dir, &m->lock_fd, err);
    if (!st)
        out_dir_remove_temporaries(m->dir); /* holding the lock: a killed run's */
    return st;
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
    shard_source *src = calloc((size_t)n_old + 1, sizeof *src);
    cohort_status st = trees && src ? COHORT_OK
                                    : cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    char path[COHORT_PATH_MAX + 64];
    int any = 0;
    /* DIR's first: the ranks' own are as new or newer. */
    for (int i = -1; !st && i < n_old; i++) {
        char dir[COHORT_PATH_MAX + 64];
        if (i < 0)
            str_copy(dir, sizeof dir, m->dir);
        else
            snprintf(dir, sizeof dir, "%s/.ranks/%d", m->dir, old[i]);
        results_path(path, sizeof path, dir);
        if (access(path, F_OK) != 0)
            continue;
        st = results_load(dir, &trees[any], err);
        if (!st) {
            src[any].name = i < 0 ? "results.json" : "a rank's results.json";
            src[any].results = trees[any];
            src[any].rank = -1;
            any++;
        }
    }
    if (!st && any)
        st = write_merged_from(m, src, any, SHARD_MERGE_PREFER_ENDED, NULL, err);
    for (int i = 0; trees && i <= n_old; i++)
        json_free(trees[i]);
    free(trees);
    free(src);
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
    char alive[COHORT_PATH_MAX + 64], who[300];
    alive_path(m, m->rank, alive, sizeof alive);
    int wl = snprintf(who, sizeof who, "%s %ld\n", m->host, (long)getpid());
    if (!st)
        st = file_write_atomic(alive, who, (size_t)wl, err);
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
        if (run->devices->dev[usable[j]].kind->dealt_to_ranks)
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
            if (e->planned_bytes + device_ctx_bytes(&run->devices->dev[mine[k]]) <=
                    mem_pool_limit(run->devices->dev[mine[k]].mem_pool) &&
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
    /* This rank's own results now: on --resume its results.json held the
     * merged results of every rank, which it has taken its share from. */
    cohort_error ignored;
    run_write_results(run, &ignored);
    if (m->rank == 0 && run->plan->source) {
        /* The plan that ran, for DIR/report.html (each rank keeps its own copy too). */
        char path[COHORT_PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/plan.yaml", m->dir);
        file_write_atomic(path, run->plan->source, strlen(run->plan->source), NULL);
    }
    return COHORT_OK;
}

/* ---- the end -------------------------------------------------------------------- */

enum { TAG_HEAD = 11, TAG_TEXT, TAG_FINAL };
#define CHUNK (1 << 20) /* results travel in pieces of this many bytes */

typedef struct final_msg {
    int code;
    char message[sizeof ((cohort_error *)0)->message];
} final_msg;

static void pause_briefly(void)
{
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
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

/* Rank r != 0: send this rank's results to rank 0 and wait for the job's
 * status, watching that rank 0 lives. */
static cohort_status finish_rank(cohort_mpi *m, cohort_status st, const char *text, int len,
                                 cohort_error *err)
{
    int head[2] = {(int)st, len}, chunks = (len + CHUNK - 1) / CHUNK;
    MPI_Request *req = calloc((size_t)chunks + 2, sizeof *req);
    final_msg fin;
    if (!req)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    MPI_Isend(head, 2, MPI_INT, 0, TAG_HEAD, MPI_COMM_WORLD, &req[0]);
    for (int c = 0; c < chunks; c++) {
        int n = len - c * CHUNK < CHUNK ? len - c * CHUNK : CHUNK;
        MPI_Isend(text + (size_t)c * CHUNK, n, MPI_CHAR, 0, TAG_TEXT, MPI_COMM_WORLD, &req[c + 1]);
    }
    MPI_Request *got = &req[chunks + 1];
    MPI_Irecv(&fin, (int)sizeof fin, MPI_BYTE, 0, TAG_FINAL, MPI_COMM_WORLD, got);
    double last_check = now_seconds();
    for (;;) {
        int done = 0;
        MPI_Test(got, &done, MPI_STATUS_IGNORE);
        if (done)
            break;
        heartbeat(m);
        if (now_seconds() - last_check >= 1.0) {
            last_check = now_seconds();
            if (peer_dead(m, 0)) {
                m->broken = 1;
                free(req);
                return cohort_fail(err, COHORT_ERR_PARTIAL, "rank 0 died before it gathered "
                                   "the results (%s); this rank's are in %s/results.json, and "
                                   "mpirun ... --resume merges them", m->peers[0].why,
                                   m->rank_dir);
            }
        }
        pause_briefly();
    }
    MPI_Waitall(chunks + 1, req, MPI_STATUSES_IGNORE);
    free(req);
    fin.message[sizeof fin.message - 1] = 0;
    if (fin.code)
        cohort_fail(err, (cohort_status)fin.code, "%s", fin.message);
    return (cohort_status)fin.code;
}

/* Rank 0: the results of rank r, whose header has come: its chunks. */
static void receive_text(int r, int len, strbuf *out, char *scratch)
{
    for (int got = 0; got < len;) {
        int n = len - got < CHUNK ? len - got : CHUNK;
        MPI_Recv(scratch, n, MPI_CHAR, r, TAG_TEXT, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        sb_putn(out, scratch, (size_t)n);
        got += n;
    }
}

/* Rank 0's gathering: per rank, its header (status, length), its text,
 * its tree, its source for the merge and, for a dead rank, why. */
typedef struct gathering {
    strbuf *texts;
    int (*head)[2];
    MPI_Request *req;
    json_value **trees;
    shard_source *src;
    char *scratch;
    char (*why)[400];
    int worst, worst_rank, dead; /* the worst status a rank sent, and which; ranks dead */
} gathering;

/* Rank 0: wait for every other rank's results, or until it is dead. */
static void gather_texts(cohort_mpi *m, gathering *g)
{
    int n = m->size;
    for (int r = 1; r < n; r++)
        MPI_Irecv(g->head[r], 2, MPI_INT, r, TAG_HEAD, MPI_COMM_WORLD, &g->req[r]);
    int pending = n - 1;
    double last_check = now_seconds();
    while (pending > 0) {
        for (int r = 1; r < n; r++) {
            int done = 0;
            if (m->peers[r].state != PEER_RUNNING)
                continue;
            MPI_Test(&g->req[r], &done, MPI_STATUS_IGNORE);
            if (!done)
                continue;
            receive_text(r, g->head[r][1], &g->texts[r], g->scratch);
            m->peers[r].state = PEER_REPORTED;
            pending--;
        }
        if (pending == 0)
            break;
        heartbeat(m);
        if (now_seconds() - last_check >= 1.0) {
            last_check = now_seconds();
            for (int r = 1; r < n; r++)
                if (m->peers[r].state == PEER_RUNNING && peer_dead(m, r)) {
                    m->peers[r].state = PEER_DEAD;
                    m->broken = 1;
                    pending--;
                }
            merge_live(m, NULL);
        }
        pause_briefly();
    }
}

/* Rank 0: each rank's results as a tree (a dead rank's from its directory,
 * where it wrote any), and the worst status the ranks sent. */
static cohort_status parse_ranks(cohort_mpi *m, gathering *g, cohort_error *err)
{
    cohort_status job = COHORT_OK;
    cohort_error local;
    for (int r = 0; r < m->size && !job; r++) {
        g->src[r].rank = r;
        g->src[r].name = "a rank's results";
        if (m->peers[r].state == PEER_DEAD) {
            g->dead++;
            snprintf(g->why[r], sizeof g->why[r], "rank %d died before it finished (%s); "
                     "--resume trains it again", r, m->peers[r].why);
            g->src[r].unfinished = g->why[r];
            char dir[COHORT_PATH_MAX + 64];
            snprintf(dir, sizeof dir, "%s/.ranks/%d", m->dir, r);
            if (results_load(dir, &g->trees[r], &local))
                g->trees[r] = NULL; /* none on disk: its models are missing */
            continue;
        }
        if (severity((cohort_status)g->head[r][0]) > g->worst) {
            g->worst = severity((cohort_status)g->head[r][0]);
            g->worst_rank = r;
        }
        if (g->texts[r].failed) {
            job = cohort_fail(err, COHORT_ERR_NOMEM, "out of memory gathering the results");
        } else if (g->texts[r].len > 0) {
            char jerr[128];
            g->trees[r] = json_parse(g->texts[r].data, g->texts[r].len, jerr, sizeof jerr);
            if (!g->trees[r])
                job = cohort_fail(err, COHORT_ERR_INTERNAL, "rank %d sent results that do not "
                                  "parse: %s", r, jerr);
        }
    }
    return job;
}

/* Rank 0: how the job ended, from the merge (job, info) and the ranks. */
static cohort_status job_verdict(const cohort_mpi *m, const gathering *g, cohort_status job,
                                 const shard_merge_info *info, cohort_error *err)
{
    int n = m->size;
    if (job) {
        /* err says why */
    } else if (g->worst >= 2) {
        job = (cohort_status)g->head[g->worst_rank][0];
        if (g->worst_rank != 0)
            cohort_fail(err, job, "rank %d: %s", g->worst_rank, job == COHORT_ERR_INTERRUPTED
                        ? "interrupted; finished models are in results.json, --resume continues"
                        : "it failed; see its messages");
    } else if (g->dead) {
        int r = 1;
        while (r < n && !g->why[r][0])
            r++;
        job = cohort_fail(err, COHORT_ERR_PARTIAL, "%d rank%s died; %s", g->dead,
                          g->dead == 1 ? "" : "s", r < n ? g->why[r] : "");
    } else if (info->not_ok || info->missing) {
        job = cohort_fail(err, COHORT_ERR_PARTIAL, "%d of %d models did not finish",
                          info->not_ok + info->missing,
                          info->plan_models ? info->plan_models : info->models);
    }
    return job;
}

/* Rank 0: every rank's results (or word that it died), merged into DIR. */
static cohort_status finish_root(cohort_mpi *m, cohort_status st, const char *text, int len,
                                 shard_merge_info *summary, cohort_error *err)
{
    int n = m->size;
    gathering g;
    memset(&g, 0, sizeof g);
    g.texts = calloc((size_t)n, sizeof *g.texts);
    g.head = calloc((size_t)n, sizeof *g.head);
    g.req = calloc((size_t)n, sizeof *g.req);
    g.trees = calloc((size_t)n, sizeof *g.trees);
    g.src = calloc((size_t)n, sizeof *g.src);
    g.scratch = malloc(CHUNK);
    g.why = calloc((size_t)n, sizeof *g.why);
    cohort_error local;
    if (!g.texts || !g.head || !g.req || !g.trees || !g.src || !g.scratch || !g.why) {
        /* Nothing was posted: the ranks wait for a word that rank 0 cannot
         * give; end the job as MPI ends failed jobs. */
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* Now, in case the job ends before the ranks report: this rank stopped
     * by a signal is most often the whole job stopped by mpirun. */
    merge_live(m, st == COHORT_ERR_INTERRUPTED ? "interrupted: the job ended before its rank "
                                                 "reported; --resume continues it"
                                               : NULL);
    for (int r = 0; r < n; r++)
        sb_init(&g.texts[r]);
    sb_putn(&g.texts[0], text, (size_t)len);
    g.head[0][0] = (int)st;
    m->peers[0].state = PEER_REPORTED;
    gather_texts(m, &g);
    cohort_status job = parse_ranks(m, &g, err);
    shard_merge_info info;
    memset(&info, 0, sizeof info);
    if (!job) {
        int k = 0;
        for (int r = 0; r < n; r++)
            if (g.trees[r]) {
                g.src[k] = g.src[r];
                g.src[k++].results = g.trees[r];
            }
        job = k ? write_merged_from(m, g.src, k, 0, &info, err) : COHORT_OK;
        if (!job && report_write(m->dir, &local) != COHORT_OK)
            cohort_log(COHORT_LOG_WARN, "no report.html: %s", local.message);
    }
    job = job_verdict(m, &g, job, &info, err);
    if (summary)
        *summary = info;
    final_msg fin;
    memset(&fin, 0, sizeof fin);
    fin.code = (int)job;
    if (job)
        str_copy(fin.message, sizeof fin.message, err->message);
    for (int r = 1; r < n; r++)
        if (m->peers[r].state == PEER_REPORTED)
            MPI_Send(&fin, (int)sizeof fin, MPI_BYTE, r, TAG_FINAL, MPI_COMM_WORLD);
    for (int r = 0; r < n; r++) {
        sb_free(&g.texts[r]);
        json_free(g.trees[r]);
    }
    free(g.texts);
    free(g.head);
    free(g.req);
    free(g.trees);
    free(g.src);
    free(g.scratch);
    free(g.why);
    return job;
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
        if (run_write_results(run, &local) ||
            file_read_all(path, (size_t)1 << 30, &text, &len, &local)) {
            if (severity(st) < 2) {
                st = local.status;
                *err = local;
            }
            text = NULL;
            len = 0;
        }
    }
    cohort_status job = m->rank == 0 ? finish_root(m, st, text ? text : "", (int)len, summary, err)
                                     : finish_rank(m, st, text ? text : "", (int)len, err);
    free(text);
    return job;
}
