/*
 * fuzz_safetensors: st_read on the input as a file; on success every
 * tensor's bytes are touched (ASan checks they lie in the blob) and the
 * metadata is looked up.
 */
#include "io/io.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write(0, data, size, 0);
    st_file f;
    cohort_error err;
    if (st_read(path, &f, &err) != COHORT_OK) {
        if (f.t || f.blob || f.n || !err.message[0])
            abort();
        return 0;
    }
    volatile float sink = 0;
    for (int i = 0; i < f.n; i++) {
        int64_t count = 1;
        for (int d = 0; d < f.t[i].ndim; d++)
            count *= f.t[i].shape[d];
        for (int64_t j = 0; j < count; j++)
            sink += f.t[i].data[j];
        if (st_find(&f, f.t[i].name) == NULL)
            abort();
    }
    (void)sink;
    free(st_meta_get(&f, "spec"));
    st_free(&f);
    return 0;
}
