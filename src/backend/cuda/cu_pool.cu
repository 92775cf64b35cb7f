/* Pooling on the GPU: max and average pooling, global average pooling and
 * their gradients (semantics: src/backend/cpu/k_pool.c). Forward kernels
 * give each output one thread that scans its window in the CPU's order
 * (row-major; max: the first maximum, a NaN beating numbers). The
 * gradients are gathers: each input element's thread adds the outputs
 * whose window holds it, in the CPU's (p, q) row-major order, so every
 * kernel here is bit-identical to the CPU's, with no atomics. Each is
 * templated on the element type, F32 or BF16 (cu_common.cuh). */
#include "backend/cuda/cu_common.cuh"
#include "backend/kernel_shapes.h"

/* Index in the plane of the max of output (p, q)'s window (the CPU's
 * max_row rule), its value in *best. */
template <typename T>
__device__ static int64_t window_argmax(const pool_geom g, const T *xp,
                                        int64_t p, int64_t q, float *best) {
    int64_t hs = p * g.stride - g.pad, ws = q * g.stride - g.pad;
    int64_t h0 = hs < 0 ? 0 : hs, h1 = hs + g.k < g.h ? hs + g.k : g.h;
    int64_t w0 = ws < 0 ? 0 : ws, w1 = ws + g.k < g.w ? ws + g.k : g.w;
    float bv = -INFINITY;
    int64_t bi = h0 * g.w + w0;
    for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++) {
            float v = cu_ld(xp, h * g.w + w);
            if (v > bv || (v != v && bv == bv)) {
                bv = v;
                bi = h * g.w + w;
            }
        }
    *best = bv;
    return bi;
}

template <typename T>
__global__ static void maxpool_k(const T *x, T *y, pool_geom g) {
    CU_FOR(o, g.planes * g.p * g.q) {
        int64_t pl = o / (g.p * g.q), r = o % (g.p * g.q);
        float b;
        window_argmax(g, x + pl * g.h * g.w, r / g.q, r % g.q, &b);
        cu_st(y, o, b);
    }
}

/* Outputs whose window covers input row h: [*lo, *hi). */
__device__ static inline void covering(int64_t h, int64_t n_out, int k,
                                       int stride, int pad, int64_t *lo,
                                       int64_t *hi) {
    /* p*stride - pad <= h < p*stride - pad + k */
    int64_t a = h + pad - k + 1;
    a = a <= 0 ? 0 : (a + stride - 1) / stride;
    int64_t b = (h + pad) / stride + 1;
    if (b > n_out) b = n_out;
    *lo = a;
    *hi = b > a ? b : a;
}

/* The gradient of max pooling, one plane per grid row (blockIdx.y steps
 * over planes) and its elements across blockIdx.x: the plane's offset is
 * the only 64-bit product, every index inside a plane is 32-bit (a plane
 * has fewer than 2^31 elements; checked at the launch), so the argmax
 * searches of the up to four windows covering an element cost no 64-bit
 * divisions (3.3 ms for ResNet-50's one maxpool at batch 64 on an H200
 * with them). */
template <typename T>
__device__ static int window_argmax32(const T *xp, int H, int W, int k,
                                      int stride, int pad, int p, int q) {
    int hs = p * stride - pad, ws = q * stride - pad;
    int h0 = hs < 0 ? 0 : hs, h1 = hs + k < H ? hs + k : H;
    int w0 = ws < 0 ? 0 : ws, w1 = ws + k < W ? ws + k : W;
    float bv = -INFINITY;
    int bi = h0 * W + w0;
    for (int h = h0; h < h1; h++)
        for (int w = w0; w < w1; w++) {
            float v = cu_ld(xp, h * W + w);
            if (v > bv || (v != v && bv == bv)) {
                bv = v;
                bi = h * W + w;
            }
        }
    return bi;
}

/* Outputs whose window covers input row h: [*lo, *hi) (32-bit). */
__device__ static inline void covering32(int h, int n_out, int k, int stride,
                                         int pad, int *lo, int *hi) {
    int a = h + pad - k + 1;
    a = a <= 0 ? 0 : (a + stride - 1) / stride;
    int b = (h + pad) / stride + 1;
    if (b > n_out) b = n_out;
    *lo = a;
    *hi = b > a ? b : a;
}

template <typename T>
__global__ static void maxpool_bwd_k(const T *x, const T *dy, T *dx,
                                     pool_geom g) {
    const int H = (int)g.h, W = (int)g.w, P = (int)g.p, Q = (int)g.q;
    const int hw = H * W;
    for (int64_t pl = blockIdx.y; pl < g.planes; pl += gridDim.y) {
        const T *xp = x + pl * hw;
        const T *dyp = dy + pl * (int64_t)P * Q;
        T *dxp = dx + pl * hw;
        for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < hw;
             i += blockDim.x * gridDim.x) {
            int h = i / W, w = i - (i / W) * W;
            int p0, p1, q0, q1;
            covering32(h, P, g.k, g.stride, g.pad, &p0, &p1);
            covering32(w, Q, g.k, g.stride, g.pad, &q0, &q1);
            float acc = 0.0f;
            for (int p = p0; p < p1; p++)
                for (int q = q0; q < q1; q++)
                    if (window_argmax32(xp, H, W, g.k, g.stride, g.pad, p,
                                        q) == i)
                        acc += cu_ld(dyp, p * Q + q);
            cu_st(dxp, i, acc);
        }
    }
}

template <typename T>
__global__ static void avgpool_k(const T *x, T *y, pool_geom g) {
    const float inv = 1.0f / (float)(g.k * g.k);
    CU_FOR(o, g.planes * g.p * g.q) {
        int64_t pl = o / (g.p * g.q), r = o % (g.p * g.q);
        int64_t hs = (r / g.q) * g.stride - g.pad;
        int64_t ws = (r % g.q) * g.stride - g.pad;
        int64_t h0 = hs < 0 ? 0 : hs, h1 = hs + g.k < g.h ? hs + g.k : g.h;
        int64_t w0 = ws < 0 ? 0 : ws, w1 = ws + g.k < g.w ? ws + g.k : g.w;
        const T *xp = x + pl * g.h * g.w;
        float s = 0.0f;
        for (int64_t h = h0; h < h1; h++)
            for (int64_t w = w0; w < w1; w++) s += cu_ld(xp, h * g.w + w);
        cu_st(y, o, s * inv);
    }
}

template <typename T>
__global__ static void avgpool_bwd_k(const T *dy, T *dx, pool_geom g) {
    const float inv = 1.0f / (float)(g.k * g.k);
    CU_FOR(e, g.planes * g.h * g.w) {
        int64_t pl = e / (g.h * g.w), i = e % (g.h * g.w);
        int64_t p0, p1, q0, q1;
        covering(i / g.w, g.p, g.k, g.stride, g.pad, &p0, &p1);
        covering(i % g.w, g.q, g.k, g.stride, g.pad, &q0, &q1);
        const T *dyp = dy + pl * g.p * g.q;
        float acc = 0.0f;
        for (int64_t p = p0; p < p1; p++)
            for (int64_t q = q0; q < q1; q++)
                acc += cu_ld(dyp, p * g.q + q) * inv;
        cu_st(dx, e, acc);
    }
}

void delta_cu_maxpool2d(const delta_cuda_kctx *c, const delta_kargs *k) {
    pool_geom g = pool_geom_of(k->op, k->in_t[0], k->out_t[0]);
    CU_WITH_T(k->out_t[0], k->op,
              CU_LAUNCH(maxpool_k<T>, c, g.planes * g.p * g.q,
                        (const T *)k->in[0], (T *)k->out[0], g));
}
void delta_cu_maxpool2d_bwd(const delta_cuda_kctx *c, const delta_kargs *k) {
    pool_geom g = pool_geom_of(k->op, k->in_t[0], k->in_t[1]);
    const int64_t hw = g.h * g.w;
    if (g.planes == 0 || hw == 0) return;
    DELTA_ASSERTF(hw < ((int64_t)1 << 31) && g.p * g.q < ((int64_t)1 << 31),
                  "maxpool2d_bwd: a plane of %lld elements",
                  (long long)hw);
    dim3 grid((unsigned)((hw + CU_THREADS - 1) / CU_THREADS),
              (unsigned)(g.planes < CU_MAX_BLOCKS ? g.planes : CU_MAX_BLOCKS));
    CU_WITH_T(k->out_t[0], k->op,
              maxpool_bwd_k<T><<<grid, CU_THREADS, 0, c->stream>>>(
                  (const T *)k->in[0], (const T *)k->in[1], (T *)k->out[0],
                  g));
}
void delta_cu_avgpool2d(const delta_cuda_kctx *c, const delta_kargs *k) {
    pool_geom g = pool_geom_of(k->op, k->in_t[0], k->out_t[0]);
    CU_WITH_T(k->out_t[0], k->op,
              CU_LAUNCH(avgpool_k<T>, c, g.planes * g.p * g.q,
                        (const T *)k->in[0], (T *)k->out[0], g));
}
void delta_cu_avgpool2d_bwd(const delta_cuda_kctx *c, const delta_kargs *k) {
    pool_geom g = pool_geom_of(k->op, k->out_t[0], k->in_t[0]);
    CU_WITH_T(k->out_t[0], k->op,
              CU_LAUNCH(avgpool_bwd_k<T>, c, g.planes * g.h * g.w,
                        (const T *)k->in[0], (T *)k->out[0], g));
}

/* A plane's mean as the CPU computes it: delta_plane_mean for F32 (the
 * same code), and for BF16 its sum (delta_run_sum's four double lanes, in
 * its order) of the widened elements. */
__device__ static inline float plane_mean(const float *xp, int64_t hw,
                                          double inv) {
    return delta_plane_mean(xp, hw, inv);
}
__device__ static inline float plane_mean(const uint16_t *xp, int64_t hw,
                                          double inv) {
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int64_t i = 0;
    for (; i + 4 <= hw; i += 4) {
        a0 += cu_ld(xp, i);
        a1 += cu_ld(xp, i + 1);
        a2 += cu_ld(xp, i + 2);
        a3 += cu_ld(xp, i + 3);
    }
    for (; i < hw; i++) a0 += cu_ld(xp, i);
    return (float)(((a0 + a1) + (a2 + a3)) * inv);
}

/* One thread per plane, summed as the CPU does. */
template <typename T>
__global__ static void gap_k(const T *x, T *y, int64_t planes, int64_t hw,
                             double inv) {
    CU_FOR(pl, planes) cu_st(y, pl, plane_mean(x + pl * hw, hw, inv));
}

template <typename T>
__global__ static void gap_bwd_k(const T *dy, T *dx, int64_t planes,
                                 int64_t hw) {
    CU_FOR(e, planes * hw)
        cu_st(dx, e, (float)(cu_ld(dy, e / hw) / (double)hw));
}

void delta_cu_global_avgpool(const delta_cuda_kctx *c, const delta_kargs *k) {
    const delta_tensor *xt = k->in_t[0];
    int64_t planes = xt->shape[0] * xt->shape[1];
    int64_t hw = xt->shape[2] * xt->shape[3];
    CU_WITH_T(k->out_t[0], k->op,
              CU_LAUNCH(gap_k<T>, c, planes, (const T *)k->in[0],
                        (T *)k->out[0], planes, hw,
                        hw > 0 ? 1.0 / (double)hw : 0.0));
}

void delta_cu_global_avgpool_bwd(const delta_cuda_kctx *c,
                                 const delta_kargs *k) {
    const delta_tensor *t = k->out_t[0];
    int64_t planes = t->shape[0] * t->shape[1];
    int64_t hw = t->shape[2] * t->shape[3];
    if (hw == 0) return;
    CU_WITH_T(k->out_t[0], k->op,
              CU_LAUNCH(gap_bwd_k<T>, c, planes * hw, (const T *)k->in[0],
                        (T *)k->out[0], planes, hw));
}
