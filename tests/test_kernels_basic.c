/* Tests for the GEMM (gemm.c), the CPU settings (cpu_config.c) and the
 * kernels of k_matmul.c, k_eltwise.c and k_optim.c.
 *
 * GEMM: the built-in kernel (both micro-kernels) and OpenBLAS (when built
 * with it) against a double-precision reference on many shapes: all four
 * transposes, odd sizes crossing every block size, row strides wider than
 * the rows (padding must stay untouched), alpha and beta, beta = 0 over a
 * NaN-filled C, alpha = 0 over NaN operands, zero sizes. The built-in GEMM
 * must give the same bytes for 1, 2 and 3 threads.
 *
 * Kernels: each against a naive loop (exactly where the arithmetic is the
 * same, else within a tolerance); gelu_bwd also against a finite difference
 * of gelu; dropout's mask shared by forward and backward, stable on re-run,
 * different across steps and op ids, keeping about 1 - p; SGD and AdamW over
 * several steps against double references of the torch formulas, run in
 * place (outputs aliasing inputs) as the executor does. Output buffers start
 * as NaN bytes, so an element a kernel leaves unwritten fails. */
#include "backend/cpu/kernels.h"
#include "core/rng.h"
#include "delta/comm.h"
#include "delta/cpu.h"
#include "graph/ops_impl.h"

#include <stdint.h>

#include "test.h"

/* ---- helpers ------------------------------------------------------------ */

static void *alloc_buf(size_t bytes, int fill) {
    void *p = delta_alloc_aligned(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    memset(p, fill, bytes ? bytes : 1);
    return p;
}

static float *alloc_f(int64_t n) {
    return alloc_buf((size_t)n * sizeof(float), 0xff);
}

static bool same_bytes(const float *a, const float *b, int64_t n) {
    return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

static delta_kernel_env env = {42, 0, true, NULL};

/* A kernel call for op `op_id` of ctx with buffers of its own: inputs are
 * zeroed, outputs filled with NaN bytes. In-place ops (outputs that are
 * input tensors) get the input's buffer, as the executor gives them. */
typedef struct run {
    delta_kargs k;
    void *in[DELTA_MAX_OP_IN];
    void *out[DELTA_MAX_OP_OUT];
} run;

static void run_init(run *r, delta_ctx *ctx, int op_id) {
    memset(r, 0, sizeof *r);
    const delta_op *op = &ctx->ops[op_id];
    r->k.op = op;
    r->k.env = &env;
    for (int i = 0; i < op->n_in; i++) {
        const delta_tensor *t = ctx->tensors[op->in[i]];
        r->k.in_t[i] = t;
        r->in[i] = alloc_buf(t->bytes, 0);
        r->k.in[i] = r->in[i];
    }
    for (int i = 0; i < op->n_out; i++) {
        const delta_tensor *t = ctx->tensors[op->out[i]];
        r->k.out_t[i] = t;
        int alias = -1;
        for (int j = 0; j < op->n_in; j++)
            if (op->in[j] == op->out[i]) alias = j;
        if (alias >= 0) {
            r->k.out[i] = r->in[alias];
        } else {
            r->out[i] = alloc_buf(t->bytes, 0xff);
            r->k.out[i] = r->out[i];
        }
    }
}

static void run_free(run *r) {
    for (int i = 0; i < DELTA_MAX_OP_IN; i++) delta_free_aligned(r->in[i]);
    for (int i = 0; i < DELTA_MAX_OP_OUT; i++) delta_free_aligned(r->out[i]);
}

static int last_op(const delta_ctx *ctx) { return ctx->n_ops - 1; }

static delta_tensor *input(delta_ctx *ctx, int ndim, const int64_t *shape) {
    return delta_input(ctx, NULL, DELTA_F32, ndim, shape);
}

/* Appends an op of `type` with the given inputs and one F32 output. */
static int append_op(delta_ctx *ctx, delta_op_type type,
                     const delta_tensor *const *ins, int n_in, int ndim,
                     const int64_t *shape, delta_op_attrs a) {
    delta_op *op = delta_op_append(ctx, type, ins, n_in);
    op->a = a;
    op->phase = DELTA_PHASE_BACKWARD;
    int id = op->id;
    delta_tensor *t = delta_op_add_output(ctx, op, DELTA_F32, ndim, shape);
    CHECK(t != NULL);
    return id;
}

/* ---- GEMM --------------------------------------------------------------- */

/* op(X)(i, j) of a row-major X with row stride ld. */
static double at(const float *x, int64_t ld, bool t, int64_t i, int64_t j) {
    return t ? x[j * ld + i] : x[i * ld + j];
}

/* One GEMM case: random operands with row padding, C padded with a
 * sentinel, checked against a double reference within the rigorous
 * floating-point bound. which: 0 delta_gemm with the current path, 1
 * built-in, 2 built-in serial. Returns false on failure. */
static bool gemm_case(int which, bool ta, bool tb, int64_t m, int64_t n,
                      int64_t k, float alpha, float beta, bool nan_c,
                      bool nan_ab) {
    int64_t pa = test_rng_u32() % 4, pb = test_rng_u32() % 4, pc = test_rng_u32() % 4;
    int64_t ar = ta ? k : m, aw = ta ? m : k;
    int64_t br = tb ? n : k, bw = tb ? k : n;
    int64_t lda = aw + pa, ldb = bw + pb, ldc = n + pc;
    int64_t asz = ar * lda, bsz = br * ldb, csz = m * ldc;
    float *a = alloc_f(asz), *b = alloc_f(bsz), *c = alloc_f(csz);
    float *c0 = alloc_f(csz);
    test_fill_rand(a, asz, -1, 1);
    test_fill_rand(b, bsz, -1, 1);
    if (nan_ab) {
        for (int64_t i = 0; i < asz; i++) a[i] = NAN;
        for (int64_t i = 0; i < bsz; i++) b[i] = NAN;
    }
    for (int64_t i = 0; i < csz; i++) c0[i] = nan_c ? NAN : test_rng_f(-1, 1);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = n; j < ldc; j++) c0[i * ldc + j] = 12345.0f;
    memcpy(c, c0, (size_t)csz * sizeof(float));
    if (which == 0)
        delta_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    else if (which == 1)
        delta_gemm_builtin(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c,
                           ldc);
    else
        delta_gemm_builtin_serial(ta, tb, m, n, k, alpha, a, lda, b, ldb,
                                  beta, c, ldc);
    long bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < ldc; j++) {
            float got = c[i * ldc + j];
            if (j >= n) {
                if (got != 12345.0f) bad++;
                continue;
            }
            double s = 0, sa = 0;
            if (alpha != 0.0f) {
                for (int64_t p = 0; p < k; p++) {
                    double v = at(a, lda, ta, i, p) * at(b, ldb, tb, p, j);
                    s += v;
                    sa += fabs(v);
                }
            }
            double cv = beta != 0.0f ? (double)c0[i * ldc + j] : 0.0;
            double ref = (double)alpha * s + (double)beta * cv;
            double mag = fabs((double)alpha) * sa + fabs((double)beta * cv);
            double tol = (double)(k + 3) * 1.2e-7 * mag + 1e-30;
            double err = fabs((double)got - ref);
            if (!(err <= tol)) {
                bad++;
                if (!(err <= worst)) worst = err;
            }
        }
    }
    if (bad)
        fprintf(stderr,
                "  gemm which=%d ta=%d tb=%d m=%lld n=%lld k=%lld alpha=%g "
                "beta=%g nan_c=%d: %ld bad, worst err %g\n",
                which, ta, tb, (long long)m, (long long)n, (long long)k,
                alpha, beta, nan_c, bad, worst);
    delta_free_aligned(a);
    delta_free_aligned(b);
    delta_free_aligned(c);
    delta_free_aligned(c0);
    return bad == 0;
}

/* Runs one implementation over the shape sweep. */
static void gemm_sweep(int which, const char *what) {
    static const int64_t dims[] = {1, 2, 5, 6, 7, 13, 16, 17, 31, 33};
    const int nd = (int)(sizeof dims / sizeof dims[0]);
    int fails = 0;
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        /* small shapes, all combinations of a few sizes */
        for (int i = 0; i < nd; i += 2)
            for (int j = 1; j < nd; j += 2)
                for (int l = 0; l < nd; l += 3)
                    fails += !gemm_case(which, ta, tb, dims[i], dims[j],
                                        dims[l], 1.0f, 0.0f, false, false);
        /* shapes crossing the MC (144), KC (256) and NC (1024) blocks */
        static const int64_t big[][3] = {{145, 40, 257}, {150, 1030, 20},
                                         {7, 1041, 300}, {300, 17, 513},
                                         {289, 35, 64}, {64, 64, 64}};
        for (int s = 0; s < 6; s++)
            fails += !gemm_case(which, ta, tb, big[s][0], big[s][1],
                                big[s][2], 0.5f, 0.0f, true, false);
        /* alpha, beta */
        fails += !gemm_case(which, ta, tb, 37, 29, 41, -1.5f, 0.75f, false,
                            false);
        fails += !gemm_case(which, ta, tb, 40, 48, 300, 2.0f, 1.0f, false,
                            false);
        fails += !gemm_case(which, ta, tb, 97, 130, 270, 1.0f, -2.0f, false,
                            false);
        /* beta = 0 over NaN C */
        fails += !gemm_case(which, ta, tb, 23, 19, 11, 1.0f, 0.0f, true,
                            false);
        /* alpha = 0: operands not read, C = beta C */
        fails += !gemm_case(which, ta, tb, 9, 21, 5, 0.0f, 0.5f, false, true);
        fails += !gemm_case(which, ta, tb, 9, 21, 5, 0.0f, 0.0f, true, true);
        /* k = 0 */
        fails += !gemm_case(which, ta, tb, 8, 9, 0, 1.0f, 0.0f, true, false);
        fails += !gemm_case(which, ta, tb, 8, 9, 0, 1.0f, 3.0f, false, false);
        /* m = 0, n = 0 */
        fails += !gemm_case(which, ta, tb, 0, 9, 4, 1.0f, 0.0f, true, false);
        fails += !gemm_case(which, ta, tb, 5, 0, 4, 1.0f, 0.0f, true, false);
        /* random shapes */
        for (int r = 0; r < 12; r++)
            fails += !gemm_case(which, ta, tb, 1 + test_rng_u32() % 90,
                                1 + test_rng_u32() % 90, 1 + test_rng_u32() % 90,
                                test_rng_f(-2, 2), (r & 1) ? test_rng_f(-1, 1) : 0.0f,
                                (r & 1) == 0, false);
    }
    CHECK(fails == 0, "%s: %d failing GEMM cases", what, fails);
}

static void test_gemm_builtin(void) {
    delta_cpu_set_threads(2);
    int kern = delta_gemm_builtin_kernel(0);
    printf("# built-in GEMM micro-kernel: %s\n",
           kern == 2 ? "avx2+fma" : "portable");
    gemm_sweep(1, "builtin");
    gemm_sweep(2, "builtin serial");
}

static void test_gemm_builtin_portable_kernel(void) {
    delta_cpu_set_threads(2);
    CHECK(delta_gemm_builtin_kernel(1) == 1);
    gemm_sweep(1, "builtin portable");
    delta_gemm_builtin_kernel(0);
}

static void test_gemm_blas(void) {
#ifdef DELTA_HAVE_OPENBLAS
    delta_cpu_set_threads(2);
    CHECK(delta_cpu_set_gemm(DELTA_GEMM_BLAS) == DELTA_OK);
    CHECK(delta_cpu_gemm() == DELTA_GEMM_BLAS);
    gemm_sweep(0, "openblas");
    /* BLAS and built-in agree closely on a larger product */
    int64_t m = 200, n = 300, k = 400;
    float *a = alloc_f(m * k), *b = alloc_f(k * n);
    float *c1 = alloc_f(m * n), *c2 = alloc_f(m * n);
    test_fill_rand(a, m * k, -1, 1);
    test_fill_rand(b, k * n, -1, 1);
    delta_gemm(false, false, m, n, k, 1.0f, a, k, b, n, 0.0f, c1, n);
    CHECK(delta_cpu_set_gemm(DELTA_GEMM_BUILTIN) == DELTA_OK);
    delta_gemm(false, false, m, n, k, 1.0f, a, k, b, n, 0.0f, c2, n);
    test_allclose("blas vs builtin", c2, c1, (long)(m * n), 1e-4, 1e-4);
    gemm_sweep(0, "delta_gemm (built-in selected)");
    delta_free_aligned(a);
    delta_free_aligned(b);
    delta_free_aligned(c1);
    delta_free_aligned(c2);
    delta_cpu_set_gemm(DELTA_GEMM_BLAS);
#else
    CHECK(delta_cpu_set_gemm(DELTA_GEMM_BLAS) == DELTA_ERR_UNSUPPORTED);
    CHECK(delta_cpu_gemm() == DELTA_GEMM_BUILTIN);
    gemm_sweep(0, "delta_gemm (built-in only)");
    printf("# built without OpenBLAS: delta_gemm checked on the built-in "
           "path\n");
#endif
}

/* The built-in GEMM gives the same bytes for 1, 2 and 3 threads, and the
 * serial entry the same as the parallel one. */
static void test_gemm_deterministic(void) {
    static const int64_t shapes[][3] = {
        {300, 200, 300}, {3136, 64, 576}, {64, 3136, 100}, {517, 263, 700},
        {97, 1100, 33}};
    for (int kern = 0; kern < 2; kern++) {
        delta_gemm_builtin_kernel(kern ? 1 : 0);
        for (int s = 0; s < 5; s++) {
            for (int t = 0; t < 4; t++) {
                bool ta = t & 1, tb = t & 2;
                int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
                float *a = alloc_f(m * k), *b = alloc_f(k * n);
                float *c[4];
                test_fill_rand(a, m * k, -1, 1);
                test_fill_rand(b, k * n, -1, 1);
                for (int r = 0; r < 4; r++) {
                    c[r] = alloc_f(m * n);
                    test_fill_rand(c[r], m * n, -1, 1);
                    if (r) memcpy(c[r], c[0], (size_t)(m * n) * sizeof(float));
                }
                for (int r = 0; r < 3; r++) {
                    delta_cpu_set_threads(r + 1);
                    delta_gemm_builtin(ta, tb, m, n, k, 0.7f, a, ta ? m : k,
                                       b, tb ? k : n, 0.3f, c[r], n);
                }
                delta_gemm_builtin_serial(ta, tb, m, n, k, 0.7f, a,
                                          ta ? m : k, b, tb ? k : n, 0.3f,
                                          c[3], n);
                CHECK(same_bytes(c[0], c[1], m * n) &&
                          same_bytes(c[0], c[2], m * n) &&
                          same_bytes(c[0], c[3], m * n),
                      "kernel %d shape %lldx%lldx%lld ta=%d tb=%d", kern,
                      (long long)m, (long long)n, (long long)k, ta, tb);
                delta_free_aligned(a);
                delta_free_aligned(b);
                for (int r = 0; r < 4; r++) delta_free_aligned(c[r]);
                if (s >= 2 && t > 0) break; /* keep it quick */
            }
        }
    }
    delta_gemm_builtin_kernel(0);
    delta_cpu_set_threads(2);
}

static void test_cpu_config(void) {
    delta_cpu_set_threads(3);
    CHECK(delta_cpu_threads() == 3);
    delta_cpu_set_threads(0);
    CHECK(delta_cpu_threads() >= 1);
    delta_cpu_set_threads(2);
    CHECK(delta_cpu_threads() == 2);
    CHECK(delta_cpu_set_gemm((delta_gemm_impl)7) == DELTA_ERR_INVALID_ARG);
    CHECK(delta_cpu_set_gemm(DELTA_GEMM_BUILTIN) == DELTA_OK);
    CHECK(delta_cpu_gemm() == DELTA_GEMM_BUILTIN);
    const char *f = delta_build_features();
    CHECK(f && *f);
    printf("# build features: %s\n", f);
#ifdef _OPENMP
    CHECK(strstr(f, "openmp") != NULL, "%s", f);
#endif
    CHECK((strstr(f, "mpi ") != NULL || strstr(f, " mpi") != NULL ||
           !strcmp(f, "mpi")) == delta_comm_built(), "%s", f);
#ifdef DELTA_HAVE_OPENBLAS
    CHECK(strstr(f, "openblas") != NULL, "%s", f);
    CHECK(delta_cpu_set_gemm(DELTA_GEMM_BLAS) == DELTA_OK);
#else
    CHECK(strstr(f, "openblas") == NULL, "%s", f);
#endif
}

/* ---- matmul, linear, sum_leading ---------------------------------------- */

/* Checks delta_k_matmul on a (an dims) and b (bn dims) against a double
 * reference, with the current GEMM path. */
static void check_matmul(int an, const int64_t *ashape, int bnd,
                         const int64_t *bshape, bool ta, bool tb, float alpha,
                         const char *what) {
    delta_ctx *ctx = delta_ctx_new();
    delta_tensor *a = input(ctx, an, ashape), *b = input(ctx, bnd, bshape);
    delta_tensor *c = delta_matmul(ctx, a, b, ta, tb, alpha);
    CHECK(c != NULL, "%s: %s", what, delta_ctx_error(ctx));
    if (!c) {
        delta_ctx_free(ctx);
        return;
    }
    run r;
    run_init(&r, ctx, last_op(ctx));
    test_fill_rand(r.in[0], a->numel, -1, 1);
    test_fill_rand(r.in[1], b->numel, -1, 1);
    delta_k_matmul(&r.k);
    int64_t m = c->shape[c->ndim - 2], n = c->shape[c->ndim - 1];
    int64_t k = ta ? ashape[an - 2] : ashape[an - 1];
    int64_t batch = m * n > 0 ? c->numel / (m * n) : 0;
    float *ref = alloc_f(c->numel);
    const float *ad = r.in[0], *bd = r.in[1];
    for (int64_t q = 0; q < batch; q++) {
        const float *aq = ad + q * m * k;
        const float *bq = bnd > 2 ? bd + q * k * n : bd;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t p = 0; p < k; p++)
                    s += at(aq, ta ? m : k, ta, i, p) *
                         at(bq, tb ? k : n, tb, p, j);
                ref[q * m * n + i * n + j] = (float)(alpha * s);
            }
    }
    test_allclose(what, r.out[0], ref, (long)c->numel, 1e-5, 1e-5);
    delta_free_aligned(ref);
    run_free(&r);
    delta_ctx_free(ctx);
}

static void test_matmul(void) {
    delta_cpu_set_threads(2);
    for (int path = 0; path < 2; path++) {
#ifdef DELTA_HAVE_OPENBLAS
        delta_cpu_set_gemm(path ? DELTA_GEMM_BUILTIN : DELTA_GEMM_BLAS);
#else
        if (path == 0) continue;
#endif
        for (int t = 0; t < 4; t++) {
            bool ta = t & 1, tb = t & 2;
            int64_t a2[2] = {ta ? 19 : 23, ta ? 23 : 19};
            int64_t b2[2] = {tb ? 31 : 19, tb ? 19 : 31};
            check_matmul(2, a2, 2, b2, ta, tb, 0.5f, "matmul 2-D");
            /* batched, small (one GEMM per thread over the batch) */
            int64_t a4[4] = {2, 3, ta ? 9 : 10, ta ? 10 : 9};
            int64_t b4[4] = {2, 3, tb ? 11 : 9, tb ? 9 : 11};
            check_matmul(4, a4, 4, b4, ta, tb, 1.0f, "matmul batched small");
            /* batched, large (parallel GEMMs one after another) */
            int64_t a3[3] = {2, ta ? 130 : 200, ta ? 200 : 130};
            int64_t b3[3] = {2, tb ? 170 : 130, tb ? 130 : 170};
            check_matmul(3, a3, 3, b3, ta, tb, -1.0f, "matmul batched large");
            /* batched a, 2-D b (a untransposed) */
            if (!ta) {
                int64_t a5[3] = {3, 7, 12};
                int64_t b5[2] = {tb ? 5 : 12, tb ? 12 : 5};
                check_matmul(3, a5, 2, b5, false, tb, 2.0f,
                             "matmul 2-D b broadcast");
            }
        }
    }
    /* k = 0 gives zeros */
    int64_t az[2] = {4, 0}, bz[2] = {0, 3};
    check_matmul(2, az, 2, bz, false, false, 1.0f, "matmul k=0");
#ifdef DELTA_HAVE_OPENBLAS
    delta_cpu_set_gemm(DELTA_GEMM_BLAS);
#endif
}

static void check_linear(bool with_bias, int xn, const int64_t *xs,
                         int64_t out, const char *what) {
    delta_ctx *ctx = delta_ctx_new();
    int64_t in = xs[xn - 1];
    int64_t ws[2] = {out, in}, bs[1] = {out};
    delta_tensor *x = input(ctx, xn, xs), *w = input(ctx, 2, ws);
    delta_tensor *bias = with_bias ? input(ctx, 1, bs) : NULL;
    delta_tensor *y = delta_linear(ctx, x, w, bias);
    CHECK(y != NULL, "%s: %s", what, delta_ctx_error(ctx));
    if (!y) {
        delta_ctx_free(ctx);
        return;
    }
    run r;
    run_init(&r, ctx, last_op(ctx));
    test_fill_rand(r.in[0], x->numel, -1, 1);
    test_fill_rand(r.in[1], w->numel, -1, 1);
    if (with_bias) test_fill_rand(r.in[2], out, -1, 1);
    delta_k_linear(&r.k);
    int64_t rows = y->numel / out;
    const float *xd = r.in[0], *wd = r.in[1], *bd = with_bias ? r.in[2] : NULL;
    float *ref = alloc_f(y->numel);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < out; j++) {
            double s = 0;
            for (int64_t p = 0; p < in; p++)
                s += (double)xd[i * in + p] * wd[j * in + p];
            ref[i * out + j] = (float)(s + (bd ? bd[j] : 0.0));
        }
    test_allclose(what, r.out[0], ref, (long)y->numel, 1e-5, 1e-5);
    delta_free_aligned(ref);
    run_free(&r);
    delta_ctx_free(ctx);
}

static void test_linear(void) {
    int64_t x3[3] = {3, 50, 70}, x1[1] = {33}, x2[2] = {500, 96};
    check_linear(true, 3, x3, 45, "linear 3-D with bias");
    check_linear(false, 3, x3, 45, "linear 3-D without bias");
    check_linear(true, 1, x1, 7, "linear 1-D");
    check_linear(true, 2, x2, 130, "linear large");
}

static void check_sum_leading(int xn, const int64_t *xs, int yn,
                              const char *what) {
    delta_ctx *ctx = delta_ctx_new();
    delta_tensor *x = input(ctx, xn, xs);
    const delta_tensor *ins[1] = {x};
    int id = append_op(ctx, DELTA_OP_SUM_LEADING, ins, 1, yn,
                       xs + (xn - yn), delta_attrs0());
    run r;
    run_init(&r, ctx, id);
    test_fill_rand(r.in[0], x->numel, -1, 1);
    int64_t s = r.k.out_t[0]->numel, rows = s ? x->numel / s : 0;
    float *ref = alloc_f(s);
    const float *xd = r.in[0];
    for (int64_t j = 0; j < s; j++) {
        double acc = 0;
        for (int64_t i = 0; i < rows; i++) acc += xd[i * s + j];
        ref[j] = (float)acc;
    }
    float *outs[2];
    for (int t = 0; t < 2; t++) {
        delta_cpu_set_threads(t + 1);
        delta_k_sum_leading(&r.k);
        outs[t] = alloc_f(s);
        memcpy(outs[t], r.out[0], (size_t)s * sizeof(float));
    }
    /* same order, same double accumulation: exact */
    CHECK(same_bytes(outs[0], ref, s), "%s", what);
    CHECK(same_bytes(outs[0], outs[1], s), "%s: threads differ", what);
    delta_free_aligned(outs[0]);
    delta_free_aligned(outs[1]);
    delta_free_aligned(ref);
    run_free(&r);
    delta_ctx_free(ctx);
}

static void test_sum_leading(void) {
    int64_t a[3] = {4, 5, 300}, b[2] = {1000, 700}, c[2] = {3000, 3};
    check_sum_leading(3, a, 1, "sum_leading (4,5,300)->(300)");
    check_sum_leading(3, a, 2, "sum_leading (4,5,300)->(5,300)");
    check_sum_leading(2, b, 1, "sum_leading (1000,700)");
    check_sum_leading(2, c, 1, "sum_leading (3000,3)");
    delta_cpu_set_threads(2);
}

/* ---- elementwise -------------------------------------------------------- */

/* A run of the last op (unary) with random inputs in [lo, hi). */
static void unary_run(run *r, delta_ctx *ctx, float lo, float hi) {
    run_init(r, ctx, last_op(ctx));
    test_fill_rand(r->in[0], r->k.in_t[0]->numel, lo, hi);
}

static void test_relu(void) {
    delta_ctx *ctx = delta_ctx_new();
    int64_t s[2] = {300, 257};
    delta_tensor *x = input(ctx, 2, s);
    delta_tensor *y = delta_relu(ctx, x);
    run r;
    unary_run(&r, ctx, -1, 1);
    delta_k_relu(&r.k);
    const float *xd = r.in[0], *yd = r.out[0];
    long bad = 0;
    for (int64_t i = 0; i < x->numel; i++)
        if (yd[i] != (xd[i] > 0 ? xd[i] : 0.0f)) bad++;
    CHECK(bad == 0, "relu: %ld wrong", bad);
    /* backward: dx = dy (y > 0) */
    const delta_tensor *ins[2] = {y, x};
    int id = append_op(ctx, DELTA_OP_RELU_BWD, ins, 2, 2, s, delta_attrs0());
    run rb;
    run_init(&rb, ctx, id);
    memcpy(rb.in[0], r.out[0], y->bytes);
    test_fill_rand(rb.in[1], x->numel, -1, 1);
    delta_k_relu_bwd(&rb.k);
    const float *yy = rb.in[0], *dy = rb.in[1], *dx = rb.out[0];
    bad = 0;
    for (int64_t i = 0; i < x->numel; i++)
        if (dx[i] != (yy[i] > 0 ? dy[i] : 0.0f)) bad++;
    CHECK(bad == 0, "relu_bwd: %ld wrong", bad);
    run_free(&r);
    run_free(&rb);
    delta_ctx_free(ctx);
}

static double gelu_d(double x) {
    const double c = 0.7978845608028654;
    return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)));
}

static double gelu_grad_d(double x) {
    const double c = 0.7978845608028654;
    double t = tanh(c * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) +
           0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
}

static void test_gelu(void) {
    delta_ctx *ctx = delta_ctx_new();
    int64_t s[1] = {40000};
    delta_tensor *x = input(ctx, 1, s);
    CHECK(delta_gelu(ctx, x) != NULL);
    run r;
    unary_run(&r, ctx, -6, 6);
    delta_k_gelu(&r.k);
    int64_t n = x->numel;
    float *ref = alloc_f(n);
    const float *xd = r.in[0];
    for (int64_t i = 0; i < n; i++) ref[i] = (float)gelu_d(xd[i]);
    test_allclose("gelu", r.out[0], ref, (long)n, 1e-6, 1e-5);

    /* backward: against the double formula, and a finite difference of
     * the gelu kernel */
    const delta_tensor *ins[2] = {x, x};
    int id = append_op(ctx, DELTA_OP_GELU_BWD, ins, 2, 1, s, delta_attrs0());
    run rb;
    run_init(&rb, ctx, id);
    memcpy(rb.in[0], r.in[0], x->bytes);
    test_fill_rand(rb.in[1], n, -2, 2);
    delta_k_gelu_bwd(&rb.k);
    const float *dy = rb.in[1];
    for (int64_t i = 0; i < n; i++)
        ref[i] = (float)(dy[i] * gelu_grad_d(xd[i]));
    test_allclose("gelu_bwd vs formula", rb.out[0], ref, (long)n, 1e-5, 1e-5);

    const float h = 1.0f / 64; /* exact in float */
    float *xp = r.in[0];
    float *yp = alloc_f(n), *ym = alloc_f(n), *x0 = alloc_f(n);
    memcpy(x0, xp, (size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) xp[i] = x0[i] + h;
    delta_k_gelu(&r.k);
    memcpy(yp, r.out[0], (size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) xp[i] = x0[i] - h;
    delta_k_gelu(&r.k);
    memcpy(ym, r.out[0], (size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        ref[i] = dy[i] * (float)(((double)yp[i] - ym[i]) / (2.0 * h));
    test_allclose("gelu_bwd vs finite difference", rb.out[0], ref, (long)n,
                  2e-3, 2e-3);
    delta_free_aligned(yp);
    delta_free_aligned(ym);
    delta_free_aligned(x0);
    delta_free_aligned(ref);
    run_free(&r);
    run_free(&rb);
    delta_ctx_free(ctx);
}

static void check_add(int an, const int64_t *as, int bn, const int64_t *bs,
                      const char *what) {
    delta_ctx *ctx = delta_ctx_new();
    delta_tensor *a = input(ctx, an, as), *b = input(ctx, bn, bs);
    delta_tensor *y = delta_add(ctx, a, b);
    CHECK(y != NULL, "%s: %s", what, delta_ctx_error(ctx));
    if (!y) {
        delta_ctx_free(ctx);
        return;
    }
    run r;
    run_init(&r, ctx, last_op(ctx));
    test_fill_rand(r.in[0], a->numel, -1, 1);
    test_fill_rand(r.in[1], b->numel, -1, 1);
    float *outs[2];
    for (int t = 0; t < 2; t++) {
        delta_cpu_set_threads(t + 1);
        delta_k_add(&r.k);
        outs[t] = alloc_f(y->numel);
        memcpy(outs[t], r.out[0], y->bytes);
    }
    const float *ad = r.in[0], *bd = r.in[1];
    long bad = 0;
    for (int64_t i = 0; i < y->numel; i++)
        if (outs[0][i] != ad[i] + bd[i % b->numel]) bad++;
    CHECK(bad == 0, "%s: %ld wrong", what, bad);
    CHECK(same_bytes(outs[0], outs[1], y->numel), "%s: threads differ", what);
    delta_free_aligned(outs[0]);
    delta_free_aligned(outs[1]);
    run_free(&r);
    delta_ctx_free(ctx);
}

static void test_add(void) {
    int64_t a[3] = {7, 130, 97}, b1[1] = {97}, b2[2] = {130, 97};
    check_add(3, a, 3, a, "add same shape");
    check_add(3, a, 1, b1, "add broadcast last dim");
    check_add(3, a, 2, b2, "add broadcast two dims");
    int64_t c[2] = {5, 3}, c1[1] = {3};
    check_add(2, c, 1, c1, "add small");
    int64_t d[2] = {3, 40000}, d1[1] = {40000};
    check_add(2, d, 1, d1, "add broadcast wider than a block");
    delta_cpu_set_threads(2);
}

static void test_mul_scale_fill_broadcast(void) {
    delta_ctx *ctx = delta_ctx_new();
    int64_t s[2] = {257, 301};
    delta_tensor *a = input(ctx, 2, s), *b = input(ctx, 2, s);
    delta_tensor *y = delta_mul(ctx, a, b);
    CHECK(y != NULL);
    run r;
    run_init(&r, ctx, last_op(ctx));
    test_fill_rand(r.in[0], a->numel, -3, 3);
    test_fill_rand(r.in[1], a->numel, -3, 3);
    delta_k_mul(&r.k);
    const float *ad = r.in[0], *bd = r.in[1], *yd = r.out[0];
    long bad = 0;
    for (int64_t i = 0; i < a->numel; i++)
        if (yd[i] != ad[i] * bd[i]) bad++;
    CHECK(bad == 0, "mul: %ld wrong", bad);
    run_free(&r);

    y = delta_scale(ctx, a, -0.375f);
    run_init(&r, ctx, last_op(ctx));
    test_fill_rand(r.in[0], a->numel, -3, 3);
    delta_k_scale(&r.k);
    ad = r.in[0];
    yd = r.out[0];
    bad = 0;
    for (int64_t i = 0; i < a->numel; i++)
        if (yd[i] != -0.375f * ad[i]) bad++;
    CHECK(bad == 0, "scale: %ld wrong", bad);
    run_free(&r);

    delta_op_attrs at = delta_attrs0();
    at.value = 2.5f;
    int id = append_op(ctx, DELTA_OP_FILL, NULL, 0, 2, s, at);
    run_init(&r, ctx, id);
    delta_k_fill(&r.k);
    yd = r.out[0];
    bad = 0;
    for (int64_t i = 0; i < a->numel; i++)
        if (yd[i] != 2.5f) bad++;
    CHECK(bad == 0, "fill: %ld wrong", bad);
    run_free(&r);

    delta_tensor *sc = input(ctx, 0, NULL);
    const delta_tensor *ins[1] = {sc};
    id = append_op(ctx, DELTA_OP_BROADCAST, ins, 1, 2, s, delta_attrs0());
    run_init(&r, ctx, id);
    ((float *)r.in[0])[0] = -7.25f;
    delta_k_broadcast(&r.k);
    yd = r.out[0];
    bad = 0;
    for (int64_t i = 0; i < a->numel; i++)
        if (yd[i] != -7.25f) bad++;
    CHECK(bad == 0, "broadcast: %ld wrong", bad);
    run_free(&r);
    delta_ctx_free(ctx);
}

static void check_sum(int64_t n, float lo, float hi, const char *what) {
    delta_ctx *ctx = delta_ctx_new();
    int64_t s[1] = {n};
    delta_tensor *x = input(ctx, 1, s);
    delta_tensor *y = delta_sum(ctx, x);
    CHECK(y != NULL && y->ndim == 0);
    run r;
    run_init(&r, ctx, last_op(ctx));
    test_fill_rand(r.in[0], n, lo, hi);
    const float *xd = r.in[0];
    double ref = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        ref += xd[i];
        mag += fabs(xd[i]);
    }
    float got[3];
    for (int t = 0; t < 3; t++) {
        delta_cpu_set_threads(t + 1);
        delta_k_sum(&r.k);
        got[t] = ((float *)r.out[0])[0];
    }
    CHECK(fabs(got[0] - ref) <= 1e-7 * fabs(ref) + 1e-12 * mag + 1e-30,
          "%s: got %.9g expected %.9g", what, got[0], ref);
    CHECK(memcmp(&got[0], &got[1], sizeof(float)) == 0 &&
              memcmp(&got[0], &got[2], sizeof(float)) == 0,
          "%s: threads differ: %.9g %.9g %.9g", what, got[0], got[1], got[2]);
    run_free(&r);
    delta_ctx_free(ctx);
}

static void test_sum(void) {
    check_sum(1, -1, 1, "sum n=1");
    check_sum(7, -1, 1, "sum n=7");
    check_sum(1000, 0, 1, "sum n=1000");
    check_sum(1000003, -1, 1.01f, "sum n=1000003");
    check_sum(0, -1, 1, "sum n=0");
    delta_cpu_set_threads(2);
}

/* ---- dropout ------------------------------------------------------------ */

static void test_dropout(void) {
    delta_cpu_set_threads(2);
    delta_ctx *ctx = delta_ctx_new();
    const float p = 0.3f;
    int64_t n = 100000, s[2] = {100, 1000};
    delta_tensor *x = input(ctx, 2, s);
    delta_tensor *y = delta_dropout(ctx, x, p);
    CHECK(y != NULL);
    int fwd = last_op(ctx);
    delta_tensor *y2 = delta_dropout(ctx, x, p); /* another op id */
    CHECK(y2 != NULL);
    int fwd2 = last_op(ctx);
    delta_op_attrs ab = delta_attrs0();
    ab.p = p;
    ab.fwd_op = fwd;
    const delta_tensor *ins[1] = {y};
    int bwd = append_op(ctx, DELTA_OP_DROPOUT_BWD, ins, 1, 2, s, ab);

    run r, r2, rb;
    run_init(&r, ctx, fwd);
    run_init(&r2, ctx, fwd2);
    run_init(&rb, ctx, bwd);
    test_fill_rand(r.in[0], n, 0.5f, 2.0f); /* nonzero: zeros mark drops */
    memcpy(r2.in[0], r.in[0], x->bytes);
    test_fill_rand(rb.in[0], n, 0.5f, 2.0f);
    env.step = 5;
    delta_k_dropout(&r.k);
    delta_k_dropout(&r2.k);
    delta_k_dropout_bwd(&rb.k);

    const float *xd = r.in[0], *yd = r.out[0], *dy = rb.in[0], *dx = rb.out[0];
    long bad = 0, kept = 0, bwd_bad = 0, diff_op = 0;
    for (int64_t i = 0; i < n; i++) {
        bool keep = delta_dropout_keep(env.seed, fwd, env.step, i, p);
        kept += keep;
        if (yd[i] != (keep ? xd[i] / (1.0f - p) : 0.0f)) bad++;
        if (dx[i] != (keep ? dy[i] / (1.0f - p) : 0.0f)) bwd_bad++;
        if ((((float *)r2.out[0])[i] != 0) != keep) diff_op++;
    }
    CHECK(bad == 0, "dropout: %ld elements differ from the mask", bad);
    CHECK(bwd_bad == 0, "dropout_bwd: %ld elements differ from the mask",
          bwd_bad);
    double frac = (double)kept / (double)n;
    CHECK(fabs(frac - (1.0 - p)) < 0.01, "kept fraction %g", frac);
    /* another op id draws another mask (about 2p(1-p) of elements differ) */
    CHECK(diff_op > n / 5 && diff_op < n / 2, "op ids: %ld differ", diff_op);

    /* re-run, and another thread count: same bytes */
    float *first = alloc_f(n);
    memcpy(first, r.out[0], x->bytes);
    delta_cpu_set_threads(1);
    delta_k_dropout(&r.k);
    CHECK(same_bytes(first, r.out[0], n), "dropout re-run differs");
    delta_cpu_set_threads(2);

    /* another step: another mask */
    env.step = 6;
    delta_k_dropout(&r.k);
    long diff_step = 0;
    for (int64_t i = 0; i < n; i++)
        if ((first[i] != 0) != (((float *)r.out[0])[i] != 0)) diff_step++;
    CHECK(diff_step > n / 5 && diff_step < n / 2, "steps: %ld differ",
          diff_step);

    /* eval: identity, forward and backward */
    env.training = false;
    delta_k_dropout(&r.k);
    CHECK(same_bytes(r.in[0], r.out[0], n), "eval dropout is not a copy");
    delta_k_dropout_bwd(&rb.k);
    CHECK(same_bytes(rb.in[0], rb.out[0], n), "eval dropout_bwd not a copy");
    /* in place (out == in) in eval: unchanged */
    memcpy(first, r.in[0], x->bytes);
    r.k.out[0] = r.in[0];
    delta_k_dropout(&r.k);
    CHECK(same_bytes(first, r.in[0], n), "in-place eval dropout");
    r.k.out[0] = r.out[0];
    env.training = true;
    env.step = 0;

    /* the keep test itself: pure, and p = 0 keeps everything */
    CHECK(delta_dropout_keep(1, 2, 3, 4, 0.5f) ==
          delta_dropout_keep(1, 2, 3, 4, 0.5f));
    bool all = true;
    for (int64_t i = 0; i < 1000; i++)
        all = all && delta_dropout_keep(9, 1, 0, i, 0.0f);
    CHECK(all, "p = 0 must keep every element");

    delta_free_aligned(first);
    run_free(&r);
    run_free(&r2);
    run_free(&rb);
    delta_ctx_free(ctx);
}

/* ---- optimizers --------------------------------------------------------- */

/* An in-place update op of `type` on ins, writing outs (input indices). */
static int append_update(delta_ctx *ctx, delta_op_type type,
                         const delta_tensor *const *ins, int n_in,
                         const int *out_of_in, int n_out, delta_op_attrs a) {
    delta_op *op = delta_op_append(ctx, type, ins, n_in);
    op->a = a;
    op->phase = DELTA_PHASE_OPTIMIZER;
    op->inplace = true;
    op->recomputable = false;
    op->n_out = n_out;
    for (int i = 0; i < n_out; i++) op->out[i] = ins[out_of_in[i]]->id;
    return op->id;
}

static void check_sgd(float lr, float mom, float wd, bool nesterov,
                      const char *what) {
    delta_ctx *ctx = delta_ctx_new();
    int64_t n = 50000, s[1] = {n};
    delta_tensor *p = input(ctx, 1, s), *g = input(ctx, 1, s),
                 *buf = input(ctx, 1, s);
    delta_op_attrs a = delta_attrs0();
    a.lr = lr;
    a.momentum = mom;
    a.weight_decay = wd;
    a.nesterov = nesterov;
    a.has_momentum = mom != 0.0f;
    const delta_tensor *ins[3] = {p, g, buf};
    int outs[2] = {0, 2};
    int id = append_update(ctx, DELTA_OP_SGD_UPDATE, ins,
                           a.has_momentum ? 3 : 2, outs,
                           a.has_momentum ? 2 : 1, a);
    run r;
    run_init(&r, ctx, id);
    CHECK(r.k.out[0] == r.k.in[0], "in place");
    float *pd = r.in[0], *gd = r.in[1], *bd = a.has_momentum ? r.in[2] : NULL;
    test_fill_rand(pd, n, -1, 1);
    if (bd) test_fill_rand(bd, n, -5, 5); /* garbage: step 0 must overwrite */
    double *rp = malloc((size_t)n * sizeof(double));
    double *rb = calloc((size_t)n, sizeof(double));
    for (int64_t i = 0; i < n; i++) rp[i] = pd[i];
    float *pf = alloc_f(n);
    for (int step = 0; step < 4; step++) {
        test_fill_rand(gd, n, -1, 1);
        for (int64_t i = 0; i < n; i++) {
            double gi = gd[i] + (double)wd * rp[i];
            if (a.has_momentum) {
                rb[i] = step == 0 ? gi : (double)mom * rb[i] + gi;
                gi = nesterov ? gi + (double)mom * rb[i] : rb[i];
            }
            rp[i] -= (double)lr * gi;
        }
        env.step = step;
        delta_k_sgd_update(&r.k);
        for (int64_t i = 0; i < n; i++) pf[i] = (float)rp[i];
        char w[160];
        snprintf(w, sizeof w, "%s step %d", what, step);
        test_allclose(w, pd, pf, (long)n, 1e-6, 1e-5);
        if (bd) {
            for (int64_t i = 0; i < n; i++) pf[i] = (float)rb[i];
            snprintf(w, sizeof w, "%s buf step %d", what, step);
            test_allclose(w, bd, pf, (long)n, 1e-6, 1e-5);
        }
    }
    env.step = 0;
    free(rp);
    free(rb);
    delta_free_aligned(pf);
    run_free(&r);
    delta_ctx_free(ctx);
}

static void test_sgd(void) {
    check_sgd(0.1f, 0.0f, 0.0f, false, "sgd plain");
    check_sgd(0.1f, 0.0f, 0.01f, false, "sgd weight decay");
    check_sgd(0.05f, 0.9f, 0.0f, false, "sgd momentum");
    check_sgd(0.05f, 0.9f, 5e-4f, false, "sgd momentum + wd");
    check_sgd(0.05f, 0.9f, 5e-4f, true, "sgd nesterov + wd");
}

static void check_adamw(float lr, float b1, float b2, float eps, float wd,
                        const char *what) {
    delta_ctx *ctx = delta_ctx_new();
    int64_t n = 50000, s[1] = {n};
    delta_tensor *p = input(ctx, 1, s), *g = input(ctx, 1, s),
                 *m = input(ctx, 1, s), *v = input(ctx, 1, s);
    delta_op_attrs a = delta_attrs0();
    a.lr = lr;
    a.beta1 = b1;
    a.beta2 = b2;
    a.opt_eps = eps;
    a.weight_decay = wd;
    const delta_tensor *ins[4] = {p, g, m, v};
    int outs[3] = {0, 2, 3};
    int id = append_update(ctx, DELTA_OP_ADAMW_UPDATE, ins, 4, outs, 3, a);
    run r;
    run_init(&r, ctx, id);
    float *pd = r.in[0], *gd = r.in[1], *md = r.in[2], *vd = r.in[3];
    test_fill_rand(pd, n, -1, 1);
    double *rp = malloc((size_t)n * sizeof(double));
    double *rm = calloc((size_t)n, sizeof(double));
    double *rv = calloc((size_t)n, sizeof(double));
    for (int64_t i = 0; i < n; i++) rp[i] = pd[i];
    float *pf = alloc_f(n);
    for (int step = 0; step < 5; step++) {
        test_fill_rand(gd, n, -1, 1);
        if (step == 2)
            for (int64_t i = 0; i < n; i += 7) gd[i] = 0.0f;
        double t = step + 1;
        double bc1 = 1 - pow(b1, t), bc2 = 1 - pow(b2, t);
        for (int64_t i = 0; i < n; i++) {
            double gi = gd[i];
            rp[i] *= 1.0 - (double)lr * wd;
            rm[i] = b1 * rm[i] + (1.0 - b1) * gi;
            rv[i] = b2 * rv[i] + (1.0 - b2) * gi * gi;
            double denom = sqrt(rv[i]) / sqrt(bc2) + eps;
            rp[i] -= (lr / bc1) * rm[i] / denom;
        }
        env.step = step;
        delta_k_adamw_update(&r.k);
        char w[160];
        for (int64_t i = 0; i < n; i++) pf[i] = (float)rp[i];
        snprintf(w, sizeof w, "%s p step %d", what, step);
        test_allclose(w, pd, pf, (long)n, 1e-6, 1e-5);
        for (int64_t i = 0; i < n; i++) pf[i] = (float)rm[i];
        snprintf(w, sizeof w, "%s m step %d", what, step);
        test_allclose(w, md, pf, (long)n, 1e-7, 1e-5);
        for (int64_t i = 0; i < n; i++) pf[i] = (float)rv[i];
        snprintf(w, sizeof w, "%s v step %d", what, step);
        test_allclose(w, vd, pf, (long)n, 1e-9, 1e-5);
    }
    env.step = 0;
    free(rp);
    free(rm);
    free(rv);
    delta_free_aligned(pf);
    run_free(&r);
    delta_ctx_free(ctx);
}

static void test_adamw(void) {
    check_adamw(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, "adamw");
    check_adamw(3e-2f, 0.8f, 0.95f, 1e-6f, 0.0f, "adamw no decay");
    check_adamw(1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, "adamw strong decay");
}

int main(void) {
    TEST_RUN(test_cpu_config);
    TEST_RUN(test_gemm_builtin);
    TEST_RUN(test_gemm_builtin_portable_kernel);
    TEST_RUN(test_gemm_blas);
    TEST_RUN(test_gemm_deterministic);
    TEST_RUN(test_matmul);
    TEST_RUN(test_linear);
    TEST_RUN(test_sum_leading);
    TEST_RUN(test_relu);
    TEST_RUN(test_gelu);
    TEST_RUN(test_add);
    TEST_RUN(test_mul_scale_fill_broadcast);
    TEST_RUN(test_sum);
    TEST_RUN(test_dropout);
    TEST_RUN(test_sgd);
    TEST_RUN(test_adamw);
    TEST_MAIN_END();
}
