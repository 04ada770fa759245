/* csv_float: data_float_parse, the fast path of csv_float.h and strtod for
 * the numbers it cannot be sure of. */
#include "data/csv_float.h"
#include "data/data_impl.h"
#include "util/util.h"

#include <ctype.h>
#include <stdlib.h>

int data_float_parse(const char *s, const char *e, float *out)
{
    if (data_float_scan(s, e, out) == e && s != e)
        return 1;
    if (s == e || isspace((unsigned char)*s) || data_float_hex(s, e))
        return 0; /* strtod would skip a space; a field must start with the number */
    /* strtod, then float: the decimal rounded to the nearest double and that
     * to float, as np.loadtxt(...).astype(np.float32) and pandas read it. At a
     * float midpoint strtof's single rounding can differ (1.000000178813934326
     * is 1 + 2^-23 to strtof, 1 + 2^-22 to numpy). */
    char *end;
    *out = (float)str_to_double(s, &end); /* strtod, in the C locale */
    return end == e;
}
