/* Matrix products: matmul (batched, transposes, alpha, 2-D b broadcast over
 * the batch), linear (x w^T + bias, or x w + bias for a weight stored (IN,
 * OUT), as one GEMM over all rows, the bias added after it) and
 * sum_leading (the bias gradient of linear; F32 or BF16, k_dtype.h). The
 * BF16 matmul and linear are in k_bf16.c. */
#include "backend/cpu/k_dtype.h"
#include "backend/cpu/kernels.h"
#include "backend/kernel_shapes.h"
#include "delta/cpu.h"

/* Batched products with fewer flops than this each run one GEMM per thread
 * over the batch (built-in GEMM, whatever path is selected) instead of one
 * parallel GEMM after another. The choice depends on shapes only, so results
 * do not depend on the thread count. */
#define SMALL_GEMM_FLOPS ((double)(1 << 23))

void delta_k_matmul(const delta_kargs *k) {
    const matmul_geom g = matmul_geom_of(k->op, k->in_t[0], k->in_t[1]);
    const float *a = k->in[0], *b = k->in[1];
    float *c = k->out[0];
    float alpha = k->op->a.alpha;

    if (g.batch == 1 || (g.b_2d && !g.ta)) {
        /* One GEMM: a batched, untransposed a is (batch*M, K). */
        delta_gemm(g.ta, g.tb, g.batch * g.m, g.n, g.k, alpha, a, g.lda, b,
                   g.ldb, 0.0f, c, g.n);
        return;
    }
    if (2.0 * (double)g.m * (double)g.n * (double)g.k < SMALL_GEMM_FLOPS) {
        int nt = delta_cpu_threads();
        (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt)
#endif
        for (int64_t i = 0; i < g.batch; i++)
            delta_gemm_builtin_serial(g.ta, g.tb, g.m, g.n, g.k, alpha,
                                      a + i * g.sa, g.lda, b + i * g.sb,
                                      g.ldb, 0.0f, c + i * g.sc, g.n);
        return;
    }
    for (int64_t i = 0; i < g.batch; i++)
        delta_gemm(g.ta, g.tb, g.m, g.n, g.k, alpha, a + i * g.sa, g.lda,
                   b + i * g.sb, g.ldb, 0.0f, c + i * g.sc, g.n);
}

void delta_k_linear(const delta_kargs *k) {
    const delta_tensor *xt = k->in_t[0], *wt = k->in_t[1];
    const float *x = k->in[0], *w = k->in[1];
    const float *bias = k->op->n_in > 2 ? k->in[2] : NULL;
    float *y = k->out[0];
    const linear_geom g = linear_geom_of(k->op, xt, wt);
    const int64_t rows = g.rows, out = g.out;
    delta_gemm(false, g.tw, rows, out, g.in, 1.0f, x, g.in, w, g.ldw, 0.0f, y,
               out);
    if (!bias || rows == 0 || out == 0) return;
    int nt = delta_cpu_threads();
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) \
    if (rows * out > 32768)
#endif
    for (int64_t r = 0; r < rows; r++) {
        float *yr = y + r * out;
        for (int64_t j = 0; j < out; j++) yr[j] += bias[j];
    }
}

/* Columns per chunk: each thread sums whole columns, row by row. */
#define SL_CHUNK 256

/* Columns [j0, j0 + w) of y, each summed in double over the rows in
 * order. */
K_BODY void sum_leading_chunk(const void *x, void *y, int64_t rows,
                              int64_t s, int64_t j0, int64_t w, bool bf) {
    double acc[SL_CHUNK];
    for (int64_t j = 0; j < w; j++) acc[j] = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        const void *xr = k_at(x, r * s + j0, bf);
        for (int64_t j = 0; j < w; j++) acc[j] += (double)k_ld(xr, j, bf);
    }
    for (int64_t j = 0; j < w; j++) k_st(y, j0 + j, (float)acc[j], bf);
}

void delta_k_sum_leading(const delta_kargs *k) {
    const void *x = k->in[0];
    void *y = k->out[0];
    const bool bf = k_is_bf16(k->in_t[0]);
    int64_t s = k->out_t[0]->numel;
    if (s == 0) return;
    int64_t rows = k->in_t[0]->numel / s;
    int64_t chunks = (s + SL_CHUNK - 1) / SL_CHUNK;
    int nt = delta_cpu_threads();
    (void)nt;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt) \
    if (chunks > 1 && rows * s > 32768)
#endif
    for (int64_t ch = 0; ch < chunks; ch++) {
        int64_t j0 = ch * SL_CHUNK;
        int64_t w = s - j0 < SL_CHUNK ? s - j0 : SL_CHUNK;
        if (bf) sum_leading_chunk(x, y, rows, s, j0, w, true);
        else sum_leading_chunk(x, y, rows, s, j0, w, false);
    }
}
