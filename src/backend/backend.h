/* The internal backend interface: a table of function pointers plus a
 * context, one implementation per backend (cpu, sim, later cuda). The
 * runtime calls these through the delta_backend_* wrappers at the end of
 * this file; a backend knows nothing of policies. See docs/DEVICE.md.
 *
 * Streams: one compute stream and two copy streams. Work on one stream runs
 * in order; different streams run concurrently. An event marks a point in
 * a stream's order; it is complete when everything issued on that stream
 * before it has finished. Because streams are in order, an event is just
 * (stream, sequence number): no event objects are allocated.
 *
 * Threads: the runtime calls a backend from one host thread at a time (the
 * cpu backend's copy engines are its own threads, hidden behind this
 * interface). Buffers handed to copy() must stay valid and untouched by the
 * host until the copy's event is complete. */
#ifndef DELTA_BACKEND_IMPL_H
#define DELTA_BACKEND_IMPL_H

#include "delta/backend.h"
#include "backend/cpu/kernels.h"

#include <string.h>

typedef enum delta_stream {
    DELTA_STREAM_COMPUTE = 0,
    DELTA_STREAM_TO_HOST,    /* device -> host copies */
    DELTA_STREAM_TO_DEVICE,  /* host -> device copies */
    DELTA_STREAM_COUNT
} delta_stream;

typedef struct delta_event {
    delta_stream stream;
    uint64_t seq;            /* complete when the stream finished seq items */
    double time;             /* sim: the stream's clock at the event;
                                cpu: the wall clock when it was recorded */
} delta_event;

#define DELTA_SPAN_HISTORY 4096

typedef struct delta_backend_ops {
    /* Creates the device arena: one block of exactly `bytes`. *base gets
     * its address (NULL on sim, where only offsets exist). Replaces any
     * previous arena (cpu: after draining the copy streams). */
    delta_status (*arena_create)(void *ctx, size_t bytes, void **base);
    void (*arena_destroy)(void *ctx);
    /* Host store for swapped-out tensors (pinned memory on CUDA). NULL when
     * no memory can be had (never aborts). sim returns a unique non-NULL
     * token that must not be dereferenced. */
    void *(*host_alloc)(void *ctx, size_t bytes);
    void (*host_free)(void *ctx, void *p);
    /* Runs k->op's kernel on the compute stream (cpu: synchronously in the
     * caller's thread; sim: advances the compute clock by its cost). */
    void (*run)(void *ctx, const delta_kargs *k);
    /* Asynchronous copy of bytes on copy stream s (TO_HOST or TO_DEVICE).
     * On the compute stream the copy is a device-side move, in order with
     * the kernels (cpu: a synchronous memcpy). */
    void (*copy)(void *ctx, delta_stream s, void *dst, const void *src,
                 size_t bytes);
    /* Marks the current end of stream s. */
    delta_event (*record)(void *ctx, delta_stream s);
    /* Later work on stream s starts only after e is complete. For the
     * compute stream on cpu this blocks the caller until e completes; on a
     * copy stream it never blocks the caller. e must have been recorded. */
    void (*wait)(void *ctx, delta_stream s, delta_event e);
    /* Whether e is complete now (sim: by the host's time, which is the
     * compute clock). Never blocks. */
    bool (*query)(void *ctx, delta_event e);
    /* Blocks the host until e is complete (sim: moves the compute clock,
     * which is also the host's, to e's time). */
    void (*sync)(void *ctx, delta_event e);
    /* When the item that e marks (the e.seq-th item of its copy stream)
     * started and finished, on the clock below. false when it is not
     * complete yet or too old to be remembered (the last
     * DELTA_SPAN_HISTORY items of each copy stream are). */
    bool (*span)(void *ctx, delta_event e, double *t0, double *t1);
    /* Seconds on the compute stream's clock: wall time (CLOCK_MONOTONIC) on
     * cpu, the virtual compute clock on sim. */
    double (*clock)(void *ctx);
    /* Seconds an op would take (sim: the cost model; cpu: NULL). */
    double (*op_cost)(void *ctx, const delta_op *op);
    /* Drains every stream, then frees everything, the delta_backend
     * included. */
    void (*destroy)(void *ctx);
    /* Synchronous copies between host memory and the arena, for the host's
     * own accesses (initializing parameters, setting inputs, reading the
     * loss and state): ordered after every kernel issued before and done
     * when they return. NULL (cpu): the arena is host memory, a memcpy. */
    void (*upload)(void *ctx, void *dev_dst, const void *host_src,
                   size_t bytes);
    void (*download)(void *ctx, void *host_dst, const void *dev_src,
                     size_t bytes);
} delta_backend_ops;

struct delta_backend {
    const char *name;
    const delta_backend_ops *ops;
    void *ctx;
    double link_bps;      /* per direction; 0 = unthrottled */
    double link_latency_s;
    double device_bytes;  /* 0 = no fixed device size */
    bool has_data;        /* false on sim: buffers hold no data */
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
static inline void delta_backend_sync(delta_backend *b, delta_event e) {
    b->ops->sync(b->ctx, e);
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

/* Fills the tensor t at dev (an address in the arena) with its initial
 * values (delta_init_tensor), staged through host memory when the arena is
 * not host memory. DELTA_ERR_NOMEM when the staging buffer cannot be had
 * (backend.c). */
delta_status delta_backend_init_tensor(delta_backend *b, void *dev,
                                       const delta_tensor *t, uint64_t seed);

/* Records the end of both copy streams and blocks until both are complete
 * (backend.c). */
void delta_backend_sync_copies(delta_backend *b);

/* ---- the sim cost model (sim_backend.c), for dry planning ----------------
 * t(op) = 0 for reshape (a view); otherwise
 *   DELTA_SIM_LAUNCH_S + max(flops / (peak * eff_compute),
 *                            bytes / (hbm * DELTA_SIM_EFF_MEM))
 * where GEMM-like ops (matmul, linear, conv2d, conv2d_dx, conv2d_dw) use
 * peak = tensor_flops (tensor_cores) or fp32_flops and DELTA_SIM_EFF_GEMM,
 * and every other op fp32_flops and DELTA_SIM_EFF_OTHER.
 * A copy takes link_latency_s + bytes / link_bytes_per_s. */
#define DELTA_SIM_LAUNCH_S 5e-6
#define DELTA_SIM_EFF_GEMM 0.7
#define DELTA_SIM_EFF_OTHER 0.25
#define DELTA_SIM_EFF_MEM 0.8

/* Seconds op takes on gpu by the cost model. */
double delta_sim_op_seconds(const delta_gpu_preset *gpu, bool tensor_cores,
                            const delta_op *op);
/* Seconds a host-link copy of bytes takes on gpu. */
double delta_sim_copy_seconds(const delta_gpu_preset *gpu, double bytes);

/* ---- the cpu backend's default link (cpu_backend.c) ----------------------
 * GEMM speed in FLOP/s at the current thread count (measured once per
 * thread count, then cached), and the default link it implies:
 * flops / DELTA_CPU_FLOPS_PER_BYTE bytes/s. */
#define DELTA_CPU_FLOPS_PER_BYTE 1000.0
double delta_cpu_gemm_flops(void);

#endif
