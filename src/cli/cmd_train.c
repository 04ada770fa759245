/* cohort train PLAN: train every model of a plan. */
#include "cli/cli.h"
#include "plan/plan.h"
#include "run/run.h"
#include "util/util.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *help =
    "usage: cohort train PLAN [options]\n"
    "\n"
    "Train every model of PLAN and write the output directory:\n"
    "  results.json, models/NAME.safetensors (+ NAME.best.safetensors), history/NAME.csv\n"
    "\n"
    "options:\n"
    "  --out DIR          output directory (default: runs/<plan name>)\n"
    "  --strategy S       auto | sequential | threads | processes | fused (default: the plan's)\n"
    "  --set KEY=VALUE    override a plan key by dotted path, e.g. --set defaults.epochs=1\n"
    "                     (repeatable; VALUE is YAML: 0.5, [1, 2], {name: sgd})\n"
    "  --threads N        CPU threads to use in all (default: every core)\n"
    "  --resume           continue the unfinished models of a previous run in DIR\n"
    "  --quiet            print only the final table\n"
    "  -h, --help         show this help\n"
    "\n"
    "exit status: 0 all models trained, 1 some failed (the rest finished),\n"
    "             2 usage or input error (nothing trained), 130 interrupted\n";

static cohort_run *current_run;

static void on_signal(int sig)
{
    (void)sig;
    if (current_run)
        cohort_run_request_stop(current_run);
}

int cmd_train(int argc, char **argv)
{
    const char *plan_path = NULL, *out = NULL, *strategy = NULL, *threads = NULL;
    const char **sets = calloc((size_t)argc, sizeof *sets);
    int n_sets = 0, quiet = 0, resume = 0;
    if (!sets)
        return 2;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(help, stdout);
            free(sets);
            return 0;
        } else if (cli_opt_value(argc, argv, &i, "--out", &v)) {
            out = v;
        } else if (cli_opt_value(argc, argv, &i, "--strategy", &v)) {
            strategy = v;
        } else if (cli_opt_value(argc, argv, &i, "--set", &v)) {
            if (!v || !strchr(v, '=')) {
                free(sets);
                return cli_usage_error("train", "--set needs KEY=VALUE, e.g. --set defaults.epochs=1");
            }
            sets[n_sets++] = v;
        } else if (cli_opt_value(argc, argv, &i, "--threads", &v)) {
            threads = v;
        } else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
            quiet = 1;
        } else if (!strcmp(argv[i], "--resume")) {
            resume = 1;
        } else if (argv[i][0] == '-') {
            free(sets);
            return cli_usage_error("train", "unknown option '%s' (see cohort train --help)",
                                   argv[i]);
        } else if (!plan_path) {
            plan_path = argv[i];
        } else {
            free(sets);
            return cli_usage_error("train", "one plan at a time; '%s' is extra", argv[i]);
        }
    }
    if (!plan_path) {
        free(sets);
        fputs(help, stderr);
        return 2;
    }
    if ((out && !*out) || (strategy && !*strategy) || (threads && !*threads)) {
        free(sets);
        return cli_usage_error("train", "an option is missing its value (see cohort train --help)");
    }
    cohort_run_options opt;
    cohort_run_options_init(&opt);
    if (strategy) {
        int s = strategy_parse(strategy);
        if (s < 0) {
            free(sets);
            return cli_usage_error("train",
                                   "unknown strategy '%s': use auto, sequential, threads, "
                                   "processes or fused",
                                   strategy);
        }
        opt.strategy = (cohort_strategy)s;
    }
    if (threads) {
        char *end;
        long t = strtol(threads, &end, 10);
        if (*end || t < 1 || t > 4096) {
            free(sets);
            return cli_usage_error("train", "--threads must be a positive integer, not '%s'",
                                   threads);
        }
        opt.threads = (int)t;
    }
    opt.resume = resume;

    cohort_error err;
    cohort_plan *plan = NULL;
    cohort_status st = cohort_plan_load(plan_path, sets, n_sets, &plan, &err);
    free(sets);
    if (st)
        return cli_usage_error(NULL, "%s", err.message);
    char out_default[COHORT_PATH_MAX + 8];
    if (!out) {
        snprintf(out_default, sizeof out_default, "runs/%s", cohort_plan_name(plan));
        out = out_default;
    }
    opt.out_dir = out;
    progress *prog = progress_create(stderr, quiet, cohort_plan_model_count(plan));
    opt.on_event = progress_event;
    opt.user = prog;

    cohort_run *run = NULL;
    st = cohort_run_create(plan, &opt, &run, &err);
    if (st) {
        progress_free(prog);
        cohort_plan_free(plan);
        return cli_usage_error(NULL, "%s", err.message);
    }
    if (!quiet)
        fprintf(stderr, "cohort: training %d model%s of %s on %s (%s), output in %s\n",
                run->n, run->n == 1 ? "" : "s", plan_path, "cpu",
                cohort_strategy_str(run->strategy), out);
    current_run = run;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    st = cohort_run_train(run, &err);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    current_run = NULL;
    progress_finish(prog);
    print_results_table(stdout, run);
    for (int i = 0; i < run->n; i++)
        if (run->m[i].res.state != MODEL_OK)
            fprintf(stderr, "cohort: model '%s' %s: %s\n", run->m[i].spec->name,
                    model_state_str(run->m[i].res.state), run->m[i].res.error);
    if (st && st != COHORT_ERR_PARTIAL)
        fprintf(stderr, "cohort: %s\n", err.message);
    int rc = cli_exit_status(st);
    if (st == COHORT_ERR_PARTIAL)
        rc = 1;
    cohort_run_free(run);
    progress_free(prog);
    cohort_plan_free(plan);
    return rc;
}
