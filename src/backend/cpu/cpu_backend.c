/* The cpu backend: real kernels on the CPU, an emulated device and link.
 *
 *  - Device: one arena, a single delta_alloc_aligned block of exactly the
 *    requested bytes (delta_alloc_aligned pads the allocation itself to a
 *    multiple of DELTA_ALIGN for aligned_alloc's rule; the runtime is given
 *    and uses exactly `bytes`).
 *  - Host store: delta_alloc_aligned blocks; NULL on failure, never abort.
 *  - Streams: one engine thread per stream (COMPUTE, TO_HOST, TO_DEVICE,
 *    and COMM, whose kernels are collectives that send and receive with MPI),
 *    all running the same loop, so the device is asynchronous to the host
 *    as a GPU is. Each is fed through a fixed-capacity ring of items,
 *    allocated with the backend (no allocation per item; a producer finding
 *    the ring full blocks until there is room): a kernel (a copy of the
 *    delta_kargs and of *env: the caller's env changes between runs), a
 *    copy (on the compute stream a device-side memmove, in order with the
 *    kernels) or a wait for another stream's event. An engine runs its
 *    items in order, records each one's start and end, bumps its stream's
 *    completed count and broadcasts a condition variable. One mutex guards
 *    every ring and counter; kernels and copies run outside it. Events are
 *    (stream, items issued), so query, sync, span and event_time are the
 *    same for all three streams.
 *  - Host accesses: upload and download wait until every stream is idle,
 *    then memcpy: the host never touches the arena while an engine may.
 *  - OpenMP: ICVs such as the thread count are per thread in libgomp, so
 *    the compute engine applies delta_cpu_threads() to itself before a
 *    kernel whenever it changed; kernels (and an OpenMP OpenBLAS) then use
 *    the count the caller configured, and give the bits they give on the
 *    caller's thread (the reference executor's). The thread count and the
 *    GEMM path are read when a kernel runs, not when it is enqueued: change
 *    them only while the device is idle (after a sync or a download).
 *  - Jitter (opts->jitter_seed != 0): every item of every stream first
 *    sleeps 0-200 us, drawn from (seed, stream, item seq) by the
 *    counter-based RNG, to shake out missing waits; results must not
 *    change.
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
#include "core/rng.h"
#include "delta/cpu.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define RING_CAP 1024                 /* items per stream */
#define CHUNK_MIN ((size_t)256 << 10) /* bytes per throttled chunk, at least */
#define CHUNK_TIME_S 100e-6           /* ... and about this much link time */
#define DEFAULT_LATENCY_S 10e-6
#define JITTER_MAX_US 200             /* an item's jitter: 0..this, in us */

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

typedef enum { ITEM_COPY, ITEM_WAIT, ITEM_KERNEL } item_kind;

typedef struct item {
    item_kind kind;
    union {
        struct {                 /* ITEM_COPY */
            void *dst;
            const void *src;
            size_t bytes;
        } copy;
        delta_event ev;          /* ITEM_WAIT: the event to wait for */
        struct {                 /* ITEM_KERNEL */
            delta_kargs k;       /* k.env is repointed at env when it runs */
            delta_kernel_env env;
            bool has_env;        /* the caller gave an env */
        } kernel;
    };
} item;

/* When an item started and ended (wall clock); waits have no span. */
typedef struct span_slot {
    double t0, t1;
    bool wait;
} span_slot;

typedef struct cpu_backend cpu_backend;

typedef struct engine {
    cpu_backend *be;
    delta_stream stream;
    pthread_t thread;
    bool started;
    item *ring;
    size_t head, count;               /* under be->mu */
    uint64_t issued, completed;       /* under be->mu */
    uint64_t want;        /* under be->mu: the lowest completed count a
                             waiter sleeps for (0: none); `done` is
                             broadcast only when it is reached, so a host
                             waiting on op N is not woken by every op */
    span_slot *spans;                 /* by item seq % DELTA_SPAN_HISTORY,
                                         under be->mu */
    pthread_cond_t not_empty, not_full;
    int omp_threads;                  /* the engine thread's own: the
                                         OpenMP thread count it applied */
} engine;

struct cpu_backend {
    delta_backend base;       /* base.ctx == this */
    pthread_mutex_t mu;
    pthread_cond_t done;      /* broadcast when an engine completes an item */
    bool stop;                /* under mu */
    engine eng[DELTA_STREAM_COUNT];
    /* set before the engines start, read-only after */
    double bps, latency;
    size_t chunk;
    uint64_t jitter_seed;
    /* host thread only */
    void *arena;
};

static engine *eng_of(cpu_backend *be, delta_stream s) {
    DELTA_ASSERTF((unsigned)s < DELTA_STREAM_COUNT, "no stream %d", (int)s);
    return &be->eng[s];
}

/* ---- the engines ---------------------------------------------------------- */

static void do_copy(const cpu_backend *be, void *dst_, const void *src_,
                    size_t n) {
    char *dst = dst_;
    const char *src = src_;
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

/* Sleeps the jitter of item seq of stream s: 0..JITTER_MAX_US us, a pure
 * function of (seed, stream, seq), so a run's delays can be replayed. */
static void jitter(const cpu_backend *be, delta_stream s, uint64_t seq) {
    if (!be->jitter_seed) return;
    uint64_t r = delta_rng_u64(be->jitter_seed ^ delta_mix64((uint64_t)s + 1),
                               seq);
    sleep_until(now_s() + (double)(r % (JITTER_MAX_US + 1)) * 1e-6);
}

/* libgomp keeps the thread count per thread: give the engine's the one
 * the caller configured (delta_cpu_set_threads), before a kernel. */
static void adopt_threads(engine *e) {
#ifdef _OPENMP
    int n = delta_cpu_threads();
    if (n != e->omp_threads) {
        omp_set_num_threads(n);
        e->omp_threads = n;
    }
#else
    (void)e;
#endif
}

/* Runs a kernel or copy item on its engine's thread, outside the lock. */
static void run_item(engine *e, item *it) {
    if (it->kind == ITEM_KERNEL) {
        if (e->stream == DELTA_STREAM_COMPUTE) adopt_threads(e);
        it->kernel.k.env = it->kernel.has_env ? &it->kernel.env : NULL;
        delta_cpu_run(&it->kernel.k);
    } else if (e->stream == DELTA_STREAM_COMPUTE) {
        /* a device-side move: source and destination may overlap */
        if (it->copy.bytes) memmove(it->copy.dst, it->copy.src, it->copy.bytes);
    } else {
        do_copy(e->be, it->copy.dst, it->copy.src, it->copy.bytes);
    }
}

/* Sleeps until stream s has completed seq items, telling its engine the
 * count it waits for (the lowest of all waiters'). Holds be->mu. */
static void sleep_for(cpu_backend *be, delta_stream s, uint64_t seq) {
    engine *o = &be->eng[s];
    while (o->completed < seq) {
        if (!o->want || seq < o->want) o->want = seq;
        pthread_cond_wait(&be->done, &be->mu);
    }
}

static void *engine_main(void *arg) {
    engine *e = arg;
    cpu_backend *be = e->be;
    item it;
    pthread_mutex_lock(&be->mu);
    for (;;) {
        while (e->count == 0 && !be->stop)
            pthread_cond_wait(&e->not_empty, &be->mu);
        if (e->count == 0) break; /* stopping, and drained */
        it = e->ring[e->head];
        e->head = (e->head + 1) % RING_CAP;
        e->count--;
        pthread_cond_signal(&e->not_full);
        uint64_t seq = e->completed + 1;
        pthread_mutex_unlock(&be->mu);
        jitter(be, e->stream, seq);
        double t0 = now_s();
        if (it.kind != ITEM_WAIT) run_item(e, &it);
        pthread_mutex_lock(&be->mu);
        if (it.kind == ITEM_WAIT) sleep_for(be, it.ev.stream, it.ev.seq);
        span_slot *sl = &e->spans[seq % DELTA_SPAN_HISTORY];
        sl->t0 = t0;
        sl->t1 = now_s();
        sl->wait = it.kind == ITEM_WAIT;
        e->completed = seq;
        if (e->want && seq >= e->want) {
            e->want = 0;
            pthread_cond_broadcast(&be->done);
        }
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

static void push(cpu_backend *be, delta_stream s, const item *it) {
    engine *e = eng_of(be, s);
    pthread_mutex_lock(&be->mu);
    push_locked(e, it);
    pthread_mutex_unlock(&be->mu);
}

/* Asserts e was recorded on its stream. Holds be->mu. */
static void check_recorded(const cpu_backend *be, delta_event e) {
    DELTA_ASSERTF((unsigned)e.stream < DELTA_STREAM_COUNT, "no stream %d",
                  (int)e.stream);
    DELTA_ASSERTF(e.seq <= be->eng[e.stream].issued, "event %llu of stream "
                  "%d was never recorded", (unsigned long long)e.seq,
                  (int)e.stream);
}

/* Blocks until every item issued on every stream is complete. */
static void drain(cpu_backend *be) {
    pthread_mutex_lock(&be->mu);
    for (int s = 0; s < DELTA_STREAM_COUNT; s++)
        sleep_for(be, (delta_stream)s, be->eng[s].issued);
    pthread_mutex_unlock(&be->mu);
}

/* ---- the interface -------------------------------------------------------- */

static void cpu_sync(void *ctx, delta_event e) {
    cpu_backend *be = ctx;
    pthread_mutex_lock(&be->mu);
    check_recorded(be, e);
    sleep_for(be, e.stream, e.seq);
    pthread_mutex_unlock(&be->mu);
}

static void cpu_arena_destroy(void *ctx) {
    cpu_backend *be = ctx;
    drain(be); /* no kernel or copy may still touch the arena */
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

static void push_kernel(void *ctx, delta_stream s, const delta_kargs *k) {
    item it = {.kind = ITEM_KERNEL};
    it.kernel.k = *k;
    it.kernel.has_env = k->env != NULL;
    if (k->env) it.kernel.env = *k->env;
    push(ctx, s, &it);
}

static void cpu_run(void *ctx, const delta_kargs *k) {
    push_kernel(ctx, DELTA_STREAM_COMPUTE, k);
}

/* Collectives on their own engine: while one waits for the other ranks,
 * compute goes on with the rest of backward. */
static void cpu_collective(void *ctx, const delta_kargs *k) {
    push_kernel(ctx, DELTA_STREAM_COMM, k);
}

static void cpu_copy(void *ctx, delta_stream s, void *dst, const void *src,
                     size_t bytes) {
    DELTA_ASSERTF(s != DELTA_STREAM_COMM, "a copy on the communication "
                  "stream");
    item it = {.kind = ITEM_COPY};
    it.copy.dst = dst;
    it.copy.src = src;
    it.copy.bytes = bytes;
    push(ctx, s, &it);
}

static delta_event cpu_record(void *ctx, delta_stream s) {
    cpu_backend *be = ctx;
    engine *e = eng_of(be, s);
    delta_event ev = {.stream = s, .time = now_s()};
    pthread_mutex_lock(&be->mu);
    ev.seq = e->issued;
    pthread_mutex_unlock(&be->mu);
    return ev;
}

static bool cpu_query(void *ctx, delta_event e) {
    cpu_backend *be = ctx;
    pthread_mutex_lock(&be->mu);
    check_recorded(be, e);
    bool done = be->eng[e.stream].completed >= e.seq;
    pthread_mutex_unlock(&be->mu);
    return done;
}

/* The slot of item e.seq when it is complete and still remembered, else
 * NULL. Holds be->mu. */
static const span_slot *slot_locked(const cpu_backend *be, delta_event e) {
    const engine *en = &be->eng[e.stream];
    if (e.seq == 0 || en->completed < e.seq ||
        en->completed - e.seq >= DELTA_SPAN_HISTORY)
        return NULL;
    return &en->spans[e.seq % DELTA_SPAN_HISTORY];
}

static bool cpu_span(void *ctx, delta_event e, double *t0, double *t1) {
    cpu_backend *be = ctx;
    pthread_mutex_lock(&be->mu);
    check_recorded(be, e);
    const span_slot *sl = slot_locked(be, e);
    bool ok = sl && !sl->wait;
    if (ok) {
        *t0 = sl->t0;
        *t1 = sl->t1;
    }
    pthread_mutex_unlock(&be->mu);
    return ok;
}

static bool cpu_event_time(void *ctx, delta_event e, double *t) {
    cpu_backend *be = ctx;
    pthread_mutex_lock(&be->mu);
    check_recorded(be, e);
    bool done = be->eng[e.stream].completed >= e.seq;
    if (done) {
        /* reached when the item before it ended (a wait's end included),
         * and no earlier than it was recorded; an item too old to be
         * remembered ended long before anything recent was recorded */
        const span_slot *sl = slot_locked(be, e);
        *t = sl && sl->t1 > e.time ? sl->t1 : e.time;
    }
    pthread_mutex_unlock(&be->mu);
    return done;
}

static void cpu_wait(void *ctx, delta_stream s, delta_event e) {
    cpu_backend *be = ctx;
    engine *en = eng_of(be, s);
    if (e.stream == s) return; /* a stream is in order */
    pthread_mutex_lock(&be->mu);
    check_recorded(be, e);
    if (be->eng[e.stream].completed < e.seq) {
        item it = {.kind = ITEM_WAIT, .ev = e};
        push_locked(en, &it);
    }
    pthread_mutex_unlock(&be->mu);
}

static double cpu_clock(void *ctx) {
    (void)ctx;
    return now_s();
}

/* The host's own accesses to the arena: only once every stream is idle, so
 * the host never races a kernel or a copy on the same bytes. */
static void cpu_upload(void *ctx, void *dev_dst, const void *host_src,
                       size_t bytes) {
    drain(ctx);
    if (bytes) memcpy(dev_dst, host_src, bytes);
}

static void cpu_download(void *ctx, void *host_dst, const void *dev_src,
                         size_t bytes) {
    drain(ctx);
    if (bytes) memcpy(host_dst, dev_src, bytes);
}

static void cpu_destroy(void *ctx) {
    cpu_backend *be = ctx;
    pthread_mutex_lock(&be->mu);
    be->stop = true; /* engines finish their rings first, then stop */
    for (int i = 0; i < DELTA_STREAM_COUNT; i++)
        pthread_cond_signal(&be->eng[i].not_empty);
    pthread_mutex_unlock(&be->mu);
    for (int i = 0; i < DELTA_STREAM_COUNT; i++)
        if (be->eng[i].started) pthread_join(be->eng[i].thread, NULL);
    for (int i = 0; i < DELTA_STREAM_COUNT; i++) {
        pthread_cond_destroy(&be->eng[i].not_empty);
        pthread_cond_destroy(&be->eng[i].not_full);
        free(be->eng[i].ring);
        free(be->eng[i].spans);
    }
    pthread_cond_destroy(&be->done);
    pthread_mutex_destroy(&be->mu);
    delta_free_aligned(be->arena);
    free(be);
}

static const delta_backend_ops cpu_ops = {
    .arena_create = cpu_arena_create,
    .arena_destroy = cpu_arena_destroy,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .run = cpu_run,
    .collective = cpu_collective,
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
    .upload = cpu_upload,
    .download = cpu_download,
};

/* ---- the default link ----------------------------------------------------- */

static pthread_mutex_t gemm_mu = PTHREAD_MUTEX_INITIALIZER;
static int gemm_threads;   /* thread count of the cached figure; 0 = none */
static double gemm_flops;

void delta_gemm_builtin_serial(bool ta, bool tb, int64_t m, int64_t n,
                               int64_t k, float alpha, const float *a,
                               int64_t lda, const float *b, int64_t ldb,
                               float beta, float *c, int64_t ldc);

/* The best of six n^3 GEMMs after two warm-up runs, in seconds: the thread
 * team's (delta_gemm) or the calling thread's alone. */
static double best_gemm_s(bool serial, int64_t n, const float *a,
                          const float *b, float *c) {
    double best = 1e30;
    for (int r = 0; r < 8; r++) {
        double t0 = now_s();
        if (serial)
            delta_gemm_builtin_serial(false, false, n, n, n, 1.0f, a, n, b, n,
                                      0.0f, c, n);
        else
            delta_gemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double t = now_s() - t0;
        if (r >= 2 && t < best) best = t;
    }
    return best;
}

/* GEMM FLOP/s of this process: the faster of its thread team and one
 * thread. On a loaded machine a team waits at every barrier for a sibling
 * to get a core again: with two other processes busy on 2 cores, two
 * threads ran the 256^3 probe at 4.2 GFLOP/s and one at 105, and the link
 * that followed (4 MB/s) made a ResNet-18 step 30 s of waiting for copies
 * where the training's own, larger kernels ran 6x slower, not 25x. */
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
        double best = fmin(best_gemm_s(false, n, a, b, c),
                           best_gemm_s(true, n, a, b, c));
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

static const char *const stream_names[DELTA_STREAM_COUNT] = {
    "compute", "device-to-host copy", "host-to-device copy",
    "communication"};

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
        be->bps = delta_cpu_gemm_flops() /
                  (opts && opts->bf16_link ? DELTA_CPU_FLOPS_PER_BYTE_BF16
                                           : DELTA_CPU_FLOPS_PER_BYTE);
    else
        be->bps = gbps * 1e9;
    be->latency = lat >= 0 ? lat : (be->bps > 0 ? DEFAULT_LATENCY_S : 0.0);
    size_t chunk = be->bps > 0 ? (size_t)(be->bps * CHUNK_TIME_S) : 0;
    chunk = (chunk + 4095) / 4096 * 4096;
    be->chunk = chunk > CHUNK_MIN ? chunk : CHUNK_MIN;
    be->jitter_seed = opts ? opts->jitter_seed : 0;

    be->base.name = "cpu";
    be->base.ops = &cpu_ops;
    be->base.ctx = be;
    be->base.link_bps = be->bps;
    be->base.link_latency_s = be->latency;
    be->base.device_bytes = 0;
    be->base.has_data = true;
    be->base.computes_bf16 = true;

    pthread_mutex_init(&be->mu, NULL);
    pthread_cond_init(&be->done, NULL);
    bool ok = true;
    for (int i = 0; i < DELTA_STREAM_COUNT; i++) {
        engine *e = &be->eng[i];
        e->be = be;
        e->stream = (delta_stream)i;
        pthread_cond_init(&e->not_empty, NULL);
        pthread_cond_init(&e->not_full, NULL);
        e->ring = calloc(RING_CAP, sizeof *e->ring);
        e->spans = calloc(DELTA_SPAN_HISTORY, sizeof *e->spans);
        ok = ok && e->ring && e->spans;
    }
    if (!ok) {
        snprintf(err, err_len, "cpu backend: out of host memory");
        cpu_destroy(be);
        return NULL;
    }
    for (int i = 0; i < DELTA_STREAM_COUNT; i++) {
        int rc = pthread_create(&be->eng[i].thread, NULL, engine_main,
                                &be->eng[i]);
        if (rc != 0) {
            snprintf(err, err_len, "cpu backend: cannot start the %s engine "
                     "thread: %s", stream_names[i], strerror(rc));
            cpu_destroy(be);
            return NULL;
        }
        be->eng[i].started = true;
    }
    return &be->base;
}
