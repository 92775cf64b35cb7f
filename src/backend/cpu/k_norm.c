/* Normalization kernels: batch norm (training and eval), its gradient and
 * running-statistics update, the fused batch norm + ReLU and batch norm +
 * add + ReLU; layer norm and its gradient.
 *
 * The fused kernels are the batch norm kernel with the chain's elementwise
 * steps folded into its last loop: each element goes through the float
 * operations the unfused ops do, in their order (y = x·scale + shift, + r,
 * then relu), so fused and unfused give the same bits. Their gradient is
 * the chain's: relu_bwd and batchnorm_bwd (autograd.c).
 *
 * Statistics are accumulated in double (layer norm's short rows: in float
 * lanes combined in double), each one by a single thread in a fixed order
 * (batch norm: parallel over channels, each channel summed image by image;
 * layer norm: parallel over rows; its dgamma/dbeta: parallel over column
 * blocks, each summed row by row), so results do not depend on the thread
 * count. */
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
static inline double dsum(const float *p, int64_t n) {
    double a[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) a[l] += p[i + l];
    for (int l = 0; i < n; i++, l++) a[l] += p[i];
    return lanes_total(a);
}

/* Σ (p[i] - m)^2 */
static inline double dsum_sq_dev(const float *p, int64_t n, double m) {
    double a[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            double d = p[i + l] - m;
            a[l] += d * d;
        }
    for (int l = 0; i < n; i++, l++) {
        double d = p[i] - m;
        a[l] += d * d;
    }
    return lanes_total(a);
}

/* *s_dy += Σ dy[i], *s_dyx += Σ dy[i] (x[i] - m) */
static inline void dsum2(const float *dy, const float *x, int64_t n, double m,
                         double *s_dy, double *s_dyx) {
    double a[LANES] = {0}, b[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            a[l] += dy[i + l];
            b[l] += (double)dy[i + l] * (x[i + l] - m);
        }
    for (int l = 0; i < n; i++, l++) {
        a[l] += dy[i];
        b[l] += (double)dy[i] * (x[i] - m);
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

static inline double fsum(const float *p, int64_t n) {
    float a[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) a[l] += p[i + l];
    for (int l = 0; i < n; i++, l++) a[l] += p[i];
    return flanes_total(a);
}

static inline double fsum_sq_dev(const float *p, int64_t n, float m) {
    float a[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            float d = p[i + l] - m;
            a[l] += d * d;
        }
    for (int l = 0; i < n; i++, l++) {
        float d = p[i] - m;
        a[l] += d * d;
    }
    return flanes_total(a);
}

/* y = x·sc + sh, then + r (when r is given: always followed by relu),
 * then relu: the unfused chain's float operations, in its order. */
static inline __attribute__((always_inline)) float
bn_epilogue(float v, const float *r, int64_t i, bool relu) {
    if (r) v = v + r[i];
    return relu && v < 0.0f ? 0.0f : v;
}

static inline __attribute__((always_inline)) void
bn_apply(const float *x, const float *r, float *y, int64_t n, float sc,
         float sh, bool relu) {
    if (r) {
        SIMD
        for (int64_t i = 0; i < n; i++)
            y[i] = bn_epilogue(x[i] * sc + sh, r, i, true);
    } else if (relu) {
        SIMD
        for (int64_t i = 0; i < n; i++)
            y[i] = bn_epilogue(x[i] * sc + sh, NULL, i, true);
    } else {
        SIMD
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * sc + sh;
    }
}

/* Batch norm (relu: then relu; r: then + r and relu). ins: x, gamma, beta,
 * [r,] [rmean, rvar]; outs: y, mean, var. */
static void bn_forward(const delta_kargs *k, bool has_r, bool relu) {
    const bn_shape s = bn_shape_of(k->in_t[0]);
    const float *x = k->in[0], *gamma = k->in[1], *beta = k->in[2];
    const float *r = has_r ? k->in[3] : NULL;
    const int ri = has_r ? 4 : 3; /* the running stats' first input */
    float *y = k->out[0], *mean = k->out[1], *var = k->out[2];
    const double eps = k->op->a.eps;
    const bool use_running = !k->env->training && k->op->n_in >= ri + 2;
    const float *rmean = use_running ? k->in[ri] : NULL;
    const float *rvar = use_running ? k->in[ri + 1] : NULL;
    const int64_t count = s.n * s.hw;
    const int64_t C = s.c, hw = s.hw;
    PAR_FOR(C * count >= PAR_MIN)
    for (int64_t c = 0; c < C; c++) {
        double m, v;
        if (use_running) {
            m = rmean[c];
            v = rvar[c];
        } else {
            double acc = 0;
            for (int64_t n = 0; n < s.n; n++)
                acc += dsum(x + (n * C + c) * hw, hw);
            m = count > 0 ? acc / (double)count : 0.0;
            acc = 0;
            for (int64_t n = 0; n < s.n; n++)
                acc += dsum_sq_dev(x + (n * C + c) * hw, hw, m);
            v = count > 0 ? acc / (double)count : 0.0;
        }
        mean[c] = (float)m;
        var[c] = (float)v;
        if (hw == 1) continue; /* (N, C): written below, row by row */
        double rstd = 1.0 / sqrt(v + eps);
        float sc = (float)(gamma[c] * rstd);
        float sh = (float)(beta[c] - m * gamma[c] * rstd);
        for (int64_t n = 0; n < s.n; n++) {
            const int64_t o = (n * C + c) * hw;
            bn_apply(x + o, r ? r + o : NULL, y + o, hw, sc, sh, relu);
        }
    }
    if (hw != 1) return;
    /* (N, C): recompute each channel's scale and shift from mean/var (same
     * arithmetic as above) and write rows in parallel. */
    PAR_FOR(C * count >= PAR_MIN)
    for (int64_t n = 0; n < s.n; n++) {
        const float *xp = x + n * C;
        const float *rp = r ? r + n * C : NULL;
        float *yp = y + n * C;
        for (int64_t c = 0; c < C; c++) {
            double m = use_running ? (double)rmean[c] : (double)mean[c];
            double v = use_running ? (double)rvar[c] : (double)var[c];
            double rstd = 1.0 / sqrt(v + eps);
            float sc = (float)(gamma[c] * rstd);
            float sh = (float)(beta[c] - m * gamma[c] * rstd);
            yp[c] = bn_epilogue(xp[c] * sc + sh, rp, c, relu);
        }
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

void delta_k_batchnorm_bwd(const delta_kargs *k) {
    /* ins: x, gamma, mean, var, dy; outs: dx, dgamma, dbeta */
    const bn_shape s = bn_shape_of(k->in_t[0]);
    const float *x = k->in[0], *gamma = k->in[1], *mean = k->in[2],
                *var = k->in[3], *dy = k->in[4];
    float *dx = k->out[0];
    float *dgamma = k->op->n_out > 1 ? k->out[1] : NULL;
    float *dbeta = k->op->n_out > 2 ? k->out[2] : NULL;
    const double eps = k->op->a.eps;
    const int64_t C = s.c, hw = s.hw, count = s.n * s.hw;
    PAR_FOR(C * count >= PAR_MIN)
    for (int64_t c = 0; c < C; c++) {
        const double m = mean[c];
        const double rstd = 1.0 / sqrt((double)var[c] + eps);
        double sdy = 0, sdyx = 0;
        if (hw == 1) {
            for (int64_t n = 0; n < s.n; n++) {
                double d = dy[n * C + c];
                sdy += d;
                sdyx += d * (x[n * C + c] - m);
            }
        } else {
            for (int64_t n = 0; n < s.n; n++)
                dsum2(dy + (n * C + c) * hw, x + (n * C + c) * hw, hw, m,
                      &sdy, &sdyx);
        }
        const double dg = sdyx * rstd; /* Σ dy · xhat */
        if (dgamma) dgamma[c] = (float)dg;
        if (dbeta) dbeta[c] = (float)sdy;
        if (!dx || count == 0) continue;
        /* dx = gamma rstd (dy - Σdy/M - xhat Σ(dy xhat)/M)
         *    = a dy + b (x - mean) + e with a, b, e per channel */
        const double g = gamma[c];
        const double a = g * rstd;
        const double b = -g * rstd * rstd * dg / (double)count;
        const double e = -a * sdy / (double)count;
        const float fa = (float)a, fb = (float)b, fe = (float)e,
                    fm = mean[c];
        for (int64_t n = 0; n < s.n; n++) {
            const float *xp = x + (n * C + c) * hw;
            const float *dyp = dy + (n * C + c) * hw;
            float *dxp = dx + (n * C + c) * hw;
            SIMD
            for (int64_t i = 0; i < hw; i++)
                dxp[i] = fa * dyp[i] + fb * (xp[i] - fm) + fe;
        }
    }
}

void delta_k_layernorm(const delta_kargs *k) {
    /* ins: x[, gamma, beta]; outs: y, mean (rows), rstd (rows) */
    const delta_tensor *xt = k->in_t[0];
    const int64_t d = xt->ndim > 0 ? xt->shape[xt->ndim - 1] : 1;
    const int64_t rows = d > 0 ? xt->numel / d : 0;
    const float *x = k->in[0];
    const float *gamma = k->op->n_in >= 3 ? k->in[1] : NULL;
    const float *beta = k->op->n_in >= 3 ? k->in[2] : NULL;
    float *y = k->out[0], *mean = k->out[1], *rstd = k->out[2];
    const double eps = k->op->a.eps;
    PAR_FOR(rows * d >= PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *xp = x + r * d;
        float *yp = y + r * d;
        const float fm = (float)(fsum(xp, d) / (double)d);
        double v = fsum_sq_dev(xp, d, fm) / (double)d;
        const float frs = (float)(1.0 / sqrt(v + eps));
        mean[r] = fm;
        rstd[r] = frs;
        if (gamma) {
            SIMD
            for (int64_t j = 0; j < d; j++)
                yp[j] = (xp[j] - fm) * frs * gamma[j] + beta[j];
        } else {
            SIMD
            for (int64_t j = 0; j < d; j++) yp[j] = (xp[j] - fm) * frs;
        }
    }
}

/* Columns per block of the dgamma/dbeta reduction (accumulators on the
 * stack). */
#define LN_COLS 128

void delta_k_layernorm_bwd(const delta_kargs *k) {
    /* ins: x, mean, rstd, dy[, gamma]; outs: dx[, dgamma, dbeta] */
    const delta_tensor *xt = k->in_t[0];
    const int64_t d = xt->ndim > 0 ? xt->shape[xt->ndim - 1] : 1;
    const int64_t rows = d > 0 ? xt->numel / d : 0;
    const float *x = k->in[0], *mean = k->in[1], *rstd = k->in[2],
                *dy = k->in[3];
    const float *gamma = k->op->n_in >= 5 ? k->in[4] : NULL;
    float *dx = k->out[0];
    float *dgamma = k->op->n_out >= 3 ? k->out[1] : NULL;
    float *dbeta = k->op->n_out >= 3 ? k->out[2] : NULL;
    if (dx) {
        PAR_FOR(rows * d >= PAR_MIN)
        for (int64_t r = 0; r < rows; r++) {
            const float *xp = x + r * d, *dyp = dy + r * d;
            float *dxp = dx + r * d;
            const float fm = mean[r], frs = rstd[r];
            /* g = dy·gamma; dx = rstd (g - mean(g) - xhat mean(g xhat)) */
            float a[LANES] = {0}, bl[LANES] = {0};
            int64_t j = 0;
            for (; j + LANES <= d; j += LANES)
                for (int l = 0; l < LANES; l++) {
                    float g = gamma ? dyp[j + l] * gamma[j + l] : dyp[j + l];
                    float xh = (xp[j + l] - fm) * frs;
                    a[l] += g;
                    bl[l] += g * xh;
                }
            for (int l = 0; j < d; j++, l++) {
                float g = gamma ? dyp[j] * gamma[j] : dyp[j];
                float xh = (xp[j] - fm) * frs;
                a[l] += g;
                bl[l] += g * xh;
            }
            const double sg = flanes_total(a), sgx = flanes_total(bl);
            const float mg = (float)(sg / (double)d);
            const float mgx = (float)(sgx / (double)d);
            if (gamma) {
                SIMD
                for (int64_t jj = 0; jj < d; jj++) {
                    float xh = (xp[jj] - fm) * frs;
                    dxp[jj] = frs * (dyp[jj] * gamma[jj] - mg - xh * mgx);
                }
            } else {
                SIMD
                for (int64_t jj = 0; jj < d; jj++) {
                    float xh = (xp[jj] - fm) * frs;
                    dxp[jj] = frs * (dyp[jj] - mg - xh * mgx);
                }
            }
        }
    }
    if (!dgamma && !dbeta) return;
    const int64_t blocks = (d + LN_COLS - 1) / LN_COLS;
    PAR_FOR(rows * d >= PAR_MIN)
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t j0 = b * LN_COLS;
        const int64_t nj = d - j0 < LN_COLS ? d - j0 : LN_COLS;
        double ag[LN_COLS], ab[LN_COLS];
        for (int64_t j = 0; j < nj; j++) ag[j] = ab[j] = 0;
        for (int64_t r = 0; r < rows; r++) {
            const float *xp = x + r * d + j0, *dyp = dy + r * d + j0;
            const float fm = mean[r], frs = rstd[r];
            if (r + 8 < rows) { /* rows are far apart: no hardware prefetch */
                for (int64_t j = 0; j < nj; j += 16) {
                    __builtin_prefetch(xp + 8 * d + j);
                    __builtin_prefetch(dyp + 8 * d + j);
                }
            }
            SIMD
            for (int64_t j = 0; j < nj; j++) {
                float xh = (xp[j] - fm) * frs;
                ag[j] += (double)dyp[j] * xh;
                ab[j] += dyp[j];
            }
        }
        for (int64_t j = 0; j < nj; j++) {
            if (dgamma) dgamma[j0 + j] = (float)ag[j];
            if (dbeta) dbeta[j0 + j] = (float)ab[j];
        }
    }
}
