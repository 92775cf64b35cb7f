/* The session: runs a step program on a backend inside a device budget.
 *
 * Layout. Persistent tensors (params, consts, state, inputs) and kept
 * outputs sit at the bottom of the arena for the session's life. Above
 * them, the per-step tensors and workspaces of each run mode are placed by
 * the lifetime planner from the mode's static schedule of allocation and
 * release events, computed once here; every run then claims exactly those
 * offsets from the pool (which checks that no two live blocks overlap and
 * keeps the high-water mark). With the "keep" policy the budget must hold
 * persistent bytes plus the planned peak of the step; with no budget the
 * arena is sized to that. */
#include "delta/session.h"
#include "delta/dryplan.h"
#include "delta/pool.h"
#include "backend/backend.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MODE_STEP = 0, MODE_FORWARD = 1, N_MODES = 2 };

/* One mode's schedule: per op, the roots it allocates before running and
 * releases after. Offsets are relative to the step region. */
typedef struct schedule {
    int *alloc_start, *free_start;  /* per op + 1: index ranges below */
    int *allocs, *frees;            /* root ids; -1 - op for a workspace */
    size_t *root_off;               /* per root: its planned offset */
    size_t *ws_off;                 /* per op: its workspace's offset */
    size_t peak;                    /* planned step-region bytes */
    size_t max_live;
} schedule;

struct delta_session {
    delta_ctx *ctx;
    delta_backend *b;
    size_t budget, arena_bytes, persistent_bytes;
    void *base;                 /* arena base (NULL on sim) */
    delta_pool *pool;
    bool *persistent;           /* per tensor id (roots) */
    size_t *off;                /* per root: current offset (persistent) */
    bool *live;                 /* per root: allocated now */
    schedule sched[N_MODES];
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

static size_t root_size(const delta_ctx *c, int id) {
    return delta_pool_round(c->tensors[id]->bytes);
}

static void schedule_free(schedule *sc) {
    free(sc->alloc_start);
    free(sc->free_start);
    free(sc->allocs);
    free(sc->frees);
    free(sc->root_off);
    free(sc->ws_off);
}

static bool op_in_mode(const delta_op *op, int mode) {
    return mode == MODE_STEP || op->phase == DELTA_PHASE_FORWARD;
}

/* Builds the schedule of a mode and plans its offsets. */
static delta_status schedule_build(delta_session *s, int mode) {
    const delta_ctx *c = s->ctx;
    schedule *sc = &s->sched[mode];
    int nt = c->n_tensors, no = c->n_ops;
    int *last = malloc(sizeof(int) * (size_t)(nt + 1));
    int *first = malloc(sizeof(int) * (size_t)(nt + 1));
    sc->alloc_start = calloc((size_t)no + 1, sizeof(int));
    sc->free_start = calloc((size_t)no + 1, sizeof(int));
    /* each root is allocated and released at most once; plus workspaces */
    sc->allocs = malloc(sizeof(int) * (size_t)(nt + no + 1));
    sc->frees = malloc(sizeof(int) * (size_t)(nt + no + 1));
    sc->root_off = calloc((size_t)nt + 1, sizeof(size_t));
    sc->ws_off = calloc((size_t)no + 1, sizeof(size_t));
    delta_plan_block *blk = malloc(sizeof *blk * (size_t)(nt + no + 1));
    int *blk_id = malloc(sizeof(int) * (size_t)(nt + no + 1));
    size_t *blk_off = malloc(sizeof(size_t) * (size_t)(nt + no + 1));
    int *blk_of_root = malloc(sizeof(int) * (size_t)(nt + 1));
    if (!last || !first || !sc->alloc_start || !sc->free_start ||
        !sc->allocs || !sc->frees || !sc->root_off || !sc->ws_off || !blk ||
        !blk_id || !blk_off || !blk_of_root) {
        free(last); free(first); free(blk); free(blk_id); free(blk_off);
        free(blk_of_root);
        return DELTA_ERR_NOMEM;
    }
    for (int i = 0; i < nt; i++) last[i] = first[i] = -1;
    for (int i = 0; i < no; i++) {
        const delta_op *op = &c->ops[i];
        if (!op_in_mode(op, mode)) continue;
        for (int j = 0; j < op->n_in; j++)
            last[delta_tensor_root(c, op->in[j])] = i;
        for (int j = 0; j < op->n_out; j++) {
            int r = delta_tensor_root(c, op->out[j]);
            if (first[r] < 0) first[r] = i;
            last[r] = i;
        }
    }
    /* Events: per op, its allocations then its releases; a block lives
     * from its allocation event to its release event. */
    int na = 0, nf = 0, nb = 0, ev = 0;
    for (int i = 0; i < no; i++) {
        const delta_op *op = &c->ops[i];
        sc->alloc_start[i] = na;
        sc->free_start[i] = nf;
        if (!op_in_mode(op, mode)) continue;
        for (int j = 0; j < op->n_out; j++) {
            int r = delta_tensor_root(c, op->out[j]);
            if (s->persistent[r] || first[r] != i) continue;
            bool dup = false;
            for (int k = sc->alloc_start[i]; k < na; k++) dup |= sc->allocs[k] == r;
            if (dup) continue;
            sc->allocs[na++] = r;
            blk_of_root[r] = nb;
            blk[nb] = (delta_plan_block){root_size(c, r), ev++, 0, -1};
            blk_id[nb++] = r;
        }
        int ws_blk = -1;
        if (op->workspace) {
            sc->allocs[na++] = -1 - i;
            ws_blk = nb;
            blk[nb] = (delta_plan_block){delta_pool_round(op->workspace), ev++,
                                         0, -1};
            blk_id[nb++] = -1 - i;
        }
        if (ws_blk >= 0) {
            sc->frees[nf++] = -1 - i;
            blk[ws_blk].last = ev++;
        }
        int ids[DELTA_MAX_OP_IN + DELTA_MAX_OP_OUT], n = 0;
        for (int j = 0; j < op->n_in; j++) ids[n++] = delta_tensor_root(c, op->in[j]);
        for (int j = 0; j < op->n_out; j++) ids[n++] = delta_tensor_root(c, op->out[j]);
        for (int j = 0; j < n; j++) {
            int r = ids[j];
            if (s->persistent[r] || last[r] != i) continue;
            bool dup = false;
            for (int k = sc->free_start[i]; k < nf; k++) dup |= sc->frees[k] == r;
            if (dup) continue;
            sc->frees[nf++] = r;
            blk[blk_of_root[r]].last = ev++;
        }
    }
    sc->alloc_start[no] = na;
    sc->free_start[no] = nf;
    delta_plan_stats st;
    delta_status rc = nb ? delta_plan_place(blk, nb, blk_off, &st) : DELTA_OK;
    if (rc == DELTA_OK) {
        sc->peak = nb ? st.peak_bytes : 0;
        sc->max_live = nb ? st.max_live_bytes : 0;
        for (int k = 0; k < nb; k++) {
            if (blk_id[k] >= 0) sc->root_off[blk_id[k]] = blk_off[k];
            else sc->ws_off[-1 - blk_id[k]] = blk_off[k];
        }
    }
    free(last); free(first); free(blk); free(blk_id); free(blk_off);
    free(blk_of_root);
    return rc;
}

void delta_session_free(delta_session *s) {
    if (!s) return;
    for (int m = 0; m < N_MODES; m++) schedule_free(&s->sched[m]);
    if (s->base || !delta_backend_has_data(s->b)) delta_backend_arena_destroy(s->b);
    delta_pool_free(s->pool);
    free(s->persistent);
    free(s->off);
    free(s->live);
    free(s);
}

static const char *fmt_bytes(double b, char *buf) {
    return delta_format_bytes(b, buf, 32);
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
    if (o->policy && strcmp(o->policy, "keep") != 0) {
        *status = DELTA_ERR_UNSUPPORTED;
        fail(NULL, err, err_len, "policy '%s' is not available yet; the "
             "only policy is 'keep'", o->policy);
        return NULL;
    }
    delta_session *s = calloc(1, sizeof *s);
    int nt = ctx->n_tensors;
    if (s) {
        s->ctx = ctx;
        s->b = o->backend;
        s->budget = o->budget_bytes;
        s->persistent = calloc((size_t)nt + 1, sizeof(bool));
        s->off = calloc((size_t)nt + 1, sizeof(size_t));
        s->live = calloc((size_t)nt + 1, sizeof(bool));
    }
    if (!s || !s->persistent || !s->off || !s->live) goto nomem;

    /* the smallest budget any policy could work in */
    delta_dry_plan dp;
    char perr[256];
    *status = delta_dry_plan_build(ctx, &dp, perr, sizeof perr);
    if (*status != DELTA_OK) {
        fail(s, err, err_len, "planning failed: %s", perr);
        goto fail;
    }
    if (s->budget && s->budget < dp.min_budget_bytes) {
        *status = DELTA_ERR_BUDGET;
        fail(s, err, err_len,
             "budget %s is below the minimum %s needed by op %d (%s, %s); "
             "use a budget of %s or more",
             fmt_bytes((double)s->budget, b1),
             fmt_bytes((double)dp.min_budget_bytes, b2), dp.min_budget_op,
             dp.min_budget_op_type, dp.min_budget_op_name,
             fmt_bytes((double)dp.min_budget_bytes, b2));
        goto fail;
    }

    /* persistent roots: leaves of every kind but activations/grads, plus
     * kept outputs and tensors no op reads */
    bool *read = calloc((size_t)nt + 1, sizeof(bool));
    if (!read) goto nomem;
    for (int i = 0; i < ctx->n_ops; i++)
        for (int j = 0; j < ctx->ops[i].n_in; j++)
            read[delta_tensor_root(ctx, ctx->ops[i].in[j])] = true;
    for (int i = 0; i < nt; i++) {
        const delta_tensor *t = ctx->tensors[i];
        if (t->view_of >= 0) continue;
        s->persistent[i] = delta_kind_persistent(t->kind) ||
                           t->kind == DELTA_KIND_INPUT || !read[i];
    }
    free(read);
    for (int k = 0; k < o->n_outputs; k++) {
        const delta_tensor *t = o->outputs[k];
        if (!t || t->ctx != ctx) {
            *status = DELTA_ERR_INVALID_ARG;
            fail(s, err, err_len, "output %d is not a tensor of this graph", k);
            goto fail;
        }
        s->persistent[delta_tensor_root(ctx, t->id)] = true;
    }
    size_t pbytes = 0;
    int n_live_max = 0;
    for (int i = 0; i < nt; i++)
        if (s->persistent[i]) {
            s->off[i] = pbytes;
            pbytes += root_size(ctx, i);
            n_live_max++;
        }
    s->persistent_bytes = pbytes;
    for (int m = 0; m < N_MODES; m++) {
        *status = schedule_build(s, m);
        if (*status != DELTA_OK) {
            fail(s, err, err_len, "planning the step layout failed");
            goto fail;
        }
    }
    size_t need = pbytes + (s->sched[MODE_STEP].peak > s->sched[MODE_FORWARD].peak
                                ? s->sched[MODE_STEP].peak
                                : s->sched[MODE_FORWARD].peak);
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
    s->pool = delta_pool_new(s->arena_bytes, n_live_max + nt + 2, perr2,
                             sizeof perr2);
    if (!s->pool) goto nomem;
    *status = delta_backend_arena_create(s->b, s->arena_bytes, &s->base);
    if (*status != DELTA_OK) {
        fail(s, err, err_len, "cannot create a device arena of %s",
             fmt_bytes((double)s->arena_bytes, b1));
        goto fail;
    }
    bool data = delta_backend_has_data(s->b);
    for (int i = 0; i < nt; i++) {
        if (!s->persistent[i]) continue;
        DELTA_ASSERT(delta_pool_alloc_at(s->pool, s->off[i],
                                         root_size(ctx, i)) == DELTA_OK);
        s->live[i] = true;
        const delta_tensor *t = ctx->tensors[i];
        if (!data) continue;
        void *p = (char *)s->base + s->off[i];
        if (t->dtype == DELTA_F32 && t->init.kind != DELTA_INIT_NONE)
            delta_init_fill(p, t->numel, t->init, ctx->seed, i);
        else
            memset(p, 0, t->bytes);
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

static void *addr(delta_session *s, int root) {
    return s->base ? (char *)s->base + s->off[root] : NULL;
}

static void place(delta_session *s, int root, size_t off) {
    s->off[root] = off;
    DELTA_ASSERTF(delta_pool_alloc_at(s->pool, off, root_size(s->ctx, root)) ==
                      DELTA_OK,
                  "planned offset %zu of tensor %d is not free: %s", off, root,
                  delta_pool_error(s->pool));
    s->live[root] = true;
}

static void release(delta_session *s, int root) {
    DELTA_ASSERT(delta_pool_release(s->pool, s->off[root]) == DELTA_OK);
    s->live[root] = false;
}

delta_status delta_session_run(delta_session *s, delta_run_mode mode,
                               delta_step_stats *stats) {
    delta_ctx *c = s->ctx;
    int m = mode == DELTA_RUN_STEP ? MODE_STEP : MODE_FORWARD;
    const schedule *sc = &s->sched[m];
    size_t base_off = s->persistent_bytes;
    delta_kernel_env env = {c->seed, s->step, mode != DELTA_RUN_EVAL};
    delta_pool_reset_peaks(s->pool);
    double t0 = delta_backend_clock(s->b);
    for (int i = 0; i < c->n_ops; i++) {
        const delta_op *op = &c->ops[i];
        if (!op_in_mode(op, m)) continue;
        size_t ws_off = 0;
        for (int k = sc->alloc_start[i]; k < sc->alloc_start[i + 1]; k++) {
            int r = sc->allocs[k];
            if (r >= 0) {
                place(s, r, base_off + sc->root_off[r]);
            } else {
                ws_off = base_off + sc->ws_off[i];
                DELTA_ASSERT(delta_pool_alloc_at(s->pool, ws_off,
                                                 delta_pool_round(op->workspace)) ==
                             DELTA_OK);
            }
        }
        delta_kargs k = {.op = op, .env = &env};
        for (int j = 0; j < op->n_in; j++) {
            int r = delta_tensor_root(c, op->in[j]);
            DELTA_ASSERTF(s->live[r], "op %d reads tensor %d, not on the device",
                          i, op->in[j]);
            k.in_t[j] = c->tensors[op->in[j]];
            k.in[j] = addr(s, r);
        }
        for (int j = 0; j < op->n_out; j++) {
            int r = delta_tensor_root(c, op->out[j]);
            k.out_t[j] = c->tensors[op->out[j]];
            k.out[j] = addr(s, r);
        }
        k.ws = op->workspace && s->base ? (char *)s->base + ws_off : NULL;
        delta_backend_run(s->b, &k);
        for (int f = sc->free_start[i]; f < sc->free_start[i + 1]; f++) {
            int r = sc->frees[f];
            if (r >= 0) release(s, r);
            else DELTA_ASSERT(delta_pool_release(s->pool, ws_off) == DELTA_OK);
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
    int r = delta_tensor_root(s->ctx, t->id);
    if (!s->persistent[r]) {
        fail(s, NULL, 0, "tensor '%s' lives only during a step; keep it with "
             "the session's outputs option to read it", t->name);
        return DELTA_ERR_STATE;
    }
    return DELTA_OK;
}

delta_status delta_session_write(delta_session *s, const delta_tensor *t,
                                 const void *data, size_t bytes) {
    delta_status st = access_check(s, t, bytes);
    if (st == DELTA_OK && s->base)
        memcpy(addr(s, delta_tensor_root(s->ctx, t->id)), data, bytes);
    return st;
}

delta_status delta_session_read(delta_session *s, const delta_tensor *t,
                                void *data, size_t bytes) {
    delta_status st = access_check(s, t, bytes);
    if (st != DELTA_OK) return st;
    if (s->base) memcpy(data, addr(s, delta_tensor_root(s->ctx, t->id)), bytes);
    else memset(data, 0, bytes);
    return DELTA_OK;
}

int64_t delta_session_step(const delta_session *s) { return s->step; }
void delta_session_set_step(delta_session *s, int64_t step) { s->step = step; }
size_t delta_session_budget(const delta_session *s) { return s->arena_bytes; }
const char *delta_session_error(const delta_session *s) { return s->err; }
