/* Which of the CPU backend's own kernels run here (isa.h). */
#include "backend/cpu/isa.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
static cpu_isa isa_of_processor(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return ISA_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return ISA_AVX2;
    return ISA_NONE;
}
#else
static cpu_isa isa_of_processor(void) { return ISA_NONE; }
#endif

/* What COHORT_CPU_KERNELS asks for: *w, or 0 when it is unset or not a
 * known value. */
static int isa_wanted(cpu_isa *w)
{
    const char *want = getenv("COHORT_CPU_KERNELS");
    if (!want || !*want)
        return 0;
    if (!strcmp(want, "avx512"))
        *w = ISA_AVX512;
    else if (!strcmp(want, "avx2"))
        *w = ISA_AVX2;
    else if (!strcmp(want, "blas") || !strcmp(want, "none"))
        *w = ISA_NONE;
    else
        return 0;
    return 1;
}

cpu_isa cpu_isa_detect(void)
{
    cpu_isa best = isa_of_processor(), w;
    if (!isa_wanted(&w))
        return best;
    return w < best ? w : best;
}

/*
 * Why cpu_isa_detect picked what it did. Without COHORT_CPU_KERNELS the
 * rule is the widest vector ISA the processor has: bench/kernels measured
 * the own kernels faster than OpenBLAS for every shape of the seed models
 * on both kinds of machine the project runs on (AVX-512 on an Intel Xeon,
 * AVX2 on an AMD EPYC, bench/README.md), and only they give results that
 * do not depend on the thread count.
 */
const char *cpu_isa_why(void)
{
    static char why[200];
    cpu_isa best = isa_of_processor(), w;
    const char *want = getenv("COHORT_CPU_KERNELS");
    char ignored[96] = "";
    if (isa_wanted(&w)) {
        if (w > best)
            snprintf(why, sizeof why, "COHORT_CPU_KERNELS=%s, but this CPU has %s at most", want,
                     cpu_isa_name(best));
        else
            snprintf(why, sizeof why, "COHORT_CPU_KERNELS=%s", want);
        return why;
    }
    if (want && *want)
        snprintf(ignored, sizeof ignored,
                 "; COHORT_CPU_KERNELS='%.32s' is not avx512, avx2 or blas: ignored", want);
    snprintf(why, sizeof why, "%s%s",
             best == ISA_NONE ? "no AVX2 with FMA on this CPU: OpenBLAS for every product"
                              : "own kernels, the widest this CPU has",
             ignored);
    return why;
}

const char *cpu_isa_name(cpu_isa isa)
{
    switch (isa) {
    case ISA_AVX512: return "avx512";
    case ISA_AVX2: return "avx2";
    case ISA_NONE: break;
    }
    return "blas";
}

