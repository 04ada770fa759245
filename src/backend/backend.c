#include "backend/backend_impl.h"
#include "util/util.h"

const backend_ops *backend_cuda(char *why, size_t why_len)
{
    str_copy(why, why_len, "cohort was built without the CUDA plugin");
    return NULL;
}
