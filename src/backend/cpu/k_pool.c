/* Pooling kernels: max and average pooling over k x k windows, global
 * average pooling, and their gradients. Every loop runs in parallel over
 * (image, channel) planes; each plane is handled by one thread in a fixed
 * order, so results do not depend on the thread count. */
#include "backend/cpu/kernels.h"

#include <math.h>
#include <string.h>

typedef struct pool_geom {
    int64_t planes, h, w, p, q;
    int k, stride, pad;
} pool_geom;

/* x is the (N, C, H, W) input side, y the (N, C, P, Q) output side. */
static pool_geom pool_geom_of(const delta_op *op, const delta_tensor *x,
                              const delta_tensor *y) {
    pool_geom g;
    g.planes = x->shape[0] * x->shape[1];
    g.h = x->shape[2];
    g.w = x->shape[3];
    g.p = y->shape[2];
    g.q = y->shape[3];
    g.k = op->a.k;
    g.stride = op->a.stride;
    g.pad = op->a.pad;
    return g;
}

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

/* Index in the plane of the first maximum of output (p, q)'s window in
 * row-major window order (a NaN wins over numbers, the first NaN among
 * NaNs), or -1 if the window holds no input cell. */
static inline int64_t argmax_window(const pool_geom *g, const float *xp,
                                    int64_t p, int64_t q, float *best_out) {
    int64_t h0, h1, w0, w1;
    window(g, p, q, &h0, &h1, &w0, &w1);
    int64_t best_i = -1;
    float best = -INFINITY;
    for (int64_t h = h0; h < h1; h++) {
        const float *row = xp + h * g->w;
        for (int64_t w = w0; w < w1; w++) {
            float v = row[w];
            if (best_i < 0 || v > best || (isnan(v) && !isnan(best))) {
                best = v;
                best_i = h * g->w + w;
            }
        }
    }
    *best_out = best;
    return best_i;
}

void delta_k_maxpool2d(const delta_kargs *k) {
    pool_geom g = pool_geom_of(k->op, k->in_t[0], k->out_t[0]);
    const float *x = k->in[0];
    float *y = k->out[0];
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < g.planes; pl++) {
        const float *xp = x + pl * g.h * g.w;
        float *yp = y + pl * g.p * g.q;
        for (int64_t p = 0; p < g.p; p++)
            for (int64_t q = 0; q < g.q; q++) {
                float best;
                argmax_window(&g, xp, p, q, &best);
                yp[p * g.q + q] = best;
            }
    }
}

void delta_k_maxpool2d_bwd(const delta_kargs *k) {
    /* ins: x, dy; outs: dx */
    pool_geom g = pool_geom_of(k->op, k->in_t[0], k->in_t[1]);
    const float *x = k->in[0], *dy = k->in[1];
    float *dx = k->out[0];
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < g.planes; pl++) {
        const float *xp = x + pl * g.h * g.w;
        const float *dyp = dy + pl * g.p * g.q;
        float *dxp = dx + pl * g.h * g.w;
        memset(dxp, 0, (size_t)(g.h * g.w) * sizeof(float));
        for (int64_t p = 0; p < g.p; p++)
            for (int64_t q = 0; q < g.q; q++) {
                float best;
                int64_t i = argmax_window(&g, xp, p, q, &best);
                if (i >= 0) dxp[i] += dyp[p * g.q + q];
            }
    }
}

void delta_k_avgpool2d(const delta_kargs *k) {
    pool_geom g = pool_geom_of(k->op, k->in_t[0], k->out_t[0]);
    const float *x = k->in[0];
    float *y = k->out[0];
    const float inv = 1.0f / (float)(g.k * g.k);
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < g.planes; pl++) {
        const float *xp = x + pl * g.h * g.w;
        float *yp = y + pl * g.p * g.q;
        for (int64_t p = 0; p < g.p; p++)
            for (int64_t q = 0; q < g.q; q++) {
                int64_t h0, h1, w0, w1;
                window(&g, p, q, &h0, &h1, &w0, &w1);
                float s = 0.0f;
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) s += xp[h * g.w + w];
                yp[p * g.q + q] = s * inv;
            }
    }
}

void delta_k_avgpool2d_bwd(const delta_kargs *k) {
    /* ins: dy (N,C,P,Q); outs: dx (N,C,H,W) */
    pool_geom g = pool_geom_of(k->op, k->out_t[0], k->in_t[0]);
    const float *dy = k->in[0];
    float *dx = k->out[0];
    const float inv = 1.0f / (float)(g.k * g.k);
#pragma omp parallel for schedule(static)
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
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
        const float *xp = x + pl * hw;
        double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        int64_t i = 0;
        for (; i + 4 <= hw; i += 4) {
            a0 += xp[i];
            a1 += xp[i + 1];
            a2 += xp[i + 2];
            a3 += xp[i + 3];
        }
        for (; i < hw; i++) a0 += xp[i];
        y[pl] = (float)(((a0 + a1) + (a2 + a3)) * inv);
    }
}

void delta_k_global_avgpool_bwd(const delta_kargs *k) {
    /* ins: dy (N,C); outs: dx (N,C,H,W) */
    const delta_tensor *dxt = k->out_t[0];
    const float *dy = k->in[0];
    float *dx = k->out[0];
    const int64_t planes = dxt->shape[0] * dxt->shape[1];
    const int64_t hw = dxt->shape[2] * dxt->shape[3];
    const float inv = hw > 0 ? (float)(1.0 / (double)hw) : 0.0f;
#pragma omp parallel for schedule(static)
    for (int64_t pl = 0; pl < planes; pl++) {
        float v = dy[pl] * inv, *d = dx + pl * hw;
        for (int64_t i = 0; i < hw; i++) d[i] = v;
    }
}
