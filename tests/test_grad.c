/* Finite-difference gradient check of every differentiable op, through the
 * whole stack: the op constructor, autograd's backward ops, the executor
 * and the CPU kernels. For each case the loss is sum(op(...) * R) with a
 * fixed random R; every parameter's analytic gradient is compared with a
 * central difference on sampled elements. Run with both GEMM paths. */
#include "delta/delta.h"
#include "test.h"

#include <math.h>

typedef struct gcase {
    delta_ctx *ctx;
    float eps;        /* finite-difference step */
    float min_abs;    /* keep |x| of inputs above this (kinks of relu/pool) */
    delta_tensor *ids;   /* I32 input filled with (7j + 1) mod ids_mod, and
                            -100 at index 1 when ids_ignore */
    int ids_mod;
    bool ids_ignore;
    delta_tensor *mask;  /* F32 key mask: every third key masked */
} gcase;

static const int64_t *S(int64_t a, int64_t b, int64_t c, int64_t d) {
    static int64_t s[4];
    s[0] = a; s[1] = b; s[2] = c; s[3] = d;
    return s;
}

static delta_tensor *P(gcase *g, const char *name, int nd, const int64_t *s) {
    delta_init init = {DELTA_INIT_NORMAL, 0.0f, 1.0f};
    return delta_param(g->ctx, name, nd, s, init);
}

static double loss_of(delta_exec *ex, delta_tensor *loss) {
    delta_exec_set_step(ex, 0);
    delta_exec_run(ex, DELTA_RUN_FORWARD);
    return *(float *)delta_exec_data(ex, loss);
}

/* Finishes a case whose output is y: builds the loss, runs backward and
 * compares gradients of every parameter. */
static void check_grads(gcase *g, delta_tensor *y, const char *what) {
    delta_ctx *ctx = g->ctx;
    CHECK(y != NULL, "%s: build failed: %s", what, delta_ctx_error(ctx));
    if (!y) { delta_ctx_free(ctx); return; }
    delta_init ru = {DELTA_INIT_UNIFORM, -1.0f, 1.0f};
    delta_tensor *r = delta_constant(ctx, "R", DELTA_F32, delta_tensor_ndim(y),
                                     delta_tensor_shape(y), ru);
    delta_tensor *loss = delta_sum(ctx, delta_mul(ctx, y, r));
    delta_status st = delta_backward(ctx, loss);
    CHECK(st == DELTA_OK, "%s: backward: %s", what, delta_ctx_error(ctx));
    char err[256];
    delta_exec *ex = st == DELTA_OK ? delta_exec_new(ctx, NULL, err, sizeof err)
                                    : NULL;
    CHECK(ex || st != DELTA_OK, "%s: exec: %s", what, err);
    if (!ex) { delta_ctx_free(ctx); return; }

    if (g->ids) {
        int *id = delta_exec_data(ex, g->ids);
        for (int64_t j = 0; j < delta_tensor_numel(g->ids); j++)
            id[j] = (int)((7 * j + 1) % g->ids_mod);
        if (g->ids_ignore) id[1] = -100;
    }
    if (g->mask) {
        float *m = delta_exec_data(ex, g->mask);
        for (int64_t j = 0; j < delta_tensor_numel(g->mask); j++)
            m[j] = j % 3 == 2 ? 0.0f : 1.0f;
    }
    int n = delta_ctx_n_tensors(ctx);
    if (g->min_abs > 0)
        for (int i = 0; i < n; i++) {
            delta_tensor *t = delta_ctx_tensor(ctx, i);
            if (delta_tensor_kind_of(t) != DELTA_KIND_PARAM) continue;
            float *x = delta_exec_data(ex, t);
            for (int64_t j = 0; j < delta_tensor_numel(t); j++)
                if (fabsf(x[j]) < g->min_abs)
                    x[j] = x[j] < 0 ? -g->min_abs - 0.1f * (float)(j % 7)
                                    : g->min_abs + 0.1f * (float)(j % 5);
        }
    delta_exec_set_step(ex, 0);
    delta_exec_run(ex, DELTA_RUN_STEP);

    int checked = 0;
    for (int i = 0; i < n; i++) {
        delta_tensor *t = delta_ctx_tensor(ctx, i);
        if (delta_tensor_kind_of(t) != DELTA_KIND_PARAM) continue;
        delta_tensor *gt = delta_tensor_grad(t);
        CHECK(gt != NULL, "%s: parameter %s got no gradient", what,
              delta_tensor_name(t));
        if (!gt) continue;
        const float *ana = delta_exec_data(ex, gt);
        float *x = delta_exec_data(ex, t);
        int64_t ne = delta_tensor_numel(t);
        int64_t stride = ne > 24 ? ne / 24 : 1; /* sample about 24 elements */
        for (int64_t j = 0; j < ne; j += stride) {
            float x0 = x[j];
            x[j] = x0 + g->eps;
            double lp = loss_of(ex, loss);
            x[j] = x0 - g->eps;
            double lm = loss_of(ex, loss);
            x[j] = x0;
            double num = (lp - lm) / (2.0 * g->eps);
            double tol = 1e-2 + 2e-2 * fabs(num);
            checked++;
            CHECK(fabs(num - ana[j]) <= tol,
                  "%s: d loss / d %s[%lld]: analytic %.6g, numeric %.6g", what,
                  delta_tensor_name(t), (long long)j, ana[j], num);
        }
    }
    CHECK(checked > 0, "%s: nothing checked", what);
    delta_exec_free(ex);
    delta_ctx_free(ctx);
}

static gcase new_case(float eps) {
    gcase g = {delta_ctx_new(), eps, 0.0f, NULL, 1, false, NULL};
    delta_ctx_set_seed(g.ctx, 42);
    return g;
}

static void test_matmul(void) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            gcase g = new_case(1e-2f);
            delta_tensor *a = P(&g, "a", 2, ta ? S(4, 3, 0, 0) : S(3, 4, 0, 0));
            delta_tensor *b = P(&g, "b", 2, tb ? S(5, 4, 0, 0) : S(4, 5, 0, 0));
            check_grads(&g, delta_matmul(g.ctx, a, b, ta, tb, 0.5f), "matmul");
        }
    gcase g = new_case(1e-2f);
    delta_tensor *a = P(&g, "a", 3, S(2, 3, 4, 0));
    delta_tensor *b = P(&g, "b", 3, S(2, 5, 4, 0));
    check_grads(&g, delta_matmul(g.ctx, a, b, false, true, 1.0f),
                "batched matmul");
    g = new_case(1e-2f);
    a = P(&g, "a", 3, S(2, 3, 4, 0));
    b = P(&g, "b", 2, S(4, 5, 0, 0));
    check_grads(&g, delta_matmul(g.ctx, a, b, false, false, 1.0f),
                "matmul with shared b");
}

static void test_linear(void) {
    gcase g = new_case(1e-2f);
    delta_tensor *x = P(&g, "x", 3, S(2, 3, 6, 0));
    delta_tensor *w = P(&g, "w", 2, S(5, 6, 0, 0));
    delta_tensor *b = P(&g, "b", 1, S(5, 0, 0, 0));
    check_grads(&g, delta_linear(g.ctx, x, w, b), "linear");
    g = new_case(1e-2f);
    x = P(&g, "x", 2, S(4, 6, 0, 0));
    w = P(&g, "w", 2, S(3, 6, 0, 0));
    check_grads(&g, delta_linear(g.ctx, x, w, NULL), "linear without bias");
    g = new_case(1e-2f);
    x = P(&g, "x", 3, S(2, 3, 6, 0));
    w = P(&g, "w", 2, S(6, 5, 0, 0));
    b = P(&g, "b", 1, S(5, 0, 0, 0));
    check_grads(&g, delta_linear_in_out(g.ctx, x, w, b), "linear_in_out");
    g = new_case(1e-2f);
    x = P(&g, "x", 2, S(4, 6, 0, 0));
    w = P(&g, "w", 2, S(6, 3, 0, 0));
    check_grads(&g, delta_linear_in_out(g.ctx, x, w, NULL),
                "linear_in_out without bias");
}

static void test_conv2d(void) {
    struct { int64_t n, c, h, k, r; int stride, pad; bool bias; } cs[] = {
        {2, 3, 6, 4, 3, 1, 1, true},
        {2, 3, 7, 4, 3, 2, 0, false},
        {1, 4, 5, 3, 1, 1, 0, true},
        {2, 2, 9, 3, 5, 2, 2, false},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        gcase g = new_case(1e-2f);
        delta_tensor *x = P(&g, "x", 4, S(cs[i].n, cs[i].c, cs[i].h, cs[i].h));
        delta_tensor *w = P(&g, "w", 4, S(cs[i].k, cs[i].c, cs[i].r, cs[i].r));
        delta_tensor *b = cs[i].bias ? P(&g, "b", 1, S(cs[i].k, 0, 0, 0)) : NULL;
        check_grads(&g, delta_conv2d(g.ctx, x, w, b, cs[i].stride, cs[i].pad),
                    "conv2d");
    }
}

static void test_batchnorm(void) {
    gcase g = new_case(1e-2f);
    delta_tensor *x = P(&g, "x", 4, S(3, 2, 3, 3));
    delta_tensor *ga = P(&g, "gamma", 1, S(2, 0, 0, 0));
    delta_tensor *be = P(&g, "beta", 1, S(2, 0, 0, 0));
    delta_init z = {DELTA_INIT_ZEROS, 0, 0}, o = {DELTA_INIT_ONES, 0, 0};
    delta_tensor *rm = delta_state(g.ctx, "rm", 1, S(2, 0, 0, 0), z);
    delta_tensor *rv = delta_state(g.ctx, "rv", 1, S(2, 0, 0, 0), o);
    check_grads(&g, delta_batchnorm(g.ctx, x, ga, be, rm, rv, 0.1f, 1e-5f),
                "batchnorm 4-D");
    g = new_case(1e-2f);
    x = P(&g, "x", 2, S(5, 3, 0, 0));
    ga = P(&g, "gamma", 1, S(3, 0, 0, 0));
    be = P(&g, "beta", 1, S(3, 0, 0, 0));
    check_grads(&g, delta_batchnorm(g.ctx, x, ga, be, NULL, NULL, 0.1f, 1e-5f),
                "batchnorm 2-D");
}

/* The fused forms: relu(batchnorm(x)) and relu(batchnorm(x) + r), with a
 * step small enough that no value here crosses the kink at 0. */
static void test_batchnorm_fused(void) {
    for (int nd = 2; nd <= 4; nd += 2) {
        for (int add = 0; add < 2; add++) {
            gcase g = new_case(1e-3f);
            const int64_t *xs = nd == 4 ? S(3, 2, 3, 3) : S(5, 3, 0, 0);
            int64_t xsh[4] = {xs[0], xs[1], xs[2], xs[3]}, c = xs[1];
            delta_tensor *x = P(&g, "x", nd, xsh);
            delta_tensor *ga = P(&g, "gamma", 1, S(c, 0, 0, 0));
            delta_tensor *be = P(&g, "beta", 1, S(c, 0, 0, 0));
            delta_init z = {DELTA_INIT_ZEROS, 0, 0}, o = {DELTA_INIT_ONES, 0, 0};
            delta_tensor *rm = delta_state(g.ctx, "rm", 1, S(c, 0, 0, 0), z);
            delta_tensor *rv = delta_state(g.ctx, "rv", 1, S(c, 0, 0, 0), o);
            char what[64];
            snprintf(what, sizeof what, "batchnorm_%srelu %d-D",
                     add ? "add_" : "", nd);
            delta_tensor *y =
                add ? delta_batchnorm_add_relu(g.ctx, x, ga, be,
                                               P(&g, "r", nd, xsh), rm, rv,
                                               0.1f, 1e-5f)
                    : delta_batchnorm_relu(g.ctx, x, ga, be, rm, rv, 0.1f,
                                           1e-5f);
            check_grads(&g, y, what);
        }
    }
}

static void test_layernorm(void) {
    gcase g = new_case(1e-2f);
    delta_tensor *x = P(&g, "x", 3, S(2, 3, 8, 0));
    delta_tensor *ga = P(&g, "gamma", 1, S(8, 0, 0, 0));
    delta_tensor *be = P(&g, "beta", 1, S(8, 0, 0, 0));
    check_grads(&g, delta_layernorm(g.ctx, x, ga, be, 1e-5f), "layernorm");
    g = new_case(1e-2f);
    x = P(&g, "x", 2, S(4, 6, 0, 0));
    check_grads(&g, delta_layernorm(g.ctx, x, NULL, NULL, 1e-5f),
                "layernorm without affine");
}

static void test_activations(void) {
    gcase g = new_case(1e-3f);
    g.min_abs = 0.05f;
    check_grads(&g, delta_relu(g.ctx, P(&g, "x", 2, S(4, 5, 0, 0))), "relu");
    g = new_case(1e-2f);
    check_grads(&g, delta_gelu(g.ctx, P(&g, "x", 2, S(4, 5, 0, 0))), "gelu");
    g = new_case(1e-2f);
    check_grads(&g, delta_gelu_erf(g.ctx, P(&g, "x", 2, S(4, 5, 0, 0))),
                "gelu erf");
    g = new_case(1e-2f);
    check_grads(&g, delta_scale(g.ctx, P(&g, "x", 1, S(7, 0, 0, 0)), -1.5f),
                "scale");
}

static void test_pools(void) {
    gcase g = new_case(1e-3f);
    check_grads(&g, delta_maxpool2d(g.ctx, P(&g, "x", 4, S(2, 2, 7, 7)), 3, 2,
                                    1), "maxpool 3/2/1");
    g = new_case(1e-3f);
    check_grads(&g, delta_maxpool2d(g.ctx, P(&g, "x", 4, S(1, 3, 6, 6)), 2, 2,
                                    0), "maxpool 2/2/0");
    g = new_case(1e-2f);
    check_grads(&g, delta_avgpool2d(g.ctx, P(&g, "x", 4, S(2, 2, 7, 7)), 3, 2,
                                    1), "avgpool 3/2/1");
    g = new_case(1e-2f);
    check_grads(&g, delta_global_avgpool(g.ctx, P(&g, "x", 4, S(2, 3, 4, 5))),
                "global avgpool");
}

static void test_add_mul_sum(void) {
    gcase g = new_case(1e-2f);
    delta_tensor *a = P(&g, "a", 3, S(2, 3, 4, 0));
    delta_tensor *b = P(&g, "b", 3, S(2, 3, 4, 0));
    check_grads(&g, delta_add(g.ctx, a, b), "add");
    g = new_case(1e-2f);
    a = P(&g, "a", 3, S(2, 3, 4, 0));
    b = P(&g, "b", 2, S(3, 4, 0, 0));
    check_grads(&g, delta_add(g.ctx, a, b), "add broadcast");
    g = new_case(1e-2f);
    a = P(&g, "a", 2, S(3, 4, 0, 0));
    b = P(&g, "b", 2, S(3, 4, 0, 0));
    check_grads(&g, delta_mul(g.ctx, a, b), "mul");
    g = new_case(1e-2f);
    a = P(&g, "a", 2, S(3, 4, 0, 0));
    check_grads(&g, delta_sum(g.ctx, a), "sum");
    /* a tensor used three times: gradient contributions are summed */
    g = new_case(1e-2f);
    a = P(&g, "a", 2, S(3, 4, 0, 0));
    delta_tensor *t = delta_gelu(g.ctx, a);
    check_grads(&g, delta_add(g.ctx, delta_mul(g.ctx, t, t), t),
                "reused tensor");
}

static void test_embedding(void) {
    gcase g = new_case(1e-2f);
    delta_init none = {DELTA_INIT_NONE, 0, 0};
    /* 8 lookups into 5 rows: some rows are hit twice (accumulation) */
    g.ids = delta_constant(g.ctx, "ids", DELTA_I32, 2, S(2, 4, 0, 0), none);
    g.ids_mod = 5;
    delta_tensor *table = P(&g, "table", 2, S(5, 4, 0, 0));
    check_grads(&g, delta_embedding(g.ctx, g.ids, table), "embedding");
}

static void test_softmax_attention(void) {
    gcase g = new_case(1e-2f);
    check_grads(&g, delta_softmax(g.ctx, P(&g, "x", 3, S(2, 3, 5, 0)), false,
                                  NULL), "softmax");
    g = new_case(1e-2f);
    check_grads(&g, delta_softmax(g.ctx, P(&g, "x", 3, S(2, 4, 4, 0)), true,
                                  NULL), "softmax causal");
    g = new_case(1e-2f);
    delta_init none = {DELTA_INIT_NONE, 0, 0};
    g.mask = delta_constant(g.ctx, "mask", DELTA_F32, 2, S(2, 5, 0, 0), none);
    check_grads(&g, delta_softmax(g.ctx, P(&g, "x", 4, S(2, 2, 3, 5)), false,
                                  g.mask), "softmax key mask");
    g = new_case(1e-2f);
    delta_tensor *q = P(&g, "q", 4, S(1, 2, 4, 3));
    delta_tensor *k = P(&g, "k", 4, S(1, 2, 4, 3));
    delta_tensor *v = P(&g, "v", 4, S(1, 2, 4, 3));
    check_grads(&g, delta_attention(g.ctx, q, k, v, true, NULL, 0.0f),
                "attention causal");
}

static void test_dropout(void) {
    gcase g = new_case(1e-2f);
    check_grads(&g, delta_dropout(g.ctx, P(&g, "x", 2, S(6, 7, 0, 0)), 0.3f),
                "dropout");
}

static void test_cross_entropy(void) {
    gcase g = new_case(1e-2f);
    delta_init none = {DELTA_INIT_NONE, 0, 0};
    g.ids = delta_constant(g.ctx, "targets", DELTA_I32, 1, S(4, 0, 0, 0), none);
    g.ids_mod = 6;
    g.ids_ignore = true;
    check_grads(&g, delta_cross_entropy(g.ctx, P(&g, "logits", 2,
                                                 S(4, 6, 0, 0)), g.ids, -100),
                "cross entropy");
}

static void test_layout(void) {
    gcase g = new_case(1e-2f);
    delta_tensor *x = P(&g, "x", 3, S(2, 3, 4, 0));
    int64_t s[2] = {6, 4};
    check_grads(&g, delta_gelu(g.ctx, delta_reshape(g.ctx, x, 2, s)),
                "reshape");
    g = new_case(1e-2f);
    x = P(&g, "x", 4, S(2, 3, 4, 5));
    check_grads(&g, delta_transpose(g.ctx, x, 1, 2), "transpose");
    g = new_case(1e-2f);
    x = P(&g, "x", 3, S(2, 3, 6, 0));
    delta_tensor *parts[3];
    CHECK(delta_split(g.ctx, x, -1, 3, parts) == DELTA_OK, "split");
    /* use two of three parts, so one split output has no gradient */
    check_grads(&g, delta_mul(g.ctx, parts[0], parts[2]), "split");
    g = new_case(1e-2f);
    delta_tensor *xs[2] = {P(&g, "a", 2, S(3, 2, 0, 0)),
                           P(&g, "b", 2, S(3, 5, 0, 0))};
    check_grads(&g, delta_concat(g.ctx, xs, 2, 1), "concat");
}

int main(void) {
    const char *names[2] = {"builtin", "openblas"};
    delta_gemm_impl impls[2] = {DELTA_GEMM_BUILTIN, DELTA_GEMM_BLAS};
    for (int i = 0; i < 2; i++) {
        if (delta_cpu_set_gemm(impls[i]) != DELTA_OK) {
            printf("skip gradient checks with %s GEMM: not in this build\n",
                   names[i]);
            continue;
        }
        printf("# GEMM: %s\n", names[i]);
        TEST_RUN(test_matmul);
        TEST_RUN(test_linear);
        TEST_RUN(test_conv2d);
        TEST_RUN(test_batchnorm);
        TEST_RUN(test_batchnorm_fused);
        TEST_RUN(test_layernorm);
        TEST_RUN(test_activations);
        TEST_RUN(test_pools);
        TEST_RUN(test_add_mul_sum);
        TEST_RUN(test_embedding);
        TEST_RUN(test_softmax_attention);
        TEST_RUN(test_dropout);
        TEST_RUN(test_cross_entropy);
        TEST_RUN(test_layout);
    }
    TEST_MAIN_END();
}
