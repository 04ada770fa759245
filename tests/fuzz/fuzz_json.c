/*
 * fuzz_json: json_parse on the input (not NUL-terminated: ASan catches a
 * read past its end); a tree that parses is walked and looked up.
 */
#include "util/json.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t walk(const json_value *v, int depth)
{
    if (depth > JSON_MAX_DEPTH + 1)
        abort();
    size_t n = 1;
    if (v->type == JSON_STR && (strlen(v->str) != v->n || !json_utf8_valid(v->str, v->n)))
        abort();
    if (v->type == JSON_ARR || v->type == JSON_OBJ)
        for (size_t i = 0; i < v->n; i++) {
            if (v->type == JSON_OBJ && json_get(v, v->keys[i]) != &v->items[i])
                abort(); /* keys are unique, so the lookup finds this one */
            n += walk(&v->items[i], depth + 1);
        }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    if (size)
        memcpy(copy, data, size);
    char msg[256];
    msg[0] = 0;
    json_value *v = json_parse(copy, size, msg, sizeof msg);
    if (v) {
        walk(v, 0);
        json_free(v);
    } else if (!msg[0]) {
        abort();
    }
    free(copy);
    return 0;
}
