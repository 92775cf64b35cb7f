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
 * Blocks live at the step's end are the next plan's fixed obstacles. With
 * keys, the releases during the step of blocks from earlier steps are
 * recorded by key, so an obstacle allocated during the step whose key's
 * earlier block was released at event e is planned as alive only until e
 * (the step repeats); any other obstacle is alive for the whole step.
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
    int key;              /* caller's key, -1 none */
} trace_rec;

/* A release during the step of a block from an earlier step (or from
 * outside any step), by key. */
typedef struct foreign_rel {
    int key, ev;
} foreign_rel;

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
    uint64_t sig, prev_sig; /* hash of the allocations (size, key) of the
                               step in progress / of the last step */
    int prev_n;           /* allocations of the last step */
    foreign_rel *fr;      /* releases of earlier steps' keyed blocks */
    int n_fr, cap_fr;
    bool fr_ok;           /* false if fr could not grow */

    /* plan for the next step */
    size_t *plan_size, *plan_off;
    int *plan_key, *plan_op;
    int n_plan;
    /* the plan by key: pk_order lists plan indices by (key, index); keys
     * run_key[j] have entries pk_order[run_start[j] .. run_start[j + 1]),
     * of which run_used[j] were taken in the step in progress */
    int *pk_order, *run_key, *run_start, *run_used;
    int n_runs;
    bool plan_ok;         /* a plan exists and fits the capacity */
    span *plan_obs;       /* live blocks the plan was made around */
    int n_plan_obs;
    /* the last plan made at a step's end that did not fit: its trace (by
     * hash and length), the blocks around it, its figures */
    bool over_valid;
    uint64_t over_sig;
    int over_n;
    span *over_obs;
    int n_over_obs;
    size_t over_peak, over_max_live;

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
    free(r->plan_key);
    free(r->plan_op);
    free(r->pk_order);
    free(r->run_key);
    free(r->run_start);
    free(r->run_used);
    free(r->plan_obs);
    free(r->over_obs);
    free(r->fr);
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
    r->sig = 1469598103934665603ull;
    r->n_fr = 0;
    r->fr_ok = true;
    r->had_plan = r->plan_ok;
    r->replaying = r->plan_ok;
    r->n_replayed = 0;
    if (r->plan_ok) memset(r->run_used, 0, (size_t)r->n_runs * sizeof(int));
    r->deviation_at = r->deviation_op = -1;
    delta_pool_reset_peaks(r->pool);
}

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 1099511628211ull;
}

static void record_alloc(delta_replay *r, size_t size, int op, int key) {
    r->sig = mix(mix(r->sig, size), (uint64_t)(int64_t)key);
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
    r->tr[r->n_tr++] = (trace_rec){size, r->ev, -1, op, key};
}

static void record_foreign(delta_replay *r, int key) {
    if (!r->fr_ok) return;
    if (r->n_fr == r->cap_fr) {
        int nc = r->cap_fr ? 2 * r->cap_fr : 256;
        foreign_rel *f = realloc(r->fr, (size_t)nc * sizeof *f);
        if (!f) { /* obstacles are then alive for the whole next step */
            r->fr_ok = false;
            return;
        }
        r->fr = f;
        r->cap_fr = nc;
    }
    r->fr[r->n_fr++] = (foreign_rel){key, r->ev};
}

/* The plan's entry for the next allocation of key (its n-th allocation in
 * the step takes the plan's n-th of that key) when it has this size: its
 * index, with its run in *run; -1 when there is none. */
static int plan_slot(const delta_replay *r, int key, size_t size, int *run) {
    int lo = 0, hi = r->n_runs;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (r->run_key[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    if (lo == r->n_runs || r->run_key[lo] != key) return -1;
    int p = r->run_start[lo] + r->run_used[lo];
    if (p >= r->run_start[lo + 1]) return -1;
    int k = r->pk_order[p];
    if (r->plan_size[k] != size) return -1;
    *run = lo;
    return k;
}

delta_replay_next delta_replay_peek(const delta_replay *r, size_t bytes,
                                    int op, int key, size_t *off) {
    if (!r->in_step || !r->replaying) return DELTA_REPLAY_ONLINE;
    size_t size = delta_pool_round(bytes);
    int run, k = size == SIZE_MAX ? -1 : plan_slot(r, key, size, &run);
    if (k < 0) return DELTA_REPLAY_ONLINE;
    *off = r->plan_off[k];
    if (op < r->plan_op[k]) return DELTA_REPLAY_AHEAD;
    return delta_pool_range_free(r->pool, r->plan_off[k], size)
               ? DELTA_REPLAY_PLANNED
               : DELTA_REPLAY_BUSY;
}

bool delta_replay_replaying(const delta_replay *r) {
    return r->in_step && r->replaying;
}

delta_status delta_replay_alloc(delta_replay *r, size_t bytes, int op,
                                size_t *off) {
    return delta_replay_alloc_key(r, bytes, op, -1, off);
}

delta_status delta_replay_alloc_untraced(delta_replay *r, size_t bytes,
                                         size_t *off) {
    size_t size = delta_pool_round(bytes);
    if (size == SIZE_MAX) {
        set_err(r, "request of %zu bytes is larger than any pool", bytes);
        return DELTA_ERR_BUDGET;
    }
    delta_status st = delta_pool_alloc_tagged(r->pool, size, 0, off);
    if (st != DELTA_OK) set_err(r, "%s", delta_pool_error(r->pool));
    return st;
}

delta_status delta_replay_alloc_at_untraced(delta_replay *r, size_t off,
                                            size_t bytes) {
    size_t size = delta_pool_round(bytes);
    delta_status st = delta_pool_alloc_at_tagged(r->pool, off, size, 0);
    if (st != DELTA_OK) set_err(r, "%s", delta_pool_error(r->pool));
    return st;
}

delta_status delta_replay_move(delta_replay *r, size_t from, size_t to) {
    size_t size = delta_pool_block_size(r->pool, from);
    if (!size) {
        set_err(r, "move from offset %zu: no live block starts there", from);
        return DELTA_ERR_INVALID_ARG;
    }
    if (to == from) return DELTA_OK;
    uint64_t tag;
    DELTA_ASSERT(delta_pool_release_tagged(r->pool, from, &tag) == DELTA_OK);
    delta_status st = delta_pool_alloc_at_tagged(r->pool, to, size, tag);
    if (st != DELTA_OK) {
        set_err(r, "move to offset %zu: %s", to, delta_pool_error(r->pool));
        DELTA_ASSERT(delta_pool_alloc_at_tagged(r->pool, from, size, tag) ==
                     DELTA_OK);
    }
    return st;
}

delta_status delta_replay_alloc_key(delta_replay *r, size_t bytes, int op,
                                    int key, size_t *off) {
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
        int run, p = plan_slot(r, key, size, &run);
        if (p >= 0 &&
            delta_pool_alloc_at_tagged(r->pool, r->plan_off[p], size, tag) ==
                DELTA_OK) {
            *off = r->plan_off[p];
            r->run_used[run]++;
            r->n_replayed++;
            record_alloc(r, size, op, key);
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
    record_alloc(r, size, op, key);
    r->ev++;
    return DELTA_OK;
}

delta_status delta_replay_release(delta_replay *r, size_t off, int op) {
    return delta_replay_release_key(r, off, op, -1);
}

delta_status delta_replay_release_key(delta_replay *r, size_t off, int op,
                                      int key) {
    (void)op;
    uint64_t tag;
    delta_status st = delta_pool_release_tagged(r->pool, off, &tag);
    if (st != DELTA_OK) {
        set_err(r, "%s", delta_pool_error(r->pool));
        return st;
    }
    if (!r->in_step) return DELTA_OK;
    if ((tag >> 32) == (uint64_t)(r->step + 1)) {
        if (r->trace_ok) {
            uint32_t k = (uint32_t)tag;
            DELTA_ASSERT((int)k < r->n_tr && r->tr[k].free_ev < 0);
            r->tr[k].free_ev = r->ev;
        }
    } else if (key >= 0) {
        record_foreign(r, key);
    }
    r->ev++;
    return DELTA_OK;
}

/* ---- step end: compare, plan ------------------------------------------- */

typedef struct span_list {
    span *s;
    uint64_t *tag;
    int n, cap;
    bool oom;
} span_list;

static void collect_span(size_t off, size_t size, uint64_t tag, void *user) {
    span_list *l = user;
    if (l->oom) return;
    if (l->n == l->cap) {
        int nc = l->cap ? 2 * l->cap : 256;
        span *s = realloc(l->s, (size_t)nc * sizeof *s);
        if (s) l->s = s;
        uint64_t *t = realloc(l->tag, (size_t)nc * sizeof *t);
        if (t) l->tag = t;
        if (!s || !t) {
            l->oom = true;
            return;
        }
        l->cap = nc;
    }
    l->tag[l->n] = tag;
    l->s[l->n++] = (span){off, size};
}

static int cmp_foreign(const void *a, const void *b) {
    const foreign_rel *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->ev > y->ev) - (x->ev < y->ev);
}

/* The last time point obstacle i (live now) is alive in the next step: the
 * event before its key's earlier block was released in this step, when it
 * was allocated in this step and such a release exists; else the end. */
static int obstacle_last(const delta_replay *r, const span_list *obs, int i,
                         int end, int64_t trace_step) {
    uint64_t tag = obs->tag[i];
    if ((tag >> 32) != (uint64_t)(trace_step + 1) || !r->trace_ok || !r->fr_ok)
        return end;
    uint32_t k = (uint32_t)tag;
    if ((int)k >= r->n_tr || r->tr[k].key < 0) return end;
    int key = r->tr[k].key, lo = 0, hi = r->n_fr;
    while (lo < hi) { /* first release of key (fr is sorted) */
        int mid = (lo + hi) / 2;
        if (r->fr[mid].key < key) lo = mid + 1;
        else hi = mid;
    }
    if (lo == r->n_fr || r->fr[lo].key != key) return end;
    int e = r->fr[lo].ev;
    return e > 0 ? e - 1 : 0;
}

typedef struct key_idx {
    int key, idx;
} key_idx;

static int cmp_key_idx(const void *a, const void *b) {
    const key_idx *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* Builds the plan's index by key (pk_order, runs); false on no memory. */
static bool index_plan(delta_replay *r) {
    size_t n1 = (size_t)r->n_plan + 1;
    int *o = realloc(r->pk_order, n1 * sizeof *o);
    if (o) r->pk_order = o;
    int *rk = realloc(r->run_key, n1 * sizeof *rk);
    if (rk) r->run_key = rk;
    int *rs = realloc(r->run_start, n1 * sizeof *rs);
    if (rs) r->run_start = rs;
    int *ru = realloc(r->run_used, n1 * sizeof *ru);
    if (ru) r->run_used = ru;
    key_idx *ki = malloc(n1 * sizeof *ki);
    if (!o || !rk || !rs || !ru || !ki) {
        free(ki);
        return false;
    }
    for (int k = 0; k < r->n_plan; k++) ki[k] = (key_idx){r->plan_key[k], k};
    qsort(ki, (size_t)r->n_plan, sizeof *ki, cmp_key_idx);
    int n = 0;
    for (int p = 0; p < r->n_plan; p++) {
        o[p] = ki[p].idx;
        if (n == 0 || rk[n - 1] != ki[p].key) {
            rk[n] = ki[p].key;
            rs[n++] = p;
        }
    }
    rs[n] = r->n_plan;
    r->n_runs = n;
    free(ki);
    return true;
}

static bool same_spans(const span *a, int na, const span *b, int nb) {
    if (na != nb) return false;
    for (int i = 0; i < na; i++)
        if (a[i].off != b[i].off || a[i].size != b[i].size) return false;
    return true;
}

/* Plans the recorded step (trace_step) around the blocks live now (obs,
 * which the replay keeps). Fills the report's plan fields. */
static void make_plan(delta_replay *r, span_list *obs, delta_replay_step *rep,
                      int64_t trace_step) {
    r->plan_ok = false;
    r->n_plan = 0;
    int n_obs = obs->n, n = n_obs + r->n_tr;
    int end = r->ev > 0 ? r->ev : 0;
    delta_plan_block *b = malloc(((size_t)n + 1) * sizeof *b);
    size_t *offs = malloc(((size_t)n + 1) * sizeof *offs), *offs2 = NULL;
    size_t *psz = realloc(r->plan_size, ((size_t)r->n_tr + 1) * sizeof *psz);
    if (psz) r->plan_size = psz;
    size_t *poff = realloc(r->plan_off, ((size_t)r->n_tr + 1) * sizeof *poff);
    if (poff) r->plan_off = poff;
    int *pkey = realloc(r->plan_key, ((size_t)r->n_tr + 1) * sizeof *pkey);
    if (pkey) r->plan_key = pkey;
    int *pop = realloc(r->plan_op, ((size_t)r->n_tr + 1) * sizeof *pop);
    if (pop) r->plan_op = pop;
    if (!b || !offs || !psz || !poff || !pkey || !pop) goto out;
    if (r->fr_ok && r->n_fr > 1)
        qsort(r->fr, (size_t)r->n_fr, sizeof *r->fr, cmp_foreign);
    for (int i = 0; i < n_obs; i++)
        b[i] = (delta_plan_block){obs->s[i].size, 0,
                                  obstacle_last(r, obs, i, end, trace_step),
                                  (int64_t)obs->s[i].off};
    for (int k = 0; k < r->n_tr; k++) {
        const trace_rec *t = &r->tr[k];
        int last = t->free_ev >= 0 ? t->free_ev - 1 : end;
        b[n_obs + k] = (delta_plan_block){t->size, t->alloc_ev, last, -1};
    }
    delta_pool_stats st;
    delta_pool_get_stats(r->pool, &st);
    /* A block that stays past the step and comes back in it (an obstacle
     * released at a predicted event, whose own allocation is record k) is
     * pinned first where it sits now, so the plan is a fixed point: the
     * next step ends with the same blocks in the same places and keeps it.
     * Then the default order, then the others, the lowest peak winning;
     * unpinned when no pinned placement fits. */
    int n_pinned = 0;
    for (int i = 0; i < n_obs; i++) {
        uint64_t tag = obs->tag[i];
        uint32_t k = (uint32_t)tag;
        if (b[i].last == end || (tag >> 32) != (uint64_t)(trace_step + 1) ||
            (int)k >= r->n_tr || r->tr[k].free_ev >= 0 ||
            b[i].last >= r->tr[k].alloc_ev)
            continue;
        b[n_obs + k].fixed = (int64_t)obs->s[i].off;
        n_pinned++;
    }
    delta_plan_stats ps = {0};
    bool have = false;
    for (int pass = n_pinned ? 0 : 1; pass < 2; pass++) {
        if (pass == 1 && n_pinned)
            for (int k = 0; k < r->n_tr; k++) b[n_obs + k].fixed = -1;
        for (int o = 0; o < DELTA_PLAN_N_ORDERS; o++) {
            if (!offs2) offs2 = malloc(((size_t)n + 1) * sizeof *offs2);
            delta_plan_stats ps2;
            if (!offs2 || delta_plan_place_order(b, n, (delta_plan_order)o,
                                                 offs2, &ps2) != DELTA_OK)
                break;
            ps2.seconds += ps.seconds;
            if (!have || ps2.peak_bytes < ps.peak_bytes) {
                size_t *t = offs;
                offs = offs2;
                offs2 = t;
                ps = ps2;
                have = true;
            } else {
                ps.seconds = ps2.seconds;
            }
            if (ps.peak_bytes <= st.capacity) break;
        }
        if (have && ps.peak_bytes <= st.capacity) break;
    }
    if (!have) goto out;
    for (int k = 0; k < r->n_tr; k++) {
        r->plan_size[k] = r->tr[k].size;
        r->plan_off[k] = offs[n_obs + k];
        r->plan_key[k] = r->tr[k].key;
        r->plan_op[k] = r->tr[k].op;
    }
    r->n_plan = r->n_tr;
    if (!index_plan(r)) {
        r->n_plan = 0;
        goto out;
    }
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
    free(offs2);
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
    rep.repeated = r->step > 0 && r->sig == r->prev_sig && r->n_tr == r->prev_n;
    r->prev_sig = r->sig;
    r->prev_n = r->n_tr;
    delta_pool_stats st;
    delta_pool_get_stats(r->pool, &st);
    rep.peak_live_bytes = st.peak_live_bytes;
    rep.peak_address = st.peak_address;

    span_list obs = {0};
    delta_pool_for_each_live_tagged(r->pool, collect_span, &obs);
    bool keep = rep.replayed && !obs.oom &&
                same_spans(obs.s, obs.n, r->plan_obs, r->n_plan_obs);
    /* the same trace around the same blocks as the last plan that did not
     * fit would not fit again (the planner is deterministic): reported
     * again without planning */
    bool over_again = !keep && r->over_valid && r->trace_ok && !obs.oom &&
                      r->sig == r->over_sig && r->n_tr == r->over_n &&
                      same_spans(obs.s, obs.n, r->over_obs, r->n_over_obs);
    if (over_again) {
        r->plan_ok = false;
        r->n_plan = 0;
        rep.planned = true;
        rep.plan_peak_bytes = r->over_peak;
        rep.plan_max_live_bytes = r->over_max_live;
        rep.plan_exceeds_capacity = true;
    } else if (!keep) {
        span *copy = obs.n ? malloc((size_t)obs.n * sizeof *copy) : NULL;
        if (copy) memcpy(copy, obs.s, (size_t)obs.n * sizeof *copy);
        int n_copy = obs.n;
        r->over_valid = false;
        if (r->trace_ok && !obs.oom) {
            make_plan(r, &obs, &rep, r->step);
        } else {
            r->plan_ok = false;
            r->n_plan = 0;
        }
        if (rep.planned && rep.plan_exceeds_capacity && (copy || !n_copy)) {
            r->over_valid = true;
            r->over_sig = r->sig;
            r->over_n = r->n_tr;
            free(r->over_obs);
            r->over_obs = copy;
            r->n_over_obs = n_copy;
            r->over_peak = rep.plan_peak_bytes;
            r->over_max_live = rep.plan_max_live_bytes;
            copy = NULL;
        }
        free(copy);
    }
    free(obs.s);
    free(obs.tag);
    r->in_step = false;
    r->step++;
    if (report) *report = rep;
}

bool delta_replay_replan(delta_replay *r, bool compacted,
                         delta_replay_step *report) {
    DELTA_ASSERTF(!r->in_step, "replay: replan inside a step");
    if (r->step == 0 || !r->trace_ok) return false;
    span_list obs = {0};
    delta_pool_for_each_live_tagged(r->pool, collect_span, &obs);
    bool ok = !obs.oom;
    if (ok && compacted) { /* in offset order, slid down */
        size_t at = 0;
        for (int i = 0; i < obs.n; i++) {
            obs.s[i].off = at;
            at += obs.s[i].size;
        }
    }
    delta_replay_step rep;
    memset(&rep, 0, sizeof rep);
    if (ok) make_plan(r, &obs, &rep, r->step - 1);
    ok = ok && rep.planned;
    if (!ok) {
        r->plan_ok = false;
        r->n_plan = 0;
    }
    free(obs.s);
    free(obs.tag);
    if (report) {
        report->planned = rep.planned;
        report->plan_peak_bytes = rep.plan_peak_bytes;
        report->plan_max_live_bytes = rep.plan_max_live_bytes;
        report->plan_exceeds_capacity = rep.plan_exceeds_capacity;
        report->plan_seconds += rep.plan_seconds;
    }
    return ok;
}
