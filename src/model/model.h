/*
 * model: what a model is (layer specs, optimizer, loss, fit settings), its
 * shapes, its parameter layout and the exact memory plan of a training group
 * of K same-shaped models. Owns no memory: it only computes sizes and offsets.
 */
#ifndef COHORT_MODEL_H
#define COHORT_MODEL_H

#include "cohort.h"
#include "model/shape.h"
#include "optim/kind.h"

#include <stddef.h>
#include <stdint.h>

#define COHORT_MAX_LAYERS 64
#define COHORT_NAME_MAX 128
#define COHORT_PATH_MAX 1024

/* Keras's activations. gelu is Keras's exact form (erf, approximate false);
 * silu is also called swish. New kinds go at the end. */
typedef enum act_kind {
    ACT_LINEAR,
    ACT_RELU,
    ACT_SIGMOID,
    ACT_TANH,
    ACT_SOFTMAX,
    ACT_GELU,
    ACT_SILU
} act_kind;
/* The activation's derivative is made from its input Z (gelu, silu), not
 * from its output: a layer with one keeps Z from forward to backward (in
 * its saved tensors, counted in n_saved). */
static inline int act_needs_input(act_kind a) { return a == ACT_GELU || a == ACT_SILU; }
/* A layer kind is an entry of the layer table (layers/layer.h): one file of
 * src/layers/ and one line of its table. model/ reaches a kind only through
 * its entry, and knows none by name. */
struct layer_ops;
/* Keras's losses. SCE takes class labels; the others take target rows as
 * wide as the output (class labels one-hot, or the label as a number for a
 * single output). */
typedef enum loss_kind {
    LOSS_SCE,   /* sparse_categorical_crossentropy */
    LOSS_MSE,   /* mean_squared_error */
    LOSS_CCE,   /* categorical_crossentropy: one-hot or probability rows */
    LOSS_BCE,   /* binary_crossentropy: 0/1 or probability targets per output */
    LOSS_MAE,   /* mean_absolute_error */
    LOSS_HUBER, /* huber, with delta */
    LOSS_KIND_COUNT
} loss_kind;
/* What the metrics of a model are: accuracy of the argmax (classes), Keras's
 * binary_accuracy (threshold 0.5, binary_crossentropy), or for real-valued
 * targets the mean absolute error and the root mean squared error. */
typedef enum metric_kind { METRIC_ARGMAX, METRIC_BINARY, METRIC_ERRORS } metric_kind;

const char *act_name(act_kind a);
/* The plan's name of an optimizer (its entry's, optim/table.c). */
const char *opt_name(opt_kind o);
const char *loss_name(loss_kind l);

/* class_weight names at most this many classes. */
#define COHORT_MAX_CLASS_WEIGHTS 256

/* The groups of one run hold at most this many models. */
#define COHORT_MAX_GROUP 64

/* Bytes of a layer kind's own settings (the entry's struct; layers/layer.h). */
#define LAYER_SETTINGS_BYTES 64

/*
 * One layer of a model spec: its kind (the table's entry), the two settings
 * that the machinery outside an entry applies to any kind that takes them,
 * and the kind's own settings, a struct of the entry's that only the entry
 * reads (units, kernel size, rate, ...). A plain value: copied with the
 * model spec, compared by the entry's fusion key.
 */
typedef struct layer_spec {
    const struct layer_ops *kind; /* the entry of the table; never NULL in a parsed spec */
    int line;        /* the plan line of the layer, for shape errors; 0: unknown */
    act_kind act;    /* the activation its output gets (the layout's and the loss check's);
                      * ACT_LINEAR for a kind that takes none */
    float l1, l2;    /* kernel_regularizer on the layer's first tensor (0: none) */
    union {          /* the kind's settings: the entry's own struct, copied in and out
                      * (layers/layer.h's LAYER_SETTINGS_OF); f: a float setting in place,
                      * for PBT (LAYER_SETTINGS_FLOAT) */
        unsigned char bytes[LAYER_SETTINGS_BYTES];
        float f[LAYER_SETTINGS_BYTES / sizeof(float)];
        max_align_t align;
    } settings;
} layer_spec;

/* Keras's learning-rate schedules, called with the number of updates done
 * before the one they give the rate of (the first update: step 0). */
typedef enum scheduler_kind {
    SCHED_NONE,
    SCHED_COSINE,      /* CosineDecay, with its optional linear warmup */
    SCHED_EXPONENTIAL, /* ExponentialDecay */
    SCHED_PIECEWISE    /* PiecewiseConstantDecay */
} scheduler_kind;
#define COHORT_MAX_PIECES 16
typedef struct lr_schedule {
    scheduler_kind kind;
    int64_t decay_steps;    /* cosine, exponential */
    double alpha;           /* cosine: the final fraction of the rate */
    int64_t warmup_steps;   /* cosine */
    double warmup_target;   /* cosine: NAN: no warmup */
    double decay_rate;      /* exponential */
    int staircase;          /* exponential */
    int n_bounds;           /* piecewise: boundaries, and one value more */
    int64_t bounds[COHORT_MAX_PIECES];
    double values[COHORT_MAX_PIECES + 1];
} lr_schedule;

/* An optimizer's settings: the fields its entry's keys name (optim/NAME.c:
 * the plan's key, its default and range), the others zero; lr, the clips
 * and the schedule are every optimizer's. */
typedef struct optim_spec {
    opt_kind kind;
    float lr;
    float momentum;
    int nesterov;
    float beta1, beta2; /* beta_1, beta_2 */
    float eps;          /* epsilon */
    float weight_decay;
    float rho;
    int centered;
    float init_accum;   /* initial_accumulator_value */
    /* At most one of the three clips (Keras's rule); 0: not set. */
    float clipnorm;        /* each variable's gradient to this L2 norm */
    float global_clipnorm; /* all of the model's gradients together */
    float clipvalue;       /* each element to [-clipvalue, clipvalue] */
    lr_schedule schedule;
} optim_spec;

/* Keras's ReduceLROnPlateau callback. */
typedef struct plateau_spec {
    int enabled;
    char monitor[32];
    double factor;
    int patience;
    double min_delta;
    int cooldown;
    double min_lr;
} plateau_spec;

typedef struct early_stop_spec {
    int enabled;
    char monitor[32]; /* val_loss, val_accuracy, loss, accuracy */
    int patience;
    double min_delta; /* a double, as Keras's (a float 0.01 is below 0.01) */
    int restore_best; /* restore_best_weights */
} early_stop_spec;

typedef struct model_spec {
    char name[COHORT_NAME_MAX];
    int line;                  /* line in the plan where the model starts */
    int n_layers;
    layer_spec layers[COHORT_MAX_LAYERS];
    optim_spec opt;
    loss_kind loss;
    int from_logits;           /* cross-entropies: the last layer is linear and gives logits */
    float label_smoothing;     /* cross-entropies: targets t(1 - s) + s/C (binary: s/2) */
    float huber_delta;         /* huber: 1.0 */
    int n_class_weight;        /* class_weight: weights of classes [0, n), 0: none */
    float class_weight[COHORT_MAX_CLASS_WEIGHTS];
    int epochs;
    int batch_size;
    int shuffle;
    uint64_t seed;
    int shared_order;          /* the plan's shared_order: one shuffle order for every model */
    early_stop_spec early_stop;
    plateau_spec plateau;      /* reduce_lr_on_plateau */
    char device[32];           /* "" = placed by cohort */
    char init_from[COHORT_PATH_MAX]; /* "" = Glorot-uniform init */
    char *config_json;         /* the expanded spec, as JSON (owned) */
} model_spec;

/* Fill spec with the defaults a plan starts from (Keras's where one exists). */
void model_spec_defaults(model_spec *spec);
/* The seed of the model's shuffle orders: its own seed, or under the plan's
 * shared_order one seed common to every model, so that a fused group loads
 * each batch once and a model trained alone still sees the same order. */
uint64_t model_order_seed(const model_spec *spec);
/* Two specs draw the same shuffle order every epoch. */
int model_same_order(const model_spec *a, const model_spec *b);
/* JSON object of the spec (malloc'd), as stored in results and weights. */
char *model_spec_to_json(const model_spec *spec);

/* The settings that may change between epochs without changing shapes or
 * memory (PBT's hyperparam_mutations; model/hyper.c), by canonical dotted
 * path: optimizer.lr, momentum, beta_1, beta_2, epsilon, weight_decay, rho;
 * layers.N.dropout, layers.N.kernel_regularizer.l1 and .l2 (layers.N.J.KEY:
 * layer J inside the residual at N). */
int model_hyper_known(const char *path);
/* The float of spec at path, or NULL when spec has no such setting (its
 * optimizer does not take it, layer N is not a dropout layer, ...). */
float *model_hyper_field(model_spec *spec, const char *path);
/* Whether v is a value the setting at path takes; range (when not NULL,
 * size bytes) receives the allowed interval as text, "[0, 1)". */
int model_hyper_allows(const char *path, double v, char *range, size_t size);

/*
 * One layer of a model in the group's layout: what the layer table's plan
 * op (layers/layer.h) gives. Offsets and counts are floats per model; "per
 * row" ones are per sample of a batch.
 */
typedef struct layer_plan {
    const struct layer_ops *kind; /* the entry of the table */
    int index;             /* its place in model_spec.layers, the flat list (a block's
                            * layers between its opening and closing entries): the key of
                            * its initial weights and dropout masks */
    int path[2];           /* its weight names: layers.{path[0]}, or inside a block (a
                            * residual; inner 1) at path[0], layers.{path[0]}.{path[1]}
                            * (layers/block.c: layer_plan_name) */
    int inner;
    int pair;              /* a block's opening or closing entry: the index of the other
                            * one (layer_pass's pair_X and pair_saved); -1: none */
    act_kind act;          /* the activation its kernels apply: the spec's, except the
                            * model's output activation that the loss applies (softmax;
                            * sigmoid under binary_crossentropy), which is linear here */
    int batch;             /* the batch size B the per-row sizes are for */
    sample_shape in, out;
    sample_shape flat_from; /* rank 3: the image a flat input was flattened from, whose
                             * channels-first order a dense layer's weight file keeps */
    int mask_in;           /* its input carries the token mask of a mask_zero embedding:
                            * step t of sample r is padding where the model's input token
                            * [r][t] is 0 (layer_pass.tokens) */
    int mask_out;          /* its output carries that mask on (the layout sets it when
                            * mask_in and the output is a sequence of the same steps; an
                            * entry's plan may set it: the embedding that makes the mask) */
    size_t p_off, n_params; /* trained parameters, in the trained region of BUF_PARAMS */
    size_t n_fused;        /* the first n_fused of them may take their step in backward
                            * (the backend's dense_step); 0: none */
    size_t s_off, n_state; /* non-trained state (moving statistics), after the trained region */
    size_t act_off;        /* per row: its output in BUF_ACT; an alias's is its input's */
    int alias;             /* its output is in its input's place: unchanged (flatten) or
                            * overwritten (may_overwrite_input) */
    size_t saved_off, n_saved; /* per row: kept from forward to backward (BUF_SAVED) */
    size_t stat_off, n_stat;   /* per model: kept from forward to backward (BUF_STAT) */
    size_t n_work;         /* per row: scratch of one pass (BUF_WORK), shared by all layers */
    /* conv2d, pooling: the window, strides and the padding before the first
     * row and column (TensorFlow's `same` puts the odd pixel after the last);
     * multi_head_attention: kh heads, kw key_dim, sh value_dim, sw use_bias */
    int kh, kw, sh, sw, pad_top, pad_left;
    int dh, dw; /* the window's dilation (conv1d's dilation_rate); 0 or 1: none */
} layer_plan;

/* Buffers of a group, carved from one allocation. */
enum {
    BUF_PARAMS,  /* [K, P]: trained parameters [0, n_trained), then state */
    BUF_GRADS,   /* [K, P] */
    BUF_OPT,     /* [K, P * opt_slots] */
    BUF_ACT,     /* [K, B, act_width] activations, input included */
    BUF_DELTA,   /* [2, K, B, max_width] back-propagated gradients */
    BUF_SAVED,   /* [K, B, saved_width] kept from forward to backward (masks, im2col, argmax) */
    BUF_STAT,    /* [K, stat_width] per-model tensors kept from forward to backward */
    BUF_WORK,    /* [K, B, work_width] scratch of one layer's pass */
    BUF_LABELS,  /* [K, B] int32 */
    BUF_TARGETS, /* [K, B, n_out] target rows (every loss but SCE) */
    BUF_CLASSW,  /* [K, n_out] class weights, when a model has class_weight */
    BUF_STATS,   /* [K, STATS_PER_MODEL] per-model loss and accuracy sums (doubles) */
    BUF_BEST,    /* [K, P] the best epoch's parameters (restore_best_weights) */
    BUF_NORMS,   /* [K] doubles: a sum of squares per model (gradient clipping) */
    BUF_COUNT
};

/* The per-model statistics of the loss op, doubles at stats[k * STATS_PER_MODEL
 * + STAT_*] for model k (BUF_STATS); the loss op and the regularizer's
 * penalty add to them, and the fit loop reads them back. */
enum {
    STAT_LOSS_SUM,   /* += the rows' weighted losses (and rows * the penalty) */
    STAT_RIGHT,      /* += the correct predictions, or for METRIC_ERRORS the rows' mean |e| */
    STAT_BATCH_LOSS, /* = the last batch's mean loss (+ the penalty): divergence */
    STAT_SQ_SUM,     /* += the rows' mean e^2 */
    STATS_PER_MODEL
};

/* A buffer's name in `cohort plan` ("parameters", "activations", ...). */
const char *model_buf_name(int i);

typedef struct model_layout {
    sample_shape in_shape;
    int n_in, n_out;      /* input width, output width */
    int K, B;             /* group size, batch size */
    int n_layers;
    layer_plan layers[COHORT_MAX_LAYERS];
    size_t act_width;     /* per row: sum of the activation widths, input included */
    size_t saved_width, stat_width, work_width;
    int max_width;        /* the widest activation */
    size_t n_params;      /* P: per model, trained and state */
    size_t p_stride;      /* floats from one model's P to the next in the group's buffers of
                             parameters, gradients, optimizer slots and best weights: P rounded
                             up to a cache line, so that each model's tensors are aligned */
    size_t n_trained;     /* the trained ones: [0, n_trained) of each model's P */
    int opt_slots;        /* floats of optimizer state per parameter */
    act_kind out_act;     /* the output activation the loss applies (ACT_LINEAR: none) */
    metric_kind metric;
    int n_cw;             /* class weights per model in BUF_CLASSW, 0: none */
    int keep_best;        /* BUF_BEST is allocated */
    size_t buf_off[BUF_COUNT];   /* byte offsets in the slab */
    size_t buf_bytes[BUF_COUNT]; /* bytes, before alignment */
    size_t total_bytes;   /* the slab: what the group needs, exactly */
    int error_line;       /* after a failed make: the plan line of the layer at fault, or 0 */
} model_layout;

#define COHORT_ALIGN 64

/*
 * Compute shapes, parameter offsets and the memory plan of a group of K
 * models of `spec`'s structure with samples of shape `in` and n_classes
 * classes. Fails with a message naming the model, the layer and the shape it
 * sees when shapes do not agree (a kernel larger than its input, Dense on an
 * image without Flatten, an output layer whose width is not the number of
 * classes). n_classes 0: the model's own output width is taken as it is
 * (saved weights: their last layer says how many classes they predict).
 * err may be NULL.
 */
cohort_status model_layout_make(const model_spec *spec, sample_shape in, int n_classes, int K,
                                model_layout *out, cohort_error *err);

/* The activation the loss applies to the model's output: softmax for the
 * categorical cross-entropies, sigmoid for binary_crossentropy, none
 * (ACT_LINEAR) with from_logits or for the regression losses. */
act_kind model_loss_act(const model_spec *spec);
/* The metrics of a model of spec with n_out outputs on data with n_classes
 * class labels (0: real-valued targets, or unknown). */
metric_kind model_metric(const model_spec *spec, int n_out, int n_classes);

/* The spec a group of specs[0..n) is laid out from: the first one's shapes
 * with the union of the buffers any member needs (momentum slots, the best
 * weights). The trainer and the scheduler both plan from it, so reserved and
 * allocated bytes cannot drift apart. */
void model_group_spec(const model_spec *const *specs, int n, model_spec *out);

/* Two specs have the same layer shapes and optimizer kind: they can train
 * as one group. Every value (learning rate and its schedule, the optimizer's
 * constants, clipping, regularizers, dropout rates, plateau settings) may
 * differ between members; the trainer passes them per model. */
int model_can_fuse(const model_spec *a, const model_spec *b);

/* The learning rate of the update after `step` updates (0: the first) under
 * spec's schedule from its lr; without a schedule, `lr` itself. */
double model_lr_at(const optim_spec *o, double lr, int64_t step);
/* The spec clips gradients or has a kernel regularizer: its gradients must
 * be stored whole before its step. */
int model_needs_full_grads(const model_spec *spec);

/* FLOPs of training on n samples (the products of dense and conv2d layers,
 * forward and backward). */
double model_train_flops(const model_layout *L, int64_t n);

#endif
