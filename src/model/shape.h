/*
 * shape: the shape of one sample, shared by the data readers (what a file
 * holds) and the model layout (what each layer sees).
 */
#ifndef COHORT_SHAPE_H
#define COHORT_SHAPE_H

#include <stddef.h>

/* The shape of one sample: rank 1 is a flat vector of c features (h = w = 1);
 * rank 2 is a sequence of h steps of c features (w = 1), stored [h, c], so
 * that it lies in memory as an image of height h and width 1 would; rank 3
 * is an image (h, w, c), stored channels last (NHWC, as Keras). */
typedef struct sample_shape {
    int rank;
    int h, w, c;
} sample_shape;

static inline sample_shape shape_flat(int n) { return (sample_shape){1, 1, 1, n}; }
static inline sample_shape shape_seq(int t, int c) { return (sample_shape){2, t, 1, c}; }
static inline sample_shape shape_image(int h, int w, int c) { return (sample_shape){3, h, w, c}; }
static inline size_t shape_size(sample_shape s) { return (size_t)s.h * (size_t)s.w * (size_t)s.c; }
/* "(28, 28, 1)", "(24, 8)" or "(784)": the shape as cohort plan prints it. */
void shape_format(sample_shape s, char *buf, size_t len);

#endif
