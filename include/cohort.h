/*
 * cohort: train many neural-network models in one run, on every device a
 * machine has.
 *
 * The public C API. Every call returns a cohort_status and, on failure,
 * fills the caller's cohort_error (when not NULL) with a message that says
 * what went wrong and where (file:line of a plan, name of a model). NULL
 * handles and out-pointers, and values outside an enum or range, are refused
 * with COHORT_ERR_USAGE; functions that return a count return 0 for NULL. The library never prints
 * and never exits; it reports progress through an optional callback.
 *
 * Typical use (see examples/train_many.c):
 *
 *     cohort_error err;
 *     cohort_plan *plan;
 *     if (cohort_plan_load("examples/seed.yaml", NULL, 0, &plan, &err)) ...
 *     cohort_run_options opt;
 *     cohort_run_options_init(&opt);
 *     opt.out_dir = "runs/seed";
 *     cohort_run *run;
 *     if (cohort_run_create(plan, &opt, &run, &err)) ...
 *     cohort_status st = cohort_run_train(run, &err);
 *     for (int i = 0; i < cohort_run_model_count(run); i++) {
 *         cohort_model_result r;
 *         cohort_run_model_result(run, i, &r);
 *         ...
 *     }
 *     cohort_run_free(run);
 *     cohort_plan_free(plan);
 */
#ifndef COHORT_H
#define COHORT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COHORT_VERSION "0.1.0"

typedef enum cohort_status {
    COHORT_OK = 0,
    COHORT_ERR_USAGE,       /* the caller passed something invalid */
    COHORT_ERR_INPUT,       /* a plan, dataset or weights file is malformed */
    COHORT_ERR_NOMEM,       /* a memory pool or the host is out of memory */
    COHORT_ERR_IO,          /* a file could not be read or written */
    COHORT_ERR_DEVICE,      /* a device is missing or failed */
    COHORT_ERR_DIVERGED,    /* the loss became NaN or Inf */
    COHORT_ERR_INTERRUPTED, /* stopped by a signal or the caller */
    COHORT_ERR_PARTIAL,     /* training ran; some models failed, the rest finished */
    COHORT_ERR_INTERNAL     /* a bug in cohort */
} cohort_status;

typedef struct cohort_error {
    cohort_status status;
    char message[4096];  /* one line, or for a plan up to 20 errors one a line */
} cohort_error;

/* Name of a status ("ok", "input error", ...). Never NULL. */
const char *cohort_status_str(cohort_status st);

/* ---- logging --------------------------------------------------------- */

typedef enum cohort_log_level {
    COHORT_LOG_DEBUG,
    COHORT_LOG_INFO,
    COHORT_LOG_WARN,
    COHORT_LOG_ERROR
} cohort_log_level;

typedef void (*cohort_log_fn)(cohort_log_level level, const char *msg, void *user);

/* Route the library's log messages to fn (NULL: drop them, the default). */
void cohort_set_log(cohort_log_fn fn, void *user);

/* ---- plans ----------------------------------------------------------- */

typedef struct cohort_plan cohort_plan;

/*
 * Read a plan file (YAML or JSON), apply `overrides` ("dotted.key=value"
 * strings, as `--set` gives them), merge defaults, expand the sweep and
 * validate. On error *out is NULL and err says file:line and the problem.
 */
cohort_status cohort_plan_load(const char *path, const char *const *overrides, int n_overrides,
                               cohort_plan **out, cohort_error *err);

/* The same from text in memory; `name` stands for the file in messages. */
cohort_status cohort_plan_parse(const char *text, size_t len, const char *name,
                                const char *const *overrides, int n_overrides,
                                cohort_plan **out, cohort_error *err);

void cohort_plan_free(cohort_plan *plan);

int cohort_plan_model_count(const cohort_plan *plan);
const char *cohort_plan_model_name(const cohort_plan *plan, int i);
/* The plan's name: the file name without directory and extension. */
const char *cohort_plan_name(const cohort_plan *plan);

/* ---- devices --------------------------------------------------------- */

typedef enum cohort_mem_policy { COHORT_MEM_GROW = 0, COHORT_MEM_PREALLOCATE } cohort_mem_policy;

typedef struct cohort_device_info {
    char name[32];        /* "cpu:0", "gpu:1", "gpu:1/0" */
    char kind[8];         /* "cpu" or "cuda" */
    char model[128];      /* processor or GPU name */
    int threads;          /* CPU cores this device may use (cpu only) */
    int cc_major, cc_minor; /* compute capability (cuda only) */
    uint64_t total_bytes; /* memory of the physical device */
    uint64_t free_bytes;  /* free at discovery */
    uint64_t limit_bytes; /* hard limit of this (logical) device */
    int is_logical;       /* 1 for a part of a split device */
    cohort_mem_policy policy;
} cohort_device_info;

typedef struct cohort_devices cohort_devices;

/* Discover the devices of this machine: the CPU, and each CUDA GPU (found in
 * a short-lived child process, so this process never initializes CUDA). */
cohort_status cohort_devices_discover(cohort_devices **out, cohort_error *err);
void cohort_devices_free(cohort_devices *d);
int cohort_devices_count(const cohort_devices *d);
cohort_status cohort_devices_info(const cohort_devices *d, int i, cohort_device_info *out);
/* Why no GPU is listed ("" when GPUs are). */
const char *cohort_devices_note(const cohort_devices *d);
/* Split device `name` ("gpu:1") into n logical devices "gpu:1/0".. with hard
 * memory limits sizes[i] in bytes. Fails (COHORT_ERR_INPUT) when they add up
 * to more than the device has. */
cohort_status cohort_devices_split(cohort_devices *d, const char *name, const uint64_t *sizes,
                                   int n, cohort_mem_policy policy, cohort_error *err);
/* Memory policy and hard limit (0: keep) of device `name`. */
cohort_status cohort_devices_set_policy(cohort_devices *d, const char *name,
                                        cohort_mem_policy policy, uint64_t limit,
                                        cohort_error *err);

/* ---- runs ------------------------------------------------------------ */

typedef enum cohort_strategy {
    COHORT_STRATEGY_AUTO = 0,
    COHORT_STRATEGY_SEQUENTIAL,
    COHORT_STRATEGY_THREADS,
    COHORT_STRATEGY_PROCESSES,
    COHORT_STRATEGY_FUSED
} cohort_strategy;

const char *cohort_strategy_str(cohort_strategy s);

typedef enum cohort_event_kind {
    COHORT_EVENT_MODEL_START,
    COHORT_EVENT_STEP,       /* a few times per epoch, for progress display */
    COHORT_EVENT_EPOCH_END,
    COHORT_EVENT_MODEL_END   /* once a model, when it has ended (under a scheduler, not at
                                each rung it goes on from) */
} cohort_event_kind;

typedef struct cohort_event {
    cohort_event_kind kind;
    int model;            /* index in the plan */
    const char *name;
    const char *device;
    int epoch, epochs;    /* 1-based epoch, total epochs */
    int64_t step, steps;  /* step within the epoch, steps per epoch */
    double loss, accuracy, val_loss, val_accuracy; /* NaN when unknown */
    double mae, rmse, val_mae, val_rmse; /* EPOCH_END of a regression; else NaN */
    double seconds;       /* since the model started */
    const char *status;   /* MODEL_END: "ok", "failed", "diverged", "pruned", "interrupted" */
    const char *error;    /* MODEL_END: the reason, or "" */
    int stopped_early;    /* MODEL_END: early stopping ended it, at epoch `epoch` */
    int restored_epoch;   /* MODEL_END: its weights are this epoch's (restore_best_weights),
                             0 = the last epoch's */
} cohort_event;

/*
 * Events come one at a time, never two at once, under the run's lock, from
 * the thread that has the news: the thread that called cohort_run_train
 * under the sequential and processes strategies, the run's worker threads
 * under threads and fused when several jobs run side by side (auto picks
 * threads for several models on a multi-core CPU). The callback may call
 * cohort_run_request_stop and cohort_run_model_result; it must not call
 * cohort_run_train or cohort_run_free, nor wait on a thread that calls into
 * the run, and it should return soon: every model's next report waits for
 * it. ev and its strings are valid during the call only.
 */
typedef void (*cohort_event_fn)(const cohort_event *ev, void *user);

/*
 * A dataset in the caller's memory, for the plan's data specs
 * `memory:NAME` (cohort_run_options.memory). x is float32 [n, ...] in C
 * order, one sample of `sample_shape` (rank 1: (d); rank 2: (T, F), a
 * sequence of T steps; rank 3: (H, W, C), channels last); labels int32 [n] class labels in [0, 2^31 - 2], or
 * targets float32 [n, target_dim] real-valued targets, or neither (inputs
 * only: predict). Every value of x and targets must be finite: NaN or inf is
 * COHORT_ERR_INPUT naming the element ("memory:NAME: x[3, 2] is nan"). The
 * labels are copied when the dataset is loaded (they index memory: a label
 * changed later could not be checked); x and targets are read in place,
 * never copied or changed, and must stay alive until cohort_run_free (a
 * change to them meanwhile changes the numbers trained on, nothing else).
 */
typedef struct cohort_data {
    const char *name;             /* NAME of memory:NAME */
    const float *x;
    int64_t n;
    int sample_rank;              /* 1, 2 or 3 */
    int64_t sample_shape[3];
    const int32_t *labels;        /* NULL: none */
    const float *targets;         /* NULL: none */
    int64_t target_dim;
    /* NULL, or the classes' names (text labels, as a CSV's): label i is
     * class_names[i]; n_class_names of them, sorted by strcmp, each 1 to 200
     * bytes of UTF-8. Copied when the dataset is loaded. */
    const char *const *class_names;
    int64_t n_class_names;
} cohort_data;

typedef struct cohort_run_options {
    const char *out_dir;      /* NULL: no files written */
    cohort_strategy strategy; /* AUTO: the plan's, else chosen */
    int threads;              /* CPU threads in all, >= 0; 0: every core */
    int resume;               /* continue from the checkpoints in out_dir */
    cohort_devices *devices;  /* NULL: discover, and apply the plan's devices:
                                 section; else these, as they are (borrowed) */
    cohort_event_fn on_event; /* NULL: none; see cohort_event_fn for the threads */
    void *user;
    int shard_index, shard_count; /* train only share shard_index of shard_count
                                     (split by cost); 0/0: every model */
    int overwrite;            /* out_dir may hold another run's results: remove
                                 them (else such a directory is refused) */
    const cohort_data *memory; /* [n_memory] datasets for memory:NAME specs (borrowed) */
    int n_memory;
} cohort_run_options;

void cohort_run_options_init(cohort_run_options *opt);

typedef struct cohort_run cohort_run;

/* Prepare a run: load the datasets, plan memory and placement. Nothing is
 * trained. Fails (COHORT_ERR_INPUT) when the data cannot be read or shapes
 * do not agree; models that cannot fit are marked and reported later. The
 * plan is borrowed, not copied: it must outlive the run (cohort_run_free
 * before cohort_plan_free), since the models' names in events and results
 * point into it. */
cohort_status cohort_run_create(const cohort_plan *plan, const cohort_run_options *opt,
                                cohort_run **out, cohort_error *err);

/* Train every model. Returns COHORT_OK when every model succeeded,
 * COHORT_ERR_PARTIAL when training ran and at least one model failed (err
 * says how many; each model's result says why), COHORT_ERR_INTERRUPTED when
 * stopped, or another error when nothing could be trained. A run trains
 * once: a second call is COHORT_ERR_USAGE (create a new run, with
 * opt.resume to go on from its checkpoints). */
cohort_status cohort_run_train(cohort_run *run, cohort_error *err);

void cohort_run_free(cohort_run *run);

int cohort_run_model_count(const cohort_run *run);

/* Ask a training run to stop (from a signal handler, another thread or
 * on_event): the models finish their step, checkpoint (with an out_dir), and
 * cohort_run_train returns COHORT_ERR_INTERRUPTED; --resume (opt.resume)
 * continues them. */
void cohort_run_request_stop(cohort_run *run);

/* The memory plan, placement and groups of a prepared run, as JSON (the
 * output of `cohort plan --json`); after cohort_run_train, the groups it
 * trained in (under a scheduler, its first phase's). malloc'd, the caller
 * frees it with cohort_free. NULL with err on failure. */
char *cohort_run_plan_json(cohort_run *run, cohort_error *err);
/* Free memory the library returned. */
void cohort_free(void *p);

typedef struct cohort_model_result {
    const char *name;     /* the plan's: valid while the plan is (see cohort_run_create) */
    const char *status;   /* "ok", "failed", "diverged", "pruned", "interrupted";
                             "pending" or "running" while the run trains */
    const char *error;    /* "" when ok */
    const char *device;
    int epochs_run;
    int best_epoch;       /* 1-based; 0 when none */
    double best_val_loss, best_val_accuracy;
    double final_loss, final_accuracy;
    double test_loss, test_accuracy; /* NaN without test data */
    double seconds;
    uint64_t params;
    /* peak_bytes: the pool's measured peak, 0 where nothing was measured (a
     * refused model; a worker process killed before it reported, null in
     * results.json). */
    uint64_t planned_bytes, peak_bytes;
    /* Regression (real-valued targets): the errors in place of accuracy,
     * which is NaN; NaN for classification. */
    double best_val_mae, best_val_rmse, final_mae, final_rmse, test_mae, test_rmse;
} cohort_model_result;

/* Model i's result so far. May be called while cohort_run_train runs, from
 * another thread or from on_event: it reads the run under its lock. name
 * points into the plan, the other strings into the run; each stays as it
 * was given until cohort_run_free (a later call gives a new error string
 * where the model's error changed). */
cohort_status cohort_run_model_result(const cohort_run *run, int i, cohort_model_result *out);

/* ---- saved models ------------------------------------------------------ */

/*
 * The outputs of the model saved in `weights` (a .safetensors file cohort
 * wrote) for the samples of x (labels and targets are ignored, and not
 * checked; x must be finite): out gets
 * [x->n, *n_out] floats, probabilities for a softmax or sigmoid output
 * (logits with from_logits), values for regression. out NULL: only *n_out.
 * Runs on the CPU.
 */
cohort_status cohort_predict(const char *weights, const cohort_data *x, float *out,
                             int64_t out_len, int *n_out, cohort_error *err);

/*
 * The model saved in `weights` as an ONNX model (opset 17) in the file
 * `out` (written atomically): input `input` [N, H, W, C] (channels last) or
 * [N, features] as the model's data were, output `output` [N, outputs],
 * what cohort_predict gives. A layer ONNX has no form for is
 * COHORT_ERR_INPUT naming it.
 */
cohort_status cohort_export_onnx(const char *weights, const char *out, cohort_error *err);

#ifdef __cplusplus
}
#endif
#endif
