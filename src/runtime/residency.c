/* Moving bytes for the managed runtime (managed.h): device allocation under
 * the budget (collect finished copies, make a gap, wait for swap-outs, then ask
 * the policy), swap out and in on the copy streams, drop, recompute, and
 * running one op with its operands made resident.
 *
 * Layout. Every device allocation goes through one delta_replay (the pool's
 * replay, include/delta/pool.h), keyed by root id (n_tensors + op id for a
 * workspace), with the op being run as its op. A training step
 * (DELTA_RUN_STEP) is one replay step: its allocations and releases
 * (outputs, workspace, swap-ins on demand, prefetches at op boundaries,
 * swap-outs released when they land, drops, frees at last use,
 * recomputations) are its trace; at its end the lifetime planner places
 * the whole trace, and the next step gives each allocation the offset
 * planned for the same root's same occurrence while it makes the same
 * allocations. Outside training steps (persistent tensors placed at
 * creation, forward and eval runs) allocation is online and unrecorded; so
 * is the first production of a tensor that then stays for good (the loss,
 * the caller's outputs), which the next plan sees as an obstacle.
 *
 * Moves and replay: moves happen only in online mode. A step that follows
 * its plan never makes a gap: its planned ranges are free by construction
 * whenever it repeats the recorded step. When a planned range is busy
 * anyway (BUSY), the runtime first does what the recorded step had done by
 * then, without moving anything: collects landed copies and recomputed
 * temporaries and waits for the swap-outs whose bytes are in the way (a
 * copy landing later than in the recorded step: a stall, but the step stays
 * on its plan). If the bytes in use leave no room for the allocation at
 * all, the recorded step necessarily evicted here too, so the usual
 * remedies run (waiting for swap-outs, then the policy's victims), still
 * without moves. Only when none of that frees the range, or the plan has
 * no such allocation, is the allocation a deviation: from there on the
 * step is online, where making a gap (moving blocks) is allowed as before,
 * and the step is planned again from its own trace. Moved blocks keep
 * their identity in the trace (delta_replay_move), so a step with moves
 * still plans the next one exactly. A prefetch in a step that follows its
 * plan is made only where the plan has it (its range free, not at an
 * earlier op than recorded); otherwise it is refused and the policy may
 * try again, so an optional copy never breaks a replay nor takes bytes
 * planned for others. Both guarantees stay: the pool is exactly the budget
 * and checks every range, so a plan is only ever an offset suggestion, and
 * bytes never depend on where a tensor sits.
 *
 * When the plan of a step peaks above the budget, managed_run asks what
 * the plan would be with the blocks that stay slid to the bottom of the
 * arena (online moves scatter persistent tensors); if that fits, it
 * compacts them (moves counted in that step) and keeps that plan; it tries
 * this the first time and whenever the step repeated the one before it.
 * Otherwise the plan is not used: the next step runs online, and the
 * policy hears MEV_LAYOUT_OVER with the excess (managed.h).
 *
 * Ordering. The to-host stream waits for the compute stream before it
 * reads a tensor a kernel wrote; the to-device stream waits for it before
 * it writes bytes a kernel may have used; compute waits for a swap-in's
 * event before the tensor is read. Device bytes of a swap-out are released
 * only once its copy is complete and no running op has it pinned. */
#include "runtime/managed_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool mg_failf(managed *m, delta_status st, const char *fmt, ...) {
    if (m->fail_st != DELTA_OK) return false;
    m->fail_st = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, sizeof m->err, fmt, ap);
    va_end(ap);
    return false;
}

static double now(managed *m) { return delta_backend_clock(m->b); }

static void *dev(managed *m, int r) {
    return m->base ? (char *)m->base + m->off[r] : NULL;
}


void mg_trace_memory(managed *m) {
    if (m->trace) delta_trace_memory(m->trace, now(m), m->in_use, m->arena);
}

/* ---- rings --------------------------------------------------------------- */

static int copy_side(delta_stream s) { return s == DELTA_STREAM_TO_HOST ? 0 : 1; }

/* The tag ring of a stream's events: the two copy streams', and the
 * collectives' (comm). */
static int tag_side(delta_stream s) {
    return s == DELTA_STREAM_COMM ? 2 : copy_side(s);
}
static const delta_stream tag_stream[3] = {
    DELTA_STREAM_TO_HOST, DELTA_STREAM_TO_DEVICE, DELTA_STREAM_COMM};

/* ---- stream-ordered release ------------------------------------------------
 * Bytes given back while a copy may still read or write them carry that
 * copy's event (a tag); whoever takes any of them next on another stream
 * waits for it on the device. Bytes the compute stream gave back need no
 * tag: every copy into the arena is issued after the to-device stream
 * waited for the compute stream's end (issue_swap_in), and so is every
 * collective. Bytes a collective may still read or write (its operands',
 * its workspace) are tagged with its event. */

static void tag_range(managed *m, size_t off, size_t size, delta_event e) {
    mg_tag t = {off, size, e};
    if (!RING_PUSH(m->tags[tag_side(e.stream)], t)) {
        /* no memory for the tag: wait now instead (counted) */
        delta_backend_sync(m->b, e);
    }
}

/* Stream s is about to use [off, off + size): it waits for every tag of
 * another stream on those bytes (the latest per stream suffices: a stream
 * is in order). */
static void await_tags(managed *m, delta_stream s, size_t off, size_t size) {
    for (int side = 0; side < 3; side++) {
        delta_stream ts = tag_stream[side];
        if (ts == s) continue;
        delta_event last = {0};
        for (int i = 0; i < m->tags[side].n; i++) {
            const mg_tag *t = &RING_AT(m->tags[side], i);
            if (t->off < off + size && off < t->off + t->size &&
                t->e.seq > last.seq)
                last = t->e;
        }
        if (!last.seq) continue;
        delta_backend_wait(m->b, s, last);
        if (s == DELTA_STREAM_COMPUTE && m->cur_issue)
            m->cur_issue->waited = true;
    }
}

/* ---- pool ---------------------------------------------------------------- */

/* A block for `key` (a root, or nt + op for workspace) through the replay:
 * its planned offset while the step follows its plan, else online best
 * fit. untraced: a block that stays for good, kept out of the step's
 * trace. s: the stream that will write it first (it waits for the tags on
 * those bytes). */
static bool pool_take(managed *m, size_t bytes, int key, bool untraced,
                      delta_stream s, size_t *off) {
    delta_status st;
    if (m->pol->place) {
        /* a static layout: its offset is free by construction */
        DELTA_ASSERT(m->pol->place(m->pst, m, key, bytes, off));
        st = delta_replay_alloc_at_untraced(m->rp, *off, bytes);
        DELTA_ASSERTF(st == DELTA_OK, "policy %s placed block %d at %zu, "
                      "which is not free: %s", m->pol->name, key, *off,
                      delta_replay_error(m->rp));
    } else {
        st = untraced ? delta_replay_alloc_untraced(m->rp, bytes, off)
                      : delta_replay_alloc_key(m->rp, bytes, m->cur_op, key,
                                               off);
    }
    if (st != DELTA_OK) return false;
    m->in_use += delta_pool_round(bytes);
    await_tags(m, s, *off, delta_pool_round(bytes));
    mg_trace_memory(m);
    return true;
}

bool mg_place_untraced(managed *m, size_t bytes, int key, size_t *off) {
    if (m->pol->place) return pool_take(m, bytes, key, true, DELTA_STREAM_COMPUTE, off);
    if (delta_replay_alloc_key(m->rp, bytes, -1, key, off) != DELTA_OK)
        return false;
    m->in_use += delta_pool_round(bytes);
    return true;
}

/* Gives the block at off back; tag: the event of a copy that may still
 * touch it (seq 0: none, the compute stream was its last user). A root
 * whose last collective may still touch it gets that one's event instead
 * (any copy of it was issued after that collective). */
static void pool_give(managed *m, size_t off, int key, delta_event tag) {
    size_t n = delta_pool_block_size(m->pool, off);
    if (!tag.seq && key < m->nt && m->comm_ev[key].seq) {
        if (delta_backend_query(m->b, m->comm_ev[key])) m->comm_ev[key].seq = 0;
        else tag = m->comm_ev[key];
    }
    DELTA_ASSERT(n > 0 &&
                 delta_replay_release_key(m->rp, off, m->cur_op, key) == DELTA_OK);
    if (tag.seq) tag_range(m, off, n, tag);
    m->in_use -= n;
    mg_trace_memory(m);
}

static const delta_event NO_EVENT = {0};

/* ---- copies in flight ---------------------------------------------------- */

static void link_sample(managed *m, bool to_host, double bytes, double s) {
    struct link_fit *f = &m->lk[to_host ? 0 : 1];
    f->n += 1;
    f->sx += bytes;
    f->sy += s;
    f->sxx += bytes * bytes;
    f->sxy += bytes * s;
}

/* A complete copy: trace and measure it. */
static void copy_done(managed *m, const mg_copy *c) {
    double t0, t1;
    bool to_host = c->e.stream == DELTA_STREAM_TO_HOST;
    if (!delta_backend_span(m->b, c->e, &t0, &t1)) return;
    link_sample(m, to_host, (double)c->bytes, t1 - t0);
    if (m->trace) {
        char args[96];
        snprintf(args, sizeof args, "\"bytes\":%zu,\"tensor\":%d", c->bytes,
                 c->r);
        delta_trace_span(m->trace,
                         to_host ? DELTA_TRACK_TO_HOST : DELTA_TRACK_TO_DEVICE,
                         mg_tname(m, c->r), to_host ? "swap_out" : "swap_in", t0,
                         t1, args);
    }
}

/* Issues a copy on copy stream s, labelled with r's name for the stream
 * checker, and queues it for collection. */
static delta_event issue_copy(managed *m, delta_stream s, int r, void *dst,
                              const void *src, size_t bytes) {
    delta_backend_label(m->b, s, mg_tname(m, r));
    delta_backend_copy(m->b, s, dst, src, bytes);
    mg_copy c = {r, bytes, delta_backend_record(m->b, s)};
    if (!RING_PUSH(m->copies[copy_side(s)], c)) {
        delta_backend_sync(m->b, c.e); /* untracked: wait for it now */
        copy_done(m, &c);
    }
    return c.e;
}

/* Takes r off the list of swap-outs in flight (issue order kept). */
static void outgoing_remove(managed *m, int r) {
    int k = 0;
    for (int i = 0; i < m->n_outgoing; i++)
        if (m->outgoing[i] != r) m->outgoing[k++] = m->outgoing[i];
    m->n_outgoing = k;
}

/* Gives back the device bytes of r's swap-out (RES_TO_HOST, unpinned):
 * landed (the host saw the copy complete), or ahead of that, tagged with
 * the copy's event so that the next user waits for it on the device. */
static void release_swap_out(managed *m, int r, bool landed) {
    root_view *v = &m->rv[r];
    DELTA_ASSERT(v->state == RES_TO_HOST && m->pins[r] == 0);
    outgoing_remove(m, r);
    pool_give(m, m->off[r], r, landed ? NO_EVENT : m->ev[r]);
    if (m->free_after[r]) {
        m->free_after[r] = false;
        v->state = RES_FREE;
        v->host_valid = false;
        mg_notify(m, r, MEV_FREED, 0);
    } else {
        v->state = RES_HOST;
        v->host_valid = true;
    }
}

/* The oldest unpinned swap-out gives its bytes back ahead of landing
 * (stream-ordered); false when there is none. */
static bool release_oldest_swap_out(managed *m) {
    for (int i = 0; i < m->n_outgoing; i++) {
        int r = m->outgoing[i];
        if (m->pins[r] > 0) continue;
        release_swap_out(m, r, false);
        return true;
    }
    return false;
}

/* The unpinned swap-outs whose bytes overlap [at, at + need) give them
 * back ahead of landing; false when there were none. */
static bool release_swap_outs_in(managed *m, size_t at, size_t need) {
    bool any = false;
    for (int i = 0; i < m->n_outgoing;) {
        int r = m->outgoing[i];
        if (m->pins[r] > 0 || m->off[r] >= at + need ||
            m->off[r] + m->rv[r].bytes <= at) {
            i++;
            continue;
        }
        release_swap_out(m, r, false); /* removes it from outgoing */
        any = true;
    }
    return any;
}

void mg_collect(managed *m) {
    /* swap-outs predicted to have landed by where compute is give their
     * bytes back (tagged with the copy's event when the host has not seen
     * it complete: a late copy costs a device-side wait, not the plan);
     * they land in issue order, so the first one still ahead ends it */
    for (int i = 0; i < m->n_outgoing;) {
        int r = m->outgoing[i];
        if (m->out_end[r] > m->vt) break;
        if (m->pins[r] > 0) { /* an op being run reads it */
            i++;
            continue;
        }
        release_swap_out(m, r, delta_backend_query(m->b, m->ev[r]));
    }
    for (int side = 0; side < 2; side++) {
        while (m->copies[side].n) {
            mg_copy *c = &RING_AT(m->copies[side], 0);
            if (!delta_backend_query(m->b, c->e)) break; /* in order */
            copy_done(m, c);
            root_view *v = &m->rv[c->r];
            /* a swap-in known complete by the host: resident, and every
             * later item is issued after it */
            if (v->state == RES_TO_DEVICE && m->ev[c->r].seq == c->e.seq &&
                m->ev[c->r].stream == c->e.stream)
                v->state = RES_DEVICE;
            RING_POP(m->copies[side]);
        }
    }
    for (int side = 0; side < 3; side++)
        while (m->tags[side].n &&
               delta_backend_query(m->b, RING_AT(m->tags[side], 0).e))
            RING_POP(m->tags[side]);
}

/* Root r's swap-in becomes resident for the compute stream: compute waits
 * for its copy on the device; the op being issued notes it so that its
 * timing tells whether it stalled. */
static void settle_swap_in(managed *m, int r) {
    delta_backend_wait(m->b, DELTA_STREAM_COMPUTE, m->ev[r]);
    mg_issued *is = m->cur_issue;
    if (is) is->waited = true;
    if (is && is->n_awaited < DELTA_MAX_OP_IN) {
        is->awaited[is->n_awaited] = r;
        is->awaited_e[is->n_awaited++] = m->ev[r];
    }
    m->rv[r].state = RES_DEVICE;
}

/* The compute stream waits for everything issued on both copy streams and
 * on the communication stream, on the device: every swap-in is then
 * resident for compute, and every tag is behind it. */
static void join_copies(managed *m) {
    delta_backend_wait(m->b, DELTA_STREAM_COMPUTE,
                       delta_backend_record(m->b, DELTA_STREAM_TO_HOST));
    delta_backend_wait(m->b, DELTA_STREAM_COMPUTE,
                       delta_backend_record(m->b, DELTA_STREAM_TO_DEVICE));
    delta_backend_wait(m->b, DELTA_STREAM_COMPUTE,
                       delta_backend_record(m->b, DELTA_STREAM_COMM));
    if (m->cur_issue) m->cur_issue->waited = true;
    for (int i = 0; i < m->copies[1].n; i++) {
        int r = RING_AT(m->copies[1], i).r;
        if (m->rv[r].state == RES_TO_DEVICE) m->rv[r].state = RES_DEVICE;
    }
}

/* After join_copies: compute is behind every copy, so every unpinned
 * swap-out's bytes can go back untagged (a later swap-in into them waits
 * for the compute stream's end before it writes). */
static void release_joined_swap_outs(managed *m) {
    for (int i = m->n_outgoing - 1; i >= 0; i--)
        if (m->pins[m->outgoing[i]] == 0)
            release_swap_out(m, m->outgoing[i], true);
}

delta_event mg_join(managed *m) {
    join_copies(m);
    release_joined_swap_outs(m);
    return delta_backend_record(m->b, DELTA_STREAM_COMPUTE);
}

void mg_drain(managed *m) {
    join_copies(m);
    delta_backend_sync_copies(m->b);
    mg_collect(m);
}


/* ---- making a gap ---------------------------------------------------------
 * When the free bytes suffice but no gap does, blocks are moved with
 * device-side copies, between kernels (no workspace is live then and no
 * kernel holds an address) and with no copy in flight. First choice: the
 * window of `need` bytes, starting at a gap, whose overlapping blocks are
 * fewest bytes, those blocks moving to gaps outside it (best fit, largest
 * first, checked before anything moves). Otherwise every block slides down
 * to the bottom of the arena. Only in online mode (see the top): the pool
 * side of each move is delta_replay_move, so the trace is unchanged. */

static int cmp_offset(const void *a, const void *b) {
    size_t x = ((const mg_slot *)a)->off, y = ((const mg_slot *)b)->off;
    return x < y ? -1 : x > y;
}

/* Live roots into m->scratch, by offset; returns how many. */
static int live_by_offset(managed *m) {
    int n = 0;
    for (int r = 0; r < m->nt; r++) {
        if (!m->is_root[r]) continue;
        residency s = m->rv[r].state;
        if (s == RES_DEVICE || s == RES_TO_HOST || s == RES_TO_DEVICE)
            m->scratch[n++] = (mg_slot){m->off[r], r};
    }
    qsort(m->scratch, (size_t)n, sizeof *m->scratch, cmp_offset);
    return n;
}

static size_t slot_end(const managed *m, const mg_slot *s) {
    return s->off + m->rv[s->r].bytes;
}

static void move_block(managed *m, int r, size_t to) {
    size_t sz = m->rv[r].bytes;
    mg_after_comm(m, DELTA_STREAM_COMPUTE, r);
    DELTA_ASSERTF(delta_replay_move(m->rp, m->off[r], to) == DELTA_OK,
                  "a checked move did not fit: %s", delta_replay_error(m->rp));
    await_tags(m, DELTA_STREAM_COMPUTE, to, sz);
    delta_backend_label(m->b, DELTA_STREAM_COMPUTE, mg_tname(m, r));
    delta_backend_copy(m->b, DELTA_STREAM_COMPUTE,
                       m->base ? (char *)m->base + to : NULL,
                       m->base ? (char *)m->base + m->off[r] : NULL, sz);
    m->st.defrag_moves++;
    m->st.defrag_bytes += sz;
    m->off[r] = to;
}

/* Every block slides down, in offset order (so dst < src never overwrites
 * a block not yet moved). */
static void compact_all(managed *m, int n) {
    size_t at = 0;
    for (int k = 0; k < n; k++) {
        int r = m->scratch[k].r;
        if (at != m->off[r]) move_block(m, r, at);
        at += m->rv[r].bytes;
    }
}

/* (bytes, slot) pairs: larger first, then the lower slot (a sort that
 * gives the order of picking the first largest again and again, in
 * O(m log m) rather than O(m^2) for a window of m blocks). */
static int cmp_larger_first(const void *a, const void *b) {
    const mg_slot *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? 1 : -1;
    return (x->r > y->r) - (x->r < y->r);
}

/* Would blocks [k, j) of the sorted list fit, largest first and best fit,
 * in the gaps outside [lo, hi)? On yes, m->dest[i] holds where block i
 * goes (the low end of its gap). Uses m->gaps and m->gap_off as scratch. */
static bool moves_fit(managed *m, int n, int k, int j, size_t lo, size_t hi,
                      size_t cap) {
    int ng = 0;
    size_t prev = 0;
    for (int i = 0; i <= n; i++) {
        size_t start = i < n ? m->scratch[i].off : cap;
        size_t a = prev, b = start;
        /* the part of the gap [a, b) outside [lo, hi) */
        if (b > a) {
            if (b <= lo || a >= hi) {
                m->gap_off[ng] = a;
                m->gaps[ng++] = b - a;
            } else {
                if (a < lo) {
                    m->gap_off[ng] = a;
                    m->gaps[ng++] = lo - a;
                }
                if (b > hi) {
                    m->gap_off[ng] = hi;
                    m->gaps[ng++] = b - hi;
                }
            }
        }
        if (i < n) prev = slot_end(m, &m->scratch[i]);
    }
    /* blocks largest first (the lower slot first among equals), each
     * into the smallest gap that holds it */
    int cnt = j - k;
    size_t largest_gap = 0, largest_block = 0;
    for (int g = 0; g < ng; g++)
        if (m->gaps[g] > largest_gap) largest_gap = m->gaps[g];
    for (int i = k; i < j; i++) {
        size_t sz = m->rv[m->scratch[i].r].bytes;
        m->order[i - k] = (mg_slot){sz, i};
        if (sz > largest_block) largest_block = sz;
    }
    /* the largest goes first: when no gap holds it, nothing is tried */
    if (largest_block > largest_gap) return false;
    qsort(m->order, (size_t)cnt, sizeof *m->order, cmp_larger_first);
    for (int q = 0; q < cnt; q++) {
        int big = m->order[q].r;
        size_t sz = m->order[q].off;
        int best = -1;
        for (int g = 0; g < ng; g++)
            if (m->gaps[g] >= sz && (best < 0 || m->gaps[g] < m->gaps[best]))
                best = g;
        if (best < 0) return false;
        m->dest[big] = m->gap_off[best];
        m->gap_off[best] += sz;
        m->gaps[best] -= sz;
    }
    return true;
}

/* Moves blocks [k, j) out of [lo, hi) to the places moves_fit chose: all
 * in gaps outside the window, so no new place overlaps an old one. */
static void evacuate(managed *m, int n, int k, int j, size_t lo, size_t hi,
                     size_t cap) {
    DELTA_ASSERT(moves_fit(m, n, k, j, lo, hi, cap));
    for (int i = k; i < j; i++) move_block(m, m->scratch[i].r, m->dest[i]);
}

static bool in_flight(const managed *m, int r) {
    return m->rv[r].state == RES_TO_HOST || m->rv[r].state == RES_TO_DEVICE;
}

/* The cheapest window of need bytes whose blocks can all move (none has a
 * copy in flight) and fit elsewhere; false when there is none. */
static bool best_window(managed *m, int n, size_t need, size_t cap,
                        size_t free_total, int *bk, int *bj, size_t *blo,
                        size_t *bhi) {
    size_t best_cost = SIZE_MAX, cost = 0;
    int j = 0, pinned_in = 0; /* in-flight blocks among [k, j) */
    for (int k = 0; k <= n; k++) {
        size_t lo = k == 0 ? 0 : slot_end(m, &m->scratch[k - 1]);
        if (lo + need > cap) break;
        if (j < k) {
            j = k;
            cost = 0;
            pinned_in = 0;
        }
        while (j < n && m->scratch[j].off < lo + need) {
            cost += m->rv[m->scratch[j].r].bytes;
            pinned_in += in_flight(m, m->scratch[j].r);
            j++;
        }
        size_t hi = j > k ? slot_end(m, &m->scratch[j - 1]) : lo + need;
        if (hi < lo + need) hi = lo + need;
        size_t free_in = (hi - lo) - cost;
        if (!pinned_in && cost < best_cost && free_total - free_in >= cost &&
            moves_fit(m, n, k, j, lo, hi, cap)) {
            best_cost = cost;
            *bk = k;
            *bj = j;
            *blo = lo;
            *bhi = hi;
        }
        if (j > k) {
            cost -= m->rv[m->scratch[k].r].bytes;
            pinned_in -= in_flight(m, m->scratch[k].r);
        }
    }
    return best_cost != SIZE_MAX;
}

static void make_gap(managed *m, size_t need) {
    delta_pool_stats ps;
    delta_pool_get_stats(m->pool, &ps);
    double t0 = now(m);
    int n = live_by_offset(m);
    size_t cap = ps.capacity, free_total = cap - ps.live_bytes;
    int k = -1, j = -1;
    size_t lo = 0, hi = 0;
    if (best_window(m, n, need, cap, free_total, &k, &j, &lo, &hi)) {
        evacuate(m, n, k, j, lo, hi, cap);
    } else {
        /* swap-ins in flight are in the way: the compute stream waits for
         * them on the device (the moves queue behind them), then every
         * block slides down */
        join_copies(m);
        release_joined_swap_outs(m);
        delta_pool_get_stats(m->pool, &ps);
        if (ps.largest_free < need) compact_all(m, live_by_offset(m));
    }
    mg_trace_memory(m);
    if (m->trace)
        delta_trace_span(m->trace, DELTA_TRACK_COMPUTE, "defragment arena",
                         "defrag", t0, now(m), NULL);
}

bool mg_compacted(managed *m) {
    int n = live_by_offset(m);
    size_t at = 0;
    for (int k = 0; k < n; k++) {
        if (m->scratch[k].off != at) return false;
        at += m->rv[m->scratch[k].r].bytes;
    }
    return true;
}

bool mg_compact(managed *m) {
    DELTA_ASSERT(m->cur_op < 0);
    join_copies(m);
    release_joined_swap_outs(m);
    if (mg_compacted(m)) return false;
    int n = live_by_offset(m);
    double t0 = now(m);
    compact_all(m, n);
    mg_trace_memory(m);
    if (m->trace)
        delta_trace_span(m->trace, DELTA_TRACK_COMPUTE, "defragment arena",
                         "defrag", t0, now(m), NULL);
    return true;
}

/* ---- eviction ------------------------------------------------------------ */

bool mg_host_alloc(managed *m, int r) {
    size_t bytes = m->rv[r].bytes;
    char need[32], held[32], cap[32];
    delta_format_bytes((double)bytes, need, sizeof need);
    delta_format_bytes((double)m->host_in_use, held, sizeof held);
    if (m->host_limit && bytes > m->host_limit - m->host_in_use)
        return mg_failf(m, DELTA_ERR_NOMEM, "the host store for swapped "
                        "tensors is full: '%s' needs %s more, %s of its "
                        "limit of %s are held", mg_tname(m, r), need, held,
                        delta_format_bytes((double)m->host_limit, cap,
                                           sizeof cap));
    m->host[r] = delta_backend_host_alloc(m->b, bytes);
    if (!m->host[r])
        return mg_failf(m, DELTA_ERR_NOMEM, "host memory for swapped "
                        "tensors cannot be had: '%s' needs %s more, %s are "
                        "held", mg_tname(m, r), need, held);
    m->host_in_use += bytes;
    return true;
}

static bool host_buffer(managed *m, int r) {
    return m->host[r] || mg_host_alloc(m, r);
}

bool managed_swap_out(managed *m, int r) {
    if (!m->is_root[r] || m->rv[r].state != RES_DEVICE || m->pins[r] > 0)
        return false;
    root_view *v = &m->rv[r];
    if (v->host_valid) { /* the host store already has these bytes */
        pool_give(m, m->off[r], r, NO_EVENT);
        v->state = RES_HOST;
        mg_notify(m, r, MEV_SWAPPED_OUT, 0);
        return true;
    }
    if (!host_buffer(m, r)) return false;
    /* the copy reads what compute wrote, and writes the host buffer a
     * swap-in of r may still be reading; its device bytes are given back
     * at once, tagged with its event (stream-ordered release) */
    delta_backend_wait(m->b, DELTA_STREAM_TO_HOST,
                       delta_backend_record(m->b, DELTA_STREAM_COMPUTE));
    mg_after_comm(m, DELTA_STREAM_TO_HOST, r);
    if (m->host_read[r].seq)
        delta_backend_wait(m->b, DELTA_STREAM_TO_HOST, m->host_read[r]);
    m->ev[r] = m->host_written[r] = issue_copy(
        m, DELTA_STREAM_TO_HOST, r, m->host[r], dev(m, r), v->bytes);
    /* after compute's work so far and the copies queued before it, at the
     * backend's nominal link: a figure that does not move from step to
     * step (the fitted link does, a little, with every sample), so a
     * repeating step releases at the same ops and replays its plan */
    double start = m->vt > m->link_free ? m->vt : m->link_free;
    double lat = m->b->link_latency_s > 0 ? m->b->link_latency_s : 0;
    m->out_end[r] = m->link_free =
        start + lat +
        (m->b->link_bps > 0 ? (double)v->bytes / m->b->link_bps : 0);
    v->state = RES_TO_HOST;
    m->outgoing[m->n_outgoing++] = r;
    m->st.swap_out_bytes += v->bytes;
    m->st.swap_outs++;
    mg_notify(m, r, MEV_SWAPPED_OUT, 0);
    return true;
}

bool managed_drop(managed *m, int r) {
    if (!m->is_root[r] || m->rv[r].state != RES_DEVICE || m->pins[r] > 0 ||
        !m->rv[r].droppable)
        return false;
    pool_give(m, m->off[r], r, NO_EVENT);
    m->rv[r].state = RES_DROPPED;
    m->st.drops++;
    m->st.dropped_bytes += m->rv[r].bytes;
    if (m->trace)
        delta_trace_instant(m->trace, DELTA_TRACK_COMPUTE, mg_tname(m, r), "drop",
                            now(m));
    mg_notify(m, r, MEV_DROPPED, 0);
    return true;
}

/* The oldest swap-in still in flight and unpinned becomes resident (the
 * compute stream waits for it on the device), so that the policy can name
 * it as a victim (its host copy is valid: sending it back is free). false
 * when there is none. */
static bool settle_oldest_swap_in(managed *m) {
    for (int i = 0; i < m->copies[1].n; i++) {
        int r = RING_AT(m->copies[1], i).r;
        if (m->rv[r].state != RES_TO_DEVICE || m->pins[r] > 0) continue;
        settle_swap_in(m, r);
        return true;
    }
    return false;
}

/* Device bytes for `key` (a root, or nt + op for workspace), first
 * written by stream s: see managed.h for the order of remedies when it does
 * not fit, and the top of this file for how a planned offset is kept.
 * Nothing here waits on the host: released bytes carry the events of the
 * copies that may still touch them (pool_take waits for those on s). */
static bool dev_alloc(managed *m, size_t bytes, int key, bool untraced,
                      delta_stream s, size_t *off) {
    size_t need = delta_pool_round(bytes);
    /* the policy's soft limit, until the policy has nothing to offer */
    bool soft = m->soft_limit > 0 && m->soft_limit < m->arena;
    for (;;) {
        size_t at = 0;
        delta_replay_next nx =
            untraced ? DELTA_REPLAY_ONLINE
                     : delta_replay_peek(m->rp, need, m->cur_op, key, &at);
        if (nx == DELTA_REPLAY_AHEAD) /* needed now: its slot if free */
            nx = delta_pool_range_free(m->pool, at, need) ? DELTA_REPLAY_PLANNED
                                                          : DELTA_REPLAY_BUSY;
        delta_pool_stats ps;
        delta_pool_get_stats(m->pool, &ps);
        bool room = ps.live_bytes + need <= ps.capacity;
        bool under = !soft || ps.live_bytes + need <= m->soft_limit;
        if (nx == DELTA_REPLAY_BUSY && room && under) {
            /* what the recorded step had released by now: temporaries,
             * and swap-outs in the way (ahead of landing: the allocation's
             * first user waits for their copies on the device) */
            if (mg_free_temps(m) || release_swap_outs_in(m, at, need))
                continue;
            nx = DELTA_REPLAY_ONLINE; /* a deviation: online from here */
        }
        /* BUSY without room: the recorded step evicted here too; the
         * remedies below run without taking anything online */
        bool busy = nx == DELTA_REPLAY_BUSY;
        if (!busy && under && pool_take(m, bytes, key, untraced, s, off))
            return true;
        if (m->fail_st != DELTA_OK) return false;
        if (!busy && room && under && !delta_replay_replaying(m->rp)) {
            delta_pool_get_stats(m->pool, &ps);
            if (ps.largest_free < need) {
                make_gap(m, need);
                if (pool_take(m, bytes, key, untraced, s, off)) return true;
            }
        }
        if (mg_free_temps(m)) continue;
        /* swap-outs in flight give their bytes back (the device waits for
         * the copies); a policy that prefers naming a victim (a cheap
         * recomputation) to that stall is asked first */
        if (!m->pol->victims_before_waits && release_oldest_swap_out(m))
            continue;
        bool drop = false;
        m->soft_ask = room && !under;
        int v = m->pol->choose_victim
                    ? m->pol->choose_victim(m->pst, m, need, &drop)
                    : -1;
        m->soft_ask = false;
        if (v < 0 && m->pol->victims_before_waits &&
            release_oldest_swap_out(m))
            continue;
        /* nothing to offer while swap-ins in flight hold bytes: one becomes
         * resident and the policy is asked again (it may send it back for
         * free) */
        if (v < 0 && settle_oldest_swap_in(m)) continue;
        if (v < 0 && soft) { /* over the soft limit only: take the bytes */
            soft = false;
            continue;
        }
        if (v < 0) {
            int i = m->cur_op >= 0 ? m->cur_op : 0;
            const delta_op *op = &m->ctx->ops[i];
            char b1[32], b2[32], b3[32];
            return mg_failf(m, DELTA_ERR_BUDGET,
                            "policy '%s' cannot fit op %d (%s, %s) in the "
                            "budget %s: %s more are needed, %s are held and "
                            "the policy has nothing left to release",
                            m->pol->name, op->id, delta_op_type_name(op->type),
                            op->name,
                            delta_format_bytes((double)m->arena, b1, 32),
                            delta_format_bytes((double)need, b2, 32),
                            delta_format_bytes((double)m->in_use, b3, 32));
        }
        DELTA_ASSERTF(v < m->nt && m->is_root[v] &&
                          m->rv[v].state == RES_DEVICE && m->pins[v] == 0 &&
                          (!drop || m->rv[v].droppable),
                      "policy %s named an invalid victim %d", m->pol->name, v);
        if (drop) {
            managed_drop(m, v);
        } else {
            if (!managed_swap_out(m, v)) return false;
            if (m->rv[v].state == RES_TO_HOST) release_swap_out(m, v, false);
        }
    }
}

/* ---- bringing tensors back ----------------------------------------------- */

/* Copies r from its host buffer into its device bytes (already taken) on
 * the to-device stream, after the compute stream's work so far (the bytes
 * may have been a tensor compute just freed) and after the swap-out that
 * filled the buffer. */
static void issue_swap_in(managed *m, int r) {
    root_view *v = &m->rv[r];
    delta_backend_wait(m->b, DELTA_STREAM_TO_DEVICE,
                       delta_backend_record(m->b, DELTA_STREAM_COMPUTE));
    if (m->host_written[r].seq)
        delta_backend_wait(m->b, DELTA_STREAM_TO_DEVICE, m->host_written[r]);
    m->ev[r] = m->host_read[r] = issue_copy(m, DELTA_STREAM_TO_DEVICE, r,
                                            dev(m, r), m->host[r], v->bytes);
    v->state = RES_TO_DEVICE;
    m->st.swap_in_bytes += v->bytes;
    m->st.swap_ins++;
}

bool managed_prefetch(managed *m, int r) {
    if (!m->is_root[r] || m->rv[r].state != RES_HOST) return false;
    root_view *v = &m->rv[r];
    /* while the step follows its plan, a prefetch is made only where the
     * recorded step made it: not when the plan has none (left) for r, not
     * ahead of the plan, not into bytes still in use (the policy may try
     * again at a later op) */
    if (delta_replay_replaying(m->rp)) {
        size_t at = 0;
        delta_replay_next nx = delta_replay_peek(m->rp, v->bytes, m->cur_op, r, &at);
        if (nx == DELTA_REPLAY_BUSY) {
            mg_collect(m);
            nx = delta_replay_peek(m->rp, v->bytes, m->cur_op, r, &at);
        }
        if (nx != DELTA_REPLAY_PLANNED) return false;
    }
    if (!pool_take(m, v->bytes, r, false, DELTA_STREAM_TO_DEVICE,
                   &m->off[r])) {
        mg_collect(m);
        if (!pool_take(m, v->bytes, r, false, DELTA_STREAM_TO_DEVICE,
                       &m->off[r]))
            return false;
    }
    issue_swap_in(m, r);
    return true;
}

static bool ensure(managed *m, int r);

/* A swap-in the op needs now: issued, and the compute stream waits for it
 * on the device (whether it stalled is read from the op's timing). */
static bool swap_in_now(managed *m, int r) {
    root_view *v = &m->rv[r];
    m->pins[r]++;
    bool ok = dev_alloc(m, v->bytes, r, false, DELTA_STREAM_TO_DEVICE,
                        &m->off[r]);
    m->pins[r]--;
    if (!ok) return false;
    issue_swap_in(m, r);
    settle_swap_in(m, r);
    mg_notify(m, r, MEV_RESIDENT, 0);
    return true;
}

/* Makes root r resident on the device for the next kernel on compute. */
static bool ensure(managed *m, int r) {
    root_view *v = &m->rv[r];
    switch (v->state) {
    case RES_DEVICE:
    case RES_TO_HOST: /* the device copy is intact until its bytes go */
        return true;
    case RES_TO_DEVICE:
        settle_swap_in(m, r);
        return true;
    case RES_HOST:
        return swap_in_now(m, r);
    case RES_DROPPED:
    case RES_FREE: {
        /* dropped, or freed after its last use but needed to recompute
         * something dropped: run its producer again */
        DELTA_ASSERTF(v->droppable && v->producer >= 0,
                      "tensor %d (%s) is needed but is gone (%s)", r,
                      mg_tname(m, r), residency_name(v->state));
        return mg_run_op(m, &m->ctx->ops[v->producer], true);
    }
    }
    return false;
}

bool managed_recompute(managed *m, int r) {
    if (!m->is_root[r]) return false;
    m->pins[r]++;
    bool ok = ensure(m, r);
    m->pins[r]--;
    return ok;
}

/* ---- freeing ------------------------------------------------------------- */

void mg_free_root(managed *m, int r) {
    root_view *v = &m->rv[r];
    switch (v->state) {
    case RES_DEVICE:
        pool_give(m, m->off[r], r, NO_EVENT);
        break;
    case RES_TO_DEVICE: /* the copy may still write: its bytes carry it */
        pool_give(m, m->off[r], r, m->ev[r]);
        break;
    case RES_HOST:
    case RES_DROPPED:
        break;
    case RES_FREE:
        return;
    case RES_TO_HOST: /* its bytes go back with the copy's */
        m->free_after[r] = true;
        return;
    }
    v->state = RES_FREE;
    v->host_valid = false;
    mg_notify(m, r, MEV_FREED, 0);
}

static bool dead(const managed *m, int r) {
    return !m->rv[r].persistent && mg_last_needed(m, r) < m->cur_op;
}

static void hold_temp(managed *m, int r) {
    if (m->cur_op < 0 || m->is_temp[r]) {
        if (m->cur_op < 0) mg_free_root(m, r);
        return;
    }
    m->is_temp[r] = true;
    m->temps[m->n_temps++] = r;
}

bool mg_free_temps(managed *m) {
    bool freed = false;
    int k = 0;
    for (int i = 0; i < m->n_temps; i++) {
        int r = m->temps[i];
        if (m->pins[r] > 0) {
            m->temps[k++] = r;
            continue;
        }
        m->is_temp[r] = false;
        if (m->rv[r].state == RES_DEVICE && dead(m, r)) {
            mg_free_root(m, r);
            freed = true;
        }
    }
    m->n_temps = k;
    return freed;
}

/* ---- running one op ------------------------------------------------------ */

/* An output about to be written: device bytes for it. */
static bool make_output(managed *m, int r, bool recompute, bool *temp) {
    root_view *v = &m->rv[r];
    switch (v->state) {
    case RES_DEVICE:
        return true;
    case RES_TO_HOST: { /* written again: after the copy has read it */
        delta_backend_wait(m->b, DELTA_STREAM_COMPUTE, m->ev[r]);
        if (m->cur_issue) m->cur_issue->waited = true;
        outgoing_remove(m, r);
        v->state = RES_DEVICE;
        v->host_valid = true;
        return true;
    }
    case RES_TO_DEVICE:
    case RES_HOST:
        if (!recompute) return ensure(m, r); /* in-place update */
        if (v->state == RES_TO_DEVICE) return ensure(m, r);
        /* recomputing another output of its producer: a device copy of the
         * same bytes the host store holds */
        if (!dev_alloc(m, v->bytes, r, false, DELTA_STREAM_COMPUTE,
                       &m->off[r]))
            return false;
        v->state = RES_DEVICE;
        return true;
    case RES_DROPPED:
    case RES_FREE:
        *temp = recompute && v->state == RES_FREE;
        /* a persistent root's first production: it stays for good, so it
         * is no part of any step's trace */
        if (!dev_alloc(m, v->bytes, r, v->persistent && !recompute,
                       DELTA_STREAM_COMPUTE, &m->off[r]))
            return false;
        v->state = RES_DEVICE;
        return true;
    }
    return false;
}

static void *addr(managed *m, int id) {
    return dev(m, delta_tensor_root(m->ctx, id));
}

bool mg_run_op(managed *m, const delta_op *op, bool recompute) {
    const delta_ctx *c = m->ctx;
    int roots[DELTA_MAX_OP_IN + DELTA_MAX_OP_OUT], nr = 0;
    for (int j = 0; j < op->n_in; j++) roots[nr++] = delta_tensor_root(c, op->in[j]);
    for (int j = 0; j < op->n_out; j++) roots[nr++] = delta_tensor_root(c, op->out[j]);
    /* Operands are pinned while the op is set up and run. A persistent
     * input (a weight, a batch-norm statistic) is pinned only once it is
     * resident, not before: a recomputation that runs through a chain of
     * dropped producers would otherwise hold every level's weights pinned
     * while the levels below run, and at a tight budget nothing would be
     * left to evict (ResNet-18 w8 at 30%: delta failed where capuchin and
     * autoswap trained); evicted before its turn, it is brought back then.
     * Activations are pinned from the start (pinning them late too let
     * recomputations evict each other's inputs: dtr then failed on the
     * sim's ResNet-50 at 30%). The swap-ins this op is made to wait for
     * are noted here (a recomputation inside ensure() notes its own). */
    bool late_pin[DELTA_MAX_OP_IN + DELTA_MAX_OP_OUT] = {false};
    for (int j = 0; j < nr; j++) {
        late_pin[j] = j < op->n_in && m->rv[roots[j]].persistent;
        if (!late_pin[j]) m->pins[roots[j]]++;
    }
    mg_issued is = {.op = op->id, .recompute = recompute};
    mg_issued *outer = m->cur_issue;
    bool ok = true;
    bool temp[DELTA_MAX_OP_OUT] = {false}, back[DELTA_MAX_OP_OUT] = {false};
    for (int j = 0; ok && j < op->n_in; j++) {
        ok = ensure(m, roots[j]);
        m->cur_issue = &is;
        if (ok && late_pin[j]) {
            m->pins[roots[j]]++;
            late_pin[j] = false; /* pinned now: unpinned at the end */
        }
    }
    for (int j = 0; recompute && j < op->n_out; j++)
        back[j] = m->rv[roots[op->n_in + j]].state == RES_DROPPED;
    for (int j = 0; ok && j < op->n_out; j++) {
        ok = make_output(m, roots[op->n_in + j], recompute, &temp[j]);
        m->cur_issue = &is;
    }
    size_t ws_off = 0;
    bool ws = ok && op->workspace;
    if (ws)
        ws = ok = dev_alloc(m, op->workspace, m->nt + op->id, false,
                            DELTA_STREAM_COMPUTE, &ws_off);
    m->cur_issue = &is;
    /* compute reads or writes nothing a collective may still touch; a
     * collective itself follows the earlier ones in its stream's order */
    bool collective = delta_op_is_collective(op->type) && m->b->ops->collective;
    for (int j = 0; ok && !collective && j < nr; j++)
        mg_after_comm(m, DELTA_STREAM_COMPUTE, roots[j]);
    delta_event launched = {0};
    if (ok) {
        delta_kargs k = {.op = op, .env = &m->env};
        for (int j = 0; j < op->n_in; j++) {
            k.in_t[j] = c->tensors[op->in[j]];
            k.in[j] = addr(m, op->in[j]);
        }
        for (int j = 0; j < op->n_out; j++) {
            k.out_t[j] = c->tensors[op->out[j]];
            k.out[j] = addr(m, op->out[j]);
        }
        if (ws && m->base) k.ws = (char *)m->base + ws_off;
        if (recompute) m->st.recomputed_ops++;
        launched = mg_launch(m, &k, &is);
        for (int j = 0; j < op->n_out; j++) {
            root_view *v = &m->rv[roots[op->n_in + j]];
            if (!recompute) v->host_valid = false; /* new bytes */
            v->last_access = m->ticks;
        }
        for (int j = 0; j < op->n_in; j++) m->rv[roots[j]].last_access = m->ticks;
        for (int j = 0; j < op->n_out; j++)
            if (back[j]) mg_notify(m, roots[op->n_in + j], MEV_RESIDENT, 0);
    }
    m->cur_issue = outer;
    if (ws) pool_give(m, ws_off, m->nt + op->id, collective ? launched : NO_EVENT);
    for (int j = 0; j < nr; j++)
        if (!late_pin[j]) m->pins[roots[j]]--;
    if (ok && recompute) {
        /* outputs made only for this and inputs past their last use are
         * temporaries: kept to the end of the step's op, since a sibling
         * recomputation (another output of a multi-output op, another
         * consumer of the same input) may need them again; freed then, or
         * as soon as an allocation is short */
        for (int j = 0; j < op->n_out; j++) {
            int r = roots[op->n_in + j];
            if (temp[j] && dead(m, r) && m->pins[r] == 0) hold_temp(m, r);
        }
        for (int j = 0; j < op->n_in; j++) {
            int r = roots[j];
            if (dead(m, r) && m->pins[r] == 0 && m->rv[r].state == RES_DEVICE)
                hold_temp(m, r);
        }
    }
    return ok;
}
