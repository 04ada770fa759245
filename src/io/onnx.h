/*
 * onnx: a saved model as an ONNX model (opset 17), written with protobuf.c
 * (no ONNX or protobuf library). The graph takes the samples as cohort's
 * data has them, `input` [N, H, W, C] (channels last) or [N, features],
 * and gives `output` [N, outputs], what `cohort predict` prints. Inside, an
 * image is NCHW (ONNX's Conv and pooling), so that the weights file's
 * tensors (torch's layouts, a Dense after Flatten reading (C, H, W)
 * columns) go in as they are.
 *
 * Each layer kind writes its own nodes: the `onnx` hook of its entry in the
 * layer table (layers/layer.h), built with the calls below; a kind without
 * one has no ONNX form, an error naming it.
 */
#ifndef COHORT_ONNX_H
#define COHORT_ONNX_H

#include "cohort.h"
#include "io/io.h"
#include "layers/layer.h"
#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

#define ONNX_OPSET 17
#define ONNX_NAME_MAX 64

typedef struct onnx_graph onnx_graph;

/* A new value's name for layer `index` ("layers.3.conv"), into name. */
void onnx_value_name(char *name, int index, const char *what);
/* The name of the value layer `index` took as its input (a residual's add
 * reads its block's). */
const char *onnx_layer_input(onnx_graph *g, int index);
/* The initializers of the layer's first n tensors (its entry's `tensors`,
 * in file order) into names: the weights file's layers.{index}.{suffix},
 * each checked against the shape the layer plans. 0 when one is missing or
 * of another shape (the graph's error says which). */
int onnx_weights(onnx_graph *g, const layer_plan *lp, int n, const char **names);
/* A node op(in...) -> out; attributes follow until onnx_node_end. An empty
 * input name is an input left out (Conv without a bias). */
void onnx_node_begin(onnx_graph *g, const char *op, const char *const *in, int n_in,
                     const char *out);
void onnx_attr_int(onnx_graph *g, const char *name, int64_t v);
void onnx_attr_float(onnx_graph *g, const char *name, float v);
void onnx_attr_ints(onnx_graph *g, const char *name, const int64_t *v, int n);
void onnx_node_end(onnx_graph *g);
/* x through activation a into y (a node, or y = x for linear). */
void onnx_activation(onnx_graph *g, act_kind a, const char *x, char *y, int index);
/* x [N, C, H, W] flattened to [N, C*H*W] in (C, H, W) order, into y. */
void onnx_flatten(onnx_graph *g, const char *x, char *y, int index);
/* A convolution's or pooling's window as attributes: kernel_shape, strides
 * and pads (TensorFlow's same puts the odd pixel after), from lp. */
void onnx_window_attrs(onnx_graph *g, const layer_plan *lp);

/* ---- the pieces of the sequence layers' nodes ----
 * Values they make are named layers.{index}.{what}, as onnx_value_name;
 * `what` must differ from the layer's tensor suffixes. */

/* out = op(in[0..n_in)), a node without attributes. */
void onnx_op(onnx_graph *g, const char *op, const char *const *in, int n_in, char *out,
             int index, const char *what);
/* A node of several outputs (an empty name leaves one out); attributes
 * follow until onnx_node_end. */
void onnx_node_begin_outs(onnx_graph *g, const char *op, const char *const *in, int n_in,
                          const char *const *out, int n_out);
void onnx_attr_string(onnx_graph *g, const char *name, const char *v);
/* x with its axes permuted (ONNX's Transpose), into out. */
void onnx_transpose(onnx_graph *g, const char *x, const int64_t *perm, int n, char *out,
                    int index, const char *what);
/* x reshaped to shape (-1 for the batch's axis), into out. */
void onnx_reshape(onnx_graph *g, const char *x, const int64_t *shape, int n, char *out,
                  int index, const char *what);
/* Initializers the writer makes (not the weights file's): int64 [n], and
 * float of dims[0..ndim). */
void onnx_ints(onnx_graph *g, const int64_t *v, int n, char *name, int index, const char *what);
void onnx_floats(onnx_graph *g, const float *v, const int64_t *dims, int ndim, char *name,
                 int index, const char *what);
/* The data of the weights' tensor layers.{index}.{suffix}, checked as
 * onnx_weights checks it (NULL, the graph failed, when it is missing or of
 * another shape): for a layer whose ONNX operator wants it reordered. */
const float *onnx_tensor(onnx_graph *g, const layer_plan *lp, const char *suffix);
/* x [..., in] through torch.nn.Linear's w [out, in] (an initializer's name)
 * and bias b (NULL: none) on its last axis: MatMul by w's transpose, Add. */
void onnx_linear(onnx_graph *g, const char *x, const char *w, const char *b, char *out,
                 int index, const char *what);
/* A 1-D window (conv1d, the 1-D poolings) over [N, C, T] as attributes:
 * kernel_shape, strides, pads and, where dilated, dilations, from lp. */
void onnx_window1d_attrs(onnx_graph *g, const layer_plan *lp);

/* ---- the token mask (layer_plan.mask_in) ----
 * Computed in the graph from the model's input ids [N, T], where 0 is
 * padding, once (values mask.*), so that the graph gives what cohort
 * predicts for any padding: before, after or between the tokens. */
enum { ONNX_MASK_BOOL, ONNX_MASK_FLOAT, ONNX_MASK_ANY };
/* [N, T] bool or float: a token (1) or padding (0); ONNX_MASK_ANY: [N, 1]
 * bool, the sample has a token. */
const char *onnx_mask(onnx_graph *g, int which);
/* x [N, T, C] with the steps that are tokens first, in their order, then
 * the padding, into packed; their count per sample into lens, int32 [N],
 * at least 1 (a sample of padding alone: onnx_mask_unpack and the caller
 * zero its outputs). What a recurrent operator's sequence_lens expresses. */
void onnx_mask_pack(onnx_graph *g, const char *x, int T, char *packed, char *lens, int index);
/* y [N, T, C] of packed steps back in the sequence's steps: step t takes
 * the output of the last token at or before it (0 before the first), or 0
 * at padding where zero_pads; into out. */
void onnx_mask_unpack(onnx_graph *g, const char *y, int zero_pads, char *out, int index);

/* The ONNX model of spec, laid out as L, with the parameters of weights
 * (the file the spec came from), serialized into *data (malloc'd, *len
 * bytes). metadata: key/value string pairs for metadata_props. */
cohort_status onnx_model(const model_spec *spec, const model_layout *L, const st_file *weights,
                         const char *const *meta_kv, int n_meta, char **data, size_t *len,
                         cohort_error *err);

#endif
