/* Pooling kernels: max and average pooling over k x k windows, global
 * average pooling, and their gradients. Every loop runs in parallel over
 * (image, channel) planes; each plane is handled by one thread in a fixed
 * order, so results do not depend on the thread count. */
#include "backend/cpu/kernels.h"
#include "backend/kernel_shapes.h"
#include "backend/cpu/parallel.h"
#include "delta/cpu.h"

#include <math.h>
#include <string.h>

/* Window of output (p, q) clipped to the input: rows [h0, h1), cols
 * [w0, w1). */
static inline void window(const pool_geom *g, int64_t p, int64_t q,
                          int64_t *h0, int64_t *h1, int64_t *w0,
                          int64_t *w1) {
    int64_t hs = p * g->stride - g->pad, ws = q * g->stride - g->pad;
    *h0 = hs < 0 ? 0 : hs;
    *h1 = hs + g->k < g->h ? hs + g->k : g->h;
    *w0 = ws < 0 ? 0 : ws;
    *w1 = ws + g->k < g->w ? ws + g->k : g->w;
}

/* Output columns q whose window column q*stride - pad + s lies in [0, W):
 * [*lo, *hi), clipped to [q0, q1). */
static inline void q_range(const pool_geom *g, int64_t s, int64_t q0,
                           int64_t q1, int64_t *lo, int64_t *hi) {
    int64_t st = g->stride, pad = g->pad;
    int64_t a = pad - s > 0 ? (pad - s + st - 1) / st : 0;
    int64_t last = g->w - 1 + pad - s;
    int64_t b = last < 0 ? 0 : last / st + 1;
    if (a < q0) a = q0;
    if (b > q1) b = q1;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

/* Maximum (and with idx, its index in the plane) of the windows of output
 * row p, columns [q0, q1): the first maximum in row-major window order; a
 * NaN beats numbers, the first NaN among NaNs; a window of -inf's gives
 * its first cell. Vectorized over q, scanning the window in order.
 * ST is the stride when known at compile time (else 0). */
#define QB 256
static inline __attribute__((always_inline)) void
max_row(const pool_geom *g, const float *xp, int64_t p, int64_t q0,
        int64_t q1, float *best, int32_t *idx, const int ST) {
    const int64_t st = ST ? ST : g->stride, pad = g->pad, W = g->w;
    const int64_t nq = q1 - q0;
    int64_t h0, h1, w0, w1;
    window(g, p, q0, &h0, &h1, &w0, &w1);
    for (int64_t j = 0; j < nq; j++) best[j] = -INFINITY;
    if (idx) {
        for (int64_t j = 0; j < nq; j++) {
            int64_t ws = (q0 + j) * st - pad;
            idx[j] = (int32_t)(h0 * W + (ws < 0 ? 0 : ws));
        }
    }
    for (int64_t h = h0; h < h1; h++) {
        const float *row = xp + h * W;
        for (int64_t s = 0; s < g->k; s++) {
            int64_t lo, hi;
            q_range(g, s, q0, q1, &lo, &hi);
            if (hi <= lo) continue;
            const int64_t n = hi - lo, w = lo * st + s - pad;
            const float *src = row + w;
            float *bb = best + (lo - q0);
            if (idx) {
                int32_t *ii = idx + (lo - q0);
                const int32_t base = (int32_t)(h * W + w);
                SIMD
                for (int64_t j = 0; j < n; j++) {
                    float v = src[j * st], bv = bb[j];
                    bool take = v > bv || (v != v && bv == bv);
                    bb[j] = take ? v : bv;
                    ii[j] = take ? base + (int32_t)(j * st) : ii[j];
                }
            } else {
                SIMD
                for (int64_t j = 0; j < n; j++) {
                    float v = src[j * st], bv = bb[j];
                    bool take = v > bv || (v != v && bv == bv);
                    bb[j] = take ? v : bv;
                }
            }
        }
    }
}

static void max_row_any(const pool_geom *g, const float *xp, int64_t p,
                        int64_t q0, int64_t q1, float *best, int32_t *idx) {
    if (g->stride == 1)
        max_row(g, xp, p, q0, q1, best, idx, 1);
    else if (g->stride == 2)
        max_row(g, xp, p, q0, q1, best, idx, 2);
    else
        max_row(g, xp, p, q0, q1, best, idx, 0);
}

void delta_k_maxpool2d(const delta_kargs *k) {
    pool_geom g = pool_geom_of(k->op, k->in_t[0], k->out_t[0]);
    const float *x = k->in[0];
    float *y = k->out[0];
    PAR_FOR(g.planes * g.p * g.q * g.k * g.k >= PAR_MIN)
    for (int64_t pl = 0; pl < g.planes; pl++) {
        const float *xp = x + pl * g.h * g.w;
        float *yp = y + pl * g.p * g.q;
        for (int64_t p = 0; p < g.p; p++)
            for (int64_t q0 = 0; q0 < g.q; q0 += QB) {
                int64_t q1 = q0 + QB < g.q ? q0 + QB : g.q;
                max_row_any(&g, xp, p, q0, q1, yp + p * g.q + q0, NULL);
            }
    }
}

void delta_k_maxpool2d_bwd(const delta_kargs *k) {
    /* ins: x, dy; outs: dx */
    pool_geom g = pool_geom_of(k->op, k->in_t[0], k->in_t[1]);
    const float *x = k->in[0], *dy = k->in[1];
    float *dx = k->out[0];
    DELTA_ASSERT(g.h * g.w < INT32_MAX);
    PAR_FOR(g.planes * g.p * g.q * g.k * g.k >= PAR_MIN)
    for (int64_t pl = 0; pl < g.planes; pl++) {
        const float *xp = x + pl * g.h * g.w;
        const float *dyp = dy + pl * g.p * g.q;
        float *dxp = dx + pl * g.h * g.w;
        float best[QB];
        int32_t idx[QB];
        memset(dxp, 0, (size_t)(g.h * g.w) * sizeof(float));
        for (int64_t p = 0; p < g.p; p++)
            for (int64_t q0 = 0; q0 < g.q; q0 += QB) {
                int64_t q1 = q0 + QB < g.q ? q0 + QB : g.q;
                max_row_any(&g, xp, p, q0, q1, best, idx);
                const float *d = dyp + p * g.q + q0;
                for (int64_t j = 0; j < q1 - q0; j++) dxp[idx[j]] += d[j];
            }
    }
}

void delta_k_avgpool2d(const delta_kargs *k) {
    pool_geom g = pool_geom_of(k->op, k->in_t[0], k->out_t[0]);
    const float *x = k->in[0];
    float *y = k->out[0];
    const float inv = 1.0f / (float)(g.k * g.k);
    const int64_t st = g.stride, pad = g.pad;
    PAR_FOR(g.planes * g.p * g.q * g.k * g.k >= PAR_MIN)
    for (int64_t pl = 0; pl < g.planes; pl++) {
        const float *xp = x + pl * g.h * g.w;
        float *yp = y + pl * g.p * g.q;
        for (int64_t p = 0; p < g.p; p++) {
            /* window sums in row-major window order, vectorized over q */
            float *yr = yp + p * g.q;
            int64_t h0, h1, w0, w1;
            window(&g, p, 0, &h0, &h1, &w0, &w1);
            for (int64_t q = 0; q < g.q; q++) yr[q] = 0.0f;
            for (int64_t h = h0; h < h1; h++)
                for (int64_t s = 0; s < g.k; s++) {
                    int64_t lo, hi;
                    q_range(&g, s, 0, g.q, &lo, &hi);
                    if (hi <= lo) continue;
                    const float *src = xp + h * g.w + lo * st + s - pad;
                    float *d = yr + lo;
                    SIMD
                    for (int64_t j = 0; j < hi - lo; j++) d[j] += src[j * st];
                }
            for (int64_t q = 0; q < g.q; q++) yr[q] *= inv;
        }
    }
}

void delta_k_avgpool2d_bwd(const delta_kargs *k) {
    /* ins: dy (N,C,P,Q); outs: dx (N,C,H,W) */
    pool_geom g = pool_geom_of(k->op, k->out_t[0], k->in_t[0]);
    const float *dy = k->in[0];
    float *dx = k->out[0];
    const float inv = 1.0f / (float)(g.k * g.k);
    PAR_FOR(g.planes * g.p * g.q * g.k * g.k >= PAR_MIN)
    for (int64_t pl = 0; pl < g.planes; pl++) {
        const float *dyp = dy + pl * g.p * g.q;
        float *dxp = dx + pl * g.h * g.w;
        memset(dxp, 0, (size_t)(g.h * g.w) * sizeof(float));
        for (int64_t p = 0; p < g.p; p++)
            for (int64_t q = 0; q < g.q; q++) {
                int64_t h0, h1, w0, w1;
                window(&g, p, q, &h0, &h1, &w0, &w1);
                float d = dyp[p * g.q + q] * inv;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) dxp[h * g.w + w] += d;
            }
    }
}

void delta_k_global_avgpool(const delta_kargs *k) {
    const delta_tensor *xt = k->in_t[0];
    const float *x = k->in[0];
    float *y = k->out[0];
    const int64_t planes = xt->shape[0] * xt->shape[1];
    const int64_t hw = xt->shape[2] * xt->shape[3];
    const double inv = hw > 0 ? 1.0 / (double)hw : 0.0;
    PAR_FOR(planes * hw >= PAR_MIN)
    for (int64_t pl = 0; pl < planes; pl++)
        y[pl] = delta_plane_mean(x + pl * hw, hw, inv);
}

void delta_k_global_avgpool_bwd(const delta_kargs *k) {
    /* ins: dy (N,C); outs: dx (N,C,H,W) */
    const delta_tensor *dxt = k->out_t[0];
    const float *dy = k->in[0];
    float *dx = k->out[0];
    const int64_t planes = dxt->shape[0] * dxt->shape[1];
    const int64_t hw = dxt->shape[2] * dxt->shape[3];
    PAR_FOR(planes * hw >= PAR_MIN)
    for (int64_t pl = 0; pl < planes; pl++) {
        float v = (float)(dy[pl] / (double)hw), *d = dx + pl * hw;
        for (int64_t i = 0; i < hw; i++) d[i] = v;
    }
}
