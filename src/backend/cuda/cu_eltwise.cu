/* Elementwise kernels on the GPU: activations and their gradients, add
 * (trailing-dims broadcast), mul, scale, fill, broadcast, dropout and the
 * full sum. Same formulas as src/backend/cpu/k_eltwise.c, compiled without
 * FMA contraction (Makefile: --fmad=false) so that pointwise results match
 * the CPU's wherever the math library does (relu, add, mul, scale, dropout
 * bit for bit; tanh/erf/exp within an ulp or two). The dropout mask is the
 * CPU's (delta_dropout_key + delta_rng_uniform from core/rng.h, compiled
 * for both), so forward, backward and recomputation draw the same bits. */
#include "backend/cuda/cu_common.cuh"
#include "core/rng.h"

#define GELU_C 0.7978845608028654f
#define GELU_K 0.044715f
#define GELU_RSQRT2 0.7071067811865476f
#define GELU_RSQRT2PI 0.3989422804014327f

__global__ static void relu_k(const float *x, float *y, int64_t n) {
    CU_FOR(i, n) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}
__global__ static void relu_bwd_k(const float *y, const float *dy, float *dx,
                                  int64_t n) {
    CU_FOR(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}
__global__ static void gelu_k(const float *x, float *y, int64_t n, int erf_form) {
    CU_FOR(i, n) {
        float v = x[i];
        if (erf_form) {
            y[i] = 0.5f * v * (1.0f + erff(v * GELU_RSQRT2));
        } else {
            float u = GELU_C * (v + GELU_K * v * v * v);
            y[i] = 0.5f * v * (1.0f + tanhf(u));
        }
    }
}
__global__ static void gelu_bwd_k(const float *x, const float *dy, float *dx,
                                  int64_t n, int erf_form) {
    CU_FOR(i, n) {
        float v = x[i];
        if (erf_form) {
            float cdf = 0.5f * (1.0f + erff(v * GELU_RSQRT2));
            float pdf = GELU_RSQRT2PI * expf(-0.5f * v * v);
            dx[i] = dy[i] * (cdf + v * pdf);
        } else {
            float t = tanhf(GELU_C * (v + GELU_K * v * v * v));
            float du = GELU_C * (1.0f + 3.0f * GELU_K * v * v);
            float d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
            dx[i] = dy[i] * d;
        }
    }
}
__global__ static void add_k(const float *a, const float *b, float *y,
                             int64_t n, int64_t bn) {
    CU_FOR(i, n) y[i] = a[i] + b[bn == n ? i : i % bn];
}
__global__ static void mul_k(const float *a, const float *b, float *y,
                             int64_t n) {
    CU_FOR(i, n) y[i] = a[i] * b[i];
}
__global__ static void scale_k(const float *x, float *y, float s, int64_t n) {
    CU_FOR(i, n) y[i] = s * x[i];
}
__global__ static void fill_k(float *y, float v, int64_t n) {
    CU_FOR(i, n) y[i] = v;
}
__global__ static void broadcast_k(const float *v, float *y, int64_t n) {
    CU_FOR(i, n) y[i] = v[0];
}
__global__ static void dropout_k(const float *x, float *y, int64_t n,
                                 uint64_t key, float p) {
    float q = 1.0f - p;
    CU_FOR(i, n) y[i] = delta_rng_uniform(key, (uint64_t)i) >= p ? x[i] / q : 0.0f;
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

void delta_cu_relu(const delta_cuda_kctx *c, const delta_kargs *k) {
    CU_LAUNCH(relu_k, c, numel_out(k), (const float *)k->in[0],
              (float *)k->out[0], numel_out(k));
}
void delta_cu_relu_bwd(const delta_cuda_kctx *c, const delta_kargs *k) {
    CU_LAUNCH(relu_bwd_k, c, numel_out(k), (const float *)k->in[0],
              (const float *)k->in[1], (float *)k->out[0], numel_out(k));
}
void delta_cu_gelu(const delta_cuda_kctx *c, const delta_kargs *k) {
    CU_LAUNCH(gelu_k, c, numel_out(k), (const float *)k->in[0],
              (float *)k->out[0], numel_out(k), k->op->a.gelu_erf);
}
void delta_cu_gelu_bwd(const delta_cuda_kctx *c, const delta_kargs *k) {
    CU_LAUNCH(gelu_bwd_k, c, numel_out(k), (const float *)k->in[0],
              (const float *)k->in[1], (float *)k->out[0], numel_out(k),
              k->op->a.gelu_erf);
}
void delta_cu_add(const delta_cuda_kctx *c, const delta_kargs *k) {
    int64_t n = numel_out(k), bn = k->in_t[1]->numel;
    if (bn == 0) return;
    CU_LAUNCH(add_k, c, n, (const float *)k->in[0], (const float *)k->in[1],
              (float *)k->out[0], n, bn);
}
void delta_cu_mul(const delta_cuda_kctx *c, const delta_kargs *k) {
    CU_LAUNCH(mul_k, c, numel_out(k), (const float *)k->in[0],
              (const float *)k->in[1], (float *)k->out[0], numel_out(k));
}
void delta_cu_scale(const delta_cuda_kctx *c, const delta_kargs *k) {
    CU_LAUNCH(scale_k, c, numel_out(k), (const float *)k->in[0],
              (float *)k->out[0], k->op->a.value, numel_out(k));
}
void delta_cu_sum(const delta_cuda_kctx *c, const delta_kargs *k) {
    sum_k<<<1, SUM_CHUNKS, 0, c->stream>>>((const float *)k->in[0],
                                           (float *)k->out[0],
                                           k->in_t[0]->numel);
}
void delta_cu_fill(const delta_cuda_kctx *c, const delta_kargs *k) {
    CU_LAUNCH(fill_k, c, numel_out(k), (float *)k->out[0], k->op->a.value,
              numel_out(k));
}
void delta_cu_broadcast(const delta_cuda_kctx *c, const delta_kargs *k) {
    CU_LAUNCH(broadcast_k, c, numel_out(k), (const float *)k->in[0],
              (float *)k->out[0], numel_out(k));
}

static void dropout_apply(const delta_cuda_kctx *c, const delta_kargs *k,
                          int op_id) {
    int64_t n = numel_out(k);
    const float *x = (const float *)k->in[0];
    float *y = (float *)k->out[0];
    if (!k->env->training) {
        if (y != x && n)
            cudaMemcpyAsync(y, x, (size_t)n * sizeof(float),
                            cudaMemcpyDeviceToDevice, c->stream);
        return;
    }
    uint64_t key = delta_dropout_key(k->env->seed, op_id, k->env->step);
    CU_LAUNCH(dropout_k, c, n, x, y, n, key, k->op->a.p);
}
void delta_cu_dropout(const delta_cuda_kctx *c, const delta_kargs *k) {
    dropout_apply(c, k, delta_dropout_key_op(k->op));
}
void delta_cu_dropout_bwd(const delta_cuda_kctx *c, const delta_kargs *k) {
    DELTA_ASSERTF(k->op->a.fwd_op >= 0, "dropout_bwd op %d has no forward op",
                  k->op->id);
    dropout_apply(c, k, k->op->a.fwd_op);
}
