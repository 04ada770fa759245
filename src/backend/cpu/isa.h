/*
 * The vector instruction set the CPU backend's own kernels use: what the
 * processor has, or less where COHORT_CPU_KERNELS asks (isa.c).
 */
#ifndef COHORT_CPU_ISA_H
#define COHORT_CPU_ISA_H

/* Which kernels: AVX-512, AVX2 (with FMA), or none (OpenBLAS and the
 * separate optimizer pass). */
typedef enum { ISA_NONE, ISA_AVX2, ISA_AVX512 } cpu_isa;

/* The best the processor has, or what COHORT_CPU_KERNELS asks for
 * ("avx512", "avx2", "blas"), never more than the processor has; an
 * unknown value is ignored. cpu_isa_why says why, in a phrase. */
cpu_isa cpu_isa_detect(void);
const char *cpu_isa_why(void);
const char *cpu_isa_name(cpu_isa isa);

#endif
