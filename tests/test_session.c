/* The session with the keep policy: the same bits as the simple executor,
 * the device high-water mark inside the budget, clear refusals of budgets
 * that cannot work, and the simulator running paper-scale steps. */
#include "delta/delta.h"
#include "test.h"
#include "test_models.h"

#include <time.h>

static void fill_inputs(delta_ctx *c, int step,
                        void (*put)(void *, const delta_tensor *, const void *),
                        void *ud) {
    for (int i = 0; i < delta_ctx_n_tensors(c); i++) {
        delta_tensor *t = delta_ctx_tensor(c, i);
        if (delta_tensor_kind_of(t) != DELTA_KIND_INPUT) continue;
        int64_t n = delta_tensor_numel(t);
        void *buf = malloc(delta_tensor_bytes(t));
        if (delta_tensor_dtype(t) == DELTA_I32) {
            int mod = strcmp(delta_tensor_name(t), "labels") ? 64 : 10;
            for (int64_t j = 0; j < n; j++)
                ((int *)buf)[j] = (int)((j * 31 + step * 7 + i) % mod);
        } else {
            for (int64_t j = 0; j < n; j++)
                ((float *)buf)[j] = (float)((j * 37 + step * 11) % 17) / 17.0f - 0.5f;
        }
        put(ud, t, buf);
        free(buf);
    }
}

static void put_exec(void *ud, const delta_tensor *t, const void *d) {
    delta_exec_set(ud, t, d, delta_tensor_bytes(t));
}
static void put_session(void *ud, const delta_tensor *t, const void *d) {
    delta_session_write(ud, t, d, delta_tensor_bytes(t));
}

/* kind 0: convnet, 1: small gpt, both with AdamW; 2: a gpt whose
 * activations dominate (T 64, SGD), for the recomputing policies. */
static delta_ctx *build(int kind) {
    delta_ctx *c = delta_ctx_new();
    delta_ctx_set_seed(c, 11);
    delta_tensor *loss = kind == 2   ? tm_gpt(c, 4, 64, 32, 4, 2, 64, 0.1f)
                         : kind == 1 ? tm_gpt(c, 2, 16, 32, 4, 2, 64, 0.1f)
                                     : tm_convnet(c, 4, 12);
    delta_backward(c, loss);
    if (kind == 2) {
        delta_sgd_opts o = {0.1f, 0, 0, false};
        delta_optimizer_sgd(c, o);
    } else {
        delta_adamw_opts o = {1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f};
        delta_optimizer_adamw(c, o);
    }
    return c;
}

/* Trains 3 steps with the session and with the simple executor and
 * compares every parameter and state tensor bit for bit. */
static void check_same_bits_policy(int kind, size_t budget, const char *policy,
                                   bool *infeasible);

static void check_same_bits(int kind, size_t budget) {
    check_same_bits_policy(kind, budget, NULL, NULL);
}

/* With infeasible non-NULL, a refusal (DELTA_ERR_BUDGET at creation or in
 * a step) is reported there instead of failing the test. */
static void check_same_bits_policy(int kind, size_t budget, const char *policy,
                                   bool *infeasible) {
    delta_ctx *c1 = build(kind), *c2 = build(kind);
    char err[512];
    delta_exec *ex = delta_exec_new(c1, NULL, err, sizeof err);
    delta_backend *b = delta_backend_cpu_new(&(delta_cpu_backend_opts){.link_gbps = 0, .link_latency_s = 0},
                                             err, sizeof err);
    delta_status st;
    delta_session_opts so = {.backend = b, .budget_bytes = budget,
                             .policy = policy};
    delta_session *s = delta_session_new(c2, &so, &st, err, sizeof err);
    if (infeasible) *infeasible = !s && st == DELTA_ERR_BUDGET;
    if (infeasible && *infeasible) goto out;
    CHECK(ex && b && s, "%s", err);
    if (!ex || !b || !s) goto out;
    for (int step = 0; step < 3; step++) {
        fill_inputs(c1, step, put_exec, ex);
        fill_inputs(c2, step, put_session, s);
        delta_exec_run(ex, DELTA_RUN_STEP);
        delta_step_stats stats;
        delta_status rs = delta_session_run(s, DELTA_RUN_STEP, &stats);
        if (rs == DELTA_ERR_BUDGET && infeasible) {
            CHECK(strstr(delta_session_error(s), "cannot fit"), "%s",
                  delta_session_error(s));
            *infeasible = true;
            goto out;
        }
        CHECK(rs == DELTA_OK, "%s", delta_session_error(s));
        CHECK(stats.peak_device_bytes <= delta_session_budget(s),
              "peak %zu above the arena %zu", stats.peak_device_bytes,
              delta_session_budget(s));
        CHECK(stats.peak_device_bytes > 0 && stats.step_s >= 0);
    }
    int compared = 0;
    for (int i = 0; i < delta_ctx_n_tensors(c1); i++) {
        delta_tensor *t1 = delta_ctx_tensor(c1, i), *t2 = delta_ctx_tensor(c2, i);
        delta_tensor_kind k = delta_tensor_kind_of(t1);
        if (k != DELTA_KIND_PARAM && k != DELTA_KIND_STATE) continue;
        size_t n = delta_tensor_bytes(t1);
        void *got = malloc(n);
        CHECK(delta_session_read(s, t2, got, n) == DELTA_OK);
        CHECK(memcmp(got, delta_exec_data(ex, t1), n) == 0,
              "%s differs from the executor's", delta_tensor_name(t1));
        free(got);
        compared++;
    }
    CHECK(compared > 10);
out:
    delta_session_free(s);
    delta_backend_free(b);
    delta_exec_free(ex);
    delta_ctx_free(c1);
    delta_ctx_free(c2);
}

static void test_keep_matches_executor(void) {
    check_same_bits(1, 0);
    check_same_bits(0, 0);
}

/* dtr at shrinking budgets: bit-identical to the executor and never above
 * the budget, or a clear refusal (recompute-only: parameters, gradients and
 * optimizer state must fit, and fragmentation can stop it). */
static void test_dtr_exact(void) {
    const int pct[] = {100, 70, 50, 35};
    delta_ctx *c = build(2);
    char err[256];
    delta_dry_plan dp;
    delta_dry_plan_build(c, &dp, err, sizeof err);
    delta_ctx_free(c);
    int ran = 0;
    for (int i = 0; i < 4; i++) {
        size_t budget = dp.peak_bytes / 100 * (size_t)pct[i];
        bool inf = false;
        check_same_bits_policy(2, budget, "dtr", &inf);
        printf("  dtr gpt at %d%% of %zu bytes: %s\n", pct[i], dp.peak_bytes,
               inf ? "infeasible" : "bit-identical, within the budget");
        ran += !inf;
    }
    CHECK(ran >= 2, "dtr ran at %d budgets", ran);
}

static void test_budgets(void) {
    delta_ctx *c = build(0);
    char err[512];
    delta_backend *b = delta_backend_cpu_new(&(delta_cpu_backend_opts){.link_gbps = 0, .link_latency_s = 0},
                                             err, sizeof err);
    delta_dry_plan dp;
    CHECK(delta_dry_plan_build(c, &dp, err, sizeof err) == DELTA_OK);
    delta_status st;
    delta_session_opts so = {.backend = b, .budget_bytes = dp.min_budget_bytes - 256};
    CHECK(delta_session_new(c, &so, &st, err, sizeof err) == NULL);
    CHECK(st == DELTA_ERR_BUDGET && strstr(err, "below the minimum") &&
          strstr(err, dp.min_budget_op_type), "%s", err);
    so.budget_bytes = dp.min_budget_bytes;
    CHECK(delta_session_new(c, &so, &st, err, sizeof err) == NULL);
    CHECK(st == DELTA_ERR_BUDGET && strstr(err, "keep"), "%s", err);
    so.budget_bytes = 0;
    so.policy = "nope";
    CHECK(delta_session_new(c, &so, &st, err, sizeof err) == NULL);
    CHECK(st == DELTA_ERR_UNSUPPORTED);
    delta_backend_free(b);
    delta_ctx_free(c);
    /* the unlimited arena is exactly enough: the same size as a budget
     * trains to the same bits */
    c = build(0);
    b = delta_backend_cpu_new(&(delta_cpu_backend_opts){.link_gbps = 0, .link_latency_s = 0}, err, sizeof err);
    delta_session_opts su = {.backend = b};
    delta_session *s = delta_session_new(c, &su, &st, err, sizeof err);
    CHECK(s != NULL, "%s", err);
    size_t need = s ? delta_session_budget(s) : 0;
    delta_session_free(s);
    /* keep needs exactly the dry plan's peak: --budget 100% always fits */
    CHECK(need == dp.peak_bytes, "arena %zu vs dry peak %zu", need,
          dp.peak_bytes);
    check_same_bits(0, need);
    delta_backend_free(b);
    delta_ctx_free(c);
}

/* keep with outputs the caller reads after a run (logits for accuracy)
 * needs exactly what the dry plan with those outputs says: at that budget
 * (100%) it trains and evaluates; a byte under it is refused with
 * both figures in exact bytes (rounded they would read the same) and the
 * budget keep needs named (issue 16, defects 3 and 4). */
static void test_keep_outputs_at_100(void) {
    delta_ctx *c = delta_ctx_new();
    delta_tensor *loss = tm_convnet(c, 4, 12);
    delta_tensor *act = delta_ctx_tensor(c, delta_tensor_id(loss) - 1);
    delta_backward(c, loss);
    delta_tensor *outs[1] = {act};
    char err[512];
    delta_dry_plan dp, dp_out;
    CHECK(delta_dry_plan_build(c, &dp, err, sizeof err) == DELTA_OK);
    CHECK(delta_dry_plan_build_outputs(c, outs, 1, &dp_out, err, sizeof err) ==
          DELTA_OK);
    CHECK(dp_out.peak_bytes >= dp.peak_bytes);
    delta_backend *b = delta_backend_cpu_new(
        &(delta_cpu_backend_opts){.link_gbps = 0, .link_latency_s = 0}, err,
        sizeof err);
    delta_status st;
    delta_session_opts so = {.backend = b, .budget_bytes = dp_out.peak_bytes,
                             .outputs = outs, .n_outputs = 1};
    delta_session *s = delta_session_new(c, &so, &st, err, sizeof err);
    CHECK(s != NULL, "keep at 100%% with an output: %s", err);
    if (s) {
        CHECK(delta_session_run(s, DELTA_RUN_STEP, NULL) == DELTA_OK);
        CHECK(delta_session_run(s, DELTA_RUN_EVAL, NULL) == DELTA_OK);
        delta_session_free(s);
    }
    so.budget_bytes = dp_out.peak_bytes - 1; /* rounds alike */
    CHECK(delta_session_new(c, &so, &st, err, sizeof err) == NULL);
    char need[48];
    snprintf(need, sizeof need, "%zu B", dp_out.peak_bytes);
    CHECK(st == DELTA_ERR_BUDGET && strstr(err, "keep") &&
              strstr(err, need) && strstr(err, "or more"),
          "exact figures: %s", err);
    delta_backend_free(b);
    delta_ctx_free(c);
}

static void test_outputs_and_access(void) {
    delta_ctx *c = delta_ctx_new();
    delta_tensor *loss = tm_convnet(c, 4, 12);
    delta_tensor *act = delta_ctx_tensor(c, delta_tensor_id(loss) - 1);
    delta_backward(c, loss);
    char err[512];
    delta_backend *b = delta_backend_cpu_new(&(delta_cpu_backend_opts){.link_gbps = 0, .link_latency_s = 0},
                                             err, sizeof err);
    delta_status st;
    delta_session *s = delta_session_new(c, &(delta_session_opts){.backend = b},
                                         &st, err, sizeof err);
    CHECK(s != NULL, "%s", err);
    float v = 0;
    CHECK(delta_session_run(s, DELTA_RUN_STEP, NULL) == DELTA_OK);
    CHECK(delta_session_read(s, loss, &v, 4) == DELTA_OK && v > 0, "loss %g", v);
    size_t n = delta_tensor_bytes(act);
    float *buf = malloc(n);
    CHECK(delta_session_read(s, act, buf, n) == DELTA_ERR_STATE);
    CHECK(strstr(delta_session_error(s), "outputs") != NULL);
    CHECK(delta_session_read(s, loss, &v, 8) == DELTA_ERR_INVALID_ARG);
    delta_session_free(s);
    delta_tensor *outs[1] = {act};
    s = delta_session_new(c, &(delta_session_opts){.backend = b, .outputs = outs,
                                                   .n_outputs = 1},
                          &st, err, sizeof err);
    CHECK(s != NULL, "%s", err);
    CHECK(delta_session_run(s, DELTA_RUN_EVAL, NULL) == DELTA_OK);
    CHECK(delta_session_read(s, act, buf, n) == DELTA_OK);
    free(buf);
    delta_session_free(s);
    delta_backend_free(b);
    delta_ctx_free(c);
}

/* ResNet-50 at batch 256 (shapes of torchvision's) simulated on an A100:
 * fast in real time, deterministic, and the simulated step is plausible. */
static void test_sim_paper_scale(void) {
    double sim_s[2] = {0, 0};
    size_t peak[2] = {0, 0};
    for (int rep = 0; rep < 2; rep++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        delta_ctx *c = delta_ctx_new();
        delta_model m;
        delta_model_config cfg = {.name = "resnet50", .batch = 256,
                                  .dropout = -1};
        CHECK(delta_model_build(c, &cfg, &m) == DELTA_OK, "%s", m.error);
        delta_backward(c, m.loss);
        delta_sgd_opts o = {0.1f, 0.9f, 1e-4f, false};
        delta_optimizer_sgd(c, o);
        char err[512];
        delta_backend *b = delta_backend_sim_new(
            &(delta_sim_backend_opts){.gpu = "a100-80g"}, err, sizeof err);
        delta_status st;
        delta_session *s = delta_session_new(
            c, &(delta_session_opts){.backend = b}, &st, err, sizeof err);
        CHECK(s != NULL, "%s", err);
        delta_step_stats ss;
        for (int k = 0; s && k < 2; k++) delta_session_run(s, DELTA_RUN_STEP, &ss);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double real = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
        sim_s[rep] = ss.step_s;
        peak[rep] = ss.peak_device_bytes;
        if (rep == 0)
            printf("  resnet50 b256 on sim a100-80g: %.3f s/step simulated, peak "
                   "%.1f GiB, %.1f ms real to build, plan and run two steps\n",
                   ss.step_s, ss.peak_device_bytes / 1073741824.0, real * 1e3);
        delta_session_free(s);
        delta_backend_free(b);
        delta_ctx_free(c);
    }
    CHECK(sim_s[0] == sim_s[1] && peak[0] == peak[1], "sim is deterministic");
    /* 256 x 3 x ~4.1 GFLOP = ~3.2 TFLOP: between 0.1 s and 2 s at fp32 */
    CHECK(sim_s[0] > 0.1 && sim_s[0] < 2.0, "%g", sim_s[0]);
    CHECK(peak[0] > (size_t)20 << 30, "resnet50 b256 keeps > 20 GiB");
}

int main(void) {
    TEST_RUN(test_keep_matches_executor);
    TEST_RUN(test_budgets);
    TEST_RUN(test_dtr_exact);
    TEST_RUN(test_outputs_and_access);
    TEST_RUN(test_keep_outputs_at_100);
    TEST_RUN(test_sim_paper_scale);
    TEST_MAIN_END();
}
