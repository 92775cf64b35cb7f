/* The cuda backend: an NVIDIA GPU through the CUDA runtime (docs/CUDA.md).
 *
 *  - Device: one arena, a single cudaMalloc of exactly the requested bytes
 *    (base = its device address; the runtime only offsets into it).
 *  - Host store: cudaHostAlloc (pinned, so copies are truly asynchronous
 *    and run at the link's speed); NULL on failure, never abort.
 *  - Streams: one compute stream and two copy streams (to host, to device),
 *    all non-blocking with respect to the legacy default stream. Kernels
 *    and cuBLAS calls go to the compute stream; the kernels are
 *    deterministic (src/backend/cuda/cuda_kernels.h).
 *  - Events. delta_event is (stream, seq): seq counts the items issued on
 *    the stream (kernels, copies, waits). record(s) marks the stream's end
 *    with a CUDA event kept in a ring per stream, slot seq % EV_RING, with
 *    the seq it holds; a second record at the same seq reuses it. Before a
 *    slot is reused its old event is waited for, so a slot holding a later
 *    seq than asked means the asked one is complete (and 4,096 items in
 *    flight on one stream throttle the host instead of losing events).
 *    `done` per stream is the highest seq known complete: the fast path of
 *    query and sync.
 *  - Copy spans: every copy on a copy stream records an event before and
 *    after it, so span() gives the copy's start and end on the GPU.
 *  - Clock: seconds of GPU time from the CUDA events, measured from a base
 *    event recorded at creation. clock() records an event on the compute
 *    stream and waits for it: it is the time at which everything issued so
 *    far on the compute stream has finished, the same meaning as the sim's
 *    compute clock, so a host that measures an op between two clock()
 *    calls measures the GPU's time for it (and the managed runtime's
 *    per-op measurements are real). The cost: clock() blocks the host
 *    until the GPU catches up (a session with `keep` calls it twice a run;
 *    the managed runtime around every op). cudaEventElapsedTime is float
 *    milliseconds, so the base is moved forward every REBASE_S seconds to
 *    keep sub-microsecond resolution.
 *  - The host's own accesses to the arena (upload/download) are copies on
 *    the compute stream followed by a wait for it: in order with the
 *    kernels, and complete when they return.
 *  - Convolutions: cuDNN when libcudnn.so.9 can be loaded (cudnn_conv.c),
 *    else im2col + cuBLAS (cu_conv.cu).
 *  - Outside the budget: the CUDA context, the cuBLAS handle with its
 *    fixed workspace (CUBLAS_WS_BYTES, set so cuBLAS never allocates and
 *    stays deterministic) and a small scratch buffer for reductions
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
    cudaEvent_t *start;    /* copy streams: the start of copy start_seq[slot] */
    uint64_t *start_seq;
} cstream;

typedef struct cuda_backend {
    delta_backend base;    /* base.ctx == this */
    int device;
    cstream st[DELTA_STREAM_COUNT];
    cublasHandle_t blas;
    delta_cudnn *dnn;      /* NULL: convolutions on im2col + cuBLAS */
    char conv_path[320];   /* what convolutions run on, for the CLI */
    void *blas_ws, *scratch;
    delta_cuda_kctx kc;
    cudaEvent_t t_base, t_now;
    double base_s;         /* clock value at t_base */
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

/* Seconds from t_base to ev (both complete). */
static double since_base(cuda_backend *be, cudaEvent_t ev) {
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, be->t_base, ev));
    return be->base_s + (double)ms * 1e-3;
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
    delta_cuda_run(&be->kc, k);
    cudaError_t e = cudaGetLastError();
    DELTA_ASSERTF(e == cudaSuccess, "launching %s (op %d): %s", k->op->name,
                  k->op->id, cudaGetErrorString(e));
    be->st[DELTA_STREAM_COMPUTE].items++;
}

static void cu_copy(void *ctx, delta_stream s, void *dst, const void *src,
                    size_t bytes) {
    cuda_backend *be = ctx;
    DELTA_ASSERT((unsigned)s < DELTA_STREAM_COUNT);
    cstream *cs = &be->st[s];
    if (s == DELTA_STREAM_COMPUTE) {
        delta_cuda_memmove(&be->kc, dst, src, bytes);
        cs->items++;
        return;
    }
    uint64_t seq = cs->items + 1;
    size_t slot = (size_t)(seq % EV_RING);
    /* the end event of this slot's previous item guards its start event
     * too: a start is recorded before its end, so complete before it */
    uint64_t old = cs->ev_seq[slot];
    if (old && old > cs->done) {
        CK(cudaEventSynchronize(cs->ev[slot]));
        cs->done = old;
    }
    CK(cudaEventRecord(cs->start[slot], cs->s));
    cs->start_seq[slot] = seq;
    if (bytes)
        CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cs->s));
    cs->items = seq;
    ev_record(be, s);
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

static bool cu_span(void *ctx, delta_event e, double *t0, double *t1) {
    cuda_backend *be = ctx;
    if (e.stream == DELTA_STREAM_COMPUTE || e.seq == 0 ||
        (unsigned)e.stream >= DELTA_STREAM_COUNT)
        return false;
    cstream *cs = &be->st[e.stream];
    size_t slot = (size_t)(e.seq % EV_RING);
    if (e.seq > cs->items || cs->ev_seq[slot] != e.seq ||
        cs->start_seq[slot] != e.seq)
        return false; /* a wait, or too old */
    cudaError_t r = cudaEventQuery(cs->ev[slot]);
    if (r == cudaErrorNotReady) return false;
    DELTA_ASSERTF(r == cudaSuccess, "cudaEventQuery: %s",
                  cudaGetErrorString(r));
    mark_done(be, e);
    *t0 = since_base(be, cs->start[slot]);
    *t1 = since_base(be, cs->ev[slot]);
    return true;
}

static bool cu_event_time(void *ctx, delta_event e, double *t) {
    cuda_backend *be = ctx;
    DELTA_ASSERT((unsigned)e.stream < DELTA_STREAM_COUNT);
    cstream *cs = &be->st[e.stream];
    size_t slot = (size_t)(e.seq % EV_RING);
    if (e.seq == 0 || cs->ev_seq[slot] != e.seq) return false;
    cudaError_t r = cudaEventQuery(cs->ev[slot]);
    if (r == cudaErrorNotReady) return false;
    DELTA_ASSERTF(r == cudaSuccess, "cudaEventQuery: %s",
                  cudaGetErrorString(r));
    mark_done(be, e);
    *t = since_base(be, cs->ev[slot]);
    return true;
}

static double cu_clock(void *ctx) {
    cuda_backend *be = ctx;
    CK(cudaEventRecord(be->t_now, be->st[DELTA_STREAM_COMPUTE].s));
    CK(cudaEventSynchronize(be->t_now));
    double t = since_base(be, be->t_now);
    if (t - be->base_s > REBASE_S) { /* swap: t_now becomes the base */
        cudaEvent_t b = be->t_base;
        be->t_base = be->t_now;
        be->t_now = b;
        be->base_s = t;
    }
    return t;
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
    if (be->blas) cublasDestroy(be->blas);
    if (be->blas_ws) cudaFree(be->blas_ws);
    if (be->scratch) cudaFree(be->scratch);
    if (be->t_base) cudaEventDestroy(be->t_base);
    if (be->t_now) cudaEventDestroy(be->t_now);
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

static const delta_backend_ops cuda_ops = {
    .arena_create = cu_arena_create,
    .arena_destroy = cu_arena_destroy,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .run = cu_run,
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
            CK(cudaEventRecord(be->t_now, s));
            CK(cudaEventSynchronize(be->t_now));
            CK(cudaEventElapsedTime(&ms, be->t_base, be->t_now));
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
            if (e == cudaSuccess && s != DELTA_STREAM_COMPUTE)
                e = cudaEventCreate(&cs->start[i]);
            if (e != cudaSuccess) goto fail_cuda;
        }
    }
    step = "cudaEventCreate";
    if ((e = cudaEventCreate(&be->t_base)) != cudaSuccess ||
        (e = cudaEventCreate(&be->t_now)) != cudaSuccess)
        goto fail_cuda;
    step = "cudaMalloc (cuBLAS workspace and scratch)";
    if ((e = cudaMalloc(&be->blas_ws, CUBLAS_WS_BYTES)) != cudaSuccess ||
        (e = cudaMalloc(&be->scratch, DELTA_CUDA_SCRATCH_BYTES)) != cudaSuccess)
        goto fail_cuda;
    if (cublasCreate(&be->blas) != CUBLAS_STATUS_SUCCESS ||
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
    be->dnn = delta_cudnn_open(be->st[DELTA_STREAM_COMPUTE].s, why, sizeof why);
    if (be->dnn) {
        size_t v = delta_cudnn_version(be->dnn);
        snprintf(be->conv_path, sizeof be->conv_path, "cuDNN %zu.%zu.%zu",
                 v / 10000, v / 100 % 100, v % 100);
    } else {
        snprintf(be->conv_path, sizeof be->conv_path,
                 "im2col + cuBLAS (no cuDNN: %s)", why);
    }
    be->kc = (delta_cuda_kctx){be->st[DELTA_STREAM_COMPUTE].s, be->blas,
                               be->scratch, DELTA_CUDA_SCRATCH_BYTES,
                               be->dnn};
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
    /* the clock's origin */
    CK(cudaEventRecord(be->t_base, be->st[DELTA_STREAM_COMPUTE].s));
    CK(cudaEventSynchronize(be->t_base));
    be->base_s = 0;
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
