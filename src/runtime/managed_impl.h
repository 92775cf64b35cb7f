/* The managed runtime's record, shared by managed.c (creation, views, the
 * step loop) and residency.c (moving bytes). Policies never include this:
 * they see managed.h. */
#ifndef DELTA_MANAGED_IMPL_H
#define DELTA_MANAGED_IMPL_H

#include "runtime/managed.h"
#include "backend/backend.h"
#include "delta/pool.h"

#include <stdlib.h>
#include <string.h>

typedef struct mg_slot {
    size_t off;
    int r;
} mg_slot;

/* A copy issued on a copy stream, collected (traced, measured) once it is
 * complete: copies on one stream finish in order, so collection stops at
 * the first unfinished one. */
typedef struct mg_copy {
    int r;
    size_t bytes;
    delta_event e;
} mg_copy;

/* Stream-ordered release: device bytes [off, off + size) given back while
 * a copy on another stream may still touch them. The next user of any of
 * those bytes on another stream waits for e on the device. */
typedef struct mg_tag {
    size_t off, size;
    delta_event e;
} mg_tag;

/* A ring of T, first at head, n held, cap slots. */
#define MG_RING(T) struct { T *a; int head, n, cap; }

/* An op issued on the compute stream, timed from its span once complete
 * (at least one op late, never by waiting). The copies it was made to
 * wait for on the device tell whether it started late (a stall). */
typedef struct mg_issued {
    int op;
    bool recompute;
    delta_event e;                    /* the op's item on compute */
    double vt_end;                    /* the modelled timeline after it */
    bool waited;                      /* compute waited on a copy for it
                                         (a swap-in, or bytes a copy still
                                         held): a late start is a stall */
    int n_awaited;
    int awaited[DELTA_MAX_OP_IN];     /* roots swapped in for it */
    delta_event awaited_e[DELTA_MAX_OP_IN];
} mg_issued;

struct managed {
    delta_ctx *ctx;
    delta_backend *b;
    const policy_ops *pol;
    void *pst;
    size_t arena;
    void *base;                /* arena base; NULL on sim */
    delta_replay *rp;          /* every device allocation (residency.c) */
    delta_pool *pool;          /* rp's occupancy: stats and queries only */
    bool arena_made;
    int nt, no;
    bool *is_root;
    root_view *rv;             /* per tensor id (roots only) */
    int *acc_start, *acc_ops;  /* accesses of root r: acc_ops[acc_start[r]
                                  .. acc_start[r + 1]) */
    int *end_fwd;              /* last op of a forward-only run that needs
                                  the root (its last forward read, or its
                                  producer) */
    int *pins;                 /* operands of ops being run */
    size_t *off;               /* device offset while bytes are held */
    void **host;               /* host store buffer (kept once made) */
    size_t host_in_use;        /* bytes of the host buffers */
    size_t host_limit;         /* most host_in_use may be; 0 = no cap */
    delta_event *ev;           /* the copy in flight (RES_TO_HOST: its
                                  swap-out; RES_TO_DEVICE: its swap-in) */
    bool *free_after;          /* TO_HOST root past its last use: freed,
                                  not kept, when its bytes are released */
    int *outgoing;             /* roots in RES_TO_HOST, in issue order */
    int n_outgoing;
    /* The step's predicted device timeline (seconds from its start): vt is
     * where compute is at the op being issued (the modelled times of the
     * ops issued so far), out_end[r] where r's swap-out is predicted to
     * land, link_free when the to-host stream is predicted free. A
     * swap-out's bytes go back when vt passes its predicted landing, so
     * the allocation sequence depends on the model, never on when the host
     * happens to see a copy land. Each op timed shifts vt by how far the
     * device ran behind the model (stalls, slow kernels). */
    double vt, link_free;
    double *out_end;
    double step_t0;            /* the device's time at the step's start; < 0
                                  until known */
    delta_event *host_written; /* per root: the last swap-out writing its
                                  host buffer (a swap-in of it waits) */
    delta_event *host_read;    /* per root: the last swap-in reading its
                                  host buffer (a swap-out into it waits) */
    MG_RING(mg_copy) copies[2]; /* [0] to host, [1] to device: issued,
                                   not yet collected */
    MG_RING(mg_tag) tags[3];   /* released ranges a copy ([0] to host, [1]
                                  to device) or a collective ([2]) may
                                  still touch */
    /* Collectives (data parallel) run on the communication stream, after
     * what compute was given before them: comm_ev[r] is the event of the
     * last one that read or wrote root r (seq 0: none). Whatever touches r
     * later on another stream waits for it on the device, and r's bytes
     * given back carry it as a tag. */
    delta_event *comm_ev;
    MG_RING(mg_issued) comm_issued; /* collectives not yet timed */
    MG_RING(mg_issued) issued; /* ops on compute, not yet timed; its cap is
                                  the run-ahead bound */
    mg_issued *cur_issue;      /* the entry of the op being issued */
    double prev_end;           /* device end of the last op timed */
    delta_event step_begin;    /* compute at the step's start */
    double device_busy;        /* compute seconds timed this run */
    bool blocking;             /* the old runtime, for comparison: the host
                                  waits for every op */
    double run_s;              /* the last run's time on the device */
    int *temps;                /* roots recomputed only for a recomputation,
                                  past their last use: freed after the
                                  current op or when an allocation is short */
    int n_temps;
    bool *is_temp;
    mg_slot *scratch;          /* live blocks by offset (making a gap) */
    size_t *gaps, *gap_off;    /* free ranges (making a gap) */
    size_t *dest;              /* per scratch slot: where it moves */
    mg_slot *order;            /* (bytes, scratch slot) of the blocks to
                                  move, largest first (making a gap) */
    size_t in_use;             /* device bytes held */
    size_t soft_limit;         /* 0, or the bytes in use past which an
                                  allocation asks for victims before it
                                  takes free bytes (managed_set_soft_limit) */
    bool soft_ask;             /* choose_victim is being asked only because
                                  of the soft limit */
    double *op_s;              /* per op: last measured seconds */
    bool *op_measured;
    double *op_host_s;         /* per op: host seconds the step loop spent
                                  on it last, waits for the device left
                                  out; -1 before (the calibration prices
                                  each op type's host cost from it) */
    double op_wait_s;          /* the op in progress: throttle waits */
    int cur_op;                /* op of the run being run, -1 between */
    int64_t ticks;             /* ops run so far, recomputations included */
    int64_t step, steps_done;
    bool fwd_only;
    delta_kernel_env env;
    delta_step_stats st;       /* of the run in progress */
    bool replayed;             /* the last training step replayed fully */
    size_t layout_peak;        /* peak of the last plan made, 0 none */
    bool compacted_once;       /* the arena was compacted for a plan */
    size_t whatif_over;        /* peak of the plan around compacted blocks
                                  that did not fit either (this trace) */
    struct link_fit {          /* least-squares sums of measured copies */
        double n, sx, sy, sxx, sxy;
    } lk[2];                   /* [0] to host, [1] to device */
    delta_trace *trace;
    delta_status fail_st;
    char err[512];
    delta_plan_cache *plans;   /* may be NULL */
    uint64_t program_key;      /* delta_program_key(ctx) */
    struct delta_comm *comm;   /* collective ops' ranks (NULL: one) */
};

/* ---- rings and small helpers shared by residency.c and launch.c ---- */
/* Appends to a ring of T (MG_RING), growing it when full (rare: rings are
 * sized for a step at creation). false when memory cannot be had. */
#define RING_PUSH(ring, item)                                                 \
    ring_push((void **)&(ring).a, &(ring).head, &(ring).n, &(ring).cap,       \
              sizeof *(ring).a, &(item))
#define RING_AT(ring, i) ((ring).a[((ring).head + (i)) % (ring).cap])
#define RING_POP(ring)                                                        \
    ((ring).head = ((ring).head + 1) % (ring).cap, (ring).n--)

static inline bool ring_push(void **a, int *head, int *n, int *cap, size_t size,
                      const void *item) {
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 64;
        char *na = malloc(size * (size_t)nc);
        if (!na) return false;
        for (int i = 0; i < *n; i++)
            memcpy(na + size * (size_t)i,
                   (char *)*a + size * (size_t)((*head + i) % *cap), size);
        free(*a);
        *a = na;
        *head = 0;
        *cap = nc;
    }
    memcpy((char *)*a + size * (size_t)((*head + *n) % *cap), item, size);
    (*n)++;
    return true;
}

static inline const char *mg_tname(const managed *m, int r) {
    return m->ctx->tensors[r]->name;
}

static inline void mg_notify(managed *m, int r, managed_event e,
                             double wait_s) {
    if (m->pol->on_event) m->pol->on_event(m->pst, m, r, e, wait_s);
}

/* The last op of the current run that needs non-persistent root r: its
 * last read in a training step, its last forward read (or producer) in a
 * forward-only run. */
static inline int mg_last_needed(const managed *m, int r) {
    return m->fwd_only ? m->end_fwd[r] : m->rv[r].last_use;
}

/* residency.c */
/* Device bytes for key outside any step (persistent tensors at creation):
 * at the policy's place when it has a static layout, else online. */
bool mg_place_untraced(managed *m, size_t bytes, int key, size_t *off);
/* A host store buffer for root r (m->host[r]); false with the run failed
 * (DELTA_ERR_NOMEM and a message) when the cap or the host says no. */
bool mg_host_alloc(managed *m, int r);
bool mg_failf(managed *m, delta_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
bool mg_run_op(managed *m, const delta_op *op, bool recompute);
/* Frees a root past its last use, wherever it is. */
void mg_free_root(managed *m, int r);
/* Collects finished copies (traced, measured; a complete swap-in becomes
 * resident), in order per stream, and drops tags behind complete copies.
 * Never blocks. */
void mg_collect(managed *m);
/* launch.c */
/* Times the ops on the compute stream that are complete, in order. Never
 * blocks. */
void mg_collect_ops(managed *m);
/* Launches k (its operands resident, its outputs and workspace placed) on
 * the compute stream, or a collective on the communication stream, and
 * queues it for timing; is carries the swap-ins it was made to wait for.
 * The run-ahead throttle is here. Returns the event of the op's item. */
delta_event mg_launch(managed *m, const delta_kargs *k, mg_issued *is);
/* Stream s is about to touch root r: it waits on the device for the last
 * collective that touched r, unless that is complete or s is comm. */
void mg_after_comm(managed *m, delta_stream s, int r);
/* Frees the recomputed temporaries no running op holds; true when any
 * bytes were released. */
bool mg_free_temps(managed *m);
/* Between runs, with no copy in flight: slides every live block down to
 * the bottom of the arena (device-side moves, counted); false when they
 * already sit there. */
bool mg_compact(managed *m);
/* The live blocks tile the bottom of the arena. */
bool mg_compacted(managed *m);
/* The end of a run: the compute stream waits for both copy streams on
 * the device, every swap-in is resident; returns compute's event there. */
delta_event mg_join(managed *m);
/* Between runs: the host waits for every copy in flight and collects them
 * (a blocking wait, counted). */
void mg_drain(managed *m);
void mg_trace_memory(managed *m);
/* op's span [t0, t1] on a track of the trace, with its id and the step:
 * compute ("op", "recompute"), comm ("collective"), or the host's clock
 * ("host": the step loop's work on it, "launch", "throttle"). */
void mg_trace_op(managed *m, delta_trace_track track, const delta_op *op,
                 const char *cat, double t0, double t1);

#endif
