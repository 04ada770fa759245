/*
 * export: a weights file cohort wrote as a model another runtime runs
 * (cohort_export_onnx; the format itself is io/onnx.c's).
 */
#include "io/io.h"
#include "io/onnx.h"
#include "run/run.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

cohort_status cohort_export_onnx(const char *weights, const char *out, cohort_error *err)
{
    if (!weights || !out)
        return cohort_fail(err, COHORT_ERR_USAGE, "cohort_export_onnx: invalid arguments");
    saved_model m;
    cohort_status st = saved_model_open(weights, &m, err);
    if (st)
        return st;
    const model_spec *sp = &m.plan->models[0];
    /* The input as the model's data had it: the stored image or sequence
     * shape, else flat. */
    sample_shape in = m.in.rank >= 2 ? m.in : shape_flat((int)m.n_in);
    model_layout *L = malloc(sizeof *L);
    st_file f = {0};
    char *spec = NULL, *names = NULL, *data = NULL;
    size_t len = 0;
    if (!L)
        st = cohort_fail(err, COHORT_ERR_NOMEM, "out of memory");
    else if (m.in.rank < 2 && m.n_in <= 0)
        st = cohort_fail(err, COHORT_ERR_INPUT,
                         "%s stores no input shape (a file of an older cohort): train it again "
                         "to export it",
                         weights);
    else if ((st = model_layout_make(sp, in, 0, 1, L, err)))
        cohort_fail_prefix(err, "%s", weights);
    else if (!(st = st_read(weights, &f, err))) {
        spec = st_meta_get(&f, "spec");
        names = st_meta_get(&f, "class_names");
        const char *meta[] = {"cohort_version", COHORT_VERSION, "spec", spec ? spec : "",
                              "class_names", names ? names : ""};
        st = onnx_model(sp, L, &f, meta, names ? 3 : 2, &data, &len, err);
        if (st)
            cohort_fail_prefix(err, "%s", weights);
        else
            st = file_write_atomic(out, data, len, err);
    }
    free(data);
    free(spec);
    free(names);
    st_free(&f);
    free(L);
    saved_model_free(&m);
    return st;
}
