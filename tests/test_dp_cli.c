/* Data parallel through the built delta: `mpirun -np 2 delta train ...`
 * (as root, oversubscribed), and the simulator's answers for several GPUs.
 *  - the JSON log and summary: the ranks' mean loss, `ranks`, rank 0 alone
 *    printing; two ranks' losses against one rank with twice the batch;
 *  - exactness through the tool: delta and dtr under a budget, the stream
 *    checker and device jitter, ZeRO-1: the same file as keep on 2 ranks;
 *  - checkpoints: 4 steps == 2 + --resume 2 on two ranks, with and without
 *    ZeRO-1 (whose file, the sharded state gathered, is plain's); another
 *    number of ranks refused with a message;
 *  - faults: a rank that fails stops every rank with its message; a rank
 *    that stops answering is noticed within --comm-timeout; ranks given
 *    other settings are refused at start naming the setting;
 *  - the sim: --ranks, --zero 1 and --interconnect (plan, train, maxbatch):
 *    ZeRO-1's smaller state and peak, the collectives priced by the ring
 *    formula, nvlink faster than infiniband.
 * Skipped without MPI (a build without it, or no mpirun). */
#include "cli_run.h"
#include "delta/delta.h"

static const char *const mpirun2[] = {
    "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", NULL};

#define GPT2 "--model", "gpt2-tiny", "--layers", "2", "--hidden", "32", \
             "--heads", "2", "--seq-len", "32", "--vocab", "64",         \
             "--threads", "1", "--quiet", "--bucket", "8KiB"

/* `mpirun -np 2 delta train args...` */
#define TRAIN2(...)                                                        \
    do {                                                                   \
        run_launcher = mpirun2;                                            \
        TRAIN(__VA_ARGS__);                                                \
        run_launcher = NULL;                                               \
    } while (0)

static bool mpi_usable(void) {
    return delta_comm_built() && system("command -v mpirun >/dev/null") == 0;
}

/* ---- the log ---------------------------------------------------------------- */

static void test_dp_json_and_output(void) {
    char j2[128], j1[128];
    path_in_tmp(j2, sizeof j2, "two.jsonl");
    path_in_tmp(j1, sizeof j1, "one.jsonl");
    /* no --quiet: the progress lines are rank 0's alone */
    run_launcher = mpirun2;
    TRAIN("--model", "gpt2-tiny", "--layers", "2", "--hidden", "32",
          "--heads", "2", "--seq-len", "32", "--vocab", "64", "--threads",
          "1", "--steps", "3", "--batch", "2", "--dropout", "0", "--json", j2);
    run_launcher = NULL;
    CHECK(res.status == 0, "status %d: %.400s", res.status, res.err);
    const char *a = strstr(res.err, "step 3/3");
    CHECK(a && !strstr(a + 1, "step 3/3"), "one progress line per step: %.600s",
          res.err);
    CHECK(strstr(res.out, "batch 2 per rank x 2 ranks"), "%.300s", res.out);
    TRAIN("--model", "gpt2-tiny", "--layers", "2", "--hidden", "32",
          "--heads", "2", "--seq-len", "32", "--vocab", "64", "--threads",
          "1", "--steps", "3", "--batch", "4", "--dropout", "0", "--quiet",
          "--json", j1);
    CHECK(res.status == 0, "one rank: %.300s", res.err);
    cJSON *l2[8] = {0}, *l1[8] = {0};
    int n2 = read_json_lines(j2, l2, 8), n1 = read_json_lines(j1, l1, 8);
    CHECK(n2 == 4 && n1 == 4, "3 steps and a summary each: %d, %d", n2, n1);
    for (int i = 0; i < 3 && n2 == 4 && n1 == 4; i++) {
        /* the ranks' mean loss is the loss of the global batch, up to the
         * order of float sums */
        double x = num(l2[i], "loss"), y = num(l1[i], "loss");
        CHECK(fabs(x - y) <= 1e-5 * fabs(y), "step %d: loss %.9g on 2 ranks, "
              "%.9g on one with twice the batch", i + 1, x, y);
    }
    if (n2 == 4) {
        const cJSON *s = cJSON_GetObjectItem(l2[3], "summary");
        CHECK(s && num(s, "ranks") == 2 && num(s, "batch") == 2 &&
                  num(s, "zero") == 0,
              "the summary names the ranks");
    }
    for (int i = 0; i < 8; i++) {
        cJSON_Delete(l2[i]);
        cJSON_Delete(l1[i]);
    }
}

/* ---- exactness -------------------------------------------------------------- */

static void test_dp_tool_exact(void) {
    char keep[128], f[128];
    path_in_tmp(keep, sizeof keep, "keep.st");
    path_in_tmp(f, sizeof f, "x.st");
    TRAIN2(GPT2, "--steps", "3", "--batch", "4", "--save", keep);
    CHECK(res.status == 0, "keep: %.400s", res.err);
    static const char *const runs[][8] = {
        {"--policy", "delta", "--budget", "50%", "--check-streams", NULL},
        {"--policy", "dtr", "--budget", "80%", "--device-jitter", "5", NULL},
        {"--zero", "1", NULL},
        {"--zero", "1", "--policy", "capuchin", "--budget", "50%",
         "--check-streams", NULL},
    };
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
        const char *args[40] = {GPT2, "--steps", "3", "--batch", "4", "--save",
                                f};
        int n = 0;
        while (args[n]) n++;
        for (int k = 0; runs[r][k]; k++) args[n++] = runs[r][k];
        args[n] = NULL;
        run_launcher = mpirun2;
        run_tool(&res, true, args);
        run_launcher = NULL;
        CHECK(res.status == 0, "%s %s: %.400s", runs[r][0], runs[r][1],
              res.err);
        same_tensors(keep, f, NULL);
    }
}

/* ---- checkpoints ------------------------------------------------------------ */

static void test_dp_resume(void) {
    char full[128], half[128], fz[128];
    path_in_tmp(full, sizeof full, "full.st");
    path_in_tmp(half, sizeof half, "half.st");
    path_in_tmp(fz, sizeof fz, "fullz.st");
    TRAIN2(GPT2, "--steps", "4", "--batch", "2", "--checkpoint-every", "2",
           "--save", full);
    CHECK(res.status == 0, "%.400s", res.err);
    for (int zero = 0; zero <= 1; zero++) {
        const char *z = zero ? "1" : "0";
        TRAIN2(GPT2, "--steps", "2", "--batch", "2", "--checkpoint-every", "2",
               "--save", half, "--zero", z, "--policy", "delta", "--budget",
               "60%");
        CHECK(res.status == 0, "zero %s, steps 1-2: %.400s", z, res.err);
        TRAIN2(GPT2, "--steps", "4", "--batch", "2", "--checkpoint-every", "2",
               "--save", half, "--resume", half, "--zero", z);
        CHECK(res.status == 0, "zero %s, resumed: %.400s", z, res.err);
        /* the one file holds every rank's state, so it equals plain's */
        same_tensors(full, half, NULL);
    }
    TRAIN2(GPT2, "--steps", "4", "--batch", "2", "--checkpoint-every", "2",
           "--save", fz, "--zero", "1");
    CHECK(res.status == 0, "%.400s", res.err);
    same_tensors(full, fz, NULL);
    /* another number of ranks */
    FAILS(2, "was trained by 2 ranks and this run has 1", GPT2, "--steps",
          "6", "--batch", "2", "--resume", full, "--save", half);
}

/* ---- faults ----------------------------------------------------------------- */

static void test_dp_rank_fails(void) {
    setenv("DELTA_TEST_RANK_FAIL", "1:2", 1);
    run_timeout_s = 60;
    TRAIN2(GPT2, "--steps", "4", "--batch", "2");
    unsetenv("DELTA_TEST_RANK_FAIL");
    CHECK(res.status != 0 && res.status < 128, "status %d", res.status);
    CHECK(strstr(res.err, "rank 1 of 2: step 2: DELTA_TEST_RANK_FAIL"),
          "the failing rank's message: %.600s", res.err);
    CHECK(res.seconds < 30, "every rank stopped in %.1f s", res.seconds);

    /* a rank that stops answering: the others give up after the timeout */
    setenv("DELTA_TEST_RANK_HANG", "1:2", 1);
    TRAIN2(GPT2, "--steps", "4", "--batch", "2", "--comm-timeout", "3");
    unsetenv("DELTA_TEST_RANK_HANG");
    run_timeout_s = 0;
    CHECK(res.status != 0 && res.status < 128, "status %d", res.status);
    CHECK(strstr(res.err, "waited 3 s for the other ranks"), "%.600s",
          res.err);
    CHECK(res.seconds < 30, "stopped in %.1f s", res.seconds);
}

/* Ranks given other settings (mpirun's MPMD form: one command line per
 * rank) are refused at start, naming the setting. */
static void test_dp_settings_differ(void) {
    static const char *const pairs[][3] = {
        {"--batch", "2", "4"},
        {"--policy", "delta", "dtr"},
        {"--seed", "1", "2"},
        {"--zero", "0", "1"},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        const char *launcher[40] = {
            "mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "1",
            tool, "train", GPT2, "--steps", "1", pairs[i][0], pairs[i][1],
            "--budget", "80%", ":", "-np", "1", NULL};
        run_launcher = launcher;
        TRAIN(GPT2, "--steps", "1", pairs[i][0], pairs[i][2], "--budget",
              "80%");
        run_launcher = NULL;
        char want[128];
        snprintf(want, sizeof want, "%s is %s", pairs[i][0], pairs[i][1]);
        CHECK(res.status == 2, "%s: status %d: %.400s", pairs[i][0],
              res.status, res.err);
        CHECK(strstr(res.err, want) && strstr(res.err, "on rank 1"),
              "names %s: %.400s", pairs[i][0], res.err);
    }
}

/* ---- the simulator ---------------------------------------------------------- */

static void test_dp_sim(void) {
    /* the ring: 2 (P - 1) / P x bytes / bandwidth + 2 (P - 1) latencies */
    const delta_interconnect *nv = delta_interconnect_find("nvlink");
    double t = delta_collective_seconds(nv, 8, true, 1e9);
    CHECK(fabs(t - (14.0 / 8 * 1e9 / nv->bytes_per_s + 14 * nv->latency_s)) <
              1e-12, "allreduce %.9g s", t);
    CHECK(delta_collective_seconds(nv, 8, false, 1e9) < t / 1.9,
          "allgather is half");
    CHECK(delta_collective_seconds(nv, 1, true, 1e9) == 0, "one rank");

    /* plan: ZeRO-1's per-rank state is an eighth on 8 ranks (whole
     * tensors: GPT-2 XL's largest, the token embedding, is 5% of it) */
    char j0[128], j1[128];
    path_in_tmp(j0, sizeof j0, "plan0.json");
    path_in_tmp(j1, sizeof j1, "plan1.json");
    const char *p0[] = {"--model", "gpt2-xl", "--batch", "4", "--ranks",
                        "8", "--json", j0, NULL};
    const char *p1[] = {"--model", "gpt2-xl", "--batch", "4", "--ranks",
                        "8", "--zero", "1", "--json", j1, NULL};
    run_cmd(&res, "plan", p0);
    CHECK(res.status == 0, "%.300s", res.err);
    run_cmd(&res, "plan", p1);
    CHECK(res.status == 0, "%.300s", res.err);
    cJSON *a = read_json_file(j0), *b = read_json_file(j1);
    const cJSON *pa = a ? cJSON_GetObjectItem(a, "plan") : NULL;
    const cJSON *pb = b ? cJSON_GetObjectItem(b, "plan") : NULL;
    CHECK(pa && pb, "plans");
    if (pa && pb) {
        double s0 = num(pa, "state_bytes"), s1 = num(pb, "state_bytes");
        CHECK(s1 / s0 > 0.11 && s1 / s0 < 0.14, "state %g -> %g", s0, s1);
        CHECK(num(pa, "baseline_peak_bytes") - num(pb, "baseline_peak_bytes") >=
                  s0 - s1,
              "the peak falls by the state");
    }
    cJSON_Delete(a);
    cJSON_Delete(b);

    /* train: a step's time grows with a slower link; the summary says so */
    char jn[128], ji[128];
    path_in_tmp(jn, sizeof jn, "nv.jsonl");
    path_in_tmp(ji, sizeof ji, "ib.jsonl");
    double step[2] = {0, 0};
    const char *ics[2] = {"nvlink", "infiniband"};
    const char *js[2] = {jn, ji};
    for (int k = 0; k < 2; k++) {
        TRAIN("--model", "gpt2-small", "--batch", "4", "--gpu", "h100-80g",
              "--ranks", "8", "--zero", "1", "--interconnect", ics[k],
              "--steps", "3", "--quiet", "--json", js[k]);
        CHECK(res.status == 0, "%s: %.300s", ics[k], res.err);
        cJSON *l[8] = {0};
        int n = read_json_lines(js[k], l, 8);
        const cJSON *s = n > 0 ? cJSON_GetObjectItem(l[n - 1], "summary")
                               : NULL;
        CHECK(s && num(s, "ranks") == 8 && num(s, "zero") == 1 &&
                  !strcmp(str(s, "interconnect"), ics[k]),
              "%s summary", ics[k]);
        if (s) step[k] = num(s, "median_step_s");
        for (int i = 0; i < 8; i++) cJSON_Delete(l[i]);
    }
    CHECK(step[0] > 0 && step[1] > step[0], "nvlink %.4g s, infiniband %.4g s",
          step[0], step[1]);

    /* maxbatch answers per rank */
    const char *mb[] = {"--model", "gpt2-medium", "--gpu", "h100-80g",
                        "--ranks", "8", "--zero", "1", "--policies", "keep",
                        "--steps", "3", NULL};
    run_cmd(&res, "maxbatch", mb);
    CHECK(res.status == 0 && strstr(res.out, "keep"), "maxbatch: %.300s %.300s",
          res.out, res.err);

    /* --ranks is the sim's and plan's; a cpu run has mpirun's */
    FAILS(2, "--ranks is for --backend sim and delta plan", GPT2, "--ranks",
          "2", "--steps", "1");
    FAILS(2, "--interconnect prices the collectives on a simulated GPU", GPT2,
          "--interconnect", "pcie", "--steps", "1");
}

int main(int argc, char **argv) {
    if (!cli_setup(argc, argv, "test_dp_cli")) return 1;
    if (!mpi_usable()) {
        printf("skip test_dp_cli: built without MPI or no mpirun\n"
               "# results: 0 passed, 0 failed, 1 skipped\n");
        cli_cleanup();
        return 0;
    }
    /* Open MPI's own allocations are not ours to report under ASan */
    setenv("ASAN_OPTIONS", "detect_leaks=0", 0);
    TEST_RUN(test_dp_json_and_output);
    TEST_RUN(test_dp_tool_exact);
    TEST_RUN(test_dp_resume);
    TEST_RUN(test_dp_rank_fails);
    TEST_RUN(test_dp_settings_differ);
    TEST_RUN(test_dp_sim);
    cli_cleanup();
    printf("# results: %d passed, %d failed, %d skipped\n", test_passed_,
           test_failed_, test_skipped_);
    return test_failed_ ? 1 : 0;
}
