/* Settings of the CPU backend (delta/cpu.h): thread count, GEMM path, and
 * the features this build was compiled with. */
#include "delta/cpu.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef DELTA_HAVE_OPENBLAS
#include <cblas.h>
#endif

/* 0 until delta_cpu_set_threads: then the OpenMP default applies. */
static atomic_int cpu_threads;
/* A delta_gemm_impl, or -1 until first asked (then from DELTA_GEMM). */
static atomic_int gemm_impl = -1;

void delta_cpu_set_threads(int n) {
    if (n <= 0) {
#ifdef _OPENMP
        n = omp_get_num_procs();
#else
        n = 1;
#endif
        if (n < 1) n = 1;
    }
    atomic_store(&cpu_threads, n);
#ifdef _OPENMP
    omp_set_num_threads(n);
#endif
#ifdef DELTA_HAVE_OPENBLAS
    openblas_set_num_threads(n);
#endif
}

int delta_cpu_threads(void) {
    int n = atomic_load_explicit(&cpu_threads, memory_order_relaxed);
    if (n > 0) return n;
#ifdef _OPENMP
    n = omp_get_max_threads();
    return n > 0 ? n : 1;
#else
    return 1;
#endif
}

/* The default is the built-in GEMM: on the shapes delta's conv and linear
 * kernels issue it measured as fast as OpenBLAS on large products and
 * faster on the many small ones (make bench-kernels; docs/ARCHITECTURE.md),
 * and its results are bit-identical for any thread count, which OpenBLAS's
 * are not. DELTA_GEMM=blas selects OpenBLAS. */
static int gemm_from_env(void) {
    const char *e = getenv("DELTA_GEMM");
#ifdef DELTA_HAVE_OPENBLAS
    if (e && strcmp(e, "blas") == 0) return DELTA_GEMM_BLAS;
#else
    (void)e; /* "blas" cannot be served: built-in only */
#endif
    return DELTA_GEMM_BUILTIN;
}

delta_status delta_cpu_set_gemm(delta_gemm_impl impl) {
    if (impl != DELTA_GEMM_BLAS && impl != DELTA_GEMM_BUILTIN)
        return DELTA_ERR_INVALID_ARG;
#ifndef DELTA_HAVE_OPENBLAS
    if (impl == DELTA_GEMM_BLAS) return DELTA_ERR_UNSUPPORTED;
#endif
    atomic_store(&gemm_impl, (int)impl);
    return DELTA_OK;
}

delta_gemm_impl delta_cpu_gemm(void) {
    int v = atomic_load_explicit(&gemm_impl, memory_order_relaxed);
    if (v < 0) {
        int expected = -1;
        atomic_compare_exchange_strong(&gemm_impl, &expected, gemm_from_env());
        v = atomic_load(&gemm_impl);
    }
    return (delta_gemm_impl)v;
}

bool delta_gemm_contends(void) {
#ifdef DELTA_HAVE_OPENBLAS
    /* openblas_get_parallel: 0 sequential, 1 its own pthreads, 2 OpenMP */
    return delta_cpu_gemm() == DELTA_GEMM_BLAS && openblas_get_parallel() == 1;
#else
    return false;
#endif
}

#ifdef DELTA_HAVE_OPENBLAS
#define FEAT_BLAS " openblas"
#else
#define FEAT_BLAS ""
#endif
#ifdef _OPENMP
#define FEAT_OMP " openmp"
#else
#define FEAT_OMP ""
#endif
#ifdef DELTA_HAVE_ZLIB
#define FEAT_ZLIB " zlib"
#else
#define FEAT_ZLIB ""
#endif
#ifdef DELTA_HAVE_CJSON
#define FEAT_CJSON " cjson"
#else
#define FEAT_CJSON ""
#endif
#ifdef DELTA_HAVE_PCRE2
#define FEAT_PCRE2 " pcre2"
#else
#define FEAT_PCRE2 ""
#endif
#ifdef DELTA_HAVE_CUDA
#define FEAT_CUDA " cuda"
#else
#define FEAT_CUDA ""
#endif
#ifdef DELTA_HAVE_MPI
#define FEAT_MPI " mpi"
#else
#define FEAT_MPI ""
#endif

const char *delta_build_features(void) {
    static const char f[] = FEAT_BLAS FEAT_OMP FEAT_ZLIB FEAT_CJSON FEAT_PCRE2 FEAT_MPI FEAT_CUDA;
    return f[0] ? f + 1 : "none";
}
