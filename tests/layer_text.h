/*
 * layer_text.h: layers of a test's model spec from their plan text, through
 * the layer table's parser (layers/syntax.c), so that tests build specs as a
 * plan does and name no entry's settings struct. A text that does not parse
 * is the test's own bug: it aborts with the parser's message.
 */
#ifndef COHORT_TEST_LAYER_TEXT_H
#define COHORT_TEST_LAYER_TEXT_H

#include "layers/layer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static inline layer_spec layer_text(const char *fmt, ...)
{
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    layer_spec ls;
    cohort_error err;
    if (layer_parse_text(text, &ls, &err) != COHORT_OK) {
        fprintf(stderr, "layer_text(\"%s\"): %s\n", text, err.message);
        abort();
    }
    return ls;
}

/* A model's whole layers list from its plan text ("[{dense: 8}, {residual:
 * [...]}]"), blocks flattened, into s->layers and s->n_layers. */
static inline void layers_text(model_spec *s, const char *text)
{
    cohort_error err;
    if (layer_parse_list_text(text, s->layers, COHORT_MAX_LAYERS, &s->n_layers, &err) !=
        COHORT_OK) {
        fprintf(stderr, "layers_text(\"%s\"): %s\n", text, err.message);
        abort();
    }
}

static inline const char *pad_text(pad_kind pad) { return pad == PAD_SAME ? "same" : "valid"; }

static inline layer_spec layer_dense(int units, act_kind act)
{
    return layer_text("{dense: %d, activation: %s}", units, act_name(act));
}

static inline layer_spec layer_dropout(float rate)
{
    return layer_text("{dropout: %.9g}", (double)rate);
}

static inline layer_spec layer_act(act_kind act)
{
    return layer_text("{activation: %s}", act_name(act));
}

static inline layer_spec layer_conv(int filters, int k, int stride, pad_kind pad, act_kind act,
                                    int use_bias)
{
    return layer_text("{conv2d: %d, kernel_size: %d, strides: %d, padding: %s, activation: %s, "
                      "use_bias: %s}",
                      filters, k, stride, pad_text(pad), act_name(act),
                      use_bias ? "true" : "false");
}

static inline layer_spec layer_pooling(const char *kind, int k, int stride, pad_kind pad)
{
    return layer_text("{%s: %d, strides: %d, padding: %s}", kind, k, stride, pad_text(pad));
}

static inline layer_spec layer_bnorm(float momentum, float epsilon)
{
    return layer_text("{batch_normalization: {momentum: %.9g, epsilon: %.9g}}", (double)momentum,
                      (double)epsilon);
}

#endif
