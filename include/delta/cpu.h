/* delta — settings of the CPU backend's kernels. */
#ifndef DELTA_CPU_H
#define DELTA_CPU_H

#include "delta/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads used by kernels (OpenMP and OpenBLAS); n <= 0 means all cores.
 * Results are bit-identical for a given thread count. */
DELTA_API void delta_cpu_set_threads(int n);
DELTA_API int delta_cpu_threads(void);

typedef enum delta_gemm_impl {
    DELTA_GEMM_BLAS = 0,   /* OpenBLAS sgemm (when built with it) */
    DELTA_GEMM_BUILTIN,    /* delta's own blocked GEMM */
} delta_gemm_impl;

/* Selects the GEMM path; returns DELTA_ERR_UNSUPPORTED when asking for BLAS
 * in a build without it. The DELTA_GEMM environment variable ("blas" or
 * "builtin") sets the initial choice; the default is the built-in GEMM,
 * which measured faster on conv shapes and is bit-identical for any thread
 * count (OpenBLAS is bit-identical only for a fixed thread count). */
DELTA_API delta_status delta_cpu_set_gemm(delta_gemm_impl impl);
DELTA_API delta_gemm_impl delta_cpu_gemm(void);

/* What this build uses, e.g. "openblas openmp zlib cjson pcre2 mpi cuda". */
DELTA_API const char *delta_build_features(void);

#ifdef __cplusplus
}
#endif
#endif
