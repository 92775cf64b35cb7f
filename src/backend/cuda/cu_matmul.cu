/* Matrix products on the GPU: matmul and linear, F32 and BF16, and
 * sum_leading (linear's bias gradient; F32 or BF16) as a fixed-order
 * column reduction.
 *
 * F32 matmul: cuBLAS Sgemm (default math mode: no TF32, no atomics, the
 * handle's own fixed workspace), so a product is the same bits every run on
 * the same GPU. BF16 operands: cuBLASLt on the tensor cores, fp32 sums
 * (cu_lt_gemm.cu). linear in either dtype: cuBLASLt with the bias in the
 * GEMM's epilogue, which saves the pass that would read and write the
 * output again to add it; where Lt has no such algorithm for the shape (or
 * DELTA_GEMM_EPILOGUE=0), F32 runs Sgemm then adds the bias, and BF16 a
 * tiled kernel of its own (linear_bias_bf16_k says why). Every
 * route gives round(acc + bias) with acc the fp32 sum, as the CPU does,
 * and which one runs depends on the shape only.
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

void delta_cu_matmul_bf16(const delta_cuda_kctx *c, const delta_kargs *k) {
    const delta_tensor *at = k->in_t[0], *bt = k->in_t[1], *yt = k->out_t[0];
    DELTA_ASSERTF(at->dtype == DELTA_BF16 && bt->dtype == DELTA_BF16 &&
                      (yt->dtype == DELTA_BF16 || yt->dtype == DELTA_F32),
                  "op %d (%s): a BF16 matmul on %s and %s into %s",
                  k->op->id, k->op->name, delta_dtype_name(at->dtype),
                  delta_dtype_name(bt->dtype), delta_dtype_name(yt->dtype));
    const matmul_geom mg = matmul_geom_of(k->op, at, bt);
    delta_lt_gemm g = {mg.ta, mg.tb, mg.m, mg.n, mg.k, mg.lda, mg.ldb, mg.n,
                       mg.sa, mg.sb, mg.sc, mg.batch, k->op->a.alpha,
                       CUDA_R_16BF,
                       yt->dtype == DELTA_BF16 ? CUDA_R_16BF : CUDA_R_32F,
                       NULL};
    if (mg.batch == 1 || (mg.b_2d && !mg.ta)) { /* (batch*M, K) . B */
        g.m = mg.batch * mg.m;
        g.batch = 1;
    } /* else strided-batched (sb 0: a 2-D B, one call per entry) */
    delta_cu_lt_gemm(c, &g, k->in[0], k->in[1], k->out[0]);
}

/* y[r, j] += bias[j]: the F32 route's bias after its GEMM. */
__global__ static void bias_rows_k(float *y, const float *bias, int64_t rows,
                                   int64_t out) {
    CU_FOR(i, rows * out) y[i] += bias[i % out];
}

/* BF16 linear with a bias where cuBLASLt's bias epilogue is not taken.
 * Not Lt with C = the bias rows and beta = 1: on an H200 (CUDA 13) that
 * route's outputs landed on multiples of the bias's ulp (0 where the CPU
 * gave -0.0014 beside a bias near 0.6), the product rounded before C was
 * added, whatever the split-K reduction scheme. So each output is summed
 * here in fp32 in k order over LIN_TILE x LIN_TILE tiles, the bias added,
 * and rounded once: the CPU's rule, deterministic, without tensor cores
 * (a slow route, for shapes the epilogue cannot take and for
 * DELTA_GEMM_EPILOGUE=0). W is (out, in) (tw) or (in, out), row stride
 * ldw. */
#define LIN_TILE 16
__global__ static void linear_bias_bf16_k(const uint16_t *x,
                                          const uint16_t *w,
                                          const uint16_t *bias, uint16_t *y,
                                          int64_t rows, int64_t in,
                                          int64_t out, int64_t ldw, bool tw) {
    __shared__ float xs[LIN_TILE][LIN_TILE + 1], ws[LIN_TILE][LIN_TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t j = (int64_t)blockIdx.x * LIN_TILE + tx;
    /* row tiles strided by the grid (its y extent is capped at 65535) */
    for (int64_t r0 = (int64_t)blockIdx.y * LIN_TILE; r0 < rows;
         r0 += (int64_t)gridDim.y * LIN_TILE) {
        const int64_t r = r0 + ty;
        float acc = 0.0f;
        for (int64_t k0 = 0; k0 < in; k0 += LIN_TILE) {
            const int64_t kx = k0 + tx, kw = k0 + ty;
            xs[ty][tx] = r < rows && kx < in ? cu_ld(x, r * in + kx) : 0.0f;
            ws[ty][tx] = j < out && kw < in
                             ? cu_ld(w, tw ? j * ldw + kw : kw * ldw + j)
                             : 0.0f;
            __syncthreads();
            const int n = in - k0 < LIN_TILE ? (int)(in - k0) : LIN_TILE;
            for (int kk = 0; kk < n; kk++) acc += xs[ty][kk] * ws[kk][tx];
            __syncthreads();
        }
        if (r < rows && j < out) cu_st(y, r * out + j, acc + cu_ld(bias, j));
    }
}

void delta_cu_linear(const delta_cuda_kctx *c, const delta_kargs *k) {
    const delta_tensor *xt = k->in_t[0], *wt = k->in_t[1], *yt = k->out_t[0];
    const bool bf = xt->dtype == DELTA_BF16;
    const bool has_bias = k->op->n_in > 2;
    DELTA_ASSERTF(wt->dtype == xt->dtype && yt->dtype == xt->dtype &&
                      (!has_bias || k->in_t[2]->dtype == xt->dtype) &&
                      (bf || xt->dtype == DELTA_F32),
                  "op %d (%s): linear on %s x, %s weight, %s output",
                  k->op->id, k->op->name, delta_dtype_name(xt->dtype),
                  delta_dtype_name(wt->dtype), delta_dtype_name(yt->dtype));
    const linear_geom lg = linear_geom_of(k->op, xt, wt);
    const cudaDataType_t t = bf ? CUDA_R_16BF : CUDA_R_32F;
    delta_lt_gemm g = {false, lg.tw, lg.rows, lg.out, lg.in, lg.in, lg.ldw,
                       lg.out, 0, 0, 0, 1, 1.0f, t, t,
                       has_bias ? k->in[2] : NULL};
    if (has_bias && c->gemm_epilogue &&
        delta_cu_lt_gemm(c, &g, k->in[0], k->in[1], k->out[0]))
        return;
    g.bias = NULL;
    int64_t n = lg.rows * lg.out;
    if (bf && has_bias) {
        if (n == 0) return;
        dim3 block(LIN_TILE, LIN_TILE);
        const int64_t row_tiles = (lg.rows + LIN_TILE - 1) / LIN_TILE;
        dim3 grid((unsigned)((lg.out + LIN_TILE - 1) / LIN_TILE),
                  (unsigned)(row_tiles < 65535 ? row_tiles : 65535));
        linear_bias_bf16_k<<<grid, block, 0, c->stream>>>(
            (const uint16_t *)k->in[0], (const uint16_t *)k->in[1],
            (const uint16_t *)k->in[2], (uint16_t *)k->out[0], lg.rows,
            lg.in, lg.out, lg.ldw, lg.tw);
        return;
    }
    if (bf) {
        delta_cu_lt_gemm(c, &g, k->in[0], k->in[1], k->out[0]);
        return;
    }
    float *y = (float *)k->out[0];
    delta_cu_gemm(c, false, lg.tw, lg.rows, lg.out, lg.in, 1.0f,
                  (const float *)k->in[0], lg.in, 0, (const float *)k->in[1],
                  lg.ldw, 0, 0.0f, y, lg.out, 0, 1);
    if (has_bias)
        CU_LAUNCH(bias_rows_k, c, n, y, (const float *)k->in[2], lg.rows,
                  lg.out);
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
