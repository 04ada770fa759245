/*
 * fuzz_csv: data_read_csv on the input as a file. Byte 0 chooses the label
 * column option (its low 4 bits): 0 none, 1 "label", 2 "0", 3 "2", 4 "999",
 * else none; and the split into chunks (its high 4 bits): 0 the default (one
 * chunk below 1 MiB), else chunks of that many bytes on 3 threads.
 */
#include "data/data.h"
#include "data/data_impl.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const char *const cols[] = {NULL, "label", "0", "2", "999"};
    const char *col = (data[0] & 15) < 5 ? cols[data[0] & 15] : NULL;
    data_csv_set_split(data[0] >> 4, data[0] >> 4 ? 3 : 0);
    const char *path = fuzz_write(0, data + 1, size - 1, 0);
    cohort_dataset *ds = NULL;
    cohort_error err;
    if (data_read_csv(path, col, &ds, &err) == COHORT_OK) {
        if (!ds || ds->n < 1 || ds->dim < 1 || ds->n_classes < 1)
            abort();
        data_free(ds);
    } else if (ds || !err.message[0]) {
        abort();
    }
    return 0;
}
