/*
 * run: turns a plan into trained models: loads the datasets once, plans each
 * model's memory, places models on devices, runs them under a strategy and
 * writes the output directory (results.json, weights, history). Owns cohort_run.
 */
#ifndef COHORT_RUN_H
#define COHORT_RUN_H

#include "cohort.h"
#include "data/data.h"
#include "device/device.h"
#include "plan/plan.h"
#include "train/train.h"

#include <pthread.h>

struct strbuf;

/* One exploit of pbt in a model's lineage: at `epoch` it took the weights,
 * optimizer and training state of model `from` and these settings. */
typedef struct pbt_step {
    int epoch;
    int from;                    /* the donor: an index into cohort_run.m */
    double values[PBT_MAX_KEYS]; /* in the order of scheduler.mut */
} pbt_step;

/* A model's peak_bytes when nothing measured it: its worker process ended
 * before it reported (results.json writes null; 0 is a model that took
 * nothing, as one refused before training). */
#define RUN_PEAK_UNKNOWN UINT64_MAX

typedef struct model_entry {
    const model_spec *spec; /* the plan's, or own_spec once pbt changed it */
    int index;             /* in run->m */
    int plan_index;        /* in the plan */
    int device;            /* index in the registry, -1 = not placed */
    model_layout L;        /* the layout when trained alone (K = 1) */
    uint64_t planned_bytes;
    uint64_t peak_bytes;   /* RUN_PEAK_UNKNOWN: never reported (its worker was killed) */
    train_result res;
    double test_loss, test_accuracy, test_mae, test_rmse; /* NaN: none, or not this task's */
    int64_t *confusion;    /* [classes, classes] on the test set: row true, column predicted */
    char weights[COHORT_PATH_MAX];      /* relative to the output directory */
    char best_weights[COHORT_PATH_MAX];
    int done;              /* finished: ok, failed, diverged or refused */
    int group;             /* the job (training group) it trains in, -1 = none */
    int resumed;           /* taken finished from a previous run's results.json */
    int start_epoch;       /* --resume: where its checkpoint stands */
    int64_t start_step;
    int stop_epoch;        /* the scheduler's rung it trains to now; 0: its last epoch */
    int pruned_rung;       /* pruned: at which rung (0-based) */
    model_spec *own_spec;  /* pbt: the model's spec with its settings now, owned (config_json too) */
    pbt_step *lineage;     /* pbt: its exploits, oldest first, owned */
    int n_lineage;
    /* res.error as cohort_run_model_result last gave it (owned, under
     * run->lock): res.error changes while a caller reads, so a change gives
     * a new copy, and the copies given before stay until the run is freed
     * (run->old_errors), for a poller that still reads one. */
    char *result_error;
    double next_history;   /* history/NAME.csv is not rewritten after an epoch before this */
    char *pending_record;  /* its final record, not journaled yet (run_flush_records), owned */
} model_entry;

/* A model's checkpoint, read back. */
typedef struct ckpt {
    int found;
    int epoch;             /* whole epochs done */
    int64_t step;          /* steps done of the next epoch */
    float *params;         /* [4, P]: params, opt.m, opt.v, best */
    int have[4];
    train_result res;      /* best, wait, partial sums, seconds (history: below) */
    epoch_metrics *history;/* [epochs] */
    int exploits;          /* pbt: the exploits its state has been through (the lineage's
                            * length when written), -1 where it does not say */
} ckpt;

struct cohort_run {
    const cohort_plan *plan;
    cohort_run_options opt;
    cohort_strategy strategy;
    char strategy_why[256];
    cohort_dataset *train_ds, *test_ds, *val_ds;
    data_view train, val, test;
    int has_val, has_test;
    int n_in, n_classes;
    sample_shape in_shape; /* one sample as the models see it: data.input_shape, or
                              the training set's own; n_in values */
    device_registry *devices;
    int own_devices;       /* devices was discovered here, and is freed here */
    int n;
    model_entry *m;
    char out_dir[COHORT_PATH_MAX];
    pthread_mutex_t lock;  /* model entries, results.json, events: one writer at a time */
    _Atomic int stop;      /* set by signal handlers and a full disk, read by every job */
    _Atomic int disk_full; /* a write failed for lack of space: stop, write no more */
    int lock_fd;           /* the output directory's lock, -1 = none */
    double next_report;    /* report.html is not written again before this time */
    double next_results;   /* nor results.json by run_tick_results */
    double write_every;    /* seconds between a model's checkpoints and history rewrites
                              while it trains, and between journal flushes (run_write_every) */
    double next_flush;     /* the pending records are not journaled before this time */
    int *pending;          /* [n]: models whose record waits (pending_record), in order */
    int n_pending;
    int pbt_decided;       /* pbt: the intervals decided so far (journaled in DIR/pbt.json) */
    int trained;           /* cohort_run_train has run: a run trains once */
    struct run_group_info *trained_groups; /* the groups it trained in (owned), for the plan
                                              after */
    int n_trained_groups;
    char **old_errors; /* result_error copies replaced since, freed with the run */
    int n_old_errors;
};

/* This thread is inside run's on_event callback, so holds run->lock. */
int run_in_event(const cohort_run *run);

/* The index in run->m of the model named name; -1 when the run has none. */
int run_model_index(const cohort_run *run, const char *name);

/* A model rebuilt from a weights file cohort wrote (run/saved.c). */
typedef struct saved_model {
    cohort_plan *plan;       /* a plan of that one model, init_from the file */
    device_registry *devices;
    train_group *g;          /* after saved_model_build */
    char **names;            /* the classes' text labels, or NULL */
    int32_t n_names;
    sample_shape in;         /* the stored image shape, rank 0 when flat or unknown */
    int64_t n_in;            /* values per sample, 0 when not stored */
    int on_classes;          /* trained on class labels */
    char label_columns[512]; /* the CSV target columns it was trained on, "" = none */
    char label_column[64];   /* the CSV label column it was trained on, "" = the default */
} saved_model;

/* Read the spec, shapes and class names of `weights` (COHORT_ERR_INPUT or
 * _IO naming the file when it is not cohort's). Nothing is trained. */
cohort_status saved_model_open(const char *weights, saved_model *m, cohort_error *err);
/* The shape the model takes its input in, for data of shape `data` (as many
 * values): the stored image shape, else flat when the input size is stored
 * (a model trained on flat data given images of C > 1 channels), else data. */
sample_shape saved_model_input(const saved_model *m, sample_shape data);
/* Make its group on cpu:0 for samples of shape `in`, weights loaded. */
cohort_status saved_model_build(saved_model *m, sample_shape in, cohort_error *err);
void saved_model_free(saved_model *m);

/* The epoch whose weights a finished model ended with when early stopping
 * restored them (restore_best_weights), else 0. */
int run_restored_epoch(const model_entry *e);

/* Append results.json's "data" object of run to b: the dataset specs, the
 * sample counts of the training, validation and test sets, the features,
 * the classes and their text labels. */
void run_data_json(struct strbuf *b, const cohort_run *run);
/* Write results.json (atomically) from the current state of every model. */
cohort_status run_write_results(cohort_run *run, cohort_error *err);
/* COHORT_ERR_INPUT "no model can be trained" where placement left no model
 * to train and none resumes. */
cohort_status run_check_trainable(const cohort_run *run, cohort_error *err);
/*
 * A sweep's cost must grow with its size, not its square: results.json
 * holds every model, so it is written at most every RESULTS_EVERY seconds
 * (or ten times as long as the last write took) while models train
 * (run_tick_results) and at the end, and each model's
 * final record is journaled on its own in records/NAME.json as it
 * finishes (run_write_record), which --resume reads before results.json.
 */
#define RESULTS_EVERY 1.0
cohort_status run_tick_results(cohort_run *run, cohort_error *err);
/* Journal model e's record now (the pending ones first, run_flush_records). */
cohort_status run_write_record(cohort_run *run, const model_entry *e, cohort_error *err);
/*
 * A model's files while a sweep runs (docs/design.md, "Never losing work").
 * A tiny model trains in a millisecond, and five files a model, each
 * fsynced with its folder, cost more than its training. So:
 * - a model's checkpoint is written after an epoch only when write_every
 *   seconds have passed since its job's last one (or its job started), at a
 *   scheduler's rung or interval, and when the run stops; not after its
 *   last epoch, where its final weights and record follow. A kill loses at
 *   most the epoch in progress and write_every seconds before it: --resume
 *   trains them again, to the same bits.
 * - history/NAME.csv is rewritten after an epoch at most every write_every
 *   seconds, and when the model ends.
 * - its best weights wait in memory for its next checkpoint or its end
 *   (the job's), and are a link to its final weights where the two are the
 *   same bytes.
 * - weights and histories are fsynced before their rename, but their
 *   folders only before a record that names them is journaled; records
 *   wait in memory (pending_record) and are journaled together at most
 *   every write_every seconds, after one fsync of models/ and history/.
 * COHORT_CHECKPOINT_EVERY=S sets write_every (default 1 s); 0 is the
 * behaviour before: a checkpoint and a history after every epoch (the last
 * too), every record journaled at once.
 */
#define WRITE_EVERY 1.0
/* write_every from the environment (COHORT_CHECKPOINT_EVERY), else WRITE_EVERY. */
double run_write_every(void);
/* Keep model e's record (as e stands now) to be journaled with the next
 * batch, and journal the batch when it is due. */
cohort_status run_queue_record(cohort_run *run, model_entry *e, cohort_error *err);
/* Journal the pending records: models/ and history/ fsynced first, then
 * each record renamed into records/, then records/ fsynced. force: now,
 * else only when write_every has passed since the last batch. */
cohort_status run_flush_records(cohort_run *run, int force, cohort_error *err);
/* Write models/NAME[.best].safetensors from host parameters; rel (of
 * COHORT_PATH_MAX bytes) receives the path relative to the output directory.
 * sync: file_write_atomic_ex's flags. */
cohort_status run_write_weights(cohort_run *run, const model_entry *e, const float *params,
                                int best, int sync, char *rel, cohort_error *err);
/* Append model e's pbt lineage to b as a JSON list of {epoch, from, values}. */
void run_pbt_lineage_json(struct strbuf *b, const cohort_run *run, const model_entry *e);
/* Write history/NAME.csv from the model's history so far (sync: as
 * file_write_atomic_ex's flags). */
cohort_status run_write_history(cohort_run *run, model_entry *e, int sync, cohort_error *err);

/* Write model e's checkpoint (k in group g) after `epoch` epochs and `step`
 * steps; scratch holds 4 * P floats. Atomic. */
cohort_status ckpt_write(cohort_run *run, const model_entry *e, train_group *g, int k,
                         const train_result *r, int epoch, int64_t step, float *scratch,
                         cohort_error *err);
/* Write model e's checkpoint from host state: data[i] ([P] floats) where
 * have[i], for params, opt.m, opt.v and best; history from r. Atomic. */
cohort_status ckpt_write_state(cohort_run *run, const model_entry *e, float *const data[4],
                               const int have[4], const train_result *r, int epoch, int64_t step,
                               cohort_error *err);
/* Read model e's checkpoint; c->found is 0 when it has none. An error when it
 * is unreadable or was written for another config. */
cohort_status ckpt_read(const cohort_run *run, const model_entry *e, ckpt *c, cohort_error *err);
/* ckpt_read without the config check; *config (when not NULL) receives the
 * config the checkpoint was written for (malloc'd, NULL when none). */
cohort_status ckpt_read_any(const cohort_run *run, const model_entry *e, ckpt *c, char **config,
                            cohort_error *err);
/* Set e to go on from checkpoint c: its start, epochs run, history, best and
 * seconds, and its best weights' file (models/NAME.best.safetensors) where c
 * has a best epoch and the run before left that file. */
void ckpt_start_from(const cohort_run *run, model_entry *e, const ckpt *c);
void ckpt_free(ckpt *c);
/* --resume: take the finished models of DIR/results.json. */
cohort_status run_resume(cohort_run *run, cohort_error *err);
/* Lock directory dir (flock on dir/.lock, holding our pid); *fd receives
 * the lock, held until closed. Refuses (COHORT_ERR_USAGE) when another
 * process holds it; a lock left by a killed process is taken over. */
cohort_status out_dir_lock(const char *dir, int *fd, cohort_error *err);
/* Remove the temporary files (NAME.tmp.PID) a killed writer left in dir. */
void out_dir_remove_temporaries(const char *dir);
/* Lock the run's output directory and clear what killed runs left there. */
cohort_status run_lock(cohort_run *run, cohort_error *err);
/* With the lock held: refuse (COHORT_ERR_USAGE) an output directory whose
 * results.json is another run's (another plan or other models), unless the
 * run resumes it (the same plan); with opt.overwrite, remove that run's files
 * instead. */
cohort_status run_claim_out_dir(cohort_run *run, cohort_error *err);

/* The targets of ds are what a model of spec s with n_out outputs takes:
 * class labels for sparse_categorical_crossentropy, target rows as wide as
 * the output for the others (or class labels, made one-hot or taken as
 * numbers). Class labels are checked with the layout. Train checks its
 * training data, eval and predict their data, with the same message. */
cohort_status run_check_targets(const model_spec *s, int n_out, const cohort_dataset *ds,
                                cohort_error *err);
/* The model reads its data as token ids: its first layer is an embedding
 * (an entry with layer_ops.tokens). */
int run_takes_tokens(const model_spec *s);
/* ds is what a model of spec s reads: for a model that takes token ids,
 * every value of ds is one in its first layer's range (data_check_tokens,
 * with scan, data_tokens_scan's of ds); for any other model, ds was not read
 * as token ids where that changed its values (uint8 arrays, unscaled for the
 * run's embeddings). Train checks each of its datasets, eval and predict
 * theirs. */
cohort_status run_check_tokens(const model_spec *s, const cohort_dataset *ds,
                               const data_tokens *scan, cohort_error *err);
/* Apply a plan's devices: section (splits, policies, limits) to r; errors
 * name the plan's file and line. */
cohort_status devices_apply_plan(device_registry *r, const cohort_plan *plan, cohort_error *err);

/* The cores the models on device dev may use in all: a CPU part's share
 * (devices_split), or INT_MAX for a device bounded only by the run's
 * threads (jobs.c). */
int run_device_cores(const cohort_run *run, int dev);
/* Train every job of the run under its strategy (strategy.c). */
cohort_status run_jobs(cohort_run *run, cohort_error *err);
/* run_jobs in phases, one a rung of the plan's scheduler, pruning
 * between them (run/prune.c). */
cohort_status run_scheduler_prune(cohort_run *run, cohort_error *err);
/* The scheduler's phases (prune.c, pbt.c). scheduler_phase trains every live
 * model to epoch R (or its last, or max_t, if sooner) under the plan's
 * strategy; a model that has the epochs already sits the phase out where
 * reached_waits is set, else only once its record says it is done (one
 * resumed from a checkpoint at R still ends the phase). Then the models that
 * ended for good (their last epoch, early stopping, divergence, failure)
 * leave `live`. After a stop request between phases, scheduler_mark_waiting
 * makes the live models waiting at one (not those that ended in the phase
 * the stop cut short) interrupted, with `why`: they go on with --resume. */
cohort_status scheduler_phase(cohort_run *run, unsigned char *live, int R, int reached_waits,
                          cohort_error *err);
void scheduler_mark_waiting(cohort_run *run, const unsigned char *live, const char *why);
/* Whether model e's job ended at a rung or pbt interval below its last
 * epoch, in good standing: the scheduler's decision there, not the job,
 * ends the model or sends it on (prune.c). */
int run_at_rung(const cohort_run *run, const model_entry *e);
/* The model's COHORT_EVENT_MODEL_END, from its state now: once a model,
 * when it has ended for good. Caller holds run->lock (events.c). */
void run_emit_model_end(cohort_run *run, const model_entry *e);
/* Make model e go on to `target` epochs in the next phase of a scheduler:
 * from its checkpoint when it has trained before. */
cohort_status run_continue_to(cohort_run *run, model_entry *e, int target, cohort_error *err);
/* run_jobs in phases of perturbation_interval epochs, with pbt's exploit
 * and explore between them (run/pbt.c). */
cohort_status run_scheduler_pbt(cohort_run *run, cohort_error *err);
/* --resume under pbt, before the records are read: apply the journal
 * (DIR/pbt.json) to the models' settings and lineage, and finish an exploit
 * a kill interrupted. */
cohort_status run_pbt_replay(cohort_run *run, cohort_error *err);
/* pbt's checks of the models: they can take each other's state, and no
 * mutation changes a model's memory (COHORT_ERR_INPUT at the plan's line). */
cohort_status run_check_pbt(const cohort_run *run, cohort_error *err);
/* The epochs at which pbt exploits, k * perturbation_interval below the
 * models' most epochs, into *epochs (malloc'd; the caller frees it); returns
 * how many, -1 when out of memory. */
int run_pbt_intervals(const cohort_run *run, int **epochs);
/* How many models of a population of n pbt takes from, and replaces. */
int run_pbt_quantile(const cohort_run *run, int n);
/* The scheduler's metric is one every model records (COHORT_ERR_INPUT at
 * the plan's line when not). */
cohort_status run_check_scheduler(const cohort_run *run, cohort_error *err);
/* The most epochs the scheduler lets the run's models train (*epochs), and
 * theirs without it (*full); returns how many rungs it has. */
int run_scheduler_budget(const cohort_run *run, long long *epochs, long long *full);

/* ---- what the command line reads of a run (runner.c) ---- */

/* Model i of the run as the command's table and messages show it (after
 * training, or before, from the thread that trains). */
typedef struct run_model_summary {
    const char *name;    /* its spec's */
    model_state state;
    const char *error;   /* "" where none */
    const char *device;  /* "-" where it has none */
    size_t params;
    int epochs_run, best_epoch; /* best_epoch 1-based, 0: none */
    int stopped_early, restored_epoch; /* restored_epoch: run_restored_epoch */
    int pruned_rung;     /* pruned: at which rung */
    int regression;      /* errors (mae) in place of accuracy */
    double best_val_loss, best_val_accuracy, best_val_mae; /* NaN without a best epoch */
    double test_accuracy, test_mae, seconds;
    int exploits;        /* pbt: entries of its lineage; the last one's epoch and donor */
    int exploit_epoch;
    const char *exploit_from;
} run_model_summary;
void run_model_summary_of(const cohort_run *run, int i, run_model_summary *out);
/* The strategy the run trains under, and why auto picked it ("" when
 * not picked). */
cohort_strategy run_strategy(const cohort_run *run);
const char *run_strategy_why(const cohort_run *run);
/* Whether the run stopped because the disk was full. */
int run_disk_was_full(const cohort_run *run);

/* A training group as run_jobs forms it: the models (indices into
 * run->m) trained as one group on one device, and the bytes it plans. */
typedef struct run_group_info {
    int device, n;
    int idx[COHORT_MAX_GROUP];
    uint64_t bytes;
} run_group_info;

/* The groups run_jobs would train, without training (cohort plan);
 * *out is malloc'd, *n its length. Sets each model's group. */
cohort_status run_plan_groups(cohort_run *run, run_group_info **out, int *n, cohort_error *err);

/* A member's planned bytes in a group of n planning `bytes`: its share of the
 * group's one allocation, rounded up (results.json's planned_bytes, which
 * the pool's peak is measured against). */
uint64_t run_group_share(uint64_t bytes, int n);
/* Model i's planned bytes under the groups g: its share of its group, or,
 * in none, its own plan. `cohort plan` prints this number. */
uint64_t run_model_planned(const cohort_run *run, const run_group_info *g, int n_groups, int i);
/* The device memory a job (a model, or a fused group) of `bytes` planned
 * bytes takes on device `device` while it runs: those, its context's
 * (device_ctx_bytes: a GPU's cuBLAS workspace and the reductions' scratch,
 * from the same pool) and, under processes on a GPU, its worker's own CUDA
 * context (gpu_worker_bytes). The runner reserves this much before a job
 * starts; `cohort plan` counts it. (jobs.c) */
uint64_t run_job_room(const cohort_run *run, int device, uint64_t bytes);
/* Every member of g draws the same shuffle order (shared_order). */
int run_group_shares_order(const cohort_run *run, const run_group_info *g);
/* The plan of run as `cohort plan --json` prints it (malloc'd; NULL: no memory). */
char *run_plan_json(const cohort_run *run, const run_group_info *g, int n_groups);

#endif
