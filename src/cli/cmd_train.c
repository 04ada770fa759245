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

/* The command that goes on with this run, after a space (" build/cohort
 * train ...", the program as it was run): its plan, --out, and what else
 * makes it the same run (its --set words, set_words, made while argv's were
 * at hand; its share, its strategy and threads). */
static void resume_command(strbuf *b, const char *plan, const char *out, const char *set_words,
                           const char *shard, const char *strategy, const char *threads)
{
    put_word(b, cli_program); /* build/cohort, as it was run */
    sb_puts(b, " train");
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

/* What cohort train was asked (its arguments), and what it holds while it
 * trains. */
typedef struct train_cmd {
    cli_plan_args args;
    const char *out, *shard;
    int quiet;
    char out_default[COHORT_PATH_MAX + 8];
    char set_words[4096]; /* the --set words of the command that goes on after a stop */
    cohort_run_options opt;
    cohort_plan *plan;
    progress *prog;
    cohort_run *run;
    int ranks; /* > 0: one rank of an MPI job of that many (docs/cluster.md) */
#ifdef COHORT_HAVE_MPI
    cohort_mpi *mpi;
#endif
    cohort_error err;
} train_cmd;

/* Release what t holds (any of it may be NULL). */
static void train_cmd_free(train_cmd *t)
{
    cohort_run_free(t->run);
    progress_free(t->prog);
    cohort_plan_free(t->plan);
    cli_plan_args_free(&t->args);
}

/* --shard I/N into opt: 0, or the exit status of a usage error. */
static int parse_shard(const char *shard, cohort_run_options *opt)
{
    char *end, *end2 = NULL;
    long si = strtol(shard, &end, 10), sn = *end == '/' ? strtol(end + 1, &end2, 10) : 0;
    if (end == shard || *end != '/' || !end2 || end2 == end + 1 || *end2 || si < 0 || sn < 1 ||
        sn > SHARD_MAX)
        return cli_usage_error("train", "--shard needs I/N with 0 <= I < N <= %d, e.g. "
                               "--shard 0/4, not '%s'", SHARD_MAX, shard);
    if (si >= sn)
        return cli_usage_error("train", "--shard %s: index must be below the count", shard);
    opt->shard_index = (int)si;
    opt->shard_count = (int)sn;
    return 0;
}

/* The command line into t: -1 to go on, else the exit status (help: 0). */
static int parse_args(train_cmd *t, int argc, char **argv)
{
    int resume = 0, overwrite = 0, rc;
    if (cli_plan_args_init(&t->args, argc))
        return 2;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(help, stdout);
            return 0;
        } else if (cli_opt_value(argc, argv, &i, "--out", &v)) {
            t->out = v;
        } else if (cli_opt_value(argc, argv, &i, "--shard", &v)) {
            t->shard = v;
        } else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
            t->quiet = 1;
        } else if (!strcmp(argv[i], "--resume")) {
            resume = 1;
        } else if (!strcmp(argv[i], "--overwrite")) {
            overwrite = 1;
        } else if (cli_plan_arg("train", &t->args, argc, argv, &i, &rc)) {
            if (rc)
                return rc;
        } else {
            static const char *const opts[] = {"--out",    "--strategy", "--set",
                                               "--threads", "--shard",   "--quiet",
                                               "--resume", "--overwrite", "--help", NULL};
            return cli_unknown_option("train", argv[i], i + 1 < argc ? argv[i + 1] : NULL, opts, 1);
        }
    }
    cohort_run_options_init(&t->opt);
    if ((rc = cli_plan_args_apply("train", &t->args, &t->opt)))
        return rc;
    if (resume && overwrite)
        return cli_usage_error("train", "--resume continues the run in DIR and --overwrite "
                               "replaces it: give one of them");
    t->opt.resume = resume;
    t->opt.overwrite = overwrite;
    if (t->shard && (rc = parse_shard(t->shard, &t->opt)))
        return rc;
    return -1;
}

/* The plan, with its --set words kept for the command that goes on after a
 * stop, and the output directory: -1 to go on, else the exit status. */
static int load_plan(train_cmd *t)
{
    const cli_plan_args *a = &t->args;
    cohort_status st = cohort_plan_load(a->plan, a->sets, a->n_sets, &t->plan, &t->err);
    strbuf sw;
    sb_init(&sw);
    for (int i = 0; i < a->n_sets; i++) {
        sb_puts(&sw, " --set");
        put_word(&sw, a->sets[i]);
    }
    if (sw.data && (sw.failed || str_copy(t->set_words, sizeof t->set_words, sw.data)))
        str_copy(t->set_words, sizeof t->set_words, " [the same --set options]");
    sb_free(&sw);
    if (st)
        return cli_usage_error(NULL, "%s", t->err.message);
    if (!t->out) {
        const char *name = cohort_plan_name(t->plan);
        if (t->opt.shard_count)
            snprintf(t->out_default, sizeof t->out_default, "runs/%s-shard-%d-of-%d", name,
                     t->opt.shard_index, t->opt.shard_count);
        else
            snprintf(t->out_default, sizeof t->out_default, "runs/%s", name);
        t->out = t->out_default;
    }
    t->opt.out_dir = t->out;
    return -1;
}

/* Under mpirun: this rank joins its job, which shares the models out
 * (docs/cluster.md). -1 to go on, else the exit status, said by rank 0. */
static int mpi_begin(train_cmd *t)
{
#ifdef COHORT_HAVE_MPI
    if (!mpi_launched())
        return -1;
    cohort_status st = mpi_create(&t->mpi, &t->err);
    if (!st && t->opt.shard_count)
        st = cohort_fail(&t->err, COHORT_ERR_USAGE, "--shard is for separate jobs; under "
                         "mpirun every rank takes its share by itself");
    if (!st)
        st = mpi_prepare(t->mpi, &t->opt, t->out, &t->err);
    if (st) {
        if (!t->mpi || mpi_rank(t->mpi) == 0)
            cli_usage_error(NULL, "%s", t->err.message);
        mpi_end(t->mpi);
        return 2;
    }
    t->ranks = mpi_size(t->mpi);
    return -1;
#else
    if (mpi_launched())
        return cli_usage_error("train", "started as one of several MPI ranks, but this cohort "
                               "is built without MPI: install libopenmpi-dev and build again, "
                               "or run separate jobs with --shard I/N (docs/cluster.md)");
    return -1;
#endif
}

/* Create the run, and claim a shard's directory: -1 to go on, else the
 * exit status. */
static int create_run(train_cmd *t)
{
    if (t->opt.resume && !t->ranks && access(t->out, F_OK) != 0)
        fprintf(stderr, "cohort: --resume: %s does not exist, so there is nothing to resume; "
                "training every model from scratch\n", t->out);
    cohort_status st = cohort_run_create(t->plan, &t->opt, &t->run, &t->err);
#ifdef COHORT_HAVE_MPI
    if (t->mpi)
        st = mpi_ready(t->mpi, t->run, st, &t->err);
#endif
    if (st) {
        int speak = 1;
#ifdef COHORT_HAVE_MPI
        speak = !t->mpi || mpi_rank(t->mpi) == 0;
        mpi_end(t->mpi);
#endif
        cohort_run_free(t->run);
        t->run = NULL;
        if (speak)
            cli_usage_error(NULL, "%s", t->err.message);
        return 2;
    }
    /* A shard's directory holds its share: another on --resume is refused
     * (the run has only taken the lock and made the folders it already
     * had), and this run's share is recorded before anything trains (a
     * run without --shard had its old marker removed as it claimed the
     * directory, cohort_run_create). */
    if (!t->ranks && t->opt.resume)
        st = shard_dir_check(t->out, t->opt.shard_index, t->opt.shard_count, &t->err);
    if (!st && !t->ranks && t->opt.shard_count)
        st = shard_dir_mark(t->out, t->opt.shard_index, t->opt.shard_count, &t->err);
    if (st)
        return cli_usage_error(NULL, "%s", t->err.message);
    return -1;
}

/* More shares than models: this share is empty, and done (its results.json
 * says so). Returns the exit status. */
static int empty_shard(train_cmd *t)
{
    cohort_status st = run_write_results(t->run, &t->err);
    if (!t->quiet && !st)
        fprintf(stderr, "cohort: shard %d/%d holds none of the %d models of %s\n",
                t->opt.shard_index, t->opt.shard_count, cohort_plan_model_count(t->plan),
                t->args.plan);
    if (st)
        fprintf(stderr, "cohort: %s\n", t->err.message);
    return st ? 2 : 0;
}

/* Train, stopping on SIGINT or SIGTERM (the models checkpoint, --resume
 * goes on). */
static cohort_status train(train_cmd *t)
{
    cohort_run *run = t->run;
    current_run = run;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    cohort_status st = cohort_run_model_count(run) || !t->ranks ? cohort_run_train(run, &t->err) : COHORT_OK;
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    current_run = NULL;
    return st;
}

/* What the run came to: the table, each model that did not end well, and
 * how to go on after a stop. */
static void summary(train_cmd *t, cohort_status st)
{
    const cohort_run *run = t->run;
    if (!t->ranks)
        print_results_table(stdout, run);
    int pruned = 0, n = cohort_run_model_count(run);
    for (int i = 0; i < n; i++) {
        run_model_summary m;
        run_model_summary_of(run, i, &m);
        pruned += m.state == MODEL_PRUNED;
        /* A model with no reason of its own (pending: the run stopped
         * before it, and says why below) gets no line. */
        if (m.state != MODEL_OK && m.state != MODEL_PRUNED && m.error[0])
            fprintf(stderr, "cohort: model '%s' %s: %s\n", m.name, model_state_str(m.state),
                    m.error);
    }
    if (pruned && !t->ranks)
        printf("the scheduler stopped %d of %d models at a rung (status pruned)\n", pruned, n);
    int disk_full = run_disk_was_full(run);
    if ((disk_full || st == COHORT_ERR_INTERRUPTED) && !t->ranks) {
        strbuf cmd;
        sb_init(&cmd);
        resume_command(&cmd, t->args.plan, t->out, t->set_words, t->shard, t->args.strategy,
                       t->args.threads);
        fprintf(stderr, disk_full ? "cohort: %s: %s\n" : "cohort: %s; to go on: %s\n",
                t->err.message, cmd.failed || !cmd.data ? "--resume" : cmd.data + 1);
        sb_free(&cmd);
    } else if (st && st != COHORT_ERR_PARTIAL) {
        fprintf(stderr, "cohort: %s\n", t->err.message);
    }
}

/* Under mpirun, rank 0 gathers every rank's models into out/results.json
 * and prints them; returns the run's status, or the gathering's. */
static cohort_status mpi_finish_run(train_cmd *t, cohort_status st)
{
#ifdef COHORT_HAVE_MPI
    if (!t->mpi)
        return st;
    shard_merge_info sum;
    memset(&sum, 0, sizeof sum);
    st = mpi_finish(t->mpi, t->run, st, &sum, &t->err);
    if (mpi_rank(t->mpi) == 0) {
        print_results_file_table(stdout, t->out);
        fprintf(stderr, "cohort: %d ranks trained %d models: %d ok; results in %s\n", t->ranks,
                sum.models, sum.models - sum.not_ok, t->out);
        if (st)
            fprintf(stderr, "cohort: %s\n", t->err.message);
    }
    mpi_end(t->mpi);
#else
    (void)t;
#endif
    return st;
}

int cmd_train(int argc, char **argv)
{
    train_cmd t;
    memset(&t, 0, sizeof t);
    int rc = parse_args(&t, argc, argv);
    if (rc < 0)
        rc = load_plan(&t);
    if (rc < 0) {
        t.prog = progress_create(stderr, t.quiet, cohort_plan_model_count(t.plan));
        t.opt.on_event = progress_event;
        t.opt.user = t.prog;
        rc = mpi_begin(&t);
    }
    if (rc < 0)
        rc = create_run(&t);
    if (rc >= 0) {
        train_cmd_free(&t);
        return rc;
    }
    cohort_run *run = t.run;
    int n = cohort_run_model_count(run);
    if (!t.quiet) {
        fprintf(stderr, "cohort: training %d model%s of %s, strategy %s, output in %s\n", n,
                n == 1 ? "" : "s", t.args.plan, cohort_strategy_str(run_strategy(run)), t.out);
        if (run_strategy_why(run)[0])
            fprintf(stderr, "cohort: %s\n", run_strategy_why(run));
    }
    if (t.opt.shard_count && n == 0 && !t.ranks) {
        rc = empty_shard(&t);
        train_cmd_free(&t);
        return rc;
    }
    cohort_status st = train(&t);
    progress_finish(t.prog);
    summary(&t, st);
    st = mpi_finish_run(&t, st);
    rc = cli_exit_status(st);
    if (st == COHORT_ERR_PARTIAL)
        rc = 1;
    train_cmd_free(&t);
    return rc;
}
