/* The table of layer entries, and the window arithmetic they share. */
#include "train/layer.h"

const layer_ops *layer_ops_of(layer_kind k)
{
    static const layer_ops *const table[LAYER_KIND_COUNT] = {
        [LAYER_DENSE] = &layer_dense_ops,
        [LAYER_DROPOUT] = &layer_dropout_ops,
        [LAYER_CONV2D] = &layer_conv2d_ops,
        [LAYER_MAX_POOL2D] = &layer_max_pool_ops,
        [LAYER_AVG_POOL2D] = &layer_avg_pool_ops,
        [LAYER_GLOBAL_AVG_POOL2D] = &layer_global_avg_pool_ops,
        [LAYER_FLATTEN] = &layer_flatten_ops,
        [LAYER_BATCH_NORM] = &layer_batch_norm_ops,
        [LAYER_ACTIVATION] = &layer_activation_ops,
    };
    return (unsigned)k < LAYER_KIND_COUNT ? table[k] : NULL;
}

/* valid: (n - k) / s + 1 outputs, no padding; same: ceil(n / s) outputs,
 * padded by what the last window needs, the odd pixel after the image. */
void window_dim(int n, int k, int s, pad_kind pad, int *out, int *pad_before)
{
    if (s < 1)
        s = 1;
    if (pad == PAD_SAME) {
        int o = (n + s - 1) / s, total = (o - 1) * s + k - n;
        *out = o;
        *pad_before = total > 0 ? total / 2 : 0;
    } else {
        *out = n >= k ? (n - k) / s + 1 : 0;
        *pad_before = 0;
    }
}

window_geom layer_window(const layer_plan *lp, int rows)
{
    window_geom g = {rows,      lp->in.h, lp->in.w,    lp->in.c,     lp->kh,    lp->kw,
                     lp->sh,    lp->sw,   lp->pad_top, lp->pad_left, lp->out.h, lp->out.w};
    return g;
}
