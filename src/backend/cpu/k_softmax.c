/* Softmax over the last dim (with causal and key masks), its backward, and
 * the cross-entropy loss with its backward.
 *
 * Every row is computed by one thread, sequentially, with sums accumulated
 * in double; the cross-entropy loss sums per-row losses over a fixed number
 * of row blocks whose partial sums are combined in block order, so the
 * result is the same for any thread count.
 *
 * x, y, dy, logits and dlogits are F32 or BF16 (one body per kernel,
 * k_dtype.h); the mask, the loss and dloss are F32. A BF16 row gets no
 * fp32 scratch: where the F32 kernel keeps exp(x - max) in its output
 * before scaling it, the BF16 form computes the exponential again (the
 * same float) so each output is rounded once. */
#include "backend/cpu/k_dtype.h"
#include "backend/cpu/kernels.h"

#include <math.h>
#include <string.h>

/* Rows of a tensor reduced over its last dim (0 when that dim is 0). */
static int64_t rows_of(const delta_tensor *t, int64_t *cols) {
    int64_t n = t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
    *cols = n;
    return n > 0 ? t->numel / n : 0;
}

/* y[0..n) = softmax of x[0..n) over the keys k < lim whose mask entry (if
 * mask) is nonzero; every other entry is 0, and a row with no kept entry
 * (or whose kept entries are all -inf) is all 0. x may equal y. */
K_BODY void softmax_row(const void *x, void *y, int64_t n, int64_t lim,
                        const float *mask, bool bf) {
    float m = -INFINITY;
    int64_t kept = 0;
    if (mask) {
        for (int64_t k = 0; k < lim; k++)
            if (mask[k] != 0.0f) {
                kept++;
                if (k_ld(x, k, bf) > m) m = k_ld(x, k, bf);
            }
    } else {
        kept = lim;
        for (int64_t k = 0; k < lim; k++)
            if (k_ld(x, k, bf) > m) m = k_ld(x, k, bf);
    }
    if (kept == 0 || m == -INFINITY) {
        for (int64_t k = 0; k < n; k++) k_st(y, k, 0.0f, bf);
        return;
    }
    double s = 0;
    for (int64_t k = 0; k < lim; k++) {
        float e = !mask || mask[k] != 0.0f ? expf(k_ld(x, k, bf) - m) : 0.0f;
        if (!bf) k_st(y, k, e, false);
        s += e;
    }
    float inv = (float)(1.0 / s);
    for (int64_t k = 0; k < lim; k++) {
        float e = bf ? (!mask || mask[k] != 0.0f ? expf(k_ld(x, k, bf) - m)
                                                 : 0.0f)
                     : ((float *)y)[k];
        k_st(y, k, e * inv, bf);
    }
    for (int64_t k = lim; k < n; k++) k_st(y, k, 0.0f, bf);
}

void delta_k_softmax(const delta_kargs *k) {
    const delta_tensor *xt = k->in_t[0];
    const bool bf = k_is_bf16(xt);
    const size_t es = delta_dtype_size(xt->dtype);
    const char *x = k->in[0];
    char *y = k->out[0];
    int64_t tk;
    int64_t rows = rows_of(xt, &tk);
    if (rows == 0) return;
    int64_t tq = xt->ndim >= 2 ? xt->shape[xt->ndim - 2] : 1;
    bool causal = k->op->a.causal != 0;
    const float *mask = NULL;
    int64_t per_b = rows;
    if (k->op->a.has_mask) {
        DELTA_ASSERT(k->op->n_in >= 2);
        mask = k->in[1];
        int64_t b = k->in_t[1]->shape[0];
        DELTA_ASSERT(b > 0 && rows % b == 0 && k->in_t[1]->numel == b * tk);
        per_b = rows / b;
    }
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        int64_t lim = tk;
        if (causal) {
            int64_t q = r % tq;
            lim = q + (tk - tq) + 1;
            if (lim > tk) lim = tk;
            if (lim < 0) lim = 0;
        }
        const float *mr = mask ? mask + (r / per_b) * tk : NULL;
        const size_t o = (size_t)(r * tk) * es;
        if (bf) softmax_row(x + o, y + o, tk, lim, mr, true);
        else softmax_row(x + o, y + o, tk, lim, mr, false);
    }
}

/* dx = y (dy - Σ y dy) over one row of n. */
K_BODY void softmax_bwd_row(const void *y, const void *dy, void *dx,
                            int64_t n, bool bf) {
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)k_ld(y, i, bf) * (double)k_ld(dy, i, bf);
    float sf = (float)s;
    for (int64_t i = 0; i < n; i++)
        k_st(dx, i, k_ld(y, i, bf) * (k_ld(dy, i, bf) - sf), bf);
}

void delta_k_softmax_bwd(const delta_kargs *k) {
    const bool bf = k_is_bf16(k->in_t[0]);
    const size_t es = delta_dtype_size(k->in_t[0]->dtype);
    const char *y = k->in[0], *dy = k->in[1];
    char *dx = k->out[0];
    int64_t n;
    int64_t rows = rows_of(k->in_t[0], &n);
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const size_t o = (size_t)(r * n) * es;
        if (bf) softmax_bwd_row(y + o, dy + o, dx + o, n, true);
        else softmax_bwd_row(y + o, dy + o, dx + o, n, false);
    }
}

/* Whether row target t counts (in [0, v) and not the ignored index). */
static inline bool ce_counted(int32_t t, int64_t v, int ignore) {
    return t != ignore && t >= 0 && (int64_t)t < v;
}

/* Row maximum and sum of exp(x - max) (in double). */
K_BODY void row_max_sum(const void *x, int64_t v, float *m_out,
                        double *s_out, bool bf) {
    float m = -INFINITY;
    for (int64_t i = 0; i < v; i++)
        if (k_ld(x, i, bf) > m) m = k_ld(x, i, bf);
    double s = 0;
    for (int64_t i = 0; i < v; i++) s += expf(k_ld(x, i, bf) - m);
    *m_out = m;
    *s_out = s;
}

/* The loss is summed over this many fixed row blocks (independent of the
 * thread count), each block sequentially, then the blocks in order. */
#define CE_BLOCKS 256

/* Rows [r0, r1) of the loss: the sum of the counted rows' losses and
 * their number. */
K_BODY double ce_rows(const void *logits, const int32_t *tg, int64_t r0,
                      int64_t r1, int64_t v, int ignore, int64_t *cnt,
                      bool bf) {
    const size_t es = bf ? 2 : 4;
    double s = 0;
    int64_t c = 0;
    for (int64_t r = r0; r < r1; r++) {
        int32_t t = tg[r];
        if (!ce_counted(t, v, ignore)) continue;
        const void *x = (const char *)logits + (size_t)(r * v) * es;
        float m;
        double se;
        row_max_sum(x, v, &m, &se, bf);
        s += (double)m + log(se) - (double)k_ld(x, t, bf);
        c++;
    }
    *cnt = c;
    return s;
}

void delta_k_cross_entropy(const delta_kargs *k) {
    const void *logits = k->in[0];
    const bool bf = k_is_bf16(k->in_t[0]);
    const int32_t *tg = k->in[1];
    float *loss = k->out[0];
    int64_t n = k->in_t[0]->shape[0], v = k->in_t[0]->shape[1];
    int ignore = k->op->a.ignore_index;
    double part[CE_BLOCKS];
    int64_t cnt[CE_BLOCKS];
    #pragma omp parallel for schedule(static)
    for (int b = 0; b < CE_BLOCKS; b++) {
        int64_t r0 = n * b / CE_BLOCKS, r1 = n * (b + 1) / CE_BLOCKS;
        part[b] = bf ? ce_rows(logits, tg, r0, r1, v, ignore, &cnt[b], true)
                     : ce_rows(logits, tg, r0, r1, v, ignore, &cnt[b], false);
    }
    double total = 0;
    int64_t count = 0;
    for (int b = 0; b < CE_BLOCKS; b++) {
        total += part[b];
        count += cnt[b];
    }
    *loss = count ? (float)(total / (double)count) : 0.0f;
}

/* One row of dlogits: softmax(x) g - g at the target t (counted rows
 * only). */
K_BODY void ce_bwd_row(const void *x, void *d, int64_t v, int32_t t,
                       float g, bool bf) {
    float m = -INFINITY;
    for (int64_t i = 0; i < v; i++)
        if (k_ld(x, i, bf) > m) m = k_ld(x, i, bf);
    double s = 0;
    for (int64_t i = 0; i < v; i++) {
        float e = expf(k_ld(x, i, bf) - m);
        if (!bf) k_st(d, i, e, false);
        s += e;
    }
    float sc = (float)((double)g / s);
    for (int64_t i = 0; i < v; i++) {
        float e = bf ? expf(k_ld(x, i, bf) - m) : ((float *)d)[i];
        float di = e * sc;
        k_st(d, i, i == t ? di - g : di, bf);
    }
}

void delta_k_cross_entropy_bwd(const delta_kargs *k) {
    const char *logits = k->in[0];
    const bool bf = k_is_bf16(k->in_t[0]);
    const size_t es = delta_dtype_size(k->in_t[0]->dtype);
    const int32_t *tg = k->in[1];
    float dloss = *(const float *)k->in[2];
    char *dl = k->out[0];
    int64_t n = k->in_t[0]->shape[0], v = k->in_t[0]->shape[1];
    int ignore = k->op->a.ignore_index;
    int64_t count = 0;
    for (int64_t r = 0; r < n; r++) count += ce_counted(tg[r], v, ignore);
    float g = count ? (float)((double)dloss / (double)count) : 0.0f;
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; r++) {
        const char *x = logits + (size_t)(r * v) * es;
        char *d = dl + (size_t)(r * v) * es;
        int32_t t = tg[r];
        if (!ce_counted(t, v, ignore)) memset(d, 0, (size_t)v * es);
        else if (bf) ce_bwd_row(x, d, v, t, g, true);
        else ce_bwd_row(x, d, v, t, g, false);
    }
}
