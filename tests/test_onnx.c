/*
 * The ONNX writer's own pieces, under the sanitizers too: protobuf's wire
 * format byte for byte (varints of one to ten bytes, a negative int64, a
 * float, a nested message whose length takes two bytes), and onnx_model's
 * errors: a file without a tensor its layer needs, one of another shape, and
 * a layer kind without an `onnx` hook, each naming what; a model it can
 * write starts as ONNX's ModelProto does; the recurrent layers' gate blocks
 * go from torch's order into ONNX's. t_export.sh and tests/python check
 * whole files with onnx.checker and onnxruntime.
 */
#include "check.h"
#include "io/onnx.h"
#include "io/protobuf.h"
#include "layers/layer.h"

#include <stdint.h>
#include <string.h>

static int bytes_are(const pb_writer *w, const unsigned char *want, size_t n)
{
    return !w->b.failed && w->b.len == n && memcmp(w->b.data, want, n) == 0;
}

static void wire_format(void)
{
    pb_writer w;
    pb_init(&w);
    pb_varint(&w, 1, 1);
    pb_varint(&w, 2, 300);
    static const unsigned char small[] = {0x08, 0x01, 0x10, 0xac, 0x02};
    CHECK(bytes_are(&w, small, sizeof small));
    pb_free(&w);

    pb_init(&w);
    pb_varint(&w, 3, -1); /* two's complement, ten bytes, as protobuf writes an int64 */
    static const unsigned char neg[] = {0x18, 0xff, 0xff, 0xff, 0xff, 0xff,
                                        0xff, 0xff, 0xff, 0xff, 0x01};
    CHECK(bytes_are(&w, neg, sizeof neg));
    pb_free(&w);

    pb_init(&w);
    pb_float(&w, 2, 1.0f); /* wire type 5, little endian */
    pb_string(&w, 16, "ab"); /* a field number of two key bytes */
    static const unsigned char fl[] = {0x15, 0x00, 0x00, 0x80, 0x3f, 0x82, 0x01, 0x02, 'a', 'b'};
    CHECK(bytes_are(&w, fl, sizeof fl));
    pb_free(&w);

    /* A nested message of 203 bytes: its length (0xcb 0x01) goes in front of it on close. */
    pb_init(&w);
    char blob[200];
    memset(blob, 'x', sizeof blob);
    pb_begin(&w, 7);
    pb_bytes(&w, 1, blob, sizeof blob);
    pb_end(&w);
    pb_varint(&w, 1, 8);
    CHECK(!w.b.failed && w.b.len == 1 + 2 + 203 + 2);
    static const unsigned char head[] = {0x3a, 0xcb, 0x01, 0x0a, 0xc8, 0x01, 'x'};
    CHECK(w.b.len > sizeof head && memcmp(w.b.data, head, sizeof head) == 0);
    CHECK(w.b.len >= 2 && (unsigned char)w.b.data[w.b.len - 2] == 0x08 &&
          w.b.data[w.b.len - 1] == 8);
    pb_free(&w);

    /* Deeper than PB_MAX_DEPTH: failed, not written past the stack. */
    pb_init(&w);
    for (int i = 0; i <= PB_MAX_DEPTH; i++)
        pb_begin(&w, 1);
    CHECK(w.b.failed);
    for (int i = 0; i <= PB_MAX_DEPTH; i++)
        pb_end(&w);
    pb_free(&w);
}

/* A kind with shapes but no ONNX form. */
static int same_plan(const layer_spec *ls, layer_plan *lp, char *msg, size_t len)
{
    (void)ls;
    (void)msg;
    (void)len;
    lp->out = lp->in;
    return 0;
}
static const layer_ops hookless = {.name = "hookless", .plan = same_plan, .keeps_order = 1};

/* A model of one layer (its text, or the hookless kind) on 4 inputs, written
 * with the tensors t; returns the status, the message in err. */
static cohort_status write_one(const char *text, st_tensor *t, int n_t, cohort_error *err,
                               size_t *len)
{
    static model_spec spec;
    static model_layout L;
    memset(&spec, 0, sizeof spec);
    memset(&L, 0, sizeof L);
    str_copy(spec.name, sizeof spec.name, "m");
    spec.n_layers = L.n_layers = 1;
    layer_spec *ls = &spec.layers[0];
    if (text) {
        CHECK(layer_parse_text(text, ls, NULL) == COHORT_OK);
    } else {
        ls->kind = &hookless;
    }
    layer_plan *lp = &L.layers[0];
    lp->kind = ls->kind;
    lp->act = ls->act;
    lp->in = L.in_shape = shape_flat(4);
    char msg[256];
    CHECK(ls->kind->plan(ls, lp, msg, sizeof msg) == 0);
    L.n_out = (int)shape_size(lp->out);
    st_file f = {.n = n_t, .t = t};
    char *data = NULL;
    cohort_status st = onnx_model(&spec, &L, &f, NULL, 0, &data, len, err);
    if (!st) {
        /* ModelProto: ir_version 8 first, the producer next. */
        static const unsigned char head[] = {0x08, 0x08, 0x12, 0x06, 'c', 'o', 'h', 'o', 'r', 't'};
        CHECK(*len > sizeof head && memcmp(data, head, sizeof head) == 0);
        CHECK(memmem(data, *len, "Gemm", 4) != NULL);
    }
    free(data);
    return st;
}

static void model_errors(void)
{
    float w[12] = {0}, b[3] = {0};
    st_tensor t[2] = {{.name = "layers.0.weight", .ndim = 2, .shape = {3, 4}, .data = w},
                      {.name = "layers.0.bias", .ndim = 1, .shape = {3}, .data = b}};
    cohort_error err;
    size_t len = 0;
    CHECK(write_one("{dense: 3, activation: softmax}", t, 2, &err, &len) == COHORT_OK);
    CHECK(len > 12 * 4);

    CHECK(write_one("{dense: 3}", t, 1, &err, &len) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "layers.0 (dense) of model 'm': the weights have no tensor "
                                "layers.0.bias");
    st_tensor wrong = t[0];
    wrong.shape[0] = 4;
    wrong.shape[1] = 3;
    CHECK(write_one("{dense: 3, use_bias: false}", &wrong, 1, &err, &len) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "layers.0.weight is not of the shape its layer plans");

    CHECK(write_one(NULL, t, 2, &err, &len) == COHORT_ERR_INPUT);
    CHECK_CONTAINS(err.message, "layers.0 (hookless) of model 'm': cohort cannot export the "
                                "layer kind hookless to ONNX yet");
}

/* A recurrent layer of one unit on a sequence [3, 1] into ONNX: its tensors
 * hold their gate blocks' numbers (torch's order), so that the file's W,
 * R and B show the blocks in ONNX's order (LSTM i, o, f, c; GRU z, r, h),
 * the reverse direction's after the forward one's. */
static void recurrent_gates(void)
{
    static const struct {
        const char *text;
        int G, dirs;
        float W[8], B[16];
    } cases[] = {
        {"{lstm: 1}", 4, 1, {1, 4, 2, 3}, {11, 14, 12, 13, 21, 24, 22, 23}},
        {"{gru: 1}", 3, 1, {2, 1, 3}, {12, 11, 13, 22, 21, 23}},
        {"{bidirectional: {gru: 1}}", 3, 2, {2, 1, 3, 6, 5, 7},
         {12, 11, 13, 22, 21, 23, 16, 15, 17, 26, 25, 27}},
    };
    static const char *const names[2][4] = {
        {"layers.0.weight_ih_l0", "layers.0.weight_hh_l0", "layers.0.bias_ih_l0",
         "layers.0.bias_hh_l0"},
        {"layers.0.weight_ih_l0_reverse", "layers.0.weight_hh_l0_reverse",
         "layers.0.bias_ih_l0_reverse", "layers.0.bias_hh_l0_reverse"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        static model_spec spec;
        static model_layout L;
        memset(&spec, 0, sizeof spec);
        memset(&L, 0, sizeof L);
        str_copy(spec.name, sizeof spec.name, "r");
        spec.n_layers = L.n_layers = 1;
        CHECK(layer_parse_text(cases[c].text, &spec.layers[0], NULL) == COHORT_OK);
        layer_plan *lp = &L.layers[0];
        lp->kind = spec.layers[0].kind;
        lp->in = L.in_shape = shape_seq(3, 1);
        char msg[256];
        CHECK(lp->kind->plan(&spec.layers[0], lp, msg, sizeof msg) == 0);
        L.n_out = (int)shape_size(lp->out);
        int G = cases[c].G, dirs = cases[c].dirs;
        /* gate j of direction d: W_ih j+1 (+4 reverse), W_hh likewise, b_ih 11+j, b_hh 21+j */
        float data[2][4][4];
        st_tensor t[8];
        for (int d = 0; d < dirs; d++)
            for (int k = 0; k < 4; k++) {
                for (int j = 0; j < G; j++)
                    data[d][k][j] = (float)(k < 2 ? 1 + j + 4 * d : 11 + 10 * (k - 2) + j + 4 * d);
                t[4 * d + k] = (st_tensor){.ndim = k < 2 ? 2 : 1, .shape = {G, 1},
                                           .data = data[d][k]};
                str_copy(t[4 * d + k].name, sizeof t[0].name, names[d][k]);
            }
        st_file f = {.n = 4 * dirs, .t = t};
        cohort_error err;
        char *out = NULL;
        size_t len = 0;
        CHECK(onnx_model(&spec, &L, &f, NULL, 0, &out, &len, &err) == COHORT_OK);
        size_t nw = (size_t)(G * dirs), nb = 2 * nw;
        CHECK(out && memmem(out, len, cases[c].W, nw * sizeof(float)) != NULL); /* W and R */
        CHECK(out && memmem(out, len, cases[c].B, nb * sizeof(float)) != NULL);
        CHECK(out && memmem(out, len, G == 4 ? "LSTM" : "GRU", G == 4 ? 4 : 3) != NULL);
        free(out);
    }
}

int main(void)
{
    wire_format();
    model_errors();
    recurrent_gates();
    return check_done("test_onnx");
}
