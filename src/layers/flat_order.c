/*
 * layers/flat_order: a flattened image's features between the model's order
 * and a weight file's. The model's activations are NHWC, so the features of
 * a flattened image follow (h, w, c); torch flattens NCHW, (c, h, w), and a
 * weight file holds the tensors that index them in torch's order (dense's
 * columns, batch and layer normalization's vectors after a flatten).
 */
#include "layers/layer.h"

#include <string.h>

void layer_flat_convert(const sample_shape *image, size_t rows, size_t n, float *mine,
                        float *file, int to_file)
{
    if (!image || image->c == 1) {
        if (to_file)
            memcpy(file, mine, rows * n * sizeof(float));
        else
            memcpy(mine, file, rows * n * sizeof(float));
        return;
    }
    size_t hw = (size_t)image->h * (size_t)image->w, c = (size_t)image->c;
    for (size_t j = 0; j < rows; j++, mine += n, file += n)
        for (size_t px = 0; px < hw; px++)
            for (size_t ch = 0; ch < c; ch++) {
                if (to_file)
                    file[ch * hw + px] = mine[px * c + ch];
                else
                    mine[px * c + ch] = file[ch * hw + px];
            }
}

void layer_convert_features(const layer_plan *lp, const layer_tensor *t, float *P, float *file,
                            int to_file)
{
    const sample_shape *f = &lp->flat_from;
    layer_flat_convert(lp->in.rank == 1 && f->rank == 3 ? f : NULL, 1, t->n, P + t->off, file,
                       to_file);
}
