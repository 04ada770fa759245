/*
 * fuzz_idx: data_read_idx on an image file and a label file cut from one
 * input: byte 0 holds flags (bit 0: gzip the images, bit 1: gzip the
 * labels), bytes 1-2 the length of the image part, the rest the two files.
 * Built with -DFUZZ_IDX_GZ the images and labels are always compressed, so
 * every input exercises the streaming (unsized) path of the reader.
 */
#include "data/data.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    unsigned flags = data[0];
#ifdef FUZZ_IDX_GZ
    flags |= 3;
#endif
    size_t cut = fuzz_le16(data + 1);
    data += 3;
    size -= 3;
    if (cut > size)
        cut = size;
    const char *images = fuzz_write(0, data, cut, flags & 1);
    const char *labels = fuzz_write(1, data + cut, size - cut, (flags >> 1) & 1);
    cohort_dataset *ds = NULL;
    cohort_error err;
    if (data_read_idx(images, labels, &ds, &err) == COHORT_OK) {
        if (!ds || ds->n < 1 || ds->dim < 1 || ds->n_classes < 1 || ds->n_classes > 256)
            abort();
        data_free(ds);
    } else if (ds || !err.message[0]) {
        abort();
    }
    return 0;
}
