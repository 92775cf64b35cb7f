/* The delta policy's filter: which releases to make so that a memory
 * timeline fits a target, as a 0/1 knapsack over the timeline.
 *
 * Items are releases (a tensor leaving the device for an idle interval):
 * item k relieves bytes[k] at every op of its ranges and costs cost[k]
 * seconds of overhead. excess[i] is how far op i's load is above the
 * target. Choose items so that every op's excess is covered, at least total
 * cost: a covering knapsack with one dimension per op (NP-hard). The
 * heuristic is greedy by value / cost, where value is how much an item
 * lowers the sum of the positive excesses: the bytes it relieves at
 * over-target ops (sum over its ops of min(bytes, excess)) less what its
 * extra load adds over the target; a lazy priority queue re-evaluates only
 * the top (values mostly fall as the excess falls, so stale values are
 * taken as upper bounds; an item's extra load weighs less once the op it
 * lands on is covered, which the queue sees only when it pops the item). Costs may change as items are chosen (a swap's exposed
 * time depends on the link's occupancy): the caller re-evaluates an item
 * through a callback, which may also add load (a recomputation's
 * temporaries at its op). Clean-up passes then drop chosen items, most
 * expensive first, whose bytes the cover no longer needs (greedy picks
 * made redundant by later ones, or by the removal of an item whose extra
 * load they covered), until a pass drops nothing.
 * tests/test_knapsack.c compares it with an exact solver on small
 * instances. */
#ifndef DELTA_KNAPSACK_H
#define DELTA_KNAPSACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One evaluation of an item. An item relieves bytes over up to two op
 * ranges [lo, hi] (inclusive; a range with lo > hi is empty) and may add
 * extra_bytes of load at op extra_op (-1 for none). feasible false: the
 * item cannot be taken now. */
typedef struct ks_eval {
    bool feasible;
    int lo[2], hi[2];
    size_t bytes;
    double cost;          /* seconds; >= 0 */
    int extra_op;
    size_t extra_bytes;
} ks_eval;

/* Re-evaluates item k against the choices so far. */
typedef void (*ks_eval_fn)(void *user, int k, ks_eval *out);
/* Item k was chosen with evaluation e (the caller records its decision). */
typedef void (*ks_commit_fn)(void *user, int k, const ks_eval *e);
/* Item k, chosen earlier, is dropped again: the cover holds without it. */
typedef void (*ks_uncommit_fn)(void *user, int k);

typedef struct ks_problem {
    int n_items, n_ops;
    int64_t *excess;      /* per op, updated in place as items are chosen */
    ks_eval_fn eval;
    ks_commit_fn commit;
    ks_uncommit_fn uncommit; /* NULL: no clean-up pass */
    void *user;
} ks_problem;

typedef struct ks_result {
    int chosen;           /* items taken */
    double cost;          /* their total cost */
    int64_t worst_excess; /* max over ops after the choice (<= 0: fits) */
    int evaluations;
} ks_result;

/* Runs the greedy. Host memory: O(n_items) for the queue. Returns false
 * only when host memory runs out. */
bool ks_solve(ks_problem *p, ks_result *res);

/* Bytes item e would relieve at over-target ops of excess. */
int64_t ks_value(const int64_t *excess, const ks_eval *e);

#endif
