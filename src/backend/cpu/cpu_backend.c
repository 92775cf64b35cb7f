/* The cpu backend: real kernels on the CPU, an emulated device and link.
 *
 *  - Device: one arena, a single delta_alloc_aligned block of exactly the
 *    requested bytes (delta_alloc_aligned pads the allocation itself to a
 *    multiple of DELTA_ALIGN for aligned_alloc's rule; the runtime is given
 *    and uses exactly `bytes`).
 *  - Host store: delta_alloc_aligned blocks; NULL on failure, never abort.
 *  - Compute stream: delta_cpu_run in the caller's thread, so it is
 *    synchronous and its events are complete when recorded.
 *  - Copy streams: one copy-engine thread each (TO_HOST, TO_DEVICE), fed
 *    through a fixed-capacity ring of items {dst, src, bytes} or {wait for
 *    event}, allocated with the backend (no allocation per copy; a producer
 *    finding the ring full blocks until there is room). An engine runs its
 *    items in order, bumps its stream's completed count and broadcasts a
 *    condition variable. One mutex guards every ring and counter.
 *  - Throttle: a copy of n bytes takes at least latency + n / link_bps. It
 *    is done in chunks; after each chunk the engine sleeps to an absolute
 *    deadline measured from the copy's start (clock_nanosleep, so timer
 *    slack never accumulates). link_bps == 0: plain memcpy.
 *  - Default link (link_gbps < 0): link_bps = GEMM FLOP/s / 1,000, i.e. one
 *    byte costs as long as 1,000 flops of compute. A V100 does 15.7 TFLOP/s
 *    fp32 against ~12 GB/s effective over PCIe 3 (~1,300 flops per byte);
 *    an H100 67 TFLOP/s against ~50 GB/s on PCIe 5 (~1,340); an A100
 *    19.5 TFLOP/s against ~25 GB/s (~780). 1,000 keeps the ratio of compute
 *    to transfer time of those devices, so swap-versus-recompute decisions
 *    made here carry over. The GEMM speed is measured once per process and
 *    thread count (a 256x256x256 delta_gemm, best of several runs). */
#include "backend/backend.h"
#include "delta/cpu.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RING_CAP 1024                 /* items per copy stream */
#define CHUNK_MIN ((size_t)256 << 10) /* bytes per throttled chunk, at least */
#define CHUNK_TIME_S 100e-6           /* ... and about this much link time */
#define DEFAULT_LATENCY_S 10e-6

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void sleep_until(double t) {
    struct timespec ts;
    double sec = (double)(int64_t)t;
    ts.tv_sec = (time_t)sec;
    ts.tv_nsec = (long)((t - sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
    if (ts.tv_nsec < 0) ts.tv_nsec = 0;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

typedef enum { ITEM_COPY, ITEM_WAIT } item_kind;

typedef struct item {
    item_kind kind;
    void *dst;
    const void *src;
    size_t bytes;
    delta_event ev;  /* ITEM_WAIT: the event to wait for */
} item;

typedef struct cpu_backend cpu_backend;

typedef struct engine {
    cpu_backend *be;
    delta_stream stream;
    pthread_t thread;
    bool started;
    item *ring;
    size_t head, count;               /* under be->mu */
    uint64_t issued, completed;       /* under be->mu */
    double *span_t0, *span_t1;        /* per item seq % DELTA_SPAN_HISTORY,
                                         under be->mu */
    pthread_cond_t not_empty, not_full;
} engine;

struct cpu_backend {
    delta_backend base;       /* base.ctx == this */
    pthread_mutex_t mu;
    pthread_cond_t done;      /* broadcast when an engine completes an item */
    bool stop;                /* under mu */
    engine eng[2];            /* [s - 1] for s = TO_HOST, TO_DEVICE */
    /* set before the engines start, read-only after */
    double bps, latency;
    size_t chunk;
    /* host thread only */
    void *arena;
    uint64_t compute_seq;
    double *cspan_t0, *cspan_t1;  /* compute items, by seq % history */
};

static engine *eng_of(cpu_backend *be, delta_stream s) {
    DELTA_ASSERTF(s == DELTA_STREAM_TO_HOST || s == DELTA_STREAM_TO_DEVICE,
                  "stream %d is not a copy stream", (int)s);
    return &be->eng[s - 1];
}

/* ---- the copy engines ---------------------------------------------------- */

static void do_copy(const cpu_backend *be, const item *it) {
    char *dst = it->dst;
    const char *src = it->src;
    size_t n = it->bytes;
    if (be->bps <= 0) {
        if (be->latency > 0) sleep_until(now_s() + be->latency);
        if (n) memcpy(dst, src, n);
        return;
    }
    double t0 = now_s() + be->latency;
    size_t done = 0;
    while (done < n) {
        size_t c = n - done < be->chunk ? n - done : be->chunk;
        memcpy(dst + done, src + done, c);
        done += c;
        sleep_until(t0 + (double)done / be->bps);
    }
    if (n == 0) sleep_until(t0);
}

static void *engine_main(void *arg) {
    engine *e = arg;
    cpu_backend *be = e->be;
    pthread_mutex_lock(&be->mu);
    for (;;) {
        while (e->count == 0 && !be->stop)
            pthread_cond_wait(&e->not_empty, &be->mu);
        if (e->count == 0) break; /* stopping, and drained */
        item it = e->ring[e->head];
        e->head = (e->head + 1) % RING_CAP;
        e->count--;
        pthread_cond_signal(&e->not_full);
        double t0 = now_s();
        if (it.kind == ITEM_WAIT) {
            engine *o = eng_of(be, it.ev.stream);
            while (o->completed < it.ev.seq)
                pthread_cond_wait(&be->done, &be->mu);
        } else {
            pthread_mutex_unlock(&be->mu);
            t0 = now_s();
            do_copy(be, &it);
            pthread_mutex_lock(&be->mu);
        }
        size_t slot = (size_t)(e->completed + 1) % DELTA_SPAN_HISTORY;
        e->span_t0[slot] = t0;
        e->span_t1[slot] = now_s();
        e->completed++;
        pthread_cond_broadcast(&be->done);
    }
    pthread_mutex_unlock(&be->mu);
    return NULL;
}

/* Appends it to e's ring, blocking while the ring is full. Holds be->mu. */
static void push_locked(engine *e, const item *it) {
    cpu_backend *be = e->be;
    while (e->count == RING_CAP) pthread_cond_wait(&e->not_full, &be->mu);
    e->ring[(e->head + e->count) % RING_CAP] = *it;
    e->count++;
    e->issued++;
    pthread_cond_signal(&e->not_empty);
}

/* ---- the interface -------------------------------------------------------- */

static void cpu_sync(void *ctx, delta_event e) {
    cpu_backend *be = ctx;
    if (e.stream == DELTA_STREAM_COMPUTE) return;
    engine *en = eng_of(be, e.stream);
    pthread_mutex_lock(&be->mu);
    DELTA_ASSERTF(e.seq <= en->issued, "event %llu of stream %d was never "
                  "recorded", (unsigned long long)e.seq, (int)e.stream);
    while (en->completed < e.seq) pthread_cond_wait(&be->done, &be->mu);
    pthread_mutex_unlock(&be->mu);
}

static void drain(cpu_backend *be) {
    for (int s = DELTA_STREAM_TO_HOST; s <= DELTA_STREAM_TO_DEVICE; s++) {
        engine *e = eng_of(be, (delta_stream)s);
        pthread_mutex_lock(&be->mu);
        while (e->completed < e->issued) pthread_cond_wait(&be->done, &be->mu);
        pthread_mutex_unlock(&be->mu);
    }
}

static void cpu_arena_destroy(void *ctx) {
    cpu_backend *be = ctx;
    drain(be); /* no copy may still touch the arena */
    delta_free_aligned(be->arena);
    be->arena = NULL;
}

static delta_status cpu_arena_create(void *ctx, size_t bytes, void **base) {
    cpu_backend *be = ctx;
    cpu_arena_destroy(be);
    be->arena = delta_alloc_aligned(bytes);
    if (base) *base = be->arena;
    return be->arena ? DELTA_OK : DELTA_ERR_NOMEM;
}

static void *cpu_host_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    return delta_alloc_aligned(bytes);
}

static void cpu_host_free(void *ctx, void *p) {
    (void)ctx;
    delta_free_aligned(p);
}

static void compute_span(cpu_backend *be, double t0) {
    be->compute_seq++;
    size_t slot = (size_t)be->compute_seq % DELTA_SPAN_HISTORY;
    be->cspan_t0[slot] = t0;
    be->cspan_t1[slot] = now_s();
}

static void cpu_run(void *ctx, const delta_kargs *k) {
    cpu_backend *be = ctx;
    double t0 = now_s();
    delta_cpu_run(k);
    compute_span(be, t0);
}

static void cpu_copy(void *ctx, delta_stream s, void *dst, const void *src,
                     size_t bytes) {
    cpu_backend *be = ctx;
    if (s == DELTA_STREAM_COMPUTE) {
        double t0 = now_s();
        if (bytes) memmove(dst, src, bytes);
        compute_span(be, t0);
        return;
    }
    engine *e = eng_of(be, s);
    item it = {.kind = ITEM_COPY, .dst = dst, .src = src, .bytes = bytes};
    pthread_mutex_lock(&be->mu);
    push_locked(e, &it);
    pthread_mutex_unlock(&be->mu);
}

static delta_event cpu_record(void *ctx, delta_stream s) {
    cpu_backend *be = ctx;
    delta_event ev = {.stream = s, .time = now_s()};
    if (s == DELTA_STREAM_COMPUTE) {
        ev.seq = be->compute_seq;
    } else {
        engine *e = eng_of(be, s);
        pthread_mutex_lock(&be->mu);
        ev.seq = e->issued;
        pthread_mutex_unlock(&be->mu);
    }
    return ev;
}

static bool cpu_query(void *ctx, delta_event e) {
    cpu_backend *be = ctx;
    if (e.stream == DELTA_STREAM_COMPUTE) return true;
    engine *en = eng_of(be, e.stream);
    pthread_mutex_lock(&be->mu);
    bool done = en->completed >= e.seq;
    pthread_mutex_unlock(&be->mu);
    return done;
}

static bool cpu_span(void *ctx, delta_event e, double *t0, double *t1) {
    cpu_backend *be = ctx;
    if (e.seq == 0) return false;
    if (e.stream == DELTA_STREAM_COMPUTE) {
        if (e.seq > be->compute_seq ||
            be->compute_seq - e.seq >= DELTA_SPAN_HISTORY)
            return false;
        size_t slot = (size_t)e.seq % DELTA_SPAN_HISTORY;
        *t0 = be->cspan_t0[slot];
        *t1 = be->cspan_t1[slot];
        return true;
    }
    engine *en = eng_of(be, e.stream);
    pthread_mutex_lock(&be->mu);
    bool ok = en->completed >= e.seq &&
              en->completed - e.seq < DELTA_SPAN_HISTORY;
    if (ok) {
        size_t slot = (size_t)e.seq % DELTA_SPAN_HISTORY;
        *t0 = en->span_t0[slot];
        *t1 = en->span_t1[slot];
    }
    pthread_mutex_unlock(&be->mu);
    return ok;
}

static bool cpu_event_time(void *ctx, delta_event e, double *t) {
    cpu_backend *be = ctx;
    double t0, t1;
    if (!cpu_query(be, e)) return false;
    /* the item before e ended when it ended; e itself was reached no
     * earlier than it was recorded */
    *t = e.time;
    if (e.seq && cpu_span(be, e, &t0, &t1) && t1 > *t) *t = t1;
    return true;
}

static void cpu_wait(void *ctx, delta_stream s, delta_event e) {
    cpu_backend *be = ctx;
    DELTA_ASSERT((unsigned)s < DELTA_STREAM_COUNT &&
                 (unsigned)e.stream < DELTA_STREAM_COUNT);
    if (s == DELTA_STREAM_COMPUTE) { cpu_sync(be, e); return; }
    /* compute events are complete when recorded; a stream is in order */
    if (e.stream == DELTA_STREAM_COMPUTE || e.stream == s) return;
    engine *en = eng_of(be, s), *other = eng_of(be, e.stream);
    pthread_mutex_lock(&be->mu);
    DELTA_ASSERTF(e.seq <= other->issued, "event %llu of stream %d was never "
                  "recorded", (unsigned long long)e.seq, (int)e.stream);
    if (other->completed < e.seq) {
        item it = {.kind = ITEM_WAIT, .ev = e};
        push_locked(en, &it);
    }
    pthread_mutex_unlock(&be->mu);
}

static double cpu_clock(void *ctx) {
    (void)ctx;
    return now_s();
}

static void cpu_destroy(void *ctx) {
    cpu_backend *be = ctx;
    pthread_mutex_lock(&be->mu);
    be->stop = true;
    for (int i = 0; i < 2; i++) pthread_cond_signal(&be->eng[i].not_empty);
    pthread_mutex_unlock(&be->mu);
    for (int i = 0; i < 2; i++)
        if (be->eng[i].started) pthread_join(be->eng[i].thread, NULL);
    for (int i = 0; i < 2; i++) {
        pthread_cond_destroy(&be->eng[i].not_empty);
        pthread_cond_destroy(&be->eng[i].not_full);
        free(be->eng[i].ring);
        free(be->eng[i].span_t0);
        free(be->eng[i].span_t1);
    }
    pthread_cond_destroy(&be->done);
    pthread_mutex_destroy(&be->mu);
    delta_free_aligned(be->arena);
    free(be->cspan_t0);
    free(be->cspan_t1);
    free(be);
}

static const delta_backend_ops cpu_ops = {
    .arena_create = cpu_arena_create,
    .arena_destroy = cpu_arena_destroy,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .run = cpu_run,
    .copy = cpu_copy,
    .record = cpu_record,
    .wait = cpu_wait,
    .query = cpu_query,
    .sync = cpu_sync,
    .span = cpu_span,
    .event_time = cpu_event_time,
    .clock = cpu_clock,
    .op_cost = NULL,
    .destroy = cpu_destroy,
};

/* ---- the default link ----------------------------------------------------- */

static pthread_mutex_t gemm_mu = PTHREAD_MUTEX_INITIALIZER;
static int gemm_threads;   /* thread count of the cached figure; 0 = none */
static double gemm_flops;

static double measure_gemm_flops(void) {
    const int64_t n = 256;
    size_t bytes = (size_t)(n * n) * sizeof(float);
    float *a = delta_alloc_aligned(bytes), *b = delta_alloc_aligned(bytes),
          *c = delta_alloc_aligned(bytes);
    double flops = 1e10; /* if the buffers cannot be had: 10 MB/s */
    if (a && b && c) {
        for (int64_t i = 0; i < n * n; i++) {
            a[i] = (float)(i % 17) * 0.125f - 1.0f;
            b[i] = (float)(i % 13) * 0.25f - 1.5f;
        }
        double best = 1e30;
        for (int r = 0; r < 8; r++) {
            double t0 = now_s();
            delta_gemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
            double t = now_s() - t0;
            if (r >= 2 && t < best) best = t; /* two warm-up runs */
        }
        if (best > 0 && best < 1e30) flops = 2.0 * (double)(n * n * n) / best;
    }
    delta_free_aligned(a);
    delta_free_aligned(b);
    delta_free_aligned(c);
    return flops;
}

double delta_cpu_gemm_flops(void) {
    int threads = delta_cpu_threads();
    pthread_mutex_lock(&gemm_mu);
    if (gemm_threads != threads) {
        gemm_flops = measure_gemm_flops();
        gemm_threads = threads;
    }
    double f = gemm_flops;
    pthread_mutex_unlock(&gemm_mu);
    return f;
}

/* ---- construction ----------------------------------------------------------- */

delta_backend *delta_backend_cpu_new(const delta_cpu_backend_opts *opts,
                                     char *err, size_t err_len) {
    char dummy[8];
    if (!err) { err = dummy; err_len = sizeof dummy; }
    double gbps = opts ? opts->link_gbps : -1.0;
    double lat = opts ? opts->link_latency_s : -1.0;
    if (gbps != gbps || lat != lat) {
        snprintf(err, err_len, "cpu backend: link settings are NaN");
        return NULL;
    }
    cpu_backend *be = calloc(1, sizeof *be);
    if (!be) {
        snprintf(err, err_len, "cpu backend: out of host memory");
        return NULL;
    }
    if (gbps < 0)
        be->bps = delta_cpu_gemm_flops() / DELTA_CPU_FLOPS_PER_BYTE;
    else
        be->bps = gbps * 1e9;
    be->latency = lat >= 0 ? lat : (be->bps > 0 ? DEFAULT_LATENCY_S : 0.0);
    size_t chunk = be->bps > 0 ? (size_t)(be->bps * CHUNK_TIME_S) : 0;
    chunk = (chunk + 4095) / 4096 * 4096;
    be->chunk = chunk > CHUNK_MIN ? chunk : CHUNK_MIN;

    be->base.name = "cpu";
    be->base.ops = &cpu_ops;
    be->base.ctx = be;
    be->base.link_bps = be->bps;
    be->base.link_latency_s = be->latency;
    be->base.device_bytes = 0;
    be->base.has_data = true;

    pthread_mutex_init(&be->mu, NULL);
    pthread_cond_init(&be->done, NULL);
    be->cspan_t0 = calloc(DELTA_SPAN_HISTORY, sizeof(double));
    be->cspan_t1 = calloc(DELTA_SPAN_HISTORY, sizeof(double));
    for (int i = 0; i < 2; i++) {
        engine *e = &be->eng[i];
        e->be = be;
        e->stream = (delta_stream)(DELTA_STREAM_TO_HOST + i);
        pthread_cond_init(&e->not_empty, NULL);
        pthread_cond_init(&e->not_full, NULL);
        e->ring = calloc(RING_CAP, sizeof *e->ring);
        e->span_t0 = calloc(DELTA_SPAN_HISTORY, sizeof(double));
        e->span_t1 = calloc(DELTA_SPAN_HISTORY, sizeof(double));
        if (!e->ring || !e->span_t0 || !e->span_t1 || !be->cspan_t0 ||
            !be->cspan_t1) {
            snprintf(err, err_len, "cpu backend: out of host memory");
            cpu_destroy(be);
            return NULL;
        }
    }
    for (int i = 0; i < 2; i++) {
        int rc = pthread_create(&be->eng[i].thread, NULL, engine_main,
                                &be->eng[i]);
        if (rc != 0) {
            snprintf(err, err_len, "cpu backend: cannot start a copy engine "
                     "thread: %s", strerror(rc));
            cpu_destroy(be);
            return NULL;
        }
        be->eng[i].started = true;
    }
    return &be->base;
}
