/* The managed runtime's mechanics, driven by scripted policies (not the
 * peers): asynchronous swap-outs of every kind of tensor, prefetches, waits
 * for late copies, in-place updates of tensors being swapped out, drops with
 * recursive recomputation, victims chosen under pressure, making a gap when
 * the bytes exist but no gap does. Every run must train bit-identically to
 * the simple executor and keep the arena's high-water mark in the budget;
 * the copies must show up in the trace. Layout: a policy that repeats its
 * decisions is replayed from the second step with no moves; one whose
 * decisions change every step still runs exactly; a step whose plan cannot
 * fit the budget tells the policy (MEV_LAYOUT_OVER). */
#include "delta/delta.h"
#include "runtime/managed.h"
#include "test.h"
#include "test_models.h"

#include <cjson/cJSON.h>
#include <unistd.h>

/* ---- scripted policies ---------------------------------------------------- */

typedef struct script {
    int late, resident, dropped, swapped;
    int layout_over;     /* MEV_LAYOUT_OVER events */
    double over_bytes;   /* the last one's excess */
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
    script *s = p;
    s->late += e == MEV_LATE;
    s->resident += e == MEV_RESIDENT;
    s->dropped += e == MEV_DROPPED;
    s->swapped += e == MEV_SWAPPED_OUT;
    if (e == MEV_LAYOUT_OVER) {
        CHECK(r == -1 && w > 0, "layout over: r %d, excess %g", r, w);
        s->layout_over++;
        s->over_bytes = w;
    }
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

/* Decisions that change every step: after each op, each root it touched
 * that is not needed by the next op is swapped out or dropped (or left)
 * by a hash of (step, root, op), and what op + 2 reads is prefetched on odd
 * steps only; victims under pressure. */
static void churn_after(void *p, managed *m, int op) {
    (void)p;
    int roots[DELTA_MAX_OP_IN + DELTA_MAX_OP_OUT];
    int n = op_roots(m, op, roots);
    uint64_t step = (uint64_t)managed_step(m);
    for (int k = 0; k < n; k++) {
        const root_view *v = managed_root(m, roots[k]);
        if (!v || v->state != RES_DEVICE || managed_pinned(m, roots[k])) continue;
        int next = managed_next_use(m, roots[k], op);
        if (next >= 0 && next <= op + 1) continue;
        uint64_t h = (step + 1) * 0x9e3779b97f4a7c15ull ^
                     (uint64_t)roots[k] * 0xbf58476d1ce4e5b9ull ^ (uint64_t)op;
        h ^= h >> 29;
        h *= 0x94d049bb133111ebull;
        h ^= h >> 32;
        if (h % 3 == 0) managed_swap_out(m, roots[k]);
        else if (h % 3 == 1 && v->droppable) managed_drop(m, roots[k]);
    }
}
static void churn_before(void *p, managed *m, int op) {
    (void)p;
    if (managed_step(m) % 2) fetch_ahead(m, op, 2);
}
static const policy_ops p_churn = {
    .name = "t-churn", .create = s_create, .destroy = s_destroy,
    .before_op = churn_before, .after_op = churn_after,
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

#define MAX_STEPS 8

typedef struct result {
    delta_step_stats sum;
    delta_step_stats per[MAX_STEPS]; /* each step's figures */
    size_t layout_peak[MAX_STEPS];   /* managed_layout_peak after each */
    size_t peak, budget;
    bool ok;
    char err[512];
} result;

/* Trains `steps` steps (3 when 0) with the scripted policy at a fraction
 * of the dry plan's peak and compares with the executor; on the simulator
 * (sim: deterministic copies, no data) nothing is compared. */
static result run_steps(int kind, const policy_ops *pol, double budget_frac,
                        double link_gbps, const char *trace_path, int steps,
                        bool sim) {
    result res = {0};
    delta_ctx *c1 = build(kind), *c2 = build(kind);
    char err[512] = "";
    delta_exec *ex = sim ? NULL : delta_exec_new(c1, NULL, err, sizeof err);
    delta_backend *b =
        sim ? delta_backend_sim_new(
                  &(delta_sim_backend_opts){.gpu = "a100-80g"}, err, sizeof err)
            : delta_backend_cpu_new(
                  &(delta_cpu_backend_opts){.link_gbps = link_gbps, .link_latency_s = link_gbps > 0 ? -1 : 0},
                  err, sizeof err);
    delta_dry_plan dp;
    CHECK(delta_dry_plan_build(c2, &dp, NULL, 0) == DELTA_OK);
    size_t budget = (size_t)((double)dp.peak_bytes * budget_frac);
    if (budget < dp.min_budget_bytes) budget = dp.min_budget_bytes;
    res.budget = budget;
    if (steps <= 0) steps = 3;
    if (steps > MAX_STEPS) steps = MAX_STEPS;
    delta_trace *tr = trace_path ? delta_trace_open(trace_path, err, sizeof err)
                                 : NULL;
    managed_opts mo = {.budget = budget, .policy = pol->name, .trace = tr,
                       .custom = pol};
    delta_status st;
    managed *m = managed_new(c2, b, &mo, &st, err, sizeof err);
    CHECK((ex || sim) && b && m, "%s", err);
    res.ok = (ex || sim) && b && m;
    for (int step = 0; res.ok && step < steps; step++) {
        feed(c2, step, NULL, m);
        if (ex) {
            feed(c1, step, ex, NULL);
            delta_exec_run(ex, DELTA_RUN_STEP);
        }
        delta_step_stats s;
        st = managed_run(m, DELTA_RUN_STEP, step, &s, res.err, sizeof res.err);
        if (st != DELTA_OK) {
            res.ok = false;
            break;
        }
        if (s.peak_device_bytes > res.peak) res.peak = s.peak_device_bytes;
        res.per[step] = s;
        res.layout_peak[step] = managed_layout_peak(m);
        CHECK(s.replayed == managed_replayed(m));
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
    if (res.ok && ex) {
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

static result run(int kind, const policy_ops *pol, double budget_frac,
                  double link_gbps, const char *trace_path) {
    return run_steps(kind, pol, budget_frac, link_gbps, trace_path, 3, false);
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
/* The trace of `steps` steps of the offload policy at 60% (on the
 * simulator when sim), parsed; NULL (checked) when the run or the file
 * failed. */
static cJSON *traced_run(int steps, bool sim) {
    char path[] = "/tmp/delta_trace_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return NULL;
    close(fd);
    result r = run_steps(0, &p_offload, 0.6, 0, path, steps, sim);
    CHECK(r.ok, "%s", r.err);
    char *text = test_read_file(path, NULL);
    unlink(path);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK(doc != NULL, "the trace parses");
    return doc;
}

static void test_trace_has_copies(void) {
    cJSON *doc = traced_run(3, false);
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

/* The host track (DELTA_TRACK_HOST), on the simulator whose host clock is
 * the preset's: per step one "host" span for every op of the program, and
 * inside each launched op's one "launch" span of exactly the preset's
 * launch cost (plus its library cost for a GEMM-like op); a reshape
 * launches nothing. This is how a GPU's trace says where the host's time
 * per op goes (scripts/trace_ops.py sums it by op type). */
static void test_trace_has_the_host(void) {
    const int steps = 3;
    cJSON *doc = traced_run(steps, true);
    delta_ctx *c = build(0);
    const int n_ops = delta_ctx_n_ops(c);
    const delta_gpu_preset *g = delta_gpu_preset_find("a100-80g");
    CHECK(g != NULL);
    if (!doc || !g) {
        cJSON_Delete(doc);
        delta_ctx_free(c);
        return;
    }
    int host[MAX_STEPS] = {0}, launches = 0, gemms = 0, bad = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(doc, "traceEvents")) {
        const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
        if (!ph || strcmp(ph, "X") ||
            cJSON_GetObjectItem(e, "tid")->valueint != DELTA_TRACK_HOST)
            continue;
        const char *cat = cJSON_GetStringValue(cJSON_GetObjectItem(e, "cat"));
        const cJSON *a = cJSON_GetObjectItem(e, "args");
        int op = cJSON_GetObjectItem(a, "op")->valueint;
        int step = cJSON_GetObjectItem(a, "step")->valueint;
        CHECK(op >= 0 && op < n_ops && step >= 0 && step < steps);
        if (op < 0 || op >= n_ops || step < 0 || step >= steps) continue;
        delta_op_info info;
        delta_ctx_op_info(c, op, &info);
        if (!strcmp(cat, "host")) host[step]++;
        if (strcmp(cat, "launch")) continue;
        bool gemm = !strcmp(info.type, "matmul") || !strcmp(info.type, "linear");
        double want = (g->launch_host_s + (gemm ? g->library_host_s : 0)) * 1e6;
        double dur = cJSON_GetObjectItem(e, "dur")->valuedouble;
        CHECK(strcmp(info.type, "reshape"), "a reshape was launched");
        if (fabs(dur - want) > 1e-3 && bad++ < 5)
            CHECK(false, "op %d (%s): launch %.3f us, the preset's %.3f us", op,
                  info.type, dur, want);
        launches++;
        gemms += gemm;
    }
    for (int s = 0; s < steps; s++)
        CHECK(host[s] == n_ops, "step %d: %d host spans for %d ops", s,
              host[s], n_ops);
    CHECK(launches > steps * n_ops / 2 && gemms > 0, "%d launches, %d GEMMs",
          launches, gemms);
    cJSON_Delete(doc);
    delta_ctx_free(c);
}

/* ---- layout ---------------------------------------------------------------- */

/* A policy that repeats its decisions (drop everything droppable after
 * each op, recompute on demand: no copies, so even the cpu backend is
 * deterministic) is replayed from the second step: every allocation takes
 * the lifetime planner's offset, no block moves, and training stays
 * bit-identical to the executor. The first step, online at the dry plan's
 * peak, needs compaction moves. */
static void test_replay_repeating(void) {
    for (int kind = 0; kind < 2; kind++) {
        result r = run_steps(kind, &p_drop, 1.0, 0, NULL, 6, false);
        CHECK(r.ok, "%s", r.err);
        CHECK(!r.per[0].replayed, "the first step is online");
        for (int k = 1; r.ok && k < 6; k++) {
            CHECK(r.per[k].replayed, "%s step %d replayed",
                  kind ? "convnet" : "gpt", k);
            CHECK(r.per[k].defrag_moves == 0, "step %d: %d moves", k,
                  r.per[k].defrag_moves);
            CHECK(r.layout_peak[k] > 0 && r.layout_peak[k] <= r.budget,
                  "plan peak %zu, budget %zu", r.layout_peak[k], r.budget);
        }
        CHECK(last_script.layout_over == 0);
        printf("  drop %s: step 1 moved %d blocks online, steps 2-6 replayed "
               "with none (plan peak %zu of %zu)\n",
               kind ? "convnet" : "gpt", r.per[0].defrag_moves, r.layout_peak[5],
               r.budget);
    }
    /* with swaps on the simulator (deterministic copies): swap-outs that
     * land, prefetches, parameters and optimizer state leaving and coming
     * back across the step boundary. The first step starts with every
     * persistent tensor on the device, so the second differs from it, and
     * with the host ahead of the device (the sim's host clock) the
     * swap-outs of the second land at other ops than the third's (a
     * release waits for the host to see its copy complete); the fourth on
     * are replayed. */
    for (int kind = 0; kind < 2; kind++) {
        result r = run_steps(kind, &p_offload, 0.5, 0, NULL, 6, true);
        CHECK(r.ok, "%s", r.err);
        int moved = 0;
        for (int k = 0; k < 3; k++) moved += r.per[k].defrag_moves;
        for (int k = 3; r.ok && k < 6; k++) {
            CHECK(r.per[k].replayed && r.per[k].defrag_moves == 0,
                  "sim offload %s step %d: replayed %d, %d moves",
                  kind ? "convnet" : "gpt", k, r.per[k].replayed,
                  r.per[k].defrag_moves);
            CHECK(r.per[k].swap_outs > 20 && r.per[k].swap_ins > 20);
        }
        printf("  sim offload %s at 50%%: %d moves in steps 1-3, steps 4-6 "
               "replayed with none\n", kind ? "convnet" : "gpt", moved);
    }
}

/* Decisions that change every step (a hash of step, root and op picks
 * swap-outs and drops; prefetches on odd steps only; victims under
 * pressure): the step deviates from its plan, goes on online, and trains
 * bit-identically within the budget. */
static void test_replay_changing(void) {
    const double fracs[] = {1.0, 0.6, 0.5};
    for (int kind = 0; kind < 2; kind++) {
        for (int f = 0; f < 3; f++) {
            result r = run_steps(kind, &p_churn, fracs[f], 0, NULL, 5, false);
            CHECK(r.ok, "%.0f%%: %s", fracs[f] * 100, r.err);
            int replayed = 0, moved = 0;
            for (int k = 1; k < 5; k++) {
                replayed += r.per[k].replayed;
                moved += r.per[k].defrag_moves;
            }
            CHECK(replayed < 4, "a changing policy deviates");
            CHECK(r.peak <= r.budget);
            printf("  churn %s %.0f%%: %d of 4 later steps replayed, %d "
                   "moves, %d plans over the budget\n",
                   kind ? "convnet" : "gpt", fracs[f] * 100, replayed, moved,
                   last_script.layout_over);
        }
    }
}

/* A chain the lifetime planner places badly: t0 (2 units of 256 B) -> t1
 * (1) -> t2 (1) -> t3 (2) -> a view of t3. Max-live is 3 units (t0 + t1,
 * then t2 + t3), and the online allocator fits it in 3, but every greedy
 * order the replay tries puts t0 and t3 both at the bottom and needs 4. */
static delta_ctx *build_chain(void) {
    delta_ctx *c = delta_ctx_new();
    delta_tensor *x = delta_input(c, "x", DELTA_F32, 2, (int64_t[]){2, 64});
    delta_tensor *w1 = delta_input(c, "w1", DELTA_F32, 2, (int64_t[]){128, 64});
    delta_tensor *w2 = delta_input(c, "w2", DELTA_F32, 2, (int64_t[]){64, 64});
    delta_tensor *w3 = delta_input(c, "w3", DELTA_F32, 2, (int64_t[]){64, 128});
    delta_tensor *t0 = delta_scale(c, x, 2.0f);
    delta_tensor *t1 = delta_matmul(
        c, delta_reshape(c, t0, 2, (int64_t[]){1, 128}), w1, false, false, 1);
    delta_tensor *t2 = delta_matmul(c, t1, w2, false, false, 1);
    delta_tensor *t3 = delta_matmul(c, t2, w3, false, false, 1);
    delta_reshape(c, t3, 1, (int64_t[]){128});
    CHECK(delta_ctx_status(c) == DELTA_OK);
    return c;
}

static const policy_ops p_quiet = {
    .name = "t-quiet", .create = s_create, .destroy = s_destroy,
    .on_event = s_event};

/* When the plan of a step cannot fit the budget the runtime goes on online
 * (within the budget) and, when the step repeated the one before, tells
 * the policy by how much it is over; with
 * that much more the plan fits and the next step is replayed. */
static void test_layout_over(void) {
    const size_t U = 256;
    for (int extra = 0; extra < 2; extra++) {
        delta_ctx *c = build_chain();
        char err[256] = "";
        delta_backend *b = delta_backend_sim_new(NULL, err, sizeof err);
        size_t base = 0;
        for (int i = 0; i < delta_ctx_n_tensors(c); i++) {
            delta_tensor *t = delta_ctx_tensor(c, i);
            if (delta_tensor_kind_of(t) == DELTA_KIND_INPUT)
                base += delta_tensor_bytes(t);
        }
        size_t budget = base + (3 + (size_t)extra) * U;
        managed_opts mo = {.budget = budget, .policy = p_quiet.name,
                           .custom = &p_quiet};
        delta_status st;
        managed *m = managed_new(c, b, &mo, &st, err, sizeof err);
        CHECK(b && m, "%s", err);
        for (int step = 0; m && step < 4; step++) {
            delta_step_stats s;
            st = managed_run(m, DELTA_RUN_STEP, step, &s, err, sizeof err);
            CHECK(st == DELTA_OK, "step %d: %s", step, err);
            CHECK(s.peak_device_bytes <= budget);
            if (!extra) {
                /* told from the second step on: the first has no step
                 * before it to repeat, and a step that does not repeat
                 * its predecessor says little about the next */
                CHECK(last_script.layout_over == step &&
                          (step == 0 || last_script.over_bytes == (double)U),
                      "step %d: %d events, excess %g", step,
                      last_script.layout_over, last_script.over_bytes);
                CHECK(managed_layout_peak(m) == budget + U && !s.replayed,
                      "plan peak %zu, budget %zu", managed_layout_peak(m),
                      budget);
            } else {
                CHECK(last_script.layout_over == 0);
                CHECK(s.replayed == (step > 0) &&
                          managed_layout_peak(m) <= budget,
                      "step %d replayed %d, plan peak %zu", step, s.replayed,
                      managed_layout_peak(m));
            }
        }
        managed_free(m);
        delta_backend_free(b);
        delta_ctx_free(c);
    }
}

int main(void) {
    TEST_RUN(test_offload_everything);
    TEST_RUN(test_drop_everything);
    TEST_RUN(test_late_prefetch);
    TEST_RUN(test_victims_down_to_minimum);
    TEST_RUN(test_trace_has_copies);
    TEST_RUN(test_trace_has_the_host);
    TEST_RUN(test_replay_repeating);
    TEST_RUN(test_replay_changing);
    TEST_RUN(test_layout_over);
    TEST_MAIN_END();
}
