/* delta_linear_in_out: x w + bias with the weight stored (IN, OUT), as
 * GPT-2's Conv1D layers hold it, in one op so that the GPU adds the bias in
 * the GEMM's epilogue instead of a pass of its own:
 *  - in F32 it is delta_matmul then delta_add bit for bit: outputs, the
 *    gradients of x, w and the bias, and the parameters after SGD steps,
 *    with and without a bias, on 2-D and batched x;
 *  - in BF16 the bias is added in fp32 before the output's one rounding
 *    (delta_linear's rule), which the chain of two BF16 ops (rounding the
 *    product, then the sum) does not give: checked against the F32 chain on
 *    the widened operands, rounded once, and shown to differ from the BF16
 *    chain somewhere;
 *  - wrong shapes and dtypes are refused with a message;
 *  - GPT-2 builds its projections with it (no matmul + add left). */
#include "delta/delta.h"
#include "delta/exec.h"
#include "test.h"

#include <string.h>

static int count_ops(const delta_ctx *c, const char *type, delta_phase ph) {
    int n = 0;
    for (int i = 0; i < delta_ctx_n_ops(c); i++) {
        delta_op_info info;
        delta_ctx_op_info(c, i, &info);
        n += strcmp(info.type, type) == 0 && info.phase == ph;
    }
    return n;
}

static bool same(delta_exec *ea, delta_exec *eb, const delta_tensor *a,
                 const delta_tensor *b) {
    return a && b && delta_tensor_bytes(a) == delta_tensor_bytes(b) &&
           memcmp(delta_exec_data(ea, a), delta_exec_data(eb, b),
                  delta_tensor_bytes(a)) == 0;
}

typedef struct net {
    delta_ctx *ctx;
    delta_tensor *x, *w, *b, *y, *loss;
} net;

/* loss = sum(y * R), y = x w + b as one op (fused) or as matmul + add. */
static net net_build(int nd, const int64_t *xs, int64_t out, bool bias,
                     bool fused) {
    net n = {delta_ctx_new(), NULL, NULL, NULL, NULL, NULL};
    delta_ctx_set_seed(n.ctx, 11);
    delta_init nrm = {DELTA_INIT_NORMAL, 0.0f, 1.0f};
    int64_t ws[2] = {xs[nd - 1], out}, bs[1] = {out};
    n.x = delta_param(n.ctx, "x", nd, xs, nrm);
    n.w = delta_param(n.ctx, "w", 2, ws, nrm);
    n.b = bias ? delta_param(n.ctx, "b", 1, bs, nrm) : NULL;
    /* R before the ops: a tensor's initial values follow its place */
    int64_t ys[3] = {xs[0], xs[1], xs[2]};
    ys[nd - 1] = out;
    delta_init ru = {DELTA_INIT_UNIFORM, -1.0f, 1.0f};
    delta_tensor *r = delta_constant(n.ctx, "R", DELTA_F32, nd, ys, ru);
    if (fused) {
        n.y = delta_linear_in_out(n.ctx, n.x, n.w, n.b);
    } else {
        n.y = delta_matmul(n.ctx, n.x, n.w, false, false, 1.0f);
        if (bias) n.y = delta_add(n.ctx, n.y, n.b);
    }
    n.loss = delta_sum(n.ctx, delta_mul(n.ctx, n.y, r));
    CHECK(delta_backward(n.ctx, n.loss) == DELTA_OK, "%s",
          delta_ctx_error(n.ctx));
    delta_optimizer_sgd(n.ctx, (delta_sgd_opts){0.01f, 0.9f, 1e-4f, false});
    return n;
}

static void test_f32_is_matmul_add(void) {
    const int64_t shapes[][4] = {{7, 4, 9, 0}, {2, 3, 6, 5}, {1, 1, 1, 0},
                                 {33, 70, 17, 0}, {3, 5, 64, 48}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int bias = 0; bias < 2; bias++) {
            const int64_t *s = shapes[si];
            int nd = s[3] ? 3 : 2;
            int64_t out = s[nd];
            net u = net_build(nd, s, out, bias, false);
            net f = net_build(nd, s, out, bias, true);
            CHECK(count_ops(f.ctx, "linear", DELTA_PHASE_FORWARD) == 1 &&
                      count_ops(f.ctx, "matmul", DELTA_PHASE_FORWARD) == 0 &&
                      count_ops(f.ctx, "add", DELTA_PHASE_FORWARD) == 0,
                  "the fused program is one linear op");
            char err[256];
            delta_exec *eu = delta_exec_new(u.ctx, NULL, err, sizeof err);
            delta_exec *ef = delta_exec_new(f.ctx, NULL, err, sizeof err);
            CHECK(eu && ef, "%s", err);
            if (!eu || !ef) return;
            char when[96];
            snprintf(when, sizeof when, "x %lldx%lldx%lld out %lld bias %d",
                     (long long)s[0], (long long)s[1],
                     (long long)(nd == 3 ? s[2] : 1), (long long)out, bias);
            for (int step = 0; step < 3; step++) {
                CHECK(delta_exec_run(eu, DELTA_RUN_STEP) == DELTA_OK);
                CHECK(delta_exec_run(ef, DELTA_RUN_STEP) == DELTA_OK);
                CHECK(same(eu, ef, u.y, f.y) && same(eu, ef, u.loss, f.loss),
                      "%s step %d: output differs", when, step);
                CHECK(same(eu, ef, delta_tensor_grad(u.x),
                           delta_tensor_grad(f.x)) &&
                          same(eu, ef, delta_tensor_grad(u.w),
                               delta_tensor_grad(f.w)),
                      "%s step %d: dx or dw differs", when, step);
                CHECK(!bias || same(eu, ef, delta_tensor_grad(u.b),
                                    delta_tensor_grad(f.b)),
                      "%s step %d: the bias gradient differs", when, step);
                CHECK(same(eu, ef, u.w, f.w) && same(eu, ef, u.x, f.x) &&
                          (!bias || same(eu, ef, u.b, f.b)),
                      "%s step %d: parameters differ after the step", when,
                      step);
            }
            delta_exec_free(eu);
            delta_exec_free(ef);
            delta_ctx_free(u.ctx);
            delta_ctx_free(f.ctx);
        }
}

/* BF16: fused = round(x w + b) on the widened operands (one rounding);
 * the F32 chain on widened copies, cast once, gives those bits; the BF16
 * chain rounds twice. Forward only. */
static void test_bf16_rounds_once(void) {
    delta_ctx *c = delta_ctx_new();
    delta_ctx_set_seed(c, 5);
    delta_init nrm = {DELTA_INIT_NORMAL, 0.0f, 1.0f};
    delta_init big = {DELTA_INIT_NORMAL, 3.0f, 2.0f};
    int64_t xs[3] = {2, 9, 24}, ws[2] = {24, 40}, bs[1] = {40};
    delta_tensor *x = delta_cast(c, delta_param(c, "x", 3, xs, nrm), DELTA_BF16);
    delta_tensor *w = delta_cast(c, delta_param(c, "w", 2, ws, nrm), DELTA_BF16);
    delta_tensor *b = delta_cast(c, delta_param(c, "b", 1, bs, big), DELTA_BF16);
    delta_tensor *fused = delta_linear_in_out(c, x, w, b);
    delta_tensor *once = delta_cast(
        c,
        delta_add(c,
                  delta_matmul(c, delta_cast(c, x, DELTA_F32),
                               delta_cast(c, w, DELTA_F32), false, false, 1.0f),
                  delta_cast(c, b, DELTA_F32)),
        DELTA_BF16);
    delta_tensor *twice = delta_add(c, delta_matmul(c, x, w, false, false, 1.0f), b);
    CHECK(fused && once && twice, "%s", delta_ctx_error(c));
    CHECK(delta_tensor_dtype(fused) == DELTA_BF16, "a BF16 output");
    char err[256];
    delta_exec *e = delta_exec_new(c, NULL, err, sizeof err);
    CHECK(e, "%s", err);
    if (!e) return;
    CHECK(delta_exec_run(e, DELTA_RUN_FORWARD) == DELTA_OK);
    CHECK(same(e, e, fused, once), "BF16 linear_in_out is not the F32 chain "
          "rounded once");
    CHECK(!same(e, e, fused, twice), "the BF16 chain (two roundings) gave "
          "the same bits everywhere: the test cannot tell them apart");
    delta_exec_free(e);
    delta_ctx_free(c);
}

static void test_refusals(void) {
    delta_ctx *c = delta_ctx_new();
    delta_init nrm = {DELTA_INIT_NORMAL, 0.0f, 1.0f};
    int64_t xs[2] = {4, 6}, ws[2] = {6, 5}, wt[2] = {5, 6}, bs[1] = {6};
    delta_tensor *x = delta_param(c, "x", 2, xs, nrm);
    delta_tensor *w = delta_param(c, "w", 2, ws, nrm);
    delta_tensor *w_out_in = delta_param(c, "wt", 2, wt, nrm);
    delta_tensor *b_wrong = delta_param(c, "b", 1, bs, nrm);
    CHECK(delta_linear_in_out(c, x, w_out_in, NULL) == NULL);
    CHECK(strstr(delta_ctx_error(c), "linear_in_out: x [4, 6] does not fit "
                 "weight [5, 6]; expected x (..., IN) and weight (IN, OUT)"),
          "%s", delta_ctx_error(c));
    delta_ctx *c2 = delta_ctx_new();
    x = delta_param(c2, "x", 2, xs, nrm);
    w = delta_param(c2, "w", 2, ws, nrm);
    b_wrong = delta_param(c2, "b", 1, bs, nrm);
    CHECK(delta_linear_in_out(c2, x, w, b_wrong) == NULL);
    CHECK(strstr(delta_ctx_error(c2), "expected (5)"), "%s",
          delta_ctx_error(c2));
    delta_ctx *c3 = delta_ctx_new();
    x = delta_param(c3, "x", 2, xs, nrm);
    w = delta_cast(c3, delta_param(c3, "w", 2, ws, nrm), DELTA_BF16);
    CHECK(delta_linear_in_out(c3, x, w, NULL) == NULL);
    CHECK(strstr(delta_ctx_error(c3), "x is F32, weight BF16"), "%s",
          delta_ctx_error(c3));
    delta_ctx_free(c);
    delta_ctx_free(c2);
    delta_ctx_free(c3);
}

static void test_gpt2_uses_it(void) {
    delta_model_config cfg = {.name = "gpt2-tiny", .batch = 2, .seq_len = 8};
    delta_ctx *c = delta_ctx_new();
    delta_model m;
    CHECK(delta_model_build(c, &cfg, &m) == DELTA_OK, "%s", m.error);
    int layers = 0;
    for (int i = 0; i < delta_ctx_n_tensors(c); i++) {
        const char *n = delta_tensor_name(delta_ctx_tensor(c, i));
        int l;
        if (sscanf(n, "transformer.h.%d.", &l) == 1 && l + 1 > layers)
            layers = l + 1;
    }
    CHECK(layers > 0, "GPT-2 has no layers");
    /* four projections a layer, and the tied lm head */
    CHECK(count_ops(c, "linear", DELTA_PHASE_FORWARD) == 4 * layers + 1,
          "%d linear ops for %d layers", count_ops(c, "linear",
                                                   DELTA_PHASE_FORWARD),
          layers);
    CHECK(count_ops(c, "matmul", DELTA_PHASE_FORWARD) == 2 * layers,
          "only attention's two products stay matmuls: %d",
          count_ops(c, "matmul", DELTA_PHASE_FORWARD));
    delta_ctx_free(c);
}

int main(void) {
    TEST_RUN(test_f32_is_matmul_add);
    TEST_RUN(test_bf16_rounds_once);
    TEST_RUN(test_refusals);
    TEST_RUN(test_gpt2_uses_it);
    TEST_MAIN_END();
}
