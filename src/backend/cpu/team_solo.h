/*
 * The CPU pool's fallback for a preempted worker (backend_cpu.c, team_run):
 * a caller that waited LATE_WAIT seconds or more for a part claimed by
 * another thread (its claimer lost its core mid-part: parts of one job end
 * within tens of microseconds of each other otherwise) runs every part
 * itself for a while, SOLO_FIRST seconds, doubled up to SOLO_MAX while such
 * waits come back within a second of the end of the last stretch. A worker
 * that shares its core with another process is preempted every few
 * milliseconds, and each time it held a part, the caller had waited for the
 * scheduler. The parts are the same either way, so are the results.
 *
 * Only waits that cost a share of the time: a late wait starts a stretch
 * when it is at least SOLO_SHARE of the time since the pool last ran
 * unhindered (the end of the last stretch, or of the last late wait). A
 * stretch alone gives up half of two cores' speed, which a wait costs only
 * where it takes half the time; SOLO_SHARE is well below that, so a worker
 * that loses its core again and again to a busy machine still sends the
 * caller on alone. A core lost now and then (a hypervisor's hiccup;
 * SCHED_FIFO's throttling, 50 ms a second) had started a stretch each time,
 * doubled up to a second: one epoch of the Keras convnet under SCHED_FIFO
 * ran 2.3 of its 7.0 s on one core after five such waits, and took 7.2-7.3
 * s against 5.9-6.3 s with this rule (bench/README, 2026-12-05).
 */
#ifndef COHORT_TEAM_SOLO_H
#define COHORT_TEAM_SOLO_H

#include <math.h>

#define LATE_WAIT 1e-3
#define SOLO_FIRST 0.02
#define SOLO_MAX 1.0
#define SOLO_SHARE 0.1

typedef struct team_solo {
    double until; /* jobs run on the caller alone until this time */
    double len;   /* seconds of the last such stretch; 0: none yet */
    double calm;  /* since when the pool ran unhindered: the end of the last
                   * stretch or late wait (0: since it began) */
} team_solo;

/* Whether a job posted at time t runs on the caller alone. */
static inline int team_solo_now(const team_solo *s, double t) { return t < s->until; }

/* After the caller waited for claimed parts from t1 to t2: nothing where the
 * wait was short or a small share of the time since the last one; else a
 * first stretch alone, or a longer one when the last ended less than a
 * second ago. */
static inline void team_solo_after_wait(team_solo *s, double t1, double t2)
{
    if (t2 - t1 < LATE_WAIT)
        return;
    if (t2 - t1 < SOLO_SHARE * (t2 - s->calm)) {
        s->calm = t2;
        return;
    }
    int again = s->len > 0.0 && t2 - s->until < 1.0;
    s->len = again ? fmin(2.0 * s->len, SOLO_MAX) : SOLO_FIRST;
    s->until = t2 + s->len;
    s->calm = s->until;
}

#endif
