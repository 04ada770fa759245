#include "device/device.h"
#include "util/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void cpu_model_name(char *buf, size_t n)
{
    str_copy(buf, n, "CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *colon = strchr(line, ':');
            if (colon) {
                colon++;
                while (*colon == ' ')
                    colon++;
                colon[strcspn(colon, "\n")] = 0;
                str_copy(buf, n, colon);
            }
            break;
        }
    }
    fclose(f);
}

static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    uint64_t kb = 0;
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %lu kB", &kb) == 1)
                break;
        fclose(f);
    }
    return kb * 1024;
}

cohort_status devices_discover(device_registry **out, cohort_error *err)
{
    *out = NULL;
    device_registry *r = calloc(1, sizeof *r);
    if (!r)
        return cohort_fail(err, COHORT_ERR_NOMEM, "out of memory listing devices");
    cohort_device *d = &r->dev[r->n++];
    str_copy(d->info.name, sizeof d->info.name, "cpu:0");
    str_copy(d->info.kind, sizeof d->info.kind, "cpu");
    cpu_model_name(d->info.model, sizeof d->info.model);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    d->info.threads = cores > 0 ? (int)cores : 1;
    d->info.total_bytes = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    d->info.free_bytes = mem_available();
    d->info.limit_bytes = d->info.total_bytes;
    d->be = backend_cpu();
    d->parent = 0;
    cohort_status st = pool_create(d->info.name, d->be, 0, d->info.limit_bytes, COHORT_MEM_GROW,
                                   &d->pool, err);
    if (st) {
        devices_free(r);
        return st;
    }
    str_copy(r->gpu_note, sizeof r->gpu_note, "no GPU: cohort was built without the CUDA plugin");
    *out = r;
    return COHORT_OK;
}

void devices_free(device_registry *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n; i++)
        pool_free(r->dev[i].pool);
    free(r);
}

cohort_device *devices_find(device_registry *r, const char *name)
{
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->dev[i].info.name, name) == 0)
            return &r->dev[i];
    /* "cpu" and "gpu" alone mean device 0. */
    if (strcmp(name, "cpu") == 0)
        return devices_find(r, "cpu:0");
    if (strcmp(name, "gpu") == 0)
        return devices_find(r, "gpu:0");
    return NULL;
}

int devices_usable(const device_registry *r, int *idx, int max)
{
    int n = 0;
    for (int i = 0; i < r->n && n < max; i++)
        if (r->dev[i].pool)
            idx[n++] = i;
    return n;
}
