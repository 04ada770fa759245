/*
 * The arguments `cohort train` and `cohort plan` share: PLAN, --set
 * KEY=VALUE (repeatable), --strategy S and --threads N, each checked where
 * it stands on the command line, with one message for both commands.
 */
#include "cli/cli.h"
#include "plan/plan.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

int cli_plan_args_init(cli_plan_args *a, int argc)
{
    memset(a, 0, sizeof *a);
    a->sets = calloc((size_t)(argc > 0 ? argc : 1), sizeof *a->sets);
    return a->sets ? 0 : 2;
}

void cli_plan_args_free(cli_plan_args *a)
{
    free(a->sets);
    a->sets = NULL;
}

int cli_plan_arg(const char *cmd, cli_plan_args *a, int argc, char **argv, int *i, int *rc)
{
    const char *v;
    *rc = 0;
    if (cli_opt_value(argc, argv, i, "--set", &v)) {
        if (!strchr(v, '='))
            *rc = cli_usage_error(cmd, "--set needs KEY=VALUE, e.g. --set defaults.epochs=1");
        else
            a->sets[a->n_sets++] = v;
    } else if (cli_opt_value(argc, argv, i, "--strategy", &v)) {
        int s = strategy_parse(v);
        if (s < 0)
            *rc = cli_usage_error(cmd, "unknown strategy '%s': use auto, sequential, threads, "
                                       "processes or fused", v);
        a->strategy = v;
        a->strategy_value = (cohort_strategy)(s < 0 ? 0 : s);
    } else if (cli_opt_value(argc, argv, i, "--threads", &v)) {
        if ((a->threads_value = cli_threads(v)) < 0)
            *rc = cli_usage_error(cmd, "--threads must be a positive integer, not '%s'", v);
        a->threads = v;
    } else if (argv[*i][0] == '-') {
        return 0;
    } else if (!a->plan) {
        a->plan = argv[*i];
    } else {
        *rc = cli_usage_error(cmd, "one plan at a time; '%s' is extra", argv[*i]);
    }
    return 1;
}

int cli_plan_args_apply(const char *cmd, const cli_plan_args *a, cohort_run_options *opt)
{
    if (!a->plan)
        return cli_usage_error(cmd, "needs PLAN, a plan file, like cohort %s examples/seed.yaml "
                                    "(see cohort %s --help)", cmd, cmd);
    if (a->strategy)
        opt->strategy = a->strategy_value;
    if (a->threads)
        opt->threads = a->threads_value;
    return 0;
}
