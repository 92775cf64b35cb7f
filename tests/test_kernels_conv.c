/* CPU kernels for convolution, pooling and normalization, against naive
 * direct loops accumulated in double, adjoint identities and finite
 * differences of double-precision references; determinism across runs,
 * buffer addresses and thread counts; workspace bounds. */
#include "backend/cpu/kernels.h"
#include "delta/cpu.h"
#include "graph/ops_impl.h"
#include "test.h"

/* ---- harness ----------------------------------------------------------- */

#define MAX_T 64
#define GUARD 256 /* floats after each buffer and the workspace, checked */
#define GUARD_BITS 0x7fc0dead

typedef struct bufs {
    float *p[MAX_T]; /* by tensor id */
} bufs;

static uint64_t rng_state = 88172645463325252ull;
static float frand(void) { /* in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) * (1.0 / (1 << 23)) - 1.0);
}

static void set_guard(float *p) {
    uint32_t g = GUARD_BITS;
    for (int i = 0; i < GUARD; i++) memcpy(p + i, &g, 4);
}
static int guard_ok(const float *p) {
    uint32_t g = GUARD_BITS, v;
    for (int i = 0; i < GUARD; i++) {
        memcpy(&v, p + i, 4);
        if (v != g) return 0;
    }
    return 1;
}

static float *alloc_f(int64_t n) {
    float *p = delta_alloc_aligned((size_t)(n + GUARD) * sizeof(float));
    if (!p) abort();
    set_guard(p + n);
    return p;
}

static float *tbuf(delta_ctx *ctx, bufs *b, int id) {
    if (!b->p[id]) b->p[id] = alloc_f(ctx->tensors[id]->numel);
    return b->p[id];
}

static void fill_rand(float *p, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) p[i] = scale * frand();
}

static void fill_nan(float *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) p[i] = NAN;
}

static void free_bufs(bufs *b) {
    for (int i = 0; i < MAX_T; i++) delta_free_aligned(b->p[i]);
    memset(b, 0, sizeof *b);
}

/* The kernels under test, by op type (dispatch.c maps every type). */
static void run_kernel(const delta_kargs *k) {
    switch (k->op->type) {
    case DELTA_OP_CONV2D: delta_k_conv2d(k); break;
    case DELTA_OP_CONV2D_DX: delta_k_conv2d_dx(k); break;
    case DELTA_OP_CONV2D_DW: delta_k_conv2d_dw(k); break;
    case DELTA_OP_BIAS_GRAD_NCHW: delta_k_bias_grad_nchw(k); break;
    case DELTA_OP_MAXPOOL2D: delta_k_maxpool2d(k); break;
    case DELTA_OP_MAXPOOL2D_BWD: delta_k_maxpool2d_bwd(k); break;
    case DELTA_OP_AVGPOOL2D: delta_k_avgpool2d(k); break;
    case DELTA_OP_AVGPOOL2D_BWD: delta_k_avgpool2d_bwd(k); break;
    case DELTA_OP_GLOBAL_AVGPOOL: delta_k_global_avgpool(k); break;
    case DELTA_OP_GLOBAL_AVGPOOL_BWD: delta_k_global_avgpool_bwd(k); break;
    case DELTA_OP_BATCHNORM: delta_k_batchnorm(k); break;
    case DELTA_OP_BATCHNORM_BWD: delta_k_batchnorm_bwd(k); break;
    case DELTA_OP_BN_RUNNING_UPDATE: delta_k_bn_running_update(k); break;
    case DELTA_OP_LAYERNORM: delta_k_layernorm(k); break;
    case DELTA_OP_LAYERNORM_BWD: delta_k_layernorm_bwd(k); break;
    default: DELTA_ASSERTF(0, "no kernel under test for %s", k->op->name);
    }
}

/* Runs op (outputs pre-filled with NaN unless they alias an input) with a
 * workspace of exactly op->workspace bytes followed by a guard. */
static void run_op(delta_ctx *ctx, const delta_op *op, bufs *b,
                   bool training) {
    delta_kernel_env env = {7, 0, training, NULL};
    delta_kargs k;
    memset(&k, 0, sizeof k);
    k.op = op;
    k.env = &env;
    for (int i = 0; i < op->n_in; i++) {
        k.in_t[i] = ctx->tensors[op->in[i]];
        k.in[i] = tbuf(ctx, b, op->in[i]);
    }
    for (int i = 0; i < op->n_out; i++) {
        bool alias = false;
        for (int j = 0; j < op->n_in; j++) alias |= op->in[j] == op->out[i];
        k.out_t[i] = ctx->tensors[op->out[i]];
        k.out[i] = tbuf(ctx, b, op->out[i]);
        if (!alias) fill_nan(k.out[i], k.out_t[i]->numel);
    }
    size_t wsf = (op->workspace + sizeof(float) - 1) / sizeof(float);
    float *ws = NULL;
    if (op->workspace) {
        ws = alloc_f((int64_t)wsf);
        k.ws = ws;
    }
    run_kernel(&k);
    if (ws) {
        CHECK(guard_ok(ws + wsf), "%s wrote past its workspace", op->name);
        delta_free_aligned(ws);
    }
    for (int i = 0; i < op->n_out; i++)
        CHECK(guard_ok(b->p[op->out[i]] + ctx->tensors[op->out[i]]->numel),
              "%s wrote past output %d", op->name, i);
}

/* Copies every buffer of b into fresh allocations (other addresses). */
static void clone_bufs(delta_ctx *ctx, const bufs *src, bufs *dst) {
    memset(dst, 0, sizeof *dst);
    for (int i = 0; i < MAX_T; i++) {
        if (!src->p[i]) continue;
        int64_t n = ctx->tensors[i]->numel;
        /* an allocation in between so addresses really differ */
        float *pad = alloc_f(17 + i);
        dst->p[i] = alloc_f(n);
        memcpy(dst->p[i], src->p[i], (size_t)n * sizeof(float));
        delta_free_aligned(pad);
    }
}

static void set_threads(int n) { delta_cpu_set_threads(n); }
static int max_threads(void) { return delta_cpu_threads(); }

/* Runs op on b, then on copies at other addresses and with 1 and 2
 * threads; all outputs must equal b's bit for bit, except across thread
 * counts when !bits (a GEMM whose result depends on its thread count, as
 * OpenBLAS's may): there to 1e-4 + 1e-4 relative. Run to run, always bits. */
static void check_deterministic(delta_ctx *ctx, const delta_op *op, bufs *b,
                                bool training, bool bits) {
    int saved = max_threads();
    /* in-place ops (outputs alias inputs) are run on fresh clones only */
    bufs ref;
    clone_bufs(ctx, b, &ref);
    run_op(ctx, op, &ref, training);
    for (int trial = 0; trial < 3; trial++) {
        bufs c;
        clone_bufs(ctx, b, &c);
        set_threads(trial == 0 ? saved : trial == 1 ? 1 : 2);
        run_op(ctx, op, &c, training);
        for (int i = 0; i < op->n_out; i++) {
            const delta_tensor *t = ctx->tensors[op->out[i]];
            if (bits || trial == 0) {
                CHECK(memcmp(c.p[t->id], ref.p[t->id], t->bytes) == 0,
                      "%s output %d differs in trial %d", op->name, i, trial);
            } else {
                test_allclose(op->name, c.p[t->id], ref.p[t->id], t->numel,
                              1e-4, 1e-4);
            }
        }
        free_bufs(&c);
    }
    /* the same run again: bit-identical whatever the GEMM */
    bufs c;
    clone_bufs(ctx, b, &c);
    set_threads(saved);
    run_op(ctx, op, &c, training);
    for (int i = 0; i < op->n_out; i++) {
        const delta_tensor *t = ctx->tensors[op->out[i]];
        CHECK(memcmp(c.p[t->id], ref.p[t->id], t->bytes) == 0,
              "%s output %d differs on a second run", op->name, i);
    }
    free_bufs(&c);
    free_bufs(&ref);
    set_threads(saved);
}

/* Appends a backward-style op record with the given inputs and one output
 * of the given shape; sets its cost (and so its workspace). */
static delta_op *append_op(delta_ctx *ctx, delta_op_type type,
                           const delta_tensor *const *ins, int n_in,
                           delta_op_attrs a, int ndim, const int64_t *shape) {
    delta_op *op = delta_op_append(ctx, type, ins, n_in);
    op->a = a;
    int id = op->id;
    delta_op_add_output(ctx, &ctx->ops[id], DELTA_F32, ndim, shape);
    delta_op_set_cost(ctx, &ctx->ops[id]);
    return &ctx->ops[id];
}

static double dot(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* ---- convolution --------------------------------------------------------- */

typedef struct conv_case {
    int n, c, h, w, k, r, s, stride, pad;
    bool bias;
} conv_case;

static const conv_case conv_cases[] = {
    {1, 3, 7, 9, 4, 3, 3, 1, 1, true},     /* N = 1, odd sizes */
    {5, 4, 9, 8, 6, 3, 3, 2, 1, false},    /* stride 2 */
    {3, 8, 6, 6, 5, 1, 1, 1, 0, true},     /* 1x1, several images a block */
    {2, 8, 48, 48, 4, 1, 1, 1, 0, true},   /* 1x1, direct (no workspace) */
    {4, 2, 11, 13, 3, 5, 3, 3, 2, true},   /* non-square kernel, stride 3 */
    {6, 16, 7, 7, 8, 1, 1, 2, 0, false},   /* 1x1 stride 2 (downsample) */
    {5, 4, 32, 32, 6, 3, 3, 1, 1, true},   /* chunk < N, uneven last block */
    {1, 16, 128, 128, 4, 3, 3, 1, 1, false}, /* bands of output rows */
    {3, 3, 30, 30, 8, 7, 7, 2, 3, false},  /* stem-like 7x7/2 */
    {7, 64, 1, 1, 16, 3, 3, 1, 1, true},   /* 1x1 spatial, 3x3 kernel */
    {2, 5, 4, 4, 3, 4, 4, 1, 0, false},    /* kernel = input: 1x1 output */
    {4, 4, 5, 5, 3, 2, 2, 3, 0, false},    /* stride > kernel: dx gaps */
    {1, 4, 128, 128, 16, 3, 3, 1, 1, true}, /* dx as forward, in bands */
    {2, 3, 100, 100, 4, 3, 3, 2, 1, false}, /* one image a block, stride 2 */
    {2, 4, 100, 100, 3, 1, 1, 2, 0, true},  /* same, 1x1 stride 2 */
    {3, 5, 9, 9, 4, 5, 5, 1, 2, false},    /* 5x5 "same" */
    {6, 3, 12, 12, 8, 3, 3, 1, 1, true},   /* "same" with K > C */
    /* big enough for the parallel loops (small ones run on one thread) */
    {8, 16, 20, 20, 16, 3, 3, 1, 1, true},
    {4, 8, 40, 40, 8, 3, 3, 2, 1, false},
    {64, 32, 2, 2, 24, 3, 3, 1, 1, false},
};

static void conv_ref(const conv_case *cc, int64_t P, int64_t Q,
                     const float *x, const float *w, const float *b,
                     float *y) {
    for (int n = 0; n < cc->n; n++)
        for (int k = 0; k < cc->k; k++)
            for (int64_t p = 0; p < P; p++)
                for (int64_t q = 0; q < Q; q++) {
                    double s = b ? b[k] : 0.0;
                    for (int c = 0; c < cc->c; c++)
                        for (int r = 0; r < cc->r; r++)
                            for (int t = 0; t < cc->s; t++) {
                                int64_t h = p * cc->stride - cc->pad + r;
                                int64_t ww = q * cc->stride - cc->pad + t;
                                if (h < 0 || h >= cc->h || ww < 0 ||
                                    ww >= cc->w)
                                    continue;
                                s += (double)x[((int64_t)(n * cc->c + c) *
                                                    cc->h + h) * cc->w + ww] *
                                     w[((k * cc->c + c) * cc->r + r) * cc->s +
                                       t];
                            }
                    y[((n * cc->k + k) * P + p) * Q + q] = (float)s;
                }
}

/* dx and dw from dy by the same loops, in double. */
static void conv_bwd_ref(const conv_case *cc, int64_t P, int64_t Q,
                         const float *x, const float *w, const float *dy,
                         float *dx, float *dw) {
    int64_t nx = (int64_t)cc->n * cc->c * cc->h * cc->w;
    int64_t nw = (int64_t)cc->k * cc->c * cc->r * cc->s;
    double *ax = calloc((size_t)nx, sizeof(double));
    double *aw = calloc((size_t)nw, sizeof(double));
    for (int n = 0; n < cc->n; n++)
        for (int k = 0; k < cc->k; k++)
            for (int64_t p = 0; p < P; p++)
                for (int64_t q = 0; q < Q; q++) {
                    double d = dy[((n * cc->k + k) * P + p) * Q + q];
                    for (int c = 0; c < cc->c; c++)
                        for (int r = 0; r < cc->r; r++)
                            for (int t = 0; t < cc->s; t++) {
                                int64_t h = p * cc->stride - cc->pad + r;
                                int64_t ww = q * cc->stride - cc->pad + t;
                                if (h < 0 || h >= cc->h || ww < 0 ||
                                    ww >= cc->w)
                                    continue;
                                int64_t xi = ((int64_t)(n * cc->c + c) *
                                                  cc->h + h) * cc->w + ww;
                                int64_t wi = ((k * cc->c + c) * cc->r + r) *
                                                 cc->s + t;
                                ax[xi] += d * w[wi];
                                aw[wi] += d * x[xi];
                            }
                }
    for (int64_t i = 0; i < nx; i++) dx[i] = (float)ax[i];
    for (int64_t i = 0; i < nw; i++) dw[i] = (float)aw[i];
    free(ax);
    free(aw);
}

static void test_conv_geom(void) {
#if defined(DELTA_CONV_COL_BUDGET) || defined(DELTA_CONV_TARGET_COLS)
    TEST_SKIP("block sizes overridden at build time");
#endif
    /* chunking: the paths the cases below rely on are really taken, and
     * the workspace stays bounded for big batches and big images */
    int64_t xs[4], wsh[4];
    delta_conv_geom g;
#define GEOM(N, C, H, W, K, R, ST, PD)                                     \
    (xs[0] = N, xs[1] = C, xs[2] = H, xs[3] = W, wsh[0] = K, wsh[1] = C,   \
     wsh[2] = R, wsh[3] = R, g = delta_conv_geom_of(xs, wsh, ST, PD))
    GEOM(5, 4, 32, 32, 6, 3, 1, 1);
    CHECK(g.chunk > 1 && g.chunk < 5, "chunk %lld", (long long)g.chunk);
    GEOM(2, 8, 48, 48, 4, 1, 1, 0);
    CHECK(g.chunk == 1 && delta_conv_workspace(&g, DELTA_OP_CONV2D) == 0);
    GEOM(2, 16, 128, 128, 4, 3, 1, 1);
    size_t full = (size_t)16 * 9 * 128 * 128 * sizeof(float);
    CHECK(g.chunk == 1 && delta_conv_workspace(&g, DELTA_OP_CONV2D) < full);
    GEOM(7, 64, 1, 1, 16, 3, 1, 1);
    CHECK(g.chunk == 7);
    size_t cap = (size_t)64 << 20;
    GEOM(1024, 512, 7, 7, 512, 3, 1, 1);
    CHECK(delta_conv_workspace(&g, DELTA_OP_CONV2D_DW) <= cap);
    CHECK(delta_conv_workspace(&g, DELTA_OP_CONV2D_DX) <= cap);
    GEOM(1024, 3, 8, 8, 512, 3, 1, 1);
    CHECK(delta_conv_workspace(&g, DELTA_OP_CONV2D_DX) <= cap);
    GEOM(1024, 512, 8, 8, 3, 3, 1, 1);
    CHECK(delta_conv_workspace(&g, DELTA_OP_CONV2D_DX) <= cap);
    GEOM(256, 64, 224, 224, 64, 3, 1, 1);
    CHECK(delta_conv_workspace(&g, DELTA_OP_CONV2D_DX) <= cap);
    GEOM(4096, 1, 28, 28, 64, 7, 2, 3);
    CHECK(delta_conv_workspace(&g, DELTA_OP_CONV2D) <= cap);
    GEOM(64, 512, 1, 1, 512, 3, 1, 1);
    CHECK(delta_conv_workspace(&g, DELTA_OP_CONV2D) <= cap);
#undef GEOM
}

typedef struct conv_graph {
    delta_ctx *ctx;
    int x, w, b, y, dy;
    int fwd, dx_op, dw_op, db_op;
} conv_graph;

static conv_graph build_conv(const conv_case *cc) {
    conv_graph cg;
    cg.ctx = delta_ctx_new();
    delta_ctx *ctx = cg.ctx;
    int64_t xs[4] = {cc->n, cc->c, cc->h, cc->w};
    int64_t wsh[4] = {cc->k, cc->c, cc->r, cc->s};
    int64_t bs[1] = {cc->k};
    delta_init z = {DELTA_INIT_ZEROS, 0, 0};
    delta_tensor *x = delta_input(ctx, "x", DELTA_F32, 4, xs);
    delta_tensor *w = delta_param(ctx, "w", 4, wsh, z);
    delta_tensor *b = cc->bias ? delta_param(ctx, "b", 1, bs, z) : NULL;
    delta_tensor *y = delta_conv2d(ctx, x, w, b, cc->stride, cc->pad);
    CHECK(y != NULL, "%s", delta_ctx_error(ctx));
    cg.x = x->id;
    cg.w = w->id;
    cg.b = b ? b->id : -1;
    cg.y = y->id;
    cg.fwd = ctx->n_ops - 1;
    delta_tensor *dy = delta_input(ctx, "dy", DELTA_F32, 4, y->shape);
    cg.dy = dy->id;
    delta_op_attrs a = delta_attrs0();
    a.stride = cc->stride;
    a.pad = cc->pad;
    const delta_tensor *idx[2] = {dy, w};
    cg.dx_op = append_op(ctx, DELTA_OP_CONV2D_DX, idx, 2, a, 4, xs)->id;
    const delta_tensor *idw[2] = {x, dy};
    cg.dw_op = append_op(ctx, DELTA_OP_CONV2D_DW, idw, 2, a, 4, wsh)->id;
    const delta_tensor *idb[1] = {dy};
    cg.db_op = append_op(ctx, DELTA_OP_BIAS_GRAD_NCHW, idb, 1, delta_attrs0(),
                         1, bs)->id;
    CHECK(ctx->status == DELTA_OK, "%s", delta_ctx_error(ctx));
    return cg;
}

static void test_conv(void) {
    for (size_t ci = 0; ci < sizeof conv_cases / sizeof conv_cases[0];
         ci++) {
        const conv_case *cc = &conv_cases[ci];
        conv_graph cg = build_conv(cc);
        delta_ctx *ctx = cg.ctx;
        const delta_tensor *yt = ctx->tensors[cg.y];
        int64_t P = yt->shape[2], Q = yt->shape[3];
        bufs b;
        memset(&b, 0, sizeof b);
        fill_rand(tbuf(ctx, &b, cg.x), ctx->tensors[cg.x]->numel, 1.0f);
        fill_rand(tbuf(ctx, &b, cg.w), ctx->tensors[cg.w]->numel, 0.5f);
        if (cg.b >= 0) fill_rand(tbuf(ctx, &b, cg.b), cc->k, 1.0f);
        fill_rand(tbuf(ctx, &b, cg.dy), yt->numel, 1.0f);
        int dxid = ctx->ops[cg.dx_op].out[0], dwid = ctx->ops[cg.dw_op].out[0];
        int dbid = ctx->ops[cg.db_op].out[0];
        run_op(ctx, &ctx->ops[cg.fwd], &b, true);
        run_op(ctx, &ctx->ops[cg.dx_op], &b, true);
        run_op(ctx, &ctx->ops[cg.dw_op], &b, true);
        run_op(ctx, &ctx->ops[cg.db_op], &b, true);

        int64_t nx = ctx->tensors[cg.x]->numel, nw = ctx->tensors[cg.w]->numel;
        float *ry = malloc((size_t)yt->numel * sizeof(float));
        float *rdx = malloc((size_t)nx * sizeof(float));
        float *rdw = malloc((size_t)nw * sizeof(float));
        float *rdb = malloc((size_t)cc->k * sizeof(float));
        conv_ref(cc, P, Q, b.p[cg.x], b.p[cg.w], cg.b >= 0 ? b.p[cg.b] : NULL,
                 ry);
        conv_bwd_ref(cc, P, Q, b.p[cg.x], b.p[cg.w], b.p[cg.dy], rdx, rdw);
        for (int k = 0; k < cc->k; k++) {
            double s = 0;
            for (int n = 0; n < cc->n; n++)
                for (int64_t i = 0; i < P * Q; i++)
                    s += b.p[cg.dy][(n * cc->k + k) * P * Q + i];
            rdb[k] = (float)s;
        }
        char what[64];
        snprintf(what, sizeof what, "conv2d case %zu", ci);
        test_allclose(what, b.p[cg.y], ry, yt->numel, 1e-4, 1e-4);
        snprintf(what, sizeof what, "conv2d_dx case %zu", ci);
        test_allclose(what, b.p[dxid], rdx, nx, 1e-4, 1e-4);
        snprintf(what, sizeof what, "conv2d_dw case %zu", ci);
        test_allclose(what, b.p[dwid], rdw, nw, 1e-3, 1e-4);
        snprintf(what, sizeof what, "bias_grad case %zu", ci);
        test_allclose(what, b.p[dbid], rdb, cc->k, 1e-4, 1e-5);

        /* adjoint identities: <conv(x), dy> = <x, dx> = <w, dw> (no bias) */
        double yb = 0;
        if (cg.b >= 0)
            for (int k = 0; k < cc->k; k++) yb += (double)rdb[k] * b.p[cg.b][k];
        double a1 = dot(b.p[cg.y], b.p[cg.dy], yt->numel) - yb;
        double a2 = dot(b.p[cg.x], b.p[dxid], nx);
        double a3 = dot(b.p[cg.w], b.p[dwid], nw);
        double sc = 1e-4 * (1.0 + fabs(a1)) + 1e-5 * (double)yt->numel;
        CHECK(fabs(a1 - a2) <= sc && fabs(a1 - a3) <= sc,
              "case %zu adjoint: %.9g %.9g %.9g", ci, a1, a2, a3);

        /* determinism: bit-exact run to run and at other addresses; across
         * thread counts too unless the GEMM in use depends on them
         * (test_conv_threads_bits checks the rest with the built-in GEMM) */
        bool gemm_bits = delta_cpu_gemm() == DELTA_GEMM_BUILTIN;
        check_deterministic(ctx, &ctx->ops[cg.fwd], &b, true, gemm_bits);
        check_deterministic(ctx, &ctx->ops[cg.dx_op], &b, true, gemm_bits);
        check_deterministic(ctx, &ctx->ops[cg.dw_op], &b, true, gemm_bits);
        check_deterministic(ctx, &ctx->ops[cg.db_op], &b, true, true);
        free(ry);
        free(rdx);
        free(rdw);
        free(rdb);
        free_bufs(&b);
        delta_ctx_free(ctx);
    }
}

/* With the built-in GEMM (bit-identical for any thread count), the whole
 * conv kernels must give the same bits with 1, 2 and 3 threads, in every
 * lowering (blocks of images, one image, bands, dx as forward, 1x1). */
static void test_conv_threads_bits(void) {
    const conv_case cases[] = {
        {8, 16, 20, 20, 16, 3, 3, 1, 1, true},
        {4, 8, 40, 40, 8, 3, 3, 2, 1, false},
        {1, 16, 128, 128, 4, 3, 3, 1, 1, false},
        {1, 4, 128, 128, 16, 3, 3, 1, 1, true},
        {2, 3, 100, 100, 4, 3, 3, 2, 1, false},
        {2, 4, 100, 100, 3, 1, 1, 2, 0, true},
        {2, 8, 48, 48, 4, 1, 1, 1, 0, true},
        {64, 32, 2, 2, 24, 3, 3, 1, 1, false},
    };
    delta_gemm_impl saved_gemm = delta_cpu_gemm();
    CHECK(delta_cpu_set_gemm(DELTA_GEMM_BUILTIN) == DELTA_OK);
    int saved = max_threads();
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        conv_graph cg = build_conv(&cases[ci]);
        delta_ctx *ctx = cg.ctx;
        bufs b;
        memset(&b, 0, sizeof b);
        fill_rand(tbuf(ctx, &b, cg.x), ctx->tensors[cg.x]->numel, 1.0f);
        fill_rand(tbuf(ctx, &b, cg.w), ctx->tensors[cg.w]->numel, 0.5f);
        if (cg.b >= 0) fill_rand(tbuf(ctx, &b, cg.b), cases[ci].k, 1.0f);
        fill_rand(tbuf(ctx, &b, cg.dy), ctx->tensors[cg.y]->numel, 1.0f);
        int ops[3] = {cg.fwd, cg.dx_op, cg.dw_op};
        for (int i = 0; i < 3; i++) {
            const delta_op *op = &ctx->ops[ops[i]];
            const delta_tensor *t = ctx->tensors[op->out[0]];
            bufs ref;
            clone_bufs(ctx, &b, &ref);
            set_threads(1);
            run_op(ctx, op, &ref, true);
            for (int nt = 2; nt <= 3; nt++) {
                bufs c;
                clone_bufs(ctx, &b, &c);
                set_threads(nt);
                run_op(ctx, op, &c, true);
                CHECK(memcmp(c.p[t->id], ref.p[t->id], t->bytes) == 0,
                      "case %zu %s: 1 and %d threads differ", ci, op->name,
                      nt);
                free_bufs(&c);
            }
            free_bufs(&ref);
        }
        free_bufs(&b);
        delta_ctx_free(ctx);
    }
    set_threads(saved);
    delta_cpu_set_gemm(saved_gemm);
}

/* ---- pooling ----------------------------------------------------------- */

typedef struct pool_case {
    int n, c, h, w, k, stride, pad;
} pool_case;

static const pool_case pool_cases[] = {
    {2, 3, 7, 9, 3, 2, 1},  {1, 1, 5, 5, 2, 2, 0}, {3, 2, 8, 8, 3, 1, 1},
    {2, 4, 11, 6, 5, 3, 2}, {1, 2, 4, 4, 4, 1, 0}, {2, 3, 9, 9, 3, 3, 0},
    {4, 8, 33, 31, 3, 2, 1}, /* parallel */
};

static void test_pool(void) {
    for (size_t pi = 0; pi < sizeof pool_cases / sizeof pool_cases[0];
         pi++) {
        const pool_case *pc = &pool_cases[pi];
        for (int ties = 0; ties < 2; ties++) {
            delta_ctx *ctx = delta_ctx_new();
            int64_t xs[4] = {pc->n, pc->c, pc->h, pc->w};
            delta_tensor *x = delta_input(ctx, "x", DELTA_F32, 4, xs);
            delta_tensor *ym = delta_maxpool2d(ctx, x, pc->k, pc->stride,
                                               pc->pad);
            int mop = ctx->n_ops - 1;
            delta_tensor *ya = delta_avgpool2d(ctx, x, pc->k, pc->stride,
                                               pc->pad);
            int aop = ctx->n_ops - 1;
            CHECK(ym && ya, "%s", delta_ctx_error(ctx));
            if (!ym || !ya) {
                delta_ctx_free(ctx);
                continue;
            }
            delta_tensor *dy = delta_input(ctx, "dy", DELTA_F32, 4, ym->shape);
            delta_op_attrs a = ctx->ops[mop].a;
            const delta_tensor *im[2] = {x, dy};
            int mb = append_op(ctx, DELTA_OP_MAXPOOL2D_BWD, im, 2,
                               a, 4, xs)->id;
            const delta_tensor *ia[1] = {dy};
            int ab = append_op(ctx, DELTA_OP_AVGPOOL2D_BWD, ia, 1,
                               a, 4, xs)->id;
            bufs b;
            memset(&b, 0, sizeof b);
            float *xp = tbuf(ctx, &b, x->id);
            for (int64_t i = 0; i < x->numel; i++)
                xp[i] = ties ? (float)(int)(3 * frand()) : frand();
            if (ties) xp[0] = -INFINITY;
            fill_rand(tbuf(ctx, &b, dy->id), dy->numel, 1.0f);
            run_op(ctx, &ctx->ops[mop], &b, true);
            run_op(ctx, &ctx->ops[aop], &b, true);
            run_op(ctx, &ctx->ops[mb], &b, true);
            run_op(ctx, &ctx->ops[ab], &b, true);

            int64_t P = ym->shape[2], Q = ym->shape[3];
            int64_t nx = x->numel, ny = ym->numel;
            float *rm = malloc(ny * sizeof(float));
            float *ra = malloc(ny * sizeof(float));
            float *rdm = calloc(nx, sizeof(float));
            float *rda = calloc(nx, sizeof(float));
            const float *dyp = b.p[dy->id];
            for (int64_t pl = 0; pl < (int64_t)pc->n * pc->c; pl++)
                for (int64_t p = 0; p < P; p++)
                    for (int64_t q = 0; q < Q; q++) {
                        float best = -INFINITY;
                        int64_t bi = -1;
                        double s = 0;
                        for (int r = 0; r < pc->k; r++)
                            for (int t = 0; t < pc->k; t++) {
                                int64_t h = p * pc->stride - pc->pad + r;
                                int64_t w = q * pc->stride - pc->pad + t;
                                if (h < 0 || h >= pc->h || w < 0 || w >= pc->w)
                                    continue; /* -inf / 0 */
                                int64_t i = pl * pc->h * pc->w + h * pc->w + w;
                                if (bi < 0 || xp[i] > best) {
                                    best = xp[i];
                                    bi = i;
                                }
                                s += xp[i];
                            }
                        int64_t o = (pl * P + p) * Q + q;
                        rm[o] = best;
                        ra[o] = (float)(s / (pc->k * pc->k));
                        rdm[bi] += dyp[o];
                        for (int r = 0; r < pc->k; r++)
                            for (int t = 0; t < pc->k; t++) {
                                int64_t h = p * pc->stride - pc->pad + r;
                                int64_t w = q * pc->stride - pc->pad + t;
                                if (h < 0 || h >= pc->h || w < 0 || w >= pc->w)
                                    continue;
                                rda[pl * pc->h * pc->w + h * pc->w + w] +=
                                    dyp[o] / (float)(pc->k * pc->k);
                            }
                    }
            CHECK(memcmp(b.p[ym->id], rm, ny * sizeof(float)) == 0,
                  "maxpool case %zu ties %d", pi, ties);
            if (!ties) /* with a -inf input the averages are -inf */
                test_allclose("avgpool", b.p[ya->id], ra, ny, 1e-6, 1e-5);
            test_allclose("maxpool_bwd", b.p[ctx->ops[mb].out[0]], rdm, nx,
                          1e-6, 1e-5);
            test_allclose("avgpool_bwd", b.p[ctx->ops[ab].out[0]], rda, nx,
                          1e-6, 1e-5);
            int opsl[4] = {mop, aop, mb, ab};
            for (int i = 0; i < 4; i++)
                check_deterministic(ctx, &ctx->ops[opsl[i]], &b, true, true);
            free(rm);
            free(ra);
            free(rdm);
            free(rda);
            free_bufs(&b);
            delta_ctx_free(ctx);
        }
    }
}

static void test_maxpool_nan(void) {
    /* a NaN in the window wins (as PyTorch), and gets the gradient */
    delta_ctx *ctx = delta_ctx_new();
    int64_t xs[4] = {1, 1, 2, 2};
    delta_tensor *x = delta_input(ctx, "x", DELTA_F32, 4, xs);
    delta_tensor *y = delta_maxpool2d(ctx, x, 2, 2, 0);
    delta_tensor *dy = delta_input(ctx, "dy", DELTA_F32, 4, y->shape);
    const delta_tensor *im[2] = {x, dy};
    int mb = append_op(ctx, DELTA_OP_MAXPOOL2D_BWD, im, 2, ctx->ops[0].a, 4,
                       xs)->id;
    bufs b;
    memset(&b, 0, sizeof b);
    float *xp = tbuf(ctx, &b, x->id);
    xp[0] = 1;
    xp[1] = NAN;
    xp[2] = 5;
    xp[3] = NAN;
    tbuf(ctx, &b, dy->id)[0] = 2;
    run_op(ctx, &ctx->ops[0], &b, true);
    run_op(ctx, &ctx->ops[mb], &b, true);
    CHECK(isnan(b.p[y->id][0]));
    const float *dx = b.p[ctx->ops[mb].out[0]];
    CHECK(dx[0] == 0 && dx[1] == 2 && dx[2] == 0 && dx[3] == 0);
    free_bufs(&b);
    delta_ctx_free(ctx);
}

static void test_global_avgpool(void) {
    const int64_t shapes[][4] = {{3, 5, 7, 6}, {4, 16, 23, 25}, {2, 3, 1, 1}};
    for (int si = 0; si < 3; si++) {
        const int64_t *xs = shapes[si];
        delta_ctx *ctx = delta_ctx_new();
        delta_tensor *x = delta_input(ctx, "x", DELTA_F32, 4, xs);
        delta_tensor *y = delta_global_avgpool(ctx, x);
        int fop = ctx->n_ops - 1;
        delta_tensor *dy = delta_input(ctx, "dy", DELTA_F32, 2, y->shape);
        const delta_tensor *i1[1] = {dy};
        int bop = append_op(ctx, DELTA_OP_GLOBAL_AVGPOOL_BWD, i1, 1,
                            delta_attrs0(), 4, xs)->id;
        bufs b;
        memset(&b, 0, sizeof b);
        fill_rand(tbuf(ctx, &b, x->id), x->numel, 1.0f);
        fill_rand(tbuf(ctx, &b, dy->id), dy->numel, 1.0f);
        run_op(ctx, &ctx->ops[fop], &b, true);
        run_op(ctx, &ctx->ops[bop], &b, true);
        int64_t planes = xs[0] * xs[1], hw = xs[2] * xs[3];
        float *ry = malloc(planes * sizeof(float));
        float *rdx = malloc(x->numel * sizeof(float));
        for (int64_t pl = 0; pl < planes; pl++) {
            double s = 0;
            for (int64_t i = 0; i < hw; i++) s += b.p[x->id][pl * hw + i];
            ry[pl] = (float)(s / (double)hw);
            for (int64_t i = 0; i < hw; i++)
                rdx[pl * hw + i] = (float)(b.p[dy->id][pl] / (double)hw);
        }
        test_allclose("global_avgpool", b.p[y->id], ry, planes, 1e-7, 1e-6);
        test_allclose("global_avgpool_bwd", b.p[ctx->ops[bop].out[0]], rdx,
                      x->numel, 1e-7, 1e-6);
        check_deterministic(ctx, &ctx->ops[fop], &b, true, true);
        check_deterministic(ctx, &ctx->ops[bop], &b, true, true);
        free(ry);
        free(rdx);
        free_bufs(&b);
        delta_ctx_free(ctx);
    }
}

/* ---- batch norm -------------------------------------------------------- */

/* Training-mode batch norm in double: y, and the per-channel stats. */
static void bn_ref(const float *x, const float *g, const float *be, int64_t n,
                   int64_t c, int64_t hw, double eps, double *y, double *mean,
                   double *var) {
    for (int64_t ch = 0; ch < c; ch++) {
        double s = 0, ss = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < hw; j++) s += x[(i * c + ch) * hw + j];
        double m = s / (double)(n * hw);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < hw; j++) {
                double d = x[(i * c + ch) * hw + j] - m;
                ss += d * d;
            }
        double v = ss / (double)(n * hw);
        mean[ch] = m;
        var[ch] = v;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < hw; j++) {
                int64_t o = (i * c + ch) * hw + j;
                y[o] = (x[o] - m) / sqrt(v + eps) * g[ch] + be[ch];
            }
    }
}

static void test_batchnorm(void) {
    const int64_t shapes[][4] = {{4, 3, 5, 7},   {1, 2, 3, 3},  {6, 5, 1, 1},
                                 {7, 9, 0, 0},   {3, 70, 4, 4}, {8, 16, 17, 19},
                                 {128, 300, 0, 0}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        bool two_d = shapes[si][2] == 0;
        int nd = two_d ? 2 : 4;
        const int64_t *xs = shapes[si];
        int64_t c = xs[1];
        delta_ctx *ctx = delta_ctx_new();
        delta_init one = {DELTA_INIT_ONES, 0, 0};
        delta_tensor *x = delta_input(ctx, "x", DELTA_F32, nd, xs);
        delta_tensor *g = delta_param(ctx, "g", 1, &c, one);
        delta_tensor *be = delta_param(ctx, "b", 1, &c, one);
        delta_tensor *rm = delta_state(ctx, "rm", 1, &c, one);
        delta_tensor *rv = delta_state(ctx, "rv", 1, &c, one);
        const float eps = 1e-3f, mom = 0.2f;
        delta_tensor *y = delta_batchnorm(ctx, x, g, be, rm, rv, mom, eps);
        CHECK(y != NULL, "%s", delta_ctx_error(ctx));
        const delta_op *fop = &ctx->ops[0], *uop = &ctx->ops[1];
        CHECK(fop->type == DELTA_OP_BATCHNORM &&
              uop->type == DELTA_OP_BN_RUNNING_UPDATE);
        int mid = fop->out[1], vid = fop->out[2];
        delta_tensor *dy = delta_input(ctx, "dy", DELTA_F32, nd, xs);
        const delta_tensor *bi[5] = {x, g, ctx->tensors[mid],
                                     ctx->tensors[vid], dy};
        delta_op *bop = delta_op_append(ctx, DELTA_OP_BATCHNORM_BWD, bi, 5);
        bop->a = ctx->ops[0].a;
        int bid = bop->id;
        delta_op_add_output(ctx, &ctx->ops[bid], DELTA_F32, nd, xs);
        delta_op_add_output(ctx, &ctx->ops[bid], DELTA_F32, 1, &c);
        delta_op_add_output(ctx, &ctx->ops[bid], DELTA_F32, 1, &c);
        delta_op_set_cost(ctx, &ctx->ops[bid]);
        fop = &ctx->ops[0];
        uop = &ctx->ops[1];

        bufs b;
        memset(&b, 0, sizeof b);
        int64_t nx = x->numel, n = xs[0], hw = nx / (n * c);
        float *xp = tbuf(ctx, &b, x->id);
        for (int64_t i = 0; i < nx; i++) xp[i] = 3.0f + 2.0f * frand();
        fill_rand(tbuf(ctx, &b, g->id), c, 1.0f);
        fill_rand(tbuf(ctx, &b, be->id), c, 1.0f);
        float *rmp = tbuf(ctx, &b, rm->id), *rvp = tbuf(ctx, &b, rv->id);
        for (int64_t i = 0; i < c; i++) {
            rmp[i] = frand();
            rvp[i] = 1.5f + frand();
        }
        fill_rand(tbuf(ctx, &b, dy->id), nx, 1.0f);
        float *rm0 = malloc(c * sizeof(float));
        float *rv0 = malloc(c * sizeof(float));
        memcpy(rm0, rmp, c * sizeof(float));
        memcpy(rv0, rvp, c * sizeof(float));

        /* training forward */
        run_op(ctx, fop, &b, true);
        double *ry = malloc(nx * sizeof(double));
        double *rmean = malloc(c * sizeof(double));
        double *rvar = malloc(c * sizeof(double));
        bn_ref(xp, b.p[g->id], b.p[be->id], n, c, hw, eps, ry, rmean, rvar);
        float *fy = malloc(nx * sizeof(float));
        float *fs = malloc(2 * c * sizeof(float));
        for (int64_t i = 0; i < nx; i++) fy[i] = (float)ry[i];
        for (int64_t i = 0; i < c; i++) {
            fs[i] = (float)rmean[i];
            fs[c + i] = (float)rvar[i];
        }
        test_allclose("batchnorm y", b.p[y->id], fy, nx, 1e-5, 1e-5);
        test_allclose("batchnorm mean", b.p[mid], fs, c, 1e-6, 1e-6);
        test_allclose("batchnorm var", b.p[vid], fs + c, c, 1e-6, 1e-6);
        check_deterministic(ctx, fop, &b, true, true);

        /* running update: training changes, eval leaves alone */
        run_op(ctx, uop, &b, false);
        CHECK(memcmp(rmp, rm0, c * sizeof(float)) == 0 &&
              memcmp(rvp, rv0, c * sizeof(float)) == 0);
        check_deterministic(ctx, uop, &b, true, true);
        run_op(ctx, uop, &b, true);
        float *em = malloc(c * sizeof(float)), *ev = malloc(c * sizeof(float));
        double cnt = (double)(n * hw);
        for (int64_t i = 0; i < c; i++) {
            em[i] = (float)(0.8 * rm0[i] + 0.2 * rmean[i]);
            ev[i] = (float)(0.8 * rv0[i] + 0.2 * rvar[i] * cnt / (cnt - 1));
        }
        test_allclose("running mean", rmp, em, c, 1e-6, 1e-5);
        test_allclose("running var", rvp, ev, c, 1e-6, 1e-5);

        /* eval forward: normalizes with the running stats, copies them */
        bufs e;
        clone_bufs(ctx, &b, &e);
        run_op(ctx, fop, &e, false);
        for (int64_t ch = 0; ch < c; ch++)
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < hw; j++) {
                    int64_t o = (i * c + ch) * hw + j;
                    fy[o] = (float)((xp[o] - (double)rmp[ch]) /
                                        sqrt((double)rvp[ch] + eps) *
                                        b.p[g->id][ch] + b.p[be->id][ch]);
                }
        test_allclose("batchnorm eval y", e.p[y->id], fy, nx, 1e-5, 1e-5);
        CHECK(memcmp(e.p[mid], rmp, c * sizeof(float)) == 0 &&
              memcmp(e.p[vid], rvp, c * sizeof(float)) == 0);
        check_deterministic(ctx, fop, &e, false, true);
        free_bufs(&e);

        /* backward vs the analytic gradient in double, and (small cases)
         * finite differences of the double reference: L = Σ dy·y */
        run_op(ctx, fop, &b, true);
        const delta_op *bo = &ctx->ops[bid];
        run_op(ctx, bo, &b, true);
        const float *dyp = b.p[dy->id];
        float *fdx = malloc(nx * sizeof(float));
        float *adx = malloc(nx * sizeof(float));
        float *fdg = malloc(c * sizeof(float));
        float *fdb = malloc(c * sizeof(float));
        double *yy = malloc(nx * sizeof(double));
        double *mm = malloc(c * sizeof(double));
        double *vv = malloc(c * sizeof(double));
        float *gp = b.p[g->id], *bp = b.p[be->id];
        for (int64_t ch = 0; ch < c; ch++) {
            double sg = 0, sb = 0, rs = 1.0 / sqrt(rvar[ch] + eps);
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < hw; j++) {
                    int64_t o = (i * c + ch) * hw + j;
                    sb += dyp[o];
                    sg += dyp[o] * (xp[o] - rmean[ch]) * rs;
                }
            fdg[ch] = (float)sg;
            fdb[ch] = (float)sb;
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < hw; j++) {
                    int64_t o = (i * c + ch) * hw + j;
                    double xh = (xp[o] - rmean[ch]) * rs;
                    adx[o] = (float)(gp[ch] * rs *
                                     (dyp[o] - sb / cnt - xh * sg / cnt));
                }
        }
        test_allclose("batchnorm_bwd dx (analytic)", b.p[bo->out[0]], adx, nx,
                      1e-5, 1e-4);
        if (nx <= 4000 && n * hw > 1) {
            /* (one value per channel: dx is 0 and FD is noise) */
            const double h = 1e-3;
            for (int64_t i = 0; i < nx; i++) {
                float x0 = xp[i];
                double lp = 0, lm = 0;
                xp[i] = x0 + (float)h;
                double hp = (double)xp[i] - x0;
                bn_ref(xp, gp, bp, n, c, hw, eps, yy, mm, vv);
                for (int64_t j = 0; j < nx; j++) lp += yy[j] * dyp[j];
                xp[i] = x0 - (float)h;
                double hm = x0 - (double)xp[i];
                bn_ref(xp, gp, bp, n, c, hw, eps, yy, mm, vv);
                for (int64_t j = 0; j < nx; j++) lm += yy[j] * dyp[j];
                xp[i] = x0;
                fdx[i] = (float)((lp - lm) / (hp + hm));
            }
            test_allclose("batchnorm_bwd dx (finite differences)",
                          b.p[bo->out[0]], fdx, nx, 2e-3, 2e-3);
        }
        test_allclose("batchnorm_bwd dgamma", b.p[bo->out[1]], fdg, c, 1e-4,
                      1e-4);
        test_allclose("batchnorm_bwd dbeta", b.p[bo->out[2]], fdb, c, 1e-5,
                      1e-5);
        check_deterministic(ctx, bo, &b, true, true);
        free(yy);
        free(mm);
        free(vv);
        free(fdg);
        free(fdb);
        free(adx);
        free(fdx);
        free(em);
        free(ev);
        free(fy);
        free(fs);
        free(ry);
        free(rmean);
        free(rvar);
        free(rm0);
        free(rv0);
        free_bufs(&b);
        delta_ctx_free(ctx);
    }
}

/* ---- layer norm -------------------------------------------------------- */

static void ln_ref(const float *x, const float *g, const float *be,
                   int64_t rows, int64_t d, double eps, double *y) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xp = x + r * d;
        double s = 0, ss = 0;
        for (int64_t j = 0; j < d; j++) s += xp[j];
        double m = s / (double)d;
        for (int64_t j = 0; j < d; j++) ss += (xp[j] - m) * (xp[j] - m);
        double rs = 1.0 / sqrt(ss / (double)d + eps);
        for (int64_t j = 0; j < d; j++)
            y[r * d + j] = (xp[j] - m) * rs * (g ? g[j] : 1.0) +
                           (be ? be[j] : 0.0);
    }
}

static void test_layernorm(void) {
    const int64_t shapes[][3] = {{2, 3, 7},    {1, 1, 5},  {4, 5, 130},
                                 {3, 1, 1},    {16, 40, 70}, {4, 8, 1100}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        for (int affine = 0; affine < 2; affine++) {
            const int64_t *xs = shapes[si];
            int64_t d = xs[2], rows = xs[0] * xs[1], nx = rows * d;
            delta_ctx *ctx = delta_ctx_new();
            delta_init one = {DELTA_INIT_ONES, 0, 0};
            delta_tensor *x = delta_input(ctx, "x", DELTA_F32, 3, xs);
            delta_tensor *g = affine ? delta_param(ctx, "g", 1, &d, one) : NULL;
            delta_tensor *be =
                affine ? delta_param(ctx, "b", 1, &d, one) : NULL;
            delta_tensor *y = delta_layernorm(ctx, x, g, be, 1e-5f);
            CHECK(y != NULL, "%s", delta_ctx_error(ctx));
            int mid = ctx->ops[0].out[1], rid = ctx->ops[0].out[2];
            delta_tensor *dy = delta_input(ctx, "dy", DELTA_F32, 3, xs);
            const delta_tensor *bi[5] = {x, ctx->tensors[mid],
                                         ctx->tensors[rid], dy, g};
            delta_op *bop = delta_op_append(ctx, DELTA_OP_LAYERNORM_BWD, bi,
                                            affine ? 5 : 4);
            bop->a = ctx->ops[0].a;
            int bid = bop->id;
            delta_op_add_output(ctx, &ctx->ops[bid], DELTA_F32, 3, xs);
            if (affine) {
                delta_op_add_output(ctx, &ctx->ops[bid], DELTA_F32, 1, &d);
                delta_op_add_output(ctx, &ctx->ops[bid], DELTA_F32, 1, &d);
            }
            delta_op_set_cost(ctx, &ctx->ops[bid]);
            bufs b;
            memset(&b, 0, sizeof b);
            float *xp = tbuf(ctx, &b, x->id);
            for (int64_t i = 0; i < nx; i++) xp[i] = 1.0f + frand();
            float *gp = affine ? tbuf(ctx, &b, g->id) : NULL;
            float *bp = affine ? tbuf(ctx, &b, be->id) : NULL;
            if (affine) {
                fill_rand(gp, d, 1.0f);
                fill_rand(bp, d, 1.0f);
            }
            float *dyp = tbuf(ctx, &b, dy->id);
            fill_rand(dyp, nx, 1.0f);
            const delta_op *fo = &ctx->ops[0], *bo = &ctx->ops[bid];
            run_op(ctx, fo, &b, true);
            run_op(ctx, bo, &b, true);
            double *ry = malloc(nx * sizeof(double));
            float *fy = malloc(nx * sizeof(float));
            ln_ref(xp, gp, bp, rows, d, 1e-5, ry);
            for (int64_t i = 0; i < nx; i++) fy[i] = (float)ry[i];
            test_allclose("layernorm y", b.p[y->id], fy, nx, 1e-5, 1e-5);
            float *fm = malloc(rows * sizeof(float));
            float *fr = malloc(rows * sizeof(float));
            for (int64_t r = 0; r < rows; r++) {
                double s = 0, ss = 0;
                for (int64_t j = 0; j < d; j++) s += xp[r * d + j];
                double m = s / (double)d;
                for (int64_t j = 0; j < d; j++)
                    ss += (xp[r * d + j] - m) * (xp[r * d + j] - m);
                fm[r] = (float)m;
                fr[r] = (float)(1.0 / sqrt(ss / (double)d + 1e-5));
            }
            test_allclose("layernorm mean", b.p[mid], fm, rows, 1e-6, 1e-6);
            test_allclose("layernorm rstd", b.p[rid], fr, rows, 1e-6, 1e-5);
            /* the analytic gradient in double, and (small cases) finite
             * differences of L = Σ dy·y */
            float *adx = malloc(nx * sizeof(float));
            for (int64_t r = 0; r < rows; r++) {
                double sg = 0, sgx = 0;
                for (int64_t j = 0; j < d; j++) {
                    double gg = dyp[r * d + j] * (gp ? gp[j] : 1.0);
                    sg += gg;
                    sgx += gg * (xp[r * d + j] - (double)fm[r]) * fr[r];
                }
                for (int64_t j = 0; j < d; j++) {
                    double gg = dyp[r * d + j] * (gp ? gp[j] : 1.0);
                    double xh = (xp[r * d + j] - (double)fm[r]) * fr[r];
                    adx[r * d + j] =
                        (float)(fr[r] * (gg - sg / d - xh * sgx / d));
                }
            }
            test_allclose("layernorm_bwd dx (analytic)", b.p[bo->out[0]], adx,
                          nx, 1e-5, 1e-4);
            free(adx);
            float *fdx = malloc(nx * sizeof(float));
            if (nx <= 4000 && d > 1) {
                for (int64_t i = 0; i < nx; i++) {
                    float x0 = xp[i];
                    xp[i] = x0 + 1e-3f;
                    double hp = (double)xp[i] - x0, lp = 0, lm = 0;
                    ln_ref(xp, gp, bp, rows, d, 1e-5, ry);
                    for (int64_t j = 0; j < nx; j++) lp += ry[j] * dyp[j];
                    xp[i] = x0 - 1e-3f;
                    double hm = x0 - (double)xp[i];
                    ln_ref(xp, gp, bp, rows, d, 1e-5, ry);
                    for (int64_t j = 0; j < nx; j++) lm += ry[j] * dyp[j];
                    xp[i] = x0;
                    fdx[i] = (float)((lp - lm) / (hp + hm));
                }
                test_allclose("layernorm_bwd dx (finite differences)",
                              b.p[bo->out[0]], fdx, nx, 2e-3, 2e-3);
            }
            if (affine) {
                float *fg = malloc(d * sizeof(float));
                float *fb = malloc(d * sizeof(float));
                for (int64_t j = 0; j < d; j++) {
                    double sg = 0, sb = 0;
                    for (int64_t r = 0; r < rows; r++) {
                        double xh = (xp[r * d + j] - (double)fm[r]) * fr[r];
                        sg += dyp[r * d + j] * xh;
                        sb += dyp[r * d + j];
                    }
                    fg[j] = (float)sg;
                    fb[j] = (float)sb;
                }
                test_allclose("layernorm_bwd dgamma", b.p[bo->out[1]], fg, d,
                              1e-4, 1e-4);
                test_allclose("layernorm_bwd dbeta", b.p[bo->out[2]], fb, d,
                              1e-5, 1e-5);
                free(fg);
                free(fb);
            }
            check_deterministic(ctx, fo, &b, true, true);
            check_deterministic(ctx, bo, &b, true, true);
            free(fdx);
            free(fm);
            free(fr);
            free(ry);
            free(fy);
            free_bufs(&b);
            delta_ctx_free(ctx);
        }
    }
}

int main(void) {
    TEST_RUN(test_conv_geom);
    TEST_RUN(test_conv);
    TEST_RUN(test_conv_threads_bits);
    TEST_RUN(test_pool);
    TEST_RUN(test_maxpool_nan);
    TEST_RUN(test_global_avgpool);
    TEST_RUN(test_batchnorm);
    TEST_RUN(test_layernorm);
    TEST_MAIN_END();
}
