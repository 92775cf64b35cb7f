/* The internal backend interface: a table of function pointers plus a
 * context, one implementation per backend (cpu, sim, later cuda). The
 * runtime calls these through the delta_backend_* wrappers at the end of
 * this file; a backend knows nothing of policies. See docs/DEVICE.md.
 *
 * Streams: one compute stream, two copy streams and a communication
 * stream for the collective ops of data parallel (allreduce, reduce-
 * scatter, allgather between ranks). Work on one stream runs in order;
 * different streams run concurrently. An event marks a point in
 * a stream's order; it is complete when everything issued on that stream
 * before it has finished. Because streams are in order, an event is just
 * (stream, sequence number): no event objects are allocated.
 *
 * Asynchrony: every stream is asynchronous to the host. run and copy
 * (compute stream included) only enqueue; wait orders streams on the
 * device and never blocks the caller; query never blocks; only sync (and
 * upload/download, the host's own accesses) blocks the host. The runtime
 * keeps the host ahead of the device and counts its blocking waits
 * (delta_backend_sync below; host_syncs in the step figures).
 *
 * Threads: the runtime calls a backend from one host thread at a time (the
 * cpu backend's compute and copy engines are its own threads, hidden behind
 * this interface). Buffers handed to copy() and run() must stay valid and
 * untouched by the host until a later event of that stream is complete. */
#ifndef DELTA_BACKEND_IMPL_H
#define DELTA_BACKEND_IMPL_H

#include "delta/backend.h"
#include "backend/cpu/kernels.h"

#include <string.h>

typedef enum delta_stream {
    DELTA_STREAM_COMPUTE = 0,
    DELTA_STREAM_TO_HOST,    /* device -> host copies */
    DELTA_STREAM_TO_DEVICE,  /* host -> device copies */
    DELTA_STREAM_COMM,       /* collective ops between ranks (data parallel) */
    DELTA_STREAM_COUNT
} delta_stream;

typedef struct delta_event {
    delta_stream stream;
    uint64_t seq;            /* complete when the stream finished seq items */
    double time;             /* sim: when the device reaches it, the
                                later of the stream's clock and the
                                host's at the record; cpu: the wall clock
                                when it was recorded */
} delta_event;

#define DELTA_SPAN_HISTORY 4096

typedef struct delta_backend_ops {
    /* Creates the device arena: one block of exactly `bytes`. *base gets
     * its address (NULL on sim, where only offsets exist). Replaces any
     * previous arena (cpu: after draining every stream). */
    delta_status (*arena_create)(void *ctx, size_t bytes, void **base);
    void (*arena_destroy)(void *ctx);
    /* Host store for swapped-out tensors (pinned memory on CUDA). NULL when
     * no memory can be had (never aborts). sim returns a unique non-NULL
     * token that must not be dereferenced. */
    void *(*host_alloc)(void *ctx, size_t bytes);
    void (*host_free)(void *ctx, void *p);
    /* Enqueues k->op's kernel on the compute stream (cpu: a copy of *k and
     * *k->env goes to the compute thread's ring; sim: advances the compute
     * clock by its cost; cuda: launches). One item of the compute stream. */
    void (*run)(void *ctx, const delta_kargs *k);
    /* Enqueues a collective op's kernel (allreduce, reduce-scatter,
     * allgather: k->op between ranks, over k->env->comm) on the COMM
     * stream, concurrent with compute and the copies. One item of COMM.
     * NULL: the backend has no communication stream, and the runtime runs
     * collectives on compute. */
    void (*collective)(void *ctx, const delta_kargs *k);
    /* Asynchronous copy of bytes on stream s. On a copy stream (TO_HOST,
     * TO_DEVICE) it crosses the host link; on the compute stream it is a
     * device-side move, in order with the kernels; never on COMM. One
     * item of s. */
    void (*copy)(void *ctx, delta_stream s, void *dst, const void *src,
                 size_t bytes);
    /* Marks the current end of stream s. */
    delta_event (*record)(void *ctx, delta_stream s);
    /* Later work on stream s starts only after e is complete. Never blocks
     * the caller, on any stream. e must have been recorded. */
    void (*wait)(void *ctx, delta_stream s, delta_event e);
    /* Whether e is complete now (sim: by the host's clock). Never blocks. */
    bool (*query)(void *ctx, delta_event e);
    /* Blocks the host until e is complete (sim: moves the host clock to
     * e's time, plus the cost of a blocking wait). */
    void (*sync)(void *ctx, delta_event e);
    /* When the item that e marks (the e.seq-th item of its stream: a
     * kernel, a copy or a device-side move; compute stream included)
     * started and finished on the device, on clock()'s timeline. false
     * when it is not complete yet, is a wait, or is too old to be
     * remembered (the last DELTA_SPAN_HISTORY items of each stream are).
     * Never blocks. */
    bool (*span)(void *ctx, delta_event e, double *t0, double *t1);
    /* The time, on clock()'s timeline, at which the device reached e on
     * its stream: the later of when e was recorded and when the items
     * before it finished. false when e is not complete yet. Never blocks. */
    bool (*event_time)(void *ctx, delta_event e, double *t);
    /* The host's clock in seconds: wall time (CLOCK_MONOTONIC) on cpu and
     * cuda (cuda maps it onto the GPU events' timeline), the virtual host
     * clock on sim. Never blocks. */
    double (*clock)(void *ctx);
    /* Grows the workspace of g's ops to what this backend's kernels need
     * (delta_backend_fit_program; cuda: timed cuDNN choices). Before
     * planning, never in a step; may block. NULL: the declared ones. */
    void (*fit_program)(void *ctx, delta_ctx *g);
    /* Seconds an op would take (sim: the cost model; cpu: NULL). */
    double (*op_cost)(void *ctx, const delta_op *op);
    /* Drains every stream, then frees everything, the delta_backend
     * included. */
    void (*destroy)(void *ctx);
    /* Synchronous copies between host memory and the arena, for the host's
     * own accesses (initializing parameters, setting inputs, reading the
     * loss and state): ordered after every kernel issued before and done
     * when they return. cpu: waits until every stream is idle, then a
     * memcpy (the arena is host memory). NULL: a plain memcpy. */
    void (*upload)(void *ctx, void *dev_dst, const void *host_src,
                   size_t bytes);
    void (*download)(void *ctx, void *host_dst, const void *dev_src,
                     size_t bytes);
    /* Names the next item issued on stream s (what is a tensor's name;
     * copied, so it need not outlive the call). Only for diagnostics: the
     * stream-order checker (check/stream_check.c) names copies by it,
     * since a copy carries only addresses. NULL in real backends. */
    void (*label)(void *ctx, delta_stream s, const char *what);
} delta_backend_ops;

struct delta_backend {
    const char *name;
    const delta_backend_ops *ops;
    void *ctx;
    double link_bps;      /* per direction; 0 = unthrottled */
    double link_latency_s;
    double device_bytes;  /* 0 = no fixed device size */
    bool has_data;        /* false on sim: buffers hold no data */
    bool computes_bf16;   /* has kernels for BF16 operands (cpu, sim); a
                             session refuses a BF16 program elsewhere */
    /* Kept by the wrappers below, read by the runtime: blocking host waits
     * on events not yet complete (delta_backend_sync), the seconds the
     * host spent in them, and the run-ahead throttle's waits apart. */
    uint64_t host_syncs, throttle_waits;
    double host_wait_s;
};

/* ---- wrappers the runtime calls ----------------------------------------- */

static inline delta_status delta_backend_arena_create(delta_backend *b,
                                                      size_t bytes,
                                                      void **base) {
    return b->ops->arena_create(b->ctx, bytes, base);
}
static inline void delta_backend_arena_destroy(delta_backend *b) {
    b->ops->arena_destroy(b->ctx);
}
static inline void *delta_backend_host_alloc(delta_backend *b, size_t bytes) {
    return b->ops->host_alloc(b->ctx, bytes);
}
static inline void delta_backend_host_free(delta_backend *b, void *p) {
    b->ops->host_free(b->ctx, p);
}
static inline void delta_backend_run(delta_backend *b, const delta_kargs *k) {
    b->ops->run(b->ctx, k);
}
/* A collective op on the COMM stream; true when issued there (false: the
 * backend has no such stream and nothing was issued). */
static inline bool delta_backend_collective(delta_backend *b,
                                            const delta_kargs *k) {
    if (!b->ops->collective) return false;
    b->ops->collective(b->ctx, k);
    return true;
}
static inline void delta_backend_copy(delta_backend *b, delta_stream s,
                                      void *dst, const void *src,
                                      size_t bytes) {
    b->ops->copy(b->ctx, s, dst, src, bytes);
}
static inline delta_event delta_backend_record(delta_backend *b,
                                               delta_stream s) {
    return b->ops->record(b->ctx, s);
}
static inline void delta_backend_wait(delta_backend *b, delta_stream s,
                                      delta_event e) {
    b->ops->wait(b->ctx, s, e);
}
static inline bool delta_backend_query(delta_backend *b, delta_event e) {
    return b->ops->query(b->ctx, e);
}
/* A blocking host wait on e: counted (host_syncs, host_wait_s) when e is
 * not complete yet. The runtime allows itself none inside a steady step. */
static inline void delta_backend_sync(delta_backend *b, delta_event e) {
    if (b->ops->query(b->ctx, e)) return;
    double t0 = b->ops->clock(b->ctx);
    b->ops->sync(b->ctx, e);
    b->host_syncs++;
    b->host_wait_s += b->ops->clock(b->ctx) - t0;
}
/* The run-ahead throttle's wait: the host blocks until e (an event of the
 * compute stream some ops back) so that it stays a bounded number of ops
 * ahead of the device. Counted apart from host_syncs. */
static inline void delta_backend_throttle(delta_backend *b, delta_event e) {
    if (b->ops->query(b->ctx, e)) return;
    double t0 = b->ops->clock(b->ctx);
    b->ops->sync(b->ctx, e);
    b->throttle_waits++;
    b->host_wait_s += b->ops->clock(b->ctx) - t0;
}
static inline bool delta_backend_event_time(delta_backend *b, delta_event e,
                                            double *t) {
    return b->ops->event_time(b->ctx, e, t);
}
static inline bool delta_backend_span(delta_backend *b, delta_event e,
                                      double *t0, double *t1) {
    return b->ops->span(b->ctx, e, t0, t1);
}
static inline double delta_backend_clock(delta_backend *b) {
    return b->ops->clock(b->ctx);
}
/* Seconds the backend's cost model gives op, or -1 when it has none (cpu:
 * the runtime measures instead). */
static inline double delta_backend_op_cost(delta_backend *b,
                                           const delta_op *op) {
    return b->ops->op_cost ? b->ops->op_cost(b->ctx, op) : -1.0;
}
/* Whether buffers hold real data (cpu) or only addresses (sim). */
static inline bool delta_backend_has_data(const delta_backend *b) {
    return b->has_data;
}

/* The host writes bytes at dev (an address in the arena) / reads them
 * from it: a synchronous copy on CUDA, a memcpy where the arena is host
 * memory. */
static inline void delta_backend_upload(delta_backend *b, void *dev,
                                        const void *host, size_t bytes) {
    if (b->ops->upload) b->ops->upload(b->ctx, dev, host, bytes);
    else if (bytes) memcpy(dev, host, bytes);
}
static inline void delta_backend_download(delta_backend *b, void *host,
                                          const void *dev, size_t bytes) {
    if (b->ops->download) b->ops->download(b->ctx, host, dev, bytes);
    else if (bytes) memcpy(host, dev, bytes);
}

/* Names the next item on stream s for diagnostics (the stream-order
 * checker's messages); nothing when the backend has no use for names. The
 * runtime calls it before each copy with the tensor's name. */
static inline void delta_backend_label(delta_backend *b, delta_stream s,
                                       const char *what) {
    if (b->ops->label) b->ops->label(b->ctx, s, what);
}

/* Fills the tensor t at dev (an address in the arena) with its initial
 * values (delta_init_tensor), staged through host memory when the arena is
 * not host memory. DELTA_ERR_NOMEM when the staging buffer cannot be had
 * (backend.c). */
delta_status delta_backend_init_tensor(delta_backend *b, void *dev,
                                       const delta_tensor *t, uint64_t seed);

/* Records the end of both copy streams and of the communication stream
 * and blocks until they are complete (backend.c). */
void delta_backend_sync_copies(delta_backend *b);

/* ---- the stream-order checker (check/stream_check.c, docs/DEVICE.md) ---
 * A backend that wraps `inner`, forwards every call to it and checks that
 * every access to a byte range of the arena or of the host store is
 * ordered on the device (by the stream, by wait() on events, or by the
 * host having seen an event complete) after every conflicting access on
 * another stream: a write after any earlier read or write, a read after
 * the earlier write. A violation names both accesses (op, tensor or copy
 * label, stream) and the bytes; it aborts the process unless the checker
 * was made with DELTA_CHECK_RECORD, which counts violations and keeps the
 * first message instead (for tests). Where the inner arena has no address
 * (sim) the checker hands out a fake, never dereferenced base so that
 * ranges exist. It does not own inner: free it (delta_backend_free) before
 * inner. NULL with a message in err when memory cannot be had. */
#define DELTA_CHECK_RECORD 1u
delta_backend *delta_backend_check_new(delta_backend *inner, unsigned flags,
                                       char *err, size_t err_len);
/* Violations a checker found so far, and the first one's message in *msg
 * ("" when none; may be NULL); -1 when b is not a checker. */
long delta_backend_check_violations(const delta_backend *b, const char **msg);

/* ---- the sim cost model (sim_backend.c), for dry planning ----------------
 * t(op) = 0 for reshape (a view); otherwise
 *   DELTA_SIM_LAUNCH_S + max(flops / (peak * eff_compute),
 *                            bytes / (hbm * DELTA_SIM_EFF_MEM))
 * where GEMM-like ops (matmul, linear, conv2d, conv2d_dx, conv2d_dw) use
 * peak = bf16_flops (BF16 operands), tensor_flops (tensor_cores) or
 * fp32_flops and DELTA_SIM_EFF_GEMM,
 * and every other op fp32_flops and DELTA_SIM_EFF_OTHER.
 * A copy takes link_latency_s + bytes / link_bytes_per_s. These are device
 * times; the host's costs (the sim's host clock) are the preset's
 * launch_host_s, library_host_s, launch_latency_s and sync_wake_s, plus
 * DELTA_SIM_WAIT_HOST_S per wait(s, e) across streams (cudaStreamWaitEvent
 * only queues a command: ~1 us, an estimate). */
#define DELTA_SIM_LAUNCH_S 5e-6
#define DELTA_SIM_WAIT_HOST_S 1e-6
#define DELTA_SIM_EFF_GEMM 0.7
#define DELTA_SIM_EFF_OTHER 0.25
#define DELTA_SIM_EFF_MEM 0.8

/* Seconds op takes on gpu by the cost model. */
double delta_sim_op_seconds(const delta_gpu_preset *gpu, bool tensor_cores,
                            const delta_op *op);
/* Seconds a host-link copy of bytes takes on gpu (at link_bytes_per_s). */
double delta_sim_copy_seconds(const delta_gpu_preset *gpu, double bytes);
/* The same on the link's one direction: its own rate where the description
 * gives one (link_to_host/device_bytes_per_s), else link_bytes_per_s. */
double delta_sim_copy_seconds_dir(const delta_gpu_preset *gpu, double bytes,
                                  bool to_host);

/* ---- measured efficiencies (device files: sim/device_file.c) ------------
 * A description's eff replaces the constant efficiencies above by curves
 * measured per kind of op, and scales each op type's time by a factor:
 *   t(op) = factor[type] x (kernel_s + max(flops / (peak x eff_c),
 *                                          bytes / (hbm x eff_m)))
 *   eff_c  GEMM-like ops: the curve of their kind at the op's flops (conv
 *          dx and dw fall back to conv2d's curve, conv2d to gemm's); other
 *          ops DELTA_SIM_EFF_OTHER
 *   eff_m  the curve of the op's memory kind (reduction or elementwise;
 *          GEMM-like ops read elementwise's) at the op's bytes
 * A kind without a curve keeps its constant, a type without a factor 1. */
typedef enum delta_sim_kind {
    DELTA_SIM_KIND_GEMM = 0,    /* matmul, linear: of the GEMM peak, by flops */
    DELTA_SIM_KIND_CONV2D,      /* conv2d, likewise */
    DELTA_SIM_KIND_CONV2D_DX,
    DELTA_SIM_KIND_CONV2D_DW,
    DELTA_SIM_KIND_ELEMENTWISE, /* streaming ops: of hbm, by bytes */
    DELTA_SIM_KIND_REDUCTION,   /* sums, softmax, norms, pools to one value */
    DELTA_SIM_KIND_COUNT
} delta_sim_kind;

/* Efficiency at a few sizes x (flops for compute kinds, bytes for memory
 * kinds; increasing): interpolated linearly in log x between points, held
 * past the ends. n == 0: no curve. */
#define DELTA_SIM_CURVE_POINTS 16
typedef struct delta_sim_curve {
    int n;
    double x[DELTA_SIM_CURVE_POINTS];
    double eff[DELTA_SIM_CURVE_POINTS];   /* > 0 */
} delta_sim_curve;

struct delta_sim_efficiency {
    delta_sim_curve curve[DELTA_SIM_KIND_COUNT];
    double op_factor[DELTA_OP_TYPE_COUNT]; /* > 0; 0: none (1) */
    /* host seconds an op of the type costs the host (the runtime's step
     * loop and the launch, as measured in keep steps), in place of the
     * preset's launch_host_s (+ library_host_s); 0: none (those) */
    double op_host_s[DELTA_OP_TYPE_COUNT];
    /* the precision of the programs the factors and host costs came from
     * (delta calibrate --precision): 1 + delta_precision; 0: not said */
    int measured_precision;
};
typedef struct delta_sim_efficiency delta_sim_efficiency;

/* "gemm", "conv2d", "conv2d_dx", "conv2d_dw", "elementwise", "reduction". */
const char *delta_sim_kind_name(delta_sim_kind k);
/* The curve an op type's compute term reads (GEMM-like types) or its
 * memory term (the others: elementwise or reduction). */
delta_sim_kind delta_sim_kind_of(delta_op_type t);
/* The curve's efficiency at x (see above); c->n must be > 0. */
double delta_sim_curve_at(const delta_sim_curve *c, double x);


/* ---- the cpu backend's default link (cpu_backend.c) ----------------------
 * GEMM speed in FLOP/s at the current thread count (measured once per
 * thread count, then cached), and the default link it implies:
 * flops / DELTA_CPU_FLOPS_PER_BYTE bytes/s. */
#define DELTA_CPU_FLOPS_PER_BYTE 1000.0
/* The same ratio for BF16 programs: GEMMs run ~15x faster on BF16 tensor
 * cores while the link does not, so one byte per 15,000 flops keeps the
 * cpu's emulated balance where an H100's is (989 TFLOP/s dense BF16 at the
 * sim's 0.7 GEMM efficiency over 50 GB/s is ~13,800; at peak over the 54.7
 * GB/s measured ~18,100). The cpu backend's default link uses it when
 * delta_cpu_backend_opts.bf16_link is set (the tool sets it for
 * --precision bf16). */
#define DELTA_CPU_FLOPS_PER_BYTE_BF16 15000.0
double delta_cpu_gemm_flops(void);

#endif
