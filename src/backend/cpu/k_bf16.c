/* BF16 on the CPU: bulk conversions, the cast kernel, the widening of the
 * ops that have no native BF16 kernel (the convolution family,
 * delta_op_widens_bf16; every other op reads BF16 itself, k_dtype.h), and
 * the BF16 GEMM behind matmul and linear.
 *
 * Every BF16 value is computed in fp32 and rounded once, to nearest even
 * (src/core/bf16.h), when it is stored. Conversions are elementwise, so
 * their static-schedule loops give the same bits for any thread count; the
 * GEMM never splits K, so each output element is the fp32 GEMM's sum of
 * the same products (docs/KERNELS.md, "Mixed precision").
 *
 * Why convert-and-sgemm: Debian 12's OpenBLAS 0.3.21 declares
 * cblas_sbgemm in cblas.h but is built without BUILD_BFLOAT16, so the
 * library exports no sbgemm symbol (checked with nm -D on both the openmp
 * and pthread builds). Converting bf16 -> fp32 is exact and the products
 * accumulate in fp32 either way, so converting blocks and calling
 * delta_gemm gives what an fp32-accumulating bf16 GEMM gives, on whichever
 * GEMM path is selected. Measured once (2 shared, loaded cores, built-in
 * GEMM, GPT-2 small shapes M 4096, N/K 768/3072): 0.15-0.5x the fp32
 * GEMM's FLOP/s, noisy; the cost is the block conversions and GEMMs on
 * 256 x 256 blocks. Converting inside the GEMM's own packing would remove
 * both; the CPU is the reference, not the fast path. */
#include "backend/cpu/kernels.h"
#include "backend/cpu/parallel.h"
#include "backend/kernel_shapes.h"
#include "core/bf16.h"

#include <string.h>

void delta_cpu_bf16_to_f32(const uint16_t *src, float *dst, int64_t n) {
    PAR_FOR(n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) dst[i] = delta_bf16_to_f32(src[i]);
}

void delta_cpu_f32_to_bf16(const float *src, uint16_t *dst, int64_t n) {
    PAR_FOR(n > PAR_MIN)
    for (int64_t i = 0; i < n; i++) dst[i] = delta_f32_to_bf16(src[i]);
}

void delta_k_cast(const delta_kargs *k) {
    int64_t n = k->out_t[0]->numel;
    if (k->in_t[0]->dtype == DELTA_F32 && k->out_t[0]->dtype == DELTA_BF16)
        delta_cpu_f32_to_bf16(k->in[0], k->out[0], n);
    else if (k->in_t[0]->dtype == DELTA_BF16 &&
             k->out_t[0]->dtype == DELTA_F32)
        delta_cpu_bf16_to_f32(k->in[0], k->out[0], n);
    else
        DELTA_ASSERTF(false, "cast op %d from %s to %s", k->op->id,
                      delta_dtype_name(k->in_t[0]->dtype),
                      delta_dtype_name(k->out_t[0]->dtype));
}

/* ---- widening ------------------------------------------------------------ */

bool delta_cpu_has_bf16(const delta_kargs *k) {
    for (int i = 0; i < k->op->n_in; i++)
        if (k->in_t[i] && k->in_t[i]->dtype == DELTA_BF16) return true;
    for (int i = 0; i < k->op->n_out; i++)
        if (k->out_t[i] && k->out_t[i]->dtype == DELTA_BF16) return true;
    return false;
}

void delta_widen_kargs(const delta_kargs *k, delta_widened *w) {
    const delta_op *op = k->op;
    char *p = k->ws;
    DELTA_ASSERTF(p, "widened op %d (%s) has no workspace", op->id, op->name);
    w->k = *k;
    w->op = *op;
    for (int n = 0; n < op->n_in + op->n_out; n++) {
        bool in = n < op->n_in;
        int i = in ? n : n - op->n_in;
        const delta_tensor *t = in ? k->in_t[i] : k->out_t[i];
        size_t b = delta_widen_bytes_of(t);
        if (!b) continue;
        delta_tensor *f = in ? &w->t_in[i] : &w->t_out[i];
        *f = *t;
        f->dtype = DELTA_F32;
        f->bytes = (size_t)f->numel * sizeof(float);
        if (in) {
            w->k.in_t[i] = f;
            w->k.in[i] = p;
        } else {
            w->k.out_t[i] = f;
            w->k.out[i] = p;
        }
        p += b;
    }
    size_t used = (size_t)(p - (char *)k->ws);
    DELTA_ASSERTF(used <= op->workspace, "op %d: %zu widening bytes, %zu "
                  "declared", op->id, used, op->workspace);
    /* a convolution sizes its blocks by op->workspace: it must see only
     * what follows the copies */
    w->op.workspace = op->workspace - used;
    w->k.op = &w->op;
    w->k.ws = w->op.workspace ? p : NULL;
}

void delta_cpu_run_widened(const delta_kargs *k, delta_kernel_fn fn) {
    delta_widened w;
    delta_widen_kargs(k, &w);
    for (int i = 0; i < k->op->n_in; i++)
        if (w.k.in[i] != k->in[i])
            delta_cpu_bf16_to_f32(k->in[i], (float *)w.k.in[i],
                                  k->in_t[i]->numel);
    fn(&w.k);
    for (int i = 0; i < k->op->n_out; i++)
        if (w.k.out[i] != k->out[i])
            delta_cpu_f32_to_bf16(w.k.out[i], k->out[i], k->out_t[i]->numel);
}

/* ---- GEMM ------------------------------------------------------------------ */

/* dst (rows x cols, row stride cols) = src[r0.., c0..] as fp32, src
 * row-major with row stride ld: a block in the operand's stored layout, so
 * every read is a contiguous run (the transposes are the GEMM's). */
static void widen_block(const uint16_t *src, int64_t ld, int64_t r0,
                        int64_t rows, int64_t c0, int64_t cols, float *dst) {
    PAR_FOR(rows * cols > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const uint16_t *s = src + (r0 + r) * ld + c0;
        float *d = dst + r * cols;
        for (int64_t c = 0; c < cols; c++) d[c] = delta_bf16_to_f32(s[c]);
    }
}

void delta_gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                     float alpha, const uint16_t *a, int64_t lda,
                     const uint16_t *b, int64_t ldb, const uint16_t *bias,
                     uint16_t *c, int64_t ldc, void *ws) {
    if (m == 0 || n == 0) return;
    const int64_t MB = m < DELTA_BF16_GEMM_MB ? m : DELTA_BF16_GEMM_MB;
    const int64_t NB = n < DELTA_BF16_GEMM_NB ? n : DELTA_BF16_GEMM_NB;
    /* workspace: A block (MB x k), B block (k x NB), C block (MB x NB),
     * at the offsets delta_bf16_gemm_workspace(m, n, k) sizes */
    size_t sa = delta_bf16_gemm_ws_round((size_t)(MB * k) * sizeof(float));
    size_t sb = delta_bf16_gemm_ws_round((size_t)(k * NB) * sizeof(float));
    float *wa = ws, *wb = (float *)((char *)ws + sa);
    float *wc = (float *)((char *)ws + sa + sb);
    for (int64_t j0 = 0; j0 < n; j0 += NB) {
        int64_t nb = n - j0 < NB ? n - j0 : NB;
        /* op(B)[:, j0..j0+nb]: rows j0.. of B (N x K) when transposed, else
         * columns j0.. of B (K x N) */
        if (tb) widen_block(b, ldb, j0, nb, 0, k, wb);
        else widen_block(b, ldb, 0, k, j0, nb, wb);
        int64_t lwb = tb ? k : nb;
        for (int64_t i0 = 0; i0 < m; i0 += MB) {
            int64_t mb = m - i0 < MB ? m - i0 : MB;
            if (ta) widen_block(a, lda, 0, k, i0, mb, wa);
            else widen_block(a, lda, i0, mb, 0, k, wa);
            int64_t lwa = ta ? mb : k;
            if (k > 0)
                delta_gemm(ta, tb, mb, nb, k, alpha, wa, lwa, wb, lwb, 0.0f,
                           wc, nb);
            else
                memset(wc, 0, (size_t)(mb * nb) * sizeof(float));
            PAR_FOR(mb * nb > PAR_MIN)
            for (int64_t i = 0; i < mb; i++) {
                uint16_t *cr = c + (i0 + i) * ldc + j0;
                const float *w = wc + i * nb;
                if (bias)
                    for (int64_t j = 0; j < nb; j++)
                        cr[j] = delta_f32_to_bf16(
                            w[j] + delta_bf16_to_f32(bias[j0 + j]));
                else
                    for (int64_t j = 0; j < nb; j++)
                        cr[j] = delta_f32_to_bf16(w[j]);
            }
        }
    }
}

void delta_k_matmul_bf16(const delta_kargs *k) {
    const matmul_geom g = matmul_geom_of(k->op, k->in_t[0], k->in_t[1]);
    const uint16_t *a = k->in[0], *b = k->in[1];
    uint16_t *c = k->out[0];
    float alpha = k->op->a.alpha;
    if (g.batch == 1 || (g.b_2d && !g.ta)) {
        delta_gemm_bf16(g.ta, g.tb, g.batch * g.m, g.n, g.k, alpha, a, g.lda,
                        b, g.ldb, NULL, c, g.n, k->ws);
        return;
    }
    for (int64_t i = 0; i < g.batch; i++)
        delta_gemm_bf16(g.ta, g.tb, g.m, g.n, g.k, alpha, a + i * g.sa,
                        g.lda, b + i * g.sb, g.ldb, NULL, c + i * g.sc, g.n,
                        k->ws);
}

void delta_k_linear_bf16(const delta_kargs *k) {
    const linear_geom g = linear_geom_of(k->op, k->in_t[0], k->in_t[1]);
    const uint16_t *bias = k->op->n_in > 2 ? k->in[2] : NULL;
    delta_gemm_bf16(false, g.tw, g.rows, g.out, g.in, 1.0f, k->in[0], g.in,
                    k->in[1], g.ldw, bias, k->out[0], g.out, k->ws);
}
