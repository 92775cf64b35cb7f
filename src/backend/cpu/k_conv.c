/* Convolution kernels: conv2d forward, its gradients w.r.t. input and
 * weight, and the bias gradient.
 *
 * Lowering (see conv_geom.c for the blocks and the workspace layout): the
 * im2col columns of a block of images (or of a band of output rows of one
 * image) are built as col [C*R*S, cols], then
 *   forward  y_blk [K, cols]   = W [K, CRS] . col
 *   dx       col               = W^T . dy_blk [K, cols], then col2im
 *   dw       dW [K, CRS]      += dy_blk . col^T   (blocks in image order)
 * (dx of a stride-1 "same" convolution instead runs as the forward
 * convolution of dy with flipped weights: conv2d_dx_as_forward). 1x1
 * unpadded convolutions skip im2col (stride 1) or gather their columns
 * straight from x (stride > 1).
 * A block of several images orders its columns (p, q, image), image
 * innermost, and x is first copied to xbuf as [C, H, W phase, W / stride,
 * image] (w = (W / stride index) * stride + phase), so that every im2col and
 * col2im step moves one contiguous run of (valid q) * images floats, for any
 * stride; small images (7x7 and below) stay cheap. y_blk / dy_blk are
 * transposed from / to NCHW. A single image (or a band of its output rows)
 * uses y, dy in place (row stride P*Q), and x, dx too when stride is 1.
 *
 * The GEMMs run outside any OpenMP region (the GEMM threads itself); the
 * im2col, col2im and transposes run in parallel over disjoint outputs, each
 * element written by one thread in a fixed order (col2im adds the (r, s)
 * taps of each dx element in order), so results do not depend on the
 * thread count. */
#include "backend/cpu/kernels.h"
#include "backend/cpu/parallel.h"
#include "backend/kernel_shapes.h"
#include "delta/cpu.h"

#include <string.h>

/* Whether a helper loop touching `work` elements runs on the OpenMP team.
 * Not while the GEMMs go to OpenBLAS's own pthread pool: the team woken
 * between two GEMMs keeps spinning through the next one and competes with
 * OpenBLAS's threads for the cores (measured: conv 2x slower on 2 cores
 * with the default OMP_WAIT_POLICY). The helpers are ~10% of the work.
 * Unused without OpenMP (PAR_FOR is empty then), which clang warns of. */
__attribute__((unused)) static inline bool par_ok(int64_t work) {
    return work >= PAR_MIN && !delta_gemm_contends();
}

typedef struct conv_plan {
    delta_conv_geom g;
    int64_t crs, pq, hw;
    int64_t st, wst;   /* stride, ceil(W / stride) */
    bool direct;   /* 1x1, stride 1, no padding, one image a block: no col */
    bool pointwise; /* 1x1, stride 1, no padding: col is xbuf itself */
    bool strided1x1; /* 1x1, stride > 1, no padding: no xbuf, gathers */
    int64_t band;  /* output rows per block when chunk == 1 */
    float *col;    /* [CRS, cols] */
    float *tbuf;   /* chunk > 1: [K, (p, q, image)] */
    float *xbuf;   /* chunk > 1 or stride > 1: [C, H, st, wst, image] */
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
    pl.st = g->stride;
    pl.wst = (g->w + pl.st - 1) / pl.st;
    pl.pointwise = g->r == 1 && g->s == 1 && g->stride == 1 && g->pad == 0;
    pl.strided1x1 = g->r == 1 && g->s == 1 && g->stride > 1 && g->pad == 0;
    size_t need = delta_conv_workspace(g, k->op->type);
    DELTA_ASSERTF(k->op->workspace >= need && (need == 0 || k->ws),
                  "%s: workspace %zu bytes, the kernel needs %zu",
                  k->op->name, k->op->workspace, need);
    pl.band = g->p;
    const int64_t xplane =
        pl.strided1x1 ? 0 : g->c * g->h * pl.st * pl.wst;
    if (g->chunk > 1) {
        pl.col = (float *)k->ws;
        pl.tbuf = pl.col + pl.crs * g->chunk * pl.pq;
        pl.xbuf = pl.tbuf + g->k * g->chunk * pl.pq;
        if (pl.pointwise) pl.col = pl.xbuf;
    } else if (need == 0) {
        pl.direct = true;
    } else {
        size_t xbytes = (size_t)(pl.st > 1 ? xplane : 0) * sizeof(float);
        pl.band = (int64_t)((need - xbytes) /
                            ((size_t)pl.crs * (size_t)g->q * sizeof(float)));
        if (pl.band < 1) pl.band = 1;
        if (pl.band > g->p) pl.band = g->p;
        pl.col = (float *)k->ws;
        if (pl.st > 1 && xplane) pl.xbuf = pl.col + pl.band * pl.crs * g->q;
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

/* Output rows p in [p0, p1) whose input row p*stride - pad + r lies in
 * [0, H): [*lo, *hi). */
static inline void p_range(const delta_conv_geom *g, int64_t r, int64_t p0,
                           int64_t p1, int64_t *lo, int64_t *hi) {
    int64_t a = p0, b = p1;
    while (a < b && a * g->stride - g->pad + r < 0) a++;
    while (b > a && (b - 1) * g->stride - g->pad + r >= g->h) b--;
    *lo = a;
    *hi = b;
}

/* Where tap s's input columns start in an xbuf row: the phase-major row
 * offset of input column q*stride - pad + s is (this) + q. */
static inline int64_t tap_offset(const conv_plan *pl, int64_t s) {
    const int64_t st = pl->st, d = s - pl->g.pad;
    const int64_t ph = ((d % st) + st) % st;
    return ph * pl->wst + (d - ph) / st;
}

static inline void zero_f(float *d, int64_t n) {
    if (n > 16) {
        memset(d, 0, (size_t)n * sizeof(float));
    } else {
        for (int64_t j = 0; j < n; j++) d[j] = 0.0f;
    }
}

static inline void copy_f(float *d, const float *s, int64_t n) {
    if (n > 16) {
        memcpy(d, s, (size_t)n * sizeof(float));
    } else {
        for (int64_t j = 0; j < n; j++) d[j] = s[j];
    }
}

/* xbuf[c, h, ph, wq, i] = x[n0 + i, c, h, wq*st + ph] (0 past W). */
static void to_xbuf(const float *x, const conv_plan *pl, int64_t n0,
                    int64_t m, float *xt) {
    const int64_t C = pl->g.c, H = pl->g.h, W = pl->g.w, st = pl->st,
                  wst = pl->wst;
    const int64_t rows = C * H;
    PAR_FOR(par_ok(rows * st * wst * m))
    for (int64_t t = 0; t < rows; t++) {
        float *d = xt + t * st * wst * m;
        const int64_t c = t / H, h = t % H;
        for (int64_t ph = 0; ph < st; ph++)
            for (int64_t wq = 0; wq < wst; wq++, d += m) {
                const int64_t w = wq * st + ph;
                if (w >= W) {
                    zero_f(d, m);
                    continue;
                }
                const float *s = x + ((n0 * C + c) * H + h) * W + w;
                for (int64_t i = 0; i < m; i++) d[i] = s[i * C * H * W];
            }
    }
}

/* dx[n0 + i, c, h, w] = xbuf[c, h, w % st, w / st, i] */
static void from_xbuf(const float *xt, const conv_plan *pl, int64_t n0,
                      int64_t m, float *dx) {
    const int64_t C = pl->g.c, H = pl->g.h, W = pl->g.w, st = pl->st,
                  wst = pl->wst;
    const int64_t rows = C * H;
    PAR_FOR(par_ok(rows * st * wst * m))
    for (int64_t t = 0; t < rows; t++) {
        const float *sr = xt + t * st * wst * m;
        const int64_t c = t / H, h = t % H;
        for (int64_t i = 0; i < m; i++) {
            float *d = dx + (((n0 + i) * C + c) * H + h) * W;
            for (int64_t ph = 0; ph < st; ph++) {
                const float *sp = sr + ph * wst * m + i;
                const int64_t nw = (W - ph + st - 1) / st;
                for (int64_t wq = 0; wq < nw; wq++)
                    d[wq * st + ph] = sp[wq * m];
            }
        }
    }
}

/* 1x1 taps, no padding, stride > 1: col[c][(p*Q + q)*m + i] =
 * x[n0 + i, c, p*st, q*st] straight from NCHW (a copy of x would cost more
 * than the columns). Output rows [p0, p1). */
static void gather_strided(const float *x, const conv_plan *pl, int64_t n0,
                           int64_t m, int64_t p0, int64_t p1, float *col) {
    const int64_t C = pl->g.c, H = pl->g.h, W = pl->g.w, Q = pl->g.q,
                  st = pl->st;
    const int64_t ld = (p1 - p0) * Q * m;
    PAR_FOR(par_ok(C * (p1 - p0) * Q * m))
    for (int64_t c = 0; c < C; c++) {
        float *d = col + c * ld;
        for (int64_t p = p0; p < p1; p++) {
            const float *xr = x + ((n0 * C + c) * H + p * st) * W;
            if (m == 1) {
                for (int64_t q = 0; q < Q; q++) d[q] = xr[q * st];
                d += Q;
                continue;
            }
            for (int64_t q = 0; q < Q; q++, d += m)
                for (int64_t i = 0; i < m; i++)
                    d[i] = xr[i * C * H * W + q * st];
        }
    }
}

/* The adjoint of gather_strided for whole images: dx[n0 + i, c, h, w] =
 * col[c][(h/st*Q + w/st)*m + i] where st divides h and w, else 0. */
static void scatter_strided(const float *col, const conv_plan *pl,
                            int64_t n0, int64_t m, float *dx) {
    const int64_t C = pl->g.c, H = pl->g.h, W = pl->g.w, P = pl->g.p,
                  Q = pl->g.q, st = pl->st;
    const int64_t ld = P * Q * m;
    const int64_t planes = m * C;
    PAR_FOR(par_ok(planes * H * W))
    for (int64_t t = 0; t < planes; t++) {
        const int64_t i = t / C, c = t % C;
        const float *sc = col + c * ld + i;
        float *d = dx + ((n0 + i) * C + c) * H * W;
        zero_f(d, H * W);
        for (int64_t p = 0; p < P; p++) {
            float *dr = d + p * st * W;
            const float *sr = sc + p * Q * m;
            for (int64_t q = 0; q < Q; q++) dr[q * st] = sr[q * m];
        }
    }
}

/* scatter_strided for output rows [p0, p1) of image n (m = 1): writes dx
 * rows [p0*st, p1*st), or through H for the last band. */
static void scatter_strided_band(const float *col, const conv_plan *pl,
                                 int64_t n, int64_t p0, int64_t p1,
                                 float *dx) {
    const int64_t C = pl->g.c, H = pl->g.h, W = pl->g.w, Q = pl->g.q,
                  st = pl->st;
    const int64_t ld = (p1 - p0) * Q;
    const int64_t h0 = p0 * st;
    const int64_t h1 = p1 == pl->g.p || p1 * st > H ? H : p1 * st;
    PAR_FOR(par_ok(C * (h1 - h0) * W))
    for (int64_t c = 0; c < C; c++) {
        for (int64_t h = h0; h < h1; h++) {
            float *dr = dx + ((n * C + c) * H + h) * W;
            zero_f(dr, W);
            if (h % st) continue;
            const float *sr = col + c * ld + (h / st - p0) * Q;
            for (int64_t q = 0; q < Q; q++) dr[q * st] = sr[q];
        }
    }
}

/* im2col of xt (xbuf layout with m images; for stride 1 and m = 1 a plain
 * CHW image) for output rows [p0, p1):
 *   col[(c*R + r)*S + s][((p - p0)*Q + q)*m + i].
 * One task per (c, r); each col row is written front to back. */
static void im2col(const float *xt, const conv_plan *pl, int64_t m,
                   int64_t p0, int64_t p1, float *col) {
    const delta_conv_geom *g = &pl->g;
    const int64_t C = g->c, R = g->r, S = g->s, H = g->h, Q = g->q,
                  st = g->stride, pad = g->pad, xrow = pl->st * pl->wst;
    const int64_t ld = (p1 - p0) * Q * m, qm = Q * m;
    const int64_t tasks = C * R;
    PAR_FOR(par_ok(C * R * S * ld))
    for (int64_t t = 0; t < tasks; t++) {
        const int64_t r = t % R, c = t / R;
        int64_t pa, pb;
        p_range(g, r, p0, p1, &pa, &pb);
        const float *xc = xt + c * H * xrow * m;
        for (int64_t s = 0; s < S; s++) {
            int64_t qlo, qhi;
            q_range(g, s, &qlo, &qhi);
            const int64_t off = tap_offset(pl, s) + qlo;
            float *row = col + ((c * R + r) * S + s) * ld;
            zero_f(row, (pa - p0) * qm);
            for (int64_t p = pa; p < pb; p++) {
                float *d = row + (p - p0) * qm;
                const float *src = xc + ((p * st - pad + r) * xrow + off) * m;
                zero_f(d, qlo * m);
                copy_f(d + qlo * m, src, (qhi - qlo) * m);
                zero_f(d + qhi * m, (Q - qhi) * m);
            }
            zero_f(row + (pb - p0) * qm, (p1 - pb) * qm);
        }
    }
}

/* dxt (xbuf layout, or a plain CHW image for stride 1 and m = 1) (+)= the
 * col2im of col (layout as im2col's), the taps (r, s) of each element
 * added in order; `first` zeroes dxt first. One task per channel. */
static void col2im(const float *col, const conv_plan *pl, int64_t m,
                   int64_t p0, int64_t p1, float *dxt, bool first) {
    const delta_conv_geom *g = &pl->g;
    const int64_t C = g->c, R = g->r, S = g->s, H = g->h, Q = g->q,
                  st = g->stride, pad = g->pad, xrow = pl->st * pl->wst;
    const int64_t ld = (p1 - p0) * Q * m, qm = Q * m;
    PAR_FOR(par_ok(C * R * S * ld))
    for (int64_t c = 0; c < C; c++) {
        float *xc = dxt + c * H * xrow * m;
        if (first) zero_f(xc, H * xrow * m);
        for (int64_t r = 0; r < R; r++) {
            int64_t pa, pb;
            p_range(g, r, p0, p1, &pa, &pb);
            for (int64_t s = 0; s < S; s++) {
                int64_t qlo, qhi;
                q_range(g, s, &qlo, &qhi);
                const int64_t off = tap_offset(pl, s) + qlo;
                const int64_t n = (qhi - qlo) * m;
                const float *row = col + ((c * R + r) * S + s) * ld;
                for (int64_t p = pa; p < pb; p++) {
                    const float *sp = row + (p - p0) * qm + qlo * m;
                    float *d = xc + ((p * st - pad + r) * xrow + off) * m;
                    SIMD
                    for (int64_t j = 0; j < n; j++) d[j] += sp[j];
                }
            }
        }
    }
}

/* xt[c, hw, i] = x[n0 + i, c, hw] for a block of m images. */
static void to_image_inner(const float *x, int64_t C, int64_t hw, int64_t n0,
                           int64_t m, float *xt) {
    PAR_FOR(par_ok(C * hw * m))
    for (int64_t c = 0; c < C; c++) {
        float *d = xt + c * hw * m;
        for (int64_t i = 0; i < m; i++) {
            const float *s = x + ((n0 + i) * C + c) * hw;
            for (int64_t j = 0; j < hw; j++) d[j * m + i] = s[j];
        }
    }
}

/* x[n0 + i, c, hw] = xt[c, hw, i] (+ bias[c]) for a block of m images. */
static void from_image_inner(const float *xt, const float *bias, int64_t C,
                             int64_t hw, int64_t n0, int64_t m, float *x) {
    PAR_FOR(par_ok(C * hw * m))
    for (int64_t c = 0; c < C; c++) {
        const float *s = xt + c * hw * m;
        const float b = bias ? bias[c] : 0.0f;
        for (int64_t i = 0; i < m; i++) {
            float *d = x + ((n0 + i) * C + c) * hw;
            if (bias) {
                for (int64_t j = 0; j < hw; j++) d[j] = s[j * m + i] + b;
            } else {
                for (int64_t j = 0; j < hw; j++) d[j] = s[j * m + i];
            }
        }
    }
}

/* y[n, k, :] += bias[k] for the planes of image n. */
static void add_bias_image(float *y, const float *bias, int64_t K,
                           int64_t pq) {
    PAR_FOR(par_ok(K * pq))
    for (int64_t kk = 0; kk < K; kk++) {
        float b = bias[kk], *d = y + kk * pq;
        SIMD
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
            int64_t m = g->n - n0 < g->chunk ? g->n - n0 : g->chunk;
            int64_t cols = m * pq;
            if (pl.strided1x1) {
                gather_strided(x, &pl, n0, m, 0, g->p, pl.col);
            } else {
                to_xbuf(x, &pl, n0, m, pl.xbuf);
                if (!pl.pointwise) im2col(pl.xbuf, &pl, m, 0, g->p, pl.col);
            }
            delta_gemm(false, false, K, cols, crs, 1.0f, w, crs, pl.col, cols,
                       0.0f, pl.tbuf, cols);
            from_image_inner(pl.tbuf, bias, K, pq, n0, m, y);
        }
        return;
    }
    for (int64_t n = 0; n < g->n; n++) {
        const float *xn = x + n * g->c * pl.hw;
        float *yn = y + n * K * pq;
        if (pl.direct) {
            delta_gemm(false, false, K, pq, crs, 1.0f, w, crs, xn, pl.hw,
                       0.0f, yn, pq);
        } else {
            const float *xs = xn;
            if (pl.xbuf) {
                to_xbuf(x, &pl, n, 1, pl.xbuf);
                xs = pl.xbuf;
            }
            for (int64_t p0 = 0; p0 < g->p; p0 += pl.band) {
                int64_t p1 = p0 + pl.band < g->p ? p0 + pl.band : g->p;
                int64_t cols = (p1 - p0) * g->q;
                if (pl.strided1x1)
                    gather_strided(x, &pl, n, 1, p0, p1, pl.col);
                else
                    im2col(xs, &pl, 1, p0, p1, pl.col);
                delta_gemm(false, false, K, cols, crs, 1.0f, w, crs, pl.col,
                           cols, 0.0f, yn + p0 * g->q, pq);
            }
        }
        if (bias) add_bias_image(yn, bias, K, pq);
    }
}

/* conv2d_dx of a stride-1 "same" convolution (square odd kernel, padding
 * (R-1)/2: P = H, Q = W) as the forward convolution of dy with the
 * flipped, transposed weights wf[c, k, r, s] = w[k, c, R-1-r, S-1-s]: one
 * GEMM with a K*R*S-long reduction instead of a K-long one plus col2im.
 * Not worth flipping the weights when they outweigh the data (N*H*W
 * small); only for K <= C (see conv_geom.c, which has the same test and
 * the workspace layout). */
static bool dx_as_forward(const delta_conv_geom *g) {
    return g->stride == 1 && g->r == g->s && g->r > 1 &&
           2 * g->pad == g->r - 1 && g->k <= g->c &&
           g->n * g->h * g->w >= 512;
}

static void conv2d_dx_as_forward(const delta_kargs *k, const conv_plan *pl) {
    const delta_conv_geom *g = &pl->g;
    const float *dy = k->in[0], *w = k->in[1];
    float *dx = k->out[0];
    const int64_t C = g->c, K = g->k, R = g->r, S = g->s, hw = pl->hw;
    const int64_t krs = K * R * S;
    /* the transposed convolution: input dy (K, P, Q), output dx (C, H, W) */
    conv_plan t;
    memset(&t, 0, sizeof t);
    t.g = *g;
    t.g.c = K;
    t.g.h = g->p;
    t.g.w = g->q;
    t.g.k = C;
    t.g.p = g->h;
    t.g.q = g->w;
    t.st = 1;
    t.wst = t.g.w;
    size_t need = delta_conv_workspace(g, DELTA_OP_CONV2D_DX);
    size_t wbytes = (size_t)(krs * C) * sizeof(float);
    float *col = (float *)k->ws, *tbuf = NULL, *xbuf = NULL, *wf;
    int64_t band = g->h;
    if (g->chunk > 1) {
        tbuf = col + krs * g->chunk * hw;
        xbuf = tbuf + K * g->chunk * hw;
        wf = xbuf + C * g->chunk * hw;
    } else {
        band = (int64_t)((need - wbytes) /
                         ((size_t)krs * (size_t)g->w * sizeof(float)));
        if (band < 1) band = 1;
        if (band > g->h) band = g->h;
        wf = col + band * krs * g->w;
    }
    /* a [K, C] -> [C, K] transpose of R*S-float cells, in 16 x 16 tiles */
    const int64_t rs = R * S, cblocks = (C + 15) / 16;
    PAR_FOR(par_ok(C * K * rs))
    for (int64_t cb = 0; cb < cblocks; cb++) {
        const int64_t c0 = cb * 16, c1 = c0 + 16 < C ? c0 + 16 : C;
        for (int64_t k0 = 0; k0 < K; k0 += 16) {
            const int64_t k1 = k0 + 16 < K ? k0 + 16 : K;
            for (int64_t kk = k0; kk < k1; kk++)
                for (int64_t c = c0; c < c1; c++) {
                    const float *src = w + (kk * C + c) * rs;
                    float *dst = wf + (c * K + kk) * rs;
                    for (int64_t j = 0; j < rs; j++) dst[j] = src[rs - 1 - j];
                }
        }
    }
    if (g->chunk > 1) {
        for (int64_t n0 = 0; n0 < g->n; n0 += g->chunk) {
            int64_t m = g->n - n0 < g->chunk ? g->n - n0 : g->chunk;
            int64_t cols = m * hw;
            to_image_inner(dy, K, hw, n0, m, tbuf);
            im2col(tbuf, &t, m, 0, g->h, col);
            delta_gemm(false, false, C, cols, krs, 1.0f, wf, krs, col, cols,
                       0.0f, xbuf, cols);
            from_image_inner(xbuf, NULL, C, hw, n0, m, dx);
        }
        return;
    }
    for (int64_t n = 0; n < g->n; n++) {
        const float *dyn = dy + n * K * hw;
        float *dxn = dx + n * C * hw;
        for (int64_t h0 = 0; h0 < g->h; h0 += band) {
            int64_t h1 = h0 + band < g->h ? h0 + band : g->h;
            int64_t cols = (h1 - h0) * g->w;
            im2col(dyn, &t, 1, h0, h1, col);
            delta_gemm(false, false, C, cols, krs, 1.0f, wf, krs, col, cols,
                       0.0f, dxn + h0 * g->w, hw);
        }
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
    if (g->n == 0 || crs == 0 || pl.hw == 0) return;
    if (K == 0 || pq == 0) {
        memset(dx, 0, dxt->bytes);
        return;
    }
    if (dx_as_forward(g)) {
        conv2d_dx_as_forward(k, &pl);
        return;
    }
    if (g->chunk > 1) {
        for (int64_t n0 = 0; n0 < g->n; n0 += g->chunk) {
            int64_t m = g->n - n0 < g->chunk ? g->n - n0 : g->chunk;
            int64_t cols = m * pq;
            to_image_inner(dy, K, pq, n0, m, pl.tbuf);
            delta_gemm(true, false, crs, cols, K, 1.0f, w, crs, pl.tbuf, cols,
                       0.0f, pl.col, cols);
            if (pl.strided1x1) {
                scatter_strided(pl.col, &pl, n0, m, dx);
                continue;
            }
            if (!pl.pointwise) col2im(pl.col, &pl, m, 0, g->p, pl.xbuf, true);
            from_xbuf(pl.xbuf, &pl, n0, m, dx);
        }
        return;
    }
    for (int64_t n = 0; n < g->n; n++) {
        const float *dyn = dy + n * K * pq;
        float *dxn = dx + n * g->c * pl.hw;
        if (pl.direct) {
            delta_gemm(true, false, g->c, pl.hw, K, 1.0f, w, crs, dyn, pq,
                       0.0f, dxn, pl.hw);
            continue;
        }
        if (pl.strided1x1) { /* the columns of a band are its rows' only
                                inputs: scatter band by band */
            for (int64_t p0 = 0; p0 < g->p; p0 += pl.band) {
                int64_t p1 = p0 + pl.band < g->p ? p0 + pl.band : g->p;
                int64_t cols = (p1 - p0) * g->q;
                delta_gemm(true, false, crs, cols, K, 1.0f, w, crs,
                           dyn + p0 * g->q, pq, 0.0f, pl.col, cols);
                scatter_strided_band(pl.col, &pl, n, p0, p1, dx);
            }
            continue;
        }
        float *dxs = pl.xbuf ? pl.xbuf : dxn;
        for (int64_t p0 = 0; p0 < g->p; p0 += pl.band) {
            int64_t p1 = p0 + pl.band < g->p ? p0 + pl.band : g->p;
            int64_t cols = (p1 - p0) * g->q;
            delta_gemm(true, false, crs, cols, K, 1.0f, w, crs,
                       dyn + p0 * g->q, pq, 0.0f, pl.col, cols);
            col2im(pl.col, &pl, 1, p0, p1, dxs, p0 == 0);
        }
        if (pl.xbuf) from_xbuf(pl.xbuf, &pl, n, 1, dx);
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
            int64_t m = g->n - n0 < g->chunk ? g->n - n0 : g->chunk;
            int64_t cols = m * pq;
            if (pl.strided1x1) {
                gather_strided(x, &pl, n0, m, 0, g->p, pl.col);
            } else {
                to_xbuf(x, &pl, n0, m, pl.xbuf);
                if (!pl.pointwise) im2col(pl.xbuf, &pl, m, 0, g->p, pl.col);
            }
            to_image_inner(dy, K, pq, n0, m, pl.tbuf);
            delta_gemm(false, true, K, crs, cols, 1.0f, pl.tbuf, cols, pl.col,
                       cols, beta, dw, crs);
            beta = 1.0f;
        }
        return;
    }
    for (int64_t n = 0; n < g->n; n++) {
        const float *xn = x + n * g->c * pl.hw;
        const float *dyn = dy + n * K * pq;
        if (pl.direct) {
            delta_gemm(false, true, K, g->c, pl.hw, 1.0f, dyn, pq, xn, pl.hw,
                       beta, dw, crs);
            beta = 1.0f;
            continue;
        }
        const float *xs = xn;
        if (pl.xbuf) {
            to_xbuf(x, &pl, n, 1, pl.xbuf);
            xs = pl.xbuf;
        }
        for (int64_t p0 = 0; p0 < g->p; p0 += pl.band) {
            int64_t p1 = p0 + pl.band < g->p ? p0 + pl.band : g->p;
            int64_t cols = (p1 - p0) * g->q;
            if (pl.strided1x1)
                gather_strided(x, &pl, n, 1, p0, p1, pl.col);
            else
                im2col(xs, &pl, 1, p0, p1, pl.col);
            delta_gemm(false, true, K, crs, cols, 1.0f, dyn + p0 * g->q, pq,
                       pl.col, cols, beta, dw, crs);
            beta = 1.0f;
        }
    }
}


void delta_k_bias_grad_nchw(const delta_kargs *k) {
    /* ins: dy (N,K,P,Q); outs: db (K) */
    const delta_tensor *dyt = k->in_t[0];
    const float *dy = k->in[0];
    float *db = k->out[0];
    const int64_t N = dyt->shape[0], K = dyt->shape[1];
    const int64_t pq = N > 0 && K > 0 ? dyt->numel / (N * K) : 0;
    PAR_FOR(N * K * pq >= PAR_MIN)
    for (int64_t kk = 0; kk < K; kk++) {
        double acc = 0;
        for (int64_t n = 0; n < N; n++)
            acc += delta_run_sum(dy + (n * K + kk) * pq, pq);
        db[kk] = (float)acc;
    }
}
