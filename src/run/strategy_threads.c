/*
 * The sequential and threads strategies (see run/jobs.h): jobs one after
 * another on this thread, or several at once on threads of their own, which
 * help the jobs still running once none is left to start.
 */
#include "backend/cpu/cpu.h"
#include "run/jobs.h"
#include "util/util.h"

#include <pthread.h>

void jobs_run_sequential(job_runner *s)
{
    for (int i = 0; i < s->n_jobs && !s->run->stop; i++) {
        job *j = &s->jobs[i];
        job_reserve(s, j);
        j->threads = job_threads(s, j, s->threads_per_job);
        backend_cpu_set_blas_threads(backend_cpu_blas_threads(j->threads));
        j->state = 1;
        job_run(s, j);
        j->state = 2;
        job_unreserve(s, j);
    }
}

static void *thread_main(void *arg)
{
    job_runner *s = arg;
    cohort_run *run = s->run;
    pthread_mutex_lock(&run->lock);
    for (;;) {
        job *pick = NULL;
        int pending = 0;
        for (int i = 0; i < s->n_jobs; i++) {
            job *j = &s->jobs[i];
            if (j->state != 0)
                continue;
            pending++;
            if (job_threads(s, j, s->threads_per_job) > 0 && job_reserve(s, j)) {
                pick = j;
                break;
            }
        }
        if (run->stop)
            break;
        if (pending == 0) {
            /* Nothing left to start: help a job still running (one that
             * started first may be the largest) where its device has a
             * core free, and then look again. */
            job *h = NULL;
            int slot = -1;
            for (int i = 0; i < s->n_jobs && !h; i++)
                if (s->jobs[i].state == 1 && s->jobs[i].live &&
                    job_threads(s, &s->jobs[i], 1) > 0 &&
                    (slot = group_help_join(s->jobs[i].live)) >= 0)
                    h = &s->jobs[i];
            if (!h)
                break;
            train_group *g = h->live;
            int d = h->device;
            s->cores_used[d]++;
            pthread_mutex_unlock(&run->lock);
            cpu_set_t saved;
            int bound = device_bind_thread(run->devices, &run->devices->dev[d], &saved);
            group_help_run(g, slot);
            device_unbind_thread(bound, &saved);
            pthread_mutex_lock(&run->lock);
            s->cores_used[d]--;
            continue;
        }
        if (!pick) {
            /* Everything left waits for memory another job holds. */
            if (s->running == 0)
                break;
            pthread_cond_wait(&s->cond, &run->lock);
            continue;
        }
        pick->state = 1;
        pick->starting = 1;
        s->starting[pick->device]++;
        pick->threads = job_threads(s, pick, s->threads_per_job);
        s->cores_used[pick->device] += pick->threads;
        s->running++;
        pthread_mutex_unlock(&run->lock);
        job_run(s, pick);
        pthread_mutex_lock(&run->lock);
        pick->state = 2;
        s->running--;
        s->cores_used[pick->device] -= pick->threads;
        job_unreserve(s, pick);
        pthread_cond_broadcast(&s->cond);
    }
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&run->lock);
    return NULL;
}

cohort_status jobs_run_threads(job_runner *s, cohort_error *err)
{
    pthread_t t[64];
    int n = s->concurrency < 64 ? s->concurrency : 64, started = 0;
    for (int i = 0; i < n; i++) {
        if (pthread_create(&t[i], NULL, thread_main, s) != 0)
            break;
        started++;
    }
    if (started == 0)
        return cohort_fail(err, COHORT_ERR_INTERNAL, "cannot start worker threads");
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
    return COHORT_OK;
}
