/* Tests for the cpu backend as an asynchronous device (cpu_backend.c): its
 * compute stream is an engine thread like the two copy streams.
 *
 * run returns before its kernel ends: the kernel is held back behind a
 * wait on a copy that takes half a second, and its event is incomplete
 * right after run (unless half a second passed: never complete before the
 * copy could be); the compute stream waits for copy-stream events on the
 * device and the copy streams for compute events, with jitter on, many
 * times (every kernel sees the bytes its copy wrote; every copy the bytes
 * its kernel wrote); spans and event times on the compute stream are
 * ordered and consistent, waits have no span; a kernel runs with the env
 * it was given when enqueued, not the caller's env later; kernels on the
 * compute thread give the bits the caller's thread gives, for each thread
 * count and GEMM path (libgomp's thread count is per thread); destroying
 * the backend runs every kernel still queued (past the ring's capacity);
 * and whole training sessions (keep, dtr, capuchin) give the same bytes
 * with jitter as without, and as keep. */
#include "backend/backend.h"
#include "delta/cpu.h"
#include "graph/graph_impl.h"
#include "policy_train.h"

#include <time.h>

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define ROUNDS 60
#else
#define ROUNDS 200
#endif
/* OpenBLAS's own worker threads are not instrumented: under TSan their
 * barriers are invisible and every GEMM they split would be reported. */
#if defined(__SANITIZE_THREAD__)
#define BLAS_MAX_THREADS 1
#else
#define BLAS_MAX_THREADS 3
#endif

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static delta_backend *cpu_new(double gbps, double latency, uint64_t jitter) {
    char err[256] = "";
    delta_cpu_backend_opts o = {.link_gbps = gbps, .link_latency_s = latency,
                                .jitter_seed = jitter};
    delta_backend *b = delta_backend_cpu_new(&o, err, sizeof err);
    DELTA_ASSERTF(b != NULL, "cpu backend: %s", err);
    return b;
}

static void *xalloc(size_t bytes) {
    void *p = delta_alloc_aligned(bytes ? bytes : 1);
    DELTA_ASSERTF(p != NULL, "no host memory for %zu test bytes", bytes);
    return p;
}

/* One op of its own graph, with operand addresses bound by the caller. */
typedef struct one_op {
    delta_ctx *ctx;
    delta_kernel_env env;
    delta_kargs k;
} one_op;

/* Binds the last op appended to o->ctx: in[j] and out[j] are its operands'
 * addresses. */
static void one_op_bind(one_op *o, void *const *in, void *const *out) {
    const delta_op *op = &o->ctx->ops[o->ctx->n_ops - 1];
    o->env = (delta_kernel_env){.seed = 3, .step = 0, .training = true};
    memset(&o->k, 0, sizeof o->k);
    o->k.op = op;
    o->k.env = &o->env;
    for (int j = 0; j < op->n_in; j++) {
        o->k.in_t[j] = o->ctx->tensors[op->in[j]];
        o->k.in[j] = in[j];
    }
    for (int j = 0; j < op->n_out; j++) {
        o->k.out_t[j] = o->ctx->tensors[op->out[j]];
        o->k.out[j] = out[j];
    }
}

static void relu_new(one_op *o, int64_t n) {
    o->ctx = delta_ctx_new();
    delta_relu(o->ctx, delta_input(o->ctx, "x", DELTA_F32, 1, &n));
}

static void matmul_new(one_op *o, int64_t m, int64_t k, int64_t n) {
    o->ctx = delta_ctx_new();
    int64_t sa[2] = {m, k}, sb[2] = {k, n};
    delta_tensor *a = delta_input(o->ctx, "a", DELTA_F32, 2, sa);
    delta_tensor *b = delta_input(o->ctx, "b", DELTA_F32, 2, sb);
    delta_matmul(o->ctx, a, b, false, false, 1.0f);
}

static void fill_floats(float *p, int64_t n, uint64_t seed) {
    test_rng_seed(seed);
    test_fill_rand(p, n, -1, 1);
}

/* Records every stream's end and blocks until all are complete. */
static void sync_all(delta_backend *b) {
    for (int s = 0; s < DELTA_STREAM_COUNT; s++)
        delta_backend_sync(b, delta_backend_record(b, (delta_stream)s));
}

/* ---- run only enqueues ----------------------------------------------------- */

static void test_run_returns_before_its_kernel(void) {
    const double latency = 0.5; /* every copy takes at least this */
    delta_backend *b = cpu_new(0, latency, 0);
    const int64_t m = 192, k = 160, n = 224;
    size_t sa = (size_t)(m * k) * 4, sb = (size_t)(k * n) * 4,
           sc = (size_t)(m * n) * 4;
    void *dev = NULL;
    CHECK(delta_backend_arena_create(b, sa + sb + sc, &dev) == DELTA_OK);
    if (!dev) { delta_backend_free(b); return; }
    float *a = xalloc(sa), *bm = xalloc(sb), *c = xalloc(sc), *ref = xalloc(sc);
    fill_floats(a, m * k, 1);
    fill_floats(bm, k * n, 2);
    char *da = dev, *db = da + sa, *dc = db + sb;
    delta_backend_upload(b, db, bm, sb);
    one_op mm;
    matmul_new(&mm, m, k, n);
    one_op_bind(&mm, (void *[]){da, db}, (void *[]){dc});

    /* a's bytes arrive by a copy the kernel waits for on the device */
    double t0 = now_s();
    delta_backend_copy(b, DELTA_STREAM_TO_DEVICE, da, a, sa);
    delta_event ed = delta_backend_record(b, DELTA_STREAM_TO_DEVICE);
    delta_backend_wait(b, DELTA_STREAM_COMPUTE, ed);
    delta_backend_run(b, &mm.k);
    double t_ret = now_s();
    delta_event ek = delta_backend_record(b, DELTA_STREAM_COMPUTE);
    bool done = delta_backend_query(b, ek);
    double t_q = now_s();
    printf("  run returned after %.3f ms; its kernel %s\n",
           (t_ret - t0) * 1e3, done ? "complete" : "not complete yet");
    CHECK(!done || t_q - t0 >= latency, "the kernel completed %.3f s after "
          "its copy was issued, which takes %.1f s", t_q - t0, latency);
    delta_backend_sync(b, ek);
    double k0, k1, c0, c1;
    CHECK(delta_backend_span(b, ek, &k0, &k1), "kernel span");
    CHECK(delta_backend_span(b, ed, &c0, &c1), "copy span");
    CHECK(c1 <= k0, "the kernel started %.6f s before its copy ended",
          c1 - k0);
    CHECK(t_ret < k1 || t_ret - t0 >= latency, "run returned after its "
          "kernel ended");
    delta_backend_download(b, c, dc, sc);
    one_op_bind(&mm, (void *[]){a, bm}, (void *[]){ref});
    delta_cpu_run(&mm.k);
    CHECK(memcmp(c, ref, sc) == 0, "the kernel saw the copy's bytes");
    delta_ctx_free(mm.ctx);
    delta_free_aligned(a);
    delta_free_aligned(bm);
    delta_free_aligned(c);
    delta_free_aligned(ref);
    delta_backend_free(b);
}

/* ---- waits between streams, with jitter ------------------------------------ */

/* ROUNDS times, into one device buffer x: host h[i] -> x (TO_DEVICE, after
 * the previous kernel read x), relu x -> y[i] (after the copy), y[i] -> w[i]
 * (a device-side move), w[i] -> host g[i] (TO_HOST, after the move). No
 * host wait until the end; every stream's items jitter. */
static void test_streams_wait_on_each_other(void) {
    delta_backend *b = cpu_new(2.0, 0, 0x5eedULL);
    const int64_t n = 4096;
    const size_t bytes = (size_t)n * 4;
    void *dev = NULL;
    CHECK(delta_backend_arena_create(b, (2 * ROUNDS + 1) * bytes, &dev) ==
          DELTA_OK);
    if (!dev) { delta_backend_free(b); return; }
    float *x = dev, *y = x + n, *w = y + (size_t)ROUNDS * n;
    float *h = xalloc(ROUNDS * bytes), *g = xalloc(ROUNDS * bytes);
    float *back = xalloc(ROUNDS * bytes);
    fill_floats(h, ROUNDS * n, 9);
    memset(g, 0, ROUNDS * bytes);
    one_op relu;
    relu_new(&relu, n);
    for (int i = 0; i < ROUNDS; i++) {
        float *yi = y + (size_t)i * n, *wi = w + (size_t)i * n;
        delta_backend_wait(b, DELTA_STREAM_TO_DEVICE,
                           delta_backend_record(b, DELTA_STREAM_COMPUTE));
        delta_backend_copy(b, DELTA_STREAM_TO_DEVICE, x, h + (size_t)i * n,
                           bytes);
        delta_backend_wait(b, DELTA_STREAM_COMPUTE,
                           delta_backend_record(b, DELTA_STREAM_TO_DEVICE));
        one_op_bind(&relu, (void *[]){x}, (void *[]){yi});
        delta_backend_run(b, &relu.k);
        delta_backend_copy(b, DELTA_STREAM_COMPUTE, wi, yi, bytes);
        delta_backend_wait(b, DELTA_STREAM_TO_HOST,
                           delta_backend_record(b, DELTA_STREAM_COMPUTE));
        delta_backend_copy(b, DELTA_STREAM_TO_HOST, g + (size_t)i * n, wi,
                           bytes);
    }
    sync_all(b);
    int bad_y = 0, bad_w = 0, bad_g = 0;
    delta_backend_download(b, back, y, ROUNDS * bytes);
    for (int64_t j = 0; j < ROUNDS * n; j++)
        bad_y += back[j] != (h[j] > 0 ? h[j] : 0.0f);
    delta_backend_download(b, back, w, ROUNDS * bytes);
    for (int64_t j = 0; j < ROUNDS * n; j++)
        bad_w += back[j] != (h[j] > 0 ? h[j] : 0.0f);
    for (int64_t j = 0; j < ROUNDS * n; j++)
        bad_g += g[j] != (h[j] > 0 ? h[j] : 0.0f);
    CHECK(bad_y == 0, "%d kernel outputs wrong: a kernel read x before its "
          "copy landed, or a copy overwrote x under a kernel", bad_y);
    CHECK(bad_w == 0, "%d device-side moves wrong", bad_w);
    CHECK(bad_g == 0, "%d bytes copied to the host before their move", bad_g);
    delta_ctx_free(relu.ctx);
    delta_free_aligned(h);
    delta_free_aligned(g);
    delta_free_aligned(back);
    delta_backend_free(b);
}

/* ---- spans and event times --------------------------------------------------- */

static void test_compute_spans_and_event_times(void) {
    enum { N = 40 };
    delta_backend *b = cpu_new(0, 2e-3, 77);
    const int64_t n = 1 << 14;
    float *x = xalloc((size_t)n * 4), *y = xalloc((size_t)n * 4);
    float *z = xalloc(64); /* the copy's own: kernels write y meanwhile */
    fill_floats(x, n, 4);
    one_op relu;
    relu_new(&relu, n);
    one_op_bind(&relu, (void *[]){x}, (void *[]){y});
    delta_event e0 = delta_backend_record(b, DELTA_STREAM_COMPUTE);
    delta_event ev[N], ed = {0};
    int wait_at = N / 2;
    for (int i = 0; i < N; i++) {
        if (i == wait_at) {
            /* a wait item of its own: the compute stream holds for a copy */
            delta_backend_copy(b, DELTA_STREAM_TO_DEVICE, z, x, 64);
            ed = delta_backend_record(b, DELTA_STREAM_TO_DEVICE);
            delta_backend_wait(b, DELTA_STREAM_COMPUTE, ed);
            ev[i] = delta_backend_record(b, DELTA_STREAM_COMPUTE);
            continue;
        }
        delta_backend_run(b, &relu.k);
        ev[i] = delta_backend_record(b, DELTA_STREAM_COMPUTE);
    }
    CHECK(ev[N - 1].seq == e0.seq + N, "one item per kernel and per wait");
    delta_backend_sync(b, ev[N - 1]);
    double t, prev_t1 = -1, prev_time = -1, c0, c1;
    CHECK(!delta_backend_span(b, e0, &c0, &c1), "no item before the first");
    CHECK(delta_backend_event_time(b, e0, &t) && t == e0.time,
          "an event with nothing before it is reached when recorded");
    CHECK(delta_backend_span(b, ed, &c0, &c1) && c0 <= c1, "copy span");
    for (int i = 0; i < N; i++) {
        double t0 = 0, t1 = 0;
        bool has = delta_backend_span(b, ev[i], &t0, &t1);
        CHECK(delta_backend_query(b, ev[i]));
        CHECK(delta_backend_event_time(b, ev[i], &t), "item %d: event time", i);
        CHECK(t >= ev[i].time, "item %d: reached before it was recorded", i);
        CHECK(t >= prev_time, "item %d: event times go back", i);
        prev_time = t;
        if (i == wait_at) {
            CHECK(!has, "a wait has no span");
            CHECK(t >= c1, "the wait ended before its copy");
            continue;
        }
        CHECK(has, "item %d: span", i);
        CHECK(t0 <= t1, "item %d: span ends before it starts", i);
        CHECK(t0 >= prev_t1, "item %d starts before the one before it ends", i);
        CHECK(t >= t1, "item %d: reached before its kernel ended", i);
        if (i == wait_at + 1)
            CHECK(t0 >= c1, "the kernel after the wait started before the "
                  "copy ended");
        prev_t1 = t1;
    }
    delta_ctx_free(relu.ctx);
    delta_free_aligned(x);
    delta_free_aligned(y);
    delta_free_aligned(z);
    delta_backend_free(b);
}

/* ---- what a kernel item carries ---------------------------------------------- */

/* The caller's env changes between runs (the step): each kernel must see
 * the one it was enqueued with. Dropout's mask is keyed by the step. */
static void test_kernel_keeps_its_env(void) {
    enum { STEPS = 8 };
    delta_backend *b = cpu_new(0, 0, 99);
    const int64_t n = 1 << 12;
    one_op d;
    d.ctx = delta_ctx_new();
    delta_dropout(d.ctx, delta_input(d.ctx, "x", DELTA_F32, 1, &n), 0.5f);
    CHECK(d.ctx->ops[d.ctx->n_ops - 1].n_out == 1, "dropout has one output");
    float *x = xalloc((size_t)n * 4), *y = xalloc(STEPS * (size_t)n * 4),
          *ref = xalloc((size_t)n * 4);
    fill_floats(x, n, 5);
    delta_kernel_env env = {.seed = 11, .training = true};
    for (int s = 0; s < STEPS; s++) {
        one_op_bind(&d, (void *[]){x}, (void *[]){y + (size_t)s * n});
        env.step = s;
        d.k.env = &env;
        delta_backend_run(b, &d.k);
    }
    env.step = -1; /* the caller moves on before the device does */
    sync_all(b);
    for (int s = 0; s < STEPS; s++) {
        delta_kernel_env es = {.seed = 11, .step = s, .training = true};
        one_op_bind(&d, (void *[]){x}, (void *[]){ref});
        d.k.env = &es;
        delta_cpu_run(&d.k);
        CHECK(memcmp(ref, y + (size_t)s * n, (size_t)n * 4) == 0,
              "step %d ran with another step's env", s);
    }
    delta_ctx_free(d.ctx);
    delta_free_aligned(x);
    delta_free_aligned(y);
    delta_free_aligned(ref);
    delta_backend_free(b);
}

/* Kernels on the compute thread give the caller's thread's bits, for each
 * thread count and GEMM path: OpenMP's thread count (which OpenBLAS's
 * OpenMP build reads) is per thread in libgomp. */
static void test_kernels_use_the_configured_threads(void) {
    const int threads0 = delta_cpu_threads();
    const delta_gemm_impl gemm0 = delta_cpu_gemm();
    const int64_t m = 96, k = 300, n = 130;
    float *a = xalloc((size_t)(m * k) * 4), *bm = xalloc((size_t)(k * n) * 4);
    float *c = xalloc((size_t)(m * n) * 4), *ref = xalloc((size_t)(m * n) * 4);
    fill_floats(a, m * k, 6);
    fill_floats(bm, k * n, 7);
    one_op mm;
    matmul_new(&mm, m, k, n);
    delta_backend *b = cpu_new(0, 0, 0);
    const delta_gemm_impl impls[2] = {DELTA_GEMM_BUILTIN, DELTA_GEMM_BLAS};
    for (int g = 0; g < 2; g++) {
        if (delta_cpu_set_gemm(impls[g]) != DELTA_OK) continue; /* no BLAS */
        for (int th = 1; th <= (g ? BLAS_MAX_THREADS : 3); th++) {
            delta_cpu_set_threads(th);
            one_op_bind(&mm, (void *[]){a, bm}, (void *[]){c});
            delta_backend_run(b, &mm.k);
            sync_all(b);
            one_op_bind(&mm, (void *[]){a, bm}, (void *[]){ref});
            delta_cpu_run(&mm.k);
            CHECK(memcmp(c, ref, (size_t)(m * n) * 4) == 0,
                  "%s GEMM, %d threads: the compute thread's bits differ",
                  g ? "OpenBLAS" : "built-in", th);
        }
    }
    delta_backend_free(b);
    delta_cpu_set_threads(threads0);
    delta_cpu_set_gemm(gemm0);
    delta_ctx_free(mm.ctx);
    delta_free_aligned(a);
    delta_free_aligned(bm);
    delta_free_aligned(c);
    delta_free_aligned(ref);
}

/* Freeing the backend right after enqueuing, past the compute ring's
 * capacity (the producer blocks): every kernel still runs. */
static void test_destroy_runs_queued_kernels(void) {
    enum { K = 2500 };
    const int64_t n = 256;
    float *x = xalloc((size_t)n * 4), *y = xalloc(K * (size_t)n * 4);
    fill_floats(x, n, 8);
    memset(y, 0xff, K * (size_t)n * 4); /* NaNs */
    one_op relu;
    relu_new(&relu, n);
    delta_backend *b = cpu_new(0, 0, 0);
    for (int i = 0; i < K; i++) {
        one_op_bind(&relu, (void *[]){x}, (void *[]){y + (size_t)i * n});
        delta_backend_run(b, &relu.k);
    }
    delta_backend_free(b);
    int bad = 0;
    for (int64_t j = 0; j < K * n; j++)
        bad += y[j] != (x[j % n] > 0 ? x[j % n] : 0.0f);
    CHECK(bad == 0, "%d outputs of queued kernels never written", bad);
    delta_ctx_free(relu.ctx);
    delta_free_aligned(x);
    delta_free_aligned(y);
}

/* ---- whole sessions: jitter changes nothing ----------------------------------- */

static void session_case(const model_case *mc, const char *policy, int pct,
                         const char *keep_ref, size_t keep_n) {
    size_t minb, peak = baseline_peak(mc, &minb);
    size_t budget = pct ? peak * (size_t)pct / 100 : 0;
    char *out[2] = {NULL, NULL}, why[512] = "";
    size_t n[2] = {0, 0}, pk;
    delta_step_stats sum[2];
    for (int j = 0; j < 2; j++) {
        /* a slow link, so that copies are in flight while kernels run */
        delta_backend *be = cpu_new(0.5, -1, j ? 0xfeedULL : 0);
        outcome oc = train(mc, be, policy, budget, &out[j], &n[j], &pk, &sum[j],
                           why, sizeof why);
        CHECK(oc == RAN, "%s %s at %d%%: %s", mc->label, policy, pct, why);
        delta_backend_free(be);
    }
    if (out[0] && out[1]) {
        CHECK(n[0] == n[1] && memcmp(out[0], out[1], n[0]) == 0,
              "%s %s at %d%%: jitter changed the trained bytes", mc->label,
              policy, pct);
        CHECK(n[0] == keep_n && memcmp(out[0], keep_ref, n[0]) == 0,
              "%s %s at %d%%: differs from keep", mc->label, policy, pct);
        printf("  %-8s %-6s %3d%%: bit-identical with jitter; %d recomputed, "
               "%zu B swapped out\n", policy, mc->label, pct,
               sum[1].recomputed_ops, sum[1].swap_out_bytes);
    }
    free(out[0]);
    free(out[1]);
}

static void test_sessions_with_jitter(void) {
    const char *labels[] = {"gpt2", "mlp"};
    for (int l = 0; l < 2; l++) {
        const model_case *mc = NULL;
        for (int i = 0; i < N_MODELS; i++)
            if (strcmp(models[i].label, labels[l]) == 0) mc = &models[i];
        CHECK(mc != NULL, "no model %s", labels[l]);
        if (!mc) continue;
        delta_backend *be = cpu_new(0, 0, 0);
        char *keep = NULL, why[512] = "";
        size_t keep_n = 0, pk;
        delta_step_stats st;
        outcome oc = train(mc, be, "keep", 0, &keep, &keep_n, &pk, &st, why,
                           sizeof why);
        delta_backend_free(be);
        CHECK(oc == RAN, "keep %s: %s", mc->label, why);
        if (oc != RAN) continue;
        session_case(mc, "keep", 0, keep, keep_n);
        if (l == 0) {
            session_case(mc, "dtr", 70, keep, keep_n);
            session_case(mc, "capuchin", 50, keep, keep_n);
        } else {
            session_case(mc, "swap", 100, keep, keep_n);
            session_case(mc, "capuchin", 70, keep, keep_n);
        }
        free(keep);
    }
}

int main(void) {
    TEST_RUN(test_run_returns_before_its_kernel);
    TEST_RUN(test_streams_wait_on_each_other);
    TEST_RUN(test_compute_spans_and_event_times);
    TEST_RUN(test_kernel_keeps_its_env);
    TEST_RUN(test_kernels_use_the_configured_threads);
    TEST_RUN(test_destroy_runs_queued_kernels);
    TEST_RUN(test_sessions_with_jitter);
    TEST_MAIN_END();
}
