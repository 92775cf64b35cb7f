/* delta — the device-memory pool: where every device allocation goes in the
 * arena [0, capacity). Four parts, all over byte offsets (the pool never
 * touches memory; the caller adds the arena's base address):
 *
 *   delta_pool     the online allocator: best fit among free ranges, with
 *                  splitting and coalescing, over one offset-ordered block
 *                  table. Also the occupancy structure replay works in.
 *   delta_plan_*   the lifetime planner (SmartPool / TFLite greedy by size):
 *                  given one step's blocks with their live intervals, assign
 *                  offsets so that no two blocks alive at the same time
 *                  overlap, close to the max-live lower bound.
 *   delta_replay   a pool that records a step's alloc/free trace, plans it,
 *                  and replays the planned offsets on the next step, falling
 *                  back to online allocation at the first deviation.
 *   delta_caching  an emulation of PyTorch's CUDA caching allocator, only to
 *                  compare against (segments, 512 B blocks, cached frees).
 *
 * Every offset and size the pool, planner and replay hand out is a multiple
 * of DELTA_POOL_ALIGN; requests are rounded up to it (a 0-byte request takes
 * one unit, so every block has its own offset).
 *
 * Errors: allocation failures (nothing fits, block table full) are
 * recoverable and return a delta_status with a message from
 * delta_pool_error / delta_replay_error; misuse that can only be a bug
 * (releasing an offset twice) is reported the same way so a runtime can
 * name it, while internal invariant violations hit DELTA_ASSERT. */
#ifndef DELTA_POOL_H
#define DELTA_POOL_H

#include "delta/common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DELTA_POOL_ALIGN 256

/* bytes rounded up to DELTA_POOL_ALIGN (0 becomes DELTA_POOL_ALIGN);
 * SIZE_MAX when the rounding would overflow. */
DELTA_API size_t delta_pool_round(size_t bytes);

/* ---- online allocator -------------------------------------------------- */

typedef struct delta_pool delta_pool;

/* Creates a pool over [0, capacity rounded down to DELTA_POOL_ALIGN) able
 * to hold up to max_live blocks at once (the block table is allocated here,
 * 2 * max_live + 1 entries, and never again unless delta_pool_reserve is
 * called: alloc and release do no host allocation). Returns NULL with a
 * message in err (may be NULL) if capacity < DELTA_POOL_ALIGN, max_live < 1
 * or host memory runs out. */
DELTA_API delta_pool *delta_pool_new(size_t capacity, int max_live, char *err,
                           size_t err_len);
DELTA_API void delta_pool_free(delta_pool *pool);

/* Grows the block table to hold max_live blocks (never shrinks). Not for
 * the hot path: call it between steps. DELTA_ERR_NOMEM on failure (the
 * pool is unchanged). */
DELTA_API delta_status delta_pool_reserve(delta_pool *pool, int max_live);

/* Best fit: the smallest free range that holds the rounded size (lowest
 * offset among equals), split so the block takes its low end. On success
 * *off is the block's offset. DELTA_ERR_BUDGET when no free range is large
 * enough or the block table is full (the message says which); the pool is
 * unchanged then. O(log n). */
DELTA_API delta_status delta_pool_alloc(delta_pool *pool, size_t bytes, size_t *off);

/* Claims exactly [off, off + rounded bytes) if that range is free (off must
 * be aligned). DELTA_ERR_BUDGET if any byte of it is in use or past the
 * capacity, DELTA_ERR_INVALID_ARG if off is misaligned. O(log n). */
DELTA_API delta_status delta_pool_alloc_at(delta_pool *pool, size_t off, size_t bytes);

/* Frees the block that starts at off and merges it with free neighbours.
 * DELTA_ERR_INVALID_ARG if no live block starts there. O(log n). */
DELTA_API delta_status delta_pool_release(delta_pool *pool, size_t off);

/* Size of the live block starting at off, or 0 if there is none. */
DELTA_API size_t delta_pool_block_size(const delta_pool *pool, size_t off);

/* True when every byte of [off, off + rounded bytes) is free and inside
 * the capacity. O(log n). */
DELTA_API bool delta_pool_range_free(const delta_pool *pool, size_t off, size_t bytes);

typedef struct delta_pool_stats {
    size_t capacity;        /* usable bytes (rounded down to the alignment) */
    size_t live_bytes;      /* bytes in live blocks now */
    size_t peak_live_bytes; /* max live_bytes since creation or reset */
    size_t peak_address;    /* max end offset of any block allocated since
                               creation or reset (the high-water mark) */
    size_t largest_free;    /* largest free range now */
    int n_live;             /* live blocks now */
    int n_free;             /* free ranges now (1 when the pool is empty) */
    int max_live;           /* block-table limit */
    double fragmentation;   /* peak_address / peak_live_bytes (1 when the
                               pool has not been used) */
} delta_pool_stats;

DELTA_API void delta_pool_get_stats(const delta_pool *pool, delta_pool_stats *s);

/* Starts a new measuring period (a step): the peaks restart from what is
 * live now (peak address = end of the highest live block). */
DELTA_API void delta_pool_reset_peaks(delta_pool *pool);

/* Message of the last failed call. */
DELTA_API const char *delta_pool_error(const delta_pool *pool);

/* Checks every structural invariant (blocks tile the arena in order, no two
 * neighbouring free ranges, alignment, both search trees consistent with
 * the table, totals). Returns true when all hold; otherwise false with the
 * first broken one in the error message. O(n), for tests. */
DELTA_API bool delta_pool_validate(const delta_pool *pool);

/* Calls fn(off, size, user) for every live block in offset order; for
 * tests and reports. */
DELTA_API void delta_pool_for_each_live(const delta_pool *pool,
                              void (*fn)(size_t off, size_t size, void *user),
                              void *user);

/* ---- lifetime planner ---------------------------------------------------- */

/* One block of a step's trace: alive during the inclusive interval
 * [first, last] of time points (op indices, or event indices). Two blocks
 * conflict when their intervals share a time point. */
typedef struct delta_plan_block {
    size_t size;   /* bytes; rounded up to DELTA_POOL_ALIGN by the planner */
    int first;     /* first time point it is alive */
    int last;      /* last time point it is alive (>= first) */
    int64_t fixed; /* >= 0: the block already sits at this aligned offset
                      and is placed there; -1: the planner chooses */
} delta_plan_block;

typedef struct delta_plan_stats {
    size_t peak_bytes;     /* max end offset over all blocks (the arena the
                              plan needs) */
    size_t max_live_bytes; /* max over time points of the rounded sizes
                              alive then: a lower bound on any plan's peak */
    int max_live_at;       /* a time point where max_live_bytes is reached */
    int n_blocks;
    double seconds;        /* time spent planning */
} delta_plan_stats;

/* Greedy by size with best-fit gaps (SmartPool; TFLite's arena planner):
 * fixed blocks first, then the others by size, largest first (ties: earlier
 * first time point, then lower index); each goes to the smallest gap that
 * holds it among the byte ranges of the already placed blocks whose
 * intervals overlap its own, or above all of them. offsets[i] receives
 * block i's offset. O(n^2) time, O(n) memory: ~5,000 blocks in a few
 * milliseconds. DELTA_ERR_INVALID_ARG for a malformed block (first > last,
 * misaligned fixed offset, a size that overflows), DELTA_ERR_NOMEM if the
 * scratch arrays cannot be allocated. stats may be NULL. */
DELTA_API delta_status delta_plan_place(const delta_plan_block *blocks, int n,
                              size_t *offsets, delta_plan_stats *stats);

/* Other orders for the same greedy placement, for traces where the
 * default order lands above a limit (replay tries them when a plan does
 * not fit its capacity): SIZE is delta_plan_place's (largest first, ties
 * earlier first; smallest gap that holds the block); the others put each
 * block in the lowest gap that holds it and take blocks largest first with
 * ties broken by the longest lifetime (SIZE_LONGEST) or the latest end
 * (SIZE_LATEST), or by size x sqrt(lifetime) (SIZE_SQRT_LIFE). Same
 * errors and costs as delta_plan_place. */
typedef enum delta_plan_order {
    DELTA_PLAN_SIZE = 0,
    DELTA_PLAN_SIZE_LONGEST,
    DELTA_PLAN_SIZE_LATEST,
    DELTA_PLAN_SIZE_SQRT_LIFE,
} delta_plan_order;
#define DELTA_PLAN_N_ORDERS 4
DELTA_API delta_status delta_plan_place_order(const delta_plan_block *blocks, int n,
                                    delta_plan_order order, size_t *offsets,
                                    delta_plan_stats *stats);

/* Only the lower bound (max over time points of rounded bytes alive), with
 * the time point in *at (may be NULL). O(n log n). SIZE_MAX if host memory
 * for its scratch runs out. */
DELTA_API size_t delta_plan_max_live(const delta_plan_block *blocks, int n, int *at);

/* ---- replay: online first, planned afterwards ---------------------------- */

/* Protocol, per training step:
 *   delta_replay_step_begin(r);
 *   ... delta_replay_alloc(r, bytes, op, &off) / delta_replay_release(r, off, op) ...
 *   delta_replay_step_end(r, &report);
 * The first step (and any step after a deviation or a failed plan) is
 * served by the online allocator while the alloc/free sequence is recorded.
 * At step end the trace is planned: the blocks still live then stay where
 * they are (fixed, alive the whole next step) and every allocation of the
 * step gets an offset, with lifetimes measured in alloc/free events (so the
 * plan is exact for the recorded order and never tighter than it). The
 * planner's default order is tried first and, when its peak exceeds the
 * capacity, the other orders (delta_plan_place_order), the lowest peak
 * winning. On the next step, the
 * k-th allocation takes its planned offset when its rounded size equals
 * the k-th planned size and the range is free (with keys, below: the n-th
 * allocation of a key takes the plan's n-th allocation of that key, so a
 * step that makes the same allocations in a slightly different order,
 * a copy landing one op later, still follows its plan); at the first
 * mismatch the rest of the step is served online, in the same occupancy
 * structure, and the step is planned again from its own trace. A plan whose
 * peak exceeds the capacity is not used (reported; online goes on). A fully
 * replayed step keeps its plan when the blocks live at its end are those the
 * plan assumed; otherwise it is planned again.
 *
 * Allocations made outside begin/end (persistent tensors placed before the
 * first step) are served online and not recorded; they simply stay live.
 *
 * Keys (optional, the *_key calls): a caller that names what each block
 * holds (key >= 0, e.g. a tensor id; -1 for nothing in particular) gets
 * two things. Replay matches allocations by key (above) as well as size.
 * And lifetimes across the step boundary: a block live at the end of a
 * step that was allocated during it, whose key's earlier block was
 * released during the step at event e, is planned as released at event e
 * of the next step too (a tensor brought back late in every step and sent
 * away early in the next), not as an obstacle for the whole next step; its
 * next allocation is pinned where it sits now when that fits, so a
 * repeating step ends with the same blocks in the same places and keeps
 * its plan. Blocks live at the end with no such release stay obstacles
 * for the whole next step, as without keys. */
typedef struct delta_replay delta_replay;

/* Report of one step, filled by delta_replay_step_end. */
typedef struct delta_replay_step {
    int64_t step;           /* 0 for the first step */
    bool had_plan;          /* a usable plan existed when the step began */
    bool replayed;          /* every allocation took its planned offset and
                               the count matched the plan */
    int n_allocs;           /* allocations in the step */
    int n_replayed;         /* of those, placed by the plan */
    int deviation_at;       /* index of the first unplanned allocation, or
                               -1 */
    int deviation_op;       /* the op it came from, or -1 */
    bool repeated;          /* the same allocations (sizes, keys, order)
                               as the step before (by a 64-bit hash) */
    bool planned;           /* a new plan was made at the end of this step */
    size_t plan_peak_bytes; /* peak of the plan for the next step (0 when
                               none was made) */
    size_t plan_max_live_bytes;
    bool plan_exceeds_capacity; /* the new plan does not fit, not used */
    double plan_seconds;
    size_t peak_live_bytes; /* this step's occupancy */
    size_t peak_address;
} delta_replay_step;

/* capacity and max_live as for delta_pool_new. */
DELTA_API delta_replay *delta_replay_new(size_t capacity, int max_live, char *err,
                               size_t err_len);
DELTA_API void delta_replay_free(delta_replay *r);

/* The occupancy structure (for stats; do not alloc or release through it
 * while a step is recorded). */
DELTA_API delta_pool *delta_replay_pool(delta_replay *r);

DELTA_API void delta_replay_step_begin(delta_replay *r);
/* op is the caller's op index (for reports). Same failures as
 * delta_pool_alloc; a failed call records nothing, so it may be retried
 * after the caller frees memory. */
DELTA_API delta_status delta_replay_alloc(delta_replay *r, size_t bytes, int op,
                                size_t *off);
DELTA_API delta_status delta_replay_release(delta_replay *r, size_t off, int op);
/* As delta_replay_alloc / delta_replay_release with the block's key (see
 * above); key -1 is the plain call. */
DELTA_API delta_status delta_replay_alloc_key(delta_replay *r, size_t bytes, int op,
                                    int key, size_t *off);
DELTA_API delta_status delta_replay_release_key(delta_replay *r, size_t off, int op,
                                      int key);

/* What the next delta_replay_alloc_key(r, bytes, ., key, .) would do, with
 * nothing changed: ONLINE when no plan applies (outside a step, not
 * replaying, or the plan has no further allocation of this key, or one of
 * another size); PLANNED when it takes its planned offset (*off); BUSY
 * when the plan applies (*off) but part of that range is in use, so an
 * allocation now would deviate: a caller may first release what the
 * recorded step had released by then (a copy that has not landed yet) and
 * ask again; AHEAD when the plan has it (*off) but the recorded step made
 * it at a later op than op: taking it now (an allocation does when its
 * range is free) may take bytes planned for others until then, so an
 * optional allocation (a prefetch) had better wait. */
typedef enum delta_replay_next {
    DELTA_REPLAY_ONLINE = 0,
    DELTA_REPLAY_PLANNED,
    DELTA_REPLAY_BUSY,
    DELTA_REPLAY_AHEAD,
} delta_replay_next;
DELTA_API delta_replay_next delta_replay_peek(const delta_replay *r, size_t bytes,
                                    int op, int key, size_t *off);
/* True inside a step that has followed its plan so far. */
DELTA_API bool delta_replay_replaying(const delta_replay *r);

/* An allocation inside a step that is not part of its trace (a block that
 * will stay live for good, placed online like those placed before the
 * first step): online best fit, not recorded, the plan left as it is.
 * Failures as delta_replay_alloc. */
DELTA_API delta_status delta_replay_alloc_untraced(delta_replay *r, size_t bytes,
                                         size_t *off);

/* Moves the live block at `from` to `to` (a caller compacting its arena
 * copies the bytes itself): the block keeps its identity in the step's
 * trace, so a move is not an event and the plan made from the trace is
 * the same as without it. [to, to + size) must be free apart from the
 * block's own range. DELTA_ERR_INVALID_ARG when no live block starts at
 * from, DELTA_ERR_BUDGET when the destination is not free (nothing
 * changes then). */
/* The block [off, off + bytes) (rounded) exactly there, outside any trace:
 * for a static layout. DELTA_ERR_BUDGET when the range is not free. */
DELTA_API delta_status delta_replay_alloc_at_untraced(delta_replay *r, size_t off,
                                            size_t bytes);
DELTA_API delta_status delta_replay_move(delta_replay *r, size_t from, size_t to);
/* Ends the step, plans if needed; report may be NULL. */
DELTA_API void delta_replay_step_end(delta_replay *r, delta_replay_step *report);
/* Between steps: plans the last step's trace again around the blocks live
 * now, replacing the plan; with compacted, around the places they would
 * have if they slid down to the bottom of the arena in offset order (a
 * caller whose plan did not fit asks whether compacting the blocks that
 * stay would make it fit, and if so moves them there, with
 * delta_replay_move in offset order, before the next step). Updates
 * report's plan fields (planned, plan_peak_bytes, plan_max_live_bytes,
 * plan_exceeds_capacity, and adds plan_seconds). false, with no plan
 * left, when there is no recorded step or planning failed. */
DELTA_API bool delta_replay_replan(delta_replay *r, bool compacted,
                         delta_replay_step *report);
DELTA_API const char *delta_replay_error(const delta_replay *r);

/* ---- PyTorch caching-allocator emulation (comparison only) --------------- */

/* Rules of c10's CUDACachingAllocator with default settings: requests are
 * rounded up to 512 B; requests <= 1 MiB come from the small pool, carved
 * from 2 MiB segments; larger ones from the large pool, whose new segments
 * are 20 MiB for requests < 10 MiB and the request rounded up to 2 MiB
 * otherwise. A request takes the best-fitting cached free block of its pool
 * (smallest size, then lowest address), split when the remainder is >= 512 B
 * (small) or > 1 MiB (large); else a new segment is added. Freed blocks merge
 * with free neighbours in their segment and stay cached: segments are never
 * returned, so reserved bytes only grow. Not a hot-path object: it uses
 * linear scans and may allocate host memory as it grows. */
typedef struct delta_caching delta_caching;

DELTA_API delta_caching *delta_caching_new(void);
DELTA_API void delta_caching_free(delta_caching *c);

/* *handle identifies the block for delta_caching_release.
 * DELTA_ERR_NOMEM if host memory for the bookkeeping runs out. */
DELTA_API delta_status delta_caching_alloc(delta_caching *c, size_t bytes, int *handle);
DELTA_API delta_status delta_caching_release(delta_caching *c, int handle);

/* Where a live block sits: its segment, offset in it, the block's size
 * (rounded, with any unsplit remainder) and the segment's size. */
DELTA_API delta_status delta_caching_block(const delta_caching *c, int handle,
                                 int *segment, size_t *offset, size_t *size,
                                 size_t *segment_size);

typedef struct delta_caching_stats {
    size_t reserved_bytes;       /* sum of segment sizes (never shrinks) */
    size_t peak_reserved_bytes;
    size_t allocated_bytes;      /* sum of live block sizes */
    size_t peak_allocated_bytes;
    size_t requested_bytes;      /* sum of live request sizes */
    size_t peak_requested_bytes;
    int n_segments, n_small_segments;
    int n_live;
} delta_caching_stats;

DELTA_API void delta_caching_get_stats(const delta_caching *c, delta_caching_stats *s);

#ifdef __cplusplus
}
#endif
#endif
