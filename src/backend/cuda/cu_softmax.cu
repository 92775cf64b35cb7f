/* Softmax (causal and key masks) and its backward, cross-entropy and its
 * backward on the GPU, with the semantics of src/backend/cpu/k_softmax.c.
 * One block per row; the row's max is exact in any order, its sums are in
 * double over the block's fixed tree. The loss is the mean over counted
 * rows: per-row losses go to the backend's scratch buffer and are added by
 * one thread in row order (rows beyond what the scratch holds: one block
 * computes them all, in the same order). The activations (x, y, dy,
 * logits, dlogits) are F32 or BF16 (templated on their element type,
 * cu_common.cuh); the key mask, the targets and the loss keep their
 * dtypes (F32, I32, F32). */
#include "backend/cuda/cu_common.cuh"

#include <math.h>

#define SM_THREADS 256

template <typename T>
__global__ static void softmax_k(const T *x, T *y, int64_t tk,
                                 int64_t tq, int causal, const float *mask,
                                 int64_t per_b) {
    __shared__ double dbuf[SM_THREADS];
    __shared__ float fbuf[SM_THREADS];
    const int64_t r = blockIdx.x;
    const T *xr = x + r * tk;
    T *yr = y + r * tk;
    const float *mr = mask ? mask + (r / per_b) * tk : NULL;
    int64_t lim = tk;
    if (causal) {
        lim = r % tq + (tk - tq) + 1;
        if (lim > tk) lim = tk;
        if (lim < 0) lim = 0;
    }
    float m = -INFINITY;
    double kept = 0;
    for (int64_t k = threadIdx.x; k < lim; k += blockDim.x)
        if (!mr || mr[k] != 0.0f) {
            kept += 1;
            const float v = cu_ld(xr, k);
            if (v > m) m = v;
        }
    m = cu_block_max(m, fbuf);
    kept = cu_block_sum(kept, dbuf);
    if (kept == 0 || m == -INFINITY) {
        for (int64_t k = threadIdx.x; k < tk; k += blockDim.x)
            cu_st(yr, k, 0.0f);
        return;
    }
    double s = 0;
    for (int64_t k = threadIdx.x; k < lim; k += blockDim.x) {
        float e = !mr || mr[k] != 0.0f ? expf(cu_ld(xr, k) - m) : 0.0f;
        s += e;
    }
    const float inv = (float)(1.0 / cu_block_sum(s, dbuf));
    /* x may be y: every read of x is behind the block sum's barriers */
    for (int64_t k = threadIdx.x; k < tk; k += blockDim.x) {
        float e = k < lim && (!mr || mr[k] != 0.0f) ? expf(cu_ld(xr, k) - m)
                                                    : 0.0f;
        cu_st(yr, k, k < lim ? e * inv : 0.0f);
    }
}

void delta_cu_softmax(const delta_cuda_kctx *c, const delta_kargs *k) {
    const delta_tensor *xt = k->in_t[0];
    int64_t tk = xt->ndim > 0 ? xt->shape[xt->ndim - 1] : 1;
    int64_t rows = tk > 0 ? xt->numel / tk : 0;
    if (rows == 0) return;
    int64_t tq = xt->ndim >= 2 ? xt->shape[xt->ndim - 2] : 1;
    const float *mask = NULL;
    int64_t per_b = rows;
    if (k->op->a.has_mask) {
        DELTA_ASSERT(k->op->n_in >= 2);
        mask = (const float *)k->in[1];
        int64_t b = k->in_t[1]->shape[0];
        DELTA_ASSERT(b > 0 && rows % b == 0 && k->in_t[1]->numel == b * tk);
        per_b = rows / b;
    }
    CU_WITH_T(k->out_t[0], k->op,
              softmax_k<T><<<(unsigned)rows, SM_THREADS, 0, c->stream>>>(
                  (const T *)k->in[0], (T *)k->out[0], tk, tq,
                  k->op->a.causal != 0, mask, per_b));
}

template <typename T>
__global__ static void softmax_bwd_k(const T *y, const T *dy, T *dx,
                                     int64_t n) {
    __shared__ double buf[SM_THREADS];
    const int64_t r = blockIdx.x;
    const T *yr = y + r * n, *dyr = dy + r * n;
    T *dxr = dx + r * n;
    double s = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        s += (double)cu_ld(yr, i) * (double)cu_ld(dyr, i);
    const float sf = (float)cu_block_sum(s, buf);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        cu_st(dxr, i, cu_ld(yr, i) * (cu_ld(dyr, i) - sf));
}

void delta_cu_softmax_bwd(const delta_cuda_kctx *c, const delta_kargs *k) {
    const delta_tensor *t = k->in_t[0];
    int64_t n = t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
    int64_t rows = n > 0 ? t->numel / n : 0;
    if (rows == 0) return;
    CU_WITH_T(k->out_t[0], k->op,
              softmax_bwd_k<T><<<(unsigned)rows, SM_THREADS, 0, c->stream>>>(
                  (const T *)k->in[0], (const T *)k->in[1], (T *)k->out[0],
                  n));
}

__device__ static inline bool ce_counted(int32_t t, int64_t v, int ignore) {
    return t != ignore && t >= 0 && (int64_t)t < v;
}

/* The row's max (*m) and Σexp(x - max) in double, by the calling block. */
template <typename T>
__device__ static double row_max_sum(const T *x, int64_t v, float *m_out,
                                     double *dbuf, float *fbuf) {
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < v; i += blockDim.x)
        if (cu_ld(x, i) > m) m = cu_ld(x, i);
    m = cu_block_max(m, fbuf);
    double s = 0;
    for (int64_t i = threadIdx.x; i < v; i += blockDim.x)
        s += expf(cu_ld(x, i) - m);
    *m_out = m;
    return cu_block_sum(s, dbuf);
}

/* Row r's loss max + log Σexp(x - max) - x[t], by the calling block. */
template <typename T>
__device__ static double ce_row_loss(const T *x, int32_t t, int64_t v,
                                     double *dbuf, float *fbuf) {
    float m;
    double s = row_max_sum(x, v, &m, dbuf, fbuf);
    return (double)m + log(s) - (double)cu_ld(x, t);
}

/* dloss / (rows counted), counting the targets in order. */
__device__ static float ce_grad_scale(const int32_t *tg, const float *dloss,
                                      int64_t n, int64_t v, int ignore) {
    int64_t count = 0;
    for (int64_t r = 0; r < n; r++) count += ce_counted(tg[r], v, ignore);
    return count ? (float)((double)*dloss / (double)count) : 0.0f;
}

/* One block per row: part[r] = the row's loss (0 when not counted). */
template <typename T>
__global__ static void ce_rows_k(const T *logits, const int32_t *tg,
                                 double *part, int64_t v, int ignore) {
    __shared__ double dbuf[SM_THREADS];
    __shared__ float fbuf[SM_THREADS];
    const int64_t r = blockIdx.x;
    int32_t t = tg[r];
    double l = 0;
    if (ce_counted(t, v, ignore))
        l = ce_row_loss(logits + r * v, t, v, dbuf, fbuf);
    if (threadIdx.x == 0) part[r] = l;
}

/* loss = Σ part / count, added in row order by one thread; part == NULL:
 * the block computes every row's loss itself, in row order. */
template <typename T>
__global__ static void ce_total_k(const T *logits, const int32_t *tg,
                                  const double *part, float *loss, int64_t n,
                                  int64_t v, int ignore) {
    __shared__ double dbuf[SM_THREADS];
    __shared__ float fbuf[SM_THREADS];
    double total = 0;
    int64_t count = 0;
    for (int64_t r = 0; r < n; r++) {
        int32_t t = tg[r];
        if (!ce_counted(t, v, ignore)) continue;
        total += part ? part[r] : ce_row_loss(logits + r * v, t, v, dbuf, fbuf);
        count++;
    }
    if (threadIdx.x == 0) *loss = count ? (float)(total / (double)count) : 0.0f;
}

template <typename T>
static void cross_entropy(const delta_cuda_kctx *c, const delta_kargs *k) {
    const T *logits = (const T *)k->in[0];
    const int32_t *tg = (const int32_t *)k->in[1];
    int64_t n = k->in_t[0]->shape[0], v = k->in_t[0]->shape[1];
    int ignore = k->op->a.ignore_index;
    double *part = NULL;
    if (n > 0 && (size_t)n * sizeof(double) <= c->scratch_bytes) {
        part = (double *)c->scratch;
        ce_rows_k<<<(unsigned)n, SM_THREADS, 0, c->stream>>>(logits, tg, part,
                                                              v, ignore);
    }
    ce_total_k<<<1, part ? 1 : SM_THREADS, 0, c->stream>>>(
        logits, tg, part, (float *)k->out[0], n, v, ignore);
}

void delta_cu_cross_entropy(const delta_cuda_kctx *c, const delta_kargs *k) {
    CU_WITH_T(k->in_t[0], k->op, cross_entropy<T>(c, k));
}

/* *g = dloss / count (one thread). */
__global__ static void ce_scale_k(const int32_t *tg, const float *dloss,
                                  float *g, int64_t n, int64_t v, int ignore) {
    *g = ce_grad_scale(tg, dloss, n, v, ignore);
}

/* One block per row: d = softmax(x) g, minus g at the target. */
template <typename T>
__global__ static void ce_bwd_k(const T *logits, const int32_t *tg,
                                const float *gp, T *dl, int64_t v,
                                int ignore, const float *dloss, int64_t n) {
    __shared__ double dbuf[SM_THREADS];
    __shared__ float fbuf[SM_THREADS];
    __shared__ float gs;
    const int64_t r = blockIdx.x;
    const T *x = logits + r * v;
    T *d = dl + r * v;
    if (threadIdx.x == 0) /* no scratch: every block counts */
        gs = gp ? *gp : ce_grad_scale(tg, dloss, n, v, ignore);
    __syncthreads();
    const float g = gs;
    int32_t t = tg[r];
    if (!ce_counted(t, v, ignore)) {
        for (int64_t i = threadIdx.x; i < v; i += blockDim.x)
            cu_st(d, i, 0.0f);
        return;
    }
    float m;
    const double s = row_max_sum(x, v, &m, dbuf, fbuf);
    const float sc = (float)((double)g / s);
    for (int64_t i = threadIdx.x; i < v; i += blockDim.x) {
        float e = expf(cu_ld(x, i) - m) * sc;
        cu_st(d, i, i == t ? e - g : e);
    }
}

void delta_cu_cross_entropy_bwd(const delta_cuda_kctx *c,
                                const delta_kargs *k) {
    const int32_t *tg = (const int32_t *)k->in[1];
    const float *dloss = (const float *)k->in[2];
    int64_t n = k->in_t[0]->shape[0], v = k->in_t[0]->shape[1];
    int ignore = k->op->a.ignore_index;
    if (n == 0) return;
    float *g = NULL;
    if (c->scratch_bytes >= sizeof(float)) {
        g = (float *)c->scratch;
        ce_scale_k<<<1, 1, 0, c->stream>>>(tg, dloss, g, n, v, ignore);
    }
    CU_WITH_T(k->in_t[0], k->op,
              ce_bwd_k<T><<<(unsigned)n, SM_THREADS, 0, c->stream>>>(
                  (const T *)k->in[0], tg, g, (T *)k->out[0], v, ignore,
                  dloss, n));
}
