/* Launch helpers shared by the .cu files: grid-stride loops over int64
 * element counts, the fixed-order block reductions every reduction
 * kernel uses (a shared-memory tree over a power-of-two block, always the
 * same pairs in the same order, so the result depends on the data only),
 * and the element access that lets one kernel body serve F32 and BF16. */
#ifndef DELTA_CU_COMMON_CUH
#define DELTA_CU_COMMON_CUH

#include "backend/cuda/cuda_kernels.h"
#include "core/bf16.h"

#include <type_traits>

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

/* ---- F32 and BF16 from one kernel body ------------------------------------
 * A kernel templated on the element type T of its tensor operands is
 * instantiated for float (F32) and uint16_t (BF16, src/core/bf16.h's
 * storage). It reads element i as a float with cu_ld (a BF16 one widened
 * exactly) and stores a float result with cu_st (rounded once, to nearest
 * even, into a BF16 output), and computes in fp32 in between: for float
 * these are plain loads and stores (the F32 kernel's own bits), for BF16
 * exactly what the F32 kernel computes on widened copies of the operands,
 * rounded (the widening route of cu_bf16.cu), without the copies. */
__device__ static inline float cu_ld(const float *p, int64_t i) {
    return p[i];
}
__device__ static inline float cu_ld(const uint16_t *p, int64_t i) {
    return delta_bf16_to_f32(p[i]);
}
__device__ static inline void cu_st(float *p, int64_t i, float v) {
    p[i] = v;
}
__device__ static inline void cu_st(uint16_t *p, int64_t i, float v) {
    p[i] = delta_f32_to_bf16(v);
}

/* v as an element of type T holds it: v for float, v rounded to BF16 and
 * widened back for uint16_t (what cu_st then cu_ld give), for a kernel that
 * computes what several ops did and rounds where they stored a tensor. */
template <typename T> __device__ static inline float cu_round(float v) {
    if constexpr (std::is_same<T, uint16_t>::value) return delta_bf16_round(v);
    else return v;
}

/* Calls f(T()) with T the element type of a float tensor of dtype dt:
 * float for F32, uint16_t for BF16 (CU_WITH_T below names it T). what
 * names the op for the message. */
template <typename F>
static inline void cu_by_dtype(delta_dtype dt, const delta_op *what, F &&f) {
    if (dt == DELTA_BF16) {
        f(uint16_t());
        return;
    }
    DELTA_ASSERTF(dt == DELTA_F32, "op %d (%s): a float kernel on %s",
                  what->id, what->name, delta_dtype_name(dt));
    f(float());
}

/* Runs the statements ... with T the element type of tensor t (op's). */
#define CU_WITH_T(t, op, ...)                                               \
    cu_by_dtype((t)->dtype, (op), [&](auto z_) {                            \
        using T = decltype(z_);                                             \
        (void)z_;                                                           \
        __VA_ARGS__;                                                        \
    })

#endif
