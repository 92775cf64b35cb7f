/* The managed runtime: runs a step program inside a budget with tensors
 * that come and go. Every storage root ("root") has a residency state;
 * before an op runs its inputs are made resident (waited for when a copy
 * is in flight, swapped in from the host store, or recomputed from their
 * producers, recursively), its outputs and workspace are allocated from a
 * pool of exactly the budget (at the offsets the lifetime planner gave the
 * previous step when the step repeats it: "Layout" below), and when an
 * allocation does not fit the runtime first collects finished swap-outs,
 * then compacts the arena when the free bytes suffice but no gap does
 * (online steps only), then waits for swap-outs in flight, and only then
 * asks the policy for victims to swap out or drop.
 *
 * A policy (policy_ops) decides; this runtime acts. Policies see the
 * program, every root's state and accesses, measured op times and the
 * measured link, and act through the managed_* actions below, from their
 * per-step and per-op hooks. The session (session.c) uses this for every
 * policy but keep; docs/POLICIES.md describes each policy. */
#ifndef DELTA_MANAGED_H
#define DELTA_MANAGED_H

#include "delta/session.h"
#include "delta/trace.h"
#include "graph/graph_impl.h"

typedef struct managed managed;

typedef enum residency {
    RES_FREE = 0,   /* not allocated: before its producer or after its last
                       use */
    RES_DEVICE,     /* in the arena */
    RES_TO_HOST,    /* being copied to the host store; the device copy is
                       still there and readable; its bytes are released
                       when the copy is complete */
    RES_HOST,       /* only in the host store */
    RES_TO_DEVICE,  /* device bytes held, copy from the host in flight */
    RES_DROPPED,    /* nowhere: recomputed from its producer when needed */
} residency;

const char *residency_name(residency r);

/* What a policy sees of one root. Accesses are the ops of the step program
 * that read or write the root (in place), in program order. */
typedef struct root_view {
    residency state;
    delta_tensor_kind kind;
    size_t bytes;        /* rounded to the pool's alignment */
    int producer;        /* op id, -1 for leaves */
    int last_use;        /* last op of the step reading it; -1 none */
    bool persistent;     /* lives across steps (params, state, inputs, ...) */
    bool droppable;      /* an activation whose producer is recomputable */
    bool host_valid;     /* the host store holds its current bytes, so a
                            swap-out needs no copy */
    int64_t last_access; /* access counter at its last use (staleness) */
    int n_acc;
    const int *acc;      /* the accessing ops, ascending */
} root_view;

/* Events the runtime reports to a policy (on_event). */
typedef enum managed_event {
    MEV_DROPPED,     /* r was dropped (by the policy or as a victim) */
    MEV_SWAPPED_OUT, /* r's swap-out was issued */
    MEV_RESIDENT,    /* r came back: recomputed (every dropped output of
                        a recomputed op is reported) or swapped in on
                        demand */
    MEV_FREED,       /* r was freed: past its last use, or a temporary of
                        a recomputation */
    MEV_LATE,        /* an op started late waiting on the device for r's
                        swap-in (wait_s: seconds compute stalled); told
                        when the op's time is collected, one op or more
                        after it was issued */
    MEV_LAYOUT_OVER, /* after a training step that repeated the one
                        before, before end_step: the lifetime planner's
                        placement of the step just run peaks above the
                        budget, so the next step is placed
                        online (with compaction moves) rather than
                        replayed. r is -1 and the last argument is the
                        excess in bytes (plan peak - budget): a planned
                        policy may tighten its memory target by that much
                        and plan again (see "Layout" below) */
} managed_event;

/* A policy: a function table. Only name, create, destroy are required. */
typedef struct policy_ops {
    const char *name;
    void *(*create)(managed *m);
    void (*destroy)(void *p);
    /* Before the first op of a run (fwd_only for forward and eval runs). */
    void (*begin_step)(void *p, managed *m, int64_t step, bool fwd_only);
    /* After the last op of a run, whether or not it succeeded. */
    void (*end_step)(void *p, managed *m, bool ok);
    /* Before op i makes its inputs resident, and after op i ran and its
     * dead tensors were freed. The op's operands are pinned in between. */
    void (*before_op)(void *p, managed *m, int op);
    void (*after_op)(void *p, managed *m, int op);
    /* Called when an allocation of `need` bytes does not fit even after
     * the runtime freed recomputation temporaries, compacted the arena and
     * gave back the bytes of swap-outs in flight (the device waits for
     * their copies): returns a root in RES_DEVICE, unpinned, to evict,
     * with *drop true to drop it (droppable roots only) or false to swap it
     * out (its bytes go back at once, tagged with the copy's event);
     * -1 when the policy has nothing to offer (the run fails with a
     * message naming the op). NULL: never anything to offer. */
    int (*choose_victim)(void *p, managed *m, size_t need, bool *drop);
    void (*on_event)(void *p, managed *m, int r, managed_event ev,
                     double wait_s);
    /* When an allocation is short: true asks choose_victim before giving
     * back swap-outs in flight ahead of their landing (a stall on the
     * device; done only if it offers nothing); false (the default) gives
     * them back first. */
    bool victims_before_waits;
    /* A policy with a static layout (keep) gives the offset of every
     * device block: key is a root id, or n_roots + op for an op's
     * workspace. Blocks are claimed exactly there (the pool checks the
     * range is free) and no step is recorded or replayed; roots produced
     * in a step that stay readable after it (the loss, outputs) are given
     * back at the next run's start. NULL: the runtime places blocks (the
     * last step's plan, else online). */
    bool (*place)(void *p, managed *m, int key, size_t bytes, size_t *off);
    /* With place: the arena its layout needs (its peak address). */
    size_t (*arena_need)(void *p);
} policy_ops;

/* The policies, in the order the session lists them (policy/table.c). */
extern const policy_ops *const managed_policies[];
extern const int managed_n_policies;

extern const policy_ops delta_policy_keep, delta_policy_swap, delta_policy_checkpoint,
    delta_policy_dtr, delta_policy_capuchin, delta_policy_autoswap,
    delta_policy_delta;

/* ---- views for policies ------------------------------------------------ */
const delta_ctx *managed_ctx(const managed *m);
int managed_n_roots(const managed *m);     /* root ids are < this */
const root_view *managed_root(const managed *m, int id); /* NULL: no root */
/* An operand of an op being run (or recomputed): not evictable. */
bool managed_pinned(const managed *m, int id);
/* Seconds op takes on the compute stream: the last measurement, else the
 * backend's cost model, else an estimate from its flops and bytes; 0 for
 * a collective (data parallel), which runs on the communication stream
 * (policies plan compute; a collective late for its reader shows as a
 * stall there). */
double managed_op_seconds(const managed *m, int op);
bool managed_op_measured(const managed *m, int op);
/* The op's last measured span on its stream (collectives included), or
 * -1 when it was never timed. */
double managed_op_span_seconds(const managed *m, int op);
/* Host seconds the step loop last spent on op (its hooks, its launch with
 * the backend's argument checks and library calls, freeing after it),
 * waits for the device left out; -1 before. */
double managed_op_host_seconds(const managed *m, int op);
/* Seconds one copy of bytes takes on the link, from a linear model
 * (latency + bytes / bandwidth) fitted to the copies measured so far, the
 * backend's nominal link before that. */
double managed_link_seconds(const managed *m, size_t bytes);
/* The same for one direction, from that direction's copies only. */
double managed_link_seconds_dir(const managed *m, size_t bytes, bool to_host);
double managed_now(const managed *m);      /* the host's clock, s */
/* Seconds the last run took on the device (from its start to its copies'
 * and kernels' end), resolved at its end: valid in end_step. */
double managed_run_seconds(const managed *m);
/* The figures of the run in progress (delta_step_stats, step_s aside): in
 * end_step, the whole run's (device_busy_s, stall_s, defrag_moves...). */
const delta_step_stats *managed_run_stats(const managed *m);
int64_t managed_clock(const managed *m);   /* ops run so far (accesses) */
int managed_cur_op(const managed *m);      /* op being run, -1 between */
int64_t managed_step(const managed *m);    /* step of the current run */
bool managed_fwd_only(const managed *m);   /* current run is forward only */
size_t managed_budget(const managed *m);
size_t managed_in_use(const managed *m);   /* device bytes held now */
/* First access of r after op (op < that ≤ last op of the program), or -1;
 * last access of r before op, or -1. */
int managed_next_use(const managed *m, int r, int op);
int managed_prev_use(const managed *m, int r, int op);
/* Bytes of op's workspace and of its outputs' roots (what running it
 * allocates). */
size_t managed_op_alloc_bytes(const managed *m, int op);
/* Steps (DELTA_RUN_STEP runs) completed by this runtime. */
int64_t managed_steps_done(const managed *m);
/* The plan cache the session was given (NULL: none) and this program's key
 * (delta_program_key, computed once at creation): a policy keeps its plan
 * across sessions with plan_cache_get/put (runtime/plan_cache.h). */
delta_plan_cache *managed_plan_cache(const managed *m);
uint64_t managed_program_key(const managed *m);

/* Layout. Every training step is recorded (its allocations and releases
 * in order) and placed as a whole by the lifetime planner; the next step
 * takes those offsets while it makes the same allocations (size and root),
 * so a repeating step has no fragmentation and never moves blocks; a step
 * that deviates (other decisions) goes on online from the deviation and is
 * planned again from its own trace (residency.c explains the details,
 * including how moves and replay mix). A plan that does not fit the budget
 * is not used: the next step is online, and the policy hears
 * MEV_LAYOUT_OVER. A planned policy keeps its decisions' peak some way
 * under the budget: a step whose live bytes fill the arena (an online step
 * that evicts only when an allocation fails) rarely has a placement that
 * fits, since the online allocator got there by moving blocks.
 *
 * managed_layout_peak: the peak address of the last plan made (above the
 * budget when it did not fit), 0 when none was. managed_replayed: the last
 * training step took every allocation from its plan. */
size_t managed_layout_peak(const managed *m);
bool managed_replayed(const managed *m);

/* A soft limit on the bytes in use (0: none, the default; set by a policy,
 * kept until changed): an allocation that would take the bytes in use past
 * it is treated as one that does not fit (temporaries collected, swap-outs
 * in flight given back, then the policy's victims, without moving blocks),
 * and takes the free bytes anyway when the policy has nothing to offer. A
 * policy that decides online (evicting when an allocation is short) keeps
 * headroom this way: evicting only at the budget fills the arena, and then
 * almost every allocation finds no gap and blocks are moved to make one
 * (in a step that follows no plan). */
void managed_set_soft_limit(managed *m, size_t bytes);
/* In choose_victim: true when the allocation fits the budget and only the
 * soft limit asks for a victim (a policy may then offer only what is cheap
 * to give up: nothing is taken from it when it offers nothing). */
bool managed_soft_ask(const managed *m);

/* ---- actions ----------------------------------------------------------- */
/* Starts copying r (RES_DEVICE, unpinned) to the host store on the to-host
 * stream; its device bytes are released where the step's modelled device
 * timeline has the copy landed, or earlier when an allocation needs them
 * (tagged with the copy's event). Immediate when the host copy is already
 * valid. false when r is not in a state to swap out or host memory cannot
 * be had (then the run fails). */
bool managed_swap_out(managed *m, int r);
/* Starts copying r (RES_HOST) back on the to-device stream into device
 * bytes taken without evicting anything; ops that need r wait for the copy.
 * false (and nothing done) when r is not on the host or no gap fits, and,
 * in a step that follows its planned layout, when the plan has no such
 * prefetch at this op or its bytes are still in use (try again later). */
bool managed_prefetch(managed *m, int r);
/* Drops r (RES_DEVICE, droppable, unpinned). false when it cannot be. */
bool managed_drop(managed *m, int r);
/* Makes r resident now (recomputing a dropped r ahead of its use, or
 * swapping it in); may evict through choose_victim. false on failure (the
 * run then fails). */
bool managed_recompute(managed *m, int r);

/* ---- the session's side ------------------------------------------------ */
typedef struct managed_opts {
    size_t budget;                 /* the arena; 0 = what the policy's
                                      static layout needs (arena_need) */
    size_t min_budget;             /* the dry plan's, for messages */
    const char *policy;
    delta_tensor *const *outs;     /* per-step tensors the caller reads after
                                      a run (kept until the next run) */
    int n_outs;
    delta_trace *trace;            /* may be NULL */
    const policy_ops *custom;      /* when set, used instead of `policy`
                                      (tests drive the runtime with scripted
                                      policies) */
    delta_plan_cache *plans;       /* may be NULL */
    size_t host_limit;             /* host store cap; 0 = none */
    int run_ahead;                 /* most ops the host may be ahead of the
                                      compute stream; 0 = MANAGED_RUN_AHEAD */
    bool sync_every_op;            /* the host waits for every op (the
                                      first runtime's behaviour, kept to
                                      measure what waiting costs) */
    struct delta_comm *comm;       /* the ranks collective ops run over
                                      (NULL: one rank) */
} managed_opts;

#define MANAGED_RUN_AHEAD 64

managed *managed_new(delta_ctx *ctx, delta_backend *b, const managed_opts *o,
                     delta_status *status, char *err, size_t err_len);
void managed_free(managed *m);
delta_status managed_run(managed *m, delta_run_mode mode, int64_t step,
                         delta_step_stats *stats, char *err, size_t err_len);
/* Data of a persistent root (or a root alive at the end of the last run),
 * wherever it is. DELTA_ERR_STATE when it is not readable now. */
delta_status managed_access(managed *m, int root, void *data, size_t bytes,
                            bool write);
size_t managed_arena_bytes(const managed *m);
/* Two byte counts in words (32 chars each), told apart: exact bytes when
 * both round to the same figure (for refusals that compare a budget with
 * a need). */
void managed_two_sizes(size_t a, size_t b, char *sa, char *sb);
/* True when policy names a managed policy. */
bool managed_policy_known(const char *policy);
/* Name of the i-th managed policy, NULL past the last. */
const char *managed_policy_name(int i);

#endif
