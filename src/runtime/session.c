/* The session: runs a step program on a backend inside a device budget.
 *
 * Layout. The dry plan's trace of one step (every storage root and
 * workspace with the op interval it is alive; persistent tensors and
 * inputs for the whole step) is placed once by the lifetime planner, so
 * the arena keep needs is exactly the dry plan's peak, the figure that
 * --budget N% is a percentage of. Persistent blocks are claimed at
 * creation; every run claims each per-step block at its planned offset
 * before its first op and releases it after its last, through the pool,
 * which checks that no two live blocks overlap and keeps the high-water
 * mark. Forward-only runs use the same offsets: their lifetimes are a
 * subset of the step's. Blocks alive to the step's end (the loss, outputs
 * the caller asked to keep) stay readable until the next run. */
#include "delta/session.h"
#include "delta/dryplan.h"
#include "delta/pool.h"
#include "backend/backend.h"
#include "runtime/managed.h"
#include "runtime/plan_cache.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One block of the layout: a storage root (tensor >= 0) or an op's
 * workspace (tensor -1), its planned offset and op interval. */
typedef struct sblock {
    int tensor, first, last;
    size_t size, off;
} sblock;

struct delta_session {
    delta_ctx *ctx;
    delta_backend *b;
    delta_backend *check;       /* opts.check_streams: the checker wrapped
                                   around opts.backend (owned; b == it) */
    size_t budget, arena_bytes;
    void *base;                 /* arena base (NULL on sim) */
    delta_pool *pool;
    sblock *blocks;             /* the layout, by first op */
    int n_blocks;
    int *first_block;           /* per op + 1: blocks allocated before op i
                                   are first_block[i] .. first_block[i+1] */
    int *ends;                  /* block indices sorted by last op */
    int *end_start;             /* per op + 1: into ends */
    int *root_block;            /* per tensor id: its block, or -1 */
    bool *live;                 /* per block: allocated now */
    managed *mg;                /* every policy but keep: the managed
                                   runtime does the work */
    delta_trace *trace;
    size_t baseline, min_budget; /* from the dry plan */
    int64_t step;
    char err[512];
};

static void fail(delta_session *s, char *err, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void fail(delta_session *s, char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (s) vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    if (err && n) {
        va_start(ap, fmt);
        vsnprintf(err, n, fmt, ap);
        va_end(ap);
    }
}

static bool whole_step(const delta_session *s, const sblock *b) {
    return b->first == 0 && b->last == (s->ctx->n_ops ? s->ctx->n_ops - 1 : 0) &&
           b->tensor >= 0 && s->ctx->tensors[b->tensor]->producer < 0;
}

/* Builds the layout from the dry trace: blocks, their planned offsets and
 * the per-op index of allocations and releases. Returns the planned peak
 * through *peak. */
static delta_status layout_build(delta_session *s, delta_tensor *const *outs,
                                 int n_outs, size_t *peak) {
    const delta_ctx *c = s->ctx;
    int no = c->n_ops, nt = c->n_tensors, end = no ? no - 1 : 0;
    int n = delta_dry_plan_trace(c, NULL, 0);
    if (n < 0) return DELTA_ERR_STATE;
    delta_dry_block *db = malloc(sizeof *db * (size_t)(n + 1));
    delta_plan_block *pb = malloc(sizeof *pb * (size_t)(n + 1));
    size_t *off = malloc(sizeof *off * (size_t)(n + 1));
    s->blocks = malloc(sizeof *s->blocks * (size_t)(n + 1));
    s->first_block = calloc((size_t)no + 2, sizeof(int));
    s->end_start = calloc((size_t)no + 2, sizeof(int));
    s->ends = malloc(sizeof(int) * (size_t)(n + 1));
    s->root_block = malloc(sizeof(int) * (size_t)(nt + 1));
    s->live = calloc((size_t)n + 1, sizeof(bool));
    delta_status rc = DELTA_ERR_NOMEM;
    if (!db || !pb || !off || !s->blocks || !s->first_block || !s->end_start ||
        !s->ends || !s->root_block || !s->live)
        goto out;
    delta_dry_plan_trace(c, db, n);
    for (int i = 0; i < nt; i++) s->root_block[i] = -1;
    for (int k = 0; k < n; k++) {
        s->blocks[k] = (sblock){db[k].tensor, db[k].first, db[k].last,
                                db[k].size, 0};
        if (db[k].tensor >= 0) s->root_block[db[k].tensor] = k;
    }
    /* outputs the caller reads after a run live to the step's end */
    for (int k = 0; k < n_outs; k++) {
        int b = s->root_block[delta_tensor_root(c, outs[k]->id)];
        if (b >= 0) s->blocks[b].last = end;
    }
    for (int k = 0; k < n; k++)
        pb[k] = (delta_plan_block){s->blocks[k].size, s->blocks[k].first,
                                   s->blocks[k].last, -1};
    delta_plan_stats st = {0};
    rc = n ? delta_plan_place(pb, n, off, &st) : DELTA_OK;
    if (rc != DELTA_OK) goto out;
    *peak = st.peak_bytes;
    for (int k = 0; k < n; k++) s->blocks[k].off = off[k];
    s->n_blocks = n;
    /* counting sorts by first op and by last op (the trace is already in
     * first-op order after the whole-step blocks, but do not rely on it) */
    for (int k = 0; k < n; k++) {
        s->first_block[s->blocks[k].first + 1]++;
        s->end_start[s->blocks[k].last + 1]++;
    }
    for (int i = 0; i <= no; i++) {
        s->first_block[i + 1] += s->first_block[i];
        s->end_start[i + 1] += s->end_start[i];
    }
    sblock *sorted = malloc(sizeof *sorted * (size_t)(n + 1));
    int *fill = calloc((size_t)no + 1, sizeof(int));
    if (!sorted || !fill) {
        free(sorted);
        free(fill);
        rc = DELTA_ERR_NOMEM;
        goto out;
    }
    for (int k = 0; k < n; k++) {
        int f = s->blocks[k].first;
        sorted[s->first_block[f] + fill[f]++] = s->blocks[k];
    }
    memcpy(s->blocks, sorted, sizeof *sorted * (size_t)n);
    memset(fill, 0, sizeof(int) * ((size_t)no + 1));
    for (int k = 0; k < n; k++) {
        int l = s->blocks[k].last;
        s->ends[s->end_start[l] + fill[l]++] = k;
        if (s->blocks[k].tensor >= 0) s->root_block[s->blocks[k].tensor] = k;
    }
    free(sorted);
    free(fill);
out:
    free(db);
    free(pb);
    free(off);
    return rc;
}

void delta_session_free(delta_session *s) {
    if (!s) return;
    managed_free(s->mg);
    if (s->pool) delta_backend_arena_destroy(s->b);
    delta_pool_free(s->pool);
    delta_backend_free(s->check); /* stream check: after the last call */
    free(s->blocks);
    free(s->first_block);
    free(s->ends);
    free(s->end_start);
    free(s->root_block);
    free(s->live);
    free(s);
}

static const char *fmt_bytes(double b, char *buf) {
    return delta_format_bytes(b, buf, 32);
}

/* The dry plan of ctx, taken from the plan cache when a session of the
 * same program made it before (a run whose shapes change comes back to a
 * shape), else built and stored there. */
#define DRY_PLAN_KEY "session:dry-plan"
static delta_status dry_plan_of(delta_ctx *ctx, delta_plan_cache *pc,
                                delta_dry_plan *dp, char *err, size_t n) {
    uint64_t key = pc ? delta_program_key(ctx) : 0;
    size_t bytes = 0;
    const void *blob = plan_cache_get(pc, DRY_PLAN_KEY, key, &bytes);
    if (blob && bytes == sizeof *dp) {
        memcpy(dp, blob, sizeof *dp);
        return DELTA_OK;
    }
    delta_status st = delta_dry_plan_build(ctx, dp, err, n);
    if (st == DELTA_OK && pc) plan_cache_put(pc, DRY_PLAN_KEY, key, dp, sizeof *dp);
    return st;
}

delta_session *delta_session_new(delta_ctx *ctx, const delta_session_opts *o,
                                 delta_status *status, char *err,
                                 size_t err_len) {
    delta_status dummy;
    if (!status) status = &dummy;
    char b1[32], b2[32];
    if (!o || !o->backend) {
        *status = DELTA_ERR_INVALID_ARG;
        fail(NULL, err, err_len, "session: no backend given");
        return NULL;
    }
    if (ctx->status != DELTA_OK) {
        *status = ctx->status;
        fail(NULL, err, err_len, "the graph has an error: %s", ctx->err);
        return NULL;
    }
    bool keep = !o->policy || !strcmp(o->policy, "keep");
    if (!keep && !managed_policy_known(o->policy)) {
        *status = DELTA_ERR_UNSUPPORTED;
        char list[256] = "";
        for (const char *const *p = delta_session_policies(); *p; p++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                     p == delta_session_policies() ? "" : ", ", *p);
        fail(NULL, err, err_len, "unknown policy '%s'; the policies are: %s",
             o->policy, list);
        return NULL;
    }
    delta_session *s = calloc(1, sizeof *s);
    if (!s) goto nomem;
    s->ctx = ctx;
    s->b = o->backend;
    /* stream check (opts.check_streams): everything goes through the
     * checker from here on; it is freed with the session */
    if (o->check_streams) {
        s->check = delta_backend_check_new(o->backend, 0, NULL, 0);
        if (!s->check) goto nomem;
        s->b = s->check;
    }
    s->budget = o->budget_bytes;
    s->trace = o->trace;
    for (int k = 0; k < o->n_outputs; k++) {
        const delta_tensor *t = o->outputs[k];
        if (!t || t->ctx != ctx) {
            *status = DELTA_ERR_INVALID_ARG;
            fail(s, err, err_len, "output %d is not a tensor of this graph", k);
            goto fail;
        }
    }

    /* the smallest budget any policy could work in */
    delta_dry_plan dp;
    char perr[256];
    *status = dry_plan_of(ctx, o->plans, &dp, perr, sizeof perr);
    if (*status != DELTA_OK) {
        fail(s, err, err_len, "planning failed: %s", perr);
        goto fail;
    }
    if (s->budget && s->budget < dp.min_budget_bytes) {
        *status = DELTA_ERR_BUDGET;
        fmt_bytes((double)s->budget, b1);
        fmt_bytes((double)dp.min_budget_bytes, b2);
        if (!strcmp(b1, b2)) { /* too close to tell apart rounded */
            snprintf(b1, sizeof b1, "%zu B", s->budget);
            snprintf(b2, sizeof b2, "%zu B", dp.min_budget_bytes);
        }
        fail(s, err, err_len,
             "budget %s is below the minimum %s needed by op %d (%s, %s); "
             "use a budget of %s or more",
             b1, b2, dp.min_budget_op, dp.min_budget_op_type,
             dp.min_budget_op_name, b2);
        goto fail;
    }
    s->baseline = dp.peak_bytes;
    s->min_budget = dp.min_budget_bytes;
    if (!keep) {
        s->arena_bytes = s->budget ? s->budget : dp.peak_bytes;
        if (s->arena_bytes < DELTA_POOL_ALIGN) s->arena_bytes = DELTA_POOL_ALIGN;
        managed_opts mo = {.budget = s->arena_bytes, .policy = o->policy,
                           .outs = o->outputs, .n_outs = o->n_outputs,
                           .trace = o->trace, .plans = o->plans,
                           .host_limit = o->host_limit_bytes};
        s->mg = managed_new(ctx, s->b, &mo, status, err, err_len);
        if (!s->mg) goto fail;
        return s;
    }
    size_t need = 0;
    *status = layout_build(s, o->outputs, o->n_outputs, &need);
    if (*status != DELTA_OK) {
        fail(s, err, err_len, "planning the step layout failed");
        goto fail;
    }
    if (s->budget && need > s->budget) {
        *status = DELTA_ERR_BUDGET;
        fail(s, err, err_len,
             "policy 'keep' keeps every tensor and needs %s, above the budget "
             "%s (the smallest workable budget is %s); raise the budget or "
             "choose a policy that swaps or recomputes",
             fmt_bytes((double)need, b1), fmt_bytes((double)s->budget, b2),
             fmt_bytes((double)dp.min_budget_bytes, b1));
        goto fail;
    }
    s->arena_bytes = s->budget ? s->budget : need;
    if (s->arena_bytes < DELTA_POOL_ALIGN) s->arena_bytes = DELTA_POOL_ALIGN;
    char perr2[256];
    s->pool = delta_pool_new(s->arena_bytes, s->n_blocks + 2, perr2,
                             sizeof perr2);
    if (!s->pool) goto nomem;
    *status = delta_backend_arena_create(s->b, s->arena_bytes, &s->base);
    if (*status != DELTA_OK) {
        fail(s, err, err_len, "cannot create a device arena of %s",
             fmt_bytes((double)s->arena_bytes, b1));
        delta_pool_free(s->pool);
        s->pool = NULL;
        goto fail;
    }
    bool data = delta_backend_has_data(s->b);
    for (int k = 0; k < s->n_blocks; k++) {
        const sblock *bl = &s->blocks[k];
        if (!whole_step(s, bl)) continue;
        DELTA_ASSERT(delta_pool_alloc_at(s->pool, bl->off, bl->size) == DELTA_OK);
        s->live[k] = true;
        const delta_tensor *t = ctx->tensors[bl->tensor];
        if (!data) continue;
        void *p = (char *)s->base + bl->off;
        if (delta_backend_init_tensor(s->b, p, t, ctx->seed) != DELTA_OK)
            goto nomem;
    }
    *status = DELTA_OK;
    return s;
nomem:
    *status = DELTA_ERR_NOMEM;
    fail(s, err, err_len, "out of host memory creating the session");
fail:
    delta_session_free(s);
    return NULL;
}

static void *addr(delta_session *s, int tensor) {
    int b = s->root_block[delta_tensor_root(s->ctx, tensor)];
    return s->base && b >= 0 ? (char *)s->base + s->blocks[b].off : NULL;
}

static void trace_memory(delta_session *s) {
    if (!s->trace) return;
    delta_pool_stats ps;
    delta_pool_get_stats(s->pool, &ps);
    delta_trace_memory(s->trace, delta_backend_clock(s->b), ps.live_bytes,
                       s->arena_bytes);
}

static void claim(delta_session *s, int k) {
    const sblock *b = &s->blocks[k];
    DELTA_ASSERTF(delta_pool_alloc_at(s->pool, b->off, b->size) == DELTA_OK,
                  "planned offset %zu of block %d is not free: %s", b->off, k,
                  delta_pool_error(s->pool));
    s->live[k] = true;
    trace_memory(s);
}

static void release(delta_session *s, int k) {
    DELTA_ASSERT(delta_pool_release(s->pool, s->blocks[k].off) == DELTA_OK);
    s->live[k] = false;
    trace_memory(s);
}

delta_status delta_session_run(delta_session *s, delta_run_mode mode,
                               delta_step_stats *stats) {
    delta_ctx *c = s->ctx;
    /* where each training step begins, so a reader of the trace (delta
     * bench's memory timeline) can cut one step out */
    if (s->trace && mode == DELTA_RUN_STEP)
        delta_trace_instant(s->trace, DELTA_TRACK_COMPUTE, "step", "step",
                            delta_backend_clock(s->b));
    if (s->mg) {
        delta_step_stats st;
        delta_status rc = managed_run(s->mg, mode, s->step, &st, s->err,
                                      sizeof s->err);
        if (rc == DELTA_OK && mode == DELTA_RUN_STEP) s->step++;
        st.baseline_peak_bytes = s->baseline;
        st.min_budget_bytes = s->min_budget;
        st.budget_bytes = s->arena_bytes;
        if (rc == DELTA_OK && stats) *stats = st;
        return rc;
    }
    bool fwd_only = mode != DELTA_RUN_STEP;
    delta_kernel_env env = {c->seed, s->step, mode != DELTA_RUN_EVAL};
    /* blocks kept readable after the last run (or left by a forward-only
     * run) go first */
    for (int k = 0; k < s->n_blocks; k++)
        if (s->live[k] && !whole_step(s, &s->blocks[k])) release(s, k);
    delta_pool_reset_peaks(s->pool);
    double t0 = delta_backend_clock(s->b);
    int end = c->n_ops - 1;
    for (int i = 0; i < c->n_ops; i++) {
        const delta_op *op = &c->ops[i];
        if (fwd_only && op->phase != DELTA_PHASE_FORWARD) continue;
        void *ws = NULL;
        for (int k = s->first_block[i]; k < s->first_block[i + 1]; k++) {
            if (whole_step(s, &s->blocks[k])) continue;
            claim(s, k);
            if (s->blocks[k].tensor < 0 && s->base)
                ws = (char *)s->base + s->blocks[k].off;
        }
        delta_kargs k = {.op = op, .env = &env, .ws = ws};
        for (int j = 0; j < op->n_in; j++) {
            DELTA_ASSERTF(s->live[s->root_block[delta_tensor_root(c, op->in[j])]],
                          "op %d reads tensor %d, not on the device", i,
                          op->in[j]);
            k.in_t[j] = c->tensors[op->in[j]];
            k.in[j] = addr(s, op->in[j]);
        }
        for (int j = 0; j < op->n_out; j++) {
            k.out_t[j] = c->tensors[op->out[j]];
            k.out[j] = addr(s, op->out[j]);
        }
        double o0 = s->trace ? delta_backend_clock(s->b) : 0;
        delta_backend_run(s->b, &k);
        if (s->trace) {
            char args[64];
            snprintf(args, sizeof args, "\"op\":%d,\"step\":%lld", i,
                     (long long)s->step);
            delta_trace_span(s->trace, DELTA_TRACK_COMPUTE, op->name, "op", o0,
                             delta_backend_clock(s->b), args);
        }
        if (i == end) break; /* blocks alive to the end stay readable */
        for (int e = s->end_start[i]; e < s->end_start[i + 1]; e++) {
            int b = s->ends[e];
            if (s->live[b] && !whole_step(s, &s->blocks[b])) release(s, b);
        }
    }
    double t1 = delta_backend_clock(s->b);
    if (mode == DELTA_RUN_STEP) s->step++;
    if (stats) {
        delta_pool_stats ps;
        delta_pool_get_stats(s->pool, &ps);
        memset(stats, 0, sizeof *stats);
        stats->step_s = t1 - t0;
        stats->peak_device_bytes = ps.peak_address;
        stats->live_peak_bytes = ps.peak_live_bytes;
        stats->replayed = true;
        stats->baseline_peak_bytes = s->baseline;
        stats->min_budget_bytes = s->min_budget;
        stats->budget_bytes = s->arena_bytes;
    }
    return DELTA_OK;
}

static delta_status access_check(delta_session *s, const delta_tensor *t,
                                 size_t bytes) {
    if (!t || t->ctx != s->ctx || t->id >= s->ctx->n_tensors) {
        fail(s, NULL, 0, "not a tensor of this session's graph");
        return DELTA_ERR_INVALID_ARG;
    }
    if (bytes != t->bytes) {
        fail(s, NULL, 0, "tensor '%s' holds %zu bytes, %zu given", t->name,
             t->bytes, bytes);
        return DELTA_ERR_INVALID_ARG;
    }
    if (s->mg) return DELTA_OK; /* the managed runtime checks residency */
    int b = s->root_block[delta_tensor_root(s->ctx, t->id)];
    if (b < 0 || !s->live[b]) {
        fail(s, NULL, 0, "tensor '%s' is not on the device now: only "
             "parameters, state, inputs and tensors alive at the end of the "
             "last run (the loss, the session's outputs) can be accessed",
             t->name);
        return DELTA_ERR_STATE;
    }
    return DELTA_OK;
}

delta_status delta_session_write(delta_session *s, const delta_tensor *t,
                                 const void *data, size_t bytes) {
    delta_status st = access_check(s, t, bytes);
    if (st == DELTA_OK && s->mg)
        st = managed_access(s->mg, delta_tensor_root(s->ctx, t->id),
                            (void *)data, bytes, true);
    else if (st == DELTA_OK && s->base)
        delta_backend_upload(s->b, addr(s, t->id), data, bytes);
    if (st == DELTA_ERR_STATE) fail(s, NULL, 0, "tensor '%s' is not readable now", t->name);
    return st;
}

delta_status delta_session_read(delta_session *s, const delta_tensor *t,
                                void *data, size_t bytes) {
    delta_status st = access_check(s, t, bytes);
    if (st != DELTA_OK) return st;
    if (s->mg) {
        st = managed_access(s->mg, delta_tensor_root(s->ctx, t->id), data,
                            bytes, false);
        if (st == DELTA_ERR_STATE)
            fail(s, NULL, 0, "tensor '%s' is not readable now: only "
                 "parameters, state, inputs and the session's outputs are",
                 t->name);
        return st;
    }
    if (s->base) delta_backend_download(s->b, data, addr(s, t->id), bytes);
    else memset(data, 0, bytes);
    return DELTA_OK;
}

const char *const *delta_session_policies(void) {
    /* keep, then the managed runtime's (test_session checks both lists) */
    static const char *const names[] = {"keep",     "swap",     "checkpoint",
                                        "dtr",      "capuchin", "autoswap",
                                        "delta",    NULL};
    return names;
}

int64_t delta_session_step(const delta_session *s) { return s->step; }
void delta_session_set_step(delta_session *s, int64_t step) { s->step = step; }
size_t delta_session_budget(const delta_session *s) { return s->arena_bytes; }
const char *delta_session_error(const delta_session *s) { return s->err; }
