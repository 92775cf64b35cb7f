/* Softmax over the last dim (with causal and key masks), its backward, and
 * the cross-entropy loss with its backward.
 *
 * Every row is computed by one thread, sequentially, with sums accumulated
 * in double; the cross-entropy loss sums per-row losses over a fixed number
 * of row blocks whose partial sums are combined in block order, so the
 * result is the same for any thread count. */
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
static void softmax_row(const float *x, float *y, int64_t n, int64_t lim,
                        const float *mask) {
    float m = -INFINITY;
    int64_t kept = 0;
    if (mask) {
        for (int64_t k = 0; k < lim; k++)
            if (mask[k] != 0.0f) {
                kept++;
                if (x[k] > m) m = x[k];
            }
    } else {
        kept = lim;
        for (int64_t k = 0; k < lim; k++)
            if (x[k] > m) m = x[k];
    }
    if (kept == 0 || m == -INFINITY) {
        memset(y, 0, (size_t)n * sizeof *y);
        return;
    }
    double s = 0;
    if (mask) {
        for (int64_t k = 0; k < lim; k++) {
            float e = mask[k] != 0.0f ? expf(x[k] - m) : 0.0f;
            y[k] = e;
            s += e;
        }
    } else {
        for (int64_t k = 0; k < lim; k++) {
            float e = expf(x[k] - m);
            y[k] = e;
            s += e;
        }
    }
    float inv = (float)(1.0 / s);
    for (int64_t k = 0; k < lim; k++) y[k] *= inv;
    for (int64_t k = lim; k < n; k++) y[k] = 0.0f;
}

void delta_k_softmax(const delta_kargs *k) {
    const delta_tensor *xt = k->in_t[0];
    const float *x = k->in[0];
    float *y = k->out[0];
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
        softmax_row(x + r * tk, y + r * tk, tk, lim, mr);
    }
}

void delta_k_softmax_bwd(const delta_kargs *k) {
    const float *y = k->in[0];
    const float *dy = k->in[1];
    float *dx = k->out[0];
    int64_t n;
    int64_t rows = rows_of(k->in_t[0], &n);
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; r++) {
        const float *yr = y + r * n, *dyr = dy + r * n;
        float *dxr = dx + r * n;
        double s = 0;
        for (int64_t i = 0; i < n; i++) s += (double)yr[i] * (double)dyr[i];
        float sf = (float)s;
        for (int64_t i = 0; i < n; i++) dxr[i] = yr[i] * (dyr[i] - sf);
    }
}

/* Whether row target t counts (in [0, v) and not the ignored index). */
static inline bool ce_counted(int32_t t, int64_t v, int ignore) {
    return t != ignore && t >= 0 && (int64_t)t < v;
}

/* Row maximum and sum of exp(x - max) (in double). */
static void row_max_sum(const float *x, int64_t v, float *m_out,
                        double *s_out) {
    float m = -INFINITY;
    for (int64_t i = 0; i < v; i++)
        if (x[i] > m) m = x[i];
    double s = 0;
    for (int64_t i = 0; i < v; i++) s += expf(x[i] - m);
    *m_out = m;
    *s_out = s;
}

/* The loss is summed over this many fixed row blocks (independent of the
 * thread count), each block sequentially, then the blocks in order. */
#define CE_BLOCKS 256

void delta_k_cross_entropy(const delta_kargs *k) {
    const float *logits = k->in[0];
    const int32_t *tg = k->in[1];
    float *loss = k->out[0];
    int64_t n = k->in_t[0]->shape[0], v = k->in_t[0]->shape[1];
    int ignore = k->op->a.ignore_index;
    double part[CE_BLOCKS];
    int64_t cnt[CE_BLOCKS];
    #pragma omp parallel for schedule(static)
    for (int b = 0; b < CE_BLOCKS; b++) {
        int64_t r0 = n * b / CE_BLOCKS, r1 = n * (b + 1) / CE_BLOCKS;
        double s = 0;
        int64_t c = 0;
        for (int64_t r = r0; r < r1; r++) {
            int32_t t = tg[r];
            if (!ce_counted(t, v, ignore)) continue;
            const float *x = logits + r * v;
            float m;
            double se;
            row_max_sum(x, v, &m, &se);
            s += (double)m + log(se) - (double)x[t];
            c++;
        }
        part[b] = s;
        cnt[b] = c;
    }
    double total = 0;
    int64_t count = 0;
    for (int b = 0; b < CE_BLOCKS; b++) {
        total += part[b];
        count += cnt[b];
    }
    *loss = count ? (float)(total / (double)count) : 0.0f;
}

void delta_k_cross_entropy_bwd(const delta_kargs *k) {
    const float *logits = k->in[0];
    const int32_t *tg = k->in[1];
    float dloss = *(const float *)k->in[2];
    float *dl = k->out[0];
    int64_t n = k->in_t[0]->shape[0], v = k->in_t[0]->shape[1];
    int ignore = k->op->a.ignore_index;
    int64_t count = 0;
    for (int64_t r = 0; r < n; r++) count += ce_counted(tg[r], v, ignore);
    float g = count ? (float)((double)dloss / (double)count) : 0.0f;
    #pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; r++) {
        const float *x = logits + r * v;
        float *d = dl + r * v;
        int32_t t = tg[r];
        if (!ce_counted(t, v, ignore)) {
            memset(d, 0, (size_t)v * sizeof *d);
            continue;
        }
        float m = -INFINITY;
        for (int64_t i = 0; i < v; i++)
            if (x[i] > m) m = x[i];
        double s = 0;
        for (int64_t i = 0; i < v; i++) {
            float e = expf(x[i] - m);
            d[i] = e;
            s += e;
        }
        float sc = (float)((double)g / s);
        for (int64_t i = 0; i < v; i++) d[i] *= sc;
        d[t] -= g;
    }
}
