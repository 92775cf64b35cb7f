/* Tests of the device-memory pool: the online allocator (random traces
 * against a shadow map of the arena), the lifetime planner, replay, the
 * caching-allocator emulation and dry planning of small models. */
#include "delta/delta.h"
#include "delta/dryplan.h"
#include "delta/pool.h"
#include "graph/graph_impl.h"

#include "test.h"
#include "test_models.h"

#include <stdint.h>
#include <time.h>

#define U DELTA_POOL_ALIGN
#define MiB ((size_t)1 << 20)

/* xorshift64*: a fixed-seed stream for the random traces */
static uint64_t rng_state;
static void rng_seed(uint64_t s) { rng_state = s * 0x9E3779B97F4A7C15ULL + 1; }
static uint64_t rng_next(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}
static size_t rng_below(size_t n) { return (size_t)(rng_next() % n); }

/* A request size: mostly small, some large, some not aligned. */
static size_t rand_size(void) {
    switch (rng_below(4)) {
    case 0: return 1 + rng_below(2 * U);
    case 1: return U * (1 + rng_below(16));
    case 2: return 1 + rng_below(64 * 1024);
    default: return U * (1 + rng_below(4096));
    }
}

/* ---- shadow map of the arena: one byte per alignment unit --------------- */

typedef struct shadow {
    unsigned char *u;
    size_t n;
} shadow;

static shadow shadow_new(size_t cap) {
    shadow s = {calloc(cap / U, 1), cap / U};
    return s;
}

/* Marks [off, off + size) used; returns false if any unit was in use. */
static bool shadow_take(shadow *s, size_t off, size_t size) {
    bool ok = off % U == 0 && size % U == 0 && off / U + size / U <= s->n;
    if (!ok) return false;
    for (size_t i = off / U; i < (off + size) / U; i++) {
        if (s->u[i]) ok = false;
        s->u[i] = 1;
    }
    return ok;
}

static void shadow_give(shadow *s, size_t off, size_t size) {
    for (size_t i = off / U; i < (off + size) / U && i < s->n; i++) s->u[i] = 0;
}

/* ---- online allocator ---------------------------------------------------- */

static void test_round(void) {
    CHECK(delta_pool_round(0) == U);
    CHECK(delta_pool_round(1) == U);
    CHECK(delta_pool_round(U) == U);
    CHECK(delta_pool_round(U + 1) == 2 * U);
    CHECK(delta_pool_round(SIZE_MAX) == SIZE_MAX);
    char err[128] = "";
    CHECK(delta_pool_new(U - 1, 8, err, sizeof err) == NULL && err[0]);
    CHECK(delta_pool_new(4 * U, 0, err, sizeof err) == NULL);
    delta_pool *p = delta_pool_new(10 * U + 17, 4, NULL, 0);
    delta_pool_stats s;
    delta_pool_get_stats(p, &s);
    CHECK(s.capacity == 10 * U, "capacity %zu", s.capacity);
    CHECK(s.n_free == 1 && s.largest_free == 10 * U && s.live_bytes == 0);
    CHECK(s.fragmentation == 1.0);
    delta_pool_free(p);
    delta_pool_free(NULL);
    delta_replay_free(NULL);
    delta_caching_free(NULL);
}

static void test_online_coalesce(void) {
    delta_pool *p = delta_pool_new(16 * U, 8, NULL, 0);
    size_t a, b, c;
    CHECK(delta_pool_alloc(p, U, &a) == DELTA_OK && a == 0);
    CHECK(delta_pool_alloc(p, 2 * U - 5, &b) == DELTA_OK && b == U);
    CHECK(delta_pool_alloc(p, U, &c) == DELTA_OK && c == 3 * U);
    CHECK(delta_pool_block_size(p, b) == 2 * U);
    CHECK(delta_pool_validate(p), "%s", delta_pool_error(p));
    delta_pool_stats s;
    CHECK(delta_pool_release(p, a) == DELTA_OK);
    CHECK(delta_pool_release(p, c) == DELTA_OK);
    delta_pool_get_stats(p, &s);
    CHECK(s.n_free == 2 && s.n_live == 1, "free %d live %d", s.n_free, s.n_live);
    CHECK(delta_pool_validate(p), "%s", delta_pool_error(p));
    CHECK(delta_pool_release(p, b) == DELTA_OK);
    delta_pool_get_stats(p, &s);
    CHECK(s.n_free == 1 && s.largest_free == 16 * U && s.live_bytes == 0);
    CHECK(s.peak_live_bytes == 4 * U && s.peak_address == 4 * U);
    CHECK(delta_pool_validate(p), "%s", delta_pool_error(p));
    delta_pool_free(p);
}

static void test_online_best_fit(void) {
    /* holes of 2, 1 and 4 units between live blocks: a 1-unit request takes
       the 1-unit hole, a 3-unit one the 4-unit hole's low end */
    delta_pool *p = delta_pool_new(64 * U, 16, NULL, 0);
    size_t sizes[] = {2, 1, 1, 1, 4, 1}, offs[6];
    for (int i = 0; i < 6; i++)
        CHECK(delta_pool_alloc(p, sizes[i] * U, &offs[i]) == DELTA_OK);
    CHECK(delta_pool_release(p, offs[0]) == DELTA_OK); /* hole 2 at 0 */
    CHECK(delta_pool_release(p, offs[2]) == DELTA_OK); /* hole 1 at 3U */
    CHECK(delta_pool_release(p, offs[4]) == DELTA_OK); /* hole 4 at 5U */
    size_t x;
    CHECK(delta_pool_alloc(p, 1, &x) == DELTA_OK && x == 3 * U, "x %zu", x);
    CHECK(delta_pool_alloc(p, 3 * U, &x) == DELTA_OK && x == 5 * U, "x %zu", x);
    CHECK(delta_pool_alloc(p, 2 * U, &x) == DELTA_OK && x == 0, "x %zu", x);
    CHECK(delta_pool_validate(p), "%s", delta_pool_error(p));
    delta_pool_free(p);
}

static void test_online_full(void) {
    delta_pool *p = delta_pool_new(8 * U, 3, NULL, 0);
    size_t a, b, c, d;
    CHECK(delta_pool_alloc(p, 9 * U, &a) == DELTA_ERR_BUDGET);
    CHECK(strstr(delta_pool_error(p), "no free range") != NULL, "%s",
          delta_pool_error(p));
    CHECK(delta_pool_alloc(p, 4 * U, &a) == DELTA_OK);
    CHECK(delta_pool_alloc(p, 3 * U, &b) == DELTA_OK);
    CHECK(delta_pool_alloc(p, 2 * U, &c) == DELTA_ERR_BUDGET);
    CHECK(delta_pool_alloc(p, U, &c) == DELTA_OK);
    /* block-table limit of 3 live blocks */
    CHECK(delta_pool_release(p, b) == DELTA_OK);
    CHECK(delta_pool_alloc(p, U, &b) == DELTA_OK);
    CHECK(delta_pool_alloc(p, U, &d) == DELTA_ERR_BUDGET);
    CHECK(strstr(delta_pool_error(p), "block table") != NULL, "%s",
          delta_pool_error(p));
    CHECK(delta_pool_reserve(p, 8) == DELTA_OK);
    CHECK(delta_pool_alloc(p, U, &d) == DELTA_OK);
    CHECK(delta_pool_validate(p), "%s", delta_pool_error(p));
    /* misuse is reported, not fatal */
    CHECK(delta_pool_release(p, U / 2) == DELTA_ERR_INVALID_ARG);
    CHECK(delta_pool_release(p, 6 * U) == DELTA_ERR_INVALID_ARG);
    CHECK(delta_pool_alloc_at(p, 0, U) == DELTA_ERR_BUDGET);
    CHECK(delta_pool_alloc_at(p, 3, U) == DELTA_ERR_INVALID_ARG);
    CHECK(delta_pool_alloc_at(p, 8 * U, U) == DELTA_ERR_BUDGET);
    CHECK(delta_pool_alloc_at(p, 7 * U, 2 * U) == DELTA_ERR_BUDGET);
    CHECK(delta_pool_validate(p), "%s", delta_pool_error(p));
    delta_pool_free(p);
}

typedef struct live_rec {
    size_t off, size;
} live_rec;

static void count_live(size_t off, size_t size, void *user) {
    size_t *acc = user;
    acc[0]++;
    acc[1] += size;
    if (off + size > acc[2]) acc[2] = off + size;
}

/* Random alloc / alloc_at / release sequences against a shadow map. */
static void test_online_random(void) {
    const size_t cap = 64 * MiB;
    for (uint64_t seed = 1; seed <= 4; seed++) {
        rng_seed(seed);
        delta_pool *p = delta_pool_new(cap, 4096, NULL, 0);
        shadow sh = shadow_new(cap);
        live_rec *live = malloc(4096 * sizeof *live);
        int n_live = 0, fails = 0, overlaps = 0, misaligned = 0, ops = 6000;
        size_t live_bytes = 0, max_live = 0;
        for (int i = 0; i < ops; i++) {
            bool do_alloc = n_live == 0 || (rng_below(100) < 55 && n_live < 4096);
            if (do_alloc) {
                size_t req = rand_size(), off = 0;
                delta_status st;
                if (rng_below(8) == 0) { /* a specific range */
                    off = rng_below(cap / U) * U;
                    st = delta_pool_alloc_at(p, off, req);
                    if (st != DELTA_OK) continue;
                } else {
                    st = delta_pool_alloc(p, req, &off);
                }
                if (st != DELTA_OK) {
                    CHECK(st == DELTA_ERR_BUDGET);
                    fails++;
                    continue;
                }
                size_t size = delta_pool_round(req);
                if (off % U) misaligned++;
                if (!shadow_take(&sh, off, size)) overlaps++;
                live[n_live++] = (live_rec){off, size};
                live_bytes += size;
                if (live_bytes > max_live) max_live = live_bytes;
            } else {
                int k = (int)rng_below((size_t)n_live);
                CHECK(delta_pool_release(p, live[k].off) == DELTA_OK);
                shadow_give(&sh, live[k].off, live[k].size);
                live_bytes -= live[k].size;
                live[k] = live[--n_live];
            }
            if (i % 97 == 0)
                CHECK(delta_pool_validate(p), "seed %llu op %d: %s",
                      (unsigned long long)seed, i, delta_pool_error(p));
        }
        CHECK(overlaps == 0 && misaligned == 0, "overlaps %d misaligned %d",
              overlaps, misaligned);
        delta_pool_stats s;
        delta_pool_get_stats(p, &s);
        CHECK(s.live_bytes == live_bytes && s.n_live == n_live);
        size_t acc[3] = {0, 0, 0};
        delta_pool_for_each_live(p, count_live, acc);
        CHECK(acc[0] == (size_t)n_live && acc[1] == live_bytes);
        CHECK(s.peak_live_bytes == max_live, "peak live %zu, shadow %zu",
              s.peak_live_bytes, max_live);
        CHECK(s.peak_address >= s.peak_live_bytes && s.peak_address <= cap);
        CHECK(s.fragmentation >= 1.0);
        /* reset: peaks restart from what is live */
        delta_pool_reset_peaks(p);
        delta_pool_get_stats(p, &s);
        CHECK(s.peak_live_bytes == live_bytes && s.peak_address == acc[2]);
        while (n_live > 0) {
            n_live--;
            CHECK(delta_pool_release(p, live[n_live].off) == DELTA_OK);
        }
        delta_pool_get_stats(p, &s);
        CHECK(s.live_bytes == 0 && s.n_live == 0 && s.n_free == 1 &&
              s.largest_free == cap, "live %zu free ranges %d largest %zu",
              s.live_bytes, s.n_free, s.largest_free);
        CHECK(delta_pool_validate(p), "%s", delta_pool_error(p));
        (void)fails;
        free(live);
        free(sh.u);
        delta_pool_free(p);
    }
}

/* ---- planner ------------------------------------------------------------- */

/* Returns the number of pairs alive together whose bytes overlap. */
static long plan_conflicts(const delta_plan_block *b, int n,
                           const size_t *off) {
    long bad = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            if (b[i].last < b[j].first || b[j].last < b[i].first) continue;
            size_t ei = off[i] + delta_pool_round(b[i].size);
            size_t ej = off[j] + delta_pool_round(b[j].size);
            if (off[i] < ej && off[j] < ei) bad++;
        }
    return bad;
}

static void test_plan_classic(void) {
    /* a chain: block i alive [i, i + 1], equal sizes -> two sizes */
    enum { N = 50 };
    delta_plan_block b[N];
    size_t off[N];
    for (int i = 0; i < N; i++) b[i] = (delta_plan_block){1000, i, i + 1, -1};
    delta_plan_stats st;
    CHECK(delta_plan_place(b, N, off, &st) == DELTA_OK);
    CHECK(st.max_live_bytes == 2 * 1024 && st.peak_bytes == 2 * 1024,
          "peak %zu max live %zu", st.peak_bytes, st.max_live_bytes);
    CHECK(plan_conflicts(b, N, off) == 0);
    /* disjoint blocks share one range */
    for (int i = 0; i < N; i++) b[i] = (delta_plan_block){U * 3, i, i, -1};
    CHECK(delta_plan_place(b, N, off, &st) == DELTA_OK);
    CHECK(st.peak_bytes == 3 * U && st.max_live_bytes == 3 * U);
    /* a forward/backward-like pyramid: activation i alive [i, 2N - i],
       sizes decreasing; the plan stacks them exactly */
    for (int i = 0; i < N; i++)
        b[i] = (delta_plan_block){(size_t)(N - i) * U, i, 2 * N - i, -1};
    CHECK(delta_plan_place(b, N, off, &st) == DELTA_OK);
    CHECK(st.peak_bytes == st.max_live_bytes, "peak %zu max live %zu",
          st.peak_bytes, st.max_live_bytes);
    CHECK(st.max_live_at == N - 1 || st.max_live_at == N, "at %d",
          st.max_live_at);
    /* the best-fitting gap: big blocks A [0,3] and B [0,3] at 0 and 8U with
       a 4U hole between them (C [0,1] occupies 4U..8U then ends); D [2,3]
       of 4U goes into the hole C leaves */
    delta_plan_block g[4] = {{4 * U, 0, 3, 0},
                             {4 * U, 0, 3, 8 * U},
                             {4 * U, 0, 1, 4 * U},
                             {4 * U, 2, 3, -1}};
    size_t go[4];
    CHECK(delta_plan_place(g, 4, go, &st) == DELTA_OK);
    CHECK(go[0] == 0 && go[1] == 8 * U && go[2] == 4 * U && go[3] == 4 * U,
          "D at %zu", go[3]);
    CHECK(st.peak_bytes == 12 * U);
    /* malformed input */
    delta_plan_block bad = {U, 3, 2, -1};
    CHECK(delta_plan_place(&bad, 1, off, NULL) == DELTA_ERR_INVALID_ARG);
    bad = (delta_plan_block){U, 0, 2, 100};
    CHECK(delta_plan_place(&bad, 1, off, NULL) == DELTA_ERR_INVALID_ARG);
    CHECK(delta_plan_place(NULL, 0, NULL, &st) == DELTA_OK &&
          st.peak_bytes == 0);
}

static void test_plan_random(void) {
    for (uint64_t seed = 11; seed <= 14; seed++) {
        rng_seed(seed);
        int n = 2000, horizon = 600;
        delta_plan_block *b = malloc((size_t)n * sizeof *b);
        size_t *off = malloc((size_t)n * sizeof *off);
        for (int i = 0; i < n; i++) {
            int f = (int)rng_below((size_t)horizon);
            int len = rng_below(4) == 0 ? (int)rng_below(300) : (int)rng_below(12);
            b[i] = (delta_plan_block){rand_size(), f, f + len, -1};
        }
        /* a few fixed blocks (disjoint ranges, whole horizon) */
        for (int i = 0; i < 5; i++)
            b[i] = (delta_plan_block){U * 10, 0, horizon + 300,
                                      (int64_t)(i * 20 * U)};
        delta_plan_stats st;
        CHECK(delta_plan_place(b, n, off, &st) == DELTA_OK);
        CHECK(plan_conflicts(b, n, off) == 0, "seed %llu",
              (unsigned long long)seed);
        size_t top = 0;
        int misaligned = 0;
        for (int i = 0; i < n; i++) {
            if (off[i] % U) misaligned++;
            size_t e = off[i] + delta_pool_round(b[i].size);
            if (e > top) top = e;
        }
        for (int i = 0; i < 5; i++) CHECK(off[i] == (size_t)(i * 20 * U));
        CHECK(misaligned == 0);
        CHECK(st.peak_bytes == top && st.peak_bytes >= st.max_live_bytes);
        CHECK(st.max_live_bytes == delta_plan_max_live(b, n, NULL));
        CHECK(st.peak_bytes <= st.max_live_bytes * 13 / 10,
              "peak %zu max live %zu", st.peak_bytes, st.max_live_bytes);
        free(b);
        free(off);
    }
}

static void test_plan_speed(void) {
    /* a GPT-2 XL-sized trace: ~5,600 blocks (its planning time is a
       benchmark figure, make bench-pool) */
    rng_seed(99);
    int n = 5600;
    delta_plan_block *b = malloc((size_t)n * sizeof *b);
    size_t *off = malloc((size_t)n * sizeof *off);
    for (int i = 0; i < n; i++) {
        int f = i * 3 / 2;
        int len = i < 1700 ? 9000 : (int)rng_below(4) == 0 ? 4000 : 3;
        b[i] = (delta_plan_block){rand_size(), i < 1700 ? 0 : f, f + len, -1};
    }
    delta_plan_stats st;
    CHECK(delta_plan_place(b, n, off, &st) == DELTA_OK);
    /* the time is reported, not checked: these machines are shared */
    printf("  planner: %d blocks in %.1f ms, peak/max-live %.4f\n", n,
           1e3 * st.seconds, (double)st.peak_bytes / (double)st.max_live_bytes);
    free(b);
    free(off);
}

/* ---- replay -------------------------------------------------------------- */

/* A step: a sequence of events; an alloc names its size and op, a release
 * names the event index of the alloc it frees. */
typedef struct step_ev {
    int alloc;      /* 1 alloc, 0 release */
    size_t size;
    int op;
    int target;     /* release: index of the alloc event */
} step_ev;

static int make_step(step_ev *ev, int max, uint64_t seed) {
    rng_seed(seed);
    int n = 0, live[512], n_live = 0;
    for (int op = 0; op < 400 && n < max - 4; op++) {
        int outs = 1 + (int)rng_below(2);
        for (int j = 0; j < outs && n_live < 512; j++) {
            live[n_live++] = n;
            ev[n++] = (step_ev){1, rand_size(), op, -1};
        }
        int frees = (int)rng_below(3);
        for (int j = 0; j < frees && n_live > 0; j++) {
            int k = (int)rng_below((size_t)n_live);
            ev[n++] = (step_ev){0, 0, op, live[k]};
            live[k] = live[--n_live];
        }
    }
    for (int k = 0; k < n_live; k++) /* everything freed by the step's end */
        ev[n++] = (step_ev){0, 0, 400, live[k]};
    return n;
}

/* Runs one step; offs[e] receives the offset of alloc event e. Counts
 * overlaps against the shadow map. */
static void run_step(delta_replay *r, const step_ev *ev, int n, size_t *offs,
                     shadow *sh, int *overlaps, delta_replay_step *rep) {
    delta_replay_step_begin(r);
    for (int e = 0; e < n; e++) {
        if (ev[e].alloc) {
            delta_status st = delta_replay_alloc(r, ev[e].size, ev[e].op, &offs[e]);
            CHECK(st == DELTA_OK, "%s", delta_replay_error(r));
            if (!shadow_take(sh, offs[e], delta_pool_round(ev[e].size)))
                (*overlaps)++;
        } else {
            int t = ev[e].target;
            CHECK(delta_replay_release(r, offs[t], ev[e].op) == DELTA_OK);
            shadow_give(sh, offs[t], delta_pool_round(ev[t].size));
        }
    }
    delta_replay_step_end(r, rep);
}

static void test_replay(void) {
    const size_t cap = 256 * MiB;
    enum { MAXEV = 4000 };
    step_ev *ev = malloc(MAXEV * sizeof *ev);
    size_t *o1 = malloc(MAXEV * sizeof *o1), *o2 = malloc(MAXEV * sizeof *o2),
           *o3 = malloc(MAXEV * sizeof *o3);
    int n = make_step(ev, MAXEV, 7);
    delta_replay *r = delta_replay_new(cap, 1024, NULL, 0);
    shadow sh = shadow_new(cap);
    int overlaps = 0;
    /* persistent blocks placed before the first step stay put */
    size_t pa, pb;
    CHECK(delta_replay_alloc(r, 3 * MiB, -1, &pa) == DELTA_OK);
    CHECK(delta_replay_alloc(r, 5 * MiB + 3, -1, &pb) == DELTA_OK);
    shadow_take(&sh, pa, 3 * MiB);
    shadow_take(&sh, pb, delta_pool_round(5 * MiB + 3));

    delta_replay_step rep;
    run_step(r, ev, n, o1, &sh, &overlaps, &rep);
    CHECK(!rep.had_plan && !rep.replayed && rep.planned && rep.step == 0);
    CHECK(!rep.plan_exceeds_capacity);
    CHECK(rep.plan_peak_bytes >= rep.plan_max_live_bytes);
    size_t online_peak = rep.peak_address, plan_max_live = rep.plan_max_live_bytes;

    run_step(r, ev, n, o2, &sh, &overlaps, &rep);
    CHECK(rep.had_plan && rep.replayed && rep.deviation_at == -1,
          "deviation at %d", rep.deviation_at);
    CHECK(rep.n_replayed == rep.n_allocs && !rep.planned,
          "replayed %d of %d", rep.n_replayed, rep.n_allocs);
    printf("  replay: online peak %zu, planned peak %zu, max live %zu\n",
           online_peak, rep.peak_address, plan_max_live);

    /* identical third step: same offsets as the second */
    run_step(r, ev, n, o3, &sh, &overlaps, &rep);
    CHECK(rep.replayed);
    int same = 0, allocs = 0;
    for (int e = 0; e < n; e++)
        if (ev[e].alloc) {
            allocs++;
            same += o2[e] == o3[e];
        }
    CHECK(same == allocs, "%d of %d offsets repeated", same, allocs);

    /* a deviating step: alloc k changes size; the rest goes online around
       the replayed blocks, and the next step is planned from it */
    int k_ev = -1, k = 0;
    for (int e = 0, a = 0; e < n; e++) {
        if (!ev[e].alloc) continue;
        if (a >= 300 && delta_pool_round(ev[e].size) > U) {
            k_ev = e;
            k = a;
            break;
        }
        a++;
    }
    CHECK(k_ev >= 0);
    ev[k_ev].size = 1; /* smaller: it would fit its planned range */
    run_step(r, ev, n, o3, &sh, &overlaps, &rep);
    CHECK(rep.had_plan && !rep.replayed && rep.deviation_at == k &&
          rep.deviation_op == ev[k_ev].op && rep.n_replayed == k && rep.planned,
          "deviation at %d (want %d), replayed %d", rep.deviation_at, k,
          rep.n_replayed);
    run_step(r, ev, n, o3, &sh, &overlaps, &rep);
    CHECK(rep.had_plan && rep.replayed, "deviation at %d", rep.deviation_at);

    /* fewer allocations than planned is a deviation too */
    run_step(r, ev, n / 2, o3, &sh, &overlaps, &rep);
    CHECK(!rep.replayed && rep.deviation_at == rep.n_allocs);
    /* clean up what that half step left live */
    for (int e = 0; e < n / 2; e++) {
        if (!ev[e].alloc) continue;
        bool freed = false;
        for (int f = e + 1; f < n / 2 && !freed; f++)
            freed = !ev[f].alloc && ev[f].target == e;
        if (!freed) {
            CHECK(delta_replay_release(r, o3[e], -1) == DELTA_OK);
            shadow_give(&sh, o3[e], delta_pool_round(ev[e].size));
        }
    }
    run_step(r, ev, n, o3, &sh, &overlaps, &rep);
    run_step(r, ev, n, o3, &sh, &overlaps, &rep);
    CHECK(rep.replayed);

    CHECK(overlaps == 0, "%d overlapping allocations", overlaps);
    CHECK(delta_pool_block_size(delta_replay_pool(r), pa) == 3 * MiB);
    CHECK(delta_pool_validate(delta_replay_pool(r)), "%s",
          delta_pool_error(delta_replay_pool(r)));
    CHECK(delta_replay_release(r, pa, -1) == DELTA_OK);
    CHECK(delta_replay_release(r, pb, -1) == DELTA_OK);
    CHECK(delta_replay_release(r, pb, -1) == DELTA_ERR_INVALID_ARG);
    delta_pool_stats s;
    delta_pool_get_stats(delta_replay_pool(r), &s);
    CHECK(s.live_bytes == 0 && s.n_free == 1 && s.largest_free == cap);
    delta_replay_free(r);
    free(sh.u);
    free(ev);
    free(o1);
    free(o2);
    free(o3);
}

static void test_replay_carried(void) {
    /* A block allocated in a step and kept past its end (like the loss,
       read by the caller and freed early in the next step): the plan keeps
       the old one in place for the whole step, so replay still fits. */
    delta_replay *r = delta_replay_new(64 * U, 64, NULL, 0);
    size_t loss = 0, a, b;
    bool have = false;
    delta_replay_step rep;
    for (int s = 0; s < 5; s++) {
        delta_replay_step_begin(r);
        if (have) CHECK(delta_replay_release(r, loss, 0) == DELTA_OK);
        CHECK(delta_replay_alloc(r, 8 * U, 0, &a) == DELTA_OK);
        CHECK(delta_replay_alloc(r, 8 * U, 1, &b) == DELTA_OK);
        CHECK(delta_replay_release(r, a, 1) == DELTA_OK);
        CHECK(delta_replay_alloc(r, U, 2, &loss) == DELTA_OK);
        CHECK(delta_replay_release(r, b, 2) == DELTA_OK);
        have = true;
        delta_replay_step_end(r, &rep);
        if (s >= 1) CHECK(rep.replayed, "step %d", s);
    }
    CHECK(delta_pool_validate(delta_replay_pool(r)));
    delta_replay_free(r);

    /* A plan that needs more than the capacity is reported and not used:
       a 2-unit block kept past the step in a 3-unit pool would need room
       for itself twice. */
    r = delta_replay_new(3 * U, 8, NULL, 0);
    delta_replay_step_begin(r);
    CHECK(delta_replay_alloc(r, 2 * U, 0, &a) == DELTA_OK);
    delta_replay_step_end(r, &rep);
    CHECK(rep.planned && rep.plan_exceeds_capacity && rep.plan_peak_bytes == 4 * U,
          "plan peak %zu", rep.plan_peak_bytes);
    delta_replay_step_begin(r);
    CHECK(delta_replay_release(r, a, 0) == DELTA_OK);
    CHECK(delta_replay_alloc(r, 2 * U, 0, &a) == DELTA_OK);
    delta_replay_step_end(r, &rep);
    CHECK(!rep.had_plan && !rep.replayed);
    delta_replay_free(r);
}

/* Keys: a block that leaves early in every step and comes back late (a
 * swapped parameter) is planned as released where its earlier block was,
 * and pinned where it sits, so the plan fits and is kept; without keys
 * the same step would need room for it twice. Keys also let a reordered
 * step follow its plan. */
static void test_replay_keys(void) {
    for (int keyed = 0; keyed < 2; keyed++) {
        delta_replay *r = delta_replay_new(12 * U, 16, NULL, 0);
        size_t p, a;
        CHECK(delta_replay_alloc_key(r, 4 * U, -1, keyed ? 7 : -1, &p) == DELTA_OK);
        delta_replay_step rep;
        for (int s = 0; s < 4; s++) {
            delta_replay_step_begin(r);
            CHECK(delta_replay_release_key(r, p, 0, keyed ? 7 : -1) == DELTA_OK);
            CHECK(delta_replay_alloc_key(r, 8 * U, 1, keyed ? 1 : -1, &a) == DELTA_OK);
            CHECK(delta_replay_alloc_key(r, 4 * U, 2, keyed ? 7 : -1, &p) == DELTA_OK);
            CHECK(delta_replay_release_key(r, a, 3, keyed ? 1 : -1) == DELTA_OK);
            delta_replay_step_end(r, &rep);
            if (!keyed) {
                CHECK(rep.planned && rep.plan_exceeds_capacity &&
                      rep.plan_peak_bytes == 16 * U, "unkeyed plan %zu",
                      rep.plan_peak_bytes);
            } else if (s == 0) {
                CHECK(rep.planned && !rep.plan_exceeds_capacity &&
                      rep.plan_peak_bytes == 12 * U);
            } else {
                CHECK(rep.replayed && !rep.planned && rep.repeated,
                      "step %d: replayed %d planned %d", s, rep.replayed,
                      rep.planned);
            }
        }
        CHECK(delta_pool_validate(delta_replay_pool(r)));
        delta_replay_free(r);
    }

    /* a step that makes the same allocations in another order */
    delta_replay *r = delta_replay_new(16 * U, 16, NULL, 0);
    delta_replay_step rep;
    size_t x, y, at;
    delta_replay_step_begin(r);
    CHECK(delta_replay_alloc_key(r, 2 * U, 0, 1, &x) == DELTA_OK);
    CHECK(delta_replay_alloc_key(r, 3 * U, 0, 2, &y) == DELTA_OK);
    CHECK(delta_replay_release_key(r, x, 1, 1) == DELTA_OK);
    CHECK(delta_replay_release_key(r, y, 1, 2) == DELTA_OK);
    delta_replay_step_end(r, &rep);
    CHECK(rep.planned && !rep.plan_exceeds_capacity);
    delta_replay_step_begin(r);
    CHECK(delta_replay_peek(r, 3 * U, 0, 2, &at) == DELTA_REPLAY_PLANNED);
    CHECK(delta_replay_peek(r, 2 * U, 0, 3, &at) == DELTA_REPLAY_ONLINE,
          "no plan entry for key 3");
    CHECK(delta_replay_peek(r, 4 * U, 0, 2, &at) == DELTA_REPLAY_ONLINE,
          "another size");
    CHECK(delta_replay_peek(r, 3 * U, -1, 2, &at) == DELTA_REPLAY_AHEAD,
          "before its op");
    size_t y2, x2;
    CHECK(delta_replay_alloc_key(r, 3 * U, 0, 2, &y2) == DELTA_OK && y2 == at);
    CHECK(delta_replay_alloc_key(r, 2 * U, 0, 1, &x2) == DELTA_OK);
    CHECK(delta_replay_release_key(r, y2, 1, 2) == DELTA_OK);
    /* a move keeps the block's place in the trace */
    size_t x3 = x2 < 8 * U ? 12 * U : 0;
    CHECK(delta_replay_move(r, x2, x3) == DELTA_OK);
    CHECK(delta_replay_move(r, x2, x3) == DELTA_ERR_INVALID_ARG);
    CHECK(delta_replay_release_key(r, x3, 1, 1) == DELTA_OK);
    /* an untraced block (stays for good) takes the lowest best fit */
    size_t keep;
    CHECK(delta_replay_alloc_untraced(r, U, &keep) == DELTA_OK);
    delta_replay_step_end(r, &rep);
    CHECK(rep.replayed && rep.n_replayed == 2 && rep.n_allocs == 2,
          "reordered step replayed %d (%d of %d)", rep.replayed,
          rep.n_replayed, rep.n_allocs);
    /* the untraced block is an obstacle now: planned around */
    CHECK(rep.planned && !rep.plan_exceeds_capacity);
    delta_replay_step_begin(r);
    delta_replay_next nx = delta_replay_peek(r, 2 * U, 0, 1, &at);
    CHECK(nx == DELTA_REPLAY_PLANNED && (at >= keep + U || at + 2 * U <= keep),
          "planned around the untraced block: %d at %zu", nx, at);
    delta_replay_step_end(r, &rep);
    delta_replay_free(r);

    /* BUSY: z reuses x's bytes in the plan; a step that still holds x when
     * z comes is told so, and an allocation then deviates */
    r = delta_replay_new(16 * U, 16, NULL, 0);
    size_t z;
    for (int s = 0; s < 2; s++) {
        delta_replay_step_begin(r);
        CHECK(delta_replay_alloc_key(r, 2 * U, 0, 1, &x) == DELTA_OK);
        if (s == 0) CHECK(delta_replay_release_key(r, x, 0, 1) == DELTA_OK);
        nx = delta_replay_peek(r, 2 * U, 1, 3, &at);
        CHECK(s == 0 ? nx == DELTA_REPLAY_ONLINE
                     : nx == DELTA_REPLAY_BUSY && at == x,
              "step %d: %d", s, nx);
        CHECK(delta_replay_alloc_key(r, 2 * U, 1, 3, &z) == DELTA_OK &&
              (s == 0 || z != x));
        if (s == 1) CHECK(delta_replay_release_key(r, x, 1, 1) == DELTA_OK);
        CHECK(delta_replay_release_key(r, z, 2, 3) == DELTA_OK);
        delta_replay_step_end(r, &rep);
        if (s == 1)
            CHECK(!rep.replayed && rep.deviation_at == 1 && rep.planned);
    }
    CHECK(delta_pool_validate(delta_replay_pool(r)));
    delta_replay_free(r);

    /* replan around compacted blocks: two kept blocks with a hole between */
    r = delta_replay_new(8 * U, 16, NULL, 0);
    size_t p1, p2, p3, a;
    CHECK(delta_replay_alloc(r, 2 * U, -1, &p1) == DELTA_OK);
    CHECK(delta_replay_alloc(r, 2 * U, -1, &p2) == DELTA_OK);
    CHECK(delta_replay_alloc(r, 2 * U, -1, &p3) == DELTA_OK);
    CHECK(delta_replay_release(r, p2, -1) == DELTA_OK);
    delta_replay_step_begin(r);
    CHECK(delta_replay_alloc(r, 2 * U, 0, &a) == DELTA_OK);
    CHECK(delta_replay_release(r, a, 1) == DELTA_OK);
    delta_replay_step_end(r, &rep);
    CHECK(rep.planned && rep.plan_peak_bytes == 6 * U, "plan %zu",
          rep.plan_peak_bytes);
    CHECK(delta_replay_replan(r, true, &rep) && rep.plan_peak_bytes == 6 * U &&
          !rep.plan_exceeds_capacity);
    CHECK(delta_replay_move(r, p3, 2 * U) == DELTA_OK);
    delta_replay_step_begin(r);
    CHECK(delta_replay_peek(r, 2 * U, 0, -1, &at) == DELTA_REPLAY_PLANNED &&
          at == 4 * U, "planned above the compacted blocks: %zu", at);
    CHECK(delta_replay_alloc(r, 2 * U, 0, &a) == DELTA_OK && a == 4 * U);
    CHECK(delta_replay_release(r, a, 1) == DELTA_OK);
    delta_replay_step_end(r, &rep);
    CHECK(rep.replayed && !rep.planned, "kept");
    CHECK(delta_pool_validate(delta_replay_pool(r)));
    delta_replay_free(r);
}

/* ---- caching emulation --------------------------------------------------- */

static void test_caching(void) {
    delta_caching *c = delta_caching_new();
    int h[8], seg;
    size_t off, size, ss;
    delta_caching_stats st;
    /* 1 byte: a 512 B block in a 2 MiB small segment */
    CHECK(delta_caching_alloc(c, 1, &h[0]) == DELTA_OK);
    CHECK(delta_caching_block(c, h[0], &seg, &off, &size, &ss) == DELTA_OK);
    CHECK(seg == 0 && off == 0 && size == 512 && ss == 2 * MiB);
    /* exactly 1 MiB is still small: same segment, after the first block */
    CHECK(delta_caching_alloc(c, MiB, &h[1]) == DELTA_OK);
    delta_caching_block(c, h[1], &seg, &off, &size, &ss);
    CHECK(seg == 0 && off == 512 && size == MiB);
    /* 1000 B rounds to 1024 */
    CHECK(delta_caching_alloc(c, 1000, &h[2]) == DELTA_OK);
    delta_caching_block(c, h[2], &seg, &off, &size, &ss);
    CHECK(seg == 0 && off == 512 + MiB && size == 1024);
    /* 1 MiB + 1: large pool, 1 MiB + 512 from a new 20 MiB segment, split */
    CHECK(delta_caching_alloc(c, MiB + 1, &h[3]) == DELTA_OK);
    delta_caching_block(c, h[3], &seg, &off, &size, &ss);
    CHECK(seg == 1 && off == 0 && size == MiB + 512 && ss == 20 * MiB);
    /* 10 MiB: its own segment of 10 MiB (rounded to 2 MiB) */
    CHECK(delta_caching_alloc(c, 10 * MiB, &h[4]) == DELTA_OK);
    delta_caching_block(c, h[4], &seg, &off, &size, &ss);
    CHECK(seg == 1 && size == 10 * MiB && off == MiB + 512,
          "best fit in the 20 MiB segment's remainder: seg %d off %zu", seg, off);
    /* 11 MiB + 1: rounds to 11 MiB + 512, doesn't fit the 8.5 MiB left:
       a 12 MiB segment; the remainder (1 MiB - 512) is not > 1 MiB, so the
       block keeps the whole segment */
    CHECK(delta_caching_alloc(c, 11 * MiB + 1, &h[5]) == DELTA_OK);
    delta_caching_block(c, h[5], &seg, &off, &size, &ss);
    CHECK(seg == 2 && off == 0 && size == 12 * MiB && ss == 12 * MiB,
          "seg %d size %zu segment %zu", seg, size, ss);
    delta_caching_get_stats(c, &st);
    CHECK(st.reserved_bytes == 34 * MiB && st.n_segments == 3 &&
          st.n_small_segments == 1, "reserved %zu", st.reserved_bytes);
    CHECK(st.requested_bytes == 1 + MiB + 1000 + MiB + 1 + 10 * MiB + 11 * MiB + 1);
    CHECK(st.allocated_bytes == 512 + MiB + 1024 + MiB + 512 + 10 * MiB + 12 * MiB);
    /* frees are cached and merge with neighbours; reserved never shrinks */
    CHECK(delta_caching_release(c, h[5]) == DELTA_OK);
    CHECK(delta_caching_release(c, h[5]) == DELTA_ERR_INVALID_ARG);
    CHECK(delta_caching_alloc(c, 12 * MiB - 100, &h[5]) == DELTA_OK);
    delta_caching_block(c, h[5], &seg, &off, &size, &ss);
    CHECK(seg == 2 && size == 12 * MiB, "cached segment reused");
    CHECK(delta_caching_release(c, h[3]) == DELTA_OK);
    CHECK(delta_caching_release(c, h[4]) == DELTA_OK);
    /* segment 1 is one free 20 MiB block again: a 19.5 MiB request takes it
       whole (remainder 0.5 MiB is not split off) */
    CHECK(delta_caching_alloc(c, 19 * MiB + MiB / 2, &h[3]) == DELTA_OK);
    delta_caching_block(c, h[3], &seg, &off, &size, &ss);
    CHECK(seg == 1 && off == 0 && size == 20 * MiB);
    /* a small request never comes from a large segment */
    CHECK(delta_caching_release(c, h[3]) == DELTA_OK);
    CHECK(delta_caching_alloc(c, MiB - 512 + 1, &h[6]) == DELTA_OK);
    delta_caching_block(c, h[6], &seg, &off, &size, &ss);
    CHECK(seg == 3 && ss == 2 * MiB && size == MiB, "seg %d", seg);
    delta_caching_get_stats(c, &st);
    CHECK(st.reserved_bytes == 36 * MiB && st.peak_reserved_bytes == 36 * MiB);
    CHECK(st.n_live == 5, "live %d", st.n_live);
    delta_caching_free(c);
}

/* ---- dry planning -------------------------------------------------------- */

static size_t sum_operands(const delta_ctx *ctx, int op_id) {
    const delta_op *op = delta_ctx_op(ctx, op_id);
    int roots[DELTA_MAX_OP_IN + DELTA_MAX_OP_OUT], nr = 0;
    size_t sum = 0;
    for (int j = 0; j < op->n_in + op->n_out; j++) {
        int id = j < op->n_in ? op->in[j] : op->out[j - op->n_in];
        int r = delta_tensor_root(ctx, id), dup = 0;
        for (int k = 0; k < nr; k++) dup |= roots[k] == r;
        if (dup) continue;
        roots[nr++] = r;
        sum += delta_pool_round(delta_tensor_bytes(delta_ctx_tensor(ctx, r)));
    }
    if (op->workspace) sum += delta_pool_round(op->workspace);
    return sum;
}

static void check_dry_plan(delta_ctx *ctx, delta_tensor *loss, const char *what) {
    CHECK(delta_ctx_status(ctx) == DELTA_OK, "%s: %s", what, delta_ctx_error(ctx));
    delta_dry_plan dp;
    char err[256];
    CHECK(delta_dry_plan_build(ctx, &dp, err, sizeof err) == DELTA_OK, "%s", err);
    CHECK(dp.n_ops == delta_ctx_n_ops(ctx));
    CHECK(dp.min_budget_bytes <= dp.peak_bytes, "%s: min %zu peak %zu", what,
          dp.min_budget_bytes, dp.peak_bytes);
    CHECK(dp.min_budget_op >= 0 && dp.min_budget_op < dp.n_ops);
    CHECK(sum_operands(ctx, dp.min_budget_op) + DELTA_DRY_ALIGN_SLACK ==
              dp.min_budget_bytes,
          "%s: op %d operands %zu, min budget %zu", what, dp.min_budget_op,
          sum_operands(ctx, dp.min_budget_op), dp.min_budget_bytes);
    for (int i = 0; i < dp.n_ops; i++)
        CHECK(sum_operands(ctx, i) <= dp.min_op_bytes);
    delta_op_info info;
    delta_ctx_op_info(ctx, dp.min_budget_op, &info);
    CHECK(strcmp(info.type, dp.min_budget_op_type) == 0 &&
          strcmp(info.name, dp.min_budget_op_name) == 0);
    CHECK(dp.persistent_bytes > 0 && dp.state_bytes > 0 && dp.grad_bytes > 0 &&
          dp.activation_bytes > 0);
    CHECK(dp.max_live_bytes >= dp.persistent_bytes + dp.input_bytes,
          "%s: persistent bytes alive throughout", what);
    CHECK(dp.peak_bytes >= dp.max_live_bytes);
    CHECK(dp.peak_bytes <= dp.max_live_bytes * 105 / 100,
          "%s: peak %zu, max live %zu", what, dp.peak_bytes, dp.max_live_bytes);
    printf("  %s: %d ops, peak %zu, max live %zu (%.4f), min budget %zu at "
           "op %d (%s %s)\n", what, dp.n_ops, dp.peak_bytes, dp.max_live_bytes,
           (double)dp.peak_bytes / (double)dp.max_live_bytes,
           dp.min_budget_bytes, dp.min_budget_op, dp.min_budget_op_type,
           dp.min_budget_op_name);

    /* the trace: one block per storage root, lifetimes as documented */
    int n = delta_dry_plan_trace(ctx, NULL, 0);
    CHECK(n == dp.n_blocks);
    delta_dry_block *b = malloc((size_t)n * sizeof *b);
    CHECK(delta_dry_plan_trace(ctx, b, n) == n);
    int nt = delta_ctx_n_tensors(ctx);
    int *seen = calloc((size_t)nt, sizeof *seen);
    int loss_root = delta_tensor_root(ctx, delta_tensor_id(loss));
    for (int i = 0; i < n; i++) {
        CHECK(b[i].first <= b[i].last && b[i].size % U == 0);
        if (b[i].tensor < 0) {
            CHECK(b[i].first == b[i].op && b[i].last == b[i].op);
            continue;
        }
        seen[b[i].tensor]++;
        const delta_tensor *t = delta_ctx_tensor(ctx, b[i].tensor);
        delta_tensor_kind k = delta_tensor_kind_of(t);
        if (k == DELTA_KIND_ACTIVATION || k == DELTA_KIND_GRAD) {
            CHECK(b[i].first == t->producer);
            /* every reader of the root (or its views) is inside */
            for (int o = 0; o < dp.n_ops; o++) {
                const delta_op *op = delta_ctx_op(ctx, o);
                for (int j = 0; j < op->n_in; j++)
                    if (delta_tensor_root(ctx, op->in[j]) == b[i].tensor)
                        CHECK(o >= b[i].first && o <= b[i].last);
            }
        } else {
            CHECK(b[i].first == 0 && b[i].last == dp.n_ops - 1);
        }
        if (b[i].tensor == loss_root) CHECK(b[i].last == dp.n_ops - 1);
    }
    for (int id = 0; id < nt; id++)
        CHECK(seen[id] == (delta_tensor_root(ctx, id) == id ? 1 : 0),
              "tensor %d has %d blocks", id, seen[id]);
    free(seen);
    free(b);
}

static void test_dry_plan_gpt(void) {
    delta_ctx *ctx = delta_ctx_new();
    delta_tensor *loss = tm_gpt(ctx, 2, 16, 32, 4, 2, 64, 0.1f);
    delta_backward(ctx, loss);
    delta_optimizer_adamw(ctx, (delta_adamw_opts){1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f});
    check_dry_plan(ctx, loss, "tm_gpt");
    delta_ctx_free(ctx);
}

static void test_dry_plan_convnet(void) {
    delta_ctx *ctx = delta_ctx_new();
    delta_tensor *loss = tm_convnet(ctx, 8, 16);
    delta_backward(ctx, loss);
    delta_optimizer_sgd(ctx, (delta_sgd_opts){0.1f, 0.9f, 0, false});
    check_dry_plan(ctx, loss, "tm_convnet");
    delta_ctx_free(ctx);
}

static void test_dry_plan_errors(void) {
    delta_ctx *ctx = delta_ctx_new();
    int64_t s[1] = {-3};
    delta_param(ctx, "bad", 1, s, tm_zeros());
    delta_dry_plan dp;
    char err[256] = "";
    if (delta_ctx_status(ctx) != DELTA_OK) {
        CHECK(delta_dry_plan_build(ctx, &dp, err, sizeof err) == DELTA_ERR_STATE);
        CHECK(strstr(err, "error") != NULL);
        CHECK(delta_dry_plan_trace(ctx, NULL, 0) == -1);
    }
    delta_ctx_free(ctx);
    /* an empty program */
    ctx = delta_ctx_new();
    CHECK(delta_dry_plan_build(ctx, &dp, err, sizeof err) == DELTA_OK);
    CHECK(dp.min_budget_op == -1 && dp.peak_bytes == 0 && dp.n_blocks == 0);
    delta_ctx_free(ctx);
}

int main(void) {
    TEST_RUN(test_round);
    TEST_RUN(test_online_coalesce);
    TEST_RUN(test_online_best_fit);
    TEST_RUN(test_online_full);
    TEST_RUN(test_online_random);
    TEST_RUN(test_plan_classic);
    TEST_RUN(test_plan_random);
    TEST_RUN(test_plan_speed);
    TEST_RUN(test_replay);
    TEST_RUN(test_replay_carried);
    TEST_RUN(test_replay_keys);
    TEST_RUN(test_caching);
    TEST_RUN(test_dry_plan_gpt);
    TEST_RUN(test_dry_plan_convnet);
    TEST_RUN(test_dry_plan_errors);
    TEST_MAIN_END();
}
