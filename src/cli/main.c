/* cohort: train many neural-network models in one run. */
#include "cli/cli.h"
#include "plan/plan.h"
#include "plan/yamltree.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *usage =
    "usage: cohort <command> [options]\n"
    "\n"
    "Train many neural-network models in one run, on every device of the machine.\n"
    "\n"
    "commands:\n"
    "  train PLAN      train every model of a plan file (YAML or JSON)\n"
    "  plan PLAN       show the expanded models, their exact memory needs and placement\n"
    "  devices         list the devices: the CPU and the GPUs, with their memory\n"
    "  eval WEIGHTS    loss and accuracy of saved weights on a dataset\n"
    "  predict WEIGHTS predictions of saved weights for a dataset\n"
    "  report DIR      write DIR/report.html again from DIR/results.json\n"
    "  compare DIR...  one table of the models of several output directories\n"
    "  merge DIR...    join the output directories of a plan's shards (--out DIR)\n"
    "  export WEIGHTS  saved weights as an ONNX model (--format onnx --out FILE)\n"
    "\n"
    "options:\n"
    "  -h, --help      show help (also: cohort <command> --help)\n"
    "  --version       print the version\n"
    "\n"
    "exit status: 0 all models trained, 1 some failed (the rest finished),\n"
    "             2 usage or input error (nothing trained), 130 interrupted\n"
    "\n"
    "example: cohort train examples/seed.yaml --out runs/seed\n";

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "cohort%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 2;
}

int cli_unknown_option(const char *cmd, const char *arg, const char *next,
                       const char *const *options, int takes_set)
{
    /* The option's name, as a plan key would be written: "--batch-size=8" is batch_size. */
    char key[64];
    const char *a = arg;
    while (*a == '-')
        a++;
    size_t n = strcspn(a, "=");
    if (n >= sizeof key)
        n = sizeof key - 1;
    for (size_t i = 0; i < n; i++)
        key[i] = a[i] == '-' ? '_' : a[i];
    key[n] = 0;
    const char *value = a[n] == '=' ? a + n + 1 : next && next[0] != '-' ? next : "VALUE";
    if (takes_set && (!strcmp(key, "lr") || !strcmp(key, "learning_rate")))
        return cli_usage_error(cmd, "unknown option '%s'; a plan's settings are changed with "
                                    "--set, like --set defaults.optimizer.lr=%s (see cohort %s "
                                    "--help)",
                               arg, value, cmd);
    for (int i = 0; takes_set && plan_model_keys[i]; i++)
        if (!strcmp(key, plan_model_keys[i]) && strcmp(key, "name") != 0)
            return cli_usage_error(cmd, "unknown option '%s'; a plan's settings are changed with "
                                        "--set, like --set defaults.%s=%s (see cohort %s --help)",
                                   arg, key, value, cmd);
    /* Compared without their dashes, which would make "--bogus" look like "--out". */
    const char *bare[32];
    int count = 0;
    for (; options[count] && count < 32; count++)
        bare[count] = options[count] + strspn(options[count], "-");
    const char *near_bare = arg[0] == '-' && arg[1] == '-' ? ysuggest(arg + 2, bare, count) : NULL;
    const char *near = NULL;
    for (int i = 0; near_bare && i < count; i++)
        if (bare[i] == near_bare)
            near = options[i];
    if (near)
        return cli_usage_error(cmd, "unknown option '%s'; did you mean '%s'? (see cohort %s "
                                    "--help)",
                               arg, near, cmd);
    return cli_usage_error(cmd, "unknown option '%s' (see cohort %s --help)", arg, cmd);
}

int cli_exit_status(cohort_status st)
{
    switch (st) {
    case COHORT_OK: return 0;
    case COHORT_ERR_PARTIAL: return 1;
    case COHORT_ERR_INTERRUPTED: return 130;
    default: return 2;
    }
}

int cli_opt_value(int argc, char **argv, int *i, const char *name, const char **val)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return 0;
    if (argv[*i][n] == '=')
        *val = argv[*i] + n + 1;
    else if (argv[*i][n] != 0)
        return 0;
    else
        *val = *i + 1 < argc ? argv[++*i] : "";
    if (!**val) {
        /* Taken as not given, `--out DIR --out` had trained into the
         * default folder. argv[0] is the command's name. */
        cli_usage_error(argv[0], "%s is missing its value", name);
        exit(2);
    }
    return 1;
}

int cli_threads(const char *v)
{
    char *end;
    long t = v ? strtol(v, &end, 10) : 0;
    return v && *v && !*end && t >= 1 && t <= 4096 ? (int)t : -1;
}

/* The library's warnings and errors (an empty class, a guessed label
 * column) on stderr; its info and debug messages are not shown. */
static void log_to_stderr(cohort_log_level level, const char *msg, void *user)
{
    (void)user;
    if (level >= COHORT_LOG_WARN)
        fprintf(stderr, "cohort: %s: %s\n", level == COHORT_LOG_WARN ? "warning" : "error", msg);
}

const char *cli_program = "cohort";

int main(int argc, char **argv)
{
    if (argc > 0 && argv[0] && argv[0][0])
        cli_program = argv[0];
    cohort_set_log(log_to_stderr, NULL);
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        fputs(usage, stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("cohort %s\n", COHORT_VERSION);
        return 0;
    }
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"train", cmd_train},     {"plan", cmd_plan},       {"devices", cmd_devices},
                {"eval", cmd_eval},       {"predict", cmd_predict},
                {"report", cmd_report},   {"compare", cmd_compare},
                {"merge", cmd_merge},     {"export", cmd_export}};
    enum { N_CMDS = sizeof cmds / sizeof cmds[0] };
    const char *names[N_CMDS];
    for (int i = 0; i < N_CMDS; i++) {
        if (!strcmp(cmd, cmds[i].name))
            return cmds[i].fn(argc - 1, argv + 1);
        names[i] = cmds[i].name;
    }
    /* A typo gets the command it was likely meant to be, and the list. */
    const char *near = ysuggest(cmd, names, N_CMDS);
    fprintf(stderr, "cohort: unknown command '%s'", cmd);
    if (near)
        fprintf(stderr, " (did you mean '%s'?)", near);
    fputs("; the commands are", stderr);
    for (int i = 0; i < N_CMDS; i++)
        fprintf(stderr, "%s %s", i ? "," : "", names[i]);
    fprintf(stderr, "\n\n%s", usage);
    return 2;
}
