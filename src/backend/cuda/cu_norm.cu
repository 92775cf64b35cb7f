/* Normalization on the GPU: batch norm (training and eval), its gradient
 * and running-statistics update, the fused batch norm + ReLU and batch
 * norm + add + ReLU; layer norm and its gradient. The formulas are those
 * of src/backend/cpu/k_norm.c; every reduction is in double and in an
 * order fixed by the shape alone, so a run is reproducible bit for bit on
 * any GPU. The order differs from the CPU's, so results agree with it to
 * rounding. Batch norm, its fused forms and layer norm take x, r and dy
 * and give y and dx in F32 or BF16 (one templated body, cu_common.cuh);
 * parameters, statistics and their gradients are F32.
 *
 * Batch norm is memory-bound: it streams x (and dy) two or three times and
 * does a few flops per element. Channel c's count = N·hw elements are cut
 * into chunks of a length that depends only on count (bn_split_of), and
 * each op is three launches: a block per (channel, chunk) reduces its
 * chunk into the backend's scratch buffer (forward: the chunk's mean and
 * sum of squared deviations M2, in double, from sums shifted by the
 * chunk's first element; backward: Σdy and Σdy(x - mean)); one thread per
 * channel merges its chunks in chunk order (forward: Chan's pairwise
 * formula) and turns the statistics into per-channel coefficients; a block
 * per (channel, chunk) again writes y or dx (the fused forms add r and
 * apply relu there with cu_eltwise.cu's float operations, rounding to BF16
 * where the unfused ops store, so they give the unfused chain's bits).
 * Blocks walk their chunk with 32-bit indices (64-bit when the tensor has
 * 2^31 elements or more), a thread taking four consecutive elements at a
 * time when the plane size is a multiple of 4 (one float4 access when
 * aligned), else one, with BN_UNROLL steps' loads in flight; the walk steps
 * its (image, offset) position by additions, no division per element. Layer norm: a block per row; its dgamma/dbeta: a
 * fixed column-block / row-lane split. */
#include "backend/cuda/cu_common.cuh"
#include "backend/kernel_shapes.h"

#include <math.h>
#include <stdint.h>

#define NORM_THREADS 256

/* ---- batch norm ----------------------------------------------------------
 * x (N, C, H, W) or (N, C): channel c is N runs of hw floats at stride
 * C·hw; element e (0 <= e < count = N·hw) of channel c is at
 * (e / hw · C + c) · hw + e % hw. */

#define BN_THREADS 256
#define BN_UNROLL 4        /* loads in flight per thread and operand */
#define BN_CHUNK 8192      /* elements a chunk aims at */
#define BN_MAX_CHUNKS 256  /* chunks per channel at most */

/* How each channel is cut: p chunks of len elements (the last one may be
 * shorter, none is empty), from count alone: the same shape gives the same
 * partition, hence the same bits, on any GPU and at any channel count. len
 * is a multiple of 4, so with v == 4 (hw % 4 == 0) a thread's four
 * consecutive elements never straddle a chunk or a plane. */
typedef struct bn_split {
    int64_t count, len, p;
    int v; /* elements a thread takes at a time: 4, or 1 when hw % 4 != 0 */
} bn_split;

static bn_split bn_split_of(const bn_shape *s) {
    bn_split r = {s->n * s->hw, 0, 0, s->hw % 4 == 0 ? 4 : 1};
    if (r.count <= 0) return r;
    int64_t p = (r.count + BN_CHUNK - 1) / BN_CHUNK;
    if (p > BN_MAX_CHUNKS) p = BN_MAX_CHUNKS;
    r.len = ((r.count + p - 1) / p + 3) / 4 * 4;
    r.p = (r.count + r.len - 1) / r.len;
    return r;
}

/* What the per-(channel, chunk) kernels know: I is uint32_t, or uint64_t
 * for tensors of 2^31 elements or more; V is bn_split's v. Block b of a launch covers chunk
 * b % p of channel c0 + b / p; its per-channel values (partials, then
 * coefficients) are at index b / p of the launch's scratch. */
template <typename I, int V> struct bn_geo {
    I c, hw, count, len, p, c0;
    bool vec; /* float4 loads and stores (v == 4, pointers 16-byte aligned) */
};

/* A thread's position (image n, offset i) in its channel, stepped by a
 * fixed stride without dividing. */
template <typename I> struct bn_cursor {
    I n, i, sn, si, hw, cstride, c;
    template <int V>
    __device__ bn_cursor(I e, I step, const bn_geo<I, V> &g, I ch)
        : n(e / g.hw), i(e % g.hw), sn(step / g.hw), si(step % g.hw),
          hw(g.hw), cstride(g.c), c(ch) {}
    __device__ I off() const { return (n * cstride + c) * hw + i; }
    __device__ void next() {
        i += si;
        n += sn;
        if (i >= hw) {
            i -= hw;
            n++;
        }
    }
};

/* Four consecutive elements in one access (p aligned to four elements:
 * float4 for F32, uint2 for BF16, element 0 in the low half). */
__device__ static inline void bn_ld4(const float *p, float *o) {
    float4 q = *reinterpret_cast<const float4 *>(p);
    o[0] = q.x;
    o[1] = q.y;
    o[2] = q.z;
    o[3] = q.w;
}
__device__ static inline void bn_ld4(const uint16_t *p, float *o) {
    uint2 q = *reinterpret_cast<const uint2 *>(p);
    o[0] = delta_bf16_to_f32((uint16_t)(q.x & 0xFFFFu));
    o[1] = delta_bf16_to_f32((uint16_t)(q.x >> 16));
    o[2] = delta_bf16_to_f32((uint16_t)(q.y & 0xFFFFu));
    o[3] = delta_bf16_to_f32((uint16_t)(q.y >> 16));
}
__device__ static inline void bn_st4(float *p, const float *o) {
    *reinterpret_cast<float4 *>(p) = make_float4(o[0], o[1], o[2], o[3]);
}
__device__ static inline void bn_st4(uint16_t *p, const float *o) {
    uint2 q;
    q.x = (uint32_t)delta_f32_to_bf16(o[0]) |
          (uint32_t)delta_f32_to_bf16(o[1]) << 16;
    q.y = (uint32_t)delta_f32_to_bf16(o[2]) |
          (uint32_t)delta_f32_to_bf16(o[3]) << 16;
    *reinterpret_cast<uint2 *>(p) = q;
}

/* V elements of type T (F32 or BF16) from p as floats, and back. */
template <int V, typename T>
__device__ static inline void bn_ld(const T *p, bool vec, float *o) {
    if constexpr (V == 4) {
        if (vec) {
            bn_ld4(p, o);
            return;
        }
    }
#pragma unroll
    for (int j = 0; j < V; j++) o[j] = cu_ld(p, j);
}

template <int V, typename T>
__device__ static inline void bn_st(T *p, bool vec, const float *o) {
    if constexpr (V == 4) {
        if (vec) {
            bn_st4(p, o);
            return;
        }
    }
#pragma unroll
    for (int j = 0; j < V; j++) cu_st(p, j, o[j]);
}

/* This block's channel (global and within the launch) and chunk [e0, e1). */
template <typename I> struct bn_block {
    I cl, c, e0, e1;
    template <int V> __device__ explicit bn_block(const bn_geo<I, V> &g) {
        const I b = blockIdx.x;
        cl = b / g.p;
        c = g.c0 + cl;
        e0 = (b - cl * g.p) * g.len;
        e1 = e0 + g.len < g.count ? e0 + g.len : g.count;
    }
};

/* This thread's part of the block's chunk, in order: thread t takes V
 * elements at e0 + t·V + k·BN_THREADS·V, k = 0, 1, ... For BN_UNROLL steps
 * at a time it loads the V elements of each of the first NIN operands
 * src[s] at every step (all loads in flight together), then calls f(off, v)
 * per step in order: off the step's element offset, v[s][j] the values (f
 * may overwrite them, e.g. to store them). */
template <int NIN, typename I, int V, typename T, typename F>
__device__ static inline void bn_walk(const bn_geo<I, V> &g,
                                      const bn_block<I> &bk,
                                      const T *const *src, F &&f) {
    const I step = (I)BN_THREADS * V;
    I e = bk.e0 + (I)threadIdx.x * V;
    if (e >= bk.e1) return;
    bn_cursor<I> cur(e, step, g, bk.c);
    for (; e < bk.e1; e += (I)BN_UNROLL * step) {
        I off[BN_UNROLL];
        bool in[BN_UNROLL];
        float v[BN_UNROLL][NIN][V];
#pragma unroll
        for (int u = 0; u < BN_UNROLL; u++) {
            in[u] = e + (I)u * step < bk.e1;
            off[u] = cur.off();
            cur.next();
            if (in[u])
#pragma unroll
                for (int s = 0; s < NIN; s++)
                    bn_ld<V>(src[s] + off[u], g.vec, v[u][s]);
        }
#pragma unroll
        for (int u = 0; u < BN_UNROLL; u++)
            if (in[u]) f(off[u], v[u]);
    }
}

/* Forward partials: the chunk's mean and M2 = Σ (x - mean)², from sums of
 * d = x - x[e0] (shifted by a value of the chunk, the sums lose nothing
 * that matters in double; M2 is clamped at 0 against rounding). */
template <typename I, int V, typename T>
__global__ static void __launch_bounds__(BN_THREADS)
    bn_stats_k(const T *x, bn_geo<I, V> g, double *part) {
    __shared__ double buf[BN_THREADS];
    const bn_block<I> bk(g);
    const double k0 =
        cu_ld(x, (bk.e0 / g.hw * g.c + bk.c) * g.hw + bk.e0 % g.hw);
    const T *const src[] = {x};
    double s1 = 0, s2 = 0;
    bn_walk<1>(g, bk, src, [&](I, float(&v)[1][V]) {
#pragma unroll
        for (int j = 0; j < V; j++) {
            double d = (double)v[0][j] - k0;
            s1 += d;
            s2 += d * d;
        }
    });
    s1 = cu_block_sum(s1, buf);
    s2 = cu_block_sum(s2, buf);
    if (threadIdx.x == 0) {
        const double n = (double)(bk.e1 - bk.e0);
        const double m2 = s2 - s1 * (s1 / n);
        part[2 * blockIdx.x] = k0 + s1 / n;
        part[2 * blockIdx.x + 1] = m2 > 0 ? m2 : 0.0;
    }
}

/* Per channel of a launch (gamma.. offset to its first channel): batch
 * statistics merged over the chunks in order (Chan et al.: n = na + nb,
 * d = mb - ma, mean = ma + d·nb/n, M2 = M2a + M2b + d²·na·nb/n), or the
 * running ones in eval mode (rmean != NULL); then mean, var and
 * coef[2c..] = (scale, shift) as the CPU computes them. */
__global__ static void bn_merge_k(const double *part, int64_t p, int64_t len,
                                  int64_t count, int64_t nch,
                                  const float *gamma, const float *beta,
                                  const float *rmean, const float *rvar,
                                  float *mean, float *var, float *coef,
                                  bool hw1, double eps) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= nch) return;
    double m = 0, v = 0;
    if (rmean) {
        m = rmean[c];
        v = rvar[c];
    } else if (count > 0) {
        const double *pc = part + 2 * c * p;
        double na = (double)(len < count ? len : count), m2 = pc[1];
        m = pc[0];
        for (int64_t j = 1; j < p; j++) {
            const int64_t rest = count - j * len;
            const double nb = (double)(rest < len ? rest : len);
            const double n = na + nb, d = pc[2 * j] - m;
            m += d * (nb / n);
            m2 += pc[2 * j + 1] + d * d * (na * nb / n);
            na = n;
        }
        v = m2 / (double)count;
    }
    mean[c] = (float)m;
    var[c] = (float)v;
    /* (N, C) inputs: the CPU takes the scale from the stored float stats */
    if (hw1 && !rmean) {
        m = (double)(float)m;
        v = (double)(float)v;
    }
    const double rstd = 1.0 / sqrt(v + eps);
    coef[2 * c] = (float)(gamma[c] * rstd);
    coef[2 * c + 1] = (float)(beta[c] - m * gamma[c] * rstd);
}

/* What the forward writes: batch norm alone, then relu, or then + r and
 * relu. */
enum { BN_PLAIN = 0, BN_RELU = 1, BN_ADD_RELU = 2 };

/* y = x·scale + shift (then + r, then relu): the unfused kernels' float
 * operations in their order (cu_eltwise.cu's add and relu), so the fused
 * ops give the unfused chain's bits. For T BF16 the chain stored the batch
 * norm's value and the sum in BF16, so both are rounded here (cu_round),
 * and relu comes after the rounding as the unfused relu's does (a tiny
 * negative value rounds to -0, which stays -0); the plain form is rounded
 * once by its store. v[0] is x, v[1] r. */
template <int EPI, typename T, int V, int NIN>
__device__ static inline float bn_out(const float (&v)[NIN][V], int j,
                                      float sc, float sh) {
    float y = v[0][j] * sc + sh;
    if constexpr (EPI == BN_PLAIN) return y;
    y = cu_round<T>(y);
    if constexpr (EPI == BN_ADD_RELU) y = cu_round<T>(y + v[NIN - 1][j]);
    return y < 0.0f ? 0.0f : y;
}

template <int EPI, typename I, int V, typename T>
__global__ static void __launch_bounds__(BN_THREADS)
    bn_apply_k(const T *x, const T *r, T *y, bn_geo<I, V> g,
               const float *coef) {
    const bn_block<I> bk(g);
    const float sc = coef[2 * bk.cl], sh = coef[2 * bk.cl + 1];
    const T *const src[] = {x, r};
    constexpr int NIN = EPI == BN_ADD_RELU ? 2 : 1;
    bn_walk<NIN>(g, bk, src, [&](I off, float(&v)[NIN][V]) {
        float o[V];
#pragma unroll
        for (int j = 0; j < V; j++) o[j] = bn_out<EPI, T>(v, j, sc, sh);
        bn_st<V>(y + off, g.vec, o);
    });
}

/* Backward partials: the chunk's Σdy and Σdy(x - mean). */
template <typename I, int V, typename T>
__global__ static void __launch_bounds__(BN_THREADS)
    bn_bwd_stats_k(const T *x, const T *dy, const float *mean,
                   bn_geo<I, V> g, double *part) {
    __shared__ double buf[BN_THREADS];
    const bn_block<I> bk(g);
    const double m = mean[bk.c];
    const T *const src[] = {x, dy};
    double a1 = 0, a2 = 0;
    bn_walk<2>(g, bk, src, [&](I, float(&v)[2][V]) {
#pragma unroll
        for (int j = 0; j < V; j++) {
            const double d = v[1][j];
            a1 += d;
            a2 += d * ((double)v[0][j] - m);
        }
    });
    a1 = cu_block_sum(a1, buf);
    a2 = cu_block_sum(a2, buf);
    if (threadIdx.x == 0) {
        part[2 * blockIdx.x] = a1;
        part[2 * blockIdx.x + 1] = a2;
    }
}

/* Per channel of a launch: Σdy and Σdy(x - mean) over the chunks in order,
 * dgamma = Σdy·xhat and dbeta = Σdy (each optional), and
 * coef[4c..] = (a, b, e, mean) of dx = a·dy + b·(x - mean) + e as the CPU
 * computes them. */
__global__ static void bn_bwd_merge_k(const double *part, int64_t p,
                                      int64_t count, int64_t nch,
                                      const float *gamma, const float *mean,
                                      const float *var, float *dgamma,
                                      float *dbeta, float *coef, double eps) {
    const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= nch) return;
    const double *pc = part + 2 * c * p;
    double sdy = 0, sdyx = 0;
    for (int64_t j = 0; j < p; j++) {
        sdy += pc[2 * j];
        sdyx += pc[2 * j + 1];
    }
    const double rstd = 1.0 / sqrt((double)var[c] + eps);
    const double dg = sdyx * rstd;
    if (dgamma) dgamma[c] = (float)dg;
    if (dbeta) dbeta[c] = (float)sdy;
    if (count == 0) return;
    const double gm = gamma[c];
    const double a = gm * rstd;
    coef[4 * c] = (float)a;
    coef[4 * c + 1] = (float)(-gm * rstd * rstd * dg / (double)count);
    coef[4 * c + 2] = (float)(-a * sdy / (double)count);
    coef[4 * c + 3] = mean[c];
}

/* dx = a·dy + b·(x - mean) + e */
template <typename I, int V, typename T>
__global__ static void __launch_bounds__(BN_THREADS)
    bn_bwd_apply_k(const T *x, const T *dy, T *dx, bn_geo<I, V> g,
                   const float *coef) {
    const bn_block<I> bk(g);
    const float *k = coef + 4 * bk.cl;
    const float fa = k[0], fb = k[1], fe = k[2], fm = k[3];
    const T *const src[] = {x, dy};
    bn_walk<2>(g, bk, src, [&](I off, float(&v)[2][V]) {
#pragma unroll
        for (int j = 0; j < V; j++)
            v[0][j] = fa * v[1][j] + fb * (v[0][j] - fm) + fe;
        bn_st<V>(dx + off, g.vec, v[0]);
    });
}

/* A batch norm op's launches: the split, channels per launch (as many as
 * the scratch holds: p partials of 2 doubles and 4 float coefficients
 * each), index width and whether float4 accesses are aligned. */
typedef struct bn_plan {
    bn_shape s;
    bn_split sp;
    int64_t group;
    bool wide, vec;
    double *part;
    float *coef;
} bn_plan;

/* ptrs: the n element arrays the launches read or write (NULL ones are
 * not accessed); four-element accesses when all are aligned to four
 * elements of xt's dtype (16 bytes for F32, 8 for BF16). */
static bn_plan bn_plan_of(const delta_cuda_kctx *c, const delta_tensor *xt,
                          const void *const *ptrs, int n) {
    bn_plan pl;
    pl.s = bn_shape_of(xt);
    pl.sp = bn_split_of(&pl.s);
    const size_t per = (size_t)pl.sp.p * 2 * sizeof(double) + 4 * sizeof(float);
    pl.group = (int64_t)(c->scratch_bytes / per);
    DELTA_ASSERTF(pl.group >= 1, "batch norm: %zu bytes of scratch hold no "
                  "channel's %lld partials", c->scratch_bytes,
                  (long long)pl.sp.p);
    if (pl.group > pl.s.c) pl.group = pl.s.c;
    pl.wide = xt->numel >= ((int64_t)1 << 31);
    pl.vec = pl.sp.v == 4;
    const uintptr_t mask = 4 * delta_dtype_size(xt->dtype) - 1;
    for (int i = 0; i < n; i++) pl.vec &= ((uintptr_t)ptrs[i] & mask) == 0;
    pl.part = (double *)c->scratch;
    pl.coef = (float *)((char *)c->scratch +
                        (size_t)pl.group * pl.sp.p * 2 * sizeof(double));
    return pl;
}

/* Calls f(geo, c0, nch) for each group of nch channels from c0, with the
 * geometry's index type and step width. */
template <typename I, int V, typename F>
static void bn_groups(const bn_plan &pl, F &f) {
    bn_geo<I, V> g;
    g.c = (I)pl.s.c;
    g.hw = (I)pl.s.hw;
    g.count = (I)pl.sp.count;
    g.len = (I)pl.sp.len;
    g.p = (I)pl.sp.p;
    g.vec = pl.vec;
    for (int64_t c0 = 0; c0 < pl.s.c; c0 += pl.group) {
        g.c0 = (I)c0;
        f(g, c0, pl.s.c - c0 < pl.group ? pl.s.c - c0 : pl.group);
    }
}

template <typename F> static void bn_launch(const bn_plan &pl, F &&f) {
    if (pl.wide)
        pl.sp.v == 4 ? bn_groups<uint64_t, 4>(pl, f)
                     : bn_groups<uint64_t, 1>(pl, f);
    else
        pl.sp.v == 4 ? bn_groups<uint32_t, 4>(pl, f)
                     : bn_groups<uint32_t, 1>(pl, f);
}

static unsigned bn_merge_blocks(int64_t nch) {
    return (unsigned)((nch + NORM_THREADS - 1) / NORM_THREADS);
}

/* batchnorm, batchnorm_relu and batchnorm_add_relu: ins x, gamma, beta,
 * [r,] [rmean, rvar]; outs y, mean, var. x, r and y of element type T
 * (float for F32, uint16_t for BF16), the rest F32. */
template <int EPI, typename T>
static void bn_forward(const delta_cuda_kctx *c, const delta_kargs *k) {
    const int ri = EPI == BN_ADD_RELU ? 4 : 3; /* first running stat */
    const bool running = !k->env->training && k->op->n_in >= ri + 2;
    const T *x = (const T *)k->in[0];
    const float *gamma = (const float *)k->in[1],
                *beta = (const float *)k->in[2];
    const T *r = EPI == BN_ADD_RELU ? (const T *)k->in[3] : NULL;
    const float *rmean = running ? (const float *)k->in[ri] : NULL;
    const float *rvar = running ? (const float *)k->in[ri + 1] : NULL;
    T *y = (T *)k->out[0];
    float *mean = (float *)k->out[1], *var = (float *)k->out[2];
    const double eps = k->op->a.eps;
    const void *const ptrs[] = {x, y, r};
    const bn_plan pl = bn_plan_of(c, k->in_t[0], ptrs, r ? 3 : 2);
    const int64_t p = pl.sp.p;
    bn_launch(pl, [&](auto g, int64_t c0, int64_t nch) {
        const unsigned blocks = (unsigned)(nch * p);
        if (!running && p > 0)
            bn_stats_k<<<blocks, BN_THREADS, 0, c->stream>>>(x, g, pl.part);
        bn_merge_k<<<bn_merge_blocks(nch), NORM_THREADS, 0, c->stream>>>(
            pl.part, p, pl.sp.len, pl.sp.count, nch, gamma + c0, beta + c0,
            running ? rmean + c0 : NULL, running ? rvar + c0 : NULL,
            mean + c0, var + c0, pl.coef, pl.s.hw == 1, eps);
        if (p > 0)
            bn_apply_k<EPI><<<blocks, BN_THREADS, 0, c->stream>>>(x, r, y, g,
                                                                pl.coef);
    });
}

void delta_cu_batchnorm(const delta_cuda_kctx *c, const delta_kargs *k) {
    CU_WITH_T(k->in_t[0], k->op, bn_forward<BN_PLAIN, T>(c, k));
}

void delta_cu_batchnorm_relu(const delta_cuda_kctx *c, const delta_kargs *k) {
    CU_WITH_T(k->in_t[0], k->op, bn_forward<BN_RELU, T>(c, k));
}

void delta_cu_batchnorm_add_relu(const delta_cuda_kctx *c,
                                 const delta_kargs *k) {
    CU_WITH_T(k->in_t[0], k->op, bn_forward<BN_ADD_RELU, T>(c, k));
}

__global__ static void bn_running_k(const float *mean, const float *var,
                                    const float *rm_in, const float *rv_in,
                                    float *rm, float *rv, int64_t C, double m,
                                    double unbias) {
    CU_FOR(c, C) {
        float a = (float)((1.0 - m) * rm_in[c] + m * mean[c]);
        float b = (float)((1.0 - m) * rv_in[c] + m * (var[c] * unbias));
        rm[c] = a;
        rv[c] = b;
    }
}

void delta_cu_bn_running_update(const delta_cuda_kctx *c,
                                const delta_kargs *k) {
    if (!k->env->training) return;
    const int64_t C = k->in_t[0]->numel;
    const double cnt = k->op->a.count;
    CU_LAUNCH(bn_running_k, c, C, (const float *)k->in[0],
              (const float *)k->in[1], (const float *)k->in[2],
              (const float *)k->in[3], (float *)k->out[0], (float *)k->out[1],
              C, (double)k->op->a.momentum, cnt > 1 ? cnt / (cnt - 1) : 1.0);
}

/* ins x, gamma, mean, var, dy; outs dx, [dgamma, [dbeta]]: x, dy and dx of
 * element type T, the rest F32. */
template <typename T>
static void batchnorm_bwd(const delta_cuda_kctx *c, const delta_kargs *k) {
    const T *x = (const T *)k->in[0], *dy = (const T *)k->in[4];
    const float *gamma = (const float *)k->in[1],
                *mean = (const float *)k->in[2], *var = (const float *)k->in[3];
    T *dx = (T *)k->out[0];
    float *dgamma = k->op->n_out > 1 ? (float *)k->out[1] : NULL;
    float *dbeta = k->op->n_out > 2 ? (float *)k->out[2] : NULL;
    const double eps = k->op->a.eps;
    const void *const ptrs[] = {x, dy, dx};
    const bn_plan pl = bn_plan_of(c, k->in_t[0], ptrs, 3);
    const int64_t p = pl.sp.p;
    bn_launch(pl, [&](auto g, int64_t c0, int64_t nch) {
        const unsigned blocks = (unsigned)(nch * p);
        if (p > 0)
            bn_bwd_stats_k<<<blocks, BN_THREADS, 0, c->stream>>>(x, dy, mean,
                                                                 g, pl.part);
        bn_bwd_merge_k<<<bn_merge_blocks(nch), NORM_THREADS, 0, c->stream>>>(
            pl.part, p, pl.sp.count, nch, gamma + c0, mean + c0, var + c0,
            dgamma ? dgamma + c0 : NULL, dbeta ? dbeta + c0 : NULL, pl.coef,
            eps);
        if (dx && p > 0)
            bn_bwd_apply_k<<<blocks, BN_THREADS, 0, c->stream>>>(x, dy, dx, g,
                                                                 pl.coef);
    });
}

void delta_cu_batchnorm_bwd(const delta_cuda_kctx *c, const delta_kargs *k) {
    CU_WITH_T(k->in_t[0], k->op, batchnorm_bwd<T>(c, k));
}

/* ---- layer norm ---------------------------------------------------------- */

/* One block per row. x and y of element type T; gamma, beta, mean and
 * rstd F32. */
template <typename T>
__global__ static void ln_fwd_k(const T *x, const float *gamma,
                                const float *beta, T *y, float *mean,
                                float *rstd, int64_t d, double eps) {
    __shared__ double buf[NORM_THREADS];
    const int64_t r = blockIdx.x;
    const T *xp = x + r * d;
    T *yp = y + r * d;
    double acc = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) acc += cu_ld(xp, j);
    const float fm = (float)(cu_block_sum(acc, buf) / (double)d);
    acc = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        float dv = cu_ld(xp, j) - fm;
        acc += (double)(dv * dv);
    }
    const double v = cu_block_sum(acc, buf) / (double)d;
    const float frs = (float)(1.0 / sqrt(v + eps));
    if (threadIdx.x == 0) {
        mean[r] = fm;
        rstd[r] = frs;
    }
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        const float xv = cu_ld(xp, j);
        cu_st(yp, j, gamma ? (xv - fm) * frs * gamma[j] + beta[j]
                           : (xv - fm) * frs);
    }
}

void delta_cu_layernorm(const delta_cuda_kctx *c, const delta_kargs *k) {
    const delta_tensor *xt = k->in_t[0];
    const int64_t d = xt->ndim > 0 ? xt->shape[xt->ndim - 1] : 1;
    const int64_t rows = d > 0 ? xt->numel / d : 0;
    if (rows == 0) return;
    bool affine = k->op->n_in >= 3;
    CU_WITH_T(xt, k->op,
              ln_fwd_k<T><<<(unsigned)rows, NORM_THREADS, 0, c->stream>>>(
                  (const T *)k->in[0],
                  affine ? (const float *)k->in[1] : NULL,
                  affine ? (const float *)k->in[2] : NULL, (T *)k->out[0],
                  (float *)k->out[1], (float *)k->out[2], d, k->op->a.eps));
}

/* dx, one block per row: g = dy gamma; dx = rstd (g - mean(g) - xhat
 * mean(g xhat)). */
template <typename T>
__global__ static void ln_bwd_dx_k(const T *x, const float *mean,
                                   const float *rstd, const T *dy,
                                   const float *gamma, T *dx, int64_t d) {
    __shared__ double buf[NORM_THREADS];
    const int64_t r = blockIdx.x;
    const T *xp = x + r * d, *dyp = dy + r * d;
    T *dxp = dx + r * d;
    const float fm = mean[r], frs = rstd[r];
    double a = 0, b = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        const float dyv = cu_ld(dyp, j);
        float g = gamma ? dyv * gamma[j] : dyv;
        float xh = (cu_ld(xp, j) - fm) * frs;
        a += g;
        b += (double)(g * xh);
    }
    const float mg = (float)(cu_block_sum(a, buf) / (double)d);
    const float mgx = (float)(cu_block_sum(b, buf) / (double)d);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        float xh = (cu_ld(xp, j) - fm) * frs;
        const float dyv = cu_ld(dyp, j);
        float g = gamma ? dyv * gamma[j] : dyv;
        cu_st(dxp, j, frs * (g - mg - xh * mgx));
    }
}

/* dgamma, dbeta: column reductions over the rows, split as col_sum_k in
 * cu_matmul.cu (32 columns a block, 16 row lanes, lanes added in a fixed
 * tree). */
#define LN_COLS 32
#define LN_LANES 16
template <typename T>
__global__ static void ln_bwd_dg_k(const T *x, const float *mean,
                                   const float *rstd, const T *dy,
                                   float *dgamma, float *dbeta, int64_t rows,
                                   int64_t d) {
    __shared__ double pg[LN_LANES][LN_COLS], pb[LN_LANES][LN_COLS];
    const int64_t j = (int64_t)blockIdx.x * LN_COLS + threadIdx.x;
    double ag = 0, ab = 0;
    if (j < d)
        for (int64_t r = threadIdx.y; r < rows; r += LN_LANES) {
            float xh = (cu_ld(x, r * d + j) - mean[r]) * rstd[r];
            const float dyv = cu_ld(dy, r * d + j);
            ag += (double)dyv * xh;
            ab += dyv;
        }
    pg[threadIdx.y][threadIdx.x] = ag;
    pb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    for (int h = LN_LANES / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.y < h) {
            pg[threadIdx.y][threadIdx.x] += pg[threadIdx.y + h][threadIdx.x];
            pb[threadIdx.y][threadIdx.x] += pb[threadIdx.y + h][threadIdx.x];
        }
        __syncthreads();
    }
    if (threadIdx.y == 0 && j < d) {
        if (dgamma) dgamma[j] = (float)pg[0][threadIdx.x];
        if (dbeta) dbeta[j] = (float)pb[0][threadIdx.x];
    }
}

/* ins x, mean, rstd, dy, [gamma]; outs dx, [dgamma, dbeta]: x, dy and dx
 * of element type T, the rest F32. */
template <typename T>
static void layernorm_bwd(const delta_cuda_kctx *c, const delta_kargs *k,
                          int64_t rows, int64_t d) {
    const T *x = (const T *)k->in[0], *dy = (const T *)k->in[3];
    const float *mean = (const float *)k->in[1],
                *rstd = (const float *)k->in[2];
    const float *gamma = k->op->n_in >= 5 ? (const float *)k->in[4] : NULL;
    T *dx = (T *)k->out[0];
    float *dgamma = k->op->n_out >= 3 ? (float *)k->out[1] : NULL;
    float *dbeta = k->op->n_out >= 3 ? (float *)k->out[2] : NULL;
    if (dx)
        ln_bwd_dx_k<<<(unsigned)rows, NORM_THREADS, 0, c->stream>>>(
            x, mean, rstd, dy, gamma, dx, d);
    if (dgamma || dbeta) {
        dim3 block(LN_COLS, LN_LANES);
        unsigned grid = (unsigned)((d + LN_COLS - 1) / LN_COLS);
        ln_bwd_dg_k<<<grid, block, 0, c->stream>>>(x, mean, rstd, dy, dgamma,
                                                   dbeta, rows, d);
    }
}

void delta_cu_layernorm_bwd(const delta_cuda_kctx *c, const delta_kargs *k) {
    const delta_tensor *xt = k->in_t[0];
    const int64_t d = xt->ndim > 0 ? xt->shape[xt->ndim - 1] : 1;
    const int64_t rows = d > 0 ? xt->numel / d : 0;
    if (rows == 0 || d == 0) return;
    CU_WITH_T(xt, k->op, layernorm_bwd<T>(c, k, rows, d));
}
