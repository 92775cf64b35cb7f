/* delta calibrate and device files (tools/cmd_calibrate.c,
 * src/backend/calibrate.c, src/backend/sim/device_file.c):
 *  - --help, and delta --help names calibrate;
 *  - calibrate --quick on the cpu writes a device file whose figures are
 *    above 0 (times at least 0), with curves and factors, that the sim
 *    then runs train, plan, maxbatch and bench on;
 *  - calibrating the simulator itself (deterministic) gives back its
 *    preset's figures, factors of 1 and steps it predicts exactly;
 *  - a hand-made file gives the sim costs checked exactly: a GEMM's time
 *    is the file's flops times its curve's efficiency at the GEMM's size,
 *    an op type's factor scales its time, each link direction has its
 *    rate, queued kernels are kernel_gap_s apart; a file with the figures
 *    alone costs as the constants do;
 *  - a file's host seconds per op type are charged by the sim's host (a
 *    keep step bound by them), and the cpu calibration writes them and the
 *    precision its programs ran in; a run in the other precision says so;
 *  - bad files (missing, not JSON, a field missing, negative, of the wrong
 *    type, a bad curve, factor, host cost or precision) are refused with exit 2 naming the field
 *    by train, plan, maxbatch and bench;
 *  - --out that is not a regular file (a device, a folder, a FIFO) is
 *    refused with exit 2 before anything is measured.
 * No timing is asserted: the cpu's figures are only checked for sense. */
#include "delta/delta.h"
#include "backend/backend.h"

#include "test.h"
#include "cli_run.h"

#define CALIBRATE(...)                                                     \
    do {                                                                   \
        const char *a_[] = {__VA_ARGS__, NULL};                            \
        run_cmd(&res, "calibrate", a_);                                    \
    } while (0)

#define RUN(cmd, ...)                                                      \
    do {                                                                   \
        const char *a_[] = {__VA_ARGS__, NULL};                            \
        run_cmd(&res, cmd, a_);                                            \
    } while (0)

/* A 2-layer, 64-wide GPT-2 at T 32. */
#define TINY "--model", "gpt2-tiny", "--layers", "2", "--hidden", "64", \
             "--heads", "2", "--seq-len", "32", "--vocab", "256"

static const char *const figures[] = {
    "memory_bytes", "fp32_flops", "tensor_flops", "bf16_flops",
    "hbm_bytes_per_s", "link_to_host_bytes_per_s",
    "link_to_device_bytes_per_s", "link_latency_s", "launch_host_s",
    "library_host_s", "launch_latency_s", "sync_wake_s", NULL};

static void test_help(void) {
    CALIBRATE("--help");
    CHECK(res.status == 0 && strstr(res.out, "usage: delta calibrate") &&
              strstr(res.out, "--out") && strstr(res.out, "--quick"),
          "calibrate --help: status %d: %.300s", res.status, res.out);
    const char *help[] = {"--help", NULL};
    run_cmd(&res, NULL, help);
    CHECK(res.status == 0 && strstr(res.out, "calibrate"),
          "delta --help lists calibrate: %.600s", res.out);
    RUN("train", "--help");
    CHECK(res.status == 0 && strstr(res.out, "--gpu-file"),
          "train --help names --gpu-file");
}

/* ---- the cpu ---------------------------------------------------------------- */

static void test_cpu_quick(void) {
    char out[128];
    path_in_tmp(out, sizeof out, "cpu.json");
    CALIBRATE("--quick", "--out", out);
    CHECK(res.status == 0, "calibrate --quick: status %d: %.600s", res.status,
          res.err);
    CHECK(strstr(res.out, "per op type") && strstr(res.out, "check "),
          "the report compares op types and checks steps: %.600s", res.out);
    cJSON *d = read_json_file(out);
    CHECK(d != NULL, "%s is not JSON", out);
    if (!d) return;
    for (int i = 0; figures[i]; i++) {
        double v = num(d, figures[i]);
        bool time = strstr(figures[i], "_s") &&
                    !strstr(figures[i], "per_s") && !strstr(figures[i], "flops");
        CHECK(time ? v >= 0 : v > 0, "%s = %g", figures[i], v);
    }
    CHECK(num(d, "launch_host_s") > 0 && num(d, "kernel_s") > 0 &&
              num(d, "kernel_gap_s") >= 0 && num(d, "launch_latency_s") >= 0,
          "host figures: launch %g, kernel %g", num(d, "launch_host_s"),
          num(d, "kernel_s"));
    CHECK(num(d, "link_duplex") >= 1 && num(d, "link_duplex") <= 2,
          "link_duplex %g", num(d, "link_duplex"));
    CHECK(!strcmp(str(d, "format"), "delta-device"), "format");
    const cJSON *eff = cJSON_GetObjectItem(d, "efficiency");
    static const char *const kinds[] = {"gemm", "conv2d", "conv2d_dx",
                                        "conv2d_dw", "elementwise",
                                        "reduction"};
    for (int k = 0; k < 6; k++) {
        const cJSON *c = cJSON_GetObjectItem(eff, kinds[k]);
        CHECK(cJSON_IsArray(c) && cJSON_GetArraySize(c) >= 1, "curve %s",
              kinds[k]);
    }
    const cJSON *f = cJSON_GetObjectItem(d, "op_factors");
    CHECK(cJSON_IsObject(f) && num(f, "matmul") > 0 && num(f, "conv2d") > 0 &&
              num(f, "layernorm") > 0,
          "factors of the traced programs' op types");
    const cJSON *h = cJSON_GetObjectItem(d, "op_host_s");
    CHECK(cJSON_IsObject(h) && num(h, "matmul") > 0 && num(h, "conv2d") > 0 &&
              num(h, "layernorm") > 0 && num(h, "matmul") < 1,
          "host seconds of the traced programs' op types");
    CHECK(!strcmp(str(d, "precision"), "fp32"),
          "the precision of the traced programs: '%s'", str(d, "precision"));
    const cJSON *rec = cJSON_GetObjectItem(d, "calibration");
    CHECK(!strcmp(str(rec, "backend"), "cpu") &&
              cJSON_GetArraySize(cJSON_GetObjectItem(rec, "steps")) == 2 &&
              cJSON_GetArraySize(cJSON_GetObjectItem(rec, "checks")) == 2,
          "the record: backend, two traced programs and their checks");
    cJSON_Delete(d);
    char err[512];
    delta_gpu_preset *g = delta_gpu_file_load(out, err, sizeof err);
    CHECK(g != NULL, "load: %s", err);
    delta_gpu_file_free(g);

    /* the sim on it */
    RUN("train", TINY, "--gpu-file", out, "--steps", "3", "--quiet");
    CHECK(res.status == 0 && strstr(res.out, out),
          "train --gpu-file: status %d: %.400s %.300s", res.status, res.err,
          res.out);
    RUN("train", TINY, "--gpu-file", out, "--steps", "1");
    CHECK(res.status == 0 && strstr(res.err, "backend: sim") &&
              !strstr(res.err, "note: the device's per-op factors"),
          "no note on a run in the file's precision: %.600s", res.err);
    RUN("train", TINY, "--gpu-file", out, "--steps", "1", "--precision",
        "bf16");
    CHECK(res.status == 0 &&
              strstr(res.err, "were measured on fp32 programs and this run "
                              "is bf16"),
          "a bf16 run on an fp32 calibration is told: %.600s", res.err);
    RUN("train", TINY, "--gpu-file", out, "--steps", "14", "--budget", "50%",
        "--quiet");
    CHECK(res.status == 0, "train --gpu-file --budget 50%%: status %d: %.400s",
          res.status, res.err);
    RUN("plan", TINY, "--gpu-file", out);
    CHECK(res.status == 0 && strstr(res.out, "peak"),
          "plan --gpu-file: status %d: %.400s", res.status, res.err);
    RUN("maxbatch", TINY, "--gpu-file", out, "--budget", "4MiB",
        "--policies", "keep", "--steps", "3", "--quiet");
    CHECK(res.status == 0 && strstr(res.out, "keep"),
          "maxbatch --gpu-file: status %d: %.400s", res.status, res.err);
    char dir[128];
    path_in_tmp(dir, sizeof dir, "bench");
    RUN("bench", TINY, "--backend", "sim", "--gpu-file", out, "--policies",
        "delta", "--budgets", "50%", "--steps", "3", "--timeline-budget",
        "none", "--out", dir, "--quiet");
    CHECK(res.status == 0, "bench --gpu-file: status %d: %.400s", res.status,
          res.err);
}

/* ---- the simulator calibrated: its own figures back --------------------------- */

static bool close_to(double a, double b, double rel) {
    return fabs(a - b) <= rel * fabs(b);
}

static void test_sim_gives_back_its_preset(void) {
    char out[128];
    path_in_tmp(out, sizeof out, "sim.json");
    CALIBRATE("--backend", "sim", "--gpu", "h100-80g", "--quick", "--out",
              out, "--quiet");
    CHECK(res.status == 0, "calibrate the sim: status %d: %.600s", res.status,
          res.err);
    cJSON *d = read_json_file(out);
    if (!d) {
        CHECK(false, "%s is not JSON", out);
        return;
    }
    const delta_gpu_preset *p = delta_gpu_preset_find("h100-80g");
    struct { const char *key; double want, rel; } want[] = {
        {"memory_bytes", p->memory_bytes, 0},
        /* the best rates, less an empty kernel's time measured on a
         * kernel that still does a little work: within 0.1% */
        {"fp32_flops", p->fp32_flops * DELTA_SIM_EFF_GEMM, 1e-3},
        {"hbm_bytes_per_s", p->hbm_bytes_per_s * DELTA_SIM_EFF_MEM, 1e-3},
        {"link_to_host_bytes_per_s", p->link_bytes_per_s, 1e-6},
        {"link_to_device_bytes_per_s", p->link_bytes_per_s, 1e-6},
        {"link_latency_s", p->link_latency_s, 1e-6},
        {"launch_host_s", p->launch_host_s, 1e-6},
        {"library_host_s", p->library_host_s, 1e-6},
        {"launch_latency_s", p->launch_latency_s, 1e-6},
        {"sync_wake_s", p->sync_wake_s, 1e-6},
        {"kernel_s", DELTA_SIM_LAUNCH_S, 1e-3},
        {"kernel_gap_s", 0, 0},
        /* the presets' links are full duplex (the pair of copies is
         * issued a launch apart) */
        {"link_duplex", 2, 1e-3},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECK(close_to(num(d, want[i].key), want[i].want, want[i].rel),
              "%s: %.9g, the preset's %.9g", want[i].key,
              num(d, want[i].key), want[i].want);
    const cJSON *f = cJSON_GetObjectItem(d, "op_factors");
    int n = 0;
    for (const cJSON *it = f ? f->child : NULL; it; it = it->next, n++)
        CHECK(close_to(it->valuedouble, 1.0, 0.01), "factor of %s: %g",
              it->string, it->valuedouble);
    CHECK(n > 20, "factors of %d op types", n);
    const cJSON *checks =
        cJSON_GetObjectItem(cJSON_GetObjectItem(d, "calibration"), "checks");
    CHECK(cJSON_GetArraySize(checks) == 2, "two checks");
    for (const cJSON *k = checks ? checks->child : NULL; k; k = k->next)
        CHECK(close_to(num(k, "predicted_step_s"), num(k, "measured_step_s"),
                       1e-3),
              "%s: the sim with its own calibration predicts %g s for %g s",
              str(k, "program"), num(k, "predicted_step_s"),
              num(k, "measured_step_s"));
    cJSON_Delete(d);
}

/* ---- a hand-made file: costs checked exactly ---------------------------------- */

/* The figures of the hand-made device, as "key": value lines. */
static const char *const hand[] = {
    "\"memory_bytes\": 1073741824", "\"fp32_flops\": 1e12",
    "\"tensor_flops\": 4e12", "\"bf16_flops\": 8e12",
    "\"hbm_bytes_per_s\": 1e11", "\"link_to_host_bytes_per_s\": 1e9",
    "\"link_to_device_bytes_per_s\": 2e9", "\"link_latency_s\": 1e-5",
    "\"launch_host_s\": 2e-6", "\"library_host_s\": 1e-6",
    "\"launch_latency_s\": 3e-6", "\"sync_wake_s\": 4e-6", NULL};

/* Writes the hand-made device to path: its figures but the one whose key
 * is drop (NULL: none), then extra (a JSON member list or ""). */
static void write_device(const char *path, const char *drop,
                         const char *extra) {
    char text[4096] = "{\"format\": \"delta-device\", \"version\": 1";
    for (int i = 0; hand[i]; i++) {
        if (drop && !strncmp(hand[i] + 1, drop, strlen(drop)) &&
            hand[i][1 + strlen(drop)] == '"')
            continue;
        strcat(text, ",\n ");
        strcat(text, hand[i]);
    }
    if (extra[0]) {
        strcat(text, ",\n ");
        strcat(text, extra);
    }
    strcat(text, "}\n");
    CHECK(write_text(path, text), "cannot write %s", path);
}

static bool near(double a, double b) {
    return fabs(a - b) <= 1e-12 * fmax(1e-9, fabs(b));
}

/* The efficiency of the curve {(x0, e0), (x1, e1)} at x, linear in log x
 * and held past its ends: what the file's curves mean. */
static double two_point(double x0, double e0, double x1, double e1, double x) {
    if (x <= x0) return e0;
    if (x >= x1) return e1;
    return e0 + (log(x) - log(x0)) / (log(x1) - log(x0)) * (e1 - e0);
}

static void test_hand_made_costs(void) {
    char path[128], err[512];
    path_in_tmp(path, sizeof path, "hand.json");
    write_device(path, NULL,
                 "\"kernel_s\": 1e-6, \"kernel_gap_s\": 5e-7,\n"
                 " \"efficiency\": {\"gemm\": [[1e6, 0.2], [1e9, 0.8]],\n"
                 "   \"elementwise\": [[1e3, 0.1], [1e7, 0.9]]},\n"
                 " \"op_factors\": {\"relu\": 2}");
    delta_gpu_preset *g = delta_gpu_file_load(path, err, sizeof err);
    CHECK(g != NULL, "load: %s", err);
    if (!g) return;
    CHECK(g->link_bytes_per_s == 1e9, "the nominal link is the slower one");

    delta_ctx *ctx = delta_ctx_new();
    int64_t s512[2] = {512, 512}, s4k[2] = {4096, 4096}, n1m = 1 << 20;
    delta_tensor *a = delta_input(ctx, "a", DELTA_F32, 2, s512);
    delta_matmul(ctx, a, a, false, false, 1.0f);              /* op 0 */
    delta_tensor *b = delta_input(ctx, "b", DELTA_F32, 2, s4k);
    delta_matmul(ctx, b, b, false, false, 1.0f);              /* op 1 */
    delta_tensor *x = delta_input(ctx, "x", DELTA_F32, 1, &n1m);
    delta_relu(ctx, x);                                       /* op 2 */
    delta_add(ctx, x, x);                                     /* op 3 */
    delta_tensor *h = delta_input(ctx, "h", DELTA_BF16, 2, s512);
    delta_matmul(ctx, h, h, false, false, 1.0f);              /* op 4 */
    CHECK(delta_ctx_status(ctx) == DELTA_OK, "%s", delta_ctx_error(ctx));
    delta_op_info op[5];
    for (int i = 0; i < 5; i++) delta_ctx_op_info(ctx, i, &op[i]);

    /* GEMMs: 1 us + flops / (1 TFLOP/s x the gemm curve at their flops);
     * 512^3 is inside the curve, 4096^3 past its end (0.8) */
    double e0 = two_point(1e6, 0.2, 1e9, 0.8, op[0].flops);
    double t0 = delta_gpu_op_seconds(g, ctx, 0);
    CHECK(near(t0, 1e-6 + op[0].flops / (1e12 * e0)), "512^3: %.9g vs %.9g",
          t0, 1e-6 + op[0].flops / (1e12 * e0));
    double t1 = delta_gpu_op_seconds(g, ctx, 1);
    CHECK(near(t1, 1e-6 + op[1].flops / (1e12 * 0.8)), "4096^3: %.9g", t1);
    /* relu: memory-bound on the elementwise curve, doubled by its factor */
    double em = two_point(1e3, 0.1, 1e7, 0.9, op[2].bytes);
    double tr = delta_gpu_op_seconds(g, ctx, 2);
    CHECK(near(tr, 2.0 * (1e-6 + op[2].bytes / (1e11 * em))),
          "relu: %.9g vs %.9g", tr, 2.0 * (1e-6 + op[2].bytes / (1e11 * em)));
    double ea = two_point(1e3, 0.1, 1e7, 0.9, op[3].bytes);
    CHECK(near(delta_gpu_op_seconds(g, ctx, 3),
               1e-6 + op[3].bytes / (1e11 * ea)), "add: no factor");
    /* BF16 operands: the same curve at the BF16 peak */
    CHECK(near(delta_gpu_op_seconds(g, ctx, 4),
               1e-6 + op[4].flops / (8e12 * e0)), "bf16 matmul");

    /* the backend: links per direction, kernels kernel_gap_s apart */
    char berr[256];
    delta_backend *sb = delta_backend_sim_new(
        &(delta_sim_backend_opts){.device = g}, berr, sizeof berr);
    CHECK(sb != NULL, "%s", berr);
    if (sb) {
        const size_t n = 1 << 20;
        delta_backend_copy(sb, DELTA_STREAM_TO_HOST, NULL, NULL, n);
        delta_backend_copy(sb, DELTA_STREAM_TO_DEVICE, NULL, NULL, n);
        delta_event eh = delta_backend_record(sb, DELTA_STREAM_TO_HOST);
        delta_event ed = delta_backend_record(sb, DELTA_STREAM_TO_DEVICE);
        delta_backend_sync(sb, eh);
        delta_backend_sync(sb, ed);
        double a0, a1, d0, d1;
        CHECK(delta_backend_span(sb, eh, &a0, &a1) &&
                  delta_backend_span(sb, ed, &d0, &d1),
              "copies' spans");
        CHECK(near(a1 - a0, 1e-5 + n / 1e9) && near(d1 - d0, 1e-5 + n / 2e9),
              "to host %.9g, to device %.9g", a1 - a0, d1 - d0);
        delta_kargs k = {.op = &ctx->ops[1]};
        delta_backend_run(sb, &k);
        delta_event k1 = delta_backend_record(sb, DELTA_STREAM_COMPUTE);
        delta_backend_run(sb, &k);
        delta_event k2 = delta_backend_record(sb, DELTA_STREAM_COMPUTE);
        delta_backend_sync(sb, k2);
        double s1, f1, s2, f2;
        CHECK(delta_backend_span(sb, k1, &s1, &f1) &&
                  delta_backend_span(sb, k2, &s2, &f2),
              "kernels' spans");
        CHECK(fabs(s2 - f1 - 5e-7) <= 1e-12 * f2 &&
                  fabs(f2 - s2 - t1) <= 1e-12 * f2,
              "the second GEMM starts %.9g s after the first ends", s2 - f1);
        delta_backend_free(sb);
    }
    delta_gpu_file_free(g);

    /* the figures alone: the cost model's constants, as for a preset */
    write_device(path, NULL, "");
    g = delta_gpu_file_load(path, err, sizeof err);
    CHECK(g != NULL, "load: %s", err);
    if (g) {
        CHECK(near(delta_gpu_op_seconds(g, ctx, 1),
                   DELTA_SIM_LAUNCH_S +
                       op[1].flops / (1e12 * DELTA_SIM_EFF_GEMM)),
              "constants without curves");
        CHECK(near(delta_gpu_op_seconds(g, ctx, 2),
                   DELTA_SIM_LAUNCH_S +
                       op[2].bytes / (1e11 * DELTA_SIM_EFF_MEM)),
              "relu without a factor");
        delta_gpu_file_free(g);
    }
    delta_ctx_free(ctx);
}

/* A file's host seconds per op type are what the simulator's host spends
 * on each such op: 2 ms a matmul and a linear make the tiny GPT-2's keep
 * step bound by the host (its ~40 products alone 80 ms, where the same
 * file without them steps in well under 10 ms), and the file written by
 * delta_calibration's own writer carries them. */
static void test_host_costs_charged(void) {
    char plain[128], slow[128], out[128], err[512];
    path_in_tmp(plain, sizeof plain, "host-plain.json");
    path_in_tmp(slow, sizeof slow, "host-slow.json");
    write_device(plain, NULL, "");
    write_device(slow, NULL,
                 "\"op_host_s\": {\"matmul\": 2e-3, \"linear\": 2e-3}");
    delta_gpu_preset *g = delta_gpu_file_load(slow, err, sizeof err);
    CHECK(g != NULL && g->eff &&
              g->eff->op_host_s[DELTA_OP_MATMUL] == 2e-3 &&
              g->eff->op_host_s[DELTA_OP_RELU] == 0,
          "loaded: %s", err);
    delta_gpu_file_free(g);
    double step[2] = {-1, -1};
    for (int i = 0; i < 2; i++) {
        path_in_tmp(out, sizeof out, i ? "host-slow.jsonl" : "host-plain.jsonl");
        RUN("train", TINY, "--gpu-file", i ? slow : plain, "--steps", "4",
            "--quiet", "--json", out);
        CHECK(res.status == 0, "train: status %d: %.400s", res.status,
              res.err);
        cJSON *l[8] = {0};
        int n = read_json_lines(out, l, 8);
        const cJSON *sum = n > 0 ? cJSON_GetObjectItem(l[n - 1], "summary")
                                 : NULL;
        if (sum) step[i] = num(sum, "median_step_s");
        for (int j = 0; j < 8; j++) cJSON_Delete(l[j]);
    }
    CHECK(step[0] > 0 && step[0] < 0.01 && step[1] > 0.04 &&
              step[1] > 10 * step[0],
          "keep's step: %.6f s without host costs, %.6f s with 2 ms a "
          "product", step[0], step[1]);
}

/* ---- bad files -------------------------------------------------------------- */

/* A bad device file: every command that takes --gpu-file exits 2 and
 * names what is wrong. */
static void refused(const char *path, const char *needle) {
    char dir[128];
    path_in_tmp(dir, sizeof dir, "bench-bad");
    USAGE_FAILS(&res, "train", needle, TINY, "--gpu-file", path);
    USAGE_FAILS(&res, "plan", needle, TINY, "--gpu-file", path);
    USAGE_FAILS(&res, "maxbatch", needle, TINY, "--gpu-file", path);
    USAGE_FAILS(&res, "bench", needle, TINY, "--backend", "sim",
                "--gpu-file", path, "--out", dir);
}

/* A link whose directions share their rate: calibrating the sim of a file
 * that says so gives the figure back (the pair of copies each way takes
 * what the file's duplex makes it take), and a file without it reads as
 * full duplex. */
static void test_sim_gives_back_its_duplex(void) {
    char dev[128], out[128], err[512];
    path_in_tmp(dev, sizeof dev, "duplex.json");
    path_in_tmp(out, sizeof out, "duplex_out.json");
    const double duplex[] = {1, 1.5};
    for (int k = 0; k < 2; k++) {
        char extra[96]; /* memory for calibrate's keep steps */
        snprintf(extra, sizeof extra,
                 "\"memory_bytes\": 68719476736, \"link_duplex\": %g",
                 duplex[k]);
        write_device(dev, "memory_bytes", extra);
        delta_gpu_preset *g = delta_gpu_file_load(dev, err, sizeof err);
        CHECK(g && g->link_duplex == duplex[k], "read: %s", g ? "" : err);
        delta_gpu_file_free(g);
        CALIBRATE("--backend", "sim", "--gpu-file", dev, "--quick", "--out",
                  out, "--quiet");
        CHECK(res.status == 0, "status %d: %.600s", res.status, res.err);
        cJSON *d = read_json_file(out);
        CHECK(d && close_to(num(d, "link_duplex"), duplex[k], 1e-3),
              "duplex %g given back as %g", duplex[k],
              d ? num(d, "link_duplex") : -1);
        cJSON_Delete(d);
    }
    write_device(dev, NULL, "");
    delta_gpu_preset *g = delta_gpu_file_load(dev, err, sizeof err);
    CHECK(g && g->link_duplex == 0, "no figure: full duplex (0)");
    delta_gpu_file_free(g);
}

static void test_bad_files(void) {
    char path[128];
    path_in_tmp(path, sizeof path, "bad.json");
    refused("/nonexistent/device.json", "cannot open it");
    write_text(path, "{\"fp32_flops\": 1e12,");
    refused(path, "is not JSON");
    write_text(path, "[1, 2]");
    refused(path, "not a JSON object");
    /* the hand-made device with one figure dropped (NULL: none) and a
     * member added */
    static const struct { const char *drop, *extra, *needle; } bad[] = {
        {"hbm_bytes_per_s", "", "field 'hbm_bytes_per_s' is missing"},
        {"launch_host_s", "\"launch_host_s\": -1e-6",
         "field 'launch_host_s' is -1e-06"},
        {"fp32_flops", "\"fp32_flops\": 0",
         "field 'fp32_flops' is 0: expected a number above 0"},
        {"memory_bytes", "\"memory_bytes\": \"lots\"",
         "field 'memory_bytes' is a string"},
        {NULL, "\"kernel_s\": -1", "'kernel_s'"},
        {NULL, "\"link_duplex\": 0.5", "'link_duplex' must be a number from 1"},
        {NULL, "\"link_duplex\": 2.5", "'link_duplex' must be a number from 1"},
        {NULL, "\"link_duplex\": \"half\"", "'link_duplex'"},
        {NULL, "\"efficiency\": {\"gemmm\": [[1, 1]]}", "efficiency.gemmm"},
        {NULL, "\"efficiency\": {\"gemm\": [[2, 1], [1, 1]]}",
         "efficiency.gemm's sizes must increase"},
        {NULL, "\"efficiency\": {\"gemm\": [[1e6, -0.5]]}",
         "efficiency.gemm[0]"},
        {NULL, "\"op_factors\": {\"relux\": 2}", "op_factors.relux"},
        {NULL, "\"op_factors\": {\"relu\": 0}", "op_factors.relu"},
        {NULL, "\"op_host_s\": {\"convv\": 1e-4}", "op_host_s.convv"},
        {NULL, "\"op_host_s\": {\"conv2d\": -1e-4}", "op_host_s.conv2d"},
        {NULL, "\"op_host_s\": [1e-4]", "op_host_s"},
        {NULL, "\"precision\": \"fp16\"", "'precision' must be"},
        {NULL, "\"precision\": 16", "'precision' must be"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_device(path, bad[i].drop, bad[i].extra);
        refused(path, bad[i].needle);
    }
    write_text(path, "{\"format\": \"safetensors\"}");
    refused(path, "format");

    write_device(path, NULL, "");
    USAGE_FAILS(&res, "train", "give one of them", TINY, "--gpu", "a100-80g",
                "--gpu-file", path);
    USAGE_FAILS(&res, "train", "--gpu-file picks a simulated GPU", TINY,
                "--backend", "cpu", "--gpu-file", path);
}

/* ---- --out ------------------------------------------------------------------ */

static void test_out_not_regular(void) {
    char fifo[128], dir[128];
    path_in_tmp(fifo, sizeof fifo, "fifo");
    path_in_tmp(dir, sizeof dir, "a-folder");
    CHECK(mkfifo(fifo, 0600) == 0 && mkdir(dir, 0700) == 0, "setup");
    run_timeout_s = 60; /* a FIFO opened for writing would hang */
    USAGE_FAILS(&res, "calibrate", "a character device", "--quick", "--out",
                "/dev/null");
    CHECK(!strstr(res.err, "calibrating"), "refused before measuring");
    USAGE_FAILS(&res, "calibrate", "a FIFO", "--quick", "--out", fifo);
    USAGE_FAILS(&res, "calibrate", "a folder", "--quick", "--out", dir);
    run_timeout_s = 0;
    USAGE_FAILS(&res, "calibrate", "no output file", "--quick");
    USAGE_FAILS(&res, "calibrate", "do not apply", "--quick", "--out", "x.json",
                "--budget", "50%");
    USAGE_FAILS(&res, "calibrate", "give --model NAME", "--quick", "--out",
                "x.json", "--batch", "4");
    USAGE_FAILS(&res, "calibrate", "unknown model 'nope'", "--quick", "--out",
                "x.json", "--model", "nope");
    CHECK(!strstr(res.err, "calibrating"), "refused before measuring");
}

int main(int argc, char **argv) {
    if (!cli_setup(argc, argv, "test_calibrate")) return 1;
    TEST_RUN(test_help);
    TEST_RUN(test_hand_made_costs);
    TEST_RUN(test_bad_files);
    TEST_RUN(test_host_costs_charged);
    TEST_RUN(test_out_not_regular);
    TEST_RUN(test_sim_gives_back_its_preset);
    TEST_RUN(test_sim_gives_back_its_duplex);
    TEST_RUN(test_cpu_quick);
    cli_cleanup();
    TEST_MAIN_END();
}
