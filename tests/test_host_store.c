/* The host store's cap (delta_session_opts.host_limit_bytes), on the
 * simulator (which hands out host tokens, so sizes are real and no data
 * moves): a step under swap reports the host store it holds; a cap of
 * exactly that runs; a smaller one fails the step with DELTA_ERR_NOMEM and
 * a message saying what was needed and what is held, and the session then
 * frees cleanly (the sanitizer builds check that); a cap too small for
 * the persistent tensors that start in the host store fails the session's
 * creation the same way. test_resume covers the command line's
 * --host-memory. */
#include "delta/delta.h"
#include "test.h"

static const delta_model_config gpt2 = {
    .name = "gpt2-tiny", .batch = 4, .layers = 2, .hidden = 32, .heads = 2,
    .seq_len = 64, .vocab = 64, .positions = 64, .dropout = 0.1f};

/* Three 256-wide layers: the smallest budget holds one layer's update
 * (weight, gradient, momentum), not every layer's weight and momentum. */
static const delta_model_config mlp = {
    .name = "mlp", .batch = 4, .image_size = 16, .channels = 1,
    .classes = 10, .mlp_hidden = 256};

static delta_ctx *build_of(const delta_model_config *cfg, delta_model *m) {
    delta_ctx *ctx = delta_ctx_new();
    delta_ctx_set_seed(ctx, 3);
    CHECK(delta_model_build(ctx, cfg, m) == DELTA_OK, "%s", m->error);
    delta_backward(ctx, m->loss);
    delta_optimizer_sgd(ctx, (delta_sgd_opts){0.05f, 0.9f, 0, false});
    CHECK(delta_ctx_status(ctx) == DELTA_OK, "%s", delta_ctx_error(ctx));
    return ctx;
}

static delta_ctx *build(delta_model *m) { return build_of(&gpt2, m); }

/* Opens a session of a fresh program of cfg under policy at budget with
 * the cap; NULL with *st and why set when creation fails. */
static delta_session *open_of(const delta_model_config *cfg,
                              delta_backend *be, const char *policy,
                              size_t budget, size_t cap, delta_ctx **ctx,
                              delta_status *st, char *why, size_t why_n) {
    delta_model m;
    *ctx = build_of(cfg, &m);
    delta_session_opts so = {.backend = be, .budget_bytes = budget,
                             .policy = policy, .host_limit_bytes = cap};
    return delta_session_new(*ctx, &so, st, why, why_n);
}

static delta_session *open(delta_backend *be, const char *policy,
                           size_t budget, size_t cap, delta_ctx **ctx,
                           delta_status *st, char *why, size_t why_n) {
    return open_of(&gpt2, be, policy, budget, cap, ctx, st, why, why_n);
}

static void test_host_cap(void) {
    delta_backend *be = delta_backend_sim_new(NULL, NULL, 0);
    delta_dry_plan dp;
    delta_model m;
    delta_ctx *c0 = build(&m);
    char why[512] = "";
    CHECK(delta_dry_plan_build(c0, &dp, why, sizeof why) == DELTA_OK, "%s",
          why);
    delta_ctx_free(c0);
    size_t budget = dp.peak_bytes / 2;

    /* uncapped: what the host store holds after each step */
    delta_ctx *ctx;
    delta_status st;
    delta_session *s = open(be, "swap", budget, 0, &ctx, &st, why,
                            sizeof why);
    CHECK(s != NULL, "swap at 50%%: %s", why);
    size_t held = 0;
    for (int i = 0; s && i < 2; i++) {
        delta_step_stats ss;
        CHECK(delta_session_run(s, DELTA_RUN_STEP, &ss) == DELTA_OK, "%s",
              delta_session_error(s));
        CHECK(ss.host_bytes > 0 && (i == 0 || ss.host_bytes == held),
              "step %d: host store %zu (before: %zu)", i, ss.host_bytes,
              held);
        held = ss.host_bytes;
    }
    delta_session_free(s);
    delta_ctx_free(ctx);

    /* a cap of exactly that runs */
    s = open(be, "swap", budget, held, &ctx, &st, why, sizeof why);
    for (int i = 0; s && i < 2; i++) {
        delta_step_stats ss;
        CHECK(delta_session_run(s, DELTA_RUN_STEP, &ss) == DELTA_OK,
              "cap %zu: %s", held, delta_session_error(s));
        CHECK(ss.host_bytes <= held, "host store %zu over the cap %zu",
              ss.host_bytes, held);
    }
    delta_session_free(s);
    delta_ctx_free(ctx);

    /* half of it: the first step fails with a message, cleanly */
    s = open(be, "swap", budget, held / 2, &ctx, &st, why, sizeof why);
    CHECK(s != NULL, "%s", why);
    if (s) {
        st = delta_session_run(s, DELTA_RUN_STEP, NULL);
        const char *e = delta_session_error(s);
        CHECK(st == DELTA_ERR_NOMEM && strstr(e, "host store for swapped "
                                                 "tensors is full") &&
                  strstr(e, "needs") && strstr(e, "limit"),
              "status %s: %s", delta_status_name(st), e);
    }
    delta_session_free(s);
    delta_ctx_free(ctx);
    delta_backend_free(be);
}

/* A budget below the weights and momentum: some start in the host store,
 * so a one-byte cap refuses the session; with no cap, delta runs a step
 * there (swap cannot: it has no plan for that little room). */
static void test_host_cap_at_creation(void) {
    delta_backend *be = delta_backend_sim_new(NULL, NULL, 0);
    delta_model m;
    delta_ctx *c0 = build_of(&mlp, &m);
    delta_dry_plan dp;
    char why[512] = "";
    CHECK(delta_dry_plan_build(c0, &dp, why, sizeof why) == DELTA_OK, "%s",
          why);
    delta_ctx_free(c0);
    CHECK(dp.min_budget_bytes < dp.param_bytes + dp.state_bytes,
          "the minimum %zu holds the weights and momentum (%zu)",
          dp.min_budget_bytes, dp.param_bytes + dp.state_bytes);
    delta_ctx *ctx;
    delta_status st;
    delta_session *s = open_of(&mlp, be, "swap", dp.min_budget_bytes, 1,
                               &ctx, &st, why, sizeof why);
    CHECK(!s && st == DELTA_ERR_NOMEM && strstr(why, "host store") &&
              strstr(why, "persistent tensors"),
          "status %s: %s", delta_status_name(st), why);
    delta_session_free(s);
    delta_ctx_free(ctx);
    s = open_of(&mlp, be, "delta", dp.min_budget_bytes, 0, &ctx, &st, why,
                sizeof why);
    CHECK(s != NULL, "uncapped: %s", why);
    delta_step_stats ss = {0};
    st = s ? delta_session_run(s, DELTA_RUN_STEP, &ss) : DELTA_ERR_STATE;
    CHECK(st == DELTA_OK && ss.host_bytes > 0,
          "uncapped step: %s, host store %zu: %s", delta_status_name(st),
          ss.host_bytes, s ? delta_session_error(s) : why);
    delta_session_free(s);
    delta_ctx_free(ctx);
    delta_backend_free(be);
}

int main(void) {
    TEST_RUN(test_host_cap);
    TEST_RUN(test_host_cap_at_creation);
    TEST_MAIN_END();
}
