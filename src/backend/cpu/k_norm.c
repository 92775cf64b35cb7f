/* Normalization kernels: batch norm (training and eval), its gradient and
 * running-statistics update, the fused batch norm + ReLU and batch norm +
 * add + ReLU; layer norm and its gradient.
 *
 * The fused kernels are the batch norm kernel with the chain's elementwise
 * steps folded into its last loop: each element goes through the float
 * operations the unfused ops do, in their order (y = x·scale + shift, + r,
 * then relu), rounded where the unfused ops stored a BF16 tensor (the batch
 * norm's output, the sum), so fused and unfused give the same bits in
 * either dtype. Their gradient is the chain's: relu_bwd and batchnorm_bwd
 * (autograd.c).
 *
 * Statistics are accumulated in double (layer norm's short rows: in float
 * lanes combined in double), each one by a single thread in a fixed order
 * (batch norm: parallel over channels, each channel summed image by image;
 * layer norm: parallel over rows; its dgamma/dbeta: parallel over column
 * blocks, each summed row by row), so results do not depend on the thread
 * count.
 *
 * Batch norm, its fused forms and layer norm (and their gradients) take x,
 * r, y, dy and dx in F32 or BF16 with one body (k_dtype.h: each body is
 * compiled for both, called with a literal dtype inside the parallel
 * loop); gamma, beta and the statistics stay F32, and so does the running
 * update. */
#include "backend/cpu/k_dtype.h"
#include "backend/cpu/kernels.h"
#include "backend/kernel_shapes.h"
#include "backend/cpu/parallel.h"
#include "delta/cpu.h"

#include <math.h>
#include <string.h>

/* Reductions in double over 8 fixed lanes (element j goes to lane j % 8,
 * lanes combined in a fixed tree), so they vectorize and their result does
 * not depend on anything but the data. */
#define LANES 8

static inline double lanes_total(const double *a) {
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* Σ p[i] */
K_BODY double dsum(const void *p, int64_t n, bool bf) {
    double a[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) a[l] += k_ld(p, i + l, bf);
    for (int l = 0; i < n; i++, l++) a[l] += k_ld(p, i, bf);
    return lanes_total(a);
}

/* Σ (p[i] - m)^2 */
K_BODY double dsum_sq_dev(const void *p, int64_t n, double m, bool bf) {
    double a[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            double d = k_ld(p, i + l, bf) - m;
            a[l] += d * d;
        }
    for (int l = 0; i < n; i++, l++) {
        double d = k_ld(p, i, bf) - m;
        a[l] += d * d;
    }
    return lanes_total(a);
}

/* *s_dy += Σ dy[i], *s_dyx += Σ dy[i] (x[i] - m) */
K_BODY void dsum2(const void *dy, const void *x, int64_t n, double m,
                  double *s_dy, double *s_dyx, bool bf) {
    double a[LANES] = {0}, b[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            a[l] += k_ld(dy, i + l, bf);
            b[l] += (double)k_ld(dy, i + l, bf) * (k_ld(x, i + l, bf) - m);
        }
    for (int l = 0; i < n; i++, l++) {
        a[l] += k_ld(dy, i, bf);
        b[l] += (double)k_ld(dy, i, bf) * (k_ld(x, i, bf) - m);
    }
    *s_dy += lanes_total(a);
    *s_dyx += lanes_total(b);
}

/* Row reductions for layer norm: float partial sums in 8 fixed lanes
 * (rows are short, a few hundred to a few thousand elements), lanes
 * combined in double in a fixed tree. */
static inline double flanes_total(const float *a) {
    return (((double)a[0] + a[1]) + ((double)a[2] + a[3])) +
           (((double)a[4] + a[5]) + ((double)a[6] + a[7]));
}

K_BODY double fsum(const void *p, int64_t n, bool bf) {
    float a[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) a[l] += k_ld(p, i + l, bf);
    for (int l = 0; i < n; i++, l++) a[l] += k_ld(p, i, bf);
    return flanes_total(a);
}

K_BODY double fsum_sq_dev(const void *p, int64_t n, float m, bool bf) {
    float a[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            float d = k_ld(p, i + l, bf) - m;
            a[l] += d * d;
        }
    for (int l = 0; i < n; i++, l++) {
        float d = k_ld(p, i, bf) - m;
        a[l] += d * d;
    }
    return flanes_total(a);
}

/* What the fused forms do after v = x·sc + sh: relu(v), or with r
 * relu(v + r[i]); the unfused chain's float operations in its order. In
 * BF16 the chain rounded the batch norm's output, then the sum, so v and
 * v + r are rounded here too (k_round: nothing in F32). relu is exact and
 * comes after the rounding, as the unfused relu sees its input: a tiny
 * negative v that rounds to -0 stays -0 (-0 < 0 is false), a NaN stays the
 * rounded NaN. Plain batch norm (!relu) returns v: the caller's k_st is
 * its one rounding. */
K_BODY float bn_epilogue(float v, const void *r, int64_t i, bool relu,
                         bool bf) {
    if (!relu) return v;
    v = k_round(v, bf);
    if (r) v = k_round(v + k_ld(r, i, bf), bf);
    return v < 0.0f ? 0.0f : v;
}

/* y = bn_epilogue(x·sc + sh) over n elements; r and y are x's dtype. */
K_BODY void bn_apply(const void *x, const void *r, void *y, int64_t n,
                     float sc, float sh, bool relu, bool bf) {
    if (r) {
        SIMD
        for (int64_t i = 0; i < n; i++)
            k_st(y, i, bn_epilogue(k_ld(x, i, bf) * sc + sh, r, i, true, bf),
                 bf);
    } else if (relu) {
        SIMD
        for (int64_t i = 0; i < n; i++)
            k_st(y, i,
                 bn_epilogue(k_ld(x, i, bf) * sc + sh, NULL, i, true, bf), bf);
    } else {
        SIMD
        for (int64_t i = 0; i < n; i++)
            k_st(y, i, k_ld(x, i, bf) * sc + sh, bf);
    }
}

/* Batch norm's operands as bn_forward unpacks them. */
typedef struct bn_fwd_args {
    bn_shape s;
    const void *x, *r; /* r (x's dtype) or NULL */
    const float *gamma, *beta, *rmean, *rvar; /* rmean, rvar or NULL */
    void *y;
    float *mean, *var;
    double eps;
    bool relu;
} bn_fwd_args;

/* Channel c: its statistics (or the running ones), then y for hw > 1. */
K_BODY void bn_fwd_channel(const bn_fwd_args *a, int64_t c, bool bf) {
    const int64_t C = a->s.c, hw = a->s.hw, count = a->s.n * a->s.hw;
    double m, v;
    if (a->rmean) {
        m = a->rmean[c];
        v = a->rvar[c];
    } else {
        double acc = 0;
        for (int64_t n = 0; n < a->s.n; n++)
            acc += dsum(k_at(a->x, (n * C + c) * hw, bf), hw, bf);
        m = count > 0 ? acc / (double)count : 0.0;
        acc = 0;
        for (int64_t n = 0; n < a->s.n; n++)
            acc += dsum_sq_dev(k_at(a->x, (n * C + c) * hw, bf), hw, m, bf);
        v = count > 0 ? acc / (double)count : 0.0;
    }
    a->mean[c] = (float)m;
    a->var[c] = (float)v;
    if (hw == 1) return; /* (N, C): written by bn_fwd_row */
    double rstd = 1.0 / sqrt(v + a->eps);
    float sc = (float)(a->gamma[c] * rstd);
    float sh = (float)(a->beta[c] - m * a->gamma[c] * rstd);
    for (int64_t n = 0; n < a->s.n; n++) {
        const int64_t o = (n * C + c) * hw;
        bn_apply(k_at(a->x, o, bf), a->r ? k_at(a->r, o, bf) : NULL,
                 k_at_mut(a->y, o, bf), hw, sc, sh, a->relu, bf);
    }
}

/* (N, C): row n of y, each channel's scale and shift recomputed from
 * mean/var (the same arithmetic as bn_fwd_channel). */
K_BODY void bn_fwd_row(const bn_fwd_args *a, int64_t n, bool bf) {
    const int64_t C = a->s.c;
    const void *xp = k_at(a->x, n * C, bf);
    const void *rp = a->r ? k_at(a->r, n * C, bf) : NULL;
    void *yp = k_at_mut(a->y, n * C, bf);
    for (int64_t c = 0; c < C; c++) {
        double m = a->rmean ? (double)a->rmean[c] : (double)a->mean[c];
        double v = a->rmean ? (double)a->rvar[c] : (double)a->var[c];
        double rstd = 1.0 / sqrt(v + a->eps);
        float sc = (float)(a->gamma[c] * rstd);
        float sh = (float)(a->beta[c] - m * a->gamma[c] * rstd);
        k_st(yp, c,
             bn_epilogue(k_ld(xp, c, bf) * sc + sh, rp, c, a->relu, bf), bf);
    }
}

/* Batch norm (relu: then relu; r: then + r and relu). ins: x, gamma, beta,
 * [r,] [rmean, rvar]; outs: y, mean, var. */
static void bn_forward(const delta_kargs *k, bool has_r, bool relu) {
    const int ri = has_r ? 4 : 3; /* the running stats' first input */
    const bool use_running = !k->env->training && k->op->n_in >= ri + 2;
    const bn_fwd_args a = {
        .s = bn_shape_of(k->in_t[0]),
        .x = k->in[0], .gamma = k->in[1], .beta = k->in[2],
        .r = has_r ? k->in[3] : NULL,
        .rmean = use_running ? k->in[ri] : NULL,
        .rvar = use_running ? k->in[ri + 1] : NULL,
        .y = k->out[0], .mean = k->out[1], .var = k->out[2],
        .eps = k->op->a.eps, .relu = relu,
    };
    const bool bf = k_is_bf16(k->in_t[0]);
    const int64_t C = a.s.c;
    PAR_FOR(C * a.s.n * a.s.hw >= PAR_MIN)
    for (int64_t c = 0; c < C; c++) {
        if (bf) bn_fwd_channel(&a, c, true);
        else bn_fwd_channel(&a, c, false);
    }
    if (a.s.hw != 1) return;
    PAR_FOR(C * a.s.n >= PAR_MIN)
    for (int64_t n = 0; n < a.s.n; n++) {
        if (bf) bn_fwd_row(&a, n, true);
        else bn_fwd_row(&a, n, false);
    }
}

void delta_k_batchnorm(const delta_kargs *k) { bn_forward(k, false, false); }

void delta_k_batchnorm_relu(const delta_kargs *k) {
    bn_forward(k, false, true);
}

void delta_k_batchnorm_add_relu(const delta_kargs *k) {
    bn_forward(k, true, true);
}

void delta_k_bn_running_update(const delta_kargs *k) {
    /* ins: mean, var, rmean, rvar; outs: rmean, rvar (in place) */
    if (!k->env->training) return;
    const int64_t C = k->in_t[0]->numel;
    const float *mean = k->in[0], *var = k->in[1];
    const float *rm_in = k->in[2], *rv_in = k->in[3];
    float *rm = k->out[0], *rv = k->out[1];
    const double m = k->op->a.momentum, cnt = k->op->a.count;
    const double unbias = cnt > 1 ? cnt / (cnt - 1) : 1.0;
    for (int64_t c = 0; c < C; c++) {
        rm[c] = (float)((1.0 - m) * rm_in[c] + m * mean[c]);
        rv[c] = (float)((1.0 - m) * rv_in[c] + m * (var[c] * unbias));
    }
}

/* Channel c of batch norm's gradient. ins: x, gamma, mean, var, dy; outs:
 * dx, dgamma, dbeta (either of the last two may be absent). */
K_BODY void bn_bwd_channel(const delta_kargs *k, const bn_shape *s,
                           int64_t c, bool bf) {
    const void *x = k->in[0], *dy = k->in[4];
    const float *gamma = k->in[1], *mean = k->in[2], *var = k->in[3];
    void *dx = k->out[0];
    float *dgamma = k->op->n_out > 1 ? k->out[1] : NULL;
    float *dbeta = k->op->n_out > 2 ? k->out[2] : NULL;
    const int64_t C = s->c, hw = s->hw, count = s->n * s->hw;
    const double m = mean[c];
    const double rstd = 1.0 / sqrt((double)var[c] + k->op->a.eps);
    double sdy = 0, sdyx = 0;
    if (hw == 1) {
        for (int64_t n = 0; n < s->n; n++) {
            double d = k_ld(dy, n * C + c, bf);
            sdy += d;
            sdyx += d * (k_ld(x, n * C + c, bf) - m);
        }
    } else {
        for (int64_t n = 0; n < s->n; n++)
            dsum2(k_at(dy, (n * C + c) * hw, bf),
                  k_at(x, (n * C + c) * hw, bf), hw, m, &sdy, &sdyx, bf);
    }
    const double dg = sdyx * rstd; /* Σ dy · xhat */
    if (dgamma) dgamma[c] = (float)dg;
    if (dbeta) dbeta[c] = (float)sdy;
    if (!dx || count == 0) return;
    /* dx = gamma rstd (dy - Σdy/M - xhat Σ(dy xhat)/M)
     *    = a dy + b (x - mean) + e with a, b, e per channel */
    const double g = gamma[c];
    const double a = g * rstd;
    const double b = -g * rstd * rstd * dg / (double)count;
    const double e = -a * sdy / (double)count;
    const float fa = (float)a, fb = (float)b, fe = (float)e, fm = mean[c];
    for (int64_t n = 0; n < s->n; n++) {
        const int64_t o = (n * C + c) * hw;
        const void *xp = k_at(x, o, bf), *dyp = k_at(dy, o, bf);
        void *dxp = k_at_mut(dx, o, bf);
        SIMD
        for (int64_t i = 0; i < hw; i++)
            k_st(dxp, i,
                 fa * k_ld(dyp, i, bf) + fb * (k_ld(xp, i, bf) - fm) + fe,
                 bf);
    }
}

void delta_k_batchnorm_bwd(const delta_kargs *k) {
    const bn_shape s = bn_shape_of(k->in_t[0]);
    const bool bf = k_is_bf16(k->in_t[0]);
    PAR_FOR(s.c * s.n * s.hw >= PAR_MIN)
    for (int64_t c = 0; c < s.c; c++) {
        if (bf) bn_bwd_channel(k, &s, c, true);
        else bn_bwd_channel(k, &s, c, false);
    }
}

/* Row r of layer norm over d columns. ins: x[, gamma, beta]; outs: y,
 * mean (rows), rstd (rows). */
K_BODY void ln_row(const delta_kargs *k, int64_t r, int64_t d, bool bf) {
    const float *gamma = k->op->n_in >= 3 ? k->in[1] : NULL;
    const float *beta = k->op->n_in >= 3 ? k->in[2] : NULL;
    float *mean = k->out[1], *rstd = k->out[2];
    const void *xp = k_at(k->in[0], r * d, bf);
    void *yp = k_at_mut(k->out[0], r * d, bf);
    const float fm = (float)(fsum(xp, d, bf) / (double)d);
    double v = fsum_sq_dev(xp, d, fm, bf) / (double)d;
    const float frs = (float)(1.0 / sqrt(v + k->op->a.eps));
    mean[r] = fm;
    rstd[r] = frs;
    if (gamma) {
        SIMD
        for (int64_t j = 0; j < d; j++)
            k_st(yp, j, (k_ld(xp, j, bf) - fm) * frs * gamma[j] + beta[j],
                 bf);
    } else {
        SIMD
        for (int64_t j = 0; j < d; j++)
            k_st(yp, j, (k_ld(xp, j, bf) - fm) * frs, bf);
    }
}

void delta_k_layernorm(const delta_kargs *k) {
    const delta_tensor *xt = k->in_t[0];
    const bool bf = k_is_bf16(xt);
    const int64_t d = xt->ndim > 0 ? xt->shape[xt->ndim - 1] : 1;
    const int64_t rows = d > 0 ? xt->numel / d : 0;
    PAR_FOR(rows * d >= PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        if (bf) ln_row(k, r, d, true);
        else ln_row(k, r, d, false);
    }
}

/* Columns per block of the dgamma/dbeta reduction (accumulators on the
 * stack). */
#define LN_COLS 128

/* Row r of layer norm's dx. ins: x, mean, rstd, dy[, gamma]; outs: dx. */
K_BODY void ln_bwd_row(const delta_kargs *k, int64_t r, int64_t d, bool bf) {
    const float *mean = k->in[1], *rstd = k->in[2];
    const float *gamma = k->op->n_in >= 5 ? k->in[4] : NULL;
    const void *xp = k_at(k->in[0], r * d, bf);
    const void *dyp = k_at(k->in[3], r * d, bf);
    void *dxp = k_at_mut(k->out[0], r * d, bf);
    const float fm = mean[r], frs = rstd[r];
    /* g = dy·gamma; dx = rstd (g - mean(g) - xhat mean(g xhat)) */
    float a[LANES] = {0}, bl[LANES] = {0};
    int64_t j = 0;
    for (; j + LANES <= d; j += LANES)
        for (int l = 0; l < LANES; l++) {
            float dyv = k_ld(dyp, j + l, bf);
            float g = gamma ? dyv * gamma[j + l] : dyv;
            float xh = (k_ld(xp, j + l, bf) - fm) * frs;
            a[l] += g;
            bl[l] += g * xh;
        }
    for (int l = 0; j < d; j++, l++) {
        float dyv = k_ld(dyp, j, bf);
        float g = gamma ? dyv * gamma[j] : dyv;
        float xh = (k_ld(xp, j, bf) - fm) * frs;
        a[l] += g;
        bl[l] += g * xh;
    }
    const double sg = flanes_total(a), sgx = flanes_total(bl);
    const float mg = (float)(sg / (double)d);
    const float mgx = (float)(sgx / (double)d);
    if (gamma) {
        SIMD
        for (int64_t jj = 0; jj < d; jj++) {
            float xh = (k_ld(xp, jj, bf) - fm) * frs;
            k_st(dxp, jj, frs * (k_ld(dyp, jj, bf) * gamma[jj] - mg - xh * mgx),
                 bf);
        }
    } else {
        SIMD
        for (int64_t jj = 0; jj < d; jj++) {
            float xh = (k_ld(xp, jj, bf) - fm) * frs;
            k_st(dxp, jj, frs * (k_ld(dyp, jj, bf) - mg - xh * mgx), bf);
        }
    }
}

/* Columns [j0, j0 + nj) of dgamma and dbeta, each summed row by row. */
K_BODY void ln_bwd_cols(const delta_kargs *k, int64_t j0, int64_t nj,
                        int64_t rows, int64_t d, bool bf) {
    const float *mean = k->in[1], *rstd = k->in[2];
    float *dgamma = k->out[1], *dbeta = k->out[2];
    double ag[LN_COLS], ab[LN_COLS];
    for (int64_t j = 0; j < nj; j++) ag[j] = ab[j] = 0;
    for (int64_t r = 0; r < rows; r++) {
        const void *xp = k_at(k->in[0], r * d + j0, bf);
        const void *dyp = k_at(k->in[3], r * d + j0, bf);
        const float fm = mean[r], frs = rstd[r];
        if (r + 8 < rows) { /* rows are far apart: no hardware prefetch */
            for (int64_t j = 0; j < nj; j += 16) {
                __builtin_prefetch(k_at(xp, 8 * d + j, bf));
                __builtin_prefetch(k_at(dyp, 8 * d + j, bf));
            }
        }
        SIMD
        for (int64_t j = 0; j < nj; j++) {
            float dyv = k_ld(dyp, j, bf);
            float xh = (k_ld(xp, j, bf) - fm) * frs;
            ag[j] += (double)dyv * xh;
            ab[j] += dyv;
        }
    }
    for (int64_t j = 0; j < nj; j++) {
        if (dgamma) dgamma[j0 + j] = (float)ag[j];
        if (dbeta) dbeta[j0 + j] = (float)ab[j];
    }
}

void delta_k_layernorm_bwd(const delta_kargs *k) {
    /* ins: x, mean, rstd, dy[, gamma]; outs: dx[, dgamma, dbeta] */
    const delta_tensor *xt = k->in_t[0];
    const bool bf = k_is_bf16(xt);
    const int64_t d = xt->ndim > 0 ? xt->shape[xt->ndim - 1] : 1;
    const int64_t rows = d > 0 ? xt->numel / d : 0;
    const bool dgb = k->op->n_out >= 3 && (k->out[1] || k->out[2]);
    if (k->out[0]) {
        PAR_FOR(rows * d >= PAR_MIN)
        for (int64_t r = 0; r < rows; r++) {
            if (bf) ln_bwd_row(k, r, d, true);
            else ln_bwd_row(k, r, d, false);
        }
    }
    if (!dgb) return;
    const int64_t blocks = (d + LN_COLS - 1) / LN_COLS;
    PAR_FOR(rows * d >= PAR_MIN)
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t j0 = b * LN_COLS;
        const int64_t nj = d - j0 < LN_COLS ? d - j0 : LN_COLS;
        if (bf) ln_bwd_cols(k, j0, nj, rows, d, true);
        else ln_bwd_cols(k, j0, nj, rows, d, false);
    }
}
