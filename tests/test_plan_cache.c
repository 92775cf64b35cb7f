/* The plan cache and program keys (src/runtime/plan_cache.c):
 *  - the same program built twice has the same key; another batch, another
 *    sequence length, another optimizer setting give other keys;
 *  - put/get round trip, overwrite, keys kept apart by policy, a NULL
 *    cache, a zero-byte blob;
 *  - the managed runtime hands policies the session's cache and the
 *    program's key;
 *  - what shape switching relies on: programs of one model at different
 *    shapes have the same op count, the same dropout op ids and the same
 *    persistent tensors (names, kinds, shapes) in the same order, except
 *    the position constant; and a run handed from one session to another
 *    (parameters and state read out and written back, the step counter
 *    set) trains bit-identically to one session, whatever the second
 *    session's policy and budget, while forgetting the step counter
 *    would not. */
#include "delta/delta.h"
#include "graph/graph_impl.h"
#include "runtime/managed.h"
#include "runtime/plan_cache.h"
#include "test.h"

typedef struct built {
    delta_ctx *ctx;
    delta_model m;
} built;

static built build(const char *name, int64_t batch, int64_t seq_len,
                   float lr) {
    built b = {delta_ctx_new(), {0}};
    delta_model_config cfg = {.name = name, .batch = batch,
                              .seq_len = seq_len,
                              .dropout = DELTA_MODEL_DROPOUT_DEFAULT};
    if (!seq_len) cfg.dropout = 0;
    delta_ctx_set_seed(b.ctx, 7);
    CHECK(delta_model_build(b.ctx, &cfg, &b.m) == DELTA_OK, "%s: %s", name,
          b.m.error);
    CHECK(delta_backward(b.ctx, b.m.loss) == DELTA_OK);
    CHECK(delta_optimizer_adamw(b.ctx, (delta_adamw_opts){.lr = lr,
                                                          .beta1 = 0.9f,
                                                          .beta2 = 0.999f,
                                                          .eps = 1e-8f}) ==
          DELTA_OK);
    return b;
}

static void test_program_key(void) {
    built a = build("gpt2-tiny", 2, 16, 1e-3f), b = build("gpt2-tiny", 2, 16,
                                                          1e-3f);
    built c = build("gpt2-tiny", 3, 16, 1e-3f), d = build("gpt2-tiny", 2, 17,
                                                          1e-3f);
    built e = build("gpt2-tiny", 2, 16, 2e-3f);
    built f = build("mlp", 4, 0, 1e-3f), g = build("mlp", 5, 0, 1e-3f);
    uint64_t ka = delta_program_key(a.ctx), kb = delta_program_key(b.ctx);
    CHECK(ka == kb, "the same program: %016llx vs %016llx",
          (unsigned long long)ka, (unsigned long long)kb);
    CHECK(ka != delta_program_key(c.ctx), "another batch, the same key");
    CHECK(ka != delta_program_key(d.ctx), "another sequence length, the "
          "same key");
    CHECK(ka != delta_program_key(e.ctx), "another learning rate (an "
          "attribute), the same key");
    CHECK(delta_program_key(f.ctx) != delta_program_key(g.ctx),
          "mlp batch 4 and 5 share a key");
    CHECK(delta_program_key(f.ctx) == delta_program_key(f.ctx),
          "not a pure function");
    built *all[] = {&a, &b, &c, &d, &e, &f, &g};
    for (int i = 0; i < 7; i++) delta_ctx_free(all[i]->ctx);
    /* every shape a --seq-len-range 16:48 run at batches 1..4 could see:
     * no two share a key */
    enum { NK = 33 * 4 };
    static uint64_t keys[NK];
    int n = 0;
    for (int64_t bt = 1; bt <= 4; bt++)
        for (int64_t T = 16; T <= 48; T++) {
            built x = build("gpt2-tiny", bt, T, 1e-3f);
            keys[n++] = delta_program_key(x.ctx);
            delta_ctx_free(x.ctx);
        }
    int clashes = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) clashes += keys[i] == keys[j];
    CHECK(clashes == 0, "%d clashes among %d shapes", clashes, n);
}

/* Data parallel: the collectives' attributes (ranks, rank, owners) are in
 * the key, so two ranks' programs, or ZeRO-1's against plain, never share
 * a plan. */
static uint64_t dp_key(int ranks, int rank, int zero) {
    delta_ctx *c = delta_ctx_new();
    int64_t xs[2] = {8, 16}, ws[2] = {4, 16}, ns[1] = {8};
    delta_tensor *x = delta_input(c, "x", DELTA_F32, 2, xs);
    delta_tensor *y = delta_input(c, "y", DELTA_I32, 1, ns);
    delta_tensor *w = delta_param(c, "w", 2, ws,
                                  (delta_init){DELTA_INIT_NORMAL, 0, 0.1f});
    delta_tensor *w2 = delta_param(c, "w2", 2, (int64_t[]){4, 4},
                                   (delta_init){DELTA_INIT_NORMAL, 0, 0.1f});
    delta_tensor *h = delta_linear(c, x, w, NULL);
    delta_backward(c, delta_cross_entropy(c, delta_linear(c, h, w2, NULL), y,
                                          -100));
    delta_data_parallel(c, &(delta_dp_opts){.ranks = ranks, .rank = rank,
                                            .zero = zero});
    delta_optimizer_sgd(c, (delta_sgd_opts){.lr = 0.1f});
    CHECK(delta_ctx_status(c) == DELTA_OK, "%s", delta_ctx_error(c));
    uint64_t k = delta_program_key(c);
    delta_ctx_free(c);
    return k;
}

static void test_program_key_data_parallel(void) {
    CHECK(dp_key(2, 0, 0) == dp_key(2, 0, 0), "the same key twice");
    CHECK(dp_key(2, 0, 0) != dp_key(2, 1, 0), "another rank");
    CHECK(dp_key(2, 0, 0) != dp_key(4, 0, 0), "another rank count");
    CHECK(dp_key(2, 0, 0) != dp_key(2, 0, 1), "ZeRO-1");
}

/* A schedule and clipping: the lr tensor's program is one key whatever is
 * written into it (its value is data), another than the attribute's;
 * another clipping limit is another key; and every attribute the two
 * add (lr_in, coef_in, has_acc) is hashed. */
static uint64_t sched_key(bool lr_tensor, float clip, int flip) {
    delta_ctx *c = delta_ctx_new();
    delta_model m;
    delta_model_config cfg = {.name = "mlp", .batch = 4};
    delta_model_build(c, &cfg, &m);
    delta_backward(c, m.loss);
    delta_optim_extras x = {NULL, clip};
    if (lr_tensor) x.lr_tensor = delta_input(c, "lr", DELTA_F32, 0, NULL);
    delta_optimizer_adamw_with(c, (delta_adamw_opts){.lr = 1e-3f,
                                                     .beta1 = 0.9f,
                                                     .beta2 = 0.999f,
                                                     .eps = 1e-8f}, &x);
    CHECK(delta_ctx_status(c) == DELTA_OK, "%s", delta_ctx_error(c));
    for (int i = 0; flip && i < c->n_ops; i++) {
        delta_op *op = &c->ops[i];
        if (flip == 1 && op->type == DELTA_OP_ADAMW_UPDATE) op->a.lr_in ^= 7;
        if (flip == 2 && op->type == DELTA_OP_ADAMW_UPDATE) op->a.coef_in ^= 7;
        if (flip == 3 && op->type == DELTA_OP_GRAD_SUMSQ) op->a.has_acc ^= 1;
    }
    uint64_t k = delta_program_key(c);
    delta_ctx_free(c);
    return k;
}

static void test_program_key_schedule(void) {
    uint64_t t = sched_key(true, 1.0f, 0);
    CHECK(t == sched_key(true, 1.0f, 0), "the same key twice");
    CHECK(t != sched_key(false, 1.0f, 0), "the lr tensor and the attribute");
    CHECK(t != sched_key(true, 0.5f, 0), "another clipping limit");
    CHECK(t != sched_key(true, 0, 0), "clipping and none");
    for (int f = 1; f <= 3; f++)
        CHECK(t != sched_key(true, 1.0f, f), "attribute %d is not hashed", f);
}

static void test_put_get(void) {
    delta_plan_cache *c = delta_plan_cache_new();
    CHECK(c != NULL);
    size_t n = 99;
    CHECK(plan_cache_get(c, "dtr", 1, &n) == NULL && n == 0, "empty cache");
    int blob[4] = {1, 2, 3, 4};
    CHECK(plan_cache_put(c, "dtr", 1, blob, sizeof blob));
    blob[0] = 42; /* the cache holds a copy */
    const int *got = plan_cache_get(c, "dtr", 1, &n);
    CHECK(got && n == sizeof blob && got[0] == 1 && got[3] == 4,
          "round trip");
    CHECK(plan_cache_get(c, "swap", 1, NULL) == NULL, "policies share keys");
    CHECK(plan_cache_get(c, "dtr", 2, NULL) == NULL, "another key found");
    /* overwrite: a new size and contents under the same key */
    double other[3] = {0.5, 1.5, 2.5};
    CHECK(plan_cache_put(c, "dtr", 1, other, sizeof other));
    const double *g2 = plan_cache_get(c, "dtr", 1, &n);
    CHECK(g2 && n == sizeof other && g2[2] == 2.5, "overwrite");
    CHECK(plan_cache_count(c) == 1, "%d entries after an overwrite",
          plan_cache_count(c));
    CHECK(plan_cache_put(c, "swap", 1, blob, sizeof blob));
    CHECK(plan_cache_put(c, "dtr", 2, NULL, 0), "a zero-byte blob");
    CHECK(plan_cache_get(c, "dtr", 2, &n) != NULL && n == 0,
          "a zero-byte blob is found");
    for (uint64_t k = 10; k < 40; k++)  /* growth */
        CHECK(plan_cache_put(c, "dtr", k, &k, sizeof k));
    const uint64_t *g3 = plan_cache_get(c, "dtr", 33, &n);
    CHECK(g3 && *g3 == 33 && n == sizeof *g3);
    CHECK(plan_cache_count(c) == 33, "%d entries", plan_cache_count(c));
    CHECK(!plan_cache_put(NULL, "dtr", 1, blob, sizeof blob));
    CHECK(!plan_cache_put(c, NULL, 1, blob, sizeof blob));
    CHECK(plan_cache_get(NULL, "dtr", 1, &n) == NULL && n == 0);
    delta_plan_cache_free(c);
    delta_plan_cache_free(NULL);
}

/* A policy that stores its program key in the cache on creation. */
static uint64_t seen_key;
static delta_plan_cache *seen_cache;
static void *p_create(managed *m) {
    seen_key = managed_program_key(m);
    seen_cache = managed_plan_cache(m);
    if (seen_cache) plan_cache_put(seen_cache, "probe", seen_key, "plan", 4);
    return &seen_key;
}
static void p_destroy(void *p) { (void)p; }
static const policy_ops probe = {.name = "probe", .create = p_create,
                                 .destroy = p_destroy};

static void test_managed_views(void) {
    built a = build("gpt2-tiny", 2, 16, 1e-3f);
    char err[256] = "";
    delta_backend *b = delta_backend_cpu_new(&(delta_cpu_backend_opts){.link_gbps = 0, .link_latency_s = 0}, err,
                                             sizeof err);
    CHECK(b, "%s", err);
    if (!b) return;
    delta_dry_plan dp;
    CHECK(delta_dry_plan_build(a.ctx, &dp, NULL, 0) == DELTA_OK);
    delta_plan_cache *c = delta_plan_cache_new();
    managed_opts mo = {.budget = dp.peak_bytes, .policy = "probe",
                       .custom = &probe, .plans = c};
    delta_status st;
    managed *m = managed_new(a.ctx, b, &mo, &st, err, sizeof err);
    CHECK(m, "%s", err);
    CHECK(seen_key == delta_program_key(a.ctx) && seen_cache == c,
          "the runtime's views");
    size_t n = 0;
    const char *blob = plan_cache_get(c, "probe", seen_key, &n);
    CHECK(blob && n == 4 && !memcmp(blob, "plan", 4));
    managed_free(m);
    mo.plans = NULL;
    m = managed_new(a.ctx, b, &mo, &st, err, sizeof err);
    CHECK(m && seen_cache == NULL, "no cache given: NULL");
    managed_free(m);
    delta_plan_cache_free(c);
    /* sessions keep their dry plan in the cache: one entry per program,
     * found again by the next session of the same program */
    c = delta_plan_cache_new();
    built d = build("gpt2-tiny", 2, 24, 1e-3f);
    const char *pols[] = {"keep", "dtr", "keep"};
    delta_ctx *ctxs[] = {a.ctx, a.ctx, d.ctx};
    const int want[] = {1, 1, 2};
    for (int i = 0; i < 3; i++) {
        delta_session_opts so = {.backend = b, .policy = pols[i], .plans = c};
        delta_session *s = delta_session_new(ctxs[i], &so, &st, err,
                                             sizeof err);
        CHECK(s, "%s", err);
        CHECK(plan_cache_count(c) == want[i], "session %d: %d entries", i,
              plan_cache_count(c));
        delta_session_free(s);
    }
    delta_plan_cache_free(c);
    delta_ctx_free(d.ctx);
    delta_backend_free(b);
    delta_ctx_free(a.ctx);
}

/* Persistent tensors of a program in id order: PARAM, STATE and CONST. */
static int persistent(const delta_ctx *c, const delta_tensor **out, int cap) {
    int n = 0;
    for (int i = 0; i < delta_ctx_n_tensors(c); i++) {
        const delta_tensor *t = delta_ctx_tensor(c, i);
        delta_tensor_kind k = delta_tensor_kind_of(t);
        if (k != DELTA_KIND_PARAM && k != DELTA_KIND_STATE &&
            k != DELTA_KIND_CONST)
            continue;
        if (n < cap) out[n] = t;
        n++;
    }
    return n;
}

static void same_layout(const char *name, int64_t b1, int64_t t1, int64_t b2,
                        int64_t t2) {
    built x = build(name, b1, t1, 1e-3f), y = build(name, b2, t2, 1e-3f);
    const delta_ctx *cx = x.ctx, *cy = y.ctx;
    CHECK(delta_ctx_n_ops(cx) == delta_ctx_n_ops(cy), "%s: %d vs %d ops",
          name, delta_ctx_n_ops(cx), delta_ctx_n_ops(cy));
    /* op i is the same op at both shapes: dropout masks, keyed by (seed,
     * op id, step, element), follow the op */
    int diff = 0;
    for (int i = 0; i < delta_ctx_n_ops(cx) && i < delta_ctx_n_ops(cy); i++)
        diff += cx->ops[i].type != cy->ops[i].type ||
                cx->ops[i].a.fwd_op != cy->ops[i].a.fwd_op;
    CHECK(diff == 0, "%s: %d ops differ in type or RNG key", name, diff);
    static const delta_tensor *px[4096], *py[4096];
    int nx = persistent(cx, px, 4096), ny = persistent(cy, py, 4096);
    CHECK(nx == ny && nx <= 4096, "%s: %d vs %d persistent tensors", name,
          nx, ny);
    for (int i = 0; i < nx && i < ny && i < 4096; i++) {
        const delta_tensor *a = px[i], *b = py[i];
        CHECK(!strcmp(delta_tensor_name(a), delta_tensor_name(b)) &&
                  delta_tensor_kind_of(a) == delta_tensor_kind_of(b),
              "%s: tensor %d is '%s' and '%s'", name, i,
              delta_tensor_name(a), delta_tensor_name(b));
        /* only the positions constant (T) depends on the shape */
        if (!strcmp(delta_tensor_name(a), "positions")) continue;
        CHECK(delta_tensor_bytes(a) == delta_tensor_bytes(b),
              "%s: '%s' has %zu and %zu bytes", name, delta_tensor_name(a),
              delta_tensor_bytes(a), delta_tensor_bytes(b));
    }
    delta_ctx_free(x.ctx);
    delta_ctx_free(y.ctx);
}

static void test_names_stable_across_shapes(void) {
    same_layout("gpt2-tiny", 2, 16, 2, 48);
    same_layout("gpt2-tiny", 4, 32, 3, 20);
    same_layout("bert-tiny", 2, 16, 1, 40);
    same_layout("mlp", 8, 0, 3, 0);
    same_layout("resnet18", 4, 0, 3, 0);
}

/* ---- handing a run from one session to the next --------------------- */

typedef struct host_consts {
    const delta_tensor *t[4];
    void *p[4];
    int n;
} host_consts;

static void *hc_data(void *ud, const delta_tensor *t) {
    host_consts *h = ud;
    h->t[h->n] = t;
    h->p[h->n] = calloc(1, delta_tensor_bytes(t));
    return h->p[h->n++];
}

static delta_session *open_s(built *b, delta_backend *be, const char *policy,
                             size_t budget) {
    char err[256] = "";
    delta_status st;
    delta_session_opts o = {.backend = be, .budget_bytes = budget,
                            .policy = policy};
    delta_session *s = delta_session_new(b->ctx, &o, &st, err, sizeof err);
    CHECK(s, "%s: %s", policy, err);
    if (!s) return NULL;
    host_consts h = {0};
    delta_model_fill_constants(&b->m, hc_data, &h);
    for (int i = 0; i < h.n; i++) {
        CHECK(delta_session_write(s, h.t[i], h.p[i],
                                  delta_tensor_bytes(h.t[i])) == DELTA_OK);
        free(h.p[i]);
    }
    return s;
}

/* Runs steps [from, to) with tokens drawn from the step number. */
static void run_steps(built *b, delta_session *s, int from, int to) {
    size_t n = (size_t)delta_tensor_numel(b->m.input);
    int32_t *x = malloc(n * 4), *y = malloc(n * 4);
    for (int step = from; step < to; step++) {
        for (size_t i = 0; i < n; i++) {
            x[i] = (int32_t)((i * 7 + (size_t)step * 13) % 256);
            y[i] = (int32_t)((i * 11 + (size_t)step * 5) % 256);
        }
        CHECK(delta_session_write(s, b->m.input, x, n * 4) == DELTA_OK);
        CHECK(delta_session_write(s, b->m.target, y, n * 4) == DELTA_OK);
        CHECK(delta_session_run(s, DELTA_RUN_STEP, NULL) == DELTA_OK, "%s",
              delta_session_error(s));
    }
    free(x);
    free(y);
}

/* Every PARAM and STATE tensor of b, read out of s, concatenated. */
static uint8_t *read_all(built *b, delta_session *s, size_t *bytes) {
    size_t total = 0;
    for (int i = 0; i < delta_ctx_n_tensors(b->ctx); i++) {
        const delta_tensor *t = delta_ctx_tensor(b->ctx, i);
        delta_tensor_kind k = delta_tensor_kind_of(t);
        if (k == DELTA_KIND_PARAM || k == DELTA_KIND_STATE)
            total += delta_tensor_bytes(t);
    }
    uint8_t *buf = malloc(total ? total : 1), *p = buf;
    for (int i = 0; i < delta_ctx_n_tensors(b->ctx); i++) {
        const delta_tensor *t = delta_ctx_tensor(b->ctx, i);
        delta_tensor_kind k = delta_tensor_kind_of(t);
        if (k != DELTA_KIND_PARAM && k != DELTA_KIND_STATE) continue;
        CHECK(delta_session_read(s, t, p, delta_tensor_bytes(t)) == DELTA_OK);
        p += delta_tensor_bytes(t);
    }
    *bytes = total;
    return buf;
}

static void write_all(built *b, delta_session *s, const uint8_t *p) {
    for (int i = 0; i < delta_ctx_n_tensors(b->ctx); i++) {
        const delta_tensor *t = delta_ctx_tensor(b->ctx, i);
        delta_tensor_kind k = delta_tensor_kind_of(t);
        if (k != DELTA_KIND_PARAM && k != DELTA_KIND_STATE) continue;
        CHECK(delta_session_write(s, t, p, delta_tensor_bytes(t)) ==
              DELTA_OK);
        p += delta_tensor_bytes(t);
    }
}

static void test_session_handover(void) {
    built b = build("gpt2-tiny", 2, 16, 1e-2f);
    char err[256] = "";
    delta_backend *be = delta_backend_cpu_new(
        &(delta_cpu_backend_opts){.link_gbps = 0, .link_latency_s = 0}, err, sizeof err);
    CHECK(be, "%s", err);
    delta_dry_plan dp;
    CHECK(delta_dry_plan_build(b.ctx, &dp, NULL, 0) == DELTA_OK);
    if (!be) return;
    /* one session, six steps */
    size_t n_ref = 0, n = 0;
    delta_session *s = open_s(&b, be, "keep", 0);
    if (!s) return;
    run_steps(&b, s, 0, 6);
    uint8_t *ref = read_all(&b, s, &n_ref);
    delta_session_free(s);
    /* three steps, handed over to autoswap at 70% (or keep), three more */
    const char *pols[] = {"autoswap", "keep"};
    for (int k = 0; k < 2; k++) {
        for (int set_step = 1; set_step >= 0; set_step--) {
            s = open_s(&b, be, "keep", 0);
            run_steps(&b, s, 0, 3);
            uint8_t *mid = read_all(&b, s, &n);
            int64_t step = delta_session_step(s);
            delta_session_free(s);
            size_t budget = k == 0 ? dp.peak_bytes * 7 / 10 : 0;
            s = open_s(&b, be, pols[k], budget);
            if (!s) break;
            if (set_step) delta_session_set_step(s, step);
            write_all(&b, s, mid);
            run_steps(&b, s, 3, 6);
            uint8_t *got = read_all(&b, s, &n);
            bool same = n == n_ref && !memcmp(got, ref, n);
            if (set_step)
                CHECK(same, "handed to %s: not bit-identical", pols[k]);
            else
                CHECK(!same, "handed to %s without the step counter: "
                      "identical (the test would not see a lost step)",
                      pols[k]);
            free(mid);
            free(got);
            delta_session_free(s);
        }
    }
    free(ref);
    delta_backend_free(be);
    delta_ctx_free(b.ctx);
}

int main(void) {
    TEST_RUN(test_program_key);
    TEST_RUN(test_program_key_data_parallel);
    TEST_RUN(test_program_key_schedule);
    TEST_RUN(test_put_get);
    TEST_RUN(test_managed_views);
    TEST_RUN(test_names_stable_across_shapes);
    TEST_RUN(test_session_handover);
    TEST_MAIN_END();
}
