/* The lifetime planner: offsets for one step's blocks so that no two blocks
 * alive at the same time overlap, by greedy-by-size placement into the
 * best-fitting gap (SmartPool, Zhang et al. 2019; TFLite's arena planner,
 * Pisarchyk & Lee 2020).
 *
 * Placed blocks are kept in an array sorted by offset. For each new block
 * (largest first) one pass over that array visits the placed blocks whose
 * intervals overlap its own, in offset order, tracking the highest end seen
 * so far; every hole between that end and the next overlapping block is a
 * gap, and the smallest gap that holds the block wins, else the block goes
 * on top of the highest end. That is O(n) per block, O(n^2) in all, with a
 * small constant (a 24-byte record per visited block). */
#include "delta/pool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct placed {
    size_t off, end;
    int first, last;
} placed;

typedef struct order_key {
    double key;   /* larger first */
    int tie, idx; /* then smaller tie, then lower index */
} order_key;

static int cmp_order(const void *a, const void *b) {
    const order_key *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    if (x->tie != y->tie) return x->tie < y->tie ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static order_key key_of(const delta_plan_block *b, int i, size_t s,
                        delta_plan_order order) {
    int life = b[i].last - b[i].first;
    switch (order) {
    case DELTA_PLAN_SIZE_LONGEST:
        return (order_key){(double)s, -life, i};
    case DELTA_PLAN_SIZE_LATEST:
        return (order_key){(double)s, -b[i].last, i};
    case DELTA_PLAN_SIZE_SQRT_LIFE:
        return (order_key){(double)s * sqrt((double)life + 1), 0, i};
    case DELTA_PLAN_SIZE:
    default:
        return (order_key){(double)s, b[i].first, i};
    }
}

typedef struct live_event {
    int64_t t;     /* time point; ends are at last + 1 */
    int64_t delta; /* +size at a start, -size at an end (as signed) */
} live_event;

static int cmp_event(const void *a, const void *b) {
    const live_event *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    /* ends before starts at the same point: a block ending at t - 1 is not
       alive at t */
    return (x->delta > y->delta) - (x->delta < y->delta);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Max over time points of the bytes alive, with ev as scratch (2n). */
static size_t max_live_with(const delta_plan_block *b, int n, live_event *ev,
                            int *at) {
    if (at) *at = n > 0 ? b[0].first : 0;
    if (n <= 0) return 0;
    for (int i = 0; i < n; i++) {
        int64_t s = (int64_t)delta_pool_round(b[i].size);
        ev[2 * i] = (live_event){b[i].first, s};
        ev[2 * i + 1] = (live_event){(int64_t)b[i].last + 1, -s};
    }
    qsort(ev, 2 * (size_t)n, sizeof *ev, cmp_event);
    int64_t cur = 0, best = 0;
    int best_t = b[0].first;
    for (size_t i = 0; i < 2 * (size_t)n; i++) {
        cur += ev[i].delta;
        if (cur > best) {
            best = cur;
            best_t = (int)ev[i].t;
        }
    }
    if (at) *at = best_t;
    return (size_t)best;
}

size_t delta_plan_max_live(const delta_plan_block *b, int n, int *at) {
    if (at) *at = 0;
    if (n <= 0) return 0;
    live_event *ev = malloc(2 * (size_t)n * sizeof *ev);
    if (!ev) return SIZE_MAX;
    size_t r = max_live_with(b, n, ev, at);
    free(ev);
    return r;
}

/* Index of the first placed record with off > x (insert position). */
static int upper_bound(const placed *p, int n, size_t x) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (p[mid].off <= x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static void insert_placed(placed *p, int *n, placed r) {
    int at = upper_bound(p, *n, r.off);
    memmove(p + at + 1, p + at, (size_t)(*n - at) * sizeof *p);
    p[at] = r;
    (*n)++;
}

delta_status delta_plan_place(const delta_plan_block *b, int n,
                              size_t *offsets, delta_plan_stats *stats) {
    return delta_plan_place_order(b, n, DELTA_PLAN_SIZE, offsets, stats);
}

delta_status delta_plan_place_order(const delta_plan_block *b, int n,
                                    delta_plan_order order, size_t *offsets,
                                    delta_plan_stats *stats) {
    double t0 = now_s();
    bool best_fit = order == DELTA_PLAN_SIZE;
    if (stats) memset(stats, 0, sizeof *stats);
    if (n < 0) return DELTA_ERR_INVALID_ARG;
    int n_free = 0;
    for (int i = 0; i < n; i++) {
        if (b[i].first > b[i].last || b[i].first < 0) return DELTA_ERR_INVALID_ARG;
        if (delta_pool_round(b[i].size) == SIZE_MAX) return DELTA_ERR_INVALID_ARG;
        if (b[i].fixed < -1 || (b[i].fixed >= 0 &&
                                b[i].fixed % DELTA_POOL_ALIGN != 0))
            return DELTA_ERR_INVALID_ARG;
        if (b[i].fixed < 0) n_free++;
    }
    placed *pl = malloc(((size_t)n + 1) * sizeof *pl);
    order_key *ord = malloc(((size_t)n_free + 1) * sizeof *ord);
    live_event *ev = malloc((2 * (size_t)n + 1) * sizeof *ev);
    if (!pl || !ord || !ev) {
        free(pl);
        free(ord);
        free(ev);
        return DELTA_ERR_NOMEM;
    }
    int n_pl = 0, k = 0;
    size_t peak = 0;
    for (int i = 0; i < n; i++) {
        size_t s = delta_pool_round(b[i].size);
        if (b[i].fixed >= 0) {
            size_t off = (size_t)b[i].fixed;
            offsets[i] = off;
            insert_placed(pl, &n_pl, (placed){off, off + s, b[i].first,
                                              b[i].last});
            if (off + s > peak) peak = off + s;
        } else {
            ord[k++] = key_of(b, i, s, order);
        }
    }
    qsort(ord, (size_t)n_free, sizeof *ord, cmp_order);
    for (k = 0; k < n_free; k++) {
        int i = ord[k].idx;
        size_t s = delta_pool_round(b[i].size);
        int first = b[i].first, last = b[i].last;
        size_t top = 0, best_off = 0, best_gap = SIZE_MAX;
        for (int j = 0; j < n_pl; j++) {
            const placed *q = &pl[j];
            if (q->last < first || q->first > last) continue;
            if (q->off > top) {
                size_t gap = q->off - top;
                if (gap >= s && gap < best_gap &&
                    (best_fit || best_gap == SIZE_MAX)) {
                    best_gap = gap;
                    best_off = top;
                }
            }
            if (q->end > top) top = q->end;
        }
        size_t off = best_gap != SIZE_MAX ? best_off : top;
        offsets[i] = off;
        insert_placed(pl, &n_pl, (placed){off, off + s, first, last});
        if (off + s > peak) peak = off + s;
    }
    free(pl);
    free(ord);
    if (stats) {
        stats->peak_bytes = peak;
        stats->max_live_bytes = max_live_with(b, n, ev, &stats->max_live_at);
        stats->n_blocks = n;
        stats->seconds = now_s() - t0;
    }
    free(ev);
    return DELTA_OK;
}
