/* Normalization on the GPU: batch norm (training and eval), its gradient
 * and running-statistics update; layer norm and its gradient. The formulas
 * are those of src/backend/cpu/k_norm.c; the reductions are in double,
 * each by one block in a fixed order (batch norm: a block per channel;
 * layer norm: a block per row; its dgamma/dbeta: a fixed column-block /
 * row-lane split), so a run is reproducible bit for bit. The order differs
 * from the CPU's, so results agree with it to rounding. */
#include "backend/cuda/cu_common.cuh"
#include "backend/kernel_shapes.h"

#include <math.h>

#define NORM_THREADS 256

/* Element e (0 <= e < N*hw) of channel c. */
__device__ static inline int64_t bn_at(int64_t e, int64_t c, int64_t C,
                                       int64_t hw) {
    return ((e / hw) * C + c) * hw + e % hw;
}

/* One block per channel: mean and (biased) variance in double, then y. */
__global__ static void bn_fwd_k(const float *x, const float *gamma,
                                const float *beta, const float *rmean,
                                const float *rvar, float *y, float *mean,
                                float *var, int64_t N, int64_t C, int64_t hw,
                                double eps) {
    __shared__ double buf[NORM_THREADS];
    const int64_t c = blockIdx.x, count = N * hw;
    double m, v;
    if (rmean) {
        m = rmean[c];
        v = rvar[c];
    } else {
        double acc = 0;
        for (int64_t e = threadIdx.x; e < count; e += blockDim.x)
            acc += x[bn_at(e, c, C, hw)];
        m = count > 0 ? cu_block_sum(acc, buf) / (double)count : 0.0;
        acc = 0;
        for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
            double d = x[bn_at(e, c, C, hw)] - m;
            acc += d * d;
        }
        v = count > 0 ? cu_block_sum(acc, buf) / (double)count : 0.0;
    }
    if (threadIdx.x == 0) {
        mean[c] = (float)m;
        var[c] = (float)v;
    }
    /* (N, C) inputs: the CPU takes the scale from the stored float stats */
    if (hw == 1 && !rmean) {
        m = (double)(float)m;
        v = (double)(float)v;
    }
    double rstd = 1.0 / sqrt(v + eps);
    float sc = (float)(gamma[c] * rstd);
    float sh = (float)(beta[c] - m * gamma[c] * rstd);
    for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
        int64_t i = bn_at(e, c, C, hw);
        y[i] = x[i] * sc + sh;
    }
}

void delta_cu_batchnorm(const delta_cuda_kctx *c, const delta_kargs *k) {
    const bn_shape s = bn_shape_of(k->in_t[0]);
    if (s.c == 0) return;
    bool running = !k->env->training && k->op->n_in >= 5;
    bn_fwd_k<<<(unsigned)s.c, NORM_THREADS, 0, c->stream>>>(
        (const float *)k->in[0], (const float *)k->in[1],
        (const float *)k->in[2], running ? (const float *)k->in[3] : NULL,
        running ? (const float *)k->in[4] : NULL, (float *)k->out[0],
        (float *)k->out[1], (float *)k->out[2], s.n, s.c, s.hw, k->op->a.eps);
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

/* One block per channel: Σdy and Σdy(x - mean) in double, then dx. */
__global__ static void bn_bwd_k(const float *x, const float *gamma,
                                const float *mean, const float *var,
                                const float *dy, float *dx, float *dgamma,
                                float *dbeta, int64_t N, int64_t C,
                                int64_t hw, double eps) {
    __shared__ double buf[NORM_THREADS];
    const int64_t c = blockIdx.x, count = N * hw;
    const double m = mean[c];
    const double rstd = 1.0 / sqrt((double)var[c] + eps);
    double a1 = 0, a2 = 0;
    for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
        int64_t i = bn_at(e, c, C, hw);
        double d = dy[i];
        a1 += d;
        a2 += d * (x[i] - m);
    }
    const double sdy = cu_block_sum(a1, buf);
    const double sdyx = cu_block_sum(a2, buf);
    const double dg = sdyx * rstd;
    if (threadIdx.x == 0) {
        if (dgamma) dgamma[c] = (float)dg;
        if (dbeta) dbeta[c] = (float)sdy;
    }
    if (!dx || count == 0) return;
    const double g = gamma[c];
    const double a = g * rstd;
    const double b = -g * rstd * rstd * dg / (double)count;
    const double e0 = -a * sdy / (double)count;
    const float fa = (float)a, fb = (float)b, fe = (float)e0, fm = mean[c];
    for (int64_t e = threadIdx.x; e < count; e += blockDim.x) {
        int64_t i = bn_at(e, c, C, hw);
        dx[i] = fa * dy[i] + fb * (x[i] - fm) + fe;
    }
}

void delta_cu_batchnorm_bwd(const delta_cuda_kctx *c, const delta_kargs *k) {
    const bn_shape s = bn_shape_of(k->in_t[0]);
    if (s.c == 0) return;
    bn_bwd_k<<<(unsigned)s.c, NORM_THREADS, 0, c->stream>>>(
        (const float *)k->in[0], (const float *)k->in[1],
        (const float *)k->in[2], (const float *)k->in[3],
        (const float *)k->in[4], (float *)k->out[0],
        k->op->n_out > 1 ? (float *)k->out[1] : NULL,
        k->op->n_out > 2 ? (float *)k->out[2] : NULL, s.n, s.c, s.hw,
        k->op->a.eps);
}

/* One block per row. */
__global__ static void ln_fwd_k(const float *x, const float *gamma,
                                const float *beta, float *y, float *mean,
                                float *rstd, int64_t d, double eps) {
    __shared__ double buf[NORM_THREADS];
    const int64_t r = blockIdx.x;
    const float *xp = x + r * d;
    float *yp = y + r * d;
    double acc = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) acc += xp[j];
    const float fm = (float)(cu_block_sum(acc, buf) / (double)d);
    acc = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        float dv = xp[j] - fm;
        acc += (double)(dv * dv);
    }
    const double v = cu_block_sum(acc, buf) / (double)d;
    const float frs = (float)(1.0 / sqrt(v + eps));
    if (threadIdx.x == 0) {
        mean[r] = fm;
        rstd[r] = frs;
    }
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
        yp[j] = gamma ? (xp[j] - fm) * frs * gamma[j] + beta[j]
                      : (xp[j] - fm) * frs;
}

void delta_cu_layernorm(const delta_cuda_kctx *c, const delta_kargs *k) {
    const delta_tensor *xt = k->in_t[0];
    const int64_t d = xt->ndim > 0 ? xt->shape[xt->ndim - 1] : 1;
    const int64_t rows = d > 0 ? xt->numel / d : 0;
    if (rows == 0) return;
    bool affine = k->op->n_in >= 3;
    ln_fwd_k<<<(unsigned)rows, NORM_THREADS, 0, c->stream>>>(
        (const float *)k->in[0], affine ? (const float *)k->in[1] : NULL,
        affine ? (const float *)k->in[2] : NULL, (float *)k->out[0],
        (float *)k->out[1], (float *)k->out[2], d, k->op->a.eps);
}

/* dx, one block per row: g = dy gamma; dx = rstd (g - mean(g) - xhat
 * mean(g xhat)). */
__global__ static void ln_bwd_dx_k(const float *x, const float *mean,
                                   const float *rstd, const float *dy,
                                   const float *gamma, float *dx, int64_t d) {
    __shared__ double buf[NORM_THREADS];
    const int64_t r = blockIdx.x;
    const float *xp = x + r * d, *dyp = dy + r * d;
    float *dxp = dx + r * d;
    const float fm = mean[r], frs = rstd[r];
    double a = 0, b = 0;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        float g = gamma ? dyp[j] * gamma[j] : dyp[j];
        float xh = (xp[j] - fm) * frs;
        a += g;
        b += (double)(g * xh);
    }
    const float mg = (float)(cu_block_sum(a, buf) / (double)d);
    const float mgx = (float)(cu_block_sum(b, buf) / (double)d);
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        float xh = (xp[j] - fm) * frs;
        float g = gamma ? dyp[j] * gamma[j] : dyp[j];
        dxp[j] = frs * (g - mg - xh * mgx);
    }
}

/* dgamma, dbeta: column reductions over the rows, split as col_sum_k in
 * cu_matmul.cu (32 columns a block, 16 row lanes, lanes added in a fixed
 * tree). */
#define LN_COLS 32
#define LN_LANES 16
__global__ static void ln_bwd_dg_k(const float *x, const float *mean,
                                   const float *rstd, const float *dy,
                                   float *dgamma, float *dbeta, int64_t rows,
                                   int64_t d) {
    __shared__ double pg[LN_LANES][LN_COLS], pb[LN_LANES][LN_COLS];
    const int64_t j = (int64_t)blockIdx.x * LN_COLS + threadIdx.x;
    double ag = 0, ab = 0;
    if (j < d)
        for (int64_t r = threadIdx.y; r < rows; r += LN_LANES) {
            float xh = (x[r * d + j] - mean[r]) * rstd[r];
            ag += (double)dy[r * d + j] * xh;
            ab += dy[r * d + j];
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

void delta_cu_layernorm_bwd(const delta_cuda_kctx *c, const delta_kargs *k) {
    const delta_tensor *xt = k->in_t[0];
    const int64_t d = xt->ndim > 0 ? xt->shape[xt->ndim - 1] : 1;
    const int64_t rows = d > 0 ? xt->numel / d : 0;
    if (rows == 0 || d == 0) return;
    const float *x = (const float *)k->in[0], *mean = (const float *)k->in[1],
                *rstd = (const float *)k->in[2], *dy = (const float *)k->in[3];
    const float *gamma = k->op->n_in >= 5 ? (const float *)k->in[4] : NULL;
    float *dx = (float *)k->out[0];
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
