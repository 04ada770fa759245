/*
 * cli: the `cohort` command. main.c dispatches to one file per subcommand;
 * progress.c draws training progress; each subcommand returns the exit
 * status (0 ok, 1 some models failed, 2 usage or input error, 130 stopped).
 */
#ifndef COHORT_CLI_H
#define COHORT_CLI_H

#include "cohort.h"

#include <stdio.h>

/* The program as it was run (main's argv[0], "build/cohort"), for the
 * commands a message tells the user to run; "cohort" before main sets it. */
extern const char *cli_program;

int cmd_train(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_devices(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_export(int argc, char **argv);
/* The table of results of DIR/results.json, in its order (cmd_merge.c). */
void print_results_file_table(FILE *out, const char *dir);

/* Print "cohort: message" to stderr and return 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "cohort CMD: unknown option 'ARG'" and return 2, with the closest of
 * options (NULL-terminated) as a suggestion; where the command takes_set, an
 * option named as a model key ("--epochs 3", "--lr") gets the --set form,
 * with its value (after '=', else next, the argument after it, or NULL). */
int cli_unknown_option(const char *cmd, const char *arg, const char *next,
                       const char *const *options, int takes_set);
/* Exit status for a library status. */
int cli_exit_status(cohort_status st);
/* argv[i] is "--name" and a value follows, or "--name=value": set *val.
 * A value missing (the option last) or empty is a usage error: reported
 * here, and the process exits 2. argv[0] names the command. */
int cli_opt_value(int argc, char **argv, int *i, const char *name, const char **val);
/* The value of --threads (1 to 4096), or -1 when v is not one. */
int cli_threads(const char *v);

/* The arguments `cohort train` and `cohort plan` share (plan_args.c): PLAN,
 * --set KEY=VALUE (repeatable, in order), --strategy S, --threads N. */
typedef struct cli_plan_args {
    const char *plan;         /* NULL: not given */
    const char **sets;        /* the --set values, [n_sets] (malloc'd) */
    int n_sets;
    const char *strategy;     /* --strategy as given, NULL: not given */
    const char *threads;      /* --threads as given, NULL: not given */
    cohort_strategy strategy_value;
    int threads_value;
} cli_plan_args;
/* Room for the --set values of argc arguments: 0, or 2 (out of memory). */
int cli_plan_args_init(cli_plan_args *a, int argc);
void cli_plan_args_free(cli_plan_args *a);
/* Take argv[*i] (and its value) where it is one of the shared arguments:
 * returns 1 taken (*rc: 0, or the exit status of a usage error, said), 0
 * not one of them (an option the command may know). cmd names the command
 * in messages. */
int cli_plan_arg(const char *cmd, cli_plan_args *a, int argc, char **argv, int *i, int *rc);
/* After the last argument: PLAN must be given (else a usage error, its exit
 * status returned); --strategy and --threads go into opt. */
int cli_plan_args_apply(const char *cmd, const cli_plan_args *a, cohort_run_options *opt);

/* Progress display. */
typedef struct progress progress;
progress *progress_create(FILE *out, int quiet, int n_models);
void progress_event(const cohort_event *ev, void *user); /* a cohort_event_fn */
void progress_finish(progress *p);
void progress_free(progress *p);

/* The table of results printed at the end of a run. */
void print_results_table(FILE *out, const cohort_run *run);

#endif
