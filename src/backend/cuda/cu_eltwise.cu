/* Elementwise kernels on the GPU: activations and their gradients, add
 * (trailing-dims broadcast), mul, scale, fill, broadcast, dropout and the
 * full sum. Same formulas as src/backend/cpu/k_eltwise.c, compiled without
 * FMA contraction (Makefile: --fmad=false) so that pointwise results match
 * the CPU's wherever the math library does (relu, add, mul, scale, dropout
 * bit for bit; tanh/erf/exp within an ulp or two). The dropout mask is the
 * CPU's (delta_dropout_key + delta_rng_uniform from core/rng.h, compiled
 * for both), so forward, backward and recomputation draw the same bits.
 * All but sum and broadcast (F32 only) are templated on the element type:
 * F32 or BF16 (cu_common.cuh). */
#include "backend/cuda/cu_common.cuh"
#include "core/rng.h"

#define GELU_C 0.7978845608028654f
#define GELU_K 0.044715f
#define GELU_RSQRT2 0.7071067811865476f
#define GELU_RSQRT2PI 0.3989422804014327f

/* Each kernel on T elements (cu_common.cuh: float for F32, uint16_t for
 * BF16, computed in fp32). */
template <typename T>
__global__ static void relu_k(const T *x, T *y, int64_t n) {
    CU_FOR(i, n) {
        float v = cu_ld(x, i);
        cu_st(y, i, v < 0.0f ? 0.0f : v);
    }
}
template <typename T>
__global__ static void relu_bwd_k(const T *y, const T *dy, T *dx, int64_t n) {
    CU_FOR(i, n) cu_st(dx, i, cu_ld(y, i) > 0.0f ? cu_ld(dy, i) : 0.0f);
}
template <typename T>
__global__ static void gelu_k(const T *x, T *y, int64_t n, int erf_form) {
    CU_FOR(i, n) {
        float v = cu_ld(x, i);
        if (erf_form) {
            cu_st(y, i, 0.5f * v * (1.0f + erff(v * GELU_RSQRT2)));
        } else {
            float u = GELU_C * (v + GELU_K * v * v * v);
            cu_st(y, i, 0.5f * v * (1.0f + tanhf(u)));
        }
    }
}
template <typename T>
__global__ static void gelu_bwd_k(const T *x, const T *dy, T *dx, int64_t n,
                                  int erf_form) {
    CU_FOR(i, n) {
        float v = cu_ld(x, i);
        if (erf_form) {
            float cdf = 0.5f * (1.0f + erff(v * GELU_RSQRT2));
            float pdf = GELU_RSQRT2PI * expf(-0.5f * v * v);
            cu_st(dx, i, cu_ld(dy, i) * (cdf + v * pdf));
        } else {
            float t = tanhf(GELU_C * (v + GELU_K * v * v * v));
            float du = GELU_C * (1.0f + 3.0f * GELU_K * v * v);
            float d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
            cu_st(dx, i, cu_ld(dy, i) * d);
        }
    }
}
template <typename T>
__global__ static void add_k(const T *a, const T *b, T *y, int64_t n,
                             int64_t bn) {
    CU_FOR(i, n) cu_st(y, i, cu_ld(a, i) + cu_ld(b, bn == n ? i : i % bn));
}
template <typename T>
__global__ static void mul_k(const T *a, const T *b, T *y, int64_t n) {
    CU_FOR(i, n) cu_st(y, i, cu_ld(a, i) * cu_ld(b, i));
}
template <typename T>
__global__ static void scale_k(const T *x, T *y, float s, int64_t n) {
    CU_FOR(i, n) cu_st(y, i, s * cu_ld(x, i));
}
template <typename T> __global__ static void fill_k(T *y, float v, int64_t n) {
    CU_FOR(i, n) cu_st(y, i, v);
}
__global__ static void broadcast_k(const float *v, float *y, int64_t n) {
    CU_FOR(i, n) y[i] = v[0];
}
template <typename T>
__global__ static void dropout_k(const T *x, T *y, int64_t n, uint64_t key,
                                 float p) {
    float q = 1.0f - p;
    CU_FOR(i, n)
        cu_st(y, i, delta_rng_uniform(key, (uint64_t)i) >= p ? cu_ld(x, i) / q
                                                             : 0.0f);
}

/* The CPU's sum exactly (k_eltwise.c): SUM_CHUNKS element ranges, each summed by
 * SUM_LANES interleaved double accumulators (lane l takes elements lo + l,
 * lo + l + 8, ...), a range's lanes added pairwise, the ranges in order.
 * Each of the 2,048 lane chains is a thread here (the first kernel), so a
 * warp's loads fall on 4 runs of 8 neighbouring floats, and each thread
 * keeps SUM_AHEAD loads in flight before adding them in order; the second
 * kernel adds up as the CPU does. One thread per range, as before, read
 * 7.6 GB/s on an H200 (one block; each thread striding its own range), and
 * the calibration's reduction curve came from it. */
#define SUM_CHUNKS 256
#define SUM_LANES 8
#define SUM_CHAINS (SUM_CHUNKS * SUM_LANES)
#define SUM_AHEAD 16
__global__ static void sum_chains_k(const float *x, double *chain,
                                    int64_t n) {
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= SUM_CHAINS) return;
    int c = t / SUM_LANES, l = t % SUM_LANES;
    int64_t lo = n * c / SUM_CHUNKS, hi = n * (c + 1) / SUM_CHUNKS;
    int64_t i = lo + l;
    double acc = 0.0;
    for (; i + (SUM_AHEAD - 1) * SUM_LANES < hi; i += SUM_AHEAD * SUM_LANES) {
        float v[SUM_AHEAD];
#pragma unroll
        for (int u = 0; u < SUM_AHEAD; u++) v[u] = x[i + u * SUM_LANES];
#pragma unroll
        for (int u = 0; u < SUM_AHEAD; u++) acc += (double)v[u];
    }
    for (; i < hi; i += SUM_LANES) acc += (double)x[i];
    chain[t] = acc;
}

__global__ static void sum_ranges_k(const double *chain, float *y) {
    __shared__ double part[SUM_CHUNKS];
    int c = threadIdx.x;
    const double *a = &chain[c * SUM_LANES];
    part[c] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    __syncthreads();
    if (c == 0) {
        double s = 0.0;
        for (int j = 0; j < SUM_CHUNKS; j++) s += part[j];
        y[0] = (float)s;
    }
}

static int64_t numel_out(const delta_kargs *k) { return k->out_t[0]->numel; }

/* The launches below take T, the element type of the op's tensors, from
 * its output's dtype (an op's float operands share one dtype). */
#define BY_DTYPE(k, ...) CU_WITH_T((k)->out_t[0], (k)->op, __VA_ARGS__)

void delta_cu_relu(const delta_cuda_kctx *c, const delta_kargs *k) {
    BY_DTYPE(k, CU_LAUNCH(relu_k<T>, c, numel_out(k), (const T *)k->in[0],
                          (T *)k->out[0], numel_out(k)));
}
void delta_cu_relu_bwd(const delta_cuda_kctx *c, const delta_kargs *k) {
    BY_DTYPE(k, CU_LAUNCH(relu_bwd_k<T>, c, numel_out(k), (const T *)k->in[0],
                          (const T *)k->in[1], (T *)k->out[0], numel_out(k)));
}
void delta_cu_gelu(const delta_cuda_kctx *c, const delta_kargs *k) {
    BY_DTYPE(k, CU_LAUNCH(gelu_k<T>, c, numel_out(k), (const T *)k->in[0],
                          (T *)k->out[0], numel_out(k), k->op->a.gelu_erf));
}
void delta_cu_gelu_bwd(const delta_cuda_kctx *c, const delta_kargs *k) {
    BY_DTYPE(k, CU_LAUNCH(gelu_bwd_k<T>, c, numel_out(k), (const T *)k->in[0],
                          (const T *)k->in[1], (T *)k->out[0], numel_out(k),
                          k->op->a.gelu_erf));
}
void delta_cu_add(const delta_cuda_kctx *c, const delta_kargs *k) {
    int64_t n = numel_out(k), bn = k->in_t[1]->numel;
    if (bn == 0) return;
    BY_DTYPE(k, CU_LAUNCH(add_k<T>, c, n, (const T *)k->in[0],
                          (const T *)k->in[1], (T *)k->out[0], n, bn));
}
void delta_cu_mul(const delta_cuda_kctx *c, const delta_kargs *k) {
    BY_DTYPE(k, CU_LAUNCH(mul_k<T>, c, numel_out(k), (const T *)k->in[0],
                          (const T *)k->in[1], (T *)k->out[0], numel_out(k)));
}
void delta_cu_scale(const delta_cuda_kctx *c, const delta_kargs *k) {
    BY_DTYPE(k, CU_LAUNCH(scale_k<T>, c, numel_out(k), (const T *)k->in[0],
                          (T *)k->out[0], k->op->a.value, numel_out(k)));
}
/* The chains' sums go to the backend's scratch (16 KiB of its 1 MiB). */
void delta_cu_sum(const delta_cuda_kctx *c, const delta_kargs *k) {
    DELTA_ASSERT(c->scratch_bytes >= SUM_CHAINS * sizeof(double));
    double *chain = (double *)c->scratch;
    sum_chains_k<<<SUM_CHAINS / 128, 128, 0, c->stream>>>(
        (const float *)k->in[0], chain, k->in_t[0]->numel);
    sum_ranges_k<<<1, SUM_CHUNKS, 0, c->stream>>>(chain, (float *)k->out[0]);
}
void delta_cu_fill(const delta_cuda_kctx *c, const delta_kargs *k) {
    BY_DTYPE(k, CU_LAUNCH(fill_k<T>, c, numel_out(k), (T *)k->out[0],
                          k->op->a.value, numel_out(k)));
}
void delta_cu_broadcast(const delta_cuda_kctx *c, const delta_kargs *k) {
    CU_LAUNCH(broadcast_k, c, numel_out(k), (const float *)k->in[0],
              (float *)k->out[0], numel_out(k));
}

static void dropout_apply(const delta_cuda_kctx *c, const delta_kargs *k,
                          int op_id) {
    int64_t n = numel_out(k);
    if (!k->env->training) { /* a copy, of either dtype */
        if (k->out[0] != k->in[0] && n)
            cudaMemcpyAsync(k->out[0], k->in[0],
                            (size_t)n * delta_dtype_size(k->out_t[0]->dtype),
                            cudaMemcpyDeviceToDevice, c->stream);
        return;
    }
    uint64_t key = delta_dropout_key(k->env->seed, op_id, k->env->step);
    BY_DTYPE(k, CU_LAUNCH(dropout_k<T>, c, n, (const T *)k->in[0],
                          (T *)k->out[0], n, key, k->op->a.p));
}
void delta_cu_dropout(const delta_cuda_kctx *c, const delta_kargs *k) {
    dropout_apply(c, k, delta_dropout_key_op(k->op));
}
void delta_cu_dropout_bwd(const delta_cuda_kctx *c, const delta_kargs *k) {
    DELTA_ASSERTF(k->op->a.fwd_op >= 0, "dropout_bwd op %d has no forward op",
                  k->op->id);
    dropout_apply(c, k, k->op->a.fwd_op);
}
