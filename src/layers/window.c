/*
 * layers/window: the window arithmetic of the windowed kinds (conv2d, the
 * poolings): TensorFlow's output sizes and padding, and the geometry the
 * backend's window primitives take.
 */
#include "layers/pass.h"

/* valid: (n - k) / s + 1 outputs, no padding; same: ceil(n / s) outputs,
 * padded by what the last window needs, the odd pixel after the image;
 * causal: k - 1 positions of padding before the first, none after (Keras's
 * Conv1D: output t reads inputs up to t alone), (n - 1) / s + 1 outputs. */
void window_dim(int n, int k, int s, pad_kind pad, int *out, int *pad_before)
{
    if (s < 1)
        s = 1;
    if (pad == PAD_CAUSAL) {
        *out = n >= 1 ? (n - 1) / s + 1 : 0;
        *pad_before = k - 1;
    } else if (pad == PAD_SAME) {
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
    window_geom g = {rows,      lp->in.h,  lp->in.w,    lp->in.c,     lp->kh,    lp->kw,
                     lp->sh,    lp->sw,    lp->pad_top, lp->pad_left, lp->out.h, lp->out.w,
                     window_dilation(lp->dh), window_dilation(lp->dw)};
    return g;
}
