/* cohort train PLAN: train every model of a plan. */
#include "cli/cli.h"
#include "plan/plan.h"
#include "run/run.h"
#include "run/shard.h"
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
    "  --overwrite        DIR holds another run's results (another plan or other\n"
    "                     models): remove them and train (without it: refused)\n"
    "  --shard I/N        train only share I (0 to N-1) of N shares of the models, split\n"
    "                     by cost; `cohort merge` joins the shares' DIRs (docs/cluster.md)\n"
    "  --quiet, -q        print only the final table\n"
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

/* s as one shell word: as it is where it holds only safe characters, else
 * in single quotes. */
static void put_word(strbuf *b, const char *s)
{
    sb_puts(b, " ");
    if (*s && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./=:,+@%") ==
                  strlen(s)) {
        sb_puts(b, s);
        return;
    }
    sb_puts(b, "'");
    for (; *s; s++)
        sb_puts(b, *s == '\'' ? "'\\''" : (char[2]){*s, 0});
    sb_puts(b, "'");
}

/* The command that goes on with this run: its plan, --out, and what else
 * makes it the same run (its --set words, set_words, made while argv's were
 * at hand; its share, its strategy and threads). */
static void resume_command(strbuf *b, const char *plan, const char *out, const char *set_words,
                           const char *shard, const char *strategy, const char *threads)
{
    sb_puts(b, "cohort train");
    put_word(b, plan);
    sb_puts(b, " --out");
    put_word(b, out);
    sb_puts(b, set_words);
    const char *opt[][2] = {{"--shard", shard}, {"--strategy", strategy}, {"--threads", threads}};
    for (int i = 0; i < 3; i++)
        if (opt[i][1]) {
            sb_printf(b, " %s", opt[i][0]);
            put_word(b, opt[i][1]);
        }
    sb_puts(b, " --resume");
}

int cmd_train(int argc, char **argv)
{
    const char *plan_path = NULL, *out = NULL, *strategy = NULL, *threads = NULL, *shard = NULL;
    const char **sets = calloc((size_t)argc, sizeof *sets);
    int n_sets = 0, quiet = 0, resume = 0, overwrite = 0;
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
            if (!strchr(v, '=')) {
                free(sets);
                return cli_usage_error("train", "--set needs KEY=VALUE, e.g. --set defaults.epochs=1");
            }
            sets[n_sets++] = v;
        } else if (cli_opt_value(argc, argv, &i, "--threads", &v)) {
            threads = v;
        } else if (cli_opt_value(argc, argv, &i, "--shard", &v)) {
            shard = v;
        } else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
            quiet = 1;
        } else if (!strcmp(argv[i], "--resume")) {
            resume = 1;
        } else if (!strcmp(argv[i], "--overwrite")) {
            overwrite = 1;
        } else if (argv[i][0] == '-') {
            free(sets);
            static const char *const opts[] = {"--out",    "--strategy", "--set",
                                               "--threads", "--shard",   "--quiet",
                                               "--resume", "--overwrite", "--help", NULL};
            return cli_unknown_option("train", argv[i], i + 1 < argc ? argv[i + 1] : NULL, opts, 1);
        } else if (!plan_path) {
            plan_path = argv[i];
        } else {
            free(sets);
            return cli_usage_error("train", "one plan at a time; '%s' is extra", argv[i]);
        }
    }
    if (!plan_path) {
        free(sets);
        return cli_usage_error("train", "needs PLAN, a plan file, like cohort train "
                                        "examples/seed.yaml (see cohort train --help)");
    }
    if (resume && overwrite) {
        free(sets);
        return cli_usage_error("train", "--resume continues the run in DIR and --overwrite "
                               "replaces it: give one of them");
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
    if (threads && (opt.threads = cli_threads(threads)) < 0) {
        free(sets);
        return cli_usage_error("train", "--threads must be a positive integer, not '%s'", threads);
    }
    opt.resume = resume;
    opt.overwrite = overwrite;
    if (shard) {
        char *end, *end2 = NULL;
        long si = strtol(shard, &end, 10), sn = *end == '/' ? strtol(end + 1, &end2, 10) : 0;
        if (end == shard || *end != '/' || !end2 || end2 == end + 1 || *end2 || si < 0 ||
            sn < 1 || sn > SHARD_MAX) {
            free(sets);
            return cli_usage_error("train", "--shard needs I/N with 0 <= I < N <= %d, e.g. "
                                   "--shard 0/4, not '%s'", SHARD_MAX, shard);
        }
        if (si >= sn) {
            free(sets);
            return cli_usage_error("train", "--shard %s: index must be below the count", shard);
        }
        opt.shard_index = (int)si;
        opt.shard_count = (int)sn;
    }

    cohort_error err;
    cohort_plan *plan = NULL;
    cohort_status st = cohort_plan_load(plan_path, sets, n_sets, &plan, &err);
    /* The --set words of the command that goes on after a stop. */
    char set_words[4096] = "";
    strbuf sw;
    sb_init(&sw);
    for (int i = 0; i < n_sets; i++) {
        sb_puts(&sw, " --set");
        put_word(&sw, sets[i]);
    }
    if (sw.data && (sw.failed || str_copy(set_words, sizeof set_words, sw.data)))
        str_copy(set_words, sizeof set_words, " [the same --set options]");
    sb_free(&sw);
    free(sets);
    if (st)
        return cli_usage_error(NULL, "%s", err.message);
    char out_default[COHORT_PATH_MAX + 8];
    if (!out) {
        snprintf(out_default, sizeof out_default, "runs/%s", cohort_plan_name(plan));
        if (opt.shard_count)
            snprintf(out_default, sizeof out_default, "runs/%s-shard-%d-of-%d",
                     cohort_plan_name(plan), opt.shard_index, opt.shard_count);
        out = out_default;
    }
    opt.out_dir = out;
    progress *prog = progress_create(stderr, quiet, cohort_plan_model_count(plan));
    opt.on_event = progress_event;
    opt.user = prog;
    int ranks = 0; /* > 0: one rank of an MPI job of that many (docs/cluster.md) */
#ifdef COHORT_HAVE_MPI
    cohort_mpi *mpi = NULL;
    if (mpi_launched()) {
        st = mpi_create(&mpi, &err);
        if (!st && opt.shard_count)
            st = cohort_fail(&err, COHORT_ERR_USAGE, "--shard is for separate jobs; under mpirun "
                             "every rank takes its share by itself");
        if (!st)
            st = mpi_prepare(mpi, &opt, out, &err);
        if (st) {
            if (!mpi || mpi_rank(mpi) == 0)
                cli_usage_error(NULL, "%s", err.message);
            mpi_end(mpi);
            progress_free(prog);
            cohort_plan_free(plan);
            return 2;
        }
        ranks = mpi_size(mpi);
    }
#else
    if (mpi_launched()) {
        progress_free(prog);
        cohort_plan_free(plan);
        return cli_usage_error("train", "started as one of several MPI ranks, but this cohort "
                               "is built without MPI: install libopenmpi-dev and build again, "
                               "or run separate jobs with --shard I/N (docs/cluster.md)");
    }
#endif

    if (resume && !ranks && access(out, F_OK) != 0)
        fprintf(stderr, "cohort: --resume: %s does not exist, so there is nothing to resume; "
                "training every model from scratch\n", out);
    cohort_run *run = NULL;
    st = cohort_run_create(plan, &opt, &run, &err);
#ifdef COHORT_HAVE_MPI
    if (mpi)
        st = mpi_ready(mpi, run, st, &err);
#endif
    if (st) {
        int speak = 1;
#ifdef COHORT_HAVE_MPI
        speak = !mpi || mpi_rank(mpi) == 0;
        mpi_end(mpi);
#endif
        cohort_run_free(run);
        progress_free(prog);
        cohort_plan_free(plan);
        if (speak)
            cli_usage_error(NULL, "%s", err.message);
        return 2;
    }
    /* A shard's directory holds its share: another on --resume is refused
     * (the run has only taken the lock and made the folders it already
     * had), and this run's share is recorded before anything trains (a
     * run without --shard had its old marker removed as it claimed the
     * directory, cohort_run_create). */
    if (!ranks && resume)
        st = shard_dir_check(out, opt.shard_index, opt.shard_count, &err);
    if (!st && !ranks && opt.shard_count)
        st = shard_dir_mark(out, opt.shard_index, opt.shard_count, &err);
    if (st) {
        cohort_run_free(run);
        progress_free(prog);
        cohort_plan_free(plan);
        return cli_usage_error(NULL, "%s", err.message);
    }
    if (!quiet) {
        fprintf(stderr, "cohort: training %d model%s of %s, strategy %s, output in %s\n", run->n,
                run->n == 1 ? "" : "s", plan_path, cohort_strategy_str(run->strategy), out);
        if (run->strategy_why[0])
            fprintf(stderr, "cohort: %s\n", run->strategy_why);
    }
    if (opt.shard_count && run->n == 0 && !ranks) {
        /* More shares than models: this one is empty, and done. */
        st = run_write_results(run, &err);
        if (!quiet && !st)
            fprintf(stderr, "cohort: shard %d/%d holds none of the %d models of %s\n",
                    opt.shard_index, opt.shard_count, cohort_plan_model_count(plan), plan_path);
        if (st)
            fprintf(stderr, "cohort: %s\n", err.message);
        cohort_run_free(run);
        progress_free(prog);
        cohort_plan_free(plan);
        return st ? 2 : 0;
    }
    current_run = run;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    st = run->n || !ranks ? cohort_run_train(run, &err) : COHORT_OK;
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    current_run = NULL;
    progress_finish(prog);
    if (!ranks)
        print_results_table(stdout, run);
    int pruned = 0;
    for (int i = 0; i < run->n; i++) {
        pruned += run->m[i].res.state == MODEL_PRUNED;
        /* A model with no reason of its own (pending: the run stopped
         * before it, and says why below) gets no line. */
        if (run->m[i].res.state != MODEL_OK && run->m[i].res.state != MODEL_PRUNED &&
            run->m[i].res.error[0])
            fprintf(stderr, "cohort: model '%s' %s: %s\n", run->m[i].spec->name,
                    model_state_str(run->m[i].res.state), run->m[i].res.error);
    }
    if (pruned && !ranks)
        printf("the scheduler stopped %d of %d models at a rung (status pruned)\n", pruned,
               run->n);
    if ((run->disk_full || st == COHORT_ERR_INTERRUPTED) && !ranks) {
        strbuf cmd;
        sb_init(&cmd);
        resume_command(&cmd, plan_path, out, set_words, shard, strategy, threads);
        fprintf(stderr, run->disk_full ? "cohort: %s: %s\n" : "cohort: %s; to go on: %s\n",
                err.message, cmd.failed || !cmd.data ? "--resume" : cmd.data);
        sb_free(&cmd);
    } else if (st && st != COHORT_ERR_PARTIAL)
        fprintf(stderr, "cohort: %s\n", err.message);
#ifdef COHORT_HAVE_MPI
    if (mpi) {
        /* Rank 0 gathers every rank's models into out/results.json. */
        shard_merge_info sum;
        memset(&sum, 0, sizeof sum);
        st = mpi_finish(mpi, run, st, &sum, &err);
        if (mpi_rank(mpi) == 0) {
            print_results_file_table(stdout, out);
            fprintf(stderr, "cohort: %d ranks trained %d models: %d ok; results in %s\n", ranks,
                    sum.models, sum.models - sum.not_ok, out);
            if (st)
                fprintf(stderr, "cohort: %s\n", err.message);
        }
        mpi_end(mpi);
    }
#endif
    int rc = cli_exit_status(st);
    if (st == COHORT_ERR_PARTIAL)
        rc = 1;
    cohort_run_free(run);
    progress_free(prog);
    cohort_plan_free(plan);
    return rc;
}
