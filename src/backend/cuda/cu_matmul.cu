/* Matrix products on the GPU: matmul and linear through cuBLAS (fp32,
 * default math mode: no TF32, no atomics, the handle's own fixed workspace,
 * so a product is the same bits every run on the same GPU), linear's bias
 * add, and sum_leading (linear's bias gradient; F32 or BF16) as a
 * fixed-order column reduction.
 *
 * cuBLAS is column-major. A row-major M x N matrix with row stride ld is,
 * read column-major, its N x M transpose with leading dimension ld, so the
 * row-major C = op(A) op(B) is computed as the column-major
 * C^T = op(B)^T op(A)^T: the operands swap places, and m and n swap. */
#include "backend/cuda/cu_common.cuh"
#include "backend/kernel_shapes.h"

void delta_cu_gemm(const delta_cuda_kctx *c, bool ta, bool tb, int64_t m,
                   int64_t n, int64_t k, float alpha, const float *a,
                   int64_t lda, int64_t sa, const float *b, int64_t ldb,
                   int64_t sb, float beta, float *cm, int64_t ldc, int64_t sc,
                   int64_t batch) {
    if (m == 0 || n == 0 || batch == 0) return;
    cublasStatus_t st;
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1)
        st = cublasSgemm(c->blas, opb, opa, (int)n, (int)m, (int)k, &alpha, b,
                         (int)ldb, a, (int)lda, &beta, cm, (int)ldc);
    else
        st = cublasSgemmStridedBatched(c->blas, opb, opa, (int)n, (int)m,
                                       (int)k, &alpha, b, (int)ldb, sb, a,
                                       (int)lda, sa, &beta, cm, (int)ldc, sc,
                                       (int)batch);
    DELTA_ASSERTF(st == CUBLAS_STATUS_SUCCESS,
                  "cublasSgemm (m %lld n %lld k %lld batch %lld): status %d",
                  (long long)m, (long long)n, (long long)k, (long long)batch,
                  (int)st);
}

void delta_cu_matmul(const delta_cuda_kctx *c, const delta_kargs *k) {
    const matmul_geom g = matmul_geom_of(k->op, k->in_t[0], k->in_t[1]);
    const float *a = (const float *)k->in[0], *b = (const float *)k->in[1];
    float *y = (float *)k->out[0];
    if (g.batch == 1 || (g.b_2d && !g.ta)) { /* (batch*M, K) . B */
        delta_cu_gemm(c, g.ta, g.tb, g.batch * g.m, g.n, g.k, k->op->a.alpha,
                      a, g.lda, 0, b, g.ldb, 0, 0.0f, y, g.n, 0, 1);
        return;
    }
    delta_cu_gemm(c, g.ta, g.tb, g.m, g.n, g.k, k->op->a.alpha, a, g.lda, g.sa,
                  b, g.ldb, g.sb, 0.0f, y, g.n, g.sc, g.batch);
}

__global__ static void bias_rows_k(float *y, const float *bias, int64_t rows,
                                   int64_t out) {
    CU_FOR(i, rows * out) y[i] += bias[i % out];
}

void delta_cu_linear(const delta_cuda_kctx *c, const delta_kargs *k) {
    const delta_tensor *xt = k->in_t[0], *wt = k->in_t[1];
    int64_t in = wt->shape[1], out = wt->shape[0], rows = 1;
    for (int i = 0; i < xt->ndim - 1; i++) rows *= xt->shape[i];
    float *y = (float *)k->out[0];
    delta_cu_gemm(c, false, true, rows, out, in, 1.0f,
                  (const float *)k->in[0], in, 0, (const float *)k->in[1], in,
                  0, 0.0f, y, out, 0, 1);
    if (k->op->n_in > 2)
        CU_LAUNCH(bias_rows_k, c, rows * out, y, (const float *)k->in[2], rows,
                  out);
}

/* y[j] = sum over rows r of x[r * s + j], in double, rounded once to T
 * (F32 or BF16). A block owns
 * COLS_PER_BLOCK adjacent columns (threadIdx.x, coalesced) and splits the
 * rows over ROW_LANES lanes (threadIdx.y: rows y, y + lanes, ...), each
 * lane summing in row order; the lanes are then added in a fixed tree. */
#define COLS_PER_BLOCK 32
#define ROW_LANES 16
template <typename T>
__global__ static void col_sum_k(const T *x, T *y, int64_t rows, int64_t s) {
    __shared__ double part[ROW_LANES][COLS_PER_BLOCK];
    int64_t j = (int64_t)blockIdx.x * COLS_PER_BLOCK + threadIdx.x;
    double acc = 0.0;
    if (j < s)
        for (int64_t r = threadIdx.y; r < rows; r += ROW_LANES)
            acc += (double)cu_ld(x, r * s + j);
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    for (int h = ROW_LANES / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.y < h)
            part[threadIdx.y][threadIdx.x] += part[threadIdx.y + h][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && j < s) cu_st(y, j, (float)part[0][threadIdx.x]);
}

void delta_cu_sum_leading(const delta_cuda_kctx *c, const delta_kargs *k) {
    int64_t s = k->out_t[0]->numel;
    if (s == 0) return;
    int64_t rows = k->in_t[0]->numel / s;
    dim3 block(COLS_PER_BLOCK, ROW_LANES);
    unsigned grid = (unsigned)((s + COLS_PER_BLOCK - 1) / COLS_PER_BLOCK);
    CU_WITH_T(k->out_t[0], k->op,
              col_sum_k<T><<<grid, block, 0, c->stream>>>(
                  (const T *)k->in[0], (T *)k->out[0], rows, s));
}
