/* Launch helpers shared by the .cu files: grid-stride loops over int64
 * element counts, and the fixed-order block reductions every reduction
 * kernel uses (a shared-memory tree over a power-of-two block, always the
 * same pairs in the same order, so the result depends on the data only). */
#ifndef DELTA_CU_COMMON_CUH
#define DELTA_CU_COMMON_CUH

#include "backend/cuda/cuda_kernels.h"

#define CU_THREADS 256
#define CU_MAX_BLOCKS 65535

/* Blocks for a grid-stride loop over n elements. */
static inline unsigned cu_blocks(int64_t n) {
    int64_t b = (n + CU_THREADS - 1) / CU_THREADS;
    if (b < 1) b = 1;
    return (unsigned)(b < CU_MAX_BLOCKS ? b : CU_MAX_BLOCKS);
}

#define CU_FOR(i, n)                                                        \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;       \
         i < (n); i += (int64_t)blockDim.x * gridDim.x)

/* Launch on c's stream with the default block size; nothing when n == 0. */
#define CU_LAUNCH(kernel, c, n, ...)                                        \
    do {                                                                    \
        int64_t n_ = (n);                                                   \
        if (n_ > 0)                                                         \
            kernel<<<cu_blocks(n_), CU_THREADS, 0, (c)->stream>>>(          \
                __VA_ARGS__);                                               \
    } while (0)

/* Sum of v over the block (blockDim.x a power of two, at most
 * CU_THREADS), in a fixed tree; every thread gets the total. buf holds
 * blockDim.x doubles. */
__device__ static inline double cu_block_sum(double v, double *buf) {
    unsigned t = threadIdx.x;
    buf[t] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) buf[t] += buf[t + s];
        __syncthreads();
    }
    double r = buf[0];
    __syncthreads();
    return r;
}

/* Maximum over the block, ignoring NaN as the CPU's `if (x > m) m = x`
 * does (exact, so the order does not matter). buf: blockDim.x floats. */
__device__ static inline float cu_block_max(float v, float *buf) {
    unsigned t = threadIdx.x;
    buf[t] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s && buf[t + s] > buf[t]) buf[t] = buf[t + s];
        __syncthreads();
    }
    float r = buf[0];
    __syncthreads();
    return r;
}

#endif
