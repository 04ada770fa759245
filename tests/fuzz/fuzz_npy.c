/*
 * fuzz_npy: data_read_npy on an x file and a y file cut from one input:
 * bytes 0-1 hold the length of the x part, the rest the two .npy files.
 */
#include "data/data.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    size_t cut = fuzz_le16(data);
    data += 2;
    size -= 2;
    if (cut > size)
        cut = size;
    const char *x = fuzz_write(0, data, cut, 0);
    const char *y = fuzz_write(1, data + cut, size - cut, 0);
    cohort_dataset *ds = NULL;
    cohort_error err;
    if (data_read_npy(x, y, &ds, &err) == COHORT_OK) {
        if (!ds || ds->n < 1 || ds->dim < 1 || ds->n_classes < 1)
            abort();
        data_free(ds);
    } else if (ds || !err.message[0]) {
        abort();
    }
    return 0;
}
