/* json: the whole expanded plan as JSON (cohort_plan.json). */
#include "plan/plan_impl.h"

char *plan_to_json(const cohort_plan *p)
{
    strbuf b;
    sb_init(&b);
    sb_puts(&b, "{\"name\":");
    sb_json_str(&b, p->name);
    sb_puts(&b, ",\"path\":");
    sb_json_str(&b, p->path);
    sb_puts(&b, ",\"data\":{\"train\":");
    sb_json_str(&b, p->data.train);
    const char *opt[][2] = {{"test", p->data.test}, {"validation", p->data.validation}};
    for (int i = 0; i < 2; i++) {
        sb_printf(&b, ",\"%s\":", opt[i][0]);
        if (opt[i][1][0])
            sb_json_str(&b, opt[i][1]);
        else
            sb_puts(&b, "null");
    }
    sb_puts(&b, ",\"validation_split\":");
    sb_json_num(&b, p->data.validation_split);
    sb_puts(&b, ",\"label_column\":");
    if (p->data.label_column[0])
        sb_json_str(&b, p->data.label_column);
    else
        sb_puts(&b, "null");
    if (p->data.label_columns[0]) {
        sb_puts(&b, ",\"label_columns\":");
        sb_json_str(&b, p->data.label_columns);
    }
    const sample_shape *is = &p->data.input_shape;
    if (is->rank == 3)
        sb_printf(&b, ",\"input_shape\":[%d,%d,%d]", is->h, is->w, is->c);
    else if (is->rank == 2)
        sb_printf(&b, ",\"input_shape\":[%d,%d]", is->h, is->c);
    else if (is->rank == 1)
        sb_printf(&b, ",\"input_shape\":[%d]", is->c);
    sb_printf(&b, "},\"strategy\":\"%s\",\"shared_order\":%s,\"devices\":{",
              cohort_strategy_str(p->strategy), p->shared_order ? "true" : "false");
    for (int i = 0; i < p->n_devices; i++) {
        const device_spec *d = &p->devices[i];
        if (i)
            sb_puts(&b, ",");
        sb_json_str(&b, d->name);
        sb_printf(&b, ":{\"memory\":\"%s\",\"split\":",
                  d->policy == COHORT_MEM_PREALLOCATE ? "preallocate" : "grow");
        if (d->n_split) {
            sb_puts(&b, "[");
            for (int j = 0; j < d->n_split; j++)
                sb_printf(&b, "%s%llu", j ? "," : "", (unsigned long long)d->split[j]);
            sb_puts(&b, "]");
        } else {
            sb_puts(&b, "null");
        }
        if (d->memory_limit)
            sb_printf(&b, ",\"memory_limit\":%llu}", (unsigned long long)d->memory_limit);
        else
            sb_puts(&b, ",\"memory_limit\":null}");
    }
    sb_puts(&b, "},\"models\":[");
    for (int i = 0; i < p->n_models; i++) {
        if (i)
            sb_puts(&b, ",");
        sb_puts(&b, p->models[i].config_json);
    }
    sb_puts(&b, "]}");
    if (b.failed) {
        sb_free(&b);
        return NULL;
    }
    return b.data;
}
