/*
 * The processes strategy (see run/jobs.h): one worker process per job,
 * forked after the data is loaded, reporting down a pipe; the parent
 * applies the reports and fails the models of a worker that died.
 */
#include "backend/cpu/cpu.h"
#include "run/jobs.h"
#include "util/util.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static int read_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

static int launch(job_runner *s, job *j, int threads)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        /* A worker never outlives its parent. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1)
            _exit(1);
        /* ps and top name the model a worker trains (15 bytes at most). */
        char title[16];
        snprintf(title, sizeof title, "cohort:%.8s", s->run->m[j->idx[0]].spec->name);
        prctl(PR_SET_NAME, title);
        close(fds[0]);
        for (int i = 0; i < s->n_jobs; i++)
            if (s->jobs[i].fd >= 0)
                close(s->jobs[i].fd);
        cohort_device *d = &s->run->devices->dev[j->device];
        /* The worker sees only its GPU, set before any GPU code is loaded;
         * there that GPU is device 0. */
        if (d->kind->visible_env) {
            char vis[16];
            snprintf(vis, sizeof vis, "%d", d->be_dev);
            setenv(d->kind->visible_env, vis, 1);
            d->be_dev = 0;
            mem_pool_rebind(d->mem_pool, 0);
            /* A preallocated slab is taken here, by each worker on the GPU:
             * it holds this job's group and its context's bytes, not the
             * whole limit again. */
            if (mem_pool_policy(d->mem_pool) == COHORT_MEM_PREALLOCATE)
                pool_shrink(d->mem_pool, mem_pool_charge(j->bytes) + device_ctx_bytes(d));
        }
        j->threads = threads;
        backend_cpu_set_blas_threads(backend_cpu_blas_threads(threads));
        s->out_fd = fds[1];
        job_run(s, j);
        close(fds[1]);
        _exit(0);
    }
    close(fds[1]);
    j->pid = pid;
    j->fd = fds[0];
    j->state = 1;
    return 0;
}

/* The worker of j ended: every model without a final report failed. */
static void reap(job_runner *s, job *j)
{
    int status = 0;
    while (waitpid(j->pid, &status, 0) < 0 && errno == EINTR)
        ;
    close(j->fd);
    j->fd = -1;
    j->state = 2;
    s->cores_used[j->device] -= j->threads;
    job_unreserve(s, j);
    char why[256];
    if (WIFSIGNALED(status))
        snprintf(why, sizeof why, "its worker process (pid %d) was killed by signal %d (%s)",
                 (int)j->pid, WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(why, sizeof why, "its worker process (pid %d) exited with status %d before it "
                 "finished", (int)j->pid, WEXITSTATUS(status));
    cohort_run *run = s->run;
    pthread_mutex_lock(&run->lock);
    for (int k = 0; k < j->n; k++) {
        model_entry *e = &run->m[j->idx[k]];
        if (e->done)
            continue;
        msg m;
        memset(&m, 0, sizeof m);
        m.type = MSG_FINAL;
        m.model = e->index;
        m.state = run->stop ? MODEL_INTERRUPTED : MODEL_FAILED;
        m.epochs_run = e->res.epochs_run;
        m.best_epoch = e->res.best_epoch;
        m.best = e->res.best;
        m.seconds = e->res.seconds;
        m.test_loss = m.test_accuracy = m.test_mae = m.test_rmse = NAN;
        m.peak_bytes = RUN_PEAK_UNKNOWN; /* the worker held its group, but said nothing of it */
        str_copy(m.best_weights, sizeof m.best_weights, e->best_weights);
        str_copy(m.error, sizeof m.error,
                 !run->stop          ? why
                 : run->out_dir[0] ? "stopped before its worker reported; its last checkpoint is saved"
                                   : "stopped before its worker reported");
        run_apply_msg(run, &m, NULL);
    }
    pthread_mutex_unlock(&run->lock);
}

cohort_status jobs_run_processes(job_runner *s, cohort_error *err)
{
    cohort_run *run = s->run;
    int forwarded = 0;
    for (;;) {
        int running = 0, pending = 0, waiting = 0;
        for (int i = 0; i < s->n_jobs; i++) {
            running += s->jobs[i].state == 1;
            waiting += s->jobs[i].state == 0;
        }
        for (int i = 0; i < s->n_jobs; i++) {
            job *j = &s->jobs[i];
            if (j->state == 0 && !run->stop) {
                /* The last job may take every core the others left (on a
                 * CPU part, those of its part). */
                int threads = job_threads(s, j, waiting == 1 ? (s->concurrency - running) *
                                                                   s->threads_per_job
                                                             : s->threads_per_job);
                if (running < s->concurrency && threads > 0 && job_reserve(s, j)) {
                    waiting--;
                    running++;
                    j->threads = threads;
                    s->cores_used[j->device] += threads;
                    if (launch(s, j, threads) != 0) {
                        s->cores_used[j->device] -= threads;
                        job_unreserve(s, j);
                        return cohort_fail(err, COHORT_ERR_INTERNAL, "cannot start a worker: %s",
                                           strerror(errno));
                    }
                } else {
                    pending++;
                }
            }
        }
        if (running == 0 && (pending == 0 || run->stop))
            break;
        if (run->stop && !forwarded) {
            /* Workers finish their step and report; they may not have seen
             * the signal if it was sent to this process alone. */
            for (int i = 0; i < s->n_jobs; i++)
                if (s->jobs[i].state == 1)
                    kill(s->jobs[i].pid, SIGTERM);
            forwarded = 1;
        }
        struct pollfd pf[64];
        job *pj[64];
        int n = 0;
        for (int i = 0; i < s->n_jobs && n < 64; i++)
            if (s->jobs[i].state == 1) {
                pf[n].fd = s->jobs[i].fd;
                pf[n].events = POLLIN;
                pj[n++] = &s->jobs[i];
            }
        int r = poll(pf, (nfds_t)n, 200);
        if (r < 0 && errno != EINTR)
            return cohort_fail(err, COHORT_ERR_INTERNAL, "poll: %s", strerror(errno));
        for (int i = 0; r > 0 && i < n; i++) {
            if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            msg m;
            if (read_all(pf[i].fd, &m, sizeof m) != 0) {
                reap(s, pj[i]);
                continue;
            }
            int64_t *conf = NULL;
            int bad = m.model < 0 || m.model >= run->n || m.n_confusion < 0 ||
                      m.n_confusion > MAX_CONFUSION_CLASSES * MAX_CONFUSION_CLASSES;
            if (!bad && m.n_confusion > 0) {
                conf = malloc((size_t)m.n_confusion * sizeof *conf);
                bad = !conf || read_all(pf[i].fd, conf, (size_t)m.n_confusion * sizeof *conf);
            }
            if (bad) {
                free(conf);
                kill(pj[i]->pid, SIGKILL);
                reap(s, pj[i]);
                continue;
            }
            m.error[sizeof m.error - 1] = 0;
            m.weights[sizeof m.weights - 1] = 0;
            m.best_weights[sizeof m.best_weights - 1] = 0;
            m.no_space[sizeof m.no_space - 1] = 0;
            pthread_mutex_lock(&run->lock);
            run_apply_msg(run, &m, conf);
            pthread_mutex_unlock(&run->lock);
            free(conf);
        }
    }
    return COHORT_OK;
}
