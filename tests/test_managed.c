/* The managed runtime's mechanics, driven by scripted policies (not the
 * peers): asynchronous swap-outs of every kind of tensor, prefetches, waits
 * for late copies, in-place updates of tensors being swapped out, drops with
 * recursive recomputation, victims chosen under pressure, making a gap when
 * the bytes exist but no gap does. Every run must train bit-identically to
 * the simple executor and keep the arena's high-water mark in the budget;
 * the copies must show up in the trace. */
#include "delta/delta.h"
#include "runtime/managed.h"
#include "test.h"
#include "test_models.h"

#include <cjson/cJSON.h>
#include <unistd.h>

/* ---- scripted policies ---------------------------------------------------- */

typedef struct script {
    int late, resident, dropped, swapped;
} script;

static script last_script; /* counts of the last run's policy, for checks */

static void *s_create(managed *m) {
    (void)m;
    memset(&last_script, 0, sizeof last_script);
    return &last_script;
}
static void s_destroy(void *p) { (void)p; }

static void s_event(void *p, managed *m, int r, managed_event e, double w) {
    (void)m;
    (void)r;
    (void)w;
    script *s = p;
    s->late += e == MEV_LATE;
    s->resident += e == MEV_RESIDENT;
    s->dropped += e == MEV_DROPPED;
    s->swapped += e == MEV_SWAPPED_OUT;
}

/* The roots op touches. */
static int op_roots(const managed *m, int op, int *roots) {
    const delta_op *o = &managed_ctx(m)->ops[op];
    int n = 0;
    for (int j = 0; j < o->n_in + o->n_out; j++)
        roots[n++] = delta_tensor_root(managed_ctx(m),
                                       j < o->n_in ? o->in[j] : o->out[j - o->n_in]);
    return n;
}

/* After each op, everything it touched that is not needed by the next op
 * leaves: swapped out (any kind: parameters, gradients and optimizer state
 * too) or, for `drop`, dropped when it can be. */
static void leave_after(managed *m, int op, bool drop) {
    int roots[DELTA_MAX_OP_IN + DELTA_MAX_OP_OUT];
    int n = op_roots(m, op, roots);
    for (int k = 0; k < n; k++) {
        const root_view *v = managed_root(m, roots[k]);
        if (!v || v->state != RES_DEVICE || managed_pinned(m, roots[k])) continue;
        int next = managed_next_use(m, roots[k], op);
        if (next >= 0 && next <= op + 1) continue;
        if (drop && v->droppable) managed_drop(m, roots[k]);
        else if (!drop) managed_swap_out(m, roots[k]);
    }
}

/* Before op i, prefetch what op i + ahead reads. */
static void fetch_ahead(managed *m, int op, int ahead) {
    int target = op + ahead;
    if (target >= managed_ctx(m)->n_ops) return;
    int roots[DELTA_MAX_OP_IN + DELTA_MAX_OP_OUT];
    int n = op_roots(m, target, roots);
    for (int k = 0; k < n; k++) {
        const root_view *v = managed_root(m, roots[k]);
        if (v && v->state == RES_HOST) managed_prefetch(m, roots[k]);
    }
}

/* Under pressure: swap out the resident unpinned root used furthest ahead. */
static int s_victim(void *p, managed *m, size_t need, bool *drop) {
    (void)p;
    (void)need;
    int best = -1, best_next = -1, now = managed_cur_op(m);
    for (int r = 0; r < managed_n_roots(m); r++) {
        const root_view *v = managed_root(m, r);
        if (!v || v->state != RES_DEVICE || managed_pinned(m, r)) continue;
        int next = managed_next_use(m, r, now < 0 ? 0 : now);
        if (next < 0) next = 1 << 30;
        if (next > best_next) {
            best = r;
            best_next = next;
        }
    }
    *drop = false;
    return best;
}

static void offload_after(void *p, managed *m, int op) {
    (void)p;
    leave_after(m, op, false);
}
static void offload_before(void *p, managed *m, int op) {
    (void)p;
    fetch_ahead(m, op, 2);
}
static void drop_after(void *p, managed *m, int op) {
    (void)p;
    leave_after(m, op, true);
}
static void late_before(void *p, managed *m, int op) {
    (void)p;
    fetch_ahead(m, op, 0); /* too late to hide on a slow link */
}

static const policy_ops p_offload = {
    .name = "t-offload", .create = s_create, .destroy = s_destroy,
    .before_op = offload_before, .after_op = offload_after,
    .choose_victim = s_victim, .on_event = s_event};
static const policy_ops p_drop = {
    .name = "t-drop", .create = s_create, .destroy = s_destroy,
    .after_op = drop_after, .on_event = s_event};
static const policy_ops p_late = {
    .name = "t-late", .create = s_create, .destroy = s_destroy,
    .before_op = late_before, .after_op = offload_after,
    .choose_victim = s_victim, .on_event = s_event};
static const policy_ops p_victims = {
    .name = "t-victims", .create = s_create, .destroy = s_destroy,
    .choose_victim = s_victim, .on_event = s_event};

/* ---- running them ----------------------------------------------------------- */

static delta_ctx *build(int kind) {
    delta_ctx *c = delta_ctx_new();
    delta_ctx_set_seed(c, 3);
    delta_tensor *loss = kind ? tm_convnet(c, 4, 12)
                              : tm_gpt(c, 2, 32, 32, 4, 2, 64, 0.1f);
    delta_backward(c, loss);
    delta_adamw_opts o = {1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f};
    delta_optimizer_adamw(c, o);
    return c;
}

static void feed(delta_ctx *c, int step, delta_exec *ex, managed *m) {
    for (int i = 0; i < delta_ctx_n_tensors(c); i++) {
        delta_tensor *t = delta_ctx_tensor(c, i);
        if (delta_tensor_kind_of(t) != DELTA_KIND_INPUT) continue;
        int64_t n = delta_tensor_numel(t);
        size_t bytes = delta_tensor_bytes(t);
        void *buf = malloc(bytes);
        test_rng_seed((uint64_t)(step * 131 + i + 7));
        if (delta_tensor_dtype(t) == DELTA_I32)
            for (int64_t j = 0; j < n; j++) ((int *)buf)[j] = (int)(test_rng_u32() % 10);
        else
            test_fill_rand(buf, n, -1, 1);
        if (ex) delta_exec_set(ex, t, buf, bytes);
        if (m) CHECK(managed_access(m, i, buf, bytes, true) == DELTA_OK);
        free(buf);
    }
}

typedef struct result {
    delta_step_stats sum;
    size_t peak;
    bool ok;
    char err[512];
} result;

/* Trains 3 steps with the scripted policy at budget (0: the dry plan's
 * peak) and compares with the executor. */
static result run(int kind, const policy_ops *pol, double budget_frac,
                  double link_gbps, const char *trace_path) {
    result res = {0};
    delta_ctx *c1 = build(kind), *c2 = build(kind);
    char err[512] = "";
    delta_exec *ex = delta_exec_new(c1, NULL, err, sizeof err);
    delta_backend *b = delta_backend_cpu_new(
        &(delta_cpu_backend_opts){link_gbps, link_gbps > 0 ? -1 : 0}, err,
        sizeof err);
    delta_dry_plan dp;
    CHECK(delta_dry_plan_build(c2, &dp, NULL, 0) == DELTA_OK);
    size_t budget = (size_t)((double)dp.peak_bytes * budget_frac);
    if (budget < dp.min_budget_bytes) budget = dp.min_budget_bytes;
    delta_trace *tr = trace_path ? delta_trace_open(trace_path, err, sizeof err)
                                 : NULL;
    managed_opts mo = {.budget = budget, .policy = pol->name, .trace = tr,
                       .custom = pol};
    delta_status st;
    managed *m = managed_new(c2, b, &mo, &st, err, sizeof err);
    CHECK(ex && b && m, "%s", err);
    res.ok = ex && b && m;
    for (int step = 0; res.ok && step < 3; step++) {
        feed(c1, step, ex, NULL);
        feed(c2, step, NULL, m);
        delta_exec_run(ex, DELTA_RUN_STEP);
        delta_step_stats s;
        st = managed_run(m, DELTA_RUN_STEP, step, &s, res.err, sizeof res.err);
        if (st != DELTA_OK) {
            res.ok = false;
            break;
        }
        if (s.peak_device_bytes > res.peak) res.peak = s.peak_device_bytes;
        CHECK(s.peak_device_bytes <= budget, "peak %zu > budget %zu",
              s.peak_device_bytes, budget);
        res.sum.swap_out_bytes += s.swap_out_bytes;
        res.sum.swap_in_bytes += s.swap_in_bytes;
        res.sum.swap_outs += s.swap_outs;
        res.sum.swap_ins += s.swap_ins;
        res.sum.drops += s.drops;
        res.sum.recomputed_ops += s.recomputed_ops;
        res.sum.stall_s += s.stall_s;
        res.sum.defrag_moves += s.defrag_moves;
    }
    if (res.ok) {
        int compared = 0;
        for (int i = 0; i < delta_ctx_n_tensors(c1); i++) {
            delta_tensor *t1 = delta_ctx_tensor(c1, i);
            delta_tensor_kind k = delta_tensor_kind_of(t1);
            if (k != DELTA_KIND_PARAM && k != DELTA_KIND_STATE) continue;
            size_t n = delta_tensor_bytes(t1);
            void *got = malloc(n);
            CHECK(managed_access(m, delta_tensor_root(c2, i), got, n, false) ==
                  DELTA_OK);
            CHECK(memcmp(got, delta_exec_data(ex, t1), n) == 0,
                  "%s: %s differs from the executor's", pol->name,
                  delta_tensor_name(t1));
            free(got);
            compared++;
        }
        CHECK(compared > 10);
    }
    managed_free(m);
    if (tr) CHECK(delta_trace_close(tr, err, sizeof err) == DELTA_OK, "%s", err);
    delta_backend_free(b);
    delta_exec_free(ex);
    delta_ctx_free(c1);
    delta_ctx_free(c2);
    return res;
}

/* Everything leaves after each op and comes back two ops ahead, under
 * victims chosen by next use: parameters, gradients and optimizer state are
 * swapped (and updated in place while a swap-out may be in flight). */
static void test_offload_everything(void) {
    for (int kind = 0; kind < 2; kind++) {
        result r = run(kind, &p_offload, 1.0, 0, NULL);
        CHECK(r.ok, "%s", r.err);
        CHECK(r.sum.swap_outs > 50 && r.sum.swap_ins > 50,
              "swapped %d out, %d in", r.sum.swap_outs, r.sum.swap_ins);
        CHECK(last_script.swapped > 50, "swap-outs reported");
        printf("  offload %s: %d out (%zu B), %d in, stall %.4f s\n",
               kind ? "convnet" : "gpt", r.sum.swap_outs, r.sum.swap_out_bytes,
               r.sum.swap_ins, r.sum.stall_s);
    }
}

/* Every droppable tensor is dropped after each op and recomputed on demand,
 * recursively (dropout masks included). */
static void test_drop_everything(void) {
    for (int kind = 0; kind < 2; kind++) {
        result r = run(kind, &p_drop, 1.0, 0, NULL);
        CHECK(r.ok, "%s", r.err);
        CHECK(r.sum.drops > 20 && r.sum.recomputed_ops > 20,
              "dropped %d, recomputed %d", r.sum.drops, r.sum.recomputed_ops);
        CHECK(last_script.dropped > 0 && last_script.resident > 0,
              "drops and returns reported");
    }
}

/* Prefetches issued just before use on a slow link arrive late: compute
 * waits, the policy hears about it. */
static void test_late_prefetch(void) {
    result r = run(0, &p_late, 1.0, 0.2, NULL);
    CHECK(r.ok, "%s", r.err);
    CHECK(last_script.late > 0, "late arrivals reported");
    CHECK(r.sum.stall_s > 0, "stall counted");
}

/* A policy that only names victims under pressure reaches budgets down to
 * the dry plan's minimum (plus the tensors the running op pins). */
static void test_victims_down_to_minimum(void) {
    const double fracs[] = {0.7, 0.5, 0.35, 0.25};
    for (int k = 0; k < 4; k++) {
        result r = run(0, &p_victims, fracs[k], 0, NULL);
        CHECK(r.ok, "%.0f%%: %s", fracs[k] * 100, r.err);
        printf("  victims at %.0f%%: peak %zu, %d out, %d in, %d moved\n",
               fracs[k] * 100, r.peak, r.sum.swap_outs, r.sum.swap_ins,
               r.sum.defrag_moves);
    }
}

/* The trace holds both copy tracks and a memory counter inside the budget. */
static void test_trace_has_copies(void) {
    char path[] = "/tmp/delta_trace_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    result r = run(0, &p_offload, 0.6, 0, path);
    CHECK(r.ok, "%s", r.err);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    CHECK(fread(text, 1, (size_t)n, f) == (size_t)n);
    text[n] = 0;
    fclose(f);
    unlink(path);
    cJSON *doc = cJSON_Parse(text);
    free(text);
    CHECK(doc != NULL, "the trace parses");
    if (!doc) return;
    int tracks[3] = {0}, counters = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "traceEvents")) {
        const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
        if (ph && !strcmp(ph, "X")) {
            int tid = cJSON_GetObjectItem(e, "tid")->valueint;
            if (tid >= 0 && tid < 3) tracks[tid]++;
            CHECK(cJSON_GetObjectItem(e, "dur")->valuedouble >= 0);
        } else if (ph && !strcmp(ph, "C")) {
            const cJSON *a = cJSON_GetObjectItem(e, "args");
            double in_use = cJSON_GetObjectItem(a, "in_use")->valuedouble;
            double budget = cJSON_GetObjectItem(a, "budget")->valuedouble;
            CHECK(in_use <= budget, "memory %g above the budget %g", in_use,
                  budget);
            counters++;
        }
    }
    CHECK(tracks[0] > 0 && tracks[1] > 0 && tracks[2] > 0,
          "compute %d, to-host %d, to-device %d spans", tracks[0], tracks[1],
          tracks[2]);
    CHECK(counters > 100, "%d memory points", counters);
    cJSON_Delete(doc);
}

int main(void) {
    TEST_RUN(test_offload_everything);
    TEST_RUN(test_drop_everything);
    TEST_RUN(test_late_prefetch);
    TEST_RUN(test_victims_down_to_minimum);
    TEST_RUN(test_trace_has_copies);
    TEST_MAIN_END();
}
