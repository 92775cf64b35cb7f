/* Elementwise kernels: activations and their gradients, add (with
 * trailing-dims broadcast), mul, scale, fill, broadcast, dropout, and the
 * full sum. Each output element depends on its own inputs only, so the
 * static-schedule loops give the same bits for any thread count; the sum
 * uses a fixed chunking whose partials are added in chunk order. Loops
 * read inputs before writing the same index, so out may alias an input.
 * All but sum and broadcast (F32 only) take F32 or BF16 operands with one
 * body each (k_dtype.h): EW_FOR compiles the loop once per dtype. */
#include "backend/cpu/k_dtype.h"
#include "backend/cpu/kernels.h"
#include "core/rng.h"
#include "delta/cpu.h"

#include <math.h>
#include <string.h>

/* Loops over fewer elements stay on one thread. */
#define EW_MIN 32768

#ifdef _OPENMP
#define EW_PRAGMA(x) _Pragma(#x)
#define EW_PARALLEL_FOR                                                    \
    EW_PRAGMA(omp parallel for schedule(static) num_threads(nt_)           \
                  if (n_ > EW_MIN))
#else
#define EW_PARALLEL_FOR
#endif

/* The parallel loop `for i in [0, n_): body` with body compiled twice:
 * with the constant BF true (BF16 operands, when bf) and false (F32), so
 * body's k_ld/k_st fold to plain loads and stores. */
#define EW_FOR(bf, i, ...)                                                 \
    do {                                                                   \
        if (bf) {                                                          \
            EW_LOOP_(true, i, __VA_ARGS__)                                 \
        } else {                                                           \
            EW_LOOP_(false, i, __VA_ARGS__)                                \
        }                                                                  \
    } while (0)
#define EW_LOOP_(bf_value, i, ...)                                         \
    EW_PARALLEL_FOR                                                        \
    for (int64_t i = 0; i < n_; i++) {                                     \
        const bool BF = bf_value;                                          \
        (void)BF;                                                          \
        __VA_ARGS__                                                        \
    }

/* Declares the n_ and nt_ that EW_PARALLEL_FOR reads. */
#define EW_SETUP(n)                                                        \
    const int64_t n_ = (n);                                                \
    const int nt_ = delta_cpu_threads();                                   \
    (void)n_;                                                              \
    (void)nt_

void delta_k_relu(const delta_kargs *k) {
    const void *x = k->in[0];
    void *y = k->out[0];
    EW_SETUP(k->out_t[0]->numel);
    EW_FOR(k_is_bf16(k->out_t[0]), i, {
        float v = k_ld(x, i, BF);
        k_st(y, i, v < 0.0f ? 0.0f : v, BF);
    });
}

void delta_k_relu_bwd(const delta_kargs *k) {
    const void *y = k->in[0], *dy = k->in[1];
    void *dx = k->out[0];
    EW_SETUP(k->out_t[0]->numel);
    EW_FOR(k_is_bf16(k->out_t[0]), i, {
        k_st(dx, i, k_ld(y, i, BF) > 0.0f ? k_ld(dy, i, BF) : 0.0f, BF);
    });
}

#define GELU_C 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_K 0.044715f

#define GELU_RSQRT2 0.7071067811865476f   /* 1/sqrt(2) */
#define GELU_RSQRT2PI 0.3989422804014327f /* 1/sqrt(2 pi) */

void delta_k_gelu(const delta_kargs *k) {
    const void *x = k->in[0];
    void *y = k->out[0];
    const bool bf = k_is_bf16(k->out_t[0]);
    EW_SETUP(k->out_t[0]->numel);
    if (k->op->a.gelu_erf) { /* exact: x Phi(x), as BERT */
        EW_FOR(bf, i, {
            float v = k_ld(x, i, BF);
            k_st(y, i, 0.5f * v * (1.0f + erff(v * GELU_RSQRT2)), BF);
        });
        return;
    }
    EW_FOR(bf, i, {
        float v = k_ld(x, i, BF);
        float u = GELU_C * (v + GELU_K * v * v * v);
        k_st(y, i, 0.5f * v * (1.0f + tanhf(u)), BF);
    });
}

void delta_k_gelu_bwd(const delta_kargs *k) {
    const void *x = k->in[0], *dy = k->in[1];
    void *dx = k->out[0];
    const bool bf = k_is_bf16(k->out_t[0]);
    EW_SETUP(k->out_t[0]->numel);
    if (k->op->a.gelu_erf) { /* d/dx x Phi(x) = Phi(x) + x phi(x) */
        EW_FOR(bf, i, {
            float v = k_ld(x, i, BF);
            float cdf = 0.5f * (1.0f + erff(v * GELU_RSQRT2));
            float pdf = GELU_RSQRT2PI * expf(-0.5f * v * v);
            k_st(dx, i, k_ld(dy, i, BF) * (cdf + v * pdf), BF);
        });
        return;
    }
    EW_FOR(bf, i, {
        float v = k_ld(x, i, BF);
        float t = tanhf(GELU_C * (v + GELU_K * v * v * v));
        float du = GELU_C * (1.0f + 3.0f * GELU_K * v * v);
        float d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
        k_st(dx, i, k_ld(dy, i, BF) * d, BF);
    });
}

/* Elements per block of the broadcast add. */
#define ADD_BLOCK 16384

/* Block blk of the broadcast add y = a + b, b repeating every bn
 * elements: walks b from the position the block's first element falls
 * on. */
K_BODY void add_block(const void *a, const void *b, void *y, int64_t blk,
                      int64_t n, int64_t bn, bool bf) {
    int64_t i = blk * ADD_BLOCK;
    int64_t end = i + ADD_BLOCK < n ? i + ADD_BLOCK : n;
    int64_t j = i % bn;
    while (i < end) {
        int64_t seg = bn - j < end - i ? bn - j : end - i;
        for (int64_t t = 0; t < seg; t++)
            k_st(y, i + t, k_ld(a, i + t, bf) + k_ld(b, j + t, bf), bf);
        i += seg;
        j = 0;
    }
}

void delta_k_add(const delta_kargs *k) {
    const void *a = k->in[0], *b = k->in[1];
    void *y = k->out[0];
    const bool bf = k_is_bf16(k->out_t[0]);
    int64_t n = k->out_t[0]->numel, bn = k->in_t[1]->numel;
    if (n == 0 || bn == 0) return;
    if (bn == n) {
        EW_SETUP(n);
        EW_FOR(bf, i, {
            k_st(y, i, k_ld(a, i, BF) + k_ld(b, i, BF), BF);
        });
        return;
    }
    int64_t blocks = (n + ADD_BLOCK - 1) / ADD_BLOCK;
    EW_SETUP(n);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt_) if (n_ > EW_MIN)
#endif
    for (int64_t blk = 0; blk < blocks; blk++) {
        if (bf) add_block(a, b, y, blk, n, bn, true);
        else add_block(a, b, y, blk, n, bn, false);
    }
}

void delta_k_mul(const delta_kargs *k) {
    const void *a = k->in[0], *b = k->in[1];
    void *y = k->out[0];
    EW_SETUP(k->out_t[0]->numel);
    EW_FOR(k_is_bf16(k->out_t[0]), i, {
        k_st(y, i, k_ld(a, i, BF) * k_ld(b, i, BF), BF);
    });
}

void delta_k_scale(const delta_kargs *k) {
    const void *x = k->in[0];
    void *y = k->out[0];
    float s = k->op->a.value;
    EW_SETUP(k->out_t[0]->numel);
    EW_FOR(k_is_bf16(k->out_t[0]), i, {
        k_st(y, i, s * k_ld(x, i, BF), BF);
    });
}

/* The sum's fixed split: element range c of SUM_CHUNKS, each summed with
 * SUM_LANES interleaved double accumulators, partials added in order. */
#define SUM_CHUNKS 256
#define SUM_LANES 8

static double sum_range(const float *x, int64_t lo, int64_t hi) {
    double acc[SUM_LANES] = {0};
    int64_t i = lo;
    for (; i + SUM_LANES <= hi; i += SUM_LANES)
        for (int l = 0; l < SUM_LANES; l++) acc[l] += (double)x[i + l];
    for (int l = 0; i < hi; i++, l++) acc[l] += (double)x[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
           ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

void delta_k_sum(const delta_kargs *k) {
    const float *x = k->in[0];
    float *y = k->out[0];
    double part[SUM_CHUNKS];
    EW_SETUP(k->in_t[0]->numel);
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(nt_) if (n_ > EW_MIN)
#endif
    for (int c = 0; c < SUM_CHUNKS; c++)
        part[c] = sum_range(x, n_ * c / SUM_CHUNKS, n_ * (c + 1) / SUM_CHUNKS);
    double s = 0.0;
    for (int c = 0; c < SUM_CHUNKS; c++) s += part[c];
    y[0] = (float)s;
}

void delta_k_fill(const delta_kargs *k) {
    void *y = k->out[0];
    float v = k->op->a.value;
    EW_SETUP(k->out_t[0]->numel);
    EW_FOR(k_is_bf16(k->out_t[0]), i, { k_st(y, i, v, BF); });
}

void delta_k_broadcast(const delta_kargs *k) {
    float v = ((const float *)k->in[0])[0];
    float *y = k->out[0];
    EW_SETUP(k->out_t[0]->numel);
    EW_PARALLEL_FOR
    for (int64_t i = 0; i < n_; i++) y[i] = v;
}

/* ---- dropout ---------------------------------------------------------------
 * Element i of the forward op `op_id` at step `step` is kept iff
 *   delta_rng_uniform(key, i) >= p,
 *   key = delta_mix64(seed ^ delta_mix64((uint32_t)op_id ^ (step << 32)))
 * (64-bit unsigned arithmetic); other backends must draw the same. */

uint64_t delta_dropout_key(uint64_t seed, int op_id, int64_t step) {
    return delta_mix64(seed ^ delta_mix64((uint64_t)(uint32_t)op_id ^
                                          ((uint64_t)step << 32)));
}

bool delta_dropout_keep(uint64_t seed, int op_id, int64_t step, int64_t i,
                        float p) {
    return delta_rng_uniform(delta_dropout_key(seed, op_id, step), (uint64_t)i) >= p;
}

/* y = keep(i) ? x / (1 - p) : 0 with the mask of (seed, op_id, step), or a
 * copy of x when not training. */
static void dropout_apply(const delta_kargs *k, int op_id, const void *x,
                          void *y) {
    EW_SETUP(k->out_t[0]->numel);
    if (!k->env->training) {
        if (y != x)
            memcpy(y, x, (size_t)n_ * delta_dtype_size(k->out_t[0]->dtype));
        return;
    }
    float p = k->op->a.p, q = 1.0f - p;
    uint64_t key = delta_dropout_key(k->env->seed, op_id, k->env->step);
    EW_FOR(k_is_bf16(k->out_t[0]), i, {
        k_st(y, i, delta_rng_uniform(key, (uint64_t)i) >= p
                       ? k_ld(x, i, BF) / q : 0.0f, BF);
    });
}

void delta_k_dropout(const delta_kargs *k) {
    dropout_apply(k, delta_dropout_key_op(k->op), k->in[0], k->out[0]);
}

void delta_k_dropout_bwd(const delta_kargs *k) {
    DELTA_ASSERTF(k->op->a.fwd_op >= 0, "dropout_bwd op %d has no forward op",
                  k->op->id);
    dropout_apply(k, k->op->a.fwd_op, k->in[0], k->out[0]);
}
