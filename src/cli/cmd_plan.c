/* cohort plan PLAN: the expanded models, their exact memory and placement. */
#include "cli/cli.h"
#include "layers/layer.h"
#include "plan/plan.h"
#include "run/run.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

static const char *help =
    "usage: cohort plan PLAN [--json] [--set KEY=VALUE]... [--strategy S] [--threads N]\n"
    "\n"
    "Read PLAN and its datasets, expand defaults and sweeps, and show for every model its\n"
    "layers, parameter count, the exact bytes it needs on its device (parameters, gradients,\n"
    "optimizer state, activations for its batch size), where it will run, and whether it fits.\n"
    "Nothing is trained.\n"
    "\n"
    "options:\n"
    "  --json             print the same as JSON\n"
    "  --set KEY=VALUE    override a plan key by dotted path (repeatable)\n"
    "  --strategy S       show the plan under strategy S\n"
    "  --threads N        as many CPU threads as `cohort train --threads N` would use\n"
    "\n"
    "Under the fused strategy it also lists the training groups: same-shaped models with the\n"
    "same optimizer on one device, cut into one group per core on a CPU.\n"
    "\n"
    "exit status: 0 every model fits its device, 1 some model does not (cohort train\n"
    "             would refuse it and train the others), 2 usage or input error\n";

/* A model's layers in short: "784-128relu-drop0.2-10softmax",
 * "28x28x1-c32relu-mp2-flat-10softmax". */
static void layers_str(const model_entry *e, char *buf, size_t n)
{
    sample_shape in = e->L.in_shape;
    int len = in.rank == 3   ? snprintf(buf, n, "%dx%dx%d-", in.h, in.w, in.c)
              : in.rank == 2 ? snprintf(buf, n, "%dx%d-", in.h, in.c)
                             : snprintf(buf, n, "%d-", e->L.n_in);
    if (len >= 0 && (size_t)len < n)
        layer_list_abbrev(e->spec->layers, e->spec->n_layers, buf + len, n - (size_t)len);
}

/* Each layer of e: its output shape, parameters and the buffers it adds. */
static void print_layers(const model_entry *e, int w)
{
    const model_layout *L = &e->L;
    char a[32], shape[48];
    size_t rows = (size_t)L->B * sizeof(float);
    int name_w = 9; /* "layers.12", or wider inside a block: "layers.12.3" */
    for (int i = 0; i < L->n_layers; i++) {
        char at[32];
        int len = layer_plan_name(&L->layers[i], at, sizeof at);
        name_w = len > name_w ? len : name_w;
    }
    for (int i = 0; i < L->n_layers; i++) {
        const layer_plan *lp = &L->layers[i];
        shape_format(lp->out, shape, sizeof shape);
        char at[32];
        layer_plan_name(lp, at, sizeof at);
        printf("%-*s    %-*s %-24s -> %-14s %9zu params", w, "", name_w, at, lp->kind->name,
               shape, lp->n_params);
        if (lp->alias)
            printf(", in place");
        if (lp->n_state)
            printf(", state %zu", lp->n_state);
        if (lp->n_saved)
            printf(", saved %s", format_bytes(lp->n_saved * rows, a, sizeof a));
        if (lp->n_work)
            printf(", workspace %s", format_bytes(lp->n_work * rows, a, sizeof a));
        const layer_spec *ls = &e->spec->layers[i];
        if (ls->l2 != 0.0f)
            printf(", l2 %g", (double)ls->l2);
        if (ls->l1 != 0.0f)
            printf(", l1 %g", (double)ls->l1);
        printf("\n");
    }
}

/* The optimizer, its clip and schedule, and reduce_lr_on_plateau. */
static void print_training(const model_entry *e, int w)
{
    static const char *const schedules[] = {"", "cosine_decay", "exponential_decay",
                                            "piecewise_constant"};
    const optim_spec *o = &e->spec->opt;
    printf("%-*s    optimizer %s, lr %g", w, "", opt_name(o->kind), (double)o->lr);
    if (o->clipnorm > 0.0f)
        printf(", clipnorm %g", (double)o->clipnorm);
    if (o->global_clipnorm > 0.0f)
        printf(", global_clipnorm %g", (double)o->global_clipnorm);
    if (o->clipvalue > 0.0f)
        printf(", clipvalue %g", (double)o->clipvalue);
    if (o->schedule.kind != SCHED_NONE)
        printf(", schedule %s", schedules[o->schedule.kind]);
    const plateau_spec *p = &e->spec->plateau;
    if (p->enabled)
        printf(", reduce_lr_on_plateau on %s (factor %g, patience %d)", p->monitor, p->factor,
               p->patience);
    printf("\n");
}

/* The plan's scheduler: its rule and the most epochs it lets the models train. */
static void print_scheduler(const cohort_run *run)
{
    const scheduler_spec *sc = &run->plan->scheduler;
    if (sc->kind == PRUNE_NONE)
        return;
    long long epochs, full;
    int rungs = run_scheduler_budget(run, &epochs, &full);
    printf("\nscheduler %s on %s (%s)", prune_kind_name(sc->kind), sc->metric,
           sc->maximize ? "max" : "min");
    if (sc->kind == PRUNE_PBT) {
        int *at = NULL, n_at = run_pbt_intervals(run, &at);
        int q = run_pbt_quantile(run, run->n);
        printf(": a population of %d; at epochs", run->n);
        for (int k = 0; k < n_at; k++)
            printf("%s %d", k ? "," : "", at[k]);
        if (n_at <= 0)
            printf(" (none: the models have no epoch after one interval)");
        printf(" the bottom %d take the weights of one of the top %d and perturb", q, q);
        for (int k = 0; k < sc->n_mut; k++)
            printf("%s %s", k ? "," : "", sc->mut[k].path);
        printf(" (resample %g, else x0.8 or x1.2); all %lld epochs\n", sc->resample, full);
        free(at);
        return;
    }
    /* The last epoch of the longest model: a rule decides only before it. */
    int top = 0;
    long long all = 0; /* the epochs they train, max_t applied */
    for (int i = 0; i < run->n; i++) {
        int t = run->m[i].spec->epochs;
        if (sc->max_t > 0 && sc->max_t < t)
            t = sc->max_t;
        top = t > top ? t : top;
        all += t;
    }
    if (sc->grace >= top) {
        printf(": grace_period %d is not below any model's last epoch (%d), so no model is "
               "stopped; all %lld epochs\n",
               sc->grace, top, all);
        return;
    }
    if (sc->kind != PRUNE_MEDIAN) {
        printf(": rungs at epochs");
        for (long r = sc->grace, i = 0; i < rungs; r *= sc->eta, i++)
            printf("%s %ld", i ? "," : "", r);
        if (sc->kind == PRUNE_HYPERBAND)
            printf(" in %d brackets (bracket b cuts from rung b on; models dealt round robin)",
                   rungs + 1);
        printf(", the best 1/%d of each rung goes on; at most %lld of %lld epochs (%.0f%%)\n",
               sc->eta, epochs, full, full ? 100.0 * (double)epochs / (double)full : 0.0);
    } else {
        printf(": from epoch %d on, a model whose best is worse than the median of the others' "
               "running averages stops; at most %lld of %lld epochs\n",
               sc->grace, epochs, full);
    }
}

static void print_text(const cohort_run *run, const run_group_info *g, int n_groups)
{
    char a[32], c[32];
    printf("plan %s: %d model%s, strategy %s%s%s%s\n", run->plan->path, run->n,
           run->n == 1 ? "" : "s", cohort_strategy_str(run->strategy),
           run->strategy_why[0] ? " (" : "", run->strategy_why, run->strategy_why[0] ? ")" : "");
    printf("data: %s: %lld train, %lld validation samples; %d features, ", run->plan->data.train,
           (long long)run->train.n, (long long)run->val.n, run->n_in);
    /* Real-valued targets (regression) have no classes: say how many targets. */
    if (run->n_classes == 0 && run->train.t)
        printf("%lld real-valued target%s", (long long)run->train.t_dim,
               run->train.t_dim == 1 ? "" : "s");
    else
        printf("%d classes", run->n_classes);
    if (run->has_test)
        printf("; test %s: %lld samples", run->plan->data.test, (long long)run->test.n);
    printf("\n\n");
    int w = 5;
    for (int i = 0; i < run->n; i++)
        if ((int)strlen(run->m[i].spec->name) > w)
            w = (int)strlen(run->m[i].spec->name);
    int lw = 28; /* the layers column: as wide as its longest */
    for (int i = 0; i < run->n; i++) {
        char layers[256];
        layers_str(&run->m[i], layers, sizeof layers);
        if ((int)strlen(layers) > lw)
            lw = (int)strlen(layers);
    }
    printf("%-*s  %-*s  %10s  %12s  %-8s  %s\n", w, "model", lw, "layers", "params", "memory",
           "device", "fits");
    for (int i = 0; i < run->n; i++) {
        const model_entry *e = &run->m[i];
        char layers[256];
        layers_str(e, layers, sizeof layers);
        uint64_t planned = run_model_planned(run, g, n_groups, i);
        printf("%-*s  %-*s  %10zu  %12s  %-8s  %s\n", w, e->spec->name, lw, layers, e->L.n_params,
               format_bytes(planned, a, sizeof a),
               e->device >= 0 ? run->devices->dev[e->device].info.name : "-",
               e->res.error[0] ? "NO" : "yes");
        printf("%-*s  ", w, "");
        int first = 1;
        for (int j = 0; j < BUF_COUNT; j++) {
            if (!e->L.buf_bytes[j])
                continue;
            printf("%s%s %s", first ? "" : ", ", model_buf_name(j),
                   format_bytes(e->L.buf_bytes[j], a, sizeof a));
            first = 0;
        }
        if (planned == e->L.total_bytes)
            printf(" (%zu bytes exactly)\n", e->L.total_bytes);
        else
            printf(" (%zu bytes exactly alone; %llu as its share of its fused group)\n",
                   e->L.total_bytes, (unsigned long long)planned);
        print_layers(e, w);
        print_training(e, w);
        if (e->res.error[0])
            printf("%-*s  error: %s\n", w, "", e->res.error);
    }
    print_scheduler(run);
    printf("\ndevices:\n");
    for (int d = 0; d < run->devices->n; d++) {
        const cohort_device *dev = &run->devices->dev[d];
        if (!dev->mem_pool)
            continue;
        uint64_t planned = 0, peak_concurrent = 0;
        int count = 0;
        for (int i = 0; i < run->n; i++)
            if (run->m[i].device == d && !run->m[i].res.error[0]) {
                uint64_t own = run_model_planned(run, g, n_groups, i);
                planned += own;
                if (own > peak_concurrent)
                    peak_concurrent = own;
                count++;
            }
        printf("  %-8s limit %s; %d model%s, %s in all", dev->info.name,
               format_bytes(mem_pool_limit(dev->mem_pool), a, sizeof a), count, count == 1 ? "" : "s",
               format_bytes(planned, c, sizeof c));
        /* What the device holds beside the models: each job's context (from
         * the pool) and, under processes on a GPU, each worker's own. */
        uint64_t ctx = device_ctx_bytes(dev), own = 0, jobs = 0, job_peak = 0;
        for (int i = 0; i < n_groups; i++)
            if (g[i].device == d && g[i].n > 0) {
                uint64_t room = run_job_room(run, d, g[i].bytes);
                own += room - g[i].bytes;
                if (room > job_peak)
                    job_peak = room;
                jobs++;
            }
        if (jobs && own) {
            char e[32], wb[32];
            uint64_t worker = own / jobs - ctx;
            printf(", %s with %s (%llu x %s: cuBLAS's workspace and the reductions' scratch)",
                   format_bytes(planned + own, a, sizeof a),
                   jobs == 1 ? "its context" : "their contexts", (unsigned long long)jobs,
                   format_bytes(ctx, e, sizeof e));
            if (worker)
                printf(" and %s workers' CUDA contexts (%llu x %s, each while its job runs)",
                       jobs == 1 ? "its" : "their", (unsigned long long)jobs,
                       format_bytes(worker, wb, sizeof wb));
        }
        if (run->strategy == COHORT_STRATEGY_SEQUENTIAL)
            printf(", at most %s at once (sequential)",
                   format_bytes(jobs ? job_peak : peak_concurrent, a, sizeof a));
        printf("\n");
    }
    if (run->strategy != COHORT_STRATEGY_FUSED)
        return;
    int fused = 0, could = 0;
    for (int i = 0; i < n_groups; i++)
        fused += g[i].n > 1;
    /* Without a group of two, say why: no two models could share one, or
     * those that could were cut apart, one part per core. */
    for (int i = 0; i < run->n && !could; i++)
        for (int j = i + 1; j < run->n && !could; j++)
            could = run->m[i].device >= 0 && run->m[i].device == run->m[j].device &&
                    model_can_fuse(run->m[i].spec, run->m[j].spec);
    printf("\ngroups (fused: each trains as one batched step; on a CPU a group is cut into "
           "one part per core)%s\n",
           fused  ? ":"
           : could ? ": none of two or more; the models that could fuse were cut into one part "
                     "per core, and there are no more of them than cores (--threads 1 keeps "
                     "them in one group)"
                   : ": none of two or more; no two models on a device have the same layers "
                     "and optimizer");
    for (int i = 0; fused && i < n_groups; i++) {
        printf("  %-8s %d model%s, %s%s:", run->devices->dev[g[i].device].info.name, g[i].n,
               g[i].n == 1 ? "" : "s", format_bytes(g[i].bytes, a, sizeof a),
               g[i].n == 1 ? "" : run_group_shares_order(run, &g[i]) ? ", one shared order"
                                                                 : ", an order each");
        for (int k = 0; k < g[i].n; k++)
            printf("%s%s", k ? ", " : " ", run->m[g[i].idx[k]].spec->name);
        printf("\n");
    }
}

int cmd_plan(int argc, char **argv)
{
    cli_plan_args a;
    int json = 0, rc;
    if (cli_plan_args_init(&a, argc))
        return 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(help, stdout);
            cli_plan_args_free(&a);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (cli_plan_arg("plan", &a, argc, argv, &i, &rc)) {
            if (rc) {
                cli_plan_args_free(&a);
                return rc;
            }
        } else {
            cli_plan_args_free(&a);
            static const char *const opts[] = {"--json", "--set", "--strategy", "--threads",
                                               "--help", NULL};
            return cli_unknown_option("plan", argv[i], i + 1 < argc ? argv[i + 1] : NULL, opts, 1);
        }
    }
    cohort_run_options opt;
    cohort_run_options_init(&opt);
    if ((rc = cli_plan_args_apply("plan", &a, &opt))) {
        cli_plan_args_free(&a);
        return rc;
    }
    cohort_error err;
    cohort_plan *plan;
    cohort_status st = cohort_plan_load(a.plan, a.sets, a.n_sets, &plan, &err);
    cli_plan_args_free(&a);
    if (st)
        return cli_usage_error(NULL, "%s", err.message);
    cohort_run *run;
    st = cohort_run_create(plan, &opt, &run, &err);
    if (st) {
        cohort_plan_free(plan);
        return cli_usage_error(NULL, "%s", err.message);
    }
    run_group_info *groups = NULL;
    int n_groups = 0;
    if ((st = run_plan_groups(run, &groups, &n_groups, &err))) {
        cohort_run_free(run);
        cohort_plan_free(plan);
        return cli_usage_error(NULL, "%s", err.message);
    }
    if (json) {
        char *text = run_plan_json(run, groups, n_groups);
        fputs(text ? text : "", stdout);
        free(text);
    } else {
        print_text(run, groups, n_groups);
    }
    free(groups);
    int fits = 1;
    for (int i = 0; i < run->n; i++)
        fits &= !run->m[i].res.error[0];
    cohort_run_free(run);
    cohort_plan_free(plan);
    return fits ? 0 : 1;
}
