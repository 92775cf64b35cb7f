/* The CPU's native BF16 kernels against the widened path they replaced:
 * every op that meets BF16 but the convolution family and the GEMMs reads
 * BF16 itself (src/backend/cpu/k_dtype.h), so on the same inputs its
 * outputs must be bit for bit those of delta_cpu_run_widened (fp32 copies
 * of the BF16 operands, the op's F32 kernel, each BF16 output rounded once),
 * at 1 and 2 threads, on ordinary values and on special ones (signed
 * zeros, subnormals, large values, short mantissas whose sums and products
 * land on rounding ties, and infinities and NaNs in a second pass). And the
 * point of them: the declared workspace of those ops holds no fp32 copies,
 * so BF16's minimum budget is below FP32's.
 *
 * The fused batch norms are the exception to "the F32 kernel on widened
 * copies, rounded once": they give the bits of their unfused chain
 * (batchnorm, add, relu, each rounding its BF16 output), so they are
 * compared with that chain instead, on the same special values.
 *
 * Ops are taken from real programs (BF16 forward graphs and their
 * backward), run one by one on random operands. The one deliberate
 * difference from widening is not exercised: data movement (transpose,
 * split, concat, dropout outside training) copies bits, so a signalling
 * NaN stays signalling where widening would quiet it; the inputs hold
 * quiet NaNs only. */
#include "core/bf16.h"
#include "delta/delta.h"
#include "delta/exec.h"
#include "backend/cpu/kernels.h"
#include "test.h"

#include <math.h>
#include <string.h>

/* ---- the programs the ops come from -------------------------------------- */

typedef delta_tensor *(*prog_fn)(delta_ctx *c, delta_tensor *x,
                                 delta_tensor *x2);

typedef struct prog_case {
    const char *name;
    prog_fn fn;
    int ndim, ndim2;              /* ndim2 0: one input */
    int64_t shape[4], shape2[4];
} prog_case;

static delta_tensor *p_eltwise(delta_ctx *c, delta_tensor *x,
                               delta_tensor *x2) {
    delta_tensor *a = delta_gelu(c, delta_relu(c, x));
    delta_tensor *b = delta_gelu_erf(c, delta_scale(c, x2, 0.75f));
    return delta_dropout(c, delta_add(c, delta_mul(c, a, b), x), 0.25f);
}
static delta_tensor *p_add_bcast(delta_ctx *c, delta_tensor *x,
                                 delta_tensor *x2) {
    return delta_add(c, x, x2);
}
static delta_tensor *p_layernorm(delta_ctx *c, delta_tensor *x,
                                 delta_tensor *x2) {
    (void)x2;
    int64_t d = delta_tensor_dim(x, -1);
    delta_tensor *g = delta_param(c, "g", 1, &d,
                                  (delta_init){DELTA_INIT_UNIFORM, 0.5f, 1.5f});
    delta_tensor *b = delta_param(c, "b", 1, &d,
                                  (delta_init){DELTA_INIT_UNIFORM, -1, 1});
    return delta_layernorm(c, x, g, b, 1e-5f);
}
static delta_tensor *p_batchnorm(delta_ctx *c, delta_tensor *x,
                                 delta_tensor *x2) {
    (void)x2;
    int64_t ch = delta_tensor_dim(x, 1);
    delta_tensor *g = delta_param(c, "g", 1, &ch,
                                  (delta_init){DELTA_INIT_UNIFORM, 0.5f, 1.5f});
    delta_tensor *b = delta_param(c, "b", 1, &ch,
                                  (delta_init){DELTA_INIT_UNIFORM, -1, 1});
    return delta_batchnorm(c, x, g, b, NULL, NULL, 0.1f, 1e-5f);
}
static delta_tensor *p_softmax(delta_ctx *c, delta_tensor *x,
                               delta_tensor *x2) {
    (void)x2;
    return delta_softmax(c, x, true, NULL);
}
static delta_tensor *p_softmax_mask(delta_ctx *c, delta_tensor *x,
                                    delta_tensor *x2) {
    (void)x2;
    int64_t ms[2] = {delta_tensor_dim(x, 0), delta_tensor_dim(x, -1)};
    return delta_softmax(c, x, false, delta_input(c, "mask", DELTA_F32, 2, ms));
}
static delta_tensor *p_pools(delta_ctx *c, delta_tensor *x, delta_tensor *x2) {
    (void)x2;
    delta_tensor *p = delta_maxpool2d(c, x, 3, 2, 1);
    delta_tensor *q = delta_avgpool2d(c, delta_maxpool2d(c, p, 2, 1, 0), 3,
                                      1, 1);
    /* stride above the window: dx rows no window reaches */
    delta_tensor *gap = delta_maxpool2d(c, delta_avgpool2d(c, p, 2, 3, 0), 1,
                                        2, 0);
    return delta_add(c, delta_add(c, delta_global_avgpool(c, q),
                                  delta_global_avgpool(c, gap)),
                     delta_global_avgpool(c, delta_avgpool2d(c, p, 2, 2, 0)));
}
/* split into three, one part unused (its gradient is a BF16 fill), both
 * transpose paths (a contiguous run, and single elements), concat */
static delta_tensor *p_layout(delta_ctx *c, delta_tensor *x,
                              delta_tensor *x2) {
    (void)x2;
    delta_tensor *parts[3];
    if (delta_split(c, x, 1, 3, parts) != DELTA_OK) return NULL;
    delta_tensor *t = delta_transpose(c, parts[0], 0, 1);
    delta_tensor *u = delta_transpose(c, parts[1], 1, 2);
    delta_tensor *cat[2] = {delta_transpose(c, t, 0, 1),
                            delta_transpose(c, u, 1, 2)};
    return delta_concat(c, cat, 2, 2);
}
static delta_tensor *p_cross_entropy(delta_ctx *c, delta_tensor *x,
                                     delta_tensor *x2) {
    (void)x2;
    int64_t n = delta_tensor_dim(x, 0);
    return delta_cross_entropy(c, x, delta_input(c, "targets", DELTA_I32, 1,
                                                 &n), -100);
}
/* linear's bias gradient is sum_leading */
static delta_tensor *p_linear(delta_ctx *c, delta_tensor *x,
                              delta_tensor *x2) {
    int64_t o = delta_tensor_dim(x2, 0);
    delta_tensor *b = delta_param(c, "bias", 1, &o,
                                  (delta_init){DELTA_INIT_UNIFORM, -1, 1});
    return delta_linear(c, x, x2, delta_cast(c, b, DELTA_BF16));
}

/* Sizes above PAR_MIN (32768 elements) where a kernel splits its loop, so
 * the 2-thread runs really use two threads; odd sizes for the tails. */
static const prog_case progs[] = {
    {"eltwise", p_eltwise, 3, 3, {3, 129, 101}, {3, 129, 101}},
    {"add_broadcast", p_add_bcast, 3, 1, {5, 99, 87}, {87}},
    {"layernorm", p_layernorm, 3, 0, {2, 37, 520}, {0}},
    {"layernorm_short", p_layernorm, 2, 0, {5, 13}, {0}},
    {"batchnorm", p_batchnorm, 4, 0, {4, 8, 33, 40}, {0}},
    {"batchnorm_nc", p_batchnorm, 2, 0, {129, 37}, {0}},
    {"softmax_causal", p_softmax, 4, 0, {2, 4, 64, 80}, {0}},
    {"softmax_mask", p_softmax_mask, 4, 0, {2, 3, 9, 11}, {0}},
    {"pools", p_pools, 4, 0, {3, 8, 40, 41}, {0}},
    /* rows wider than the pool gradients' stack ring (k x W > 4096
     * floats): their ring comes from the heap */
    {"pools_wide", p_pools, 4, 0, {1, 2, 9, 2100}, {0}},
    {"layout", p_layout, 3, 0, {7, 9, 650}, {0}},
    {"cross_entropy", p_cross_entropy, 2, 0, {300, 137}, {0}},
    {"linear_bias", p_linear, 3, 2, {4, 150, 24}, {96, 24}},
};
#define N_PROGS ((int)(sizeof progs / sizeof progs[0]))

/* BF16 operands from F32 parameters through casts, the op chain, its output
 * back to F32 and a loss sum(out * r), then the backward pass: every op of
 * the chain meets BF16 forward and backward. */
static delta_ctx *prog_build(const prog_case *pc) {
    delta_ctx *c = delta_ctx_new();
    delta_tensor *x = delta_cast(
        c, delta_param(c, "x", pc->ndim, pc->shape,
                       (delta_init){DELTA_INIT_UNIFORM, -2, 2}), DELTA_BF16);
    delta_tensor *x2 = NULL;
    if (pc->ndim2)
        x2 = delta_cast(c, delta_param(c, "x2", pc->ndim2, pc->shape2,
                                       (delta_init){DELTA_INIT_UNIFORM, -2,
                                                    2}), DELTA_BF16);
    delta_tensor *y = pc->fn(c, x, x2);
    delta_tensor *loss = y;
    if (y && delta_tensor_numel(y) > 1) {
        delta_tensor *y32 = delta_cast(c, y, DELTA_F32);
        delta_tensor *r = delta_input(c, "r", DELTA_F32, delta_tensor_ndim(y),
                                      delta_tensor_shape(y));
        loss = delta_sum(c, delta_mul(c, y32, r));
    }
    if (!y || delta_backward(c, loss) != DELTA_OK) {
        fprintf(stderr, "  %s: %s\n", pc->name, delta_ctx_error(c));
        delta_ctx_free(c);
        return NULL;
    }
    return c;
}

/* ---- operands ------------------------------------------------------------- */

/* A BF16 value: mostly ordinary, one in four special; wild adds
 * infinities, quiet NaNs and values near the top of the range. */
static uint16_t gen_bf16(bool wild) {
    uint32_t r = test_rng_u32();
    uint16_t sign = (uint16_t)((r >> 5) & 1) << 15;
    switch (r % 24) {
    case 0: return sign; /* ±0 */
    case 1: return sign | (uint16_t)(((r >> 8) & 0x7F) | 1); /* subnormal */
    case 2: return sign | delta_f32_to_bf16(test_rng_f(1e3f, 3e4f));
    case 3:
    case 4: /* 1..1.875 times 2^-9..2^3: sums and products land on ties */
        return sign | delta_f32_to_bf16(ldexpf(1.0f + (float)((r >> 8) % 8)
                                               / 8.0f, (int)((r >> 12) % 13)
                                               - 9));
    case 5: return sign | 0x0080; /* the smallest normal */
    case 6:
        if (!wild) break;
        return sign | ((r >> 8) % 3 == 0 ? 0x7F80  /* inf */
                       : (r >> 8) % 3 == 1 ? 0x7FC0 /* quiet NaN */
                                           : 0x7F7F); /* the largest */
    default: break;
    }
    return delta_f32_to_bf16(test_rng_f(-3.0f, 3.0f));
}

/* Fills operand t (data d) as its role wants: BF16 from gen_bf16; F32 as
 * a norm's gamma, statistics or dloss ([0.5, 1.5)), the key mask 0/1; I32
 * targets in [-1, 140), some -100 (ignored) and some out of range. */
static void fill_operand(const delta_tensor *t, void *d, bool wild) {
    for (int64_t i = 0; i < t->numel; i++) {
        if (t->dtype == DELTA_BF16) {
            ((uint16_t *)d)[i] = gen_bf16(wild);
        } else if (t->dtype == DELTA_F32) {
            ((float *)d)[i] = !strcmp(t->name, "mask")
                                  ? (float)(test_rng_u32() % 4 != 0)
                                  : test_rng_f(0.5f, 1.5f);
        } else {
            uint32_t r = test_rng_u32();
            ((int32_t *)d)[i] = r % 10 == 0 ? -100 : (int32_t)(r % 141) - 1;
        }
    }
}

static size_t data_bytes(const delta_tensor *t) {
    size_t b = (size_t)t->numel * delta_dtype_size(t->dtype);
    return (b + 63) / 64 * 64 + 64;
}

/* ---- one op, native against widened -------------------------------------- */

static bool is_native_bf16_op(const delta_op *op) {
    switch (op->type) {
    case DELTA_OP_MATMUL: case DELTA_OP_LINEAR: case DELTA_OP_CAST:
    case DELTA_OP_RESHAPE:
        return false;
    default:
        return !delta_op_widens_bf16(op->type);
    }
}

/* Whether bits u of a value of dtype dt are a NaN. A NaN's sign and payload
 * are not the same from one compiled expression to another (x86 gives the
 * first operand's NaN, or the negative default NaN for an invalid
 * operation, and the compiler may swap operands of a commutative one), so
 * two NaNs count as the same value. */
static bool is_nan(uint32_t u, delta_dtype dt) {
    if (dt == DELTA_BF16) return (u & 0x7FFFu) > 0x7F80u;
    if (dt == DELTA_F32) return (u & 0x7FFFFFFFu) > 0x7F800000u;
    return false;
}

/* Runs op natively and widened on the same random operands (seeded by
 * seed) and compares every output byte. Returns false, saying where, on
 * the first difference. */
static bool compare_op(const delta_ctx *c, const delta_op *op, uint64_t seed,
                       bool wild, bool training, char *why, size_t why_n) {
    delta_kernel_env env = {.seed = 77, .step = 3, .training = training};
    delta_kargs kn = {.op = op, .env = &env}, kw;
    void *outs_w[DELTA_MAX_OP_OUT] = {0};
    size_t copies = 0;
    test_rng_seed(seed);
    for (int i = 0; i < op->n_in; i++) {
        const delta_tensor *t = c->tensors[op->in[i]];
        kn.in_t[i] = t;
        kn.in[i] = aligned_alloc(64, data_bytes(t));
        fill_operand(t, (void *)kn.in[i], wild);
        copies += delta_widen_bytes_of(t);
    }
    for (int i = 0; i < op->n_out; i++) {
        const delta_tensor *t = c->tensors[op->out[i]];
        kn.out_t[i] = t;
        /* different garbage in each, so an output element left unwritten
         * by either path shows as a difference */
        kn.out[i] = aligned_alloc(64, data_bytes(t));
        outs_w[i] = aligned_alloc(64, data_bytes(t));
        memset(kn.out[i], 0xA5, data_bytes(t));
        memset(outs_w[i], 0x5A, data_bytes(t));
        copies += delta_widen_bytes_of(t);
    }
    kn.ws = op->workspace ? aligned_alloc(64, op->workspace + 64) : NULL;
    /* the widened call as before: the copies' bytes added to the op's
     * own workspace, the F32 kernel on them */
    delta_op wop = *op;
    wop.workspace = op->workspace + copies;
    kw = kn;
    kw.op = &wop;
    for (int i = 0; i < op->n_out; i++) kw.out[i] = outs_w[i];
    kw.ws = aligned_alloc(64, wop.workspace + 64);
    delta_cpu_run(&kn);
    delta_cpu_run_widened(&kw, delta_cpu_kernel(op->type));
    bool same = true;
    for (int i = 0; i < op->n_out && same; i++) {
        const delta_tensor *t = kn.out_t[i];
        size_t es = delta_dtype_size(t->dtype);
        for (int64_t j = 0; j < t->numel && same; j++) {
            const char *a = (const char *)kn.out[i] + j * es;
            const char *b = (const char *)kw.out[i] + j * es;
            uint32_t ua = 0, ub = 0;
            memcpy(&ua, a, es);
            memcpy(&ub, b, es);
            if (ua != ub && !(is_nan(ua, t->dtype) && is_nan(ub, t->dtype))) {
                snprintf(why, why_n, "output %d (%s) element %lld: native "
                         "0x%0*x, widened 0x%0*x", i,
                         delta_dtype_name(t->dtype), (long long)j,
                         (int)es * 2, ua, (int)es * 2, ub);
                same = false;
            }
        }
    }
    for (int i = 0; i < op->n_in; i++) free((void *)kn.in[i]);
    for (int i = 0; i < op->n_out; i++) {
        free(kn.out[i]);
        free(outs_w[i]);
    }
    free(kn.ws);
    free(kw.ws);
    return same;
}

static void test_native_matches_widened(void) {
    static const delta_op_type expected[] = {
        DELTA_OP_BATCHNORM, DELTA_OP_BATCHNORM_BWD, DELTA_OP_MAXPOOL2D,
        DELTA_OP_MAXPOOL2D_BWD, DELTA_OP_AVGPOOL2D, DELTA_OP_AVGPOOL2D_BWD,
        DELTA_OP_GLOBAL_AVGPOOL, DELTA_OP_GLOBAL_AVGPOOL_BWD, DELTA_OP_RELU,
        DELTA_OP_RELU_BWD, DELTA_OP_GELU, DELTA_OP_GELU_BWD, DELTA_OP_ADD,
        DELTA_OP_MUL, DELTA_OP_SCALE, DELTA_OP_DROPOUT, DELTA_OP_DROPOUT_BWD,
        DELTA_OP_FILL, DELTA_OP_TRANSPOSE, DELTA_OP_SPLIT, DELTA_OP_CONCAT,
        DELTA_OP_SOFTMAX, DELTA_OP_SOFTMAX_BWD, DELTA_OP_CROSS_ENTROPY,
        DELTA_OP_CROSS_ENTROPY_BWD, DELTA_OP_LAYERNORM,
        DELTA_OP_LAYERNORM_BWD, DELTA_OP_SUM_LEADING,
    };
    bool seen[DELTA_OP_TYPE_COUNT] = {0};
    int saved = delta_cpu_threads(), compared = 0;
    for (int pi = 0; pi < N_PROGS; pi++) {
        delta_ctx *c = prog_build(&progs[pi]);
        CHECK(c != NULL, "%s builds", progs[pi].name);
        if (!c) continue;
        for (int oi = 0; oi < c->n_ops; oi++) {
            const delta_op *op = delta_ctx_op(c, oi);
            bool bf = false;
            for (int i = 0; i < op->n_in; i++)
                bf |= c->tensors[op->in[i]]->dtype == DELTA_BF16;
            for (int i = 0; i < op->n_out; i++)
                bf |= c->tensors[op->out[i]]->dtype == DELTA_BF16;
            if (!bf || !is_native_bf16_op(op)) continue;
            CHECK(op->workspace == 0, "%s: op %d (%s) declares %zu bytes of "
                  "workspace; a native op needs none", progs[pi].name,
                  op->id, delta_op_type_name(op->type), op->workspace);
            for (int run = 0; run < 8; run++) {
                int threads = 1 + run % 2;
                bool wild = run / 2 % 2, training = run / 4 == 0;
                char why[160];
                delta_cpu_set_threads(threads);
                bool ok = compare_op(c, op, (uint64_t)(oi * 8 + run + 1),
                                     wild, training, why, sizeof why);
                CHECK(ok, "%s: op %d (%s), %d thread(s), %s values%s: %s",
                      progs[pi].name, op->id, delta_op_type_name(op->type),
                      threads, wild ? "special" : "ordinary",
                      training ? "" : ", eval", ok ? "" : why);
                compared++;
            }
            seen[op->type] = true;
        }
        delta_ctx_free(c);
    }
    delta_cpu_set_threads(saved);
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
        CHECK(seen[expected[i]], "%s was compared",
              delta_op_type_name(expected[i]));
    printf("  %d native/widened runs compared bit for bit\n", compared);
}

/* ---- the fused batch norms against their chain --------------------------- */

/* y1 = relu(bn1(x)) and y2 = relu(bn2(x) + r) on BF16 inputs x and r of
 * shape xs (nd 4 or 2), with running statistics (eval mode reads them);
 * fused by delta_ctx_fuse_batchnorm or left as the chain. */
static delta_ctx *bn_chains(const int64_t *xs, int nd, bool fuse,
                            delta_tensor **y1, delta_tensor **y2) {
    delta_ctx *c = delta_ctx_new();
    const delta_init one = {DELTA_INIT_ONES, 0, 0};
    delta_tensor *x = delta_input(c, "x", DELTA_BF16, nd, xs);
    delta_tensor *r = delta_input(c, "r", DELTA_BF16, nd, xs);
    delta_tensor *p[2][4];
    for (int i = 0; i < 2; i++) {
        static const char *const what[4] = {"g", "b", "rm", "rv"};
        for (int j = 0; j < 4; j++) {
            char n[16];
            snprintf(n, sizeof n, "%s%d", what[j], i);
            p[i][j] = j < 2 ? delta_param(c, n, 1, &xs[1], one)
                            : delta_state(c, n, 1, &xs[1], one);
        }
    }
    *y1 = delta_relu(c, delta_batchnorm(c, x, p[0][0], p[0][1], p[0][2],
                                        p[0][3], 0.1f, 1e-5f));
    *y2 = delta_relu(c, delta_add(c, delta_batchnorm(c, x, p[1][0], p[1][1],
                                                     p[1][2], p[1][3], 0.1f,
                                                     1e-5f), r));
    CHECK(!fuse || delta_ctx_fuse_batchnorm(c) == 2, "fused: %s",
          delta_ctx_error(c));
    CHECK(delta_ctx_status(c) == DELTA_OK, "%s", delta_ctx_error(c));
    return c;
}

/* gamma, beta and the running stats of channel ch: channel 0 % 4 has gamma
 * 1e-41 (an F32 subnormal) and beta 0, so its values x·scale + shift lie
 * within about 1e-40 of 0 and mostly round to +0 or -0 in BF16 (relu must
 * see the rounded value); channel 1 % 4 has beta -0; running mean in
 * [-1, 1), variance in [0.5, 1.5). */
static float bn_param(const char *name, int64_t ch) {
    switch (name[0]) {
    case 'g': return ch % 4 == 0 ? 1e-41f : test_rng_f(0.5f, 1.5f);
    case 'b': return ch % 4 == 0 ? 0.0f
                     : ch % 4 == 1 ? -0.0f : test_rng_f(-1.0f, 1.0f);
    default: return name[1] == 'm' ? test_rng_f(-1.0f, 1.0f)
                                   : test_rng_f(0.5f, 1.5f);
    }
}

/* The same operands into both programs' leaves (by name): BF16 inputs
 * from gen_bf16, the F32 parameters and statistics from bn_param. */
static void fill_chains(delta_ctx *cu, delta_exec *eu, delta_ctx *cf,
                        delta_exec *ef, bool wild) {
    for (int i = 0; i < delta_ctx_n_tensors(cu); i++) {
        const delta_tensor *t = delta_ctx_tensor(cu, i);
        if (delta_tensor_kind_of(t) == DELTA_KIND_ACTIVATION) continue;
        void *d = delta_exec_data(eu, t);
        for (int64_t j = 0; j < t->numel; j++) {
            if (t->dtype == DELTA_BF16) ((uint16_t *)d)[j] = gen_bf16(wild);
            else ((float *)d)[j] = bn_param(t->name, j);
        }
        delta_exec_set(ef, delta_ctx_find(cf, t->name), d, t->bytes);
    }
}

/* Whether BF16 tensors a (of eu) and b (of ef) hold the same bits, NaNs
 * as one value (is_nan); counts a's -0 elements into *neg_zeros. */
static bool same_bf16(delta_exec *eu, const delta_tensor *a, delta_exec *ef,
                      const delta_tensor *b, int64_t *neg_zeros,
                      char *why, size_t why_n) {
    const uint16_t *u = delta_exec_data(eu, a), *f = delta_exec_data(ef, b);
    for (int64_t j = 0; j < a->numel; j++) {
        *neg_zeros += u[j] == 0x8000;
        if (u[j] != f[j] && !(is_nan(u[j], DELTA_BF16) &&
                              is_nan(f[j], DELTA_BF16))) {
            snprintf(why, why_n, "element %lld: chain 0x%04x, fused 0x%04x",
                     (long long)j, u[j], f[j]);
            return false;
        }
    }
    return true;
}

/* batchnorm_relu and batchnorm_add_relu in BF16 give their chain's bits:
 * NCHW and (N, C) sizes above PAR_MIN, at 1 and 2 threads, in training
 * (batch statistics) and eval (running ones), on ordinary and special
 * values (signed zeros, subnormals, ties, then infinities and NaNs). */
static void test_fused_matches_chain(void) {
    static const int64_t shapes[][4] = {{4, 8, 33, 40}, {1031, 37, 0, 0}};
    int saved = delta_cpu_threads();
    int64_t neg_zeros = 0;
    for (int si = 0; si < 2; si++) {
        int nd = shapes[si][2] ? 4 : 2;
        delta_tensor *u1, *u2, *f1, *f2;
        delta_ctx *cu = bn_chains(shapes[si], nd, false, &u1, &u2);
        delta_ctx *cf = bn_chains(shapes[si], nd, true, &f1, &f2);
        char err[256];
        delta_exec *eu = delta_exec_new(cu, NULL, err, sizeof err);
        delta_exec *ef = delta_exec_new(cf, NULL, err, sizeof err);
        CHECK(eu && ef, "%s", err);
        for (int run = 0; eu && ef && run < 8; run++) {
            int threads = 1 + run % 2;
            bool wild = run / 2 % 2, training = run / 4 == 0;
            delta_run_mode mode = training ? DELTA_RUN_FORWARD : DELTA_RUN_EVAL;
            test_rng_seed((uint64_t)(si * 8 + run + 1));
            fill_chains(cu, eu, cf, ef, wild);
            delta_cpu_set_threads(threads);
            CHECK(delta_exec_run(eu, mode) == DELTA_OK &&
                  delta_exec_run(ef, mode) == DELTA_OK, "runs");
            char why[128] = "";
            for (int k = 0; k < 2; k++) {
                bool ok = same_bf16(eu, k ? u2 : u1, ef, k ? f2 : f1,
                                    &neg_zeros, why, sizeof why);
                CHECK(ok, "%s, %dd, %d thread(s), %s values%s: %s",
                      k ? "batchnorm_add_relu" : "batchnorm_relu", nd,
                      threads, wild ? "special" : "ordinary",
                      training ? "" : ", eval", why);
            }
        }
        delta_exec_free(eu);
        delta_exec_free(ef);
        delta_ctx_free(cu);
        delta_ctx_free(cf);
    }
    delta_cpu_set_threads(saved);
    printf("  %lld outputs of -0 compared\n", (long long)neg_zeros);
    CHECK(neg_zeros > 0, "the tiny channels give -0 outputs");
}

/* ---- workspace and budgets ------------------------------------------------ */

/* name at delta plan's defaults: transformers batch 8, resnet18 at width
 * 16 on Fashion-MNIST's shapes (batch 64, 1 x 28 x 28, 10 classes). */
static delta_ctx *model_ctx(const char *name, bool bf16) {
    delta_ctx *c = delta_ctx_new();
    bool resnet = !strncmp(name, "resnet", 6);
    delta_model_config cfg = {.name = name, .batch = resnet ? 64 : 8,
                              .precision = bf16 ? DELTA_PRECISION_BF16
                                                : DELTA_PRECISION_FP32};
    if (resnet) {
        cfg.width = 16;
        cfg.image_size = 28;
        cfg.channels = 1;
        cfg.classes = 10;
    }
    delta_model m;
    CHECK(delta_model_build(c, &cfg, &m) == DELTA_OK, "%s: %s", name,
          m.error);
    delta_backward(c, m.loss);
    delta_optimizer_adamw(c, (delta_adamw_opts){1e-4f, 0.9f, 0.999f, 1e-8f,
                                                0.01f});
    return c;
}

/* GPT-2's loss gradient held fp32 copies of the logits and of their
 * gradient (the widened path's workspace) and was BF16's minimum-budget
 * op; now it declares none, and BF16's minimum budget falls below FP32's
 * (half the bytes per operand) for gpt2-tiny, bert-tiny and a small
 * resnet18. (At 224 x 224 too, where a widened convolution is BF16's
 * minimum-budget op: docs/KERNELS.md.) */
static void test_bf16_workspace_shrinks(void) {
    delta_ctx *g = model_ctx("gpt2-tiny", true);
    int ce = 0;
    for (int i = 0; i < g->n_ops; i++) {
        const delta_op *op = delta_ctx_op(g, i);
        if (op->type != DELTA_OP_CROSS_ENTROPY_BWD) continue;
        ce++;
        CHECK(g->tensors[op->in[0]]->dtype == DELTA_BF16,
              "gpt2-tiny's logits are BF16");
        CHECK(op->workspace == 0, "cross_entropy_bwd declares %zu bytes",
              op->workspace);
    }
    CHECK(ce == 1, "gpt2-tiny has one cross_entropy_bwd (%d)", ce);
    delta_ctx_free(g);
    static const char *const ms[] = {"gpt2-tiny", "resnet18", "bert-tiny"};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        delta_dry_plan dp[2];
        for (int p = 0; p < 2; p++) {
            delta_ctx *c = model_ctx(ms[i], p == 1);
            CHECK(delta_dry_plan_build(c, &dp[p], NULL, 0) == DELTA_OK,
                  "%s plan", ms[i]);
            delta_ctx_free(c);
        }
        printf("  %s: minimum budget fp32 %zu B (%s), bf16 %zu B (%s)\n",
               ms[i], dp[0].min_budget_bytes, dp[0].min_budget_op_type,
               dp[1].min_budget_bytes, dp[1].min_budget_op_type);
        CHECK(dp[1].min_budget_bytes < dp[0].min_budget_bytes,
              "%s: bf16's minimum budget %zu B is below fp32's %zu B",
              ms[i], dp[1].min_budget_bytes, dp[0].min_budget_bytes);
    }
}

int main(void) {
    TEST_RUN(test_native_matches_widened);
    TEST_RUN(test_fused_matches_chain);
    TEST_RUN(test_bf16_workspace_shrinks);
    TEST_MAIN_END();
}
