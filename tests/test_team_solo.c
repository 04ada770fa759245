/*
 * The CPU pool's fallback for a preempted worker (team_solo.h), as a
 * policy: which waits start a stretch on the caller alone (late ones that
 * are a share of the time since the last), how long it lasts, how it grows
 * while late waits recur, and when it starts over.
 * team_run feeds it the clock; here the times are given, so the policy is
 * checked without any timing. That the parts give the same results
 * whoever runs them is tested by every bit-identity test across thread
 * counts and strategies (t_strategies.sh, tsan.sh).
 */
#include "backend/cpu/team_solo.h"
#include "check.h"

static void test_short_waits(void)
{
    team_solo s = {0.0, 0.0, 0.0};
    /* Parts that end within a millisecond of each other: never alone. */
    team_solo_after_wait(&s, 10.0, 10.0 + 0.5 * LATE_WAIT);
    team_solo_after_wait(&s, 11.0, 11.0 + 0.999 * LATE_WAIT);
    CHECK(s.until == 0.0 && s.len == 0.0);
    CHECK(!team_solo_now(&s, 11.0));
}

/* A core lost for 50 ms once a second (SCHED_FIFO's throttling) or now and
 * then: late waits, but a small share of the time, so never alone. */
static void test_rare_waits(void)
{
    team_solo s = {0.0, 0.0, 0.0};
    for (int i = 1; i <= 5; i++) {
        double t2 = 10.0 + i, t1 = t2 - 0.05;
        team_solo_after_wait(&s, t1, t2);
        CHECK(s.until == 0.0 && s.len == 0.0);
        CHECK_NEAR(s.calm, t2, 1e-12);
        CHECK(!team_solo_now(&s, t2));
    }
    /* Just under SOLO_SHARE of the time since the last: still together;
     * just over it: alone. */
    double t2 = 20.0;
    team_solo_after_wait(&s, t2 - 0.999 * SOLO_SHARE * (t2 - s.calm), t2);
    CHECK(s.len == 0.0 && !team_solo_now(&s, t2));
    double t3 = t2 + 1.0;
    team_solo_after_wait(&s, t3 - 1.001 * SOLO_SHARE * (t3 - s.calm), t3);
    CHECK_NEAR(s.len, SOLO_FIRST, 1e-12);
    CHECK(team_solo_now(&s, t3));
}

static void test_first_and_recurring(void)
{
    team_solo s = {0.0, 0.0, 4.99};
    /* A late wait ending at t = 5, a fifth of the time since the pool last
     * ran unhindered: alone until 5 + SOLO_FIRST. */
    team_solo_after_wait(&s, 5.0 - 2 * LATE_WAIT, 5.0);
    CHECK_NEAR(s.len, SOLO_FIRST, 1e-12);
    CHECK_NEAR(s.until, 5.0 + SOLO_FIRST, 1e-12);
    CHECK(team_solo_now(&s, 5.0));
    CHECK(team_solo_now(&s, 5.0 + 0.5 * SOLO_FIRST));
    CHECK(!team_solo_now(&s, 5.0 + SOLO_FIRST));

    /* Late again soon after each stretch: the stretch doubles, to SOLO_MAX. */
    double len = SOLO_FIRST;
    int steps = 0;
    while (len < SOLO_MAX && steps < 64) {
        double t = s.until + 0.01; /* 10 ms after the stretch ended, a fifth of it waiting */
        team_solo_after_wait(&s, t - 2 * LATE_WAIT, t);
        len = len * 2.0 < SOLO_MAX ? len * 2.0 : SOLO_MAX;
        CHECK_NEAR(s.len, len, 1e-12);
        CHECK_NEAR(s.until, t + len, 1e-12);
        steps++;
    }
    CHECK(steps == 6); /* 0.02 -> 0.04, ..., 0.64 -> 1.0 */
    double t = s.until + 0.05;
    team_solo_after_wait(&s, t - 0.01, t);
    CHECK_NEAR(s.len, SOLO_MAX, 1e-12); /* capped */
    CHECK_NEAR(s.until, t + SOLO_MAX, 1e-12);

    /* A long late wait more than a second after the last stretch: the
     * first length again (the core came back, then was lost anew). */
    t = s.until + 1.5;
    team_solo_after_wait(&s, t - 0.2, t);
    CHECK_NEAR(s.len, SOLO_FIRST, 1e-12);
    CHECK_NEAR(s.until, t + SOLO_FIRST, 1e-12);
}

int main(void)
{
    test_short_waits();
    test_rare_waits();
    test_first_and_recurring();
    return check_done("test_team_solo");
}
