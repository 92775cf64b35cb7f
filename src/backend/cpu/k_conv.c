/* Convolution kernels: conv2d forward, its gradients w.r.t. input and
 * weight, and the bias gradient.
 *
 * Lowering (see conv_geom.c for the blocks and the workspace layout): the
 * im2col columns of a block of images (or of a band of output rows of one
 * image) are built as col [C*R*S, cols], then
 *   forward  y_blk [K, cols]   = W [K, CRS] . col
 *   dx       col               = W^T . dy_blk [K, cols], then col2im
 *   dw       dW [K, CRS]      += dy_blk . col^T   (blocks in image order)
 * When a block holds several images, y_blk / dy_blk live in the workspace's
 * transposed buffer and are scattered to / gathered from NCHW. For a single
 * image they are the NCHW tensor itself (row stride P*Q).
 *
 * The GEMMs run outside any OpenMP region (the GEMM threads itself); the
 * im2col, col2im, scatter and gather loops run in parallel over disjoint
 * outputs, each element written by one thread in a fixed order, so results
 * do not depend on the thread count. */
#include "backend/cpu/kernels.h"

#include <string.h>

typedef struct conv_plan {
    delta_conv_geom g;
    int64_t crs, pq, hw;
    bool direct;   /* 1x1, stride 1, no padding, one image a block: no col */
    int64_t band;  /* output rows per block when chunk == 1 */
    float *col;    /* [CRS, cols] */
    float *tbuf;   /* [K, chunk*PQ] when chunk > 1 */
} conv_plan;

static conv_plan make_plan(const delta_kargs *k, const int64_t *xs,
                           const int64_t *wsh) {
    conv_plan pl;
    memset(&pl, 0, sizeof pl);
    pl.g = delta_conv_geom_of(xs, wsh, k->op->a.stride, k->op->a.pad);
    const delta_conv_geom *g = &pl.g;
    pl.crs = g->c * g->r * g->s;
    pl.pq = g->p * g->q;
    pl.hw = g->h * g->w;
    size_t need = delta_conv_workspace(g, k->op->type);
    DELTA_ASSERTF(k->op->workspace >= need && (need == 0 || k->ws),
                  "%s: workspace %zu bytes, the kernel needs %zu",
                  k->op->name, k->op->workspace, need);
    if (g->chunk > 1) {
        pl.col = (float *)k->ws;
        pl.tbuf = pl.col + pl.crs * g->chunk * pl.pq;
        pl.band = g->p;
    } else if (need == 0) {
        pl.direct = true;
        pl.band = g->p;
    } else {
        pl.col = (float *)k->ws;
        pl.band = (int64_t)(need / ((size_t)pl.crs * (size_t)g->q *
                                    sizeof(float)));
        if (pl.band < 1) pl.band = 1;
        if (pl.band > g->p) pl.band = g->p;
    }
    return pl;
}

/* Output columns q whose input column q*stride - pad + s lies in [0, W):
 * [*lo, *hi). */
static inline void q_range(const delta_conv_geom *g, int64_t s, int64_t *lo,
                           int64_t *hi) {
    int64_t st = g->stride, pad = g->pad;
    int64_t a = pad - s > 0 ? (pad - s + st - 1) / st : 0;
    int64_t last = g->w - 1 + pad - s; /* q*st <= last */
    int64_t b = last < 0 ? 0 : last / st + 1;
    if (b > g->q) b = g->q;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}

/* col[(c*R + r)*S + s][i*np*Q + (p - p0)*Q + q] for images n0 .. n0+cn-1
 * and output rows p0 .. p1-1. */
static void im2col(const float *x, const delta_conv_geom *g, int64_t n0,
                   int64_t cn, int64_t p0, int64_t p1, float *col) {
    const int64_t C = g->c, R = g->r, S = g->s, H = g->h, W = g->w,
                  Q = g->q, st = g->stride, pad = g->pad;
    const int64_t bl = (p1 - p0) * Q, ld = cn * bl;
    const int64_t tasks = cn * C * R;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t r = t % R, c = (t / R) % C, i = t / (R * C);
        const float *xp = x + ((n0 + i) * C + c) * H * W;
        for (int64_t s = 0; s < S; s++) {
            float *dst = col + ((c * R + r) * S + s) * ld + i * bl;
            int64_t qlo, qhi;
            q_range(g, s, &qlo, &qhi);
            for (int64_t p = p0; p < p1; p++) {
                float *d = dst + (p - p0) * Q;
                int64_t h = p * st - pad + r;
                if (h < 0 || h >= H) {
                    for (int64_t q = 0; q < Q; q++) d[q] = 0.0f;
                    continue;
                }
                /* input column of q is src[(q - qlo) * st] */
                const float *src = xp + h * W + (qlo * st - pad + s);
                int64_t q = 0;
                for (; q < qlo; q++) d[q] = 0.0f;
                if (st == 1) {
                    const int64_t nq = qhi - qlo;
                    float *dd = d + qlo;
                    if (nq >= 32) {
                        memcpy(dd, src, (size_t)nq * sizeof(float));
                    } else {
                        for (int64_t j = 0; j < nq; j++) dd[j] = src[j];
                    }
                } else {
                    for (int64_t j = 0; j < qhi - qlo; j++)
                        d[qlo + j] = src[j * st];
                }
                for (q = qhi; q < Q; q++) d[q] = 0.0f;
            }
        }
    }
}

/* dx[n0+i, c] (+)= the columns' contributions, (r, s) in order; `first`
 * zeroes each plane before the first block touching it. */
static void col2im(const float *col, const delta_conv_geom *g, int64_t n0,
                   int64_t cn, int64_t p0, int64_t p1, float *dx,
                   bool first) {
    const int64_t C = g->c, R = g->r, S = g->s, H = g->h, W = g->w,
                  Q = g->q, st = g->stride, pad = g->pad;
    const int64_t bl = (p1 - p0) * Q, ld = cn * bl;
    const int64_t tasks = cn * C;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t c = t % C, i = t / C;
        float *xp = dx + ((n0 + i) * C + c) * H * W;
        if (first) memset(xp, 0, (size_t)(H * W) * sizeof(float));
        for (int64_t r = 0; r < R; r++) {
            for (int64_t s = 0; s < S; s++) {
                const float *src = col + ((c * R + r) * S + s) * ld + i * bl;
                int64_t qlo, qhi;
                q_range(g, s, &qlo, &qhi);
                int64_t nq = qhi - qlo;
                for (int64_t p = p0; p < p1; p++) {
                    int64_t h = p * st - pad + r;
                    if (h < 0 || h >= H) continue;
                    float *d = xp + h * W + (qlo * st - pad + s);
                    const float *sp = src + (p - p0) * Q + qlo;
                    if (st == 1) {
#pragma omp simd
                        for (int64_t q = 0; q < nq; q++) d[q] += sp[q];
                    } else {
                        for (int64_t q = 0; q < nq; q++) d[q * st] += sp[q];
                    }
                }
            }
        }
    }
}

/* y[n0+i, k, :] = tbuf[k, i*PQ : (i+1)*PQ] + bias[k] */
static void scatter_out(const float *tbuf, const float *bias, int64_t K,
                        int64_t pq, int64_t n0, int64_t cn, float *y) {
    const int64_t tasks = cn * K;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t kk = t % K, i = t / K;
        const float *s = tbuf + kk * cn * pq + i * pq;
        float *d = y + ((n0 + i) * K + kk) * pq;
        if (bias) {
            float b = bias[kk];
#pragma omp simd
            for (int64_t j = 0; j < pq; j++) d[j] = s[j] + b;
        } else {
            memcpy(d, s, (size_t)pq * sizeof(float));
        }
    }
}

/* tbuf[k, i*PQ : (i+1)*PQ] = dy[n0+i, k, :] */
static void gather_dy(const float *dy, int64_t K, int64_t pq, int64_t n0,
                      int64_t cn, float *tbuf) {
    const int64_t tasks = cn * K;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t kk = t % K, i = t / K;
        memcpy(tbuf + kk * cn * pq + i * pq, dy + ((n0 + i) * K + kk) * pq,
               (size_t)pq * sizeof(float));
    }
}

/* y[n, k, :] += bias[k] for the planes of image n. */
static void add_bias_image(float *y, const float *bias, int64_t K,
                           int64_t pq) {
#pragma omp parallel for schedule(static)
    for (int64_t kk = 0; kk < K; kk++) {
        float b = bias[kk], *d = y + kk * pq;
#pragma omp simd
        for (int64_t j = 0; j < pq; j++) d[j] += b;
    }
}

static void fill(float *p, int64_t n, float v) {
    for (int64_t i = 0; i < n; i++) p[i] = v;
}

void delta_k_conv2d(const delta_kargs *k) {
    const delta_tensor *xt = k->in_t[0], *wt = k->in_t[1];
    conv_plan pl = make_plan(k, xt->shape, wt->shape);
    const delta_conv_geom *g = &pl.g;
    const float *x = k->in[0], *w = k->in[1];
    const float *bias = k->op->n_in > 2 ? k->in[2] : NULL;
    float *y = k->out[0];
    const int64_t K = g->k, pq = pl.pq, crs = pl.crs;
    if (g->n == 0 || K == 0 || pq == 0) return;
    if (crs == 0) { /* no input channels: the output is the bias */
        for (int64_t n = 0; n < g->n; n++)
            for (int64_t kk = 0; kk < K; kk++)
                fill(y + (n * K + kk) * pq, pq, bias ? bias[kk] : 0.0f);
        return;
    }
    if (g->chunk > 1) {
        for (int64_t n0 = 0; n0 < g->n; n0 += g->chunk) {
            int64_t cn = g->n - n0 < g->chunk ? g->n - n0 : g->chunk;
            int64_t cols = cn * pq;
            im2col(x, g, n0, cn, 0, g->p, pl.col);
            delta_gemm(false, false, K, cols, crs, 1.0f, w, crs, pl.col, cols,
                       0.0f, pl.tbuf, cols);
            scatter_out(pl.tbuf, bias, K, pq, n0, cn, y);
        }
        return;
    }
    for (int64_t n = 0; n < g->n; n++) {
        float *yn = y + n * K * pq;
        if (pl.direct) {
            delta_gemm(false, false, K, pq, crs, 1.0f, w, crs,
                       x + n * g->c * pl.hw, pl.hw, 0.0f, yn, pq);
        } else {
            for (int64_t p0 = 0; p0 < g->p; p0 += pl.band) {
                int64_t p1 = p0 + pl.band < g->p ? p0 + pl.band : g->p;
                int64_t cols = (p1 - p0) * g->q;
                im2col(x, g, n, 1, p0, p1, pl.col);
                delta_gemm(false, false, K, cols, crs, 1.0f, w, crs, pl.col,
                           cols, 0.0f, yn + p0 * g->q, pq);
            }
        }
        if (bias) add_bias_image(yn, bias, K, pq);
    }
}

void delta_k_conv2d_dx(const delta_kargs *k) {
    /* ins: dy (N,K,P,Q), w; outs: dx (N,C,H,W) */
    const delta_tensor *dxt = k->out_t[0], *wt = k->in_t[1];
    conv_plan pl = make_plan(k, dxt->shape, wt->shape);
    const delta_conv_geom *g = &pl.g;
    const float *dy = k->in[0], *w = k->in[1];
    float *dx = k->out[0];
    const int64_t K = g->k, pq = pl.pq, crs = pl.crs;
    if (g->n == 0 || crs == 0) return;
    if (K == 0 || pq == 0) {
        memset(dx, 0, dxt->bytes);
        return;
    }
    if (g->chunk > 1) {
        for (int64_t n0 = 0; n0 < g->n; n0 += g->chunk) {
            int64_t cn = g->n - n0 < g->chunk ? g->n - n0 : g->chunk;
            int64_t cols = cn * pq;
            gather_dy(dy, K, pq, n0, cn, pl.tbuf);
            delta_gemm(true, false, crs, cols, K, 1.0f, w, crs, pl.tbuf, cols,
                       0.0f, pl.col, cols);
            col2im(pl.col, g, n0, cn, 0, g->p, dx, true);
        }
        return;
    }
    for (int64_t n = 0; n < g->n; n++) {
        const float *dyn = dy + n * K * pq;
        if (pl.direct) {
            delta_gemm(true, false, g->c, pl.hw, K, 1.0f, w, crs, dyn, pq,
                       0.0f, dx + n * g->c * pl.hw, pl.hw);
            continue;
        }
        for (int64_t p0 = 0; p0 < g->p; p0 += pl.band) {
            int64_t p1 = p0 + pl.band < g->p ? p0 + pl.band : g->p;
            int64_t cols = (p1 - p0) * g->q;
            delta_gemm(true, false, crs, cols, K, 1.0f, w, crs,
                       dyn + p0 * g->q, pq, 0.0f, pl.col, cols);
            col2im(pl.col, g, n, 1, p0, p1, dx, p0 == 0);
        }
    }
}

void delta_k_conv2d_dw(const delta_kargs *k) {
    /* ins: x (N,C,H,W), dy (N,K,P,Q); outs: dw (K,C,R,S) */
    const delta_tensor *xt = k->in_t[0], *dwt = k->out_t[0];
    conv_plan pl = make_plan(k, xt->shape, dwt->shape);
    const delta_conv_geom *g = &pl.g;
    const float *x = k->in[0], *dy = k->in[1];
    float *dw = k->out[0];
    const int64_t K = g->k, pq = pl.pq, crs = pl.crs;
    if (K == 0 || crs == 0) return;
    if (g->n == 0 || pq == 0) {
        memset(dw, 0, dwt->bytes);
        return;
    }
    float beta = 0.0f; /* the first block overwrites dw, later ones add */
    if (g->chunk > 1) {
        for (int64_t n0 = 0; n0 < g->n; n0 += g->chunk) {
            int64_t cn = g->n - n0 < g->chunk ? g->n - n0 : g->chunk;
            int64_t cols = cn * pq;
            im2col(x, g, n0, cn, 0, g->p, pl.col);
            gather_dy(dy, K, pq, n0, cn, pl.tbuf);
            delta_gemm(false, true, K, crs, cols, 1.0f, pl.tbuf, cols, pl.col,
                       cols, beta, dw, crs);
            beta = 1.0f;
        }
        return;
    }
    for (int64_t n = 0; n < g->n; n++) {
        const float *dyn = dy + n * K * pq;
        if (pl.direct) {
            delta_gemm(false, true, K, g->c, pl.hw, 1.0f, dyn, pq,
                       x + n * g->c * pl.hw, pl.hw, beta, dw, crs);
            beta = 1.0f;
            continue;
        }
        for (int64_t p0 = 0; p0 < g->p; p0 += pl.band) {
            int64_t p1 = p0 + pl.band < g->p ? p0 + pl.band : g->p;
            int64_t cols = (p1 - p0) * g->q;
            im2col(x, g, n, 1, p0, p1, pl.col);
            delta_gemm(false, true, K, crs, cols, 1.0f, dyn + p0 * g->q, pq,
                       pl.col, cols, beta, dw, crs);
            beta = 1.0f;
        }
    }
}

/* Sum of a contiguous run in double, four fixed partial sums. */
static double sum_run(const float *p, int64_t n) {
    double a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        a0 += p[i];
        a1 += p[i + 1];
        a2 += p[i + 2];
        a3 += p[i + 3];
    }
    for (; i < n; i++) a0 += p[i];
    return (a0 + a1) + (a2 + a3);
}

void delta_k_bias_grad_nchw(const delta_kargs *k) {
    /* ins: dy (N,K,P,Q); outs: db (K) */
    const delta_tensor *dyt = k->in_t[0];
    const float *dy = k->in[0];
    float *db = k->out[0];
    const int64_t N = dyt->shape[0], K = dyt->shape[1];
    const int64_t pq = N > 0 && K > 0 ? dyt->numel / (N * K) : 0;
#pragma omp parallel for schedule(static)
    for (int64_t kk = 0; kk < K; kk++) {
        double acc = 0;
        for (int64_t n = 0; n < N; n++)
            acc += sum_run(dy + (n * K + kk) * pq, pq);
        db[kk] = (float)acc;
    }
}
