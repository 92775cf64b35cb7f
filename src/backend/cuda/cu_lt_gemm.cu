/* GEMMs through cuBLASLt (docs/CUDA.md): every GEMM with BF16 operands (on
 * the tensor cores), and linear's GEMM in F32 when its bias goes into the
 * epilogue. Products are summed in fp32 (CUBLAS_COMPUTE_32F: no TF32, no
 * BF16 accumulation) with an fp32 alpha, and D of the op's output dtype. A
 * bias is added in the epilogue in fp32 before D's one rounding:
 * D = round(alpha acc + bias), the rule of the CPU's linear in
 * BF16 (delta_gemm_bf16), and in F32 the bits of the separate add (acc is
 * already fp32, so rounding it first changes nothing: alpha is 1).
 *
 * Determinism. Every GEMM asks cuBLASLt's heuristic, a pure function of
 * the descriptors, the preferences and the GPU, for its first choice; the
 * preferences name the alignment every operand is sure to have from the
 * shape alone (tensors and workspaces are DELTA_ALIGN-aligned in the arena,
 * batch entries a stride apart), never the alignment of where a tensor
 * happens to lie, so a policy that places a tensor elsewhere runs the same
 * algorithm as keep and gets the same bits. Split-K reductions are allowed
 * only in the compute type (fp32 partial sums in cuBLAS's fixed workspace,
 * added in a separate step), never in a BF16 output type, so no partial
 * sum is rounded to BF16. Whether a bias epilogue is available is the
 * heuristic's answer for the shape too, so keep and every policy take the
 * same route. cuBLAS documents its results as bit-wise reproducible run
 * to run on one GPU model and toolkit with one stream; test_cuda runs
 * every op twice and every policy against keep to check it here.
 *
 * cuBLAS is column-major: the row-major C = op(A) op(B) is computed as the
 * column-major C^T (n x m) = op(B)^T (n x k) . op(A)^T (k x m), B first.
 * B row-major (k x n, or n x k when tb) is column-major (n x k, or k x n)
 * with leading dimension ldb; likewise A. C is D (in place). C^T has
 * n rows, so the bias (one value per column of the row-major C) is the
 * per-row vector of Lt's BIAS epilogue. */
#include "backend/cuda/cu_common.cuh"

static size_t type_size(cudaDataType_t t) {
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
 * one matrix), every operand aligned to al_* bytes. False, with nothing
 * launched, when the heuristic has no algorithm. */
static bool lt_gemm(const delta_cuda_kctx *c, const delta_lt_gemm *g,
                    int64_t batch, uint32_t al_a, uint32_t al_b,
                    uint32_t al_c, const void *a, const void *b, void *cm) {
    DELTA_ASSERTF((uintptr_t)a % al_a == 0 && (uintptr_t)b % al_b == 0 &&
                      (uintptr_t)cm % al_c == 0 &&
                      (uintptr_t)g->bias % DELTA_ALIGN == 0,
                  "GEMM operands not aligned to %u, %u, %u bytes", al_a,
                  al_b, al_c);
    cublasLtMatmulDesc_t desc;
    LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t opb = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    int32_t opa = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opb,
                                      sizeof opb));
    LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opa,
                                      sizeof opa));
    if (g->bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        int32_t bt = (int32_t)g->ctype;
        LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                          &epi, sizeof epi));
        LT(cublasLtMatmulDescSetAttribute(
            desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
            sizeof g->bias));
        LT(cublasLtMatmulDescSetAttribute(
            desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    cublasLtMatrixLayout_t l1 =
        lt_layout(g->abtype, g->tb ? g->k : g->n, g->tb ? g->n : g->k,
                  g->ldb, batch, g->sb);
    cublasLtMatrixLayout_t l2 =
        lt_layout(g->abtype, g->ta ? g->m : g->k, g->ta ? g->k : g->m,
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
    const float beta = 0.0f; /* C unread: D = alpha op(A) op(B) (+ bias) */
    if (ok)
        LT(cublasLtMatmul(c->lt, desc, &g->alpha, b, l1, a, l2, &beta, cm,
                          lc, cm, lc, &res.algo, c->blas_ws,
                          c->blas_ws_bytes, c->stream));
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(l2);
    cublasLtMatrixLayoutDestroy(l1);
    cublasLtMatmulDescDestroy(desc);
    return ok;
}

bool delta_cu_lt_gemm(const delta_cuda_kctx *c, const delta_lt_gemm *g,
                      const void *a, const void *b, void *cm) {
    DELTA_ASSERTF(!g->bias || g->batch == 1, "a bias epilogue on a batched "
                  "GEMM (batch %lld)", (long long)g->batch);
    if (g->m == 0 || g->n == 0 || g->batch == 0) return true;
    size_t es = type_size(g->abtype), cs = type_size(g->ctype);
    if (g->k == 0) { /* no products: D = 0 (+ bias) */
        if (g->bias) return false; /* the caller adds it */
        DELTA_ASSERT(g->ldc == g->n &&
                     (g->batch == 1 || g->sc == g->m * g->n));
        cudaError_t e = cudaMemsetAsync(
            cm, 0, (size_t)(g->batch * g->m * g->n) * cs, c->stream);
        DELTA_ASSERTF(e == cudaSuccess, "cudaMemsetAsync: %s",
                      cudaGetErrorString(e));
        return true;
    }
    uint32_t al_a = gemm_align(g->sa, es, g->batch);
    uint32_t al_b = gemm_align(g->sb, es, g->batch);
    uint32_t al_c = gemm_align(g->sc, cs, g->batch);
    bool ok = true;
    if (g->batch == 1 || (g->sa && g->sb && g->sc)) {
        ok = lt_gemm(c, g, g->batch, al_a, al_b, al_c, a, b, cm);
    } else { /* an operand shared by every entry (stride 0): one per entry */
        for (int64_t i = 0; ok && i < g->batch; i++)
            ok = lt_gemm(c, g, 1, al_a, al_b, al_c,
                         (const char *)a + (size_t)(i * g->sa) * es,
                         (const char *)b + (size_t)(i * g->sb) * es,
                         (char *)cm + (size_t)(i * g->sc) * cs);
    }
    DELTA_ASSERTF(ok || g->bias, "cuBLASLt has no %s GEMM for m %lld n %lld "
                  "k %lld batch %lld (ta %d tb %d)",
                  g->abtype == CUDA_R_16BF ? "BF16" : "F32", (long long)g->m,
                  (long long)g->n, (long long)g->k, (long long)g->batch,
                  (int)g->ta, (int)g->tb);
    return ok;
}
