/* delta — a session runs a step program on a backend (cpu, sim or cuda)
 * inside a device budget. Every device byte (parameters, gradients,
 * optimizer state, inputs, activations, workspace) lives in one arena of
 * the backend, and every policy runs on one runtime (the managed runtime:
 * docs/ARCHITECTURE.md, "The session and the runtime").
 *
 * Policies: "keep" (every tensor stays on the device until its last use,
 * at offsets the lifetime planner gives once, so the budget must hold the
 * planned peak); "delta", the one to use with a budget (it prices
 * swapping each tensor to the host store against recomputing it and
 * prefetches so the cost hides); and the peers, which also swap and drop
 * and recompute activations so that a step fits a budget from the dry
 * plan's minimum up: swap (vDNN), checkpoint (sqrt n), dtr, capuchin,
 * autoswap (docs/POLICIES.md). Every policy computes the same bits. */
#ifndef DELTA_SESSION_H
#define DELTA_SESSION_H

#include "delta/backend.h"
#include "delta/exec.h"
#include "delta/graph.h"
#include "delta/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct delta_session delta_session;

/* A cache of policies' plans, keyed by policy and program, that outlives
 * sessions: a run whose shapes change (a shorter last batch, a sequence
 * length drawn per step) creates a session per change and passes the same
 * cache to each, so a policy plans each distinct program once. Not locked:
 * use it from one session at a time. */
typedef struct delta_plan_cache delta_plan_cache;
DELTA_API delta_plan_cache *delta_plan_cache_new(void); /* NULL: out of memory */
DELTA_API void delta_plan_cache_free(delta_plan_cache *c); /* accepts NULL */

typedef struct delta_session_opts {
    delta_backend *backend;   /* not owned; must outlive the session */
    size_t budget_bytes;      /* 0 = unlimited (the arena is sized to fit) */
    const char *policy;       /* NULL = "keep"; see delta_session_policies */
    /* Per-step tensors the caller wants to read after a run (e.g. logits
     * for accuracy). They are placed like persistent tensors. Tensors no op
     * reads (the loss) are always kept. */
    delta_tensor *const *outputs;
    int n_outputs;
    /* Chrome trace of every run (not owned; NULL = none). */
    delta_trace *trace;
    /* Plans kept across sessions (not owned; must outlive the session;
     * NULL = none). */
    delta_plan_cache *plans;
    /* Most bytes the host store for swapped tensors may hold (0 =
     * unlimited: as much as the backend's host_alloc gives). A step that
     * needs more fails with DELTA_ERR_NOMEM and a message, as when the
     * host has no more memory. */
    size_t host_limit_bytes;
    /* Most ops the host may issue ahead of the device's compute stream
     * before it waits for the oldest (0 = 64). */
    int run_ahead;
    /* The host waits for every op to finish before issuing the next, as
     * the first runtime did: only to measure what waiting costs (delta
     * bench --sync-every-op). Results are the same. */
    bool sync_every_op;
    /* Check the order of the device's streams (docs/DEVICE.md, "The
     * stream-order checker"): the session runs on a checker wrapped around
     * `backend`, which tracks every byte range of the arena and of the host
     * store and aborts the process, naming the op, the tensor and both
     * streams, at the first access not ordered after a conflicting access
     * on another stream (a bug of the runtime). For tests and debugging:
     * it costs host time per op, not device time. */
    bool check_streams;
    /* The ranks a data-parallel program's collective ops run over
     * (delta_data_parallel, comm.h; not owned). Required, with the ranks
     * and the rank the program was built for, on a backend with data;
     * NULL: one rank. */
    struct delta_comm *comm;
} delta_session_opts;

/* Names of the policies, NULL-terminated: keep, delta and the peers
 * (swap, checkpoint, dtr, capuchin, autoswap); the one list the runtime
 * has (src/runtime/policy/table.c). */
DELTA_API const char *const *delta_session_policies(void);

/* Figures of one step. */
typedef struct delta_step_stats {
    double step_s;               /* device seconds: wall (cpu), simulated
                                    (sim) or from GPU events (cuda) */
    size_t peak_device_bytes;    /* arena high-water mark of the step */
    size_t live_peak_bytes;      /* peak of bytes in use */
    size_t swap_out_bytes, swap_in_bytes;   /* bytes copied each way */
    int swap_outs, swap_ins;     /* copies each way */
    int drops;                   /* activations dropped */
    size_t dropped_bytes;        /* their bytes (released to recompute) */
    int recomputed_ops;          /* kernels run again */
    double recompute_s;          /* compute time spent on them */
    double stall_s;              /* compute waiting for data: in-flight or
                                    on-demand copies */
    int defrag_moves;            /* blocks moved to make a contiguous gap */
    size_t defrag_bytes;
    /* Of the session, repeated in every step's figures: */
    size_t baseline_peak_bytes;  /* keep with an unlimited budget (dry plan) */
    size_t min_budget_bytes;     /* smallest budget any policy can run in */
    size_t budget_bytes;         /* the arena */
    bool replayed;               /* the pool replayed the planned layout */
    size_t host_bytes;           /* host store held at the step's end
                                    (swapped tensors' buffers, kept) */
    /* The host against the device (the host runs ahead of the device and
     * never waits for it inside a steady step): */
    int host_syncs;              /* blocking host waits on the device inside
                                    the step, the run-ahead throttle and
                                    the step's end (its loss) apart */
    int throttle_waits;          /* waits of the run-ahead throttle */
    double host_busy_s;          /* host seconds issuing the step, its
                                    blocking waits apart */
    double device_busy_s;        /* compute-stream seconds of the step's
                                    kernels and moves */
} delta_step_stats;

/* Places the program: checks the budget against the dry plan (DELTA_ERR_
 * BUDGET with a message naming the budget, the minimum and the op that
 * needs it), creates the arena, allocates and initializes persistent
 * tensors. NULL on failure with *status and err set. */
DELTA_API delta_session *delta_session_new(delta_ctx *ctx, const delta_session_opts *o,
                                 delta_status *status, char *err,
                                 size_t err_len);
DELTA_API void delta_session_free(delta_session *s);

/* Runs one step (DELTA_RUN_STEP advances the step counter). */
DELTA_API delta_status delta_session_run(delta_session *s, delta_run_mode mode,
                               delta_step_stats *stats);

/* Copies data into / out of a tensor wherever it lives. Only persistent
 * tensors (params, state, inputs, consts) and kept outputs (see opts) can
 * be accessed between runs: others give DELTA_ERR_STATE. On sim there is
 * no data: writes are accepted and reads give zeros. */
DELTA_API delta_status delta_session_write(delta_session *s, const delta_tensor *t,
                                 const void *data, size_t bytes);
DELTA_API delta_status delta_session_read(delta_session *s, const delta_tensor *t,
                                void *data, size_t bytes);

/* Device seconds op i's kernel took in the last run, from the compute
 * stream's spans (wall time on cpu, GPU events on cuda, the cost model on
 * sim); -1 when it did not run or was not timed. A view takes 0. */
DELTA_API double delta_session_op_seconds(const delta_session *s, int op);

/* Host seconds the runtime last spent on op i in a step (the policy's
 * hooks, the launch with the backend's argument checks and library calls
 * such as cuDNN's, freeing after it), waits for the device left out; the
 * host's clock on cpu and cuda, the modelled host on sim; -1 before the
 * op ran. What `delta calibrate` prices each op type's host cost by. */
DELTA_API double delta_session_op_host_seconds(const delta_session *s,
                                               int op);

DELTA_API int64_t delta_session_step(const delta_session *s);
DELTA_API void delta_session_set_step(delta_session *s, int64_t step);
DELTA_API size_t delta_session_budget(const delta_session *s);
/* Message of the last failure. */
DELTA_API const char *delta_session_error(const delta_session *s);

#ifdef __cplusplus
}
#endif
#endif
