/* BF16 on the GPU (mixed precision, docs/KERNELS.md and docs/CUDA.md): the
 * cast, the widening of ops that have no native BF16 kernel (the
 * convolution family; the other ops' kernels take BF16 themselves:
 * cu_bf16_route.h), and the BF16 GEMM behind matmul and linear on the
 * tensor cores. The CUDA side of src/backend/cpu/k_bf16.c, rule for rule:
 *
 *  - Conversions are src/core/bf16.h's, compiled for the device: widening
 *    is exact, narrowing rounds to nearest even (NaN stays a quiet NaN of
 *    its sign, overflow goes to infinity, subnormals are kept), so the
 *    cast and every rounded output are the CPU's rule bit for bit.
 *  - A widened op (delta_op_widens_bf16) gets fp32 copies of its BF16
 *    operands at the start of its declared workspace, in input then output
 *    order (delta_widen_kargs, the CPU's layout: delta_widen_bytes_of
 *    each, as cost.c declares them); its fp32 kernel runs on them with the
 *    rest of the workspace as its own, and each fp32 output is rounded
 *    once into the real BF16 output. So the workspace the graph declares
 *    is exactly what is used, and the result is the fp32 kernel's,
 *    rounded.
 *  - matmul and linear: cublasLtMatmul with BF16 A and B, fp32 products
 *    summed in fp32 (CUBLAS_COMPUTE_32F, fp32 scale), and C/D of the op's
 *    output dtype. linear's bias is added as the CPU's delta_gemm_bf16
 *    does, in fp32 before the one rounding: the output is first filled with
 *    the bias rows and the GEMM runs with beta = 1, so D = round(acc + bias)
 *    (alpha = beta = 1: no other rounding in between).
 *
 * Determinism. Every GEMM asks cuBLASLt's heuristic, a pure function of
 * the descriptors, the preferences and the GPU, for its first choice; the
 * preferences name the alignment every operand is sure to have from the
 * shape alone (tensors and workspaces are DELTA_ALIGN-aligned in the arena,
 * batch entries a stride apart), never the alignment of where a tensor
 * happens to lie, so a policy that places a tensor elsewhere runs the same
 * algorithm as keep and gets the same bits. Split-K reductions are allowed
 * only in the compute type (fp32 partial sums in cuBLAS's fixed workspace,
 * added in a separate step), never in the BF16 output type, so no partial
 * sum is rounded to BF16. cuBLAS documents its results as bit-wise
 * reproducible run to run on one GPU model and toolkit with one stream;
 * test_cuda runs every op twice and every policy against keep to check it
 * here. */
#include "backend/cuda/cu_common.cuh"
#include "backend/kernel_shapes.h"
#include "core/bf16.h"

/* ---- conversions and the cast --------------------------------------------- */

__global__ static void bf16_to_f32_k(const uint16_t *src, float *dst,
                                     int64_t n) {
    CU_FOR(i, n) dst[i] = delta_bf16_to_f32(src[i]);
}

__global__ static void f32_to_bf16_k(const float *src, uint16_t *dst,
                                     int64_t n) {
    CU_FOR(i, n) dst[i] = delta_f32_to_bf16(src[i]);
}

void delta_cu_cast(const delta_cuda_kctx *c, const delta_kargs *k) {
    int64_t n = k->out_t[0]->numel;
    delta_dtype from = k->in_t[0]->dtype, to = k->out_t[0]->dtype;
    if (from == DELTA_F32 && to == DELTA_BF16)
        CU_LAUNCH(f32_to_bf16_k, c, n, (const float *)k->in[0],
                  (uint16_t *)k->out[0], n);
    else if (from == DELTA_BF16 && to == DELTA_F32)
        CU_LAUNCH(bf16_to_f32_k, c, n, (const uint16_t *)k->in[0],
                  (float *)k->out[0], n);
    else
        DELTA_ASSERTF(false, "cast op %d from %s to %s", k->op->id,
                      delta_dtype_name(from), delta_dtype_name(to));
}

/* ---- widening ---------------------------------------------------------------- */

void delta_cu_run_widened(const delta_cuda_kctx *c, const delta_kargs *k,
                          delta_cu_kernel_fn fn) {
    delta_widened w;
    delta_widen_kargs(k, &w);
    for (int i = 0; i < k->op->n_in; i++)
        if (w.k.in[i] != k->in[i])
            CU_LAUNCH(bf16_to_f32_k, c, k->in_t[i]->numel,
                      (const uint16_t *)k->in[i], (float *)w.k.in[i],
                      k->in_t[i]->numel);
    fn(c, &w.k);
    for (int i = 0; i < k->op->n_out; i++)
        if (w.k.out[i] != k->out[i])
            CU_LAUNCH(f32_to_bf16_k, c, k->out_t[i]->numel,
                      (const float *)w.k.out[i], (uint16_t *)k->out[i],
                      k->out_t[i]->numel);
}

/* ---- GEMM on the tensor cores ------------------------------------------------ */

/* Row-major C (m x n, row stride ldc) = alpha op(A) op(B) + beta C, with
 * BF16 A and B and C of type ctype, `batch` times with element strides sa,
 * sb, sc (sa or sb 0: the same matrix for every entry). */
typedef struct bf16_gemm {
    bool ta, tb;
    int64_t m, n, k, lda, ldb, ldc, sa, sb, sc, batch;
    float alpha, beta;
    cudaDataType_t ctype;
} bf16_gemm;

static size_t ctype_size(cudaDataType_t t) {
    return t == CUDA_R_16BF ? 2 : 4;
}

/* The alignment, in bytes, an operand is sure to have: DELTA_ALIGN for
 * its first matrix (every tensor of the arena), and batch entry i lies
 * i * stride elements further. From the shape alone: see the top. */
static uint32_t gemm_align(int64_t stride, size_t esize, int64_t batch) {
    uint32_t a = DELTA_ALIGN;
    uint64_t s = (uint64_t)stride * esize;
    if (batch > 1)
        while (a > 1 && s % a) a >>= 1;
    return a;
}

#define LT(call)                                                            \
    do {                                                                    \
        cublasStatus_t st_ = (call);                                        \
        DELTA_ASSERTF(st_ == CUBLAS_STATUS_SUCCESS, "%s: status %d", #call, \
                      (int)st_);                                            \
    } while (0)

static cublasLtMatrixLayout_t lt_layout(cudaDataType_t t, int64_t rows,
                                        int64_t cols, int64_t ld,
                                        int64_t batch, int64_t stride) {
    cublasLtMatrixLayout_t l;
    LT(cublasLtMatrixLayoutCreate(&l, t, (uint64_t)rows, (uint64_t)cols, ld));
    if (batch > 1) {
        int32_t b32 = (int32_t)batch;
        LT(cublasLtMatrixLayoutSetAttribute(
            l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b32, sizeof b32));
        LT(cublasLtMatrixLayoutSetAttribute(
            l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
            sizeof stride));
    }
    return l;
}

/* The heuristic's first choice under pref with split-K reductions limited
 * to `schemes`; false when it has none. */
static bool lt_choose(const delta_cuda_kctx *c, cublasLtMatmulDesc_t desc,
                      cublasLtMatrixLayout_t l1, cublasLtMatrixLayout_t l2,
                      cublasLtMatrixLayout_t lc,
                      cublasLtMatmulPreference_t pref, uint32_t schemes,
                      cublasLtMatmulHeuristicResult_t *res) {
    LT(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
        sizeof schemes));
    int got = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
        c->lt, desc, l1, l2, lc, lc, pref, 1, res, &got);
    return st == CUBLAS_STATUS_SUCCESS && got > 0 &&
           res->state == CUBLAS_STATUS_SUCCESS;
}

/* One cublasLtMatmul: g's `batch` entries strided in the layouts (batch 1:
 * one matrix), every operand aligned to al_* bytes.
 *
 * cuBLAS is column-major: the row-major C = op(A) op(B) is computed as the
 * column-major C^T (n x m) = op(B)^T (n x k) . op(A)^T (k x m), B first.
 * B row-major (k x n, or n x k when tb) is column-major (n x k, or k x n)
 * with leading dimension ldb; likewise A. C is also D (in place). */
static void lt_gemm(const delta_cuda_kctx *c, const bf16_gemm *g,
                    int64_t batch, uint32_t al_a, uint32_t al_b,
                    uint32_t al_c, const void *a, const void *b, void *cm) {
    DELTA_ASSERTF((uintptr_t)a % al_a == 0 && (uintptr_t)b % al_b == 0 &&
                      (uintptr_t)cm % al_c == 0,
                  "BF16 GEMM operands not aligned to %u, %u, %u bytes", al_a,
                  al_b, al_c);
    cublasLtMatmulDesc_t desc;
    LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t opb = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    int32_t opa = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opb,
                                      sizeof opb));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opa,
                                      sizeof opa));
    cublasLtMatrixLayout_t l1 =
        lt_layout(CUDA_R_16BF, g->tb ? g->k : g->n, g->tb ? g->n : g->k,
                  g->ldb, batch, g->sb);
    cublasLtMatrixLayout_t l2 =
        lt_layout(CUDA_R_16BF, g->ta ? g->m : g->k, g->ta ? g->k : g->m,
                  g->lda, batch, g->sa);
    cublasLtMatrixLayout_t lc =
        lt_layout(g->ctype, g->n, g->m, g->ldc, batch, g->sc);
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = c->blas_ws_bytes;
    LT(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    /* Lt's first operand is B, its second A */
    LT(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_b, sizeof al_b));
    LT(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_a, sizeof al_a));
    LT(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c));
    LT(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c));
    /* split-K partial sums in fp32 only; should the heuristic offer nothing
     * then, any scheme: still one fixed choice per shape */
    cublasLtMatmulHeuristicResult_t res;
    bool ok = lt_choose(c, desc, l1, l2, lc, pref,
                        CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, &res) ||
              lt_choose(c, desc, l1, l2, lc, pref,
                        CUBLASLT_REDUCTION_SCHEME_MASK, &res);
    DELTA_ASSERTF(ok, "cuBLASLt has no BF16 GEMM for m %lld n %lld k %lld "
                  "batch %lld (ta %d tb %d)", (long long)g->m,
                  (long long)g->n, (long long)g->k, (long long)batch,
                  (int)g->ta, (int)g->tb);
    LT(cublasLtMatmul(c->lt, desc, &g->alpha, b, l1, a, l2, &g->beta, cm, lc,
                      cm, lc, &res.algo, c->blas_ws, c->blas_ws_bytes,
                      c->stream));
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(l2);
    cublasLtMatrixLayoutDestroy(l1);
    cublasLtMatmulDescDestroy(desc);
}

/* g on the tensor cores: one strided-batched call, or (an operand shared
 * by every entry: a zero stride) one call per entry. */
static void cu_gemm_bf16(const delta_cuda_kctx *c, const bf16_gemm *g,
                         const void *a, const void *b, void *cm) {
    if (g->m == 0 || g->n == 0 || g->batch == 0) return;
    size_t cs = ctype_size(g->ctype);
    if (g->k == 0) { /* no products: D = beta C, and beta is 0 or 1 */
        DELTA_ASSERT(g->ldc == g->n &&
                     (g->batch == 1 || g->sc == g->m * g->n));
        if (g->beta == 0.0f) {
            cudaError_t e = cudaMemsetAsync(
                cm, 0, (size_t)(g->batch * g->m * g->n) * cs, c->stream);
            DELTA_ASSERTF(e == cudaSuccess, "cudaMemsetAsync: %s",
                          cudaGetErrorString(e));
        }
        return;
    }
    uint32_t al_a = gemm_align(g->sa, 2, g->batch);
    uint32_t al_b = gemm_align(g->sb, 2, g->batch);
    uint32_t al_c = gemm_align(g->sc, cs, g->batch);
    if (g->batch == 1 || (g->sa && g->sb && g->sc)) {
        lt_gemm(c, g, g->batch, al_a, al_b, al_c, a, b, cm);
        return;
    }
    for (int64_t i = 0; i < g->batch; i++)
        lt_gemm(c, g, 1, al_a, al_b, al_c, (const uint16_t *)a + i * g->sa,
                (const uint16_t *)b + i * g->sb,
                (char *)cm + (size_t)(i * g->sc) * cs);
}

static cudaDataType_t cuda_type_of(const delta_tensor *t, const delta_op *op) {
    DELTA_ASSERTF(t->dtype == DELTA_BF16 || t->dtype == DELTA_F32,
                  "op %d (%s): a BF16 GEMM writes BF16 or F32, not %s",
                  op->id, op->name, delta_dtype_name(t->dtype));
    return t->dtype == DELTA_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

static void assert_bf16_operands(const delta_kargs *k) {
    DELTA_ASSERTF(k->in_t[0]->dtype == DELTA_BF16 &&
                      k->in_t[1]->dtype == DELTA_BF16,
                  "op %d (%s): BF16 GEMM on %s and %s operands", k->op->id,
                  k->op->name, delta_dtype_name(k->in_t[0]->dtype),
                  delta_dtype_name(k->in_t[1]->dtype));
}

void delta_cu_matmul_bf16(const delta_cuda_kctx *c, const delta_kargs *k) {
    assert_bf16_operands(k);
    const matmul_geom mg = matmul_geom_of(k->op, k->in_t[0], k->in_t[1]);
    bf16_gemm g = {mg.ta, mg.tb, mg.m, mg.n, mg.k, mg.lda, mg.ldb, mg.n,
                   mg.sa, mg.sb, mg.sc, mg.batch, k->op->a.alpha, 0.0f,
                   cuda_type_of(k->out_t[0], k->op)};
    const uint16_t *a = (const uint16_t *)k->in[0];
    const uint16_t *b = (const uint16_t *)k->in[1];
    char *y = (char *)k->out[0];
    if (mg.batch == 1 || (mg.b_2d && !mg.ta)) { /* (batch*M, K) . B */
        g.m = mg.batch * mg.m;
        g.batch = 1;
        cu_gemm_bf16(c, &g, a, b, y);
        return;
    }
    cu_gemm_bf16(c, &g, a, b, y); /* strided-batched (sb 0: 2-D B, per entry) */
}

/* y[r, j] = bias[j]: the C that beta = 1 adds (elements of y's size,
 * copied bit for bit). */
template <typename T>
__global__ static void bias_rows_k(T *y, const T *bias, int64_t rows,
                                   int64_t out) {
    CU_FOR(i, rows * out) y[i] = bias[i % out];
}

void delta_cu_linear_bf16(const delta_cuda_kctx *c, const delta_kargs *k) {
    assert_bf16_operands(k);
    const delta_tensor *xt = k->in_t[0], *wt = k->in_t[1], *yt = k->out_t[0];
    int64_t in = wt->shape[1], out = wt->shape[0], rows = 1;
    for (int i = 0; i < xt->ndim - 1; i++) rows *= xt->shape[i];
    bool bias = k->op->n_in > 2;
    bf16_gemm g = {false, true, rows, out, in, in, in, out, 0, 0, 0, 1,
                   1.0f, bias ? 1.0f : 0.0f, cuda_type_of(yt, k->op)};
    if (bias) {
        DELTA_ASSERTF(k->in_t[2]->dtype == yt->dtype, "op %d (%s): bias %s, "
                      "output %s", k->op->id, k->op->name,
                      delta_dtype_name(k->in_t[2]->dtype),
                      delta_dtype_name(yt->dtype));
        if (yt->dtype == DELTA_BF16)
            CU_LAUNCH(bias_rows_k<uint16_t>, c, rows * out,
                      (uint16_t *)k->out[0], (const uint16_t *)k->in[2], rows,
                      out);
        else
            CU_LAUNCH(bias_rows_k<uint32_t>, c, rows * out,
                      (uint32_t *)k->out[0], (const uint32_t *)k->in[2], rows,
                      out);
    }
    cu_gemm_bf16(c, &g, k->in[0], k->in[1], k->out[0]);
}
