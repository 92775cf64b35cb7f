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

/* The CPU's split exactly (k_eltwise.c): SUM_CHUNKS element ranges, each
 * summed by one thread in SUM_LANES interleaved double lanes, the partials
 * added in order by thread 0. Bit-identical to the CPU; one block, so slow
 * on huge tensors (sum is only used on losses). */
#define SUM_CHUNKS 256
#define SUM_LANES 8
__global__ static void sum_k(const float *x, float *y, int64_t n) {
    __shared__ double part[SUM_CHUNKS];
    int c = threadIdx.x;
    int64_t lo = n * c / SUM_CHUNKS, hi = n * (c + 1) / SUM_CHUNKS;
    double acc[SUM_LANES] = {0};
    int64_t i = lo;
    for (; i + SUM_LANES <= hi; i += SUM_LANES)
        for (int l = 0; l < SUM_LANES; l++) acc[l] += (double)x[i + l];
    for (int l = 0; i < hi; i++, l++) acc[l] += (double)x[i];
    part[c] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
              ((acc[4] + acc[5]) + (acc[6] + acc[7]));
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
void delta_cu_sum(const delta_cuda_kctx *c, const delta_kargs *k) {
    sum_k<<<1, SUM_CHUNKS, 0, c->stream>>>((const float *)k->in[0],
                                           (float *)k->out[0],
                                           k->in_t[0]->numel);
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
