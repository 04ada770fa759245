/*
 * The CPU pool's fallback for a preempted worker (team_solo.h), as a
 * policy: which waits start a stretch on the caller alone, how long it
 * lasts, how it grows while late waits recur, and when it starts over.
 * team_run feeds it the clock; here the times are given, so the policy is
 * checked without any timing. That the parts give the same results
 * whoever runs them is tested by every bit-identity test across thread
 * counts and strategies (t_strategies.sh, tsan.sh).
 */
#include "backend/cpu/team_solo.h"
#include "check.h"

static void test_short_waits(void)
{
    team_solo s = {0.0, 0.0};
    /* Parts that end within a millisecond of each other: never alone. */
    team_solo_after_wait(&s, 10.0, 10.0 + 0.5 * LATE_WAIT);
    team_solo_after_wait(&s, 11.0, 11.0 + 0.999 * LATE_WAIT);
    CHECK(s.until == 0.0 && s.len == 0.0);
    CHECK(!team_solo_now(&s, 11.0));
}

static void test_first_and_recurring(void)
{
    team_solo s = {0.0, 0.0};
    /* A late wait ending at t = 5: alone until 5 + SOLO_FIRST. */
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
        double t = s.until + 0.1; /* 0.1 s after the stretch ended */
        team_solo_after_wait(&s, t - 2 * LATE_WAIT, t);
        len = len * 2.0 < SOLO_MAX ? len * 2.0 : SOLO_MAX;
        CHECK_NEAR(s.len, len, 1e-12);
        CHECK_NEAR(s.until, t + len, 1e-12);
        steps++;
    }
    CHECK(steps == 6); /* 0.02 -> 0.04, ..., 0.64 -> 1.0 */
    double t = s.until + 0.5;
    team_solo_after_wait(&s, t - 2 * LATE_WAIT, t);
    CHECK_NEAR(s.len, SOLO_MAX, 1e-12); /* capped */
    CHECK_NEAR(s.until, t + SOLO_MAX, 1e-12);

    /* A late wait more than a second after the last stretch: the first
     * length again (the core came back, then was lost anew). */
    t = s.until + 1.5;
    team_solo_after_wait(&s, t - 2 * LATE_WAIT, t);
    CHECK_NEAR(s.len, SOLO_FIRST, 1e-12);
    CHECK_NEAR(s.until, t + SOLO_FIRST, 1e-12);
}

int main(void)
{
    test_short_waits();
    test_first_and_recurring();
    return check_done("test_team_solo");
}
