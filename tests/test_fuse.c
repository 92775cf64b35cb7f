/* The batch-norm fusion pass (delta_ctx_fuse_batchnorm) and its fused ops:
 *  - which chains it fuses (F32 and BF16) and which it leaves (another
 *    reader, the batch norm's output as the add's second operand, a
 *    broadcast residual), that the program stays in order, that a
 *    fused-away tensor is refused with a message, and that it runs before
 *    delta_backward only;
 *  - fused and unfused programs on the CPU give the same bits: outputs,
 *    gradients, parameters and running statistics after training steps,
 *    and eval-mode outputs, on odd shapes, (N, C) inputs, with and without
 *    running statistics, in F32 and in BF16 (where the fused ops must round
 *    the batch norm's value before adding the residual, and keep the -0 a
 *    tiny negative value rounds to: one channel's gamma is made tiny so its
 *    values are all about 0);
 *  - the ResNets, in both precisions, train the same bits with and without
 *    the pass (the model's default and no_fusion), and the pass makes the
 *    ops expected. (The fused kernels against their chain on special BF16
 *    values, NaN and infinities among them: test_bf16_native.c.) */
#include "delta/delta.h"
#include "delta/exec.h"
#include "test.h"

#include <stdint.h>
#include <string.h>

static int count_ops(const delta_ctx *c, const char *type) {
    int n = 0;
    for (int i = 0; i < delta_ctx_n_ops(c); i++) {
        delta_op_info info;
        delta_ctx_op_info(c, i, &info);
        n += strcmp(info.type, type) == 0;
    }
    return n;
}

/* Every input of every op is made by an earlier op or is a leaf. */
static bool in_order(const delta_ctx *c) {
    int nt = delta_ctx_n_tensors(c);
    int *made = calloc((size_t)nt, sizeof *made);
    for (int i = 0; i < nt; i++) made[i] = -1;
    bool ok = true;
    for (int i = 0; i < delta_ctx_n_ops(c); i++) {
        delta_op_info info;
        delta_ctx_op_info(c, i, &info);
        ok &= info.id == i;
        for (int j = 0; j < info.n_out; j++)
            if (made[info.out[j]] < 0) made[info.out[j]] = i;
        for (int j = 0; j < info.n_in; j++) {
            delta_tensor_kind k =
                delta_tensor_kind_of(delta_ctx_tensor(c, info.in[j]));
            bool leaf = k != DELTA_KIND_ACTIVATION && k != DELTA_KIND_GRAD;
            ok &= leaf || (made[info.in[j]] >= 0 && made[info.in[j]] < i);
        }
    }
    free(made);
    return ok;
}

typedef struct bn_params {
    delta_tensor *g, *b, *rm, *rv;
} bn_params;

static bn_params bn_new(delta_ctx *c, const char *name, int64_t ch,
                        bool running) {
    delta_init n1 = {DELTA_INIT_NORMAL, 1.0f, 0.3f};
    delta_init n0 = {DELTA_INIT_NORMAL, 0.0f, 0.5f};
    delta_init rmi = {DELTA_INIT_NORMAL, 0.0f, 0.2f};
    delta_init rvi = {DELTA_INIT_UNIFORM, 0.5f, 1.5f};
    char s[64];
    bn_params p = {NULL, NULL, NULL, NULL};
    snprintf(s, sizeof s, "%s.weight", name);
    p.g = delta_param(c, s, 1, &ch, n1);
    snprintf(s, sizeof s, "%s.bias", name);
    p.b = delta_param(c, s, 1, &ch, n0);
    if (running) {
        snprintf(s, sizeof s, "%s.running_mean", name);
        p.rm = delta_state(c, s, 1, &ch, rmi);
        snprintf(s, sizeof s, "%s.running_var", name);
        p.rv = delta_state(c, s, 1, &ch, rvi);
    }
    return p;
}

static delta_tensor *bn(delta_ctx *c, delta_tensor *x, bn_params p) {
    return delta_batchnorm(c, x, p.g, p.b, p.rm, p.rv, 0.1f, 1e-5f);
}

/* ---- the pass ----------------------------------------------------------- */

static void test_pass_fuses_only_chains(void) {
    delta_ctx *c = delta_ctx_new();
    int64_t xs[4] = {2, 3, 4, 4}, wt[1] = {4};
    delta_init one = {DELTA_INIT_ONES, 0, 0};
    delta_tensor *x = delta_input(c, "x", DELTA_F32, 4, xs);
    delta_tensor *r = delta_input(c, "r", DELTA_F32, 4, xs);
    delta_tensor *tail = delta_param(c, "tail", 1, wt, one);
    bn_params p[7];
    for (int i = 0; i < 7; i++) {
        char n[16];
        snprintf(n, sizeof n, "bn%d", i);
        p[i] = bn_new(c, n, 3, true);
    }
    /* fused: bn -> relu */
    delta_tensor *a = delta_relu(c, bn(c, x, p[0]));
    /* fused: bn -> add(·, r2) -> relu, r2 made after the batch norm (as
     * ResNet's downsample): the fused op goes to the add, the running
     * update with it */
    delta_tensor *z1 = bn(c, a, p[1]);
    delta_tensor *r2 = delta_scale(c, r, 0.5f);
    delta_tensor *b = delta_relu(c, delta_add(c, z1, r2));
    /* not fused: z read twice */
    delta_tensor *z2 = bn(c, b, p[2]);
    delta_tensor *d = delta_add(c, delta_relu(c, z2), z2);
    /* not fused: the batch norm's output is the add's second operand */
    delta_tensor *e = delta_relu(c, delta_add(c, d, bn(c, d, p[3])));
    /* not fused: a broadcast residual (4) */
    delta_tensor *f = delta_relu(c, delta_add(c, bn(c, e, p[4]), tail));
    /* fused: both chains in BF16 (mixed precision), the residual the
     * chain's input */
    delta_tensor *hb = delta_cast(c, f, DELTA_BF16);
    delta_tensor *h1 = delta_relu(c, bn(c, hb, p[5]));
    delta_tensor *h2 = delta_relu(c, delta_add(c, bn(c, h1, p[6]), hb));
    delta_tensor *loss = delta_sum(c, delta_cast(c, h2, DELTA_F32));
    CHECK(loss != NULL, "%s", delta_ctx_error(c));
    int n_ops = delta_ctx_n_ops(c), n_t = delta_ctx_n_tensors(c);
    CHECK(delta_ctx_fuse_batchnorm(c) == 4, "%s", delta_ctx_error(c));
    CHECK(count_ops(c, "batchnorm_relu") == 2 &&
          count_ops(c, "batchnorm_add_relu") == 2 &&
          count_ops(c, "batchnorm") == 3 && count_ops(c, "relu") == 3,
          "fused ops as expected");
    CHECK(delta_ctx_n_ops(c) == n_ops - 6 && delta_ctx_n_tensors(c) == n_t - 6,
          "ops %d -> %d, tensors %d -> %d", n_ops, delta_ctx_n_ops(c), n_t,
          delta_ctx_n_tensors(c));
    CHECK(delta_tensor_dtype(h2) == DELTA_BF16, "the BF16 chain's output "
          "stays BF16");
    CHECK(in_order(c), "the program stays in dependency order");
    /* again: nothing left to fuse */
    CHECK(delta_ctx_fuse_batchnorm(c) == 0);
    /* a fused-away tensor is refused, with a message */
    CHECK(delta_relu(c, z1) == NULL && delta_ctx_status(c) != DELTA_OK &&
          strstr(delta_ctx_error(c), "fuse"), "stale handle: %s",
          delta_ctx_error(c));
    delta_ctx_clear_error(c);
    CHECK(delta_backward(c, loss) == DELTA_OK, "%s", delta_ctx_error(c));
    CHECK(in_order(c), "and so does its backward pass");
    /* and by a session, as an output */
    delta_backend *cpu = delta_backend_cpu_new(NULL, NULL, 0);
    delta_session_opts so = {.backend = cpu, .outputs = &z1, .n_outputs = 1};
    delta_status st;
    char why[256] = "";
    delta_session *s = delta_session_new(c, &so, &st, why, sizeof why);
    CHECK(!s && st == DELTA_ERR_INVALID_ARG && strstr(why, "fused it away"),
          "a fused-away output: %s", why);
    delta_session_free(s);
    delta_backend_free(cpu);
    CHECK(delta_ctx_fuse_batchnorm(c) == -1 &&
          delta_ctx_status(c) == DELTA_ERR_STATE &&
          strstr(delta_ctx_error(c), "before delta_backward"), "%s",
          delta_ctx_error(c));
    delta_ctx_free(c);
}

/* ---- fused and unfused: the same bits ----------------------------------- */

typedef struct net {
    delta_ctx *ctx;
    delta_tensor *out, *loss, *x2, *late;
} net;

/* y1 = relu(bn1(x1)); out = relu(bn2(x2) + y1); loss = Σ out·R; then SGD.
 * `late` is a parameter made after the chains: it must start from the same
 * values in both programs. bf16: the chains on BF16 casts of x1 and x2
 * (as mixed precision runs them), out cast back to F32 for the loss. */
static net net_build(const int64_t *xs, int nd, bool running, bool fuse,
                     bool bf16) {
    net n;
    n.ctx = delta_ctx_new();
    delta_ctx *c = n.ctx;
    delta_ctx_set_seed(c, 11);
    delta_init xi = {DELTA_INIT_NORMAL, 0.7f, 2.0f};
    delta_init ri = {DELTA_INIT_UNIFORM, -1.0f, 1.0f};
    const delta_dtype dt = bf16 ? DELTA_BF16 : DELTA_F32;
    delta_tensor *x1 = delta_param(c, "x1", nd, xs, xi);
    n.x2 = delta_param(c, "x2", nd, xs, xi);
    bn_params p1 = bn_new(c, "bn1", xs[1], running);
    bn_params p2 = bn_new(c, "bn2", xs[1], running);
    delta_tensor *y1 = delta_relu(c, bn(c, delta_cast(c, x1, dt), p1));
    n.out = delta_relu(c, delta_add(c, bn(c, delta_cast(c, n.x2, dt), p2),
                                    y1));
    n.late = delta_param(c, "late", nd, xs, xi);
    delta_tensor *R = delta_constant(c, "R", DELTA_F32, nd, xs, ri);
    n.loss = delta_sum(c, delta_mul(c, delta_mul(c, delta_cast(c, n.out,
                                                                DELTA_F32),
                                                 R), n.late));
    if (fuse) CHECK(delta_ctx_fuse_batchnorm(c) == 2, "%s", delta_ctx_error(c));
    delta_backward(c, n.loss);
    delta_optimizer_sgd(c, (delta_sgd_opts){0.1f, 0.9f, 0.01f, false});
    CHECK(delta_ctx_status(c) == DELTA_OK, "%s", delta_ctx_error(c));
    return n;
}

static bool same(delta_exec *ea, delta_exec *eb, const delta_tensor *a,
                 const delta_tensor *b) {
    return delta_tensor_bytes(a) == delta_tensor_bytes(b) &&
           memcmp(delta_exec_data(ea, a), delta_exec_data(eb, b),
                  delta_tensor_bytes(a)) == 0;
}

/* Every PARAM and STATE tensor of a (by name in b), and their gradients. */
static int compare_state(net *a, net *b, delta_exec *ea, delta_exec *eb,
                         const char *when) {
    int n = 0;
    for (int i = 0; i < delta_ctx_n_tensors(a->ctx); i++) {
        const delta_tensor *t = delta_ctx_tensor(a->ctx, i);
        delta_tensor_kind k = delta_tensor_kind_of(t);
        if (k != DELTA_KIND_PARAM && k != DELTA_KIND_STATE) continue;
        const delta_tensor *u = delta_ctx_find(b->ctx, delta_tensor_name(t));
        CHECK(u && same(ea, eb, t, u), "%s: %s differs", when,
              delta_tensor_name(t));
        n++;
        const delta_tensor *gt = delta_tensor_grad(t);
        if (!gt || !u) continue;
        CHECK(delta_tensor_grad(u) && same(ea, eb, gt, delta_tensor_grad(u)),
              "%s: the gradient of %s differs", when, delta_tensor_name(t));
    }
    return n;
}

/* Channel 0 of both batch norms with gamma 1e-41 (an F32 subnormal) and
 * beta 0: its values x·scale + shift are all within about 1e-40 of 0, so
 * in BF16 (smallest subnormal 2^-133, about 9e-41) most round to +0 or -0,
 * and relu must see the rounded value (relu(-0) is -0; relu of the tiny
 * negative before rounding would give +0). Written into both programs. */
static void tiny_channel(delta_exec *ex, const net *n) {
    static const char *const names[][2] = {{"bn1.weight", "bn1.bias"},
                                           {"bn2.weight", "bn2.bias"}};
    for (int i = 0; i < 2; i++) {
        float *g = delta_exec_data(ex, delta_ctx_find(n->ctx, names[i][0]));
        float *b = delta_exec_data(ex, delta_ctx_find(n->ctx, names[i][1]));
        g[0] = 1e-41f;
        b[0] = 0.0f;
    }
}

/* The elements of a BF16 tensor that are -0 (sign bit alone). */
static int64_t negative_zeros(delta_exec *ex, const delta_tensor *t) {
    const uint16_t *v = delta_exec_data(ex, t);
    int64_t n = 0;
    for (int64_t i = 0; i < delta_tensor_numel(t); i++) n += v[i] == 0x8000;
    return n;
}

static void test_fused_same_bits(void) {
    const int64_t shapes[][4] = {{2, 3, 5, 7}, {4, 2, 3, 3}, {3, 5, 1, 1},
                                 {1, 4, 2, 9}, {7, 6, 0, 0}, {2, 1, 0, 0},
                                 {16, 9, 4, 4}};
    int64_t neg_zeros = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int variant = 0; variant < 4; variant++) {
            const int64_t *xs = shapes[si];
            int nd = xs[2] == 0 ? 2 : 4;
            bool running = variant % 2, bf16 = variant / 2;
            net u = net_build(xs, nd, running, false, bf16);
            net f = net_build(xs, nd, running, true, bf16);
            char err[256];
            delta_exec *eu = delta_exec_new(u.ctx, NULL, err, sizeof err);
            delta_exec *ef = delta_exec_new(f.ctx, NULL, err, sizeof err);
            CHECK(eu && ef, "%s", err);
            if (!eu || !ef) return;
            char when[96];
            snprintf(when, sizeof when, "%s shape %lld,%lld,%lld,%lld "
                     "running %d", bf16 ? "bf16" : "f32", (long long)xs[0],
                     (long long)xs[1], (long long)xs[2], (long long)xs[3],
                     running);
            CHECK(same(eu, ef, u.late, f.late), "%s: initial values", when);
            tiny_channel(eu, &u);
            tiny_channel(ef, &f);
            for (int step = 0; step < 3; step++) {
                CHECK(delta_exec_run(eu, DELTA_RUN_STEP) == DELTA_OK);
                CHECK(delta_exec_run(ef, DELTA_RUN_STEP) == DELTA_OK);
                CHECK(same(eu, ef, u.loss, f.loss) && same(eu, ef, u.out, f.out),
                      "%s step %d: loss or output differs", when, step);
                if (bf16 && step == 0) neg_zeros += negative_zeros(eu, u.out);
                /* the gradients of the (fused-away) batch norm's input */
                CHECK(same(eu, ef, delta_tensor_grad(u.x2),
                           delta_tensor_grad(f.x2)), "%s step %d: dx", when,
                      step);
                CHECK(compare_state(&u, &f, eu, ef, when) >= 6);
            }
            CHECK(delta_exec_run(eu, DELTA_RUN_EVAL) == DELTA_OK);
            CHECK(delta_exec_run(ef, DELTA_RUN_EVAL) == DELTA_OK);
            CHECK(same(eu, ef, u.out, f.out), "%s: eval output", when);
            delta_exec_free(eu);
            delta_exec_free(ef);
            delta_ctx_free(u.ctx);
            delta_ctx_free(f.ctx);
        }
    printf("  bf16: %lld outputs of -0 in the first steps\n",
           (long long)neg_zeros);
    CHECK(neg_zeros > 0, "the tiny channel gives -0 outputs in BF16");
}

/* ---- the ResNets ---------------------------------------------------------- */

static void resnet_train(const char *name, delta_precision precision,
                         int no_fusion, int steps, float *losses,
                         char **state, size_t *state_n, int counts[3]) {
    delta_model_config cfg = {.name = name, .batch = 4, .image_size = 36,
                              .channels = 3, .classes = 10, .width = 4,
                              .precision = precision,
                              .no_fusion = no_fusion};
    delta_ctx *c = delta_ctx_new();
    delta_ctx_set_seed(c, 3);
    delta_model m;
    CHECK(delta_model_build(c, &cfg, &m) == DELTA_OK, "%s", m.error);
    counts[0] = count_ops(c, "batchnorm_relu");
    counts[1] = count_ops(c, "batchnorm_add_relu");
    counts[2] = count_ops(c, "batchnorm");
    delta_backward(c, m.loss);
    delta_optimizer_sgd(c, (delta_sgd_opts){0.05f, 0.9f, 1e-4f, false});
    char err[256];
    delta_exec *ex = delta_exec_new(c, NULL, err, sizeof err);
    CHECK(ex, "%s", err);
    if (!ex) return;
    for (int s = 0; s < steps; s++) {
        test_rng_seed((uint64_t)s + 1);
        test_fill_rand(delta_exec_data(ex, m.input),
                       delta_tensor_numel(m.input), -1, 1);
        int *lab = delta_exec_data(ex, m.target);
        for (int i = 0; i < 4; i++) lab[i] = (int)(test_rng_u32() % 10);
        CHECK(delta_exec_run(ex, DELTA_RUN_STEP) == DELTA_OK);
        losses[s] = *(float *)delta_exec_data(ex, m.loss);
    }
    size_t n = 0;
    for (int i = 0; i < delta_ctx_n_tensors(c); i++) {
        delta_tensor_kind k = delta_tensor_kind_of(delta_ctx_tensor(c, i));
        if (k == DELTA_KIND_PARAM || k == DELTA_KIND_STATE)
            n += delta_tensor_bytes(delta_ctx_tensor(c, i));
    }
    *state = malloc(n);
    *state_n = n;
    char *p = *state;
    for (int i = 0; i < delta_ctx_n_tensors(c); i++) {
        const delta_tensor *t = delta_ctx_tensor(c, i);
        delta_tensor_kind k = delta_tensor_kind_of(t);
        if (k != DELTA_KIND_PARAM && k != DELTA_KIND_STATE) continue;
        memcpy(p, delta_exec_data(ex, t), delta_tensor_bytes(t));
        p += delta_tensor_bytes(t);
    }
    delta_exec_free(ex);
    delta_ctx_free(c);
}

/* In FP32 and in BF16 (mixed precision: the chains on BF16 activations,
 * fused the same way). */
static void test_resnets_train_the_same(void) {
    /* bn_relu: the stem and two (basic) or three (bottleneck) less one per
     * block; add_relu: one per block; batchnorm: the downsamples */
    const struct {
        const char *name;
        int counts[3];
    } cases[] = {{"resnet18", {9, 8, 3}}, {"resnet50", {33, 16, 4}}};
    enum { STEPS = 3 };
    for (size_t k = 0; k < 2 * sizeof cases / sizeof cases[0]; k++) {
        size_t i = k / 2;
        delta_precision prec = k % 2 ? DELTA_PRECISION_BF16
                                     : DELTA_PRECISION_FP32;
        const char *pn = k % 2 ? "bf16" : "fp32";
        float lf[STEPS], lu[STEPS];
        char *sf = NULL, *su = NULL;
        size_t nf = 0, nu = 0;
        int cf[3], cu[3];
        resnet_train(cases[i].name, prec, 0, STEPS, lf, &sf, &nf, cf);
        resnet_train(cases[i].name, prec, 1, STEPS, lu, &su, &nu, cu);
        CHECK(!memcmp(cf, cases[i].counts, sizeof cf), "%s %s fused: %d "
              "batchnorm_relu, %d batchnorm_add_relu, %d batchnorm",
              cases[i].name, pn, cf[0], cf[1], cf[2]);
        CHECK(cu[0] == 0 && cu[1] == 0 && cu[2] == cf[0] + cf[1] + cf[2],
              "%s %s with no_fusion: %d batch norms", cases[i].name, pn,
              cu[2]);
        printf("  %s %s losses %.9g %.9g %.9g\n", cases[i].name, pn, lf[0],
               lf[1], lf[2]);
        CHECK(!memcmp(lf, lu, sizeof lf), "%s %s: losses %.9g %.9g %.9g vs "
              "%.9g %.9g %.9g", cases[i].name, pn, lf[0], lf[1], lf[2],
              lu[0], lu[1], lu[2]);
        CHECK(nf == nu && sf && su && !memcmp(sf, su, nf),
              "%s %s: parameters and state after %d steps differ",
              cases[i].name, pn, STEPS);
        free(sf);
        free(su);
    }
}

static void test_no_fusion_is_resnets(void) {
    delta_model_config cfg = {.name = "mlp", .batch = 2, .no_fusion = 1}, out;
    char err[256];
    CHECK(delta_model_resolve(&cfg, &out, err, sizeof err) ==
              DELTA_ERR_INVALID_ARG && strstr(err, "no_fusion"), "%s", err);
    cfg = (delta_model_config){.name = "resnet18", .batch = 2, .no_fusion = 2};
    CHECK(delta_model_resolve(&cfg, &out, err, sizeof err) ==
              DELTA_ERR_INVALID_ARG && strstr(err, "no_fusion"), "%s", err);
}

int main(void) {
    TEST_RUN(test_pass_fuses_only_chains);
    TEST_RUN(test_fused_same_bits);
    TEST_RUN(test_resnets_train_the_same);
    TEST_RUN(test_no_fusion_is_resnets);
    TEST_MAIN_END();
}
