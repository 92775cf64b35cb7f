/* Training tiny models inside a budget on any backend, shared by the
 * policy tests (test_policies.c: the cpu backend) and the CUDA tests
 * (test_cuda.c): four tiny configurations (mlp, resnet, gpt2 and bert, the
 * transformers with dropout), a session per run, N_STEPS steps on
 * deterministic inputs, and every parameter and state byte read back, so
 * that two runs can be compared byte for byte. */
#ifndef DELTA_TEST_POLICY_TRAIN_H
#define DELTA_TEST_POLICY_TRAIN_H

#include "delta/delta.h"
#include "delta/exec.h"
#include "test.h"

#ifndef N_STEPS
#define N_STEPS 3
#endif
/* steps train() runs; a test may shorten it to find where runs part */
static int train_steps = N_STEPS;

typedef struct model_case {
    const char *label;
    delta_model_config cfg;
    bool adamw;
} model_case;

static const model_case models[] = {
    {"mlp", {.name = "mlp", .batch = 512, .image_size = 8, .channels = 1,
             .classes = 10, .mlp_hidden = 256}, false},
    {"resnet", {.name = "resnet18", .batch = 96, .image_size = 28,
                .channels = 1, .classes = 10, .width = 8}, false},
    {"gpt2", {.name = "gpt2-tiny", .batch = 4, .layers = 2, .hidden = 32,
              .heads = 2, .seq_len = 64, .vocab = 64, .positions = 64,
              .dropout = 0.1f}, true},
    {"bert", {.name = "bert-tiny", .batch = 4, .layers = 2, .hidden = 32,
              .heads = 2, .seq_len = 32, .vocab = 64, .dropout = 0.1f}, true},
};
#define N_MODELS ((int)(sizeof models / sizeof models[0]))

typedef struct built {
    delta_ctx *ctx;
    delta_model model;
} built;

/* Data parallel (test_dp.c; test_cuda.c with one rank through NCCL): with
 * train_comm set, build() makes rank train_dp.rank's program of
 * train_dp.ranks, train() runs it over train_comm, and each rank is fed
 * its share of every global batch (what one rank with ranks x the batch
 * would be fed, cut by rank). train_comm NULL: neither. */
static delta_dp_opts train_dp = {.ranks = 1};
static delta_comm *train_comm;
/* > 0: build() clips the gradients to this global norm and train() keeps
 * each step's norm in train_norms (the first 8; test_dp.c). */
static float train_clip;
static float train_norms[8];

static inline bool build(const model_case *mc, built *b) {
    b->ctx = delta_ctx_new();
    delta_ctx_set_seed(b->ctx, 5);
    if (delta_model_build(b->ctx, &mc->cfg, &b->model) != DELTA_OK) {
        fprintf(stderr, "  build %s: %s\n", mc->label, b->model.error);
        return false;
    }
    delta_backward(b->ctx, b->model.loss);
    if (train_comm) delta_data_parallel(b->ctx, &train_dp);
    delta_optim_extras x = {NULL, train_clip};
    if (mc->adamw) {
        delta_adamw_opts o = {1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f};
        delta_optimizer_adamw_with(b->ctx, o, &x);
    } else {
        delta_sgd_opts o = {0.05f, 0.9f, 0, false};
        delta_optimizer_sgd_with(b->ctx, o, &x);
    }
    return delta_ctx_status(b->ctx) == DELTA_OK;
}

/* constants through host buffers, then into the session */
typedef struct cbuf {
    const delta_tensor *t[4];
    void *d[4];
    int n;
} cbuf;
static inline void *cbuf_of(void *ud, const delta_tensor *t) {
    cbuf *cb = ud;
    cb->t[cb->n] = t;
    cb->d[cb->n] = calloc(1, delta_tensor_bytes(t));
    return cb->d[cb->n++];
}

/* The inputs of a step: deterministic per (step, tensor), through put;
 * with data parallel the rank's rows of the global batch's values. */
typedef void (*put_fn)(void *ud, const delta_tensor *t, const void *data,
                       size_t bytes);
static inline void feed_values(const built *b, int step, put_fn put, void *ud) {
    for (int i = 0; i < delta_ctx_n_tensors(b->ctx); i++) {
        delta_tensor *t = delta_ctx_tensor(b->ctx, i);
        if (delta_tensor_kind_of(t) != DELTA_KIND_INPUT) continue;
        int64_t n = delta_tensor_numel(t) * train_dp.ranks;
        char *buf = malloc(delta_tensor_bytes(t) * (size_t)train_dp.ranks);
        test_rng_seed((uint64_t)(step * 977 + i + 1));
        if (delta_tensor_dtype(t) == DELTA_I32) {
            int mod = b->model.task == DELTA_TASK_CLASSIFY ? 10 : 64;
            for (int64_t j = 0; j < n; j++)
                ((int *)buf)[j] = (int)(test_rng_u32() % (uint32_t)mod);
        } else {
            test_fill_rand((float *)buf, n, -1, 1);
        }
        put(ud, t, buf + delta_tensor_bytes(t) * (size_t)train_dp.rank,
            delta_tensor_bytes(t));
        free(buf);
    }
}

static inline void session_put(void *ud, const delta_tensor *t,
                               const void *data, size_t bytes) {
    delta_session_write(ud, t, data, bytes);
}

static inline void exec_put(void *ud, const delta_tensor *t, const void *data,
                            size_t bytes) {
    delta_exec_set(ud, t, data, bytes);
}

static inline void feed(delta_session *s, const built *b, int step) {
    feed_values(b, step, session_put, s);
}

typedef enum outcome { RAN, REFUSED, FAILED_RUN } outcome;

/* What a run hands back to be compared: every PARAM and STATE tensor (the
 * trained values and the optimizer's and batch norm's state), in id order. */
static inline bool trained_state(const delta_tensor *t) {
    delta_tensor_kind k = delta_tensor_kind_of(t);
    return k == DELTA_KIND_PARAM || k == DELTA_KIND_STATE;
}

static inline size_t trained_state_bytes(delta_ctx *c) {
    size_t n = 0;
    for (int i = 0; i < delta_ctx_n_tensors(c); i++)
        if (trained_state(delta_ctx_tensor(c, i)))
            n += delta_tensor_bytes(delta_ctx_tensor(c, i));
    return n;
}

/* Trains train_steps steps; on RAN fills *out with every PARAM and STATE tensor's
 * bytes, concatenated, and *peak with the highest high-water mark. */
static inline outcome train(const model_case *mc, delta_backend *be,
                     const char *policy, size_t budget, char **out,
                     size_t *out_n, size_t *peak, delta_step_stats *sum,
                     char *why, size_t why_n) {
    built b;
    CHECK(build(mc, &b), "%s builds", mc->label);
    delta_tensor *norm = delta_ctx_find(b.ctx, "grad_norm");
    delta_session_opts so = {.backend = be, .budget_bytes = budget,
                             .policy = policy, .comm = train_comm,
                             .outputs = &norm, .n_outputs = norm ? 1 : 0};
    delta_status st;
    delta_session *s = delta_session_new(b.ctx, &so, &st, why, why_n);
    /* data parallel: a rank that refused must not leave the others waiting
     * in the first step's collectives */
    double refused = s == NULL;
    if (train_comm) delta_comm_max(train_comm, &refused, 1, "the sessions");
    if (refused && s) {
        delta_session_free(s);
        s = NULL;
        st = DELTA_ERR_BUDGET;
        snprintf(why, why_n, "another rank refused the budget");
    }
    if (!s) {
        delta_ctx_free(b.ctx);
        CHECK(st == DELTA_ERR_BUDGET, "refusal is a budget error: %s", why);
        CHECK(why[0] != 0, "refusal has a message");
        return REFUSED;
    }
    cbuf cb = {0};
    delta_model_fill_constants(&b.model, cbuf_of, &cb);
    for (int i = 0; i < cb.n; i++) {
        delta_session_write(s, cb.t[i], cb.d[i], delta_tensor_bytes(cb.t[i]));
        free(cb.d[i]);
    }
    *peak = 0;
    memset(sum, 0, sizeof *sum);
    outcome oc = RAN;
    for (int step = 0; step < train_steps && oc == RAN; step++) {
        feed(s, &b, step);
        delta_step_stats ss;
        st = delta_session_run(s, DELTA_RUN_STEP, &ss);
        if (st != DELTA_OK) {
            snprintf(why, why_n, "%s", delta_session_error(s));
            CHECK(st == DELTA_ERR_BUDGET, "a failed run is a budget error: %s",
                  why);
            CHECK(why[0] != 0, "a failed run has a message");
            oc = FAILED_RUN;
            break;
        }
        if (norm && step < 8)
            delta_session_read(s, norm, &train_norms[step], sizeof(float));
        if (ss.peak_device_bytes > *peak) *peak = ss.peak_device_bytes;
        CHECK(ss.peak_device_bytes <= delta_session_budget(s),
              "%s %s step %d: high-water %zu above the budget %zu", mc->label,
              policy ? policy : "keep", step, ss.peak_device_bytes,
              delta_session_budget(s));
        CHECK(!budget || delta_session_budget(s) <= budget,
              "arena %zu above the budget %zu", delta_session_budget(s), budget);
        sum->swap_out_bytes += ss.swap_out_bytes;
        sum->swap_in_bytes += ss.swap_in_bytes;
        sum->recomputed_ops += ss.recomputed_ops;
        sum->drops += ss.drops;
        sum->defrag_moves += ss.defrag_moves;
        sum->stall_s += ss.stall_s;
        sum->baseline_peak_bytes = ss.baseline_peak_bytes;
        sum->min_budget_bytes = ss.min_budget_bytes;
    }
    if (oc == RAN) {
        size_t n = trained_state_bytes(b.ctx);
        char *buf = malloc(n), *p = buf;
        for (int i = 0; i < delta_ctx_n_tensors(b.ctx); i++) {
            delta_tensor *t = delta_ctx_tensor(b.ctx, i);
            if (!trained_state(t)) continue;
            CHECK(delta_session_read(s, t, p, delta_tensor_bytes(t)) == DELTA_OK,
                  "read %s: %s", delta_tensor_name(t), delta_session_error(s));
            p += delta_tensor_bytes(t);
        }
        *out = buf;
        *out_n = n;
    }
    delta_session_free(s);
    delta_ctx_free(b.ctx);
    return oc;
}

/* keep's peak and the minimum budget of mc's program as a session on be
 * plans it (fitted to be's kernels: cuda's convolutions may need more
 * workspace than the graph declares); be NULL: as declared. */
static inline size_t baseline_peak_on(const model_case *mc, delta_backend *be,
                                      size_t *min_budget) {
    built b;
    CHECK(build(mc, &b), "%s builds", mc->label);
    delta_backend_fit_program(be, b.ctx);
    delta_dry_plan dp;
    CHECK(delta_dry_plan_build(b.ctx, &dp, NULL, 0) == DELTA_OK, "dry plan");
    delta_ctx_free(b.ctx);
    *min_budget = dp.min_budget_bytes;
    printf("  %s: keep peak %zu B, persistent %zu, activations %zu, minimum "
           "%zu\n", mc->label, dp.peak_bytes, dp.persistent_bytes,
           dp.activation_bytes, dp.min_budget_bytes);
    return dp.peak_bytes;
}

static inline size_t baseline_peak(const model_case *mc, size_t *min_budget) {
    return baseline_peak_on(mc, NULL, min_budget);
}

#endif
