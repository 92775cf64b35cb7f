/* Loop-parallelism helpers shared by the CPU kernels. */
#ifndef DELTA_CPU_PARALLEL_H
#define DELTA_CPU_PARALLEL_H

#include "delta/cpu.h"

/* Loops touching fewer elements than this run on the calling thread alone:
 * waking the team costs more (results are the same either way). */
#define PAR_MIN 32768

#ifdef _OPENMP
#define K_PRAGMA(x) _Pragma(#x)
/* A static-schedule parallel loop over independent outputs on the CPU
 * backend's thread count, when cond holds (else on the calling thread). */
#define PAR_FOR(cond)                                                      \
    K_PRAGMA(omp parallel for schedule(static)                             \
                 num_threads(delta_cpu_threads()) if (cond))
#define SIMD K_PRAGMA(omp simd)
#else
#define PAR_FOR(cond)
#define SIMD
#endif

#endif
