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

/* The ONNX model of spec, laid out as L, with the parameters of weights
 * (the file the spec came from), serialized into *data (malloc'd, *len
 * bytes). metadata: key/value string pairs for metadata_props. */
cohort_status onnx_model(const model_spec *spec, const model_layout *L, const st_file *weights,
                         const char *const *meta_kv, int n_meta, char **data, size_t *len,
                         cohort_error *err);

#endif
