/*
 * plan: reads a plan file (YAML via libyaml; JSON is YAML), applies --set
 * overrides, merges defaults, expands the sweep and validates everything,
 * reporting errors as "file:line: message". Owns the cohort_plan struct.
 */
#ifndef COHORT_PLAN_H
#define COHORT_PLAN_H

#include "cohort.h"
#include "model/model.h"
#include "plan/keys.h"

#define COHORT_MAX_DEVICE_SPECS 16
#define COHORT_MAX_SPLIT 16
#define COHORT_MAX_MODELS 10000            /* models in a plan, after the sweep */
#define COHORT_PLAN_MAX_BYTES (16u << 20)  /* largest plan file */

typedef struct data_spec {
    char train[COHORT_PATH_MAX];      /* dataset spec, required */
    char test[COHORT_PATH_MAX];       /* "" = none */
    char validation[COHORT_PATH_MAX]; /* "" = use validation_split */
    double validation_split;          /* 0 = none */
    char label_column[64];            /* "" = default */
    char label_columns[512];          /* CSV targets "a,b,c" (data.label_columns); "" = none */
    sample_shape input_shape;         /* rank 0 = none: the data's own shape */
    int input_shape_line;             /* its line in the plan */
    int train_line, test_line, validation_line; /* their lines in the plan; 0: from --set */
    int validation_split_line;        /* likewise */
} data_spec;

typedef struct device_spec {
    char name[32];                    /* "cpu:0", "gpu:1" */
    int line;
    cohort_mem_policy policy;
    int n_split;                      /* 0 = not split */
    uint64_t split[COHORT_MAX_SPLIT]; /* bytes of each part */
    uint64_t memory_limit;            /* 0 = the whole device */
} device_spec;

/* The plan's `scheduler`: which models stop before their last epoch (asha,
 * median, hyperband), or which copy a better one and change course (pbt). */
typedef enum prune_kind { PRUNE_NONE, PRUNE_ASHA, PRUNE_MEDIAN, PRUNE_HYPERBAND, PRUNE_PBT } prune_kind;
/* The plan's name of a scheduler rule ("asha", ...). */
const char *prune_kind_name(prune_kind k);
/* A distribution of search.space, or of pbt's hyperparam_mutations. */
typedef enum dist_kind { DIST_UNIFORM, DIST_LOGUNIFORM, DIST_RANDINT, DIST_CHOICE } dist_kind;

#define PBT_MAX_KEYS 16     /* hyperparam_mutations keys */
#define PBT_MAX_CHOICES 64  /* options of a choice among them */
/* One key of pbt's hyperparam_mutations: a numeric model setting that
 * changes no shape or memory (model_hyper_field), and where its values come
 * from. */
typedef struct pbt_mutation {
    char path[256];   /* canonical dotted path: optimizer.lr, layers.1.dropout */
    int line;         /* the key's line in the plan */
    dist_kind kind;
    double lo, hi;    /* uniform, loguniform: [lo, hi]; randint: [lo, hi) */
    int n_choices;    /* choice: its options, numbers */
    double choices[PBT_MAX_CHOICES];
} pbt_mutation;

typedef struct scheduler_spec {
    prune_kind kind;
    char metric[32];   /* a history metric: val_loss, val_accuracy, loss, val_mae, ... */
    int maximize;      /* mode max (accuracy's default) */
    int grace;         /* epochs before a model can be stopped */
    int eta;           /* asha: reduction_factor */
    int max_t;         /* the most epochs of a model; 0: its own epochs */
    int line;          /* the section's line, for run-time errors */
    /* pbt */
    int interval;      /* perturbation_interval, epochs */
    double quantile;   /* quantile_fraction, in (0, 0.5] */
    double resample;   /* resample_probability, in [0, 1] */
    uint64_t seed;     /* of the donors and perturbations drawn */
    int n_mut;
    pbt_mutation mut[PBT_MAX_KEYS];
} scheduler_spec;

struct cohort_plan {
    char path[COHORT_PATH_MAX];
    char name[COHORT_NAME_MAX];       /* file name without dir and extension */
    data_spec data;
    int n_models;
    model_spec *models;               /* owned, each with config_json */
    int n_devices;
    device_spec devices[COHORT_MAX_DEVICE_SPECS];
    cohort_strategy strategy;
    int shared_order;                 /* fused groups share one shuffle order */
    scheduler_spec scheduler;
    char *source;                     /* the plan's text, owned */
    char *json;                       /* the whole expanded plan as JSON, owned */
};

/* Parse "sequential", "threads", ... ; -1 when unknown. */
int strategy_parse(const char *s);

/* ---- shared by the files of src/plan/ only ------------------------------ */
struct ynode;
struct yctx;

/* The keys a model, its loss, early_stopping and reduce_lr_on_plateau take;
 * NULL-terminated (plan.c), checked by plan_check_keys (an optimizer's:
 * optim_plan_keys, from the optimizer table; a layer's: layer_all_keys,
 * from the layer table). */
extern const char *const plan_model_keys[];
extern const char *const plan_loss_keys[];
extern const char *const plan_early_stop_keys[];
extern const char *const plan_plateau_keys[];
/* The keys of the map a model holds at `key` (optimizer, loss, early_stopping,
 * reduce_lr_on_plateau: the one list of them, models.c), or NULL where the
 * model's `key` is no map of settings. */
const char *const *plan_model_map_keys(const char *key);

typedef struct plan_sweep_key {
    const struct ynode *key;    /* the key in the plan, for lines */
    const struct ynode *values; /* its list of values, non-empty */
    char path[256];             /* dotted model path, learning_rate spelled lr */
    const char *label;          /* last component as written, for model names */
} plan_sweep_key;

typedef struct plan_sweep {
    int n;
    plan_sweep_key *keys;       /* owned */
    size_t combos;              /* product of the list lengths; 1 without a sweep.
                                 * A search: its samples */
    int zip;                    /* a search: combination i takes value i of every key */
    struct ynode **drawn;       /* a search: the lists of drawn values, [n], owned */
    size_t *picked;             /* a search: [n * combos] which value of a choice each draw
                                 * took (names show it for lists and maps), owned */
} plan_sweep;

/* Check the `sweep` map (NULL: no sweep) against the model schema and count
 * its combinations (at most COHORT_MAX_MODELS). On error *out is empty and
 * c's error says file:line. The keys point into `sweep`, which must outlive *out. */
cohort_status plan_sweep_parse(const struct yctx *c, const struct ynode *sweep, plan_sweep *out);
/* Write combination `combo` (0-based; the first key varies slowest) into the
 * merged model tree and fill suffix with "-lr=0.001-batch_size=32". */
cohort_status plan_sweep_apply(const struct yctx *c, const plan_sweep *s, size_t combo,
                               struct ynode *model, const char *model_label, char *suffix,
                               size_t suffix_size);
void plan_sweep_free(plan_sweep *s);

/*
 * The plan's `search` map (NULL: none): {samples: N, seed: S, space: {KEY:
 * {DISTRIBUTION: [...]}}} with the distributions uniform [a, b],
 * loguniform [a, b] (0 < a < b), randint [a, b) and choice [v, ...]. The
 * draws are made here, sample after sample and key after key in the
 * space's order, from one random stream of the seed, so the same plan and
 * seed give the same models; *out is a zipped sweep of them (names add
 * "-sNN" and the values drawn).
 */
cohort_status plan_search_parse(const struct yctx *c, const struct ynode *search, plan_sweep *out);

/* Check dotted model key `key` (what: how errors call it, "sweep key") and
 * write its canonical path (learning_rate spelled lr) into canon. */
cohort_status plan_key_path(const struct yctx *c, const struct ynode *key, const char *what,
                            char *canon, size_t size);
/* Parse the distribution `dist` of key into m (kind and bounds; a choice's
 * options must be numbers). Errors at the distribution's line. */
cohort_status plan_dist_parse(const struct yctx *c, const struct ynode *key,
                              const struct ynode *dist, pbt_mutation *m);
/* The extreme values m can take into ends (PBT_MAX_CHOICES of room): its
 * bounds (randint's high bound less one), or a choice's options; returns
 * how many. */
int plan_dist_ends(const pbt_mutation *m, double *ends);
/* One draw of m's distribution from r, as search draws: the same stream
 * gives the same value. */
struct rng_state;
double plan_dist_draw(const pbt_mutation *m, struct rng_state *r);

#endif
