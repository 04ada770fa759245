/* cohort export: saved weights as a model for another runtime (ONNX). */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const help =
    "usage: cohort export WEIGHTS [--format onnx] [--out FILE]\n\n"
    "The model saved in WEIGHTS (DIR/models/NAME.safetensors) as a standard ONNX\n"
    "model (opset 17) that onnxruntime and other ONNX runtimes run: input `input`\n"
    "[N, H, W, C] for images (channels last, as the data), [N, T, F] for sequences,\n"
    "[N, T] for token ids (floats; 0 is padding under mask_zero, computed in the graph)\n"
    "or [N, features], output `output` [N, outputs], what `cohort predict` gives\n"
    "(probabilities of a softmax or sigmoid output, logits with from_logits, values\n"
    "for regression). docs/python.md lists each layer kind's ONNX operators.\n"
    "Written atomically to FILE (default: WEIGHTS with .onnx for .safetensors).\n"
    "A layer cohort cannot export exactly is an error naming it and why (exit status 2).";

int cmd_export(int argc, char **argv)
{
    const char *weights = NULL, *format = "onnx", *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            puts(help);
            return 0;
        } else if (cli_opt_value(argc, argv, &i, "--format", &v)) {
            format = v;
        } else if (cli_opt_value(argc, argv, &i, "--out", &v)) {
            out = v;
        } else if (argv[i][0] == '-') {
            static const char *const opts[] = {"--format", "--out", "--help", NULL};
            return cli_unknown_option("export", argv[i], NULL, opts, 0);
        } else if (!weights) {
            weights = argv[i];
        } else {
            return cli_usage_error("export", "'%s' is extra", argv[i]);
        }
    }
    if (!weights)
        return cli_usage_error("export", "needs WEIGHTS (see --help)");
    if (strcmp(format, "onnx") != 0)
        return cli_usage_error("export", "unknown format '%s'; the formats are: onnx", format);
    char *made = NULL;
    if (!out) {
        size_t n = strlen(weights);
        const char *ext = ".safetensors";
        size_t e = strlen(ext);
        size_t stem = n > e && !strcmp(weights + n - e, ext) ? n - e : n;
        made = malloc(stem + sizeof ".onnx");
        if (!made)
            return cli_usage_error("export", "out of memory");
        memcpy(made, weights, stem);
        memcpy(made + stem, ".onnx", sizeof ".onnx");
        out = made;
    }
    cohort_error err;
    int rc = 0;
    if (cohort_export_onnx(weights, out, &err))
        rc = cli_usage_error("export", "%s", err.message);
    else
        fprintf(stderr, "cohort export: wrote %s\n", out);
    free(made);
    return rc;
}
