/* Tests for the stream-order checker (src/backend/check/stream_check.c).
 *
 * Unit: on a record-mode checker around sim (a fake arena base) and cpu
 * (a real one), hand-made calls: a copy to the device and a kernel reading
 * its bytes with no wait is caught, with wait(COMPUTE, event) it is clean;
 * a host sync (and a query that says complete) orders everything issued
 * afterwards; ordering passes through two waits; a copy to the host reading
 * what a kernel wrote, and a kernel writing bytes a copy to the host still
 * reads, are caught unless waited for; the host's upload and host_free are
 * checked against the copy streams; the message names the op, the tensor
 * (or the copy's label, which a wait between it and its copy leaves
 * pending) and both streams; in abort mode (a child process)
 * a violation prints the message and aborts.
 *
 * Sessions: every policy on the tiny models of policy_train.h, at 100, 60
 * and 40% of the dry plan's peak (budgets a policy refuses are skipped), on
 * cpu and sim, a few steps each through a record-mode checker: no
 * violation. The session option check_streams (an aborting checker made by
 * the session). And paper-scale steps on the simulated A100 (ResNet-50
 * batch 64 and GPT-2 small batch 8, delta at 50%) with their time against
 * the same steps unchecked.
 *
 * `test_stream_check NAME` runs only the session and paper-scale tests
 * whose name contains NAME (the unit tests always run: they are quick). */
#include "backend/backend.h"
#include "graph/graph_impl.h"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "policy_train.h"

static const char *only;

/* Whether the test called name runs (see the top). */
static bool selected(const char *name) { return !only || strstr(name, only); }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- a hand-driven checker -------------------------------------------------
 * x (1,024 floats) at offset 0 of the arena, y = relu(x) at 8 KiB, a
 * 4 KiB host block. */
#define N_X 1024
#define X_BYTES (N_X * sizeof(float))
#define Y_OFF 8192

typedef struct rig {
    delta_backend *inner, *b;
    delta_ctx *ctx;
    const delta_op *relu;
    char *base;
    void *host, *host2;
} rig;

/* link_gbps: the cpu's link (0: unthrottled) */
static bool rig_link(rig *r, bool cpu, double link_gbps) {
    memset(r, 0, sizeof *r);
    r->inner = cpu ? delta_backend_cpu_new(&(delta_cpu_backend_opts){
                                               .link_gbps = link_gbps,
                                               .link_latency_s = 0},
                                           NULL, 0)
                   : delta_backend_sim_new(&(delta_sim_backend_opts){
                                               .gpu = "a100-80g"},
                                           NULL, 0);
    CHECK(r->inner != NULL, "inner backend");
    if (!r->inner) return false;
    char err[128] = "";
    r->b = delta_backend_check_new(r->inner, DELTA_CHECK_RECORD, err,
                                   sizeof err);
    CHECK(r->b != NULL, "checker: %s", err);
    if (!r->b) return false;
    r->ctx = delta_ctx_new();
    int64_t shape[1] = {N_X};
    delta_tensor *x = delta_input(r->ctx, "x", DELTA_F32, 1, shape);
    delta_relu(r->ctx, x);
    CHECK(delta_ctx_status(r->ctx) == DELTA_OK);
    r->relu = &r->ctx->ops[r->ctx->n_ops - 1];
    void *base = NULL;
    CHECK(delta_backend_arena_create(r->b, 1 << 16, &base) == DELTA_OK);
    /* sim has no arena address: the checker gives a fake one */
    CHECK(base != NULL, "the checker's arena has an address");
    r->base = base;
    r->host = delta_backend_host_alloc(r->b, X_BYTES);
    CHECK(r->host != NULL);
    r->host2 = delta_backend_host_alloc(r->b, X_BYTES);
    CHECK(r->host2 != NULL);
    if (cpu && r->host) memset(r->host, 0, X_BYTES);
    return r->base && r->host && r->host2;
}

static bool rig_new(rig *r, bool cpu) { return rig_link(r, cpu, 0); }

static void rig_free(rig *r) {
    if (r->b) {
        delta_backend_sync_copies(r->b);
        if (r->host) delta_backend_host_free(r->b, r->host);
        if (r->host2) delta_backend_host_free(r->b, r->host2);
        delta_backend_arena_destroy(r->b);
    }
    delta_backend_free(r->b);
    delta_backend_free(r->inner);
    delta_ctx_free(r->ctx);
}

/* relu: reads x at in_off, writes y at out_off. */
static void run_relu(rig *r, size_t in_off, size_t out_off) {
    delta_kernel_env env = {0, 0, true, NULL};
    delta_kargs k = {.op = r->relu, .env = &env};
    k.in_t[0] = r->ctx->tensors[r->relu->in[0]];
    k.in[0] = r->base + in_off;
    k.out_t[0] = r->ctx->tensors[r->relu->out[0]];
    k.out[0] = r->base + out_off;
    delta_backend_run(r->b, &k);
}

static long violations(rig *r, const char **msg) {
    const char *m = NULL;
    long n = delta_backend_check_violations(r->b, &m);
    if (msg) *msg = m ? m : "";
    return n;
}

static bool has(const char *msg, const char *part) {
    return strstr(msg, part) != NULL;
}

/* A copy to the device, then a kernel reading its bytes. */
static void h2d_then_read(bool cpu) {
    const char *msg;
    rig r;
    /* no wait: caught, naming the op, the tensor, the label, the streams */
    if (rig_new(&r, cpu)) {
        delta_backend_label(r.b, DELTA_STREAM_TO_DEVICE, "x");
        delta_backend_copy(r.b, DELTA_STREAM_TO_DEVICE, r.base, r.host,
                           X_BYTES);
        run_relu(&r, 0, Y_OFF);
        CHECK(violations(&r, &msg) == 1, "one violation, got %ld",
              violations(&r, NULL));
        printf("  caught: %s\n", msg);
        CHECK(has(msg, "stream-order violation: read on compute (op 0 "
                       "relu '"), "%s", msg);
        CHECK(has(msg, "tensor 'x'"), "%s", msg);
        CHECK(has(msg, "not ordered after write on to-device (copy of 'x'"),
              "%s", msg);
        CHECK(has(msg, "bytes [0, 4096) of the arena"), "%s", msg);
    }
    rig_free(&r);
    /* wait(COMPUTE, the copy's event): clean */
    if (rig_new(&r, cpu)) {
        delta_backend_copy(r.b, DELTA_STREAM_TO_DEVICE, r.base, r.host,
                           X_BYTES);
        delta_backend_wait(r.b, DELTA_STREAM_COMPUTE,
                           delta_backend_record(r.b, DELTA_STREAM_TO_DEVICE));
        run_relu(&r, 0, Y_OFF);
        CHECK(violations(&r, &msg) == 0, "%s", msg);
    }
    rig_free(&r);
    /* a wait on an event recorded before the copy does not order it */
    if (rig_new(&r, cpu)) {
        delta_event early = delta_backend_record(r.b, DELTA_STREAM_TO_DEVICE);
        delta_backend_copy(r.b, DELTA_STREAM_TO_DEVICE, r.base, r.host,
                           X_BYTES);
        delta_backend_wait(r.b, DELTA_STREAM_COMPUTE, early);
        run_relu(&r, 0, Y_OFF);
        CHECK(violations(&r, NULL) == 1);
    }
    rig_free(&r);
}

static void test_h2d_then_kernel_sim(void) { h2d_then_read(false); }
static void test_h2d_then_kernel_cpu(void) { h2d_then_read(true); }

/* A label names the next copy even when a wait comes between (cpu: a
 * wait on an incomplete event is an item of the waiting stream). */
static void test_label_survives_wait(void) {
    const char *msg;
    rig r;
    if (rig_link(&r, true, 0.01)) { /* 4 KiB: 0.4 ms in flight */
        delta_backend_copy(r.b, DELTA_STREAM_TO_HOST, r.host2, r.base + Y_OFF,
                           X_BYTES);
        delta_backend_label(r.b, DELTA_STREAM_TO_DEVICE, "x");
        delta_backend_wait(r.b, DELTA_STREAM_TO_DEVICE,
                           delta_backend_record(r.b, DELTA_STREAM_TO_HOST));
        delta_backend_copy(r.b, DELTA_STREAM_TO_DEVICE, r.base, r.host,
                           X_BYTES);
        run_relu(&r, 0, 2 * Y_OFF);
        CHECK(violations(&r, &msg) == 1 &&
                  has(msg, "after write on to-device (copy of 'x'"),
              "%s", msg);
    }
    rig_free(&r);
}

/* The host syncs on the copy: whatever it issues afterwards is ordered
 * after it, on any stream. A query that says complete does the same. */
static void test_host_sync_orders_later_issues(void) {
    const char *msg;
    rig r;
    if (rig_new(&r, false)) {
        delta_backend_copy(r.b, DELTA_STREAM_TO_DEVICE, r.base, r.host,
                           X_BYTES);
        delta_backend_sync(r.b, delta_backend_record(r.b,
                                                     DELTA_STREAM_TO_DEVICE));
        run_relu(&r, 0, Y_OFF);
        /* and a copy to the host of what the kernel wrote, after a wait */
        delta_backend_wait(r.b, DELTA_STREAM_TO_HOST,
                           delta_backend_record(r.b, DELTA_STREAM_COMPUTE));
        delta_backend_copy(r.b, DELTA_STREAM_TO_HOST, r.host, r.base + Y_OFF,
                           X_BYTES);
        CHECK(violations(&r, &msg) == 0, "%s", msg);
    }
    rig_free(&r);
    if (rig_new(&r, true)) { /* cpu: the copy completes on its own */
        delta_backend_copy(r.b, DELTA_STREAM_TO_DEVICE, r.base, r.host,
                           X_BYTES);
        delta_event e = delta_backend_record(r.b, DELTA_STREAM_TO_DEVICE);
        double t0 = now_s();
        while (!delta_backend_query(r.b, e) && now_s() - t0 < 10) {
        }
        run_relu(&r, 0, Y_OFF);
        CHECK(violations(&r, &msg) == 0, "%s", msg);
    }
    rig_free(&r);
}

/* TO_DEVICE -> TO_HOST -> COMPUTE: compute learns the first copy through
 * the copy stream that waited for it. Without the first wait: caught. */
static void test_transitive_waits(void) {
    const char *msg;
    for (int first_wait = 1; first_wait >= 0; first_wait--) {
        rig r;
        if (rig_new(&r, false)) {
            delta_backend_copy(r.b, DELTA_STREAM_TO_DEVICE, r.base, r.host,
                               X_BYTES);
            if (first_wait)
                delta_backend_wait(
                    r.b, DELTA_STREAM_TO_HOST,
                    delta_backend_record(r.b, DELTA_STREAM_TO_DEVICE));
            /* an item of the to-host stream after the wait (other bytes) */
            delta_backend_copy(r.b, DELTA_STREAM_TO_HOST, r.host2,
                               r.base + 3 * Y_OFF, 64);
            delta_backend_wait(r.b, DELTA_STREAM_COMPUTE,
                               delta_backend_record(r.b, DELTA_STREAM_TO_HOST));
            run_relu(&r, 0, Y_OFF);
            if (first_wait)
                CHECK(violations(&r, &msg) == 0, "%s", msg);
            else
                CHECK(violations(&r, &msg) == 1 &&
                          has(msg, "on to-device"),
                      "%s", msg);
        }
        rig_free(&r);
    }
}

/* A copy to the host of bytes a kernel wrote, with no wait: caught. */
static void test_d2h_reads_kernel_output(void) {
    const char *msg;
    rig r;
    if (rig_new(&r, false)) {
        run_relu(&r, 0, Y_OFF);
        delta_backend_label(r.b, DELTA_STREAM_TO_HOST, "y");
        delta_backend_copy(r.b, DELTA_STREAM_TO_HOST, r.host, r.base + Y_OFF,
                           X_BYTES);
        CHECK(violations(&r, &msg) == 1, "one violation");
        printf("  caught: %s\n", msg);
        CHECK(has(msg, "read on to-host (copy of 'y'"), "%s", msg);
        CHECK(has(msg, "not ordered after write on compute (op 0 relu '"),
              "%s", msg);
        CHECK(has(msg, "tensor '"), "%s", msg);
        CHECK(has(msg, "bytes [8192, 12288) of the arena"), "%s", msg);
    }
    rig_free(&r);
}

/* A kernel writing bytes a copy to the host still reads (a swap-out whose
 * bytes were reused too early): caught; after a sync on the copy: clean.
 * The host store: the host may not free a block a copy still writes. */
static void test_write_after_read_and_host(void) {
    const char *msg;
    for (int synced = 0; synced < 2; synced++) {
        rig r;
        if (rig_new(&r, false)) {
            delta_backend_copy(r.b, DELTA_STREAM_TO_HOST, r.host,
                               r.base + Y_OFF, X_BYTES);
            if (synced)
                delta_backend_sync(r.b, delta_backend_record(
                                            r.b, DELTA_STREAM_TO_HOST));
            run_relu(&r, 0, Y_OFF); /* y's bytes written again */
            if (synced) {
                CHECK(violations(&r, &msg) == 0, "%s", msg);
            } else {
                CHECK(violations(&r, &msg) == 1, "one violation");
                CHECK(has(msg, "write on compute") &&
                          has(msg, "after read on to-host"),
                      "%s", msg);
            }
        }
        rig_free(&r);
    }
    rig r;
    if (rig_new(&r, false)) {
        /* upload into bytes a copy to the device is writing */
        delta_backend_copy(r.b, DELTA_STREAM_TO_DEVICE, r.base, r.host,
                           X_BYTES);
        float v[N_X] = {0};
        delta_backend_upload(r.b, r.base, v, X_BYTES);
        CHECK(violations(&r, &msg) == 1 &&
                  has(msg, "write on host (upload of 4096 bytes"),
              "%s", msg);
        /* download of what a kernel wrote: ordered (the contract) */
        run_relu(&r, 2 * Y_OFF, Y_OFF);
        delta_backend_download(r.b, v, r.base + Y_OFF, X_BYTES);
        CHECK(violations(&r, NULL) == 1);
        /* freeing a host block a copy still writes */
        delta_backend_copy(r.b, DELTA_STREAM_TO_HOST, r.host2, r.base + Y_OFF,
                           X_BYTES);
        delta_backend_host_free(r.b, r.host2);
        r.host2 = NULL;
        CHECK(violations(&r, &msg) == 2, "%ld", violations(&r, NULL));
    }
    rig_free(&r);
}

/* Same-stream accesses are ordered by the stream; a device move on the
 * compute stream too. */
static void test_same_stream_clean(void) {
    const char *msg;
    rig r;
    if (rig_new(&r, true)) {
        run_relu(&r, 0, Y_OFF);
        run_relu(&r, Y_OFF, 0);
        delta_backend_copy(r.b, DELTA_STREAM_COMPUTE, r.base + 2 * Y_OFF,
                           r.base, X_BYTES);
        run_relu(&r, 2 * Y_OFF, 0);
        for (int i = 0; i < 3; i++)
            delta_backend_copy(r.b, DELTA_STREAM_TO_DEVICE, r.base + 4 * Y_OFF,
                               r.host, X_BYTES);
        CHECK(violations(&r, &msg) == 0, "%s", msg);
    }
    rig_free(&r);
}

/* Abort mode: the message on stderr, then abort (a child process). */
static void test_abort_mode(void) {
    int fd[2];
    CHECK(pipe(fd) == 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        delta_backend *in = delta_backend_sim_new(NULL, NULL, 0);
        delta_backend *b = delta_backend_check_new(in, 0, NULL, 0);
        void *base = NULL, *h;
        delta_backend_arena_create(b, 1 << 16, &base);
        h = delta_backend_host_alloc(b, 4096);
        delta_backend_copy(b, DELTA_STREAM_TO_DEVICE, base, h, 4096);
        delta_backend_copy(b, DELTA_STREAM_TO_HOST, h, base, 4096);
        _exit(0); /* not reached */
    }
    close(fd[1]);
    char buf[2048] = "";
    size_t got = 0;
    ssize_t n;
    while ((n = read(fd[0], buf + got, sizeof buf - 1 - got)) > 0)
        got += (size_t)n;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
          "the child aborted (status %d)", status);
    CHECK(has(buf, "stream-order violation: read on to-host (unlabelled "
                   "copy of 4096 bytes"),
          "stderr: %s", buf);
}

/* ---- sessions ------------------------------------------------------------ */

static const int check_pcts[] = {100, 60, 40};

/* Every policy x model x budget on one backend, through a record-mode
 * checker per run. */
static void sessions_on(bool cpu) {
    delta_backend *inner =
        cpu ? delta_backend_cpu_new(&(delta_cpu_backend_opts){.link_gbps = 1,
                                                              .link_latency_s = 0},
                                    NULL, 0)
            : delta_backend_sim_new(&(delta_sim_backend_opts){.gpu = "a100-80g"},
                                    NULL, 0);
    CHECK(inner != NULL);
    if (!inner) return;
    int runs = 0, refused = 0;
    size_t swapped = 0;
    long recomputed = 0;
    for (int mi = 0; mi < N_MODELS; mi++) {
        size_t min_budget = 0, base = baseline_peak(&models[mi], &min_budget);
        for (const char *const *p = delta_session_policies(); *p; p++) {
            for (int k = 0; k < 3; k++) {
                size_t budget = base * (size_t)check_pcts[k] / 100;
                delta_backend *b = delta_backend_check_new(
                    inner, DELTA_CHECK_RECORD, NULL, 0);
                char *got = NULL, why[512] = "";
                size_t got_n = 0, peak = 0;
                delta_step_stats sum;
                outcome oc = train(&models[mi], b, *p, budget, &got, &got_n,
                                   &peak, &sum, why, sizeof why);
                free(got);
                const char *msg = NULL;
                long v = delta_backend_check_violations(b, &msg);
                CHECK(v == 0, "%s %s at %d%% on %s: %ld violations, the first: "
                      "%s", *p, models[mi].label, check_pcts[k],
                      cpu ? "cpu" : "sim", v, msg);
                if (oc == RAN) {
                    runs++;
                    swapped += sum.swap_out_bytes + sum.swap_in_bytes;
                    recomputed += sum.recomputed_ops;
                } else {
                    refused++;
                }
                delta_backend_free(b);
            }
        }
    }
    printf("  %s: %d runs checked (%zu bytes swapped, %ld ops recomputed "
           "in all), %d budgets refused\n", cpu ? "cpu" : "sim", runs,
           swapped, recomputed, refused);
    delta_backend_free(inner);
}

static void test_sessions_cpu(void) {
    if (!selected("test_sessions_cpu")) TEST_SKIP("not selected");
    sessions_on(true);
}

static void test_sessions_sim(void) {
    if (!selected("test_sessions_sim")) TEST_SKIP("not selected");
    sessions_on(false);
}

/* The session option: the session makes (and frees) an aborting checker. */
static void test_session_option(void) {
    delta_backend *be = delta_backend_cpu_new(
        &(delta_cpu_backend_opts){.link_gbps = 0, .link_latency_s = 0}, NULL,
        0);
    CHECK(be != NULL);
    if (!be) return;
    const char *policies[] = {"keep", "delta", "dtr"};
    for (int i = 0; i < 3; i++) {
        built b;
        if (!build(&models[2], &b)) continue;
        delta_dry_plan dp;
        delta_dry_plan_build(b.ctx, &dp, NULL, 0);
        delta_session_opts so = {.backend = be, .policy = policies[i],
                                 .budget_bytes = i ? dp.peak_bytes / 2 : 0,
                                 .check_streams = true};
        char why[512] = "";
        delta_status st;
        delta_session *s = delta_session_new(b.ctx, &so, &st, why, sizeof why);
        CHECK(s != NULL, "%s: %s", policies[i], why);
        for (int step = 0; s && step < 3; step++) {
            feed(s, &b, step);
            delta_step_stats ss;
            CHECK(delta_session_run(s, DELTA_RUN_STEP, &ss) == DELTA_OK,
                  "%s", delta_session_error(s));
        }
        float loss = 0;
        if (s)
            CHECK(delta_session_read(s, b.model.loss, &loss, sizeof loss) ==
                      DELTA_OK &&
                  loss > 0, "loss %g", loss);
        delta_session_free(s);
        delta_ctx_free(b.ctx);
    }
    delta_backend_free(be);
}

/* Steps of a paper-scale program on the simulated A100 at half its peak
 * with the delta policy, checked (the session option) or not: the
 * checker's host cost. Seconds from creating the session to the end of
 * the last step; *n_ops the program's ops. */
static double paper_steps(const delta_model_config *cfg, bool check,
                          int steps, delta_step_stats *last, int *n_ops) {
    delta_backend *be = delta_backend_sim_new(
        &(delta_sim_backend_opts){.gpu = "a100-80g"}, NULL, 0);
    delta_ctx *c = delta_ctx_new();
    delta_model mdl;
    CHECK(delta_model_build(c, cfg, &mdl) == DELTA_OK, "build");
    delta_backward(c, mdl.loss);
    delta_optimizer_sgd(c, (delta_sgd_opts){0.05f, 0.9f, 0, false});
    *n_ops = delta_ctx_n_ops(c);
    delta_dry_plan dp;
    delta_dry_plan_build(c, &dp, NULL, 0);
    delta_session_opts so = {.backend = be, .policy = "delta",
                             .budget_bytes = dp.peak_bytes / 2,
                             .check_streams = check};
    char why[512] = "";
    delta_status st;
    double t0 = now_s();
    delta_session *s = delta_session_new(c, &so, &st, why, sizeof why);
    CHECK(s != NULL, "%s", why);
    for (int k = 0; s && k < steps; k++)
        CHECK(delta_session_run(s, DELTA_RUN_STEP, last) == DELTA_OK, "%s",
              delta_session_error(s));
    double t = now_s() - t0;
    delta_session_free(s);
    delta_ctx_free(c);
    delta_backend_free(be);
    return t;
}

static void test_paper_scale_sim(void) {
    if (!selected("test_paper_scale_sim")) TEST_SKIP("not selected");
    const delta_model_config cfgs[] = {
        {.name = "resnet50", .batch = 64},
        {.name = "gpt2-small", .batch = 8},
    };
    for (int i = 0; i < 2; i++) {
        delta_step_stats a = {0}, b = {0};
        int n_ops = 0;
        paper_steps(&cfgs[i], false, 1, &a, &n_ops); /* warm-up: the first
                                                       run pays page faults */
        double plain = paper_steps(&cfgs[i], false, 3, &a, &n_ops);
        double checked = paper_steps(&cfgs[i], true, 3, &b, &n_ops);
        printf("  %s batch %lld, sim a100-80g, delta at 50%%, 3 steps of %d "
               "ops: %.2f s checked, %.2f s unchecked (a step: %d swap-outs, "
               "%d swap-ins, %d recomputed ops)\n", cfgs[i].name,
               (long long)cfgs[i].batch, n_ops, checked, plain, b.swap_outs,
               b.swap_ins, b.recomputed_ops);
        /* the checker only watches: the simulated step is the same */
        CHECK(a.step_s == b.step_s, "step %.6f s checked, %.6f s unchecked",
              b.step_s, a.step_s);
        CHECK(checked < 60, "the checked run took %.1f s", checked);
    }
}

int main(int argc, char **argv) {
    only = argc > 1 ? argv[1] : NULL;
    TEST_RUN(test_h2d_then_kernel_sim);
    TEST_RUN(test_h2d_then_kernel_cpu);
    TEST_RUN(test_label_survives_wait);
    TEST_RUN(test_host_sync_orders_later_issues);
    TEST_RUN(test_transitive_waits);
    TEST_RUN(test_d2h_reads_kernel_output);
    TEST_RUN(test_write_after_read_and_host);
    TEST_RUN(test_same_stream_clean);
    TEST_RUN(test_abort_mode);
    TEST_RUN(test_session_option);
    TEST_RUN(test_sessions_cpu);
    TEST_RUN(test_sessions_sim);
    TEST_RUN(test_paper_scale_sim);
    TEST_MAIN_END();
}
