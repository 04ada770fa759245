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
 */
#ifndef COHORT_TEAM_SOLO_H
#define COHORT_TEAM_SOLO_H

#include <math.h>

#define LATE_WAIT 1e-3
#define SOLO_FIRST 0.02
#define SOLO_MAX 1.0

typedef struct team_solo {
    double until; /* jobs run on the caller alone until this time */
    double len;   /* seconds of the last such stretch; 0: none yet */
} team_solo;

/* Whether a job posted at time t runs on the caller alone. */
static inline int team_solo_now(const team_solo *s, double t) { return t < s->until; }

/* After the caller waited for claimed parts from t1 to t2: a first stretch
 * alone, or a longer one when the last ended less than a second ago. */
static inline void team_solo_after_wait(team_solo *s, double t1, double t2)
{
    if (t2 - t1 < LATE_WAIT)
        return;
    int again = s->len > 0.0 && t2 - s->until < 1.0;
    s->len = again ? fmin(2.0 * s->len, SOLO_MAX) : SOLO_FIRST;
    s->until = t2 + s->len;
}

#endif
