/* Pooling kernels: max and average pooling over k x k windows, global
 * average pooling, and their gradients. Every loop runs in parallel over
 * (image, channel) planes; each plane is handled by one thread in a fixed
 * order, so results do not depend on the thread count.
 *
 * x, y, dy and dx are F32 or BF16 with one body per kernel (k_dtype.h).
 * A BF16 output that the F32 kernel accumulates in place is accumulated
 * in fp32 first and rounded once: max and average pooling in a row buffer
 * of QB outputs, the backward kernels in a ring of k dx rows (dx_rows). */
#include "backend/cpu/k_dtype.h"
#include "backend/cpu/kernels.h"
#include "backend/kernel_shapes.h"
#include "backend/cpu/parallel.h"
#include "delta/cpu.h"

#include <math.h>
#include <stdlib.h>
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
max_row(const pool_geom *g, const void *xp, int64_t p, int64_t q0,
        int64_t q1, float *best, int32_t *idx, const int ST, bool bf) {
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
        for (int64_t s = 0; s < g->k; s++) {
            int64_t lo, hi;
            q_range(g, s, q0, q1, &lo, &hi);
            if (hi <= lo) continue;
            const int64_t n = hi - lo, w = lo * st + s - pad;
            const void *src = k_at(xp, h * W + w, bf);
            float *bb = best + (lo - q0);
            if (idx) {
                int32_t *ii = idx + (lo - q0);
                const int32_t base = (int32_t)(h * W + w);
                SIMD
                for (int64_t j = 0; j < n; j++) {
                    float v = k_ld(src, j * st, bf), bv = bb[j];
                    bool take = v > bv || (v != v && bv == bv);
                    bb[j] = take ? v : bv;
                    ii[j] = take ? base + (int32_t)(j * st) : ii[j];
                }
            } else {
                SIMD
                for (int64_t j = 0; j < n; j++) {
                    float v = k_ld(src, j * st, bf), bv = bb[j];
                    bool take = v > bv || (v != v && bv == bv);
                    bb[j] = take ? v : bv;
                }
            }
        }
    }
}

K_BODY void max_row_any(const pool_geom *g, const void *xp, int64_t p,
                        int64_t q0, int64_t q1, float *best, int32_t *idx,
                        bool bf) {
    if (g->stride == 1)
        max_row(g, xp, p, q0, q1, best, idx, 1, bf);
    else if (g->stride == 2)
        max_row(g, xp, p, q0, q1, best, idx, 2, bf);
    else
        max_row(g, xp, p, q0, q1, best, idx, 0, bf);
}

/* Plane pl of max pooling: the F32 maxima are found in y itself, the
 * BF16 ones in a row buffer, then rounded. */
K_BODY void maxpool_plane(const pool_geom *g, const void *x, void *y,
                          int64_t pl, bool bf) {
    const void *xp = k_at(x, pl * g->h * g->w, bf);
    void *yp = k_at_mut(y, pl * g->p * g->q, bf);
    float buf[QB];
    for (int64_t p = 0; p < g->p; p++)
        for (int64_t q0 = 0; q0 < g->q; q0 += QB) {
            int64_t q1 = q0 + QB < g->q ? q0 + QB : g->q;
            float *best = bf ? buf : (float *)yp + p * g->q + q0;
            max_row_any(g, xp, p, q0, q1, best, NULL, bf);
            if (bf)
                for (int64_t j = 0; j < q1 - q0; j++)
                    k_st(yp, p * g->q + q0 + j, best[j], true);
        }
}

void delta_k_maxpool2d(const delta_kargs *k) {
    pool_geom g = pool_geom_of(k->op, k->in_t[0], k->out_t[0]);
    const bool bf = k_is_bf16(k->in_t[0]);
    PAR_FOR(g.planes * g.p * g.q * g.k * g.k >= PAR_MIN)
    for (int64_t pl = 0; pl < g.planes; pl++) {
        if (bf) maxpool_plane(&g, k->in[0], k->out[0], pl, true);
        else maxpool_plane(&g, k->in[0], k->out[0], pl, false);
    }
}

/* The dx plane (H x W) of a backward pool as its windows add into it, in
 * output-row order. F32: the plane itself, each row zeroed before its
 * first addition. BF16: each row is summed in fp32 in a ring of k rows
 * and rounded once, when no later output row's window reaches it (rows
 * below the current window's first are final; a window spans k rows at
 * most, so k slots suffice). Rows no window reaches are written 0. */
typedef struct dx_rows {
    void *dxp;
    float *ring;                  /* k x W floats (BF16 only) */
    int64_t k, h, w;
    int64_t next_init, next_flush; /* first row not zeroed / not final */
} dx_rows;

K_BODY float *dx_row(dx_rows *d, int64_t h, bool bf) {
    return bf ? d->ring + (h % d->k) * d->w : (float *)d->dxp + h * d->w;
}

/* Makes rows below h0 final and rows [h0, h1) ready for additions. */
K_BODY void dx_rows_advance(dx_rows *d, int64_t h0, int64_t h1, bool bf) {
    if (h0 > d->h) h0 = d->h;
    if (h1 < h0) h1 = h0;
    for (; d->next_flush < h0; d->next_flush++) {
        const int64_t h = d->next_flush;
        if (h >= d->next_init) { /* never reached */
            for (int64_t j = 0; j < d->w; j++)
                k_st(d->dxp, h * d->w + j, 0.0f, bf);
            d->next_init = h + 1;
        } else if (bf) {
            const float *r = dx_row(d, h, true);
            for (int64_t j = 0; j < d->w; j++)
                k_st(d->dxp, h * d->w + j, r[j], true);
        }
    }
    for (; d->next_init < h1; d->next_init++) {
        float *r = dx_row(d, d->next_init, bf);
        for (int64_t j = 0; j < d->w; j++) r[j] = 0.0f;
    }
}

/* Plane pl of max pooling's gradient: each dy goes to its window's first
 * maximum. */
K_BODY void maxpool_bwd_plane(const pool_geom *g, const void *x,
                              const void *dy, void *dx, float *ring,
                              int64_t pl, bool bf) {
    const void *xp = k_at(x, pl * g->h * g->w, bf);
    const void *dyp = k_at(dy, pl * g->p * g->q, bf);
    dx_rows d = {.dxp = k_at_mut(dx, pl * g->h * g->w, bf), .ring = ring,
                 .k = g->k, .h = g->h, .w = g->w};
    float best[QB];
    int32_t idx[QB];
    for (int64_t p = 0; p < g->p; p++) {
        int64_t h0, h1, w0, w1;
        window(g, p, 0, &h0, &h1, &w0, &w1);
        dx_rows_advance(&d, h0, h1, bf);
        for (int64_t q0 = 0; q0 < g->q; q0 += QB) {
            int64_t q1 = q0 + QB < g->q ? q0 + QB : g->q;
            max_row_any(g, xp, p, q0, q1, best, idx, bf);
            for (int64_t j = 0; j < q1 - q0; j++)
                dx_row(&d, idx[j] / g->w, bf)[idx[j] % g->w] +=
                    k_ld(dyp, p * g->q + q0 + j, bf);
        }
    }
    dx_rows_advance(&d, g->h, g->h, bf);
}

/* The ring of k rows of fp32 dx a BF16 pool gradient accumulates in,
 * per thread: on the stack up to RING_STACK floats (k 3 over rows of 1,000
 * columns), else from the heap, so no image width can overflow a
 * thread's stack. ring_free gives back what ring_get took. */
#define RING_STACK 4096
static float *ring_get(const pool_geom *g, float *stack) {
    size_t n = (size_t)(g->k * g->w);
    if (n <= RING_STACK) return stack;
    float *r = malloc(n * sizeof *r);
    DELTA_ASSERTF(r, "pool gradient: no host memory for %zu floats", n);
    return r;
}
static void ring_free(float *ring, float *stack) {
    if (ring != stack) free(ring);
}

void delta_k_maxpool2d_bwd(const delta_kargs *k) {
    /* ins: x, dy; outs: dx */
    pool_geom g = pool_geom_of(k->op, k->in_t[0], k->in_t[1]);
    const bool bf = k_is_bf16(k->in_t[0]);
    DELTA_ASSERT(g.h * g.w < INT32_MAX);
    PAR_FOR(g.planes * g.p * g.q * g.k * g.k >= PAR_MIN)
    for (int64_t pl = 0; pl < g.planes; pl++) {
        if (bf) {
            float stack[RING_STACK], *ring = ring_get(&g, stack);
            maxpool_bwd_plane(&g, k->in[0], k->in[1], k->out[0], ring, pl,
                              true);
            ring_free(ring, stack);
        } else
            maxpool_bwd_plane(&g, k->in[0], k->in[1], k->out[0], NULL, pl,
                              false);
    }
}

/* Window sums of output row p, columns [q0, q1), into acc[0, q1 - q0)
 * in row-major window order, vectorized over q. */
K_BODY void avg_row(const pool_geom *g, const void *xp, int64_t p,
                    int64_t q0, int64_t q1, float *acc, bool bf) {
    const int64_t st = g->stride, pad = g->pad;
    int64_t h0, h1, w0, w1;
    window(g, p, 0, &h0, &h1, &w0, &w1);
    for (int64_t q = 0; q < q1 - q0; q++) acc[q] = 0.0f;
    for (int64_t h = h0; h < h1; h++)
        for (int64_t s = 0; s < g->k; s++) {
            int64_t lo, hi;
            q_range(g, s, q0, q1, &lo, &hi);
            if (hi <= lo) continue;
            const void *src = k_at(xp, h * g->w + lo * st + s - pad, bf);
            float *d = acc + (lo - q0);
            SIMD
            for (int64_t j = 0; j < hi - lo; j++) d[j] += k_ld(src, j * st, bf);
        }
}

/* Plane pl of average pooling: F32 rows are summed in y itself, BF16 ones
 * QB outputs at a time in a buffer, then scaled and rounded. */
K_BODY void avgpool_plane(const pool_geom *g, const void *x, void *y,
                          int64_t pl, float inv, bool bf) {
    const void *xp = k_at(x, pl * g->h * g->w, bf);
    void *yp = k_at_mut(y, pl * g->p * g->q, bf);
    float buf[QB];
    for (int64_t p = 0; p < g->p; p++) {
        if (!bf) {
            float *yr = (float *)yp + p * g->q;
            avg_row(g, xp, p, 0, g->q, yr, false);
            for (int64_t q = 0; q < g->q; q++) yr[q] *= inv;
            continue;
        }
        for (int64_t q0 = 0; q0 < g->q; q0 += QB) {
            int64_t q1 = q0 + QB < g->q ? q0 + QB : g->q;
            avg_row(g, xp, p, q0, q1, buf, true);
            for (int64_t j = 0; j < q1 - q0; j++)
                k_st(yp, p * g->q + q0 + j, buf[j] * inv, true);
        }
    }
}

void delta_k_avgpool2d(const delta_kargs *k) {
    pool_geom g = pool_geom_of(k->op, k->in_t[0], k->out_t[0]);
    const bool bf = k_is_bf16(k->in_t[0]);
    const float inv = 1.0f / (float)(g.k * g.k);
    PAR_FOR(g.planes * g.p * g.q * g.k * g.k >= PAR_MIN)
    for (int64_t pl = 0; pl < g.planes; pl++) {
        if (bf) avgpool_plane(&g, k->in[0], k->out[0], pl, inv, true);
        else avgpool_plane(&g, k->in[0], k->out[0], pl, inv, false);
    }
}

/* Plane pl of average pooling's gradient: dy / k^2 added over each
 * window, in output order. */
K_BODY void avgpool_bwd_plane(const pool_geom *g, const void *dy, void *dx,
                              float *ring, int64_t pl, float inv, bool bf) {
    const void *dyp = k_at(dy, pl * g->p * g->q, bf);
    dx_rows d = {.dxp = k_at_mut(dx, pl * g->h * g->w, bf), .ring = ring,
                 .k = g->k, .h = g->h, .w = g->w};
    for (int64_t p = 0; p < g->p; p++) {
        int64_t h0, h1, w0, w1;
        window(g, p, 0, &h0, &h1, &w0, &w1);
        dx_rows_advance(&d, h0, h1, bf);
        for (int64_t q = 0; q < g->q; q++) {
            window(g, p, q, &h0, &h1, &w0, &w1);
            float v = k_ld(dyp, p * g->q + q, bf) * inv;
            for (int64_t h = h0; h < h1; h++) {
                float *r = dx_row(&d, h, bf);
                for (int64_t w = w0; w < w1; w++) r[w] += v;
            }
        }
    }
    dx_rows_advance(&d, g->h, g->h, bf);
}

void delta_k_avgpool2d_bwd(const delta_kargs *k) {
    /* ins: dy (N,C,P,Q); outs: dx (N,C,H,W) */
    pool_geom g = pool_geom_of(k->op, k->out_t[0], k->in_t[0]);
    const bool bf = k_is_bf16(k->in_t[0]);
    const float inv = 1.0f / (float)(g.k * g.k);
    PAR_FOR(g.planes * g.p * g.q * g.k * g.k >= PAR_MIN)
    for (int64_t pl = 0; pl < g.planes; pl++) {
        if (bf) {
            float stack[RING_STACK], *ring = ring_get(&g, stack);
            avgpool_bwd_plane(&g, k->in[0], k->out[0], ring, pl, inv, true);
            ring_free(ring, stack);
        } else
            avgpool_bwd_plane(&g, k->in[0], k->out[0], NULL, pl, inv, false);
    }
}

/* The mean of a plane of hw BF16 values: delta_plane_mean's arithmetic
 * (delta_run_sum's four lanes in double, times inv) on the widened
 * values, so the result is the F32 kernel's on the widened plane. */
static float plane_mean_bf16(const uint16_t *xp, int64_t hw, double inv) {
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int64_t i = 0;
    for (; i + 4 <= hw; i += 4) {
        a0 += delta_bf16_to_f32(xp[i]);
        a1 += delta_bf16_to_f32(xp[i + 1]);
        a2 += delta_bf16_to_f32(xp[i + 2]);
        a3 += delta_bf16_to_f32(xp[i + 3]);
    }
    for (; i < hw; i++) a0 += delta_bf16_to_f32(xp[i]);
    return (float)(((a0 + a1) + (a2 + a3)) * inv);
}

void delta_k_global_avgpool(const delta_kargs *k) {
    const delta_tensor *xt = k->in_t[0];
    const bool bf = k_is_bf16(xt);
    const int64_t planes = xt->shape[0] * xt->shape[1];
    const int64_t hw = xt->shape[2] * xt->shape[3];
    const double inv = hw > 0 ? 1.0 / (double)hw : 0.0;
    PAR_FOR(planes * hw >= PAR_MIN)
    for (int64_t pl = 0; pl < planes; pl++) {
        if (bf)
            k_st(k->out[0], pl,
                 plane_mean_bf16((const uint16_t *)k->in[0] + pl * hw, hw,
                                 inv), true);
        else
            ((float *)k->out[0])[pl] =
                delta_plane_mean((const float *)k->in[0] + pl * hw, hw, inv);
    }
}

/* Plane pl of global average pooling's gradient: dy / hw everywhere. */
K_BODY void gap_bwd_plane(const void *dy, void *dx, int64_t pl, int64_t hw,
                          bool bf) {
    float v = (float)(k_ld(dy, pl, bf) / (double)hw);
    for (int64_t i = 0; i < hw; i++) k_st(dx, pl * hw + i, v, bf);
}

void delta_k_global_avgpool_bwd(const delta_kargs *k) {
    /* ins: dy (N,C); outs: dx (N,C,H,W) */
    const delta_tensor *dxt = k->out_t[0];
    const bool bf = k_is_bf16(dxt);
    const int64_t planes = dxt->shape[0] * dxt->shape[1];
    const int64_t hw = dxt->shape[2] * dxt->shape[3];
    PAR_FOR(planes * hw >= PAR_MIN)
    for (int64_t pl = 0; pl < planes; pl++) {
        if (bf) gap_bwd_plane(k->in[0], k->out[0], pl, hw, true);
        else gap_bwd_plane(k->in[0], k->out[0], pl, hw, false);
    }
}
