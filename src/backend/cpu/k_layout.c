/* Data-movement kernels: embedding lookup and its backward, transpose of two
 * dims, split and concat. All but embedding_bwd are pure copies; that one
 * sums each output element in token order within one thread. Elements are
 * moved as raw bytes (transpose, split, concat work for F32, I32 and BF16:
 * the bits are copied, no value is widened or rounded). */
#include "backend/cpu/k_dtype.h"
#include "backend/cpu/kernels.h"

#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

static int max_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* ---- embedding ---------------------------------------------------------- */

void delta_k_embedding(const delta_kargs *k) {
    const int32_t *ids = k->in[0];
    const float *table = k->in[1];
    float *y = k->out[0];
    int64_t n = k->in_t[0]->numel;
    int64_t v = k->in_t[1]->shape[0], d = k->in_t[1]->shape[1];
    size_t row = (size_t)d * sizeof(float);
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id >= 0 && (int64_t)id < v) memcpy(y + i * d, table + id * d, row);
        else memset(y + i * d, 0, row);
    }
}

void delta_k_embedding_bwd(const delta_kargs *k) {
    const int32_t *ids = k->in[0];
    const float *dy = k->in[1];
    float *dt = k->out[0];
    int64_t n = k->in_t[0]->numel;
    int64_t v = k->out_t[0]->shape[0], d = k->out_t[0]->shape[1];
    int64_t total = v * d;
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < total; i++) dt[i] = 0.0f;
    if (d == 0) return;
    /* Column blocks of d: each element of dtable is summed by the thread that
     * owns its column block, over the tokens in order. The block width does
     * not change any result, so it may follow the thread count. */
    int64_t nt = max_threads();
    int64_t w = (d + nt - 1) / nt;
    w = (w + 15) / 16 * 16;
    int64_t nb = (d + w - 1) / w;
    #pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nb; b++) {
        int64_t c0 = b * w, c1 = c0 + w < d ? c0 + w : d;
        for (int64_t i = 0; i < n; i++) {
            int32_t id = ids[i];
            if (id < 0 || (int64_t)id >= v) continue;
            float *o = dt + id * d;
            const float *g = dy + i * d;
            for (int64_t c = c0; c < c1; c++) o[c] += g[c];
        }
    }
}

/* ---- transpose ---------------------------------------------------------- */

/* Side of the square tiles of the last-dim transpose (4-byte elements):
 * 8 x 8 tiles (32-byte runs) measured faster than 16 or 32 on power-of-two
 * strides, where larger tiles thrash cache sets. */
#define TILE 8

/* Job j of the c == 1 transpose: a strip of TILE input rows of one (a, b)
 * m x n matrix (row stride ls) to its n x m image (row stride ld), walked
 * across in TILE x TILE tiles. es (4 or 2, a constant after inlining) is
 * the element size. */
K_BODY void transpose_strip(const char *x, char *y, int64_t j, int64_t m,
                            int64_t bm, int64_t n, int64_t tm, size_t es) {
    const int64_t ls = bm * n, ld = bm * m;
    int64_t im = j % tm, t = j / tm;
    int64_t bi = t % bm, ai = t / bm;
    const char *s = x + (size_t)(ai * m * bm * n + bi * n) * es;
    char *o = y + (size_t)(ai * n * bm * m + bi * m) * es;
    int64_t m0 = im * TILE, m1 = m0 + TILE < m ? m0 + TILE : m;
    for (int64_t n0 = 0; n0 < n; n0 += TILE) {
        int64_t n1 = n0 + TILE < n ? n0 + TILE : n;
        for (int64_t ni = n0; ni < n1; ni++)
            for (int64_t mi = m0; mi < m1; mi++)
                memcpy(o + (size_t)(ni * ld + mi) * es,
                       s + (size_t)(mi * ls + ni) * es, es);
    }
}

void delta_k_transpose(const delta_kargs *k) {
    const delta_tensor *xt = k->in_t[0];
    int d0 = k->op->a.dim, d1 = k->op->a.dim1;
    DELTA_ASSERT(0 <= d0 && d0 < d1 && d1 < xt->ndim);
    const size_t es = delta_dtype_size(xt->dtype);
    DELTA_ASSERT(es == 4 || es == 2);
    /* x viewed as (A, M, Bm, N, C) -> y (A, N, Bm, M, C). */
    int64_t a = 1, m = xt->shape[d0], bm = 1, n = xt->shape[d1], c = 1;
    for (int i = 0; i < d0; i++) a *= xt->shape[i];
    for (int i = d0 + 1; i < d1; i++) bm *= xt->shape[i];
    for (int i = d1 + 1; i < xt->ndim; i++) c *= xt->shape[i];
    const char *x = k->in[0];
    char *y = k->out[0];
    if (xt->numel == 0) return;
    if (c > 1) {
        /* Contiguous runs of c elements: one output row (a, n, b) holds m
         * runs, each from x[a, mi, b, n, :]. */
        int64_t orows = a * n * bm;
        size_t run = (size_t)c * es;
        #pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < orows; r++) {
            int64_t bi = r % bm, t = r / bm;
            int64_t ni = t % n, ai = t / n;
            char *o = y + (size_t)(r * m) * run;
            const char *s = x + (size_t)((ai * m * bm + bi) * n + ni) * run;
            size_t sstride = (size_t)(bm * n) * run;
            for (int64_t mi = 0; mi < m; mi++)
                memcpy(o + (size_t)mi * run, s + (size_t)mi * sstride, run);
        }
        return;
    }
    /* c == 1: for each (a, b), an m x n matrix with row stride bm*n goes to
     * an n x m matrix with row stride bm*m, in strips of TILE rows. */
    int64_t tm = (m + TILE - 1) / TILE;
    int64_t jobs = a * bm * tm;
    #pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < jobs; j++) {
        if (es == 4) transpose_strip(x, y, j, m, bm, n, tm, 4);
        else transpose_strip(x, y, j, m, bm, n, tm, 2);
    }
}

/* ---- split / concat ------------------------------------------------------ */

/* Bytes below which a contiguous copy is not divided among threads. */
#define PIECE_MIN 16384

/* Pieces each of `jobs` copies of up to len bytes is cut into, so that a
 * few large copies still spread over the threads. */
static int64_t pieces_for(int64_t jobs, size_t len) {
    int64_t want = 4 * (int64_t)max_threads();
    if (jobs >= want || len < 2 * PIECE_MIN) return 1;
    int64_t p = (want + jobs - 1) / jobs;
    int64_t cap = (int64_t)(len / PIECE_MIN);
    return p < cap ? p : cap;
}

/* x viewed as (outer, dim, inner): returns outer and inner. */
static void outer_inner(const delta_tensor *t, int dim, int64_t *outer,
                        int64_t *inner) {
    int64_t o = 1, in = 1;
    for (int i = 0; i < dim; i++) o *= t->shape[i];
    for (int i = dim + 1; i < t->ndim; i++) in *= t->shape[i];
    *outer = o;
    *inner = in;
}

/* Moves data between a whole tensor viewed as (outer, sum of parts, inner)
 * and n parts viewed as (outer, part_i, inner), in either direction: split
 * (to_parts) and concat are mirror images. Parts may differ in size along
 * the dim (concat's backward splits into its inputs' sizes). */
static void move_parts(char *whole, char *const *parts, const delta_tensor *wt,
                       const delta_tensor *const *pt, int n, int dim,
                       bool to_parts) {
    DELTA_ASSERT(dim >= 0 && dim < wt->ndim && n >= 1);
    int64_t outer, inner;
    outer_inner(wt, dim, &outer, &inner);
    size_t es = delta_dtype_size(wt->dtype);
    size_t len[DELTA_MAX_OP_IN], off[DELTA_MAX_OP_IN], row = 0, maxlen = 0;
    for (int i = 0; i < n; i++) {
        len[i] = (size_t)(pt[i]->shape[dim] * inner) * es;
        off[i] = row;
        row += len[i];
        if (len[i] > maxlen) maxlen = len[i];
    }
    DELTA_ASSERT(row == (size_t)(wt->shape[dim] * inner) * es);
    if (row == 0 || outer == 0) return;
    int64_t jobs = outer * n;
    int64_t pcs = pieces_for(jobs, maxlen);
    #pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < jobs * pcs; j++) {
        int64_t pc = j % pcs, job = j / pcs;
        int64_t o = job / n;
        int i = (int)(job % n);
        size_t l = len[i];
        size_t b0 = l * (size_t)pc / (size_t)pcs;
        size_t b1 = l * (size_t)(pc + 1) / (size_t)pcs;
        if (b1 <= b0) continue;
        char *w = whole + (size_t)o * row + off[i] + b0;
        char *p = parts[i] + (size_t)o * l + b0;
        if (to_parts) memcpy(p, w, b1 - b0);
        else memcpy(w, p, b1 - b0);
    }
}

void delta_k_split(const delta_kargs *k) {
    move_parts((char *)k->in[0], (char *const *)k->out, k->in_t[0], k->out_t,
               k->op->n_out, k->op->a.dim, true);
}

void delta_k_concat(const delta_kargs *k) {
    move_parts(k->out[0], (char *const *)k->in, k->out_t[0], k->in_t,
               k->op->n_in, k->op->a.dim, false);
}
