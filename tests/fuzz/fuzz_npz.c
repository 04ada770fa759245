/* fuzz_npz: data_read_npz on the input as an .npz (zip) file. */
#include "data/data.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write(0, data, size, 0);
    cohort_dataset *ds = NULL;
    cohort_error err;
    if (data_read_npz(path, &ds, &err) == COHORT_OK) {
        if (!ds || ds->n < 1 || ds->dim < 1 || ds->n_classes < 1)
            abort();
        data_free(ds);
    } else if (ds || !err.message[0]) {
        abort();
    }
    return 0;
}
