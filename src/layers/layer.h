/*
 * layers: the table of layer kinds. A kind is one entry, written in one file
 * of src/layers/, that holds all of the kind:
 *   its syntax   the keys it takes, Keras's defaults, parse and validate
 *                (with file:line), an example for messages;
 *   its spec     its JSON (results, weight files' metadata), its short form
 *                in `cohort plan`, the fusion key that says when two models
 *                may share a group, the settings PBT may mutate;
 *   its shapes   the output shape and the exact sizes of its parameters,
 *                state, saved tensors and workspace (model/layout.c);
 *   its compute  init, forward and backward through the backend's batched
 *                primitives, and the tensors it writes to a weight file.
 * plan/, model/, run/ and cli/ reach a kind only through its entry, and the
 * table (layers/table.c) is the one list of them. Settings of a kind live in
 * the entry's own struct inside layer_spec.settings; only the entry reads it.
 *
 * This header includes no backend, so that model/ and plan/ can use it; the
 * compute half's pass (layer_pass, which carries the backend) is declared in
 * layers/pass.h, which the entries and train/ include.
 */
#ifndef COHORT_LAYERS_LAYER_H
#define COHORT_LAYERS_LAYER_H

#include "model/model.h"
#include "plan/yamltree.h"
#include "util/util.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Keras's padding of a window (conv2d, pooling; causal: conv1d's, all of it
 * before the sequence). */
typedef enum pad_kind { PAD_VALID, PAD_SAME, PAD_CAUSAL } pad_kind;

struct layer_pass;
struct onnx_graph;

/* The most tensors one layer writes to a weight file (attention's eight; a
 * bidirectional lstm's). */
#define LAYER_TENSORS_MAX 8

/* A tensor of a weight file: layers.{index}.{suffix} (the suffix may hold
 * dots: q_proj.weight). */
typedef struct layer_tensor {
    const char *suffix;
    int ndim;
    int64_t shape[4];
    size_t off, n;   /* where it lies in the model's parameters (floats) */
} layer_tensor;

/* One entry of a model's `layers` as the parser hands it to a kind. */
typedef struct layer_syntax {
    const yctx *c;
    const ynode *node;  /* the entry: a map, or a bare name */
    const ynode *map;   /* node when it is a map, else NULL */
    const ynode *value; /* the value of the kind's key; NULL for a bare name */
    int index;          /* i of layers.i (inside a block, the block's i) */
    int last;           /* the model's last layer */
    const char *label;  /* "model 'm'", for messages */
    const char *where;  /* "layers.3", "layers.3.1" inside a block: for messages */
} layer_syntax;

/* A setting PBT may change between epochs (model/hyper.c): path
 * layers.N.{key}, values in [lo, hi] (open ends as flagged). */
typedef struct layer_hyper {
    const char *key;
    double lo, hi;
    int lo_open, hi_open;
    float *(*field)(layer_spec *ls); /* where it lies in ls */
} layer_hyper;

/* The most ints of a fusion key. */
#define LAYER_FUSE_KEY_MAX 16

/* A Keras argument name the plan does not take, and what to write instead. */
typedef struct layer_keras_arg {
    const char *arg, *hint;
} layer_keras_arg;

typedef struct layer_ops {
    /* ---- syntax and spec ---- */
    const char *name;         /* the plan's name, and the JSON's key: "conv2d" */
    const char *const *keys;  /* the keys it takes beside its name, NULL-ended (NULL: none) */
    const char *const *inner; /* keys that go inside its value's map, NULL-ended (NULL: none);
                               * written beside it, the message shows `hint` */
    const char *hint;         /* what to write, for a key it does not take; NULL: "it takes"
                               * and its keys */
    const char *example;      /* a layer of this kind needs a value, written as this; NULL: its
                               * bare name is a whole layer */
    const layer_keras_arg *keras_args; /* Keras's argument names for what is its value, ended
                                        * by {NULL} (NULL: none) */
    /* The kind's settings from s (its value and keys, already checked to be
     * among `keys`), Keras's defaults where not given, into ls->settings,
     * ls->act and the regularizer (ls->kind and ls->line are set). NULL: the
     * kind takes no settings, and its value must be empty. */
    cohort_status (*parse)(const layer_syntax *s, layer_spec *ls);
    /* The members of its JSON object after '{' ("\"dense\":64,\"activation\":...").
     * NULL: "KIND":null. Read back by the parser (eval, predict, --resume). */
    void (*to_json)(const layer_spec *ls, strbuf *b);
    /* Its short form in `cohort plan`'s model line ("c32relu", "drop0.2"),
     * snprintf's result. NULL: its name. */
    int (*abbrev)(const layer_spec *ls, char *buf, size_t n);
    /* The settings that decide shapes and kernels, which the models of one
     * fused group share, into key (at most LAYER_FUSE_KEY_MAX); returns how
     * many. Other settings (a rate, a momentum) may differ per model: a kind
     * whose settings all may returns 0 (layer_fuse_any). NULL: two layers
     * fuse only where all their settings and act are the same, so that a
     * kind that forgets its key never fuses models of different shapes. */
    int (*fuse_key)(const layer_spec *ls, int *key);
    /* The settings PBT may mutate, ended by {NULL}; NULL: none. */
    const layer_hyper *hyper;
    /* How to give this layer activation a, for the loss's messages ("make it
     * {dense: 10, activation: softmax}"), snprintf's result. NULL: the kind
     * takes no activation. */
    int (*with_act)(const layer_spec *ls, act_kind a, char *buf, size_t n);
    /* Its activation is its value ({activation: relu}): messages call it
     * "activation relu" rather than "activation with activation relu". */
    int act_is_value;

    /* A kind that holds layers (a residual): its value is a list of layers,
     * which a spec's flat list holds after this kind's entry and before an
     * entry of block_end's kind (layers/block.c). NULL: an ordinary layer. */
    const struct layer_ops *block_end;

    /* ---- shapes and sizes ---- */
    /* Fill lp's output shape and sizes (out, n_params, n_fused, n_state,
     * alias, n_saved, n_stat, n_work, the window) for input shape lp->in.
     * On a shape the layer cannot take, returns non-zero with the reason in
     * msg (the caller adds model, layer and file:line). */
    int (*plan)(const layer_spec *ls, layer_plan *lp, char *msg, size_t len);
    /* backward writes dX over dY (element-wise layers) */
    int grad_in_place;
    /* backward reads the layer's own output Y (an activation's derivative) */
    int reads_output;
    /* forward may write its output over its input, where the layer before it
     * does not read its own output in backward (an activation after a batch
     * normalization): one pass and one activation buffer less */
    int may_overwrite_input;
    /* the input may be one copy read by every model (stride 0) */
    int shares_input;
    /* honours a token mask or passes it on (layer_plan.mask_in): a masked
     * input into a kind without it is a plan error, as in tf.keras */
    int takes_mask;
    /* takes a sequence [T, F]: as the first layer, a sample of two axes,
     * which the readers take for an image of one channel (an NPY [n, T, F],
     * as MNIST's [n, 28, 28]), is read as a sequence of T steps */
    int takes_sequence;
    /* each output value is the input value at its place, or a function of
     * it and of per-feature settings (dropout, activation, batch norm; a
     * flatten): a flat input flattened from an image stays in that image's
     * order, which a dense or batch-norm layer's weight file follows */
    int keeps_order;
    /* forward may read the input transposed (XT), kept in the first
     * n_fused floats of its gradients (which a fused step never writes):
     * the first layer's for as long as its batch stays, a later layer's
     * made at every forward pass (step.c) */
    int uses_xt;
    /* Its input is token ids (an embedding, the model's first layer): it takes
     * the ids [0, tokens(ls)) (its input_dim). A model whose first layer has
     * it reads its data as ids (integer NPY/NPZ arrays as they are, uint8 not
     * scaled: data_options.tokens), each checked before anything trains
     * (data_check_tokens). NULL: its input is values. */
    int64_t (*tokens)(const layer_spec *ls);
    /* Multiply-adds per sample of the forward pass (NULL: none worth counting). */
    double (*macs)(const layer_plan *lp);

    /* ---- compute (layers/pass.h) ---- */
    /* Initial parameters and state (Keras's initializers) into the model's
     * parameters P, from the model's seed. NULL: none. */
    void (*init)(const layer_spec *ls, const layer_plan *lp, uint64_t seed, float *P);
    void (*forward)(const struct layer_pass *p);
    /* Returns 1 when the first n_fused parameters took their optimizer
     * step (then their gradients were not stored), else 0. */
    int (*backward)(const struct layer_pass *p);
    /* Optional: this layer's pass p and the next layer's q in one, where the
     * backend fuses them (conv2d, then max_pooling2d: conv_fwd_pool and
     * conv_wgrad_pool), with the same results as the two one after the
     * other. forward_next returns 1 when it ran both forwards, 0 when it ran
     * nothing; backward_next runs q's backward then p's (q's dX is p's dY)
     * and returns what p's backward returns, or -1 when it ran nothing. */
    int (*forward_next)(const struct layer_pass *p, const struct layer_pass *q);
    int (*backward_next)(const struct layer_pass *p, const struct layer_pass *q);
    /* The tensors of the weight file (at most LAYER_TENSORS_MAX) in file
     * order; returns
     * their count. NULL: none. */
    int (*tensors)(const layer_plan *lp, layer_tensor *t);
    /* Reorder tensor i between the model's parameters (internal layout) and
     * the file's: to_file 1 copies P's n floats at t->off into file, 0 the
     * other way. NULL: the same order. */
    void (*convert)(const layer_plan *lp, int i, float *P, float *file, int to_file);

    /* ---- export (io/onnx.h) ---- */
    /* Its ONNX nodes (cohort export), from value x (an image is NCHW there)
     * into value y, whose name it writes (x's own for a layer that does
     * nothing at inference); its tensors go in as the weights file has them.
     * Non-zero with the reason in msg when it cannot. NULL: ONNX has no form
     * for the kind, an error naming it. */
    int (*onnx)(struct onnx_graph *g, const layer_spec *ls, const layer_plan *lp, const char *x,
                char *y, char *msg, size_t len);
} layer_ops;

/* An entry's settings struct `type` in layer_spec.settings: defines
 *     type type_of(const layer_spec *ls)        a copy of them
 *     void type_put(layer_spec *ls, const type *s)  store them
 * and checks that the struct fits. Copies (memcpy), so that the bytes are
 * never read through another type than they were written with. */
#define LAYER_SETTINGS_OF(type)                                                                  \
    static inline type type##_of(const layer_spec *ls)                                           \
    {                                                                                            \
        type s;                                                                                  \
        memcpy(&s, ls->settings.bytes, sizeof s);                                                \
        return s;                                                                                \
    }                                                                                            \
    static inline void type##_put(layer_spec *ls, const type *s)                                 \
    {                                                                                            \
        memcpy(ls->settings.bytes, s, sizeof *s);                                                \
    }                                                                                            \
    _Static_assert(sizeof(type) <= LAYER_SETTINGS_BYTES, #type " must fit layer_spec.settings")
/* A float member of the settings in place (a PBT setting, layer_hyper). */
#define LAYER_SETTINGS_FLOAT(type, member, ls)                                                   \
    (&(ls)->settings.f[offsetof(type, member) / sizeof(float)])

/* ---- the table (layers/table.c) ---- */

/* The entries, in the table's order; *n receives their count. */
const layer_ops *const *layer_kinds(int *n);
/* The entry the plan calls name, or NULL. */
const layer_ops *layer_find(const char *name);
/* Add an entry after the built-in ones: for a kind compiled only into a
 * test binary (tests/layers/). Call before any plan is read; not thread-safe.
 * Returns 0, or -1 when the table is full or the name is taken. */
int layer_register(const layer_ops *ops);
/* Every key a layer may have (the kinds' names, then their keys) into
 * keys[0..max), NULL-ended; returns their count. For the plan's key check
 * and the sweep's layers.N.KEY. */
#define LAYER_KEYS_MAX 512
int layer_all_keys(const char **keys, int max);

/* ---- the syntax every kind shares (layers/syntax.c) ---- */

/* One layer from YAML text ("{dense: 10, activation: softmax}"), as a plan's
 * layers.0 (for tests and tools); err may be NULL. A model's layers list is
 * read by layer_parse_list (below). */
cohort_status layer_parse_text(const char *text, layer_spec *ls, cohort_error *err);
/* A list of layers from YAML text ("[{dense: 8}, {residual: [...]}]"),
 * blocks flattened, into ls[0..max) and *n (for tests and tools). */
cohort_status layer_parse_list_text(const char *text, layer_spec *ls, int max, int *n,
                                    cohort_error *err);
/* The layer as the JSON object a spec stores. */
void layer_to_json(const layer_spec *ls, strbuf *b);
/* Two layers may train in one fused group: same kind, same fusion key. */
int layer_can_fuse(const layer_spec *a, const layer_spec *b);
/* A fusion key of nothing: every setting of the kind may differ per model. */
int layer_fuse_any(const layer_spec *ls, int *key);
/* The layer as `cohort plan` abbreviates it ("c32relu"), snprintf's result. */
int layer_abbrev(const layer_spec *ls, char *buf, size_t n);
/* What the last layer is and how to make its activation `want`, for the
 * loss's messages: "dense with activation relu", "make it {dense: 10,
 * activation: softmax}" (or "end with {dense: CLASSES, ...}" for a kind
 * without one; binary: 1 unit). */
void layer_describe_output(const layer_spec *ls, act_kind want, int binary, char *is,
                           size_t is_len, char *fix, size_t fix_len);

/* ---- blocks: kinds that hold layers (layers/block.c) ----
 * A model spec's layers are one flat list: a block (a residual) is its
 * kind's entry, the layers of its value, then the entry of its kind's
 * block_end, which the layout pairs (layer_plan.pair). Blocks do not nest.
 * A layer's place in the plan's lists, its path, names its weights:
 * layers.{i} at the top, layers.{i}.{j} for layer j of the block at i. */

/* The deepest a layer may sit: layers.i.j. */
#define LAYER_PATH_MAX 2
/* One entry of a layers list at path (i, j) (j -1: at the top) into ls; a
 * block's entry takes its value's list as it is (layer_parse_list reads it). */
cohort_status layer_parse_at(const yctx *c, const ynode *n, const int *path, int last,
                             const char *label, layer_spec *ls);
/* A model's `layers` (a YAML list) into ls[0..max), blocks flattened, with
 * their count in *n; errors (an empty or nested block, more than max
 * entries) at file:line. */
cohort_status layer_parse_list(const yctx *c, const ynode *list, const char *label,
                               layer_spec *ls, int max, int *n);
/* The path of each of ls[0..n) into path[i][0..1] (path[i][1] -1 outside a
 * block); returns 0, or -1 where the list's blocks do not open and close
 * as the parser makes them. */
int layer_paths(const layer_spec *ls, int n, int (*path)[2]);
/* The flat index of the layer at path (i, j) (j -1: the top-level layer i,
 * a block's opening entry), or -1. */
int layer_at_path(const layer_spec *ls, int n, int i, int j);
/* "layers.3" (path[1] < 0) or "layers.3.1", snprintf's result. */
int layer_path_name(const int *path, char *buf, size_t size);
/* The weight names' prefix of lp: "layers.3", "layers.3.1". */
int layer_plan_name(const layer_plan *lp, char *buf, size_t size);
/* The block list of a plan's layer map ({residual: [...]}), or NULL where
 * the map is no block: for sweep and --set paths layers.N.J. */
ynode *layer_block_list(const ynode *layer);
/* The list as the JSON array a spec stores (a block as {"residual":[...]}). */
void layer_list_to_json(const layer_spec *ls, int n, strbuf *b);
/* The list as `cohort plan` abbreviates it ("128relu-res[ln-64]-10softmax"),
 * snprintf's result. */
int layer_list_abbrev(const layer_spec *ls, int n, char *buf, size_t size);

/* Helpers for the entries' weight files (layers/flat_order.c). */
/* `rows` rows of n features each between the model's order (mine) and a
 * weight file's (file): to the file where to_file, else from it. Where the
 * features are a flattened `image` (n its h*w*c values), the model's follow
 * the activations' (h, w, c) and the file's torch's (c, h, w); NULL: the
 * same order in both. */
void layer_flat_convert(const sample_shape *image, size_t rows, size_t n, float *mine,
                        float *file, int to_file);
/* A per-feature tensor t of lp (a normalization's [C]) as layer_ops.convert:
 * after a flatten of an image, in torch's order in the file. */
void layer_convert_features(const layer_plan *lp, const layer_tensor *t, float *P, float *file,
                            int to_file);

/* Helpers for the entries' syntax. */
/* Nothing, "~" or {}: the value of a layer that takes no settings. */
int layer_no_settings(const ynode *v);
/* An integer, or a list [h, w] of two, each in [1, LAYER_WINDOW_MAX]. */
cohort_status layer_get_hw(const yctx *c, const ynode *n, const char *what, int *h, int *w);
/* The keys every kind with a kernel reads: activation, use_bias (into
 * *use_bias) and kernel_regularizer (into ls->l1, ls->l2); strides and
 * padding where sh/pad are not NULL. Each only where the map has it. */
cohort_status layer_parse_act(const layer_syntax *s, layer_spec *ls);
cohort_status layer_parse_use_bias(const layer_syntax *s, int *use_bias);
cohort_status layer_parse_regularizer(const layer_syntax *s, layer_spec *ls);
cohort_status layer_parse_window(const layer_syntax *s, int *sh, int *sw, pad_kind *pad);
/* The 1-D kinds (conv1d, the 1-D poolings): an integer, or a list [n] of
 * one (Keras's 1-tuples), in [1, LAYER_WINDOW_MAX]; and their strides and
 * padding (valid, same, and causal where `causal`), each only where the map
 * has it. */
cohort_status layer_get_len(const yctx *c, const ynode *n, const char *what, int *v);
cohort_status layer_parse_window1d(const layer_syntax *s, int causal, int *strides,
                                   pad_kind *pad);
/* JSON pieces: ,"key":[h,w]; ,"padding":"same"; ,"activation":"relu";
 * ,"use_bias":false where it is; ,"kernel_regularizer":{...} where set. */
void layer_json_hw(strbuf *b, const char *key, int h, int w);
void layer_json_padding(strbuf *b, pad_kind pad);
void layer_json_act(strbuf *b, act_kind act);
void layer_json_use_bias(strbuf *b, int use_bias);
void layer_json_regularizer(strbuf *b, const layer_spec *ls);
/* The PBT keys of a kernel regularizer, for an entry's hyper list. */
#define LAYER_HYPER_REGULARIZER                                                                  \
    {"kernel_regularizer.l1", 0, HUGE_VAL, 0, 1, layer_l1_field},                                \
    {"kernel_regularizer.l2", 0, HUGE_VAL, 0, 1, layer_l2_field}
float *layer_l1_field(layer_spec *ls);
float *layer_l2_field(layer_spec *ls);

/* Largest kernel, pool or stride along one axis. */
#define LAYER_WINDOW_MAX 65536
/* Largest dense width or number of conv2d filters. */
#define LAYER_UNITS_MAX (1 << 20)

/* TensorFlow's output size and leading padding of a window of size k,
 * stride s over n pixels (a dilated window: k is its span, (k - 1)*d + 1). */
void window_dim(int n, int k, int s, pad_kind pad, int *out, int *pad_before);

#endif
