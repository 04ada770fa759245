/* csv_float: data_float_parse, the fast path of csv_float.h and strtof for
 * the numbers it cannot be sure of. */
#include "data/csv_float.h"
#include "data/data_impl.h"

#include <ctype.h>
#include <stdlib.h>

int data_float_parse(const char *s, const char *e, float *out)
{
    if (data_float_scan(s, e, out) == e && s != e)
        return 1;
    if (s == e || isspace((unsigned char)*s))
        return 0; /* strtof would skip it; a field must start with the number */
    char *end;
    *out = strtof(s, &end);
    return end == e;
}
