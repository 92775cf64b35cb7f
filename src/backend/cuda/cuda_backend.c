/* The cuda backend: an NVIDIA GPU through the CUDA runtime (docs/CUDA.md).
 *
 *  - Device: one arena, a single cudaMalloc of exactly the requested bytes
 *    (base = its device address; the runtime only offsets into it).
 *  - Host store: cudaHostAlloc (pinned, so copies are truly asynchronous
 *    and run at the link's speed); NULL on failure, never abort.
 *  - Streams: one compute stream, two copy streams (to host, to device)
 *    and a communication stream, all non-blocking with respect to the
 *    legacy default stream. Kernels and cuBLAS calls go to the compute
 *    stream, the collective ops of data parallel (NCCL, opened at the first
 *    one: nccl.c) to the communication stream; the kernels are
 *    deterministic (src/backend/cuda/cuda_kernels.h).
 *  - Events. delta_event is (stream, seq): seq counts the items issued on
 *    the stream (kernels, copies, waits). record(s) marks the stream's end
 *    with a CUDA event kept in a ring per stream, slot seq % EV_RING, with
 *    the seq it holds; a second record at the same seq reuses it. Before a
 *    slot is reused its old event is waited for, so a slot holding a later
 *    seq than asked means the asked one is complete. That wait is the
 *    backend's only host wait outside sync and upload/download: it keeps
 *    the host at most 4,096 items ahead of the device on one stream.
 *    `done` per stream is the highest seq known complete: the fast path of
 *    query and sync.
 *  - Spans: every kernel, copy and device-side move, on every stream,
 *    records an event before and after it (item_begin/item_end), so span()
 *    gives its start and end on the GPU and event_time() the time the GPU
 *    reached any recorded event, both read without blocking once complete.
 *    Op times are to be read from these: clock() is the host's, so a clock
 *    read around run() measures the launch, not the kernel. (Two event
 *    records cost the host ~1-2 us a kernel.)
 *  - Clock: clock() is the host's wall time (CLOCK_MONOTONIC) put on the
 *    events' timeline and never blocks: at creation a base event is
 *    recorded and waited for, and the wall time then (wall0) is its time 0;
 *    clock() = wall - wall0, an event's time is base_s + its elapsed time
 *    from the base event. The two agree to the base event's wake-up (a few
 *    us) and drift apart by their oscillators' difference (at 5 ppm,
 *    0.3 ms a minute; not measured), which nothing corrects.
 *    cudaEventElapsedTime is float milliseconds (1 us steps at 16 s from
 *    the base), so every REBASE_S of wall time a new base is recorded on
 *    the compute stream and taken once complete (rebase_poll): its time
 *    from the old base becomes base_s. Never a host wait.
 *  - The host's own accesses to the arena (upload/download) are copies on
 *    the compute stream followed by a wait for it: in order with the
 *    kernels, and complete when they return.
 *  - Convolutions: cuDNN when libcudnn.so.9 can be loaded (cudnn_conv.c),
 *    else im2col + cuBLAS (cu_conv.cu). fit_program chooses each
 *    convolution's cuDNN algorithm by timing before the program is planned
 *    and grows the op's workspace to what it needs.
 *  - BF16 (mixed precision): matmul and linear on the tensor cores through
 *    cuBLASLt (cu_lt_gemm.cu), the convolutions through cuDNN, most other
 *    ops' kernels on BF16 themselves, the rest on fp32 copies in their
 *    workspace (cu_bf16.cu). linear's bias, F32 or BF16, goes into the
 *    GEMM's epilogue (DELTA_GEMM_EPILOGUE=0: a pass of its own).
 *  - Outside the budget: the CUDA context, the cuBLAS and cuBLASLt handles
 *    with their shared fixed workspace (CUBLAS_WS_BYTES, set so cuBLAS
 *    never allocates and stays deterministic) and a small scratch buffer for reductions
 *    (DELTA_CUDA_SCRATCH_BYTES); the arena is the only memory tensors use.
 *
 * CUDA errors inside a step (an illegal address, a lost device) are not
 * recoverable: they abort with the call and CUDA's message, like any
 * other broken invariant (DELTA_ASSERT). Failing to get memory or a device
 * at creation returns an error instead. */
#include "backend/backend.h"
#include "backend/cuda/cuda_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EV_RING DELTA_SPAN_HISTORY
#define CUBLAS_WS_BYTES ((size_t)32 << 20)
#define REBASE_S 10.0
#define NOMINAL_LATENCY_S 10e-6

#define CK(call)                                                            \
    do {                                                                    \
        cudaError_t e_ = (call);                                            \
        DELTA_ASSERTF(e_ == cudaSuccess, "%s: %s", #call,                   \
                      cudaGetErrorString(e_));                              \
    } while (0)

typedef struct cstream {
    cudaStream_t s;
    uint64_t items;        /* items issued */
    uint64_t done;         /* every seq <= done is complete */
    cudaEvent_t *ev;       /* [EV_RING]: the end of item ev_seq[slot] */
    uint64_t *ev_seq;      /* 0: slot unused */
    cudaEvent_t *start;    /* [EV_RING]: the start of item start_seq[slot] */
    uint64_t *start_seq;
} cstream;

typedef struct cuda_backend {
    delta_backend base;    /* base.ctx == this */
    int device;
    cstream st[DELTA_STREAM_COUNT];
    cublasHandle_t blas;
    cublasLtHandle_t lt;   /* the BF16 GEMMs */
    delta_cudnn *dnn;      /* NULL: convolutions on im2col + cuBLAS */
    char conv_path[320];   /* what convolutions run on, for the CLI */
    void *blas_ws, *scratch;
    delta_cuda_kctx kc;
    delta_nccl *nccl;      /* the collectives' NCCL, from the first one */
    cudaEvent_t t_base;    /* the events' timeline: t_base is at base_s */
    cudaEvent_t t_cand;    /* the next base, once complete (rebase_poll) */
    bool cand_pending;     /* t_cand recorded, not taken yet */
    double base_s;
    double wall0;          /* CLOCK_MONOTONIC when the first base completed */
    double base_wall;      /* CLOCK_MONOTONIC when t_base was taken */
    void *arena;
} cuda_backend;

static void be_stream_sync_all(cuda_backend *be) {
    for (int s = 0; s < DELTA_STREAM_COUNT; s++)
        if (be->st[s].s) CK(cudaStreamSynchronize(be->st[s].s));
}

/* ---- events -------------------------------------------------------------- */

/* Records the end of stream s (at its current item count) into its ring. */
static uint64_t ev_record(cuda_backend *be, delta_stream s) {
    cstream *cs = &be->st[s];
    uint64_t seq = cs->items;
    size_t slot = (size_t)(seq % EV_RING);
    if (seq == 0 || cs->ev_seq[slot] == seq) return seq;
    uint64_t old = cs->ev_seq[slot];
    if (old && old > cs->done) { /* keep the invariant: reused => complete */
        CK(cudaEventSynchronize(cs->ev[slot]));
        cs->done = old;
    }
    CK(cudaEventRecord(cs->ev[slot], cs->s));
    cs->ev_seq[slot] = seq;
    return seq;
}

/* The ring's event for e, or NULL when e is known complete. */
static cudaEvent_t *ev_find(cuda_backend *be, delta_event e) {
    DELTA_ASSERT((unsigned)e.stream < DELTA_STREAM_COUNT);
    cstream *cs = &be->st[e.stream];
    DELTA_ASSERTF(e.seq <= cs->items, "event %llu of stream %d was never "
                  "recorded", (unsigned long long)e.seq, (int)e.stream);
    if (e.seq == 0 || e.seq <= cs->done) return NULL;
    size_t slot = (size_t)(e.seq % EV_RING);
    if (cs->ev_seq[slot] > e.seq) return NULL; /* reused: complete */
    DELTA_ASSERTF(cs->ev_seq[slot] == e.seq, "event %llu of stream %d was "
                  "never recorded", (unsigned long long)e.seq, (int)e.stream);
    return &cs->ev[slot];
}

static void mark_done(cuda_backend *be, delta_event e) {
    if (e.seq > be->st[e.stream].done) be->st[e.stream].done = e.seq;
}

/* ev's time on the events' timeline (ev and t_base complete). */
static double since_base(cuda_backend *be, cudaEvent_t ev) {
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, be->t_base, ev));
    return be->base_s + (double)ms * 1e-3;
}

static double wall_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Keeps since_base's float milliseconds fine: once the base is REBASE_S
 * old (wall time) a candidate is recorded on the compute stream; once it
 * has completed (asked, never waited for) it becomes the base. The ring's
 * events cannot be the base: their slots are recorded again later. */
static void rebase_poll(cuda_backend *be, double wall) {
    if (be->cand_pending) {
        cudaError_t r = cudaEventQuery(be->t_cand);
        if (r == cudaErrorNotReady) return;
        DELTA_ASSERTF(r == cudaSuccess, "cudaEventQuery: %s",
                      cudaGetErrorString(r));
        double t = since_base(be, be->t_cand);
        cudaEvent_t old = be->t_base;
        be->t_base = be->t_cand;
        be->t_cand = old;
        be->base_s = t;
        be->base_wall = wall;
        be->cand_pending = false;
    } else if (wall - be->base_wall > REBASE_S) {
        CK(cudaEventRecord(be->t_cand, be->st[DELTA_STREAM_COMPUTE].s));
        be->cand_pending = true;
    }
}

/* Starts item seq = items + 1 of stream s: records its start event in the
 * slot of seq. That slot's previous end event guards its start event too
 * (a start is recorded before its end, so completes before it). */
static uint64_t item_begin(cuda_backend *be, delta_stream s) {
    cstream *cs = &be->st[s];
    uint64_t seq = cs->items + 1;
    size_t slot = (size_t)(seq % EV_RING);
    uint64_t old = cs->ev_seq[slot];
    if (old && old > cs->done) {
        CK(cudaEventSynchronize(cs->ev[slot]));
        cs->done = old;
    }
    CK(cudaEventRecord(cs->start[slot], cs->s));
    cs->start_seq[slot] = seq;
    return seq;
}

/* Ends item seq of stream s (what was enqueued since item_begin). */
static void item_end(cuda_backend *be, delta_stream s, uint64_t seq) {
    be->st[s].items = seq;
    ev_record(be, s);
}

/* ---- the interface -------------------------------------------------------- */

static void cu_arena_destroy(void *ctx) {
    cuda_backend *be = ctx;
    if (!be->arena) return;
    be_stream_sync_all(be); /* nothing may still touch it */
    CK(cudaFree(be->arena));
    be->arena = NULL;
}

static delta_status cu_arena_create(void *ctx, size_t bytes, void **base) {
    cuda_backend *be = ctx;
    cu_arena_destroy(be);
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it */
        if (base) *base = NULL;
        return DELTA_ERR_NOMEM;
    }
    be->arena = p;
    if (base) *base = p;
    return DELTA_OK;
}

static void *cu_host_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault) !=
        cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void cu_host_free(void *ctx, void *p) {
    (void)ctx;
    if (p) CK(cudaFreeHost(p));
}

static void cu_run(void *ctx, const delta_kargs *k) {
    cuda_backend *be = ctx;
    uint64_t seq = item_begin(be, DELTA_STREAM_COMPUTE);
    delta_cuda_run(&be->kc, k);
    cudaError_t e = cudaGetLastError();
    DELTA_ASSERTF(e == cudaSuccess, "launching %s (op %d): %s", k->op->name,
                  k->op->id, cudaGetErrorString(e));
    item_end(be, DELTA_STREAM_COMPUTE, seq);
}

/* A collective op on the communication stream through NCCL, opened by
 * the first one (every rank reaches its first collective: they join
 * there). */
static void cu_collective(void *ctx, const delta_kargs *k) {
    cuda_backend *be = ctx;
    if (!be->nccl) {
        char why[512];
        be->nccl = delta_nccl_open(k->env ? k->env->comm : NULL,
                                   be->st[DELTA_STREAM_COMM].s, why,
                                   sizeof why);
        DELTA_ASSERTF(be->nccl, "cuda backend: NCCL for op %d (%s): %s",
                      k->op->id, k->op->name, why);
    }
    uint64_t seq = item_begin(be, DELTA_STREAM_COMM);
    delta_nccl_run(be->nccl, k);
    cudaError_t e = cudaGetLastError();
    DELTA_ASSERTF(e == cudaSuccess, "launching %s (op %d): %s", k->op->name,
                  k->op->id, cudaGetErrorString(e));
    item_end(be, DELTA_STREAM_COMM, seq);
}

static void cu_copy(void *ctx, delta_stream s, void *dst, const void *src,
                    size_t bytes) {
    cuda_backend *be = ctx;
    DELTA_ASSERT((unsigned)s < DELTA_STREAM_COUNT && s != DELTA_STREAM_COMM);
    uint64_t seq = item_begin(be, s);
    if (s == DELTA_STREAM_COMPUTE)
        delta_cuda_memmove(&be->kc, dst, src, bytes);
    else if (bytes)
        CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, be->st[s].s));
    item_end(be, s, seq);
}

static delta_event cu_record(void *ctx, delta_stream s) {
    cuda_backend *be = ctx;
    DELTA_ASSERT((unsigned)s < DELTA_STREAM_COUNT);
    delta_event e = {.stream = s, .seq = ev_record(be, s), .time = 0};
    return e;
}

static void cu_wait(void *ctx, delta_stream s, delta_event e) {
    cuda_backend *be = ctx;
    DELTA_ASSERT((unsigned)s < DELTA_STREAM_COUNT);
    if (e.stream == s) return; /* a stream is in order */
    cudaEvent_t *ev = ev_find(be, e);
    if (!ev) return;
    CK(cudaStreamWaitEvent(be->st[s].s, *ev, 0));
    be->st[s].items++; /* as on cpu, the wait is an item of s */
}

static bool cu_query(void *ctx, delta_event e) {
    cuda_backend *be = ctx;
    cudaEvent_t *ev = ev_find(be, e);
    if (!ev) return true;
    cudaError_t r = cudaEventQuery(*ev);
    if (r == cudaErrorNotReady) return false;
    DELTA_ASSERTF(r == cudaSuccess, "cudaEventQuery: %s",
                  cudaGetErrorString(r));
    mark_done(be, e);
    return true;
}

static void cu_sync(void *ctx, delta_event e) {
    cuda_backend *be = ctx;
    cudaEvent_t *ev = ev_find(be, e);
    if (!ev) return;
    CK(cudaEventSynchronize(*ev));
    mark_done(be, e);
}

/* The ring slot of e when it still holds e's end event (and, with start,
 * its start event); -1 when e is a wait, an upload or download, too old, or
 * not recorded. Never blocks. */
static long ev_slot(cuda_backend *be, delta_event e, bool start) {
    DELTA_ASSERT((unsigned)e.stream < DELTA_STREAM_COUNT);
    cstream *cs = &be->st[e.stream];
    size_t slot = (size_t)(e.seq % EV_RING);
    if (e.seq == 0 || e.seq > cs->items || cs->ev_seq[slot] != e.seq ||
        (start && cs->start_seq[slot] != e.seq))
        return -1;
    return (long)slot;
}

/* Whether the end event in slot is complete (asked, never waited for). */
static bool slot_done(cuda_backend *be, delta_event e, long slot) {
    cudaError_t r = cudaEventQuery(be->st[e.stream].ev[slot]);
    if (r == cudaErrorNotReady) return false;
    DELTA_ASSERTF(r == cudaSuccess, "cudaEventQuery: %s",
                  cudaGetErrorString(r));
    mark_done(be, e);
    return true;
}

static bool cu_span(void *ctx, delta_event e, double *t0, double *t1) {
    cuda_backend *be = ctx;
    long slot = ev_slot(be, e, true);
    if (slot < 0 || !slot_done(be, e, slot)) return false;
    rebase_poll(be, wall_s());
    *t0 = since_base(be, be->st[e.stream].start[slot]);
    *t1 = since_base(be, be->st[e.stream].ev[slot]);
    return true;
}

static bool cu_event_time(void *ctx, delta_event e, double *t) {
    cuda_backend *be = ctx;
    long slot = ev_slot(be, e, false);
    if (slot < 0 || !slot_done(be, e, slot)) return false;
    rebase_poll(be, wall_s());
    *t = since_base(be, be->st[e.stream].ev[slot]);
    return true;
}

static double cu_clock(void *ctx) {
    cuda_backend *be = ctx;
    double wall = wall_s();
    rebase_poll(be, wall);
    return wall - be->wall0;
}

static void cu_upload(void *ctx, void *dev, const void *host, size_t bytes) {
    cuda_backend *be = ctx;
    if (!bytes) return;
    cstream *cs = &be->st[DELTA_STREAM_COMPUTE];
    CK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, cs->s));
    CK(cudaStreamSynchronize(cs->s));
    cs->items++;
}

static void cu_download(void *ctx, void *host, const void *dev, size_t bytes) {
    cuda_backend *be = ctx;
    if (!bytes) return;
    cstream *cs = &be->st[DELTA_STREAM_COMPUTE];
    CK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, cs->s));
    CK(cudaStreamSynchronize(cs->s));
    cs->items++;
}

static void cu_destroy(void *ctx) {
    cuda_backend *be = ctx;
    /* teardown after a failed creation: only what was made */
    for (int s = 0; s < DELTA_STREAM_COUNT; s++)
        if (be->st[s].s) cudaStreamSynchronize(be->st[s].s);
    if (be->arena) cudaFree(be->arena);
    delta_cudnn_close(be->dnn);
    delta_nccl_close(be->nccl);
    if (be->blas) cublasDestroy(be->blas);
    if (be->lt) cublasLtDestroy(be->lt);
    if (be->blas_ws) cudaFree(be->blas_ws);
    if (be->scratch) cudaFree(be->scratch);
    if (be->t_base) cudaEventDestroy(be->t_base);
    if (be->t_cand) cudaEventDestroy(be->t_cand);
    for (int s = 0; s < DELTA_STREAM_COUNT; s++) {
        cstream *cs = &be->st[s];
        for (int i = 0; i < EV_RING; i++) {
            if (cs->ev && cs->ev[i]) cudaEventDestroy(cs->ev[i]);
            if (cs->start && cs->start[i]) cudaEventDestroy(cs->start[i]);
        }
        free(cs->ev);
        free(cs->ev_seq);
        free(cs->start);
        free(cs->start_seq);
        if (cs->s) cudaStreamDestroy(cs->s);
    }
    free(be);
}

static void cu_fit_program(void *ctx, delta_ctx *g) {
    cuda_backend *be = ctx;
    if (!be->dnn) return;
    for (int i = 0; i < g->n_ops; i++) {
        delta_op *op = &g->ops[i];
        if (!delta_cuda_is_conv(op->type)) continue;
        const delta_tensor *in[DELTA_MAX_OP_IN], *out[DELTA_MAX_OP_OUT];
        for (int j = 0; j < op->n_in; j++) in[j] = g->tensors[op->in[j]];
        for (int j = 0; j < op->n_out; j++) out[j] = g->tensors[op->out[j]];
        delta_conv_dims d = delta_conv_dims_of(op, in, out);
        /* a BF16 convolution runs on its BF16 operands (cu_conv.cu,
         * delta_cu_conv_bf16) with the whole declared workspace, the
         * CPU's widening copies included: the choice is timed for all of
         * it; F32 ones likewise */
        op->workspace = delta_cudnn_tune(be->dnn, op->type, &d,
                                         out[0]->dtype, op->workspace);
    }
    /* a cache that cannot be written costs the next run the timing again,
     * nothing more: not an error */
    char why[256];
    (void)delta_cudnn_save(be->dnn, why, sizeof why);
}

static const delta_backend_ops cuda_ops = {
    .fit_program = cu_fit_program,
    .arena_create = cu_arena_create,
    .arena_destroy = cu_arena_destroy,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .run = cu_run,
    .collective = cu_collective,
    .copy = cu_copy,
    .record = cu_record,
    .wait = cu_wait,
    .query = cu_query,
    .sync = cu_sync,
    .span = cu_span,
    .event_time = cu_event_time,
    .clock = cu_clock,
    .op_cost = NULL,
    .destroy = cu_destroy,
    .upload = cu_upload,
    .download = cu_download,
};

/* ---- construction --------------------------------------------------------- */

/* linear's bias in the GEMM's epilogue unless DELTA_GEMM_EPILOGUE=0 (to
 * measure the separate pass against it, and to test that route). */
static bool gemm_epilogue_wanted(void) {
    const char *env = getenv("DELTA_GEMM_EPILOGUE");
    return !(env && !strcmp(env, "0"));
}

bool delta_cuda_built(void) { return true; }

const char *delta_cuda_conv_path(const delta_backend *b) {
    if (!b || b->ops != &cuda_ops) return NULL;
    return ((const cuda_backend *)b->ctx)->conv_path;
}

int delta_cuda_device_count(char *err, size_t err_len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n <= 0) {
        (void)cudaGetLastError();
        if (err && err_len)
            snprintf(err, err_len, "no CUDA device (cudaGetDeviceCount: %s)",
                     e != cudaSuccess ? cudaGetErrorString(e)
                                      : "0 devices");
        return 0;
    }
    return n;
}

/* Host-to-device bandwidth of pinned memory, bytes/s: best of a few 32 MiB
 * copies timed with events. 0 when the buffers cannot be had. */
static double measure_link(cuda_backend *be) {
    const size_t n = (size_t)32 << 20;
    void *h = NULL, *d = NULL;
    double bps = 0;
    if (cudaHostAlloc(&h, n, cudaHostAllocDefault) == cudaSuccess &&
        cudaMalloc(&d, n) == cudaSuccess) {
        cudaStream_t s = be->st[DELTA_STREAM_TO_DEVICE].s;
        memset(h, 0, n);
        for (int r = 0; r < 4; r++) {
            float ms = 0;
            CK(cudaEventRecord(be->t_base, s));
            CK(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s));
            CK(cudaEventRecord(be->t_cand, s));
            CK(cudaEventSynchronize(be->t_cand));
            CK(cudaEventElapsedTime(&ms, be->t_base, be->t_cand));
            double b = ms > 0 ? (double)n / (ms * 1e-3) : 0;
            if (r > 0 && b > bps) bps = b; /* the first one warms up */
        }
    }
    (void)cudaGetLastError();
    if (d) cudaFree(d);
    if (h) cudaFreeHost(h);
    return bps;
}

delta_backend *delta_backend_cuda_new(const delta_cuda_backend_opts *opts,
                                      char *err, size_t err_len) {
    char dummy[8], why[256];
    if (!err) { err = dummy; err_len = sizeof dummy; }
    int dev = opts ? opts->device : 0;
    int n = delta_cuda_device_count(why, sizeof why);
    if (n == 0) {
        snprintf(err, err_len, "cuda backend: %s", why);
        return NULL;
    }
    if (dev < 0 || dev >= n) {
        snprintf(err, err_len, "cuda backend: no CUDA device %d (%d present)",
                 dev, n);
        return NULL;
    }
    cudaError_t e = cudaSetDevice(dev);
    if (e != cudaSuccess) {
        snprintf(err, err_len, "cuda backend: cudaSetDevice(%d): %s", dev,
                 cudaGetErrorString(e));
        return NULL;
    }
    cuda_backend *be = calloc(1, sizeof *be);
    if (!be) {
        snprintf(err, err_len, "cuda backend: out of host memory");
        return NULL;
    }
    be->device = dev;
    const char *step = "out of host memory";
    for (int s = 0; s < DELTA_STREAM_COUNT; s++) {
        cstream *cs = &be->st[s];
        cs->ev = calloc(EV_RING, sizeof *cs->ev);
        cs->ev_seq = calloc(EV_RING, sizeof *cs->ev_seq);
        cs->start = calloc(EV_RING, sizeof *cs->start);
        cs->start_seq = calloc(EV_RING, sizeof *cs->start_seq);
        if (!cs->ev || !cs->ev_seq || !cs->start || !cs->start_seq) goto fail;
        step = "cudaStreamCreateWithFlags";
        e = cudaStreamCreateWithFlags(&cs->s, cudaStreamNonBlocking);
        if (e != cudaSuccess) goto fail_cuda;
        step = "cudaEventCreate";
        for (int i = 0; i < EV_RING; i++) {
            e = cudaEventCreate(&cs->ev[i]);
            if (e == cudaSuccess) e = cudaEventCreate(&cs->start[i]);
            if (e != cudaSuccess) goto fail_cuda;
        }
    }
    step = "cudaEventCreate";
    if ((e = cudaEventCreate(&be->t_base)) != cudaSuccess ||
        (e = cudaEventCreate(&be->t_cand)) != cudaSuccess)
        goto fail_cuda;
    step = "cudaMalloc (cuBLAS workspace and scratch)";
    if ((e = cudaMalloc(&be->blas_ws, CUBLAS_WS_BYTES)) != cudaSuccess ||
        (e = cudaMalloc(&be->scratch, DELTA_CUDA_SCRATCH_BYTES)) != cudaSuccess)
        goto fail_cuda;
    if (cublasCreate(&be->blas) != CUBLAS_STATUS_SUCCESS ||
        cublasLtCreate(&be->lt) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(be->blas, be->st[DELTA_STREAM_COMPUTE].s) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(be->blas, be->blas_ws, CUBLAS_WS_BYTES) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(be->blas, CUBLAS_DEFAULT_MATH) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasSetAtomicsMode(be->blas, CUBLAS_ATOMICS_NOT_ALLOWED) !=
            CUBLAS_STATUS_SUCCESS) {
        snprintf(err, err_len, "cuda backend: cannot set up cuBLAS");
        cu_destroy(be);
        return NULL;
    }
    struct cudaDeviceProp prop;
    char model[320] = "unknown GPU";
    if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
        snprintf(model, sizeof model, "%s sm_%d%d", prop.name, prop.major,
                 prop.minor);
    be->dnn = delta_cudnn_open(be->st[DELTA_STREAM_COMPUTE].s, model, why,
                               sizeof why);
    if (be->dnn) {
        size_t v = delta_cudnn_version(be->dnn);
        snprintf(be->conv_path, sizeof be->conv_path, "cuDNN %zu.%zu.%zu",
                 v / 10000, v / 100 % 100, v % 100);
    } else {
        snprintf(be->conv_path, sizeof be->conv_path,
                 "im2col + cuBLAS (no cuDNN: %s)", why);
    }
    be->kc = (delta_cuda_kctx){.stream = be->st[DELTA_STREAM_COMPUTE].s,
                               .blas = be->blas,
                               .scratch = be->scratch,
                               .scratch_bytes = DELTA_CUDA_SCRATCH_BYTES,
                               .dnn = be->dnn,
                               .lt = be->lt,
                               .blas_ws = be->blas_ws,
                               .blas_ws_bytes = CUBLAS_WS_BYTES,
                               .gemm_epilogue = gemm_epilogue_wanted()};
    size_t free_b = 0, total_b = 0;
    step = "cudaMemGetInfo";
    if ((e = cudaMemGetInfo(&free_b, &total_b)) != cudaSuccess) goto fail_cuda;

    be->base.name = "cuda";
    be->base.ops = &cuda_ops;
    be->base.ctx = be;
    be->base.link_bps = measure_link(be);
    be->base.link_latency_s = NOMINAL_LATENCY_S;
    be->base.device_bytes = (double)total_b;
    be->base.has_data = true;
    be->base.computes_bf16 = true; /* cu_bf16.cu */
    /* the clock's origin: the base event at time 0, and the host's wall
     * time just after it completed */
    CK(cudaEventRecord(be->t_base, be->st[DELTA_STREAM_COMPUTE].s));
    CK(cudaEventSynchronize(be->t_base));
    be->base_s = 0;
    be->wall0 = be->base_wall = wall_s();
    return &be->base;
fail_cuda:
    (void)cudaGetLastError();
    snprintf(err, err_len, "cuda backend: %s: %s", step, cudaGetErrorString(e));
    cu_destroy(be);
    return NULL;
fail:
    snprintf(err, err_len, "cuda backend: %s", step);
    cu_destroy(be);
    return NULL;
}
