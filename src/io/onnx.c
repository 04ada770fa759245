/* onnx: a saved model as an ONNX model (see onnx.h). */
#include "io/onnx.h"
#include "io/protobuf.h"
#include "util/util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Field numbers of onnx.proto (ONNX's IR version 8, opset 17). */
enum {
    MODEL_IR_VERSION = 1, MODEL_PRODUCER_NAME = 2, MODEL_PRODUCER_VERSION = 3,
    MODEL_GRAPH = 7, MODEL_OPSET_IMPORT = 8, MODEL_METADATA_PROPS = 14,
    OPSET_DOMAIN = 1, OPSET_VERSION = 2,
    ENTRY_KEY = 1, ENTRY_VALUE = 2,
    GRAPH_NODE = 1, GRAPH_NAME = 2, GRAPH_INITIALIZER = 5, GRAPH_INPUT = 11, GRAPH_OUTPUT = 12,
    NODE_INPUT = 1, NODE_OUTPUT = 2, NODE_NAME = 3, NODE_OP_TYPE = 4, NODE_ATTRIBUTE = 5,
    ATTR_NAME = 1, ATTR_F = 2, ATTR_I = 3, ATTR_S = 4, ATTR_INTS = 8, ATTR_TYPE = 20,
    TENSOR_DIMS = 1, TENSOR_DATA_TYPE = 2, TENSOR_NAME = 8, TENSOR_RAW_DATA = 9,
    VALUE_NAME = 1, VALUE_TYPE = 2,
    TYPE_TENSOR = 1, TYPE_TENSOR_ELEM_TYPE = 1, TYPE_TENSOR_SHAPE = 2,
    SHAPE_DIM = 1, DIM_VALUE = 1, DIM_PARAM = 2
};
enum { ATTR_TYPE_FLOAT = 1, ATTR_TYPE_INT = 2, ATTR_TYPE_STRING = 3, ATTR_TYPE_INTS = 7 };
enum { ONNX_FLOAT = 1, ONNX_INT32 = 6, ONNX_INT64 = 7 };
/* The IR version of opset 17's release (ONNX 1.12). */
#define ONNX_IR_VERSION 8

struct onnx_graph {
    pb_writer w;
    const st_file *file;
    int in_node;       /* a node is open: initializers must wait */
    int n_nodes;
    int failed;        /* msg says why */
    char msg[512];
    char names[4 * COHORT_MAX_LAYERS][ONNX_NAME_MAX + 32]; /* the initializers' names */
    int n_names;
    char inputs[COHORT_MAX_LAYERS][ONNX_NAME_MAX]; /* the value each layer took */
    int mask_made;     /* which mask.* values are in the graph (onnx_mask: MADE_*) */
};

static void graph_fail(onnx_graph *g, const char *fmt, ...) COHORT_PRINTF(2, 3);
static void graph_fail(onnx_graph *g, const char *fmt, ...)
{
    if (g->failed)
        return;
    g->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    str_vformat(g->msg, sizeof g->msg, fmt, ap);
    va_end(ap);
}

void onnx_value_name(char *name, int index, const char *what)
{
    snprintf(name, ONNX_NAME_MAX, "layers.%d.%s", index, what);
}

const char *onnx_layer_input(onnx_graph *g, int index)
{
    return index >= 0 && index < COHORT_MAX_LAYERS ? g->inputs[index] : "";
}

/* The weights' tensor layers.{path}.{suffix} of lp, checked against the
 * shape the layer plans; its name into g->names[g->n_names] (not yet
 * counted). NULL, the graph failed, where it is missing or differs. */
static const st_tensor *file_tensor(onnx_graph *g, const layer_plan *lp, const char *suffix)
{
    if (g->failed)
        return NULL;
    if (g->in_node || g->n_names == (int)(sizeof g->names / sizeof g->names[0])) {
        graph_fail(g, "layer %d: an initializer inside a node (an internal error)", lp->index);
        return NULL;
    }
    layer_tensor t[LAYER_TENSORS_MAX];
    int n = lp->kind->tensors ? lp->kind->tensors(lp, t) : 0, k = 0;
    while (k < n && strcmp(t[k].suffix, suffix) != 0)
        k++;
    char *name = g->names[g->n_names], at[32];
    layer_plan_name(lp, at, sizeof at);
    snprintf(name, sizeof g->names[0], "%s.%s", at, suffix);
    const st_tensor *f = st_find(g->file, name);
    if (k == n || !f) {
        graph_fail(g, "the weights have no tensor %s", name);
        return NULL;
    }
    int same = f->ndim == t[k].ndim;
    for (int d = 0; same && d < f->ndim; d++)
        same = f->shape[d] == t[k].shape[d];
    if (!same) {
        graph_fail(g, "the weights' tensor %s is not of the shape its layer plans", name);
        return NULL;
    }
    return f;
}

/* A float initializer, raw little-endian data. */
static void float_initializer(onnx_graph *g, const char *name, const int64_t *dims, int ndim,
                              const float *v)
{
    size_t count = 1;
    pb_writer *w = &g->w;
    pb_begin(w, GRAPH_INITIALIZER);
    for (int d = 0; d < ndim; d++) {
        pb_varint(w, TENSOR_DIMS, dims[d]);
        count *= (size_t)dims[d];
    }
    pb_varint(w, TENSOR_DATA_TYPE, ONNX_FLOAT);
    pb_string(w, TENSOR_NAME, name);
    pb_floats_raw(w, TENSOR_RAW_DATA, v, count);
    pb_end(w);
}

static const char *weight(onnx_graph *g, const layer_plan *lp, const char *suffix)
{
    const st_tensor *f = file_tensor(g, lp, suffix);
    if (!f)
        return NULL;
    const char *name = g->names[g->n_names++];
    float_initializer(g, name, f->shape, f->ndim, f->data);
    return name;
}

const float *onnx_tensor(onnx_graph *g, const layer_plan *lp, const char *suffix)
{
    const st_tensor *f = file_tensor(g, lp, suffix);
    return f ? f->data : NULL;
}

/* The writer's own initializers: outside a node, where the graph has not failed. */
static int initializer_ok(onnx_graph *g, int index)
{
    if (g->in_node)
        graph_fail(g, "layer %d: an initializer inside a node (an internal error)", index);
    return !g->failed;
}

void onnx_floats(onnx_graph *g, const float *v, const int64_t *dims, int ndim, char *name,
                 int index, const char *what)
{
    onnx_value_name(name, index, what);
    if (initializer_ok(g, index))
        float_initializer(g, name, dims, ndim, v);
}

static void ints_initializer(onnx_graph *g, const char *name, const int64_t *v, int n)
{
    unsigned char raw[8 * 8];
    pb_writer *w = &g->w;
    pb_begin(w, GRAPH_INITIALIZER);
    pb_varint(w, TENSOR_DIMS, n);
    pb_varint(w, TENSOR_DATA_TYPE, ONNX_INT64);
    pb_string(w, TENSOR_NAME, name);
    /* raw_data: little endian whatever the host's order */
    if (n > 8) {
        graph_fail(g, "%s: more than 8 ints (an internal error)", name);
        n = 8;
    }
    for (int i = 0; i < n; i++)
        for (int b = 0; b < 8; b++)
            raw[8 * i + b] = (unsigned char)((uint64_t)v[i] >> (8 * b));
    pb_bytes(w, TENSOR_RAW_DATA, raw, (size_t)n * 8);
    pb_end(w);
}

void onnx_ints(onnx_graph *g, const int64_t *v, int n, char *name, int index, const char *what)
{
    onnx_value_name(name, index, what);
    if (initializer_ok(g, index))
        ints_initializer(g, name, v, n);
}

void onnx_node_begin_outs(onnx_graph *g, const char *op, const char *const *in, int n_in,
                          const char *const *out, int n_out)
{
    pb_writer *w = &g->w;
    pb_begin(w, GRAPH_NODE);
    for (int i = 0; i < n_in; i++)
        pb_string(w, NODE_INPUT, in[i]);
    for (int i = 0; i < n_out; i++)
        pb_string(w, NODE_OUTPUT, out[i]);
    char name[32];
    snprintf(name, sizeof name, "n%d_%s", g->n_nodes++, op);
    pb_string(w, NODE_NAME, name);
    pb_string(w, NODE_OP_TYPE, op);
    g->in_node = 1;
}

void onnx_node_begin(onnx_graph *g, const char *op, const char *const *in, int n_in,
                     const char *out)
{
    onnx_node_begin_outs(g, op, in, n_in, &out, 1);
}

void onnx_attr_string(onnx_graph *g, const char *name, const char *v)
{
    pb_writer *w = &g->w;
    pb_begin(w, NODE_ATTRIBUTE);
    pb_string(w, ATTR_NAME, name);
    pb_string(w, ATTR_S, v);
    pb_varint(w, ATTR_TYPE, ATTR_TYPE_STRING);
    pb_end(w);
}

void onnx_attr_int(onnx_graph *g, const char *name, int64_t v)
{
    pb_writer *w = &g->w;
    pb_begin(w, NODE_ATTRIBUTE);
    pb_string(w, ATTR_NAME, name);
    pb_varint(w, ATTR_I, v);
    pb_varint(w, ATTR_TYPE, ATTR_TYPE_INT);
    pb_end(w);
}

void onnx_attr_float(onnx_graph *g, const char *name, float v)
{
    pb_writer *w = &g->w;
    pb_begin(w, NODE_ATTRIBUTE);
    pb_string(w, ATTR_NAME, name);
    pb_float(w, ATTR_F, v);
    pb_varint(w, ATTR_TYPE, ATTR_TYPE_FLOAT);
    pb_end(w);
}

void onnx_attr_ints(onnx_graph *g, const char *name, const int64_t *v, int n)
{
    pb_writer *w = &g->w;
    pb_begin(w, NODE_ATTRIBUTE);
    pb_string(w, ATTR_NAME, name);
    pb_packed_varints(w, ATTR_INTS, v, n);
    pb_varint(w, ATTR_TYPE, ATTR_TYPE_INTS);
    pb_end(w);
}

void onnx_node_end(onnx_graph *g)
{
    pb_end(&g->w);
    g->in_node = 0;
}

/* A scalar constant into name (layers.{index}.{what}). */
static void scalar_const(onnx_graph *g, float v, char *name, int index, const char *what)
{
    onnx_value_name(name, index, what);
    onnx_node_begin(g, "Constant", NULL, 0, name);
    onnx_attr_float(g, "value_float", v);
    onnx_node_end(g);
}

/* out = op(a, b), out named layers.{index}.{what}. */
static void binary_node(onnx_graph *g, const char *op, const char *a, const char *b, char *out,
                        int index, const char *what)
{
    const char *in[2] = {a, b};
    onnx_value_name(out, index, what);
    onnx_node_begin(g, op, in, 2, out);
    onnx_node_end(g);
}

/* Opset 17 has no Gelu: x/2 (1 + erf(x / sqrt 2)) from its pieces; silu
 * is x sigmoid(x). */
static void activation_of_input(onnx_graph *g, act_kind a, const char *x, char *y, int index)
{
    char c[ONNX_NAME_MAX], t[ONNX_NAME_MAX], u[ONNX_NAME_MAX];
    if (a == ACT_SILU) {
        onnx_value_name(t, index, "silu.sigmoid");
        onnx_node_begin(g, "Sigmoid", &x, 1, t);
        onnx_node_end(g);
        binary_node(g, "Mul", x, t, y, index, "silu");
        return;
    }
    scalar_const(g, 0.70710678118654752f, c, index, "gelu.rsqrt2");
    binary_node(g, "Mul", x, c, t, index, "gelu.scaled");
    onnx_value_name(u, index, "gelu.erf");
    const char *tp = t;
    onnx_node_begin(g, "Erf", &tp, 1, u);
    onnx_node_end(g);
    scalar_const(g, 1.0f, c, index, "gelu.one");
    binary_node(g, "Add", u, c, t, index, "gelu.cdf2");
    binary_node(g, "Mul", x, t, u, index, "gelu.x_cdf2");
    scalar_const(g, 0.5f, c, index, "gelu.half");
    binary_node(g, "Mul", u, c, y, index, "gelu");
}

void onnx_activation(onnx_graph *g, act_kind a, const char *x, char *y, int index)
{
    const char *op = NULL;
    switch (a) {
    case ACT_LINEAR: break;
    case ACT_RELU: op = "Relu"; break;
    case ACT_SIGMOID: op = "Sigmoid"; break;
    case ACT_TANH: op = "Tanh"; break;
    case ACT_SOFTMAX: op = "Softmax"; break;
    case ACT_GELU:
    case ACT_SILU: {
        char out[ONNX_NAME_MAX];
        activation_of_input(g, a, x, out, index);
        memcpy(y, out, sizeof out);
        return;
    }
    }
    if (!op) {
        if (y != x)
            memmove(y, x, strlen(x) + 1);
        return;
    }
    char out[ONNX_NAME_MAX];
    onnx_value_name(out, index, act_name(a));
    onnx_node_begin(g, op, &x, 1, out);
    if (a == ACT_SOFTMAX)
        onnx_attr_int(g, "axis", -1); /* over the outputs of each sample, as Keras */
    onnx_node_end(g);
    memcpy(y, out, sizeof out);
}

void onnx_window_attrs(onnx_graph *g, const layer_plan *lp)
{
    int64_t k[2] = {lp->kh, lp->kw}, s[2] = {lp->sh, lp->sw};
    int64_t bottom = (int64_t)(lp->out.h - 1) * lp->sh + lp->kh - lp->in.h - lp->pad_top;
    int64_t right = (int64_t)(lp->out.w - 1) * lp->sw + lp->kw - lp->in.w - lp->pad_left;
    int64_t pads[4] = {lp->pad_top, lp->pad_left, bottom > 0 ? bottom : 0, right > 0 ? right : 0};
    onnx_attr_ints(g, "kernel_shape", k, 2);
    onnx_attr_ints(g, "strides", s, 2);
    onnx_attr_ints(g, "pads", pads, 4);
}

void onnx_flatten(onnx_graph *g, const char *x, char *y, int index)
{
    char out[ONNX_NAME_MAX];
    onnx_value_name(out, index, "flatten");
    onnx_node_begin(g, "Flatten", &x, 1, out);
    onnx_attr_int(g, "axis", 1);
    onnx_node_end(g);
    memcpy(y, out, sizeof out);
}

void onnx_op(onnx_graph *g, const char *op, const char *const *in, int n_in, char *out,
             int index, const char *what)
{
    onnx_value_name(out, index, what);
    onnx_node_begin(g, op, in, n_in, out);
    onnx_node_end(g);
}

void onnx_transpose(onnx_graph *g, const char *x, const int64_t *perm, int n, char *out,
                    int index, const char *what)
{
    onnx_value_name(out, index, what);
    onnx_node_begin(g, "Transpose", &x, 1, out);
    onnx_attr_ints(g, "perm", perm, n);
    onnx_node_end(g);
}

void onnx_reshape(onnx_graph *g, const char *x, const int64_t *shape, int n, char *out,
                  int index, const char *what)
{
    char s[ONNX_NAME_MAX], sw[ONNX_NAME_MAX];
    snprintf(sw, sizeof sw, "%s.shape", what);
    onnx_ints(g, shape, n, s, index, sw);
    const char *in[2] = {x, s};
    onnx_op(g, "Reshape", in, 2, out, index, what);
}

void onnx_linear(onnx_graph *g, const char *x, const char *w, const char *b, char *out,
                 int index, const char *what)
{
    char wt[ONNX_NAME_MAX], wn[ONNX_NAME_MAX];
    static const int64_t perm[2] = {1, 0};
    snprintf(wn, sizeof wn, "%s.wT", what);
    onnx_transpose(g, w, perm, 2, wt, index, wn);
    const char *in[2] = {x, wt};
    if (!b) {
        onnx_op(g, "MatMul", in, 2, out, index, what);
        return;
    }
    char prod[ONNX_NAME_MAX];
    snprintf(wn, sizeof wn, "%s.matmul", what);
    onnx_op(g, "MatMul", in, 2, prod, index, wn);
    in[0] = prod;
    in[1] = b;
    onnx_op(g, "Add", in, 2, out, index, what);
}

void onnx_window1d_attrs(onnx_graph *g, const layer_plan *lp)
{
    int64_t d = lp->dh > 1 ? lp->dh : 1, span = (int64_t)(lp->kh - 1) * d + 1;
    int64_t after = (int64_t)(lp->out.h - 1) * lp->sh + span - lp->in.h - lp->pad_top;
    int64_t k = lp->kh, s = lp->sh, pads[2] = {lp->pad_top, after > 0 ? after : 0};
    onnx_attr_ints(g, "kernel_shape", &k, 1);
    onnx_attr_ints(g, "strides", &s, 1);
    onnx_attr_ints(g, "pads", pads, 2);
    if (d > 1)
        onnx_attr_ints(g, "dilations", &d, 1);
}

/* An int64 scalar constant mask.{what}, its name into name. */
static void int_const(onnx_graph *g, int64_t v, char *name, const char *what)
{
    snprintf(name, ONNX_NAME_MAX, "mask.%s", what);
    onnx_node_begin(g, "Constant", NULL, 0, name);
    onnx_attr_int(g, "value_int", v);
    onnx_node_end(g);
}

static void cast_node(onnx_graph *g, const char *x, int to, const char *out)
{
    onnx_node_begin(g, "Cast", &x, 1, out);
    onnx_attr_int(g, "to", to);
    onnx_node_end(g);
}

/* The mask's values, each made once, where a layer first needs it (so that
 * the graph holds no value nothing reads):
 *   MADE_BOOL    mask.bool [N, T]: a token (not Equal(input, 0))
 *   MADE_FLOAT   mask.float [N, T]: 1 at a token, 0 at padding
 *   MADE_COUNT   mask.int64 [N, T]; mask.count, int64 [N, 1], the sample's
 *                tokens; the constant mask.zero64
 *   MADE_ANY     mask.any, bool [N, 1]: the sample has a token (and COUNT)
 *   MADE_CUM     mask.cum, int64 [N, T], the tokens up to and including each
 *                step; the constant mask.one64 (and COUNT) */
enum { MADE_BOOL = 1, MADE_FLOAT = 2, MADE_COUNT = 4, MADE_ANY = 8, MADE_CUM = 16 };

static void mask_values(onnx_graph *g, int want)
{
    const char *in[2];
    if (!(g->mask_made & MADE_BOOL)) {
        onnx_node_begin(g, "Constant", NULL, 0, "mask.zero");
        onnx_attr_float(g, "value_float", 0.0f);
        onnx_node_end(g);
        in[0] = "input";
        in[1] = "mask.zero";
        onnx_node_begin(g, "Equal", in, 2, "mask.padding");
        onnx_node_end(g);
        in[0] = "mask.padding";
        onnx_node_begin(g, "Not", in, 1, "mask.bool");
        onnx_node_end(g);
        g->mask_made |= MADE_BOOL;
    }
    if ((want & MADE_FLOAT) && !(g->mask_made & MADE_FLOAT)) {
        cast_node(g, "mask.bool", ONNX_FLOAT, "mask.float");
        g->mask_made |= MADE_FLOAT;
    }
    char name[ONNX_NAME_MAX];
    if ((want & (MADE_COUNT | MADE_ANY | MADE_CUM)) && !(g->mask_made & MADE_COUNT)) {
        cast_node(g, "mask.bool", ONNX_INT64, "mask.int64");
        int64_t n1 = 1;
        if (initializer_ok(g, -1))
            ints_initializer(g, "mask.axes1", &n1, 1);
        in[0] = "mask.int64";
        in[1] = "mask.axes1";
        onnx_node_begin(g, "ReduceSum", in, 2, "mask.count");
        onnx_attr_int(g, "keepdims", 1);
        onnx_node_end(g);
        int_const(g, 0, name, "zero64");
        g->mask_made |= MADE_COUNT;
    }
    if ((want & MADE_ANY) && !(g->mask_made & MADE_ANY)) {
        in[0] = "mask.count";
        in[1] = "mask.zero64";
        onnx_node_begin(g, "Greater", in, 2, "mask.any");
        onnx_node_end(g);
        g->mask_made |= MADE_ANY;
    }
    if ((want & MADE_CUM) && !(g->mask_made & MADE_CUM)) {
        int_const(g, 1, name, "axis1");
        in[0] = "mask.int64";
        in[1] = name;
        onnx_node_begin(g, "CumSum", in, 2, "mask.cum");
        onnx_node_end(g);
        int_const(g, 1, name, "one64");
        g->mask_made |= MADE_CUM;
    }
}

const char *onnx_mask(onnx_graph *g, int which)
{
    mask_values(g, which == ONNX_MASK_FLOAT ? MADE_FLOAT : which == ONNX_MASK_ANY ? MADE_ANY : 0);
    return which == ONNX_MASK_BOOL ? "mask.bool" : which == ONNX_MASK_FLOAT ? "mask.float"
                                                                             : "mask.any";
}

/* x [N, T] int64 as indices [N, T, C] of the shape of `like` along axis 1
 * (GatherElements' and ScatterElements' indices have the data's rank). */
static void indices_like(onnx_graph *g, const char *x, const char *like, char *out, int index,
                         const char *what)
{
    char axes[ONNX_NAME_MAX], u[ONNX_NAME_MAX], shape[ONNX_NAME_MAX], w[ONNX_NAME_MAX];
    int64_t two = 2;
    snprintf(w, sizeof w, "%s.axes", what);
    onnx_ints(g, &two, 1, axes, index, w);
    const char *in[2] = {x, axes};
    snprintf(w, sizeof w, "%s.unsqueezed", what);
    onnx_op(g, "Unsqueeze", in, 2, u, index, w);
    snprintf(w, sizeof w, "%s.shape", what);
    onnx_op(g, "Shape", &like, 1, shape, index, w);
    in[0] = u;
    in[1] = shape;
    onnx_op(g, "Expand", in, 2, out, index, what);
}

void onnx_mask_pack(onnx_graph *g, const char *x, int T, char *packed, char *lens, int index)
{
    mask_values(g, MADE_CUM);
    char t[ONNX_NAME_MAX], a[ONNX_NAME_MAX], b[ONNX_NAME_MAX], c[ONNX_NAME_MAX],
        dest[ONNX_NAME_MAX], idx[ONNX_NAME_MAX], n[ONNX_NAME_MAX], steps[ONNX_NAME_MAX];
    const char *one = "mask.one64";
    /* The steps 0..T-1. */
    onnx_value_name(steps, index, "pack.T");
    onnx_node_begin(g, "Constant", NULL, 0, steps);
    onnx_attr_int(g, "value_int", T);
    onnx_node_end(g);
    const char *in[3] = {"mask.zero64", steps, one};
    onnx_op(g, "Range", in, 3, t, index, "pack.steps");
    /* A token goes to cum - 1, a padded step after the tokens: count + t - cum. */
    in[0] = "mask.cum";
    in[1] = one;
    onnx_op(g, "Sub", in, 2, a, index, "pack.at_token");
    in[0] = "mask.count";
    in[1] = t;
    onnx_op(g, "Add", in, 2, b, index, "pack.count_t");
    in[0] = b;
    in[1] = "mask.cum";
    onnx_op(g, "Sub", in, 2, c, index, "pack.at_padding");
    in[0] = "mask.bool";
    in[1] = a;
    in[2] = c;
    onnx_op(g, "Where", in, 3, dest, index, "pack.dest");
    indices_like(g, dest, x, idx, index, "pack.indices");
    in[0] = x;
    in[1] = idx;
    in[2] = x;
    onnx_value_name(packed, index, "packed");
    onnx_node_begin(g, "ScatterElements", in, 3, packed);
    onnx_attr_int(g, "axis", 1);
    onnx_node_end(g);
    /* The lengths, int32 [N], at least 1. */
    int64_t flat = -1;
    onnx_reshape(g, "mask.count", &flat, 1, n, index, "pack.count");
    in[0] = n;
    in[1] = one;
    onnx_op(g, "Max", in, 2, a, index, "pack.len64");
    onnx_value_name(lens, index, "pack.lens");
    cast_node(g, a, ONNX_INT32, lens);
}

void onnx_mask_unpack(onnx_graph *g, const char *y, int zero_pads, char *out, int index)
{
    mask_values(g, MADE_CUM | (zero_pads ? MADE_FLOAT : 0));
    char a[ONNX_NAME_MAX], b[ONNX_NAME_MAX], idx[ONNX_NAME_MAX], got[ONNX_NAME_MAX],
        keep[ONNX_NAME_MAX], axes[ONNX_NAME_MAX];
    const char *one = "mask.one64", *zero = "mask.zero64";
    /* Step t reads packed step cum - 1 (the last token at or before t). */
    const char *in[2] = {"mask.cum", one};
    onnx_op(g, "Sub", in, 2, a, index, "unpack.last");
    in[0] = a;
    in[1] = zero;
    onnx_op(g, "Max", in, 2, b, index, "unpack.from");
    indices_like(g, b, y, idx, index, "unpack.indices");
    in[0] = y;
    in[1] = idx;
    onnx_value_name(got, index, "unpack.gathered");
    onnx_node_begin(g, "GatherElements", in, 2, got);
    onnx_attr_int(g, "axis", 1);
    onnx_node_end(g);
    /* 0 before the first token, or at every padded step. */
    if (zero_pads) {
        str_copy(keep, sizeof keep, "mask.float");
    } else {
        in[0] = "mask.cum";
        in[1] = zero;
        onnx_op(g, "Greater", in, 2, b, index, "unpack.started");
        onnx_value_name(keep, index, "unpack.keep");
        cast_node(g, b, ONNX_FLOAT, keep);
    }
    int64_t two = 2;
    onnx_ints(g, &two, 1, axes, index, "unpack.axes");
    in[0] = keep;
    in[1] = axes;
    onnx_op(g, "Unsqueeze", in, 2, a, index, "unpack.keep3");
    in[0] = got;
    in[1] = a;
    onnx_op(g, "Mul", in, 2, out, index, "unpacked");
}

int onnx_weights(onnx_graph *g, const layer_plan *lp, int n, const char **names)
{
    layer_tensor t[LAYER_TENSORS_MAX];
    int have = lp->kind->tensors ? lp->kind->tensors(lp, t) : 0;
    for (int k = 0; k < n; k++)
        names[k] = k < have ? weight(g, lp, t[k].suffix) : NULL;
    if (!g->failed && have < n)
        graph_fail(g, "layer %d plans %d tensors, not %d (an internal error)", lp->index, have, n);
    return !g->failed;
}

static void value_info(pb_writer *w, int field, const char *name, const int64_t *dims, int n)
{
    pb_begin(w, field);
    pb_string(w, VALUE_NAME, name);
    pb_begin(w, VALUE_TYPE);
    pb_begin(w, TYPE_TENSOR);
    pb_varint(w, TYPE_TENSOR_ELEM_TYPE, ONNX_FLOAT);
    pb_begin(w, TYPE_TENSOR_SHAPE);
    for (int d = 0; d < n; d++) {
        pb_begin(w, SHAPE_DIM);
        if (dims[d] < 0)
            pb_string(w, DIM_PARAM, "N"); /* the batch: any number of samples */
        else
            pb_varint(w, DIM_VALUE, dims[d]);
        pb_end(w);
    }
    pb_end(w);
    pb_end(w);
    pb_end(w);
    pb_end(w);
}

cohort_status onnx_model(const model_spec *spec, const model_layout *L, const st_file *weights,
                         const char *const *meta_kv, int n_meta, char **data, size_t *len,
                         cohort_error *err)
{
    onnx_graph *g = calloc(1, sizeof *g);
    if (!g)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    g->file = weights;
    pb_writer *w = &g->w;
    pb_init(w);
    pb_varint(w, MODEL_IR_VERSION, ONNX_IR_VERSION);
    pb_string(w, MODEL_PRODUCER_NAME, "cohort");
    pb_string(w, MODEL_PRODUCER_VERSION, COHORT_VERSION);
    pb_begin(w, MODEL_OPSET_IMPORT);
    pb_string(w, OPSET_DOMAIN, "");
    pb_varint(w, OPSET_VERSION, ONNX_OPSET);
    pb_end(w);

    pb_begin(w, MODEL_GRAPH);
    pb_string(w, GRAPH_NAME, spec->name);
    sample_shape s = L->in_shape;
    int image = s.rank == 3;
    int64_t in_dims[4] = {-1, s.h, s.w, s.c}, flat_dims[2] = {-1, (int64_t)shape_size(s)};
    int64_t seq_dims[3] = {-1, s.h, s.c}; /* a sequence [T, F] */
    char cur[ONNX_NAME_MAX] = "input";
    if (image) {
        /* NHWC, as the data are, to NCHW, as ONNX's Conv and pools take them. */
        const char *in = "input";
        int64_t perm[4] = {0, 3, 1, 2};
        str_copy(cur, sizeof cur, "input.nchw");
        onnx_node_begin(g, "Transpose", &in, 1, cur);
        onnx_attr_ints(g, "perm", perm, 4);
        onnx_node_end(g);
    }
    cohort_status st = COHORT_OK;
    for (int i = 0; i < L->n_layers && !st; i++) {
        const layer_spec *ls = &spec->layers[i];
        char next[ONNX_NAME_MAX], why[512] = "";
        memcpy(g->inputs[i], cur, sizeof cur);
        if (!ls->kind->onnx)
            snprintf(why, sizeof why, "cohort cannot export the layer kind %s to ONNX yet",
                     ls->kind->name);
        else if (ls->kind->onnx(g, ls, &L->layers[i], cur, next, why, sizeof why) || g->failed)
            str_copy(why, sizeof why, g->failed ? g->msg : why[0] ? why : "it has no ONNX form");
        else
            memcpy(cur, next, sizeof cur);
        if (why[0]) {
            char at[32];
            layer_plan_name(&L->layers[i], at, sizeof at);
            st = cohort_fail(err, COHORT_ERR_INPUT, "%s (%s) of model '%s': %s", at,
                             ls->kind->name, spec->name, why);
        }
    }
    if (!st) {
        const char *last = cur;
        onnx_node_begin(g, "Identity", &last, 1, "output");
        onnx_node_end(g);
        if (s.rank == 2)
            value_info(w, GRAPH_INPUT, "input", seq_dims, 3);
        else
            value_info(w, GRAPH_INPUT, "input", image ? in_dims : flat_dims, image ? 4 : 2);
        int64_t out_dims[2] = {-1, L->n_out};
        value_info(w, GRAPH_OUTPUT, "output", out_dims, 2);
        pb_end(w); /* graph */
        for (int i = 0; i + 1 < 2 * n_meta; i += 2) {
            pb_begin(w, MODEL_METADATA_PROPS);
            pb_string(w, ENTRY_KEY, meta_kv[i]);
            pb_string(w, ENTRY_VALUE, meta_kv[i + 1]);
            pb_end(w);
        }
        if (w->b.failed)
            st = cohort_fail(err, COHORT_ERR_NOMEM, "out of memory writing the ONNX model");
    }
    if (st) {
        pb_free(w);
    } else {
        *data = w->b.data;
        *len = w->b.len;
    }
    free(g);
    return st;
}
