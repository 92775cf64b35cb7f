/* Replay: the online allocator for a step whose allocation sequence is not
 * known yet, the lifetime planner's offsets for the steps that repeat it.
 *
 * One delta_pool is the occupancy structure of both modes: a replayed
 * allocation claims its planned range with alloc_at, an online one takes a
 * best fit, so after a deviation the online allocator sees every replayed
 * block still live. Each live block carries a tag (step + 1) << 32 | k, k
 * being its index in the step's trace, so a release by offset finds its
 * trace record in O(log n) without a search; blocks from other steps or
 * from outside a step have tags of other steps and are not recorded.
 *
 * Lifetimes are measured in alloc/free events of the step, not in ops: the
 * plan is then exact for the recorded order (a block freed before another
 * is allocated in the same op may share its bytes), and a repeated order is
 * guaranteed to find every planned range free.
 *
 * Host memory: the trace arrays grow (amortized doubling) only while a step
 * is longer than every earlier one; once the step length is stable, alloc
 * and release allocate nothing. Planning (step end) allocates scratch. */
#include "pool/pool_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct trace_rec {
    size_t size;          /* rounded */
    int alloc_ev, free_ev; /* event indices; free_ev -1 while live */
    int op;               /* caller's op of the allocation */
} trace_rec;

typedef struct span {
    size_t off, size;
} span;

struct delta_replay {
    delta_pool *pool;
    int64_t step;         /* index of the step in progress or next */
    bool in_step;

    /* trace of the step in progress */
    trace_rec *tr;
    int n_tr, cap_tr;
    int ev;               /* events so far in the step */
    bool trace_ok;        /* false if the trace could not grow */

    /* plan for the next step */
    size_t *plan_size, *plan_off;
    int n_plan;
    bool plan_ok;         /* a plan exists and fits the capacity */
    span *plan_obs;       /* live blocks the plan was made around */
    int n_plan_obs;

    /* step in progress */
    bool had_plan, replaying;
    int n_replayed, deviation_at, deviation_op;

    char err[256];
};

static void set_err(delta_replay *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_err(delta_replay *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
}

delta_replay *delta_replay_new(size_t capacity, int max_live, char *err,
                               size_t err_len) {
    delta_pool *pool = delta_pool_new(capacity, max_live, err, err_len);
    if (!pool) return NULL;
    delta_replay *r = calloc(1, sizeof *r);
    if (!r) {
        delta_pool_free(pool);
        if (err && err_len)
            snprintf(err, err_len, "out of host memory for a replay pool");
        return NULL;
    }
    r->pool = pool;
    r->deviation_at = r->deviation_op = -1;
    return r;
}

void delta_replay_free(delta_replay *r) {
    if (!r) return;
    delta_pool_free(r->pool);
    free(r->tr);
    free(r->plan_size);
    free(r->plan_off);
    free(r->plan_obs);
    free(r);
}

delta_pool *delta_replay_pool(delta_replay *r) { return r->pool; }

const char *delta_replay_error(const delta_replay *r) { return r->err; }

static uint64_t step_tag(const delta_replay *r) {
    return (uint64_t)(r->step + 1) << 32;
}

void delta_replay_step_begin(delta_replay *r) {
    DELTA_ASSERTF(!r->in_step, "replay: step_begin inside a step");
    r->in_step = true;
    r->n_tr = 0;
    r->ev = 0;
    r->trace_ok = true;
    r->had_plan = r->plan_ok;
    r->replaying = r->plan_ok;
    r->n_replayed = 0;
    r->deviation_at = r->deviation_op = -1;
    delta_pool_reset_peaks(r->pool);
}

static void record_alloc(delta_replay *r, size_t size, int op) {
    if (!r->trace_ok) return;
    if (r->n_tr == r->cap_tr) {
        int nc = r->cap_tr ? 2 * r->cap_tr : 1024;
        trace_rec *t = realloc(r->tr, (size_t)nc * sizeof *t);
        if (!t) { /* no plan from this step; allocation itself goes on */
            r->trace_ok = false;
            return;
        }
        r->tr = t;
        r->cap_tr = nc;
    }
    r->tr[r->n_tr++] = (trace_rec){size, r->ev, -1, op};
}

delta_status delta_replay_alloc(delta_replay *r, size_t bytes, int op,
                                size_t *off) {
    size_t size = delta_pool_round(bytes);
    if (size == SIZE_MAX) {
        set_err(r, "request of %zu bytes is larger than any pool", bytes);
        return DELTA_ERR_BUDGET;
    }
    if (!r->in_step) {
        delta_status st = delta_pool_alloc_tagged(r->pool, size, 0, off);
        if (st != DELTA_OK) set_err(r, "%s", delta_pool_error(r->pool));
        return st;
    }
    int k = r->n_tr;
    uint64_t tag = step_tag(r) | (uint32_t)k;
    if (r->replaying) {
        if (k < r->n_plan && r->plan_size[k] == size &&
            delta_pool_alloc_at_tagged(r->pool, r->plan_off[k], size, tag) ==
                DELTA_OK) {
            *off = r->plan_off[k];
            r->n_replayed++;
            record_alloc(r, size, op);
            r->ev++;
            return DELTA_OK;
        }
        r->replaying = false;
        r->deviation_at = k;
        r->deviation_op = op;
    }
    delta_status st = delta_pool_alloc_tagged(r->pool, size, tag, off);
    if (st != DELTA_OK) {
        set_err(r, "%s", delta_pool_error(r->pool));
        return st;
    }
    record_alloc(r, size, op);
    r->ev++;
    return DELTA_OK;
}

delta_status delta_replay_release(delta_replay *r, size_t off, int op) {
    (void)op;
    uint64_t tag;
    delta_status st = delta_pool_release_tagged(r->pool, off, &tag);
    if (st != DELTA_OK) {
        set_err(r, "%s", delta_pool_error(r->pool));
        return st;
    }
    if (!r->in_step) return DELTA_OK;
    if ((tag >> 32) == (uint64_t)(r->step + 1) && r->trace_ok) {
        uint32_t k = (uint32_t)tag;
        DELTA_ASSERT((int)k < r->n_tr && r->tr[k].free_ev < 0);
        r->tr[k].free_ev = r->ev;
    }
    r->ev++;
    return DELTA_OK;
}

/* ---- step end: compare, plan ------------------------------------------- */

typedef struct span_list {
    span *s;
    int n, cap;
    bool oom;
} span_list;

static void collect_span(size_t off, size_t size, void *user) {
    span_list *l = user;
    if (l->oom) return;
    if (l->n == l->cap) {
        int nc = l->cap ? 2 * l->cap : 256;
        span *s = realloc(l->s, (size_t)nc * sizeof *s);
        if (!s) {
            l->oom = true;
            return;
        }
        l->s = s;
        l->cap = nc;
    }
    l->s[l->n++] = (span){off, size};
}

static bool same_spans(const span *a, int na, const span *b, int nb) {
    if (na != nb) return false;
    for (int i = 0; i < na; i++)
        if (a[i].off != b[i].off || a[i].size != b[i].size) return false;
    return true;
}

/* Plans the recorded step around the blocks live now (obs, which the
 * replay keeps). Fills the report's plan fields. */
static void make_plan(delta_replay *r, span_list *obs, delta_replay_step *rep) {
    r->plan_ok = false;
    r->n_plan = 0;
    int n_obs = obs->n, n = n_obs + r->n_tr;
    int end = r->ev > 0 ? r->ev : 0;
    delta_plan_block *b = malloc(((size_t)n + 1) * sizeof *b);
    size_t *offs = malloc(((size_t)n + 1) * sizeof *offs);
    size_t *psz = realloc(r->plan_size, ((size_t)r->n_tr + 1) * sizeof *psz);
    if (psz) r->plan_size = psz;
    size_t *poff = realloc(r->plan_off, ((size_t)r->n_tr + 1) * sizeof *poff);
    if (poff) r->plan_off = poff;
    if (!b || !offs || !psz || !poff) goto out;
    for (int i = 0; i < n_obs; i++)
        b[i] = (delta_plan_block){obs->s[i].size, 0, end,
                                  (int64_t)obs->s[i].off};
    for (int k = 0; k < r->n_tr; k++) {
        const trace_rec *t = &r->tr[k];
        int last = t->free_ev >= 0 ? t->free_ev - 1 : end;
        b[n_obs + k] = (delta_plan_block){t->size, t->alloc_ev, last, -1};
    }
    delta_plan_stats ps;
    if (delta_plan_place(b, n, offs, &ps) != DELTA_OK) goto out;
    for (int k = 0; k < r->n_tr; k++) {
        r->plan_size[k] = r->tr[k].size;
        r->plan_off[k] = offs[n_obs + k];
    }
    r->n_plan = r->n_tr;
    delta_pool_stats st;
    delta_pool_get_stats(r->pool, &st);
    rep->planned = true;
    rep->plan_peak_bytes = ps.peak_bytes;
    rep->plan_max_live_bytes = ps.max_live_bytes;
    rep->plan_seconds = ps.seconds;
    rep->plan_exceeds_capacity = ps.peak_bytes > st.capacity;
    r->plan_ok = !rep->plan_exceeds_capacity;
    /* keep the obstacles the plan assumed (obs's array moves to r) */
    free(r->plan_obs);
    r->plan_obs = obs->s;
    r->n_plan_obs = obs->n;
    obs->s = NULL;
    obs->n = obs->cap = 0;
out:
    free(b);
    free(offs);
}

void delta_replay_step_end(delta_replay *r, delta_replay_step *report) {
    DELTA_ASSERTF(r->in_step, "replay: step_end outside a step");
    delta_replay_step rep;
    memset(&rep, 0, sizeof rep);
    rep.step = r->step;
    rep.had_plan = r->had_plan;
    rep.n_allocs = r->n_tr;
    rep.n_replayed = r->n_replayed;
    if (r->had_plan && r->replaying && r->n_tr != r->n_plan) {
        r->deviation_at = r->n_tr; /* fewer allocations than planned */
        r->replaying = false;
    }
    rep.replayed = r->had_plan && r->replaying;
    rep.deviation_at = r->deviation_at;
    rep.deviation_op = r->deviation_op;
    delta_pool_stats st;
    delta_pool_get_stats(r->pool, &st);
    rep.peak_live_bytes = st.peak_live_bytes;
    rep.peak_address = st.peak_address;

    span_list obs = {0};
    delta_pool_for_each_live(r->pool, collect_span, &obs);
    bool keep = rep.replayed && !obs.oom &&
                same_spans(obs.s, obs.n, r->plan_obs, r->n_plan_obs);
    if (!keep) {
        if (r->trace_ok && !obs.oom) {
            make_plan(r, &obs, &rep);
        } else {
            r->plan_ok = false;
            r->n_plan = 0;
        }
    }
    free(obs.s);
    r->in_step = false;
    r->step++;
    if (report) *report = rep;
}
