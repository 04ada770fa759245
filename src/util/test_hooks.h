/*
 * Test hooks: the places where tests/t_*.sh make a run fail or die on cue
 * (a full disk, a kill between two writes). They are built in only with
 * -DCOHORT_TEST_HOOKS=ON, which `make test` sets; otherwise each is off
 * and the library reads none of their environment variables. Kept in one
 * file (test_hooks.c), as Lua keeps its own in ltests.c.
 */
#ifndef COHORT_TEST_HOOKS_H
#define COHORT_TEST_HOOKS_H

/* Whether the hooks are built in. */
int test_hooks_built(void);
/* This file write fails with ENOSPC: every one after the first
 * COHORT_TEST_DISK_FULL_AFTER writes (t_disk_full.sh). */
int test_hook_disk_full(void);
/* Microseconds to sleep between writing a file and renaming it into place,
 * COHORT_TEST_SLOW_WRITES_US, to kill a run inside that window. */
long test_hook_slow_write_us(void);
/* A file is in place: SIGKILL once COHORT_TEST_KILL_AFTER_WRITES are. */
void test_hook_file_written(void);
/* A model's record is written: SIGKILL once COHORT_TEST_KILL_AFTER_RECORDS
 * are (t_pbt.sh). */
void test_hook_record_written(void);
/* Whether COHORT_PBT_TEST names `what` (t_pbt.sh): "keep" the state each
 * exploit gave a model, "crash" at the worst place for a kill. */
int test_hook_pbt(const char *what);

#endif
