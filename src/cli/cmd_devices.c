/* cohort devices: the physical and logical devices, with their memory. */
#include "cli/cli.h"
#include "device/device.h"
#include "run/run.h"
#include "util/util.h"

#include <string.h>

/* " (cpus 0-3, 8)": the CPU numbers of set, runs as ranges, into buf
 * ("..." where they do not fit). */
static void format_cores(char *buf, size_t n, const cpu_set_t *set)
{
    size_t len = (size_t)snprintf(buf, n, " (cpu%s ", CPU_COUNT(set) == 1 ? "" : "s");
    int first = 1;
    for (int c = 0; c < CPU_SETSIZE && len < n; c++) {
        if (!CPU_ISSET(c, set))
            continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
            e++;
        char run[32];
        if (e > c)
            snprintf(run, sizeof run, "%s%d-%d", first ? "" : ", ", c, e);
        else
            snprintf(run, sizeof run, "%s%d", first ? "" : ", ", c);
        /* Room kept for ", ..." and the ")" after it. */
        if (len + strlen(run) + 6 >= n) {
            len += (size_t)snprintf(buf + len, n - len, ", ...");
            break;
        }
        len += (size_t)snprintf(buf + len, n - len, "%s", run);
        first = 0;
        c = e;
    }
    if (len + 1 < n)
        snprintf(buf + len, n - len, ")");
}

/* The devices of r as JSON on stdout. */
static void print_json(const device_registry *r)
{
    strbuf s;
    sb_init(&s);
    sb_puts(&s, "{\n  \"devices\": [\n");
    for (int i = 0; i < r->n; i++) {
        const cohort_device_info *d = &r->dev[i].info;
        sb_puts(&s, i ? ",\n    {\"name\": " : "    {\"name\": ");
        sb_json_str(&s, d->name);
        sb_puts(&s, ", \"kind\": ");
        sb_json_str(&s, d->kind);
        sb_puts(&s, ", \"model\": ");
        sb_json_str(&s, d->model);
        sb_printf(&s, ", \"threads\": %d, \"total_bytes\": %llu, \"free_bytes\": %llu, "
                      "\"limit_bytes\": %llu, \"logical\": %s",
                  d->threads, (unsigned long long)d->total_bytes,
                  (unsigned long long)d->free_bytes, (unsigned long long)d->limit_bytes,
                  d->is_logical ? "true" : "false");
        sb_printf(&s, ", \"policy\": %s",
                  !r->dev[i].mem_pool                        ? "null"
                  : d->policy == COHORT_MEM_PREALLOCATE ? "\"preallocate\""
                                                         : "\"grow\"");
        const device_kind *kind = r->dev[i].kind;
        if (!kind->kernels) {
            sb_printf(&s, ", \"compute_capability\": \"%d.%d\"", d->cc_major, d->cc_minor);
        } else {
            sb_printf(&s, ", \"kernels\": \"%s\", \"kernels_why\": ", kind->kernels());
            sb_json_str(&s, kind->kernels_why());
        }
        sb_puts(&s, "}");
    }
    sb_puts(&s, "\n  ],\n  \"gpu_note\": ");
    if (r->gpu_note[0])
        sb_json_str(&s, r->gpu_note);
    else
        sb_puts(&s, "null");
    sb_puts(&s, "\n}\n");
    fputs(s.data ? s.data : "", stdout);
    sb_free(&s);
}

/* The devices of r, one a line, on stdout. */
static void print_text(const device_registry *r)
{
    char a[32], b[32], mem[96];
    for (int i = 0; i < r->n; i++) {
        const cohort_device_info *d = &r->dev[i].info;
        const char *policy =
            d->policy == COHORT_MEM_PREALLOCATE ? "preallocated" : "grows on demand";
        /* An unsplit device's settings, where the plan gave any. */
        mem[0] = 0;
        if (r->dev[i].mem_pool && (d->limit_bytes != d->total_bytes ||
                               d->policy == COHORT_MEM_PREALLOCATE))
            snprintf(mem, sizeof mem, "; limit %s, %s",
                     format_bytes(d->limit_bytes, a, sizeof a), policy);
        const device_kind *kind = r->dev[i].kind;
        uint64_t keep = kind->headroom ? kind->headroom(d->free_bytes) : 0;
        if (r->dev[i].mem_pool && kind->headroom && !d->is_logical &&
            d->limit_bytes == d->free_bytes - keep)
            snprintf(mem, sizeof mem, "; limit %s (%s kept for CUDA's own use), %s",
                     format_bytes(d->limit_bytes, a, sizeof a), format_bytes(keep, b, sizeof b),
                     policy);
        if (d->is_logical && kind->shares_cores) {
            char cores[64] = "";
            cpu_set_t part;
            if (device_part_cores(r, &r->dev[i], &part) > 0)
                format_cores(cores, sizeof cores, &part);
            printf("%-8s part of %s: %d core%s%s, limit %s, %s\n", d->name,
                   r->dev[r->dev[i].parent].info.name, d->threads, d->threads == 1 ? "" : "s",
                   cores, format_bytes(d->limit_bytes, a, sizeof a), policy);
        }
        else if (d->is_logical)
            printf("%-8s part of %s: limit %s, %s\n", d->name,
                   r->dev[r->dev[i].parent].info.name, format_bytes(d->limit_bytes, a, sizeof a),
                   policy);
        else if (kind->kernels)
            printf("%-8s %s, %d core%s, %s memory (%s available), kernels %s (%s)%s%s\n",
                   d->name, d->model, d->threads, d->threads == 1 ? "" : "s", format_bytes(d->total_bytes, a, sizeof a),
                   format_bytes(d->free_bytes, b, sizeof b), kind->kernels(),
                   kind->kernels_why(), mem, r->dev[i].mem_pool ? "" : ", split:");
        else
            printf("%-8s %s, compute capability %d.%d, %s memory (%s free)%s%s\n", d->name,
                   d->model, d->cc_major, d->cc_minor, format_bytes(d->total_bytes, a, sizeof a),
                   format_bytes(d->free_bytes, b, sizeof b), mem,
                   r->dev[i].mem_pool ? "" : ", split:");
    }
    if (r->gpu_note[0])
        printf("(%s)\n", r->gpu_note);
}

int cmd_devices(int argc, char **argv)
{
    int json = 0;
    const char *plan_path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            puts("usage: cohort devices [PLAN] [--json]\n\n"
                 "List the devices cohort can train on: the CPU (cores, memory) and every CUDA\n"
                 "GPU (name, compute capability, total and free memory). When no GPU is\n"
                 "listed, says why. With PLAN, also the memory settings of its devices: section:\n"
                 "the logical devices it splits out (their share of the cores on a CPU), and each\n"
                 "device's hard memory limit and policy (preallocated, or grows on demand).\n"
                 "--json gives each device's policy as \"grow\" or \"preallocate\" (null for a\n"
                 "split device, whose parts have their own).");
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (argv[i][0] != '-' && !plan_path) {
            plan_path = argv[i];
        } else if (argv[i][0] != '-') {
            return cli_usage_error("devices", "one plan at a time; '%s' is extra", argv[i]);
        } else {
            static const char *const opts[] = {"--json", "--help", NULL};
            return cli_unknown_option("devices", argv[i], NULL, opts, 0);
        }
    }
    device_registry *r;
    cohort_error err;
    if (devices_discover(&r, &err))
        return cli_usage_error("devices", "%s", err.message);
    if (plan_path) {
        cohort_plan *plan;
        if (cohort_plan_load(plan_path, NULL, 0, &plan, &err)) {
            devices_free(r);
            return cli_usage_error(NULL, "%s", err.message);
        }
        cohort_status st = devices_apply_plan(r, plan, &err);
        cohort_plan_free(plan);
        if (st) {
            devices_free(r);
            return cli_usage_error(NULL, "%s", err.message);
        }
    }
    if (json)
        print_json(r);
    else
        print_text(r);
    devices_free(r);
    return 0;
}
