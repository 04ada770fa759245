/* scheduler: the plan's scheduler section (asha, median, hyperband, pbt) and
 * pbt's hyperparam_mutations. */
#include "plan/plan_impl.h"

#include <string.h>

static const char *const scheduler_keys[] = {"name",
                                         "metric",
                                         "mode",
                                         "grace_period",
                                         "reduction_factor",
                                         "max_t",
                                         "perturbation_interval",
                                         "quantile_fraction",
                                         "resample_probability",
                                         "hyperparam_mutations",
                                         "seed",
                                         NULL};

/* The keys of scheduler_keys from here on are pbt's; the ones before
 * "perturbation_interval" from grace_period on are the pruning rules'. */
#define SCHED_FIRST_PRUNE_KEY 3

#define SCHED_FIRST_PBT_KEY 6

static const char *const scheduler_names[] = {"none", "asha", "median", "hyperband", "pbt"};

const char *prune_kind_name(prune_kind k)
{
    switch (k) {
    case PRUNE_NONE: return "none";
    case PRUNE_ASHA: return "asha";
    case PRUNE_MEDIAN: return "median";
    case PRUNE_HYPERBAND: return "hyperband";
    case PRUNE_PBT: return "pbt";
    }
    return "unknown";
}

/* The values mutation m can take are values its setting allows. */
static cohort_status check_mutation_values(const yctx *c, const ynode *key, const pbt_mutation *m)
{
    double ends[PBT_MAX_CHOICES];
    int n = plan_dist_ends(m, ends);
    char range[64];
    for (int i = 0; i < n; i++)
        if (!model_hyper_allows(m->path, ends[i], range, sizeof range))
            return ynode_fail(c, key, "scheduler.hyperparam_mutations: %s takes values in %s, "
                                      "but its distribution reaches %g",
                              key->str, range, ends[i]);
    return COHORT_OK;
}

/* pbt's settings: perturbation_interval, quantile_fraction,
 * resample_probability, seed and hyperparam_mutations. */
static cohort_status parse_pbt(const yctx *c, const ynode *n, scheduler_spec *s)
{
    const ynode *v;
    cohort_status st;
    long long ll;
    s->quantile = 0.25;
    s->resample = 0.25;
    s->seed = 1;
    if (!(v = ymap_get(n, "perturbation_interval")))
        return ynode_fail(c, n, "scheduler pbt needs perturbation_interval, the epochs between "
                                "two exploits, like {name: pbt, perturbation_interval: 2, "
                                "hyperparam_mutations: {optimizer.lr: {loguniform: [1.0e-4, "
                                "1.0e-1]}}}");
    if ((st = yget_int(c, v, "scheduler.perturbation_interval", 1, 100000, &ll)))
        return st;
    s->interval = (int)ll;
    if ((v = ymap_get(n, "quantile_fraction"))) {
        if ((st = yget_num(c, v, "scheduler.quantile_fraction", YR_POSITIVE, 0, &s->quantile)))
            return st;
        if (s->quantile > 0.5)
            return ynode_fail(c, v, "scheduler.quantile_fraction must be at most 0.5 (the bottom "
                                    "fraction copies the top one), got %g",
                              s->quantile);
    }
    if ((v = ymap_get(n, "resample_probability"))) {
        if ((st = yget_num(c, v, "scheduler.resample_probability", YR_NONNEG, 0, &s->resample)))
            return st;
        if (s->resample > 1)
            return ynode_fail(c, v, "scheduler.resample_probability must be in [0, 1], got %g",
                              s->resample);
    }
    unsigned long long seed;
    if ((v = ymap_get(n, "seed"))) {
        if ((st = yget_u64(c, v, "scheduler.seed", &seed)))
            return st;
        s->seed = seed;
    }
    const ynode *muts = ymap_get(n, "hyperparam_mutations");
    char got[80];
    if (!muts || muts->type != YNODE_MAP || muts->n == 0)
        return ynode_fail(c, muts ? muts : n,
                          "scheduler pbt needs hyperparam_mutations, a map from model keys to "
                          "distributions like {optimizer.lr: {loguniform: [1.0e-4, 1.0e-1]}}%s%s",
                          muts ? ", got " : "", muts ? ynode_describe(muts, got, sizeof got) : "");
    if (muts->n > PBT_MAX_KEYS)
        return ynode_fail(c, muts->keys[PBT_MAX_KEYS], "scheduler.hyperparam_mutations has more "
                                                       "than %d keys",
                          PBT_MAX_KEYS);
    for (size_t i = 0; i < muts->n; i++) {
        pbt_mutation *m = &s->mut[i];
        const ynode *key = muts->keys[i];
        m->line = key->line;
        if ((st = plan_key_path(c, key, "scheduler.hyperparam_mutations key", m->path,
                                sizeof m->path)))
            return st;
        if (!model_hyper_known(m->path))
            return ynode_fail(c, key, "scheduler.hyperparam_mutations key '%s' would change the "
                                      "model's shapes or memory, which pbt cannot do while a "
                                      "model trains; it mutates optimizer.lr, .momentum, "
                                      ".beta_1, .beta_2, .epsilon, .weight_decay, .rho, "
                                      "layers.N.dropout and layers.N.kernel_regularizer.l1/.l2 "
                                      "(layers.N.J.dropout: layer J inside the residual at N)",
                              key->str);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(s->mut[j].path, m->path))
                return ynode_fail(c, key, "scheduler.hyperparam_mutations key '%s' mutates the "
                                          "same setting as line %d",
                                  key->str, s->mut[j].line);
        if ((st = plan_dist_parse(c, key, muts->vals[i], m)) ||
            (st = check_mutation_values(c, key, m)))
            return st;
        s->n_mut = (int)i + 1;
    }
    return COHORT_OK;
}

cohort_status plan_parse_scheduler(const yctx *c, const ynode *root, cohort_plan *plan)
{
    scheduler_spec *s = &plan->scheduler;
    memset(s, 0, sizeof *s);
    s->grace = 1;
    s->eta = 4; /* Ray Tune's ASHA default */
    const ynode *n = ymap_get(root, "scheduler"), *v;
    if (!n || ynode_is_null(n))
        return COHORT_OK;
    char got[80];
    if (n->type != YNODE_MAP)
        return ynode_fail(c, n, "scheduler must be a map like {name: asha, metric: val_loss, "
                                "grace_period: 1}, got %s",
                          ynode_describe(n, got, sizeof got));
    cohort_status st = plan_check_keys(c, n, scheduler_keys, "in scheduler");
    if (st)
        return st;
    s->line = n->line;
    int kind = 0, idx;
    if (!(v = ymap_get(n, "name")))
        return ynode_fail(c, n, "scheduler needs a name: asha, hyperband, median, pbt or none");
    if ((st = yget_enum(c, v, "scheduler.name", scheduler_names, COUNT(scheduler_names), &kind)))
        return st;
    static const prune_kind kinds[] = {PRUNE_NONE, PRUNE_ASHA, PRUNE_MEDIAN, PRUNE_HYPERBAND,
                                       PRUNE_PBT};
    s->kind = kinds[kind];
    /* A setting of the other family is a mistake, not something to ignore. */
    for (int i = SCHED_FIRST_PRUNE_KEY; scheduler_keys[i]; i++) {
        int pbt_key = i >= SCHED_FIRST_PBT_KEY;
        if ((v = ymap_get(n, scheduler_keys[i])) && pbt_key != (s->kind == PRUNE_PBT))
            return ynode_fail(c, v, "scheduler.%s is a setting of %s, not of scheduler %s",
                              scheduler_keys[i], pbt_key ? "pbt" : "asha, median and hyperband",
                              scheduler_names[kind]);
    }
    int has_val = plan->data.validation[0] || plan->data.validation_split > 0.0;
    str_copy(s->metric, sizeof s->metric, has_val ? "val_loss" : "loss");
    if ((v = ymap_get(n, "metric"))) {
        if ((st = plan_get_monitor(c, v, "scheduler.metric", s->metric, sizeof s->metric)))
            return st;
        if (!strncmp(s->metric, "val_", 4) && !has_val)
            return ynode_fail(c, v, "the scheduler watches %s, but the plan has no validation "
                                    "data; give data.validation or data.validation_split, or "
                                    "watch %s",
                              s->metric, s->metric + 4);
    }
    s->maximize = strstr(s->metric, "accuracy") != NULL;
    if ((v = ymap_get(n, "mode"))) {
        static const char *const modes[] = {"min", "max"};
        if ((st = yget_enum(c, v, "scheduler.mode", modes, 2, &idx)))
            return st;
        s->maximize = idx;
    }
    if (s->kind == PRUNE_PBT)
        return parse_pbt(c, n, s);
    long long ll;
    if ((v = ymap_get(n, "grace_period"))) {
        if ((st = yget_int(c, v, "scheduler.grace_period", 1, 100000, &ll)))
            return st;
        s->grace = (int)ll;
    }
    if ((v = ymap_get(n, "reduction_factor"))) {
        if ((st = yget_int(c, v, "scheduler.reduction_factor", 2, 1000, &ll)))
            return st;
        s->eta = (int)ll;
        /* median has no rungs to space: the setting would be ignored. */
        if (s->kind == PRUNE_MEDIAN)
            return ynode_fail(c, v, "scheduler.reduction_factor is a setting of asha and "
                                    "hyperband, not of scheduler median");
    }
    if ((v = ymap_get(n, "max_t"))) {
        if ((st = yget_int(c, v, "scheduler.max_t", 1, 100000, &ll)))
            return st;
        s->max_t = (int)ll;
        if (s->grace > s->max_t)
            return ynode_fail(c, v, "scheduler.grace_period (%d) is more than max_t (%d): no "
                                    "model could be stopped",
                              s->grace, s->max_t);
    }
    return COHORT_OK;
}

cohort_status plan_check_mutation_keys(const yctx *c, const ynode *root, cohort_plan *plan)
{
    const scheduler_spec *s = &plan->scheduler;
    if (s->kind != PRUNE_PBT)
        return COHORT_OK;
    const ynode *muts = ymap_get(ymap_get(root, "scheduler"), "hyperparam_mutations");
    for (int i = 0; i < s->n_mut; i++) {
        int has = 0;
        for (int m = 0; m < plan->n_models && !has; m++)
            has = model_hyper_field(&plan->models[m], s->mut[i].path) != NULL;
        if (!has)
            return ynode_fail(c, muts->keys[i], "scheduler.hyperparam_mutations key '%s': no "
                                                "model has it (%s)",
                              muts->keys[i]->str,
                              !strncmp(s->mut[i].path, "layers.", 7)
                                  ? "the layer is missing or of another kind"
                                  : "the models' optimizer does not take it");
    }
    return COHORT_OK;
}
