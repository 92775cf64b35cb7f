/* The command line (tools/): runs the delta of this test's own build
 * (build/X/tests/test_cli runs build/X/delta; $DELTA_TOOL overrides) as a
 * child process and checks its exit status, messages and files:
 *  - --help, --version and --gpu help succeed;
 *  - every kind of bad usage or input exits 2 with a message on stderr,
 *    an infeasible budget exits 3, and nothing crashes;
 *  - a short real run writes valid JSON lines with the required fields;
 *  - a managed policy (dtr) trains inside a budget under the keep peak, its
 *    figures add up in the summary, and --trace writes a Chrome trace that
 *    parses, with op and recompute spans and a memory counter that stays
 *    within the budget; an infeasible budget touches no checkpoint;
 *  - --save then --load gives identical tensors; checkpoints written by
 *    PyTorch (tests/fixtures/checkpoints, from
 *    scripts/make_checkpoint_fixture.py) load; bad ones are refused;
 *  - the loss falls on Fashion-MNIST (skipped when it is not installed);
 *  - changing shapes: --seq-len-range and an epoch's partial last batch
 *    under a managed policy inside a budget save the same bytes as keep
 *    with no budget, with every shape planned and reported; bad ranges
 *    exit 2;
 *  - the sim backend reports simulated figures for ResNet-50 and GPT-2 XL
 *    in well under a few seconds of real time. */
#include "delta/delta.h"

#include "cli_run.h"

static bool have_fashion_mnist(void) {
    return access(DELTA_FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz",
                  R_OK) == 0 &&
           access(DELTA_FASHION_MNIST_DIR "/t10k-images-idx3-ubyte.gz",
                  R_OK) == 0;
}

/* ---- usage ------------------------------------------------------------------ */

static void test_help_and_version(void) {
    const char *help[] = {"--help", NULL};
    run_tool(&res, true, help);
    CHECK(res.status == 0 && strstr(res.out, "usage: delta train") &&
              strstr(res.out, "--budget") && strstr(res.out, "--trace") &&
              strstr(res.out, "dtr") && strstr(res.out, "autoswap") &&
              strstr(res.out, "--seq-len-range") &&
              strstr(res.out, "--drop-last"),
          "train --help: status %d, stdout '%.200s'", res.status, res.out);
    const char *ver[] = {"--version", NULL};
    run_tool(&res, true, ver);
    CHECK(res.status == 0 && strstr(res.out, "delta " DELTA_VERSION_STRING),
          "train --version: status %d, stdout '%.200s'", res.status, res.out);
    run_tool(&res, false, help);
    CHECK(res.status == 0 && strstr(res.out, "train"),
          "delta --help: status %d", res.status);
    run_tool(&res, false, ver);
    CHECK(res.status == 0 && strstr(res.out, DELTA_VERSION_STRING),
          "delta --version: status %d", res.status);
    const char *gpus[] = {"--gpu", "help", NULL};
    run_tool(&res, true, gpus);
    CHECK(res.status == 0 && strstr(res.out, "v100-16g") &&
              strstr(res.out, "a100-80g") && strstr(res.out, "h100-80g"),
          "--gpu help: status %d, stdout '%.300s'", res.status, res.out);
}

static void test_usage_errors(void) {
    FAILS(2, "unknown option '--frob'", "--model", "gpt2-tiny", "--frob");
    FAILS(2, "needs a value", "--model", "gpt2-tiny", "--steps", "1",
          "--batch");
    FAILS(2, "no model", "--steps", "1");
    FAILS(2, "unexpected argument", "--model", "gpt2-tiny", "stray");
    FAILS(2, "unknown model 'nope'", "--model", "nope", "--steps", "1");
    FAILS(2, "--batch is 0", "--model", "gpt2-tiny", "--batch", "0");
    FAILS(2, "whole number, got 'abc'", "--model", "gpt2-tiny", "--batch",
          "abc");
    FAILS(2, "--steps", "--model", "gpt2-tiny", "--steps", "-3");
    FAILS(2, "--lr", "--model", "gpt2-tiny", "--lr", "fast");
    FAILS(2, "unknown unit 'xB'", "--model", "gpt2-tiny", "--budget",
          "10xB");
    FAILS(2, "percentage", "--model", "gpt2-tiny", "--budget", "-5%");
    /* (d) the message lists the session's policies */
    FAILS(2, "unknown policy 'nope'", "--model", "gpt2-tiny", "--policy",
          "nope");
    CHECK(strstr(res.err, "keep, swap, checkpoint, dtr, capuchin, autoswap"),
          "the policies are not listed: %.300s", res.err);
    /* --backend cuda without a GPU or without CUDA: test_cuda.c */
    FAILS(2, "unknown backend", "--model", "gpt2-tiny", "--backend", "tpu");
    FAILS(2, "unknown GPU 'nope'", "--model", "gpt2-tiny", "--gpu", "nope");
    FAILS(2, "needs --backend sim", "--model", "gpt2-tiny", "--backend",
          "cpu", "--gpu", "a100-80g");
    FAILS(2, "unknown optimizer", "--model", "gpt2-tiny", "--optimizer",
          "lion");
    FAILS(2, "/no/such/file", "--model", "gpt2-tiny", "--steps", "1",
          "--data", "/no/such/file");
    FAILS(2, "/no/such/dir", "--model", "resnet18", "--steps", "1",
          "--data", "/no/such/dir");
    FAILS(2, "language model", "--model", "gpt2-tiny", "--data",
          "fashion-mnist");
    FAILS(2, "layers", "--model", "resnet18", "--layers", "3", "--steps",
          "1");
    FAILS(2, "hidden 100 is not divisible by heads 3", "--model",
          "gpt2-tiny", "--hidden", "100", "--heads", "3", "--steps", "1");
    FAILS(2, "dropout", "--model", "resnet18", "--dropout", "0.5",
          "--data", "synthetic", "--steps", "1");
    FAILS(2, "--save", "--model", "gpt2-tiny", "--backend", "sim",
          "--save", "x.safetensors");
    FAILS(2, "cannot create files there", "--model", "gpt2-tiny", "--steps",
          "1", "--save", "/no/such/dir/x.safetensors");
    char json[128];
    snprintf(json, sizeof json, "%s/no/such/dir/log.json", tmpdir);
    FAILS(2, "--json: cannot create", "--model", "gpt2-tiny", "--steps", "1",
          "--json", json);
    /* (c) bad --seq-len-range values */
    FAILS(2, "above B", "--model", "gpt2-tiny", "--seq-len-range", "48:16");
    FAILS(2, "expected A:B", "--model", "gpt2-tiny", "--seq-len-range",
          "16");
    FAILS(2, "--seq-len-range", "--model", "gpt2-tiny", "--seq-len-range",
          "0:16");
    FAILS(2, "whole number", "--model", "gpt2-tiny", "--seq-len-range",
          "a:b");
    FAILS(2, "positions", "--model", "gpt2-tiny", "--steps", "1",
          "--seq-len-range", "16:2000");
    FAILS(2, "positions", "--model", "bert-tiny", "--steps", "1",
          "--seq-len-range", "16:513");
    FAILS(2, "image model", "--model", "resnet18", "--steps", "1",
          "--seq-len-range", "16:32");
    FAILS(2, "give one of them", "--model", "gpt2-tiny", "--seq-len", "32",
          "--seq-len-range", "16:32");
}

static void test_budget_errors(void) {
    /* 5% of gpt2-tiny's peak is below the largest op's operands. */
    FAILS(3, "minimum", "--model", "gpt2-tiny", "--steps", "1", "--budget",
          "5%");
    FAILS(3, "budget", "--model", "gpt2-tiny", "--steps", "1", "--budget",
          "64KiB");
    /* keep needs the whole peak. */
    FAILS(3, "keep", "--model", "gpt2-tiny", "--steps", "1", "--budget",
          "60%", "--policy", "keep");
    /* with a budget and no policy, delta manages it */
    TRAIN("--model", "gpt2-tiny", "--steps", "2", "--budget", "60%");
    CHECK(res.status == 0 && strstr(res.out, "policy delta"),
          "a budget without --policy runs delta: status %d: %s %s",
          res.status, res.out, res.err);
    FAILS(3, "minimum", "--backend", "sim", "--model", "gpt2-small",
          "--steps", "1", "--budget", "1MiB");
    TRAIN("--model", "gpt2-tiny", "--steps", "1", "--budget", "150%",
          "--link-bw", "0", "--quiet");
    CHECK(res.status == 0, "--budget 150%%: status %d: %s", res.status,
          res.err);
}

/* ---- JSON ------------------------------------------------------------------- */

static const char *step_fields[] = {
    "step", "loss", "step_s", "peak_device_bytes", "swap_out_bytes",
    "swap_in_bytes", "swap_outs", "swap_ins", "drops", "dropped_bytes",
    "recomputed_ops", "recompute_s", "stall_s", "defrag_moves",
    "baseline_peak_bytes", "min_budget_bytes", "budget_bytes", NULL,
};
static const char *summary_fields[] = {
    "model", "batch", "steps", "backend", "gpu", "policy", "budget_bytes",
    "peak_device_bytes", "baseline_peak_bytes", "min_budget_bytes",
    "swap_out_bytes", "swap_in_bytes", "swap_outs", "swap_ins", "drops",
    "dropped_bytes", "recomputed_ops", "recompute_s", "stall_s",
    "defrag_moves",
    "median_step_s", "final_loss", "plan_s", "plan_max_s", "shapes", NULL,
};

/* Checks a JSON log of `steps` step lines and a summary; returns the
 * summary (owned by objs[steps]) or NULL. loss_null: sim. */
static const cJSON *check_log(const char *what, cJSON **objs, int n,
                              int steps, bool loss_null) {
    CHECK(n == steps + 1, "%s: %d JSON lines, expected %d", what, n,
          steps + 1);
    if (n != steps + 1) return NULL;
    for (int i = 0; i < steps; i++) {
        for (int k = 0; step_fields[k]; k++)
            CHECK(cJSON_GetObjectItemCaseSensitive(objs[i], step_fields[k]),
                  "%s: line %d lacks '%s'", what, i + 1, step_fields[k]);
        CHECK(num(objs[i], "step") == i + 1, "%s: line %d has step %g",
              what, i + 1, num(objs[i], "step"));
        const cJSON *loss = cJSON_GetObjectItemCaseSensitive(objs[i], "loss");
        if (loss_null)
            CHECK(cJSON_IsNull(loss), "%s: sim loss should be null", what);
        else
            CHECK(cJSON_IsNumber(loss) && isfinite(loss->valuedouble) &&
                      loss->valuedouble > 0,
                  "%s: line %d: loss not a finite positive number", what,
                  i + 1);
        CHECK(num(objs[i], "step_s") > 0 &&
                  num(objs[i], "peak_device_bytes") > 0,
              "%s: line %d: step_s %g, peak_device_bytes %g", what, i + 1,
              num(objs[i], "step_s"), num(objs[i], "peak_device_bytes"));
    }
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(objs[steps],
                                                      "summary");
    CHECK(cJSON_IsObject(s), "%s: the last line has no summary object",
          what);
    if (!cJSON_IsObject(s)) return NULL;
    for (int k = 0; summary_fields[k]; k++)
        CHECK(cJSON_GetObjectItemCaseSensitive(s, summary_fields[k]),
              "%s: summary lacks '%s'", what, summary_fields[k]);
    CHECK(num(s, "steps") == steps, "%s: summary steps %g", what,
          num(s, "steps"));
    CHECK(num(s, "median_step_s") > 0 && num(s, "peak_device_bytes") > 0 &&
              num(s, "baseline_peak_bytes") > 0 &&
              num(s, "min_budget_bytes") > 0,
          "%s: summary figures not positive", what);
    return s;
}

static void test_json_log(void) {
    char json[128];
    path_in_tmp(json, sizeof json, "gpt2.jsonl");
    TRAIN("--model", "gpt2-tiny", "--steps", "3", "--json", json,
          "--quiet");
    CHECK(res.status == 0, "gpt2-tiny run: status %d: %s", res.status,
          res.err);
    CHECK(strstr(res.out, "gpt2-tiny") && !strchr(res.out, '\r'),
          "--quiet prints one summary line: '%s'", res.out);
    cJSON *objs[16];
    int n = read_json_lines(json, objs, 16);
    CHECK(n >= 0, "%s does not parse as JSON lines", json);
    if (n < 0) return;
    const cJSON *s = check_log("gpt2-tiny", objs, n, 3, false);
    if (s) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(s, "model");
        CHECK(cJSON_IsString(m) && !strcmp(m->valuestring, "gpt2-tiny"),
              "summary model");
        CHECK(num(s, "final_loss") == num(objs[2], "loss"),
              "final_loss %g is not the last step's %g",
              num(s, "final_loss"), num(objs[2], "loss"));
        CHECK(num(s, "tokens_per_s") > 0, "tokens_per_s missing");
        CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(s,
                                                            "budget_bytes")),
              "an unlimited budget is null");
    }
    for (int i = 0; i < n; i++) cJSON_Delete(objs[i]);
}

/* ---- policies and traces ----------------------------------------------------- */

/* What a Chrome trace holds, counted. */
typedef struct trace_counts {
    int op_spans;        /* ph X on the compute track (tid 0), cat "op" */
    int recompute_spans; /* ph X on tid 0, cat "recompute" */
    int memory_points;   /* "device memory" counter events */
    int over_budget;     /* of which in_use > budget */
    int bad_times;       /* spans with a negative ts or dur */
    double budget;       /* the counter's budget (the last one seen) */
} trace_counts;

/* Parses path and counts its events; false when it is no JSON document
 * with a traceEvents array. */
static bool read_trace(const char *path, trace_counts *tc) {
    memset(tc, 0, sizeof *tc);
    cJSON *doc = read_json_file(path);
    const cJSON *evs = cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
    if (!cJSON_IsArray(evs)) {
        cJSON_Delete(doc);
        return false;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, evs) {
        const char *ph = str(e, "ph"), *cat = str(e, "cat");
        if (!strcmp(ph, "X") && num(e, "tid") == 0) {
            tc->op_spans += !strcmp(cat, "op");
            tc->recompute_spans += !strcmp(cat, "recompute");
        }
        if (!strcmp(ph, "X"))
            tc->bad_times += !(num(e, "ts") >= 0 && num(e, "dur") >= 0);
        if (!strcmp(ph, "C") && !strcmp(str(e, "name"), "device memory")) {
            const cJSON *a = cJSON_GetObjectItemCaseSensitive(e, "args");
            tc->memory_points++;
            tc->budget = num(a, "budget");
            tc->over_budget += !(num(a, "in_use") <= num(a, "budget"));
        }
    }
    cJSON_Delete(doc);
    return true;
}

/* (a) dtr inside 70% of the keep peak: every step and the run stay within
 * the budget, something had to be evicted, and the summary's figures are
 * the steps' (peak as a max, the rest summed). */
static void test_dtr_in_budget(void) {
    char json[128];
    path_in_tmp(json, sizeof json, "dtr.jsonl");
    TRAIN("--model", "gpt2-tiny", "--steps", "2", "--policy", "dtr",
          "--budget", "70%", "--json", json);
    CHECK(res.status == 0, "dtr 70%%: status %d: %s", res.status, res.err);
    CHECK(strstr(res.out, "policy dtr") && strstr(res.out, "dtr over 2 "
                                                           "steps"),
          "the report should name the policy and its totals: %s", res.out);
    CHECK(strstr(res.err, "recomp"), "the progress line shows no "
          "recomputation: %.400s", res.err);
    cJSON *objs[4];
    int n = read_json_lines(json, objs, 4);
    CHECK(n >= 0, "%s does not parse as JSON lines", json);
    const cJSON *s = n == 3 ? check_log("dtr", objs, n, 2, false) : NULL;
    if (s) {
        double budget = num(s, "budget_bytes"), peak = 0, drops = 0,
               dropped = 0, swaps = 0, recomputed = 0, recompute_s = 0;
        CHECK(!strcmp(str(s, "policy"), "dtr"), "summary policy '%s'",
              str(s, "policy"));
        CHECK(num(s, "peak_device_bytes") <= budget,
              "summary peak %.0f over the budget %.0f",
              num(s, "peak_device_bytes"), budget);
        CHECK(num(s, "min_budget_bytes") <= budget &&
                  budget < num(s, "baseline_peak_bytes"),
              "min %.0f, budget %.0f, baseline %.0f",
              num(s, "min_budget_bytes"), budget,
              num(s, "baseline_peak_bytes"));
        for (int i = 0; i < 2; i++) {
            CHECK(num(objs[i], "budget_bytes") == budget &&
                      num(objs[i], "peak_device_bytes") <= budget,
                  "step %d: peak %.0f, budget %.0f", i + 1,
                  num(objs[i], "peak_device_bytes"),
                  num(objs[i], "budget_bytes"));
            CHECK(num(objs[i], "baseline_peak_bytes") ==
                          num(s, "baseline_peak_bytes") &&
                      num(objs[i], "min_budget_bytes") ==
                          num(s, "min_budget_bytes"),
                  "step %d: the dry plan's figures differ", i + 1);
            peak = fmax(peak, num(objs[i], "peak_device_bytes"));
            drops += num(objs[i], "drops");
            dropped += num(objs[i], "dropped_bytes");
            swaps += num(objs[i], "swap_outs");
            recomputed += num(objs[i], "recomputed_ops");
            recompute_s += num(objs[i], "recompute_s");
        }
        CHECK(num(s, "peak_device_bytes") == peak && num(s, "drops") == drops
                  && num(s, "dropped_bytes") == dropped &&
                  num(s, "swap_outs") == swaps &&
                  num(s, "recomputed_ops") == recomputed &&
                  fabs(num(s, "recompute_s") - recompute_s) <= 1e-9,
              "the summary is not the steps' totals");
        /* below the keep peak (the max-live bound is within 0.5% of it),
         * something must leave the device */
        CHECK(drops + swaps > 0, "dtr evicted nothing at 70%%");
        CHECK((drops > 0) == (dropped > 0), "%.0f drops of %.0f bytes", drops,
              dropped);
    }
    for (int i = 0; i < n; i++) cJSON_Delete(objs[i]);
}

/* (b) Below the dry plan's minimum the session refuses before any step, for
 * a managed policy as for keep: exit 3, a message naming the minimum, and a
 * checkpoint already at the --save path keeps its bytes. The trace, opened
 * before the session, is still a whole document. */
static void test_budget_below_minimum(void) {
    char ckpt[128], trace[128];
    path_in_tmp(ckpt, sizeof ckpt, "precious.safetensors");
    path_in_tmp(trace, sizeof trace, "refused.json");
    CHECK(write_text(ckpt, "not to be touched"), "writing %s", ckpt);
    FAILS(3, "minimum", "--model", "gpt2-tiny", "--steps", "1", "--policy",
          "dtr", "--budget", "5%", "--save", ckpt, "--trace", trace);
    CHECK(strstr(res.err, "delta train: budget"), "not prefixed like other "
          "errors: %.300s", res.err);
    CHECK(!strstr(res.out, "steps of batch"), "trained anyway: %s", res.out);
    CHECK(file_holds(ckpt, "not to be touched"), "%s was touched", ckpt);
    trace_counts tc;
    CHECK(read_trace(trace, &tc) && tc.op_spans == 0,
          "%s: not a trace, or ops in it", trace);
}

/* A managed policy that cannot fit an op mid-run exits 3 with the
 * session's message after "delta train: step N:", saves nothing, and its
 * trace is complete. dtr at 20% of gpt2-tiny's peak fails that way today
 * (it only drops activations); when it learns to swap the run succeeds,
 * which is fine too, and then only the trace is checked. */
static void test_budget_mid_run(void) {
    char ckpt[128], trace[128];
    path_in_tmp(ckpt, sizeof ckpt, "kept.safetensors");
    path_in_tmp(trace, sizeof trace, "midrun.json");
    CHECK(write_text(ckpt, "not to be touched"), "writing %s", ckpt);
    TRAIN("--model", "gpt2-tiny", "--steps", "1", "--policy", "dtr",
          "--budget", "20%", "--save", ckpt, "--trace", trace, "--quiet");
    CHECK(res.status == 0 || res.status == 3, "status %d: %.400s",
          res.status, res.err);
    if (res.status == 3) {
        CHECK(strstr(res.err, "delta train: step 1: ") &&
                  strstr(res.err, "budget"),
              "mid-run message: %.400s", res.err);
        CHECK(file_holds(ckpt, "not to be touched"), "%s was touched",
              ckpt);
    } else {
        printf("  dtr fits gpt2-tiny in 20%%: the mid-run failure path is "
               "not exercised\n");
    }
    trace_counts tc;
    CHECK(read_trace(trace, &tc) && tc.over_budget == 0,
          "%s: not a whole trace, or over the budget", trace);
}

/* (c) --trace with dtr at 60%: compute spans, at least one recomputation,
 * and a memory counter that never passes the budget of the run. And keep's
 * session (no budget) writes the same kinds of events. */
static void test_trace(void) {
    char trace[128], json[128];
    path_in_tmp(trace, sizeof trace, "dtr.json");
    path_in_tmp(json, sizeof json, "dtr-trace.jsonl");
    TRAIN("--model", "gpt2-tiny", "--steps", "2", "--policy", "dtr",
          "--budget", "60%", "--trace", trace, "--json", json, "--quiet");
    CHECK(res.status == 0, "dtr 60%% --trace: status %d: %s", res.status,
          res.err);
    trace_counts tc;
    CHECK(read_trace(trace, &tc), "%s does not parse as a trace", trace);
    CHECK(tc.op_spans > 0 && tc.recompute_spans > 0,
          "%d op spans, %d recompute spans", tc.op_spans,
          tc.recompute_spans);
    CHECK(tc.memory_points > 0 && tc.over_budget == 0,
          "%d memory points, %d over the budget", tc.memory_points,
          tc.over_budget);
    CHECK(tc.bad_times == 0, "%d spans with negative times", tc.bad_times);
    cJSON *objs[3];
    int n = read_json_lines(json, objs, 3);
    if (n == 3) {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(objs[2], "summary");
        CHECK(tc.budget == num(s, "budget_bytes"), "the counter's budget "
              "%.0f is not the run's %.0f", tc.budget,
              num(s, "budget_bytes"));
    }
    CHECK(n == 3, "%s: %d lines", json, n);
    for (int i = 0; i < n; i++) cJSON_Delete(objs[i]);

    path_in_tmp(trace, sizeof trace, "keep.json");
    TRAIN("--model", "mlp", "--data", "synthetic", "--steps", "1",
          "--trace", trace, "--quiet");
    CHECK(res.status == 0, "keep --trace: status %d: %s", res.status,
          res.err);
    CHECK(read_trace(trace, &tc) && tc.op_spans > 0 &&
              tc.memory_points > 0 && tc.over_budget == 0 &&
              tc.recompute_spans == 0,
          "keep trace: %d op spans, %d memory points (%d over), %d "
          "recomputations", tc.op_spans, tc.memory_points, tc.over_budget,
          tc.recompute_spans);
}

/* (e) A trace that cannot be created is refused before training (exit 2);
 * one whose writes fail is reported after it, also with 2; delta plan has
 * nothing to trace. */
static void test_trace_errors(void) {
    char trace[128];
    snprintf(trace, sizeof trace, "%s/no/such/dir/t.json", tmpdir);
    FAILS(2, "--trace", "--model", "gpt2-tiny", "--steps", "1", "--trace",
          trace);
    CHECK(strstr(res.err, "no/such/dir/t.json") &&
              !strstr(res.out, "steps of batch"),
          "trained, or the path is not named: %.300s", res.err);
    /* a device is never written (tests/test_outputs.c has the rest) */
    FAILS(2, "a character device, not a regular file", "--model", "mlp",
          "--data", "synthetic", "--steps", "1", "--trace", "/dev/full");
    const char *plan[] = {"plan", "--model", "mlp", "--trace", trace, NULL};
    run_tool(&res, false, plan);
    CHECK(res.status == 2 && strstr(res.err, "--trace"),
          "plan --trace: status %d: %.300s", res.status, res.err);
}

/* ---- checkpoints ------------------------------------------------------------ */

static int64_t i64_tensor(const char *path, const char *name) {
    delta_st_file *f = delta_st_open(path, NULL, NULL, 0);
    const delta_st_tensor *t = f ? delta_st_find(f, name) : NULL;
    int64_t v = -1;
    if (t && !strcmp(t->st_dtype, "I64") && t->numel == 1)
        memcpy(&v, t->data, sizeof v);
    delta_st_close(f);
    return v;
}

static void test_save_load_roundtrip(void) {
    char a[128], b[128], c[128];
    path_in_tmp(a, sizeof a, "a.safetensors");
    path_in_tmp(b, sizeof b, "b.safetensors");
    path_in_tmp(c, sizeof c, "c.safetensors");
    TRAIN("--model", "gpt2-tiny", "--steps", "2", "--save", a, "--quiet");
    CHECK(res.status == 0, "save: status %d: %s", res.status, res.err);
    TRAIN("--model", "gpt2-tiny", "--steps", "0", "--load", a, "--save", b,
          "--quiet");
    CHECK(res.status == 0, "load+save: status %d: %s", res.status, res.err);
    same_tensors(a, b, NULL);
    delta_st_file *f = delta_st_open(b, NULL, NULL, 0);
    const char *step = f ? delta_st_metadata(f, "step") : NULL;
    const char *fmt = f ? delta_st_metadata(f, "format") : NULL;
    const char *model = f ? delta_st_metadata(f, "model") : NULL;
    CHECK(step && !strcmp(step, "2") && fmt && !strcmp(fmt, "pt") &&
              model && !strcmp(model, "gpt2-tiny"),
          "metadata step '%s' format '%s' model '%s'", step ? step : "",
          fmt ? fmt : "", model ? model : "");
    delta_st_close(f);

    /* A ResNet's checkpoint has torchvision's num_batches_tracked. */
    TRAIN("--model", "resnet18", "--width", "4", "--image-size", "16",
          "--channels", "1", "--classes", "10", "--data", "synthetic",
          "--batch", "4", "--steps", "3", "--save", c, "--quiet");
    CHECK(res.status == 0, "resnet save: status %d: %s", res.status,
          res.err);
    CHECK(i64_tensor(c, "layer1.0.bn1.num_batches_tracked") == 3 &&
              i64_tensor(c, "bn1.num_batches_tracked") == 3,
          "num_batches_tracked should be 3 (the steps trained)");
}

static void test_load_errors(void) {
    char garbage[128], small[128];
    path_in_tmp(garbage, sizeof garbage, "garbage.safetensors");
    FILE *f = fopen(garbage, "wb");
    if (f) {
        fputs("\x10\x00\x00\x00\x00\x00\x00\x00{not json at all", f);
        fclose(f);
    }
    FAILS(2, "garbage.safetensors", "--model", "gpt2-tiny", "--steps", "1",
          "--load", garbage);
    FAILS(2, "/no/such/checkpoint", "--model", "gpt2-tiny", "--steps", "1",
          "--load", "/no/such/checkpoint");
    /* gpt2-tiny with hidden 32 into the default hidden 64: every shape
     * differs, each named. */
    FAILS(2, "mismatch: transformer.wte.weight", "--model", "gpt2-tiny",
          "--steps", "1", "--load",
          "tests/fixtures/checkpoints/gpt2_torch.safetensors");
    FAILS(2, "does not fit model gpt2-tiny", "--model", "gpt2-tiny",
          "--steps", "1", "--load",
          "tests/fixtures/checkpoints/gpt2_torch.safetensors");
    /* Another model's checkpoint: its tensors are missing. */
    FAILS(2, "missing: conv1.weight", "--model", "resnet18", "--width", "4",
          "--image-size", "28", "--channels", "1", "--classes", "10",
          "--data", "synthetic", "--steps", "1", "--load",
          "tests/fixtures/checkpoints/gpt2_torch.safetensors");
    /* Malformed data: idx files with a wrong magic, an empty text. */
    char dir[128], file[160];
    path_in_tmp(dir, sizeof dir, "badidx");
    mkdir(dir, 0755);
    const char *names[] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte"};
    for (int i = 0; i < 2; i++) {
        snprintf(file, sizeof file, "%s/%s", dir, names[i]);
        FILE *g = fopen(file, "wb");
        if (g) {
            fputs("\x12\x34\x56\x78 this is no idx file", g);
            fclose(g);
        }
    }
    FAILS(2, "train-images-idx3-ubyte", "--model", "resnet18", "--steps",
          "1", "--data", dir);
    path_in_tmp(file, sizeof file, "empty.txt");
    FILE *g = fopen(file, "wb");
    if (g) fclose(g);
    FAILS(2, "empty.txt", "--model", "gpt2-tiny", "--steps", "1", "--data",
          file);

    /* A delta checkpoint that lacks one tensor. */
    path_in_tmp(small, sizeof small, "mlp.safetensors");
    TRAIN("--model", "mlp", "--data", "synthetic", "--steps", "1",
          "--save", small, "--quiet");
    CHECK(res.status == 0, "mlp save: %d %s", res.status, res.err);
    delta_st_file *m = delta_st_open(small, NULL, NULL, 0);
    if (m) {
        delta_st_entry e[8];
        int n = 0;
        for (int i = 0; i < delta_st_count(m) && n < 8; i++) {
            const delta_st_tensor *t = delta_st_at(m, i);
            if (!strcmp(t->name, "fc2.bias")) continue;
            e[n] = (delta_st_entry){.name = t->name, .st_dtype = t->st_dtype,
                                    .ndim = t->ndim, .data = t->data};
            memcpy(e[n].shape, t->shape, sizeof e[n].shape);
            n++;
        }
        char cut[128];
        path_in_tmp(cut, sizeof cut, "mlp_cut.safetensors");
        CHECK(delta_st_write(cut, e, n, NULL, 0, NULL, 0) == DELTA_OK,
              "writing %s", cut);
        delta_st_close(m);
        FAILS(2, "missing: fc2.bias", "--model", "mlp", "--data",
              "synthetic", "--steps", "1", "--load", cut);
    }
}

static void test_pytorch_checkpoints(void) {
    const char *rn = "tests/fixtures/checkpoints/resnet18_torch.safetensors";
    const char *gp = "tests/fixtures/checkpoints/gpt2_torch.safetensors";
    char out[128];
    path_in_tmp(out, sizeof out, "from_torch.safetensors");
    TRAIN("--model", "resnet18", "--width", "4", "--image-size", "28",
          "--channels", "1", "--classes", "10", "--data", "synthetic",
          "--steps", "0", "--load", rn, "--save", out);
    CHECK(res.status == 0, "loading %s: status %d: %s", rn, res.status,
          res.err);
    CHECK(!strstr(res.err, "warning"), "unexpected warnings: %.400s",
          res.err);
    same_tensors(rn, out, NULL);
    CHECK(i64_tensor(out, "layer4.1.bn2.num_batches_tracked") == 7,
          "the step should come from PyTorch's num_batches_tracked (7)");

    TRAIN("--model", "gpt2-tiny", "--hidden", "32", "--steps", "0",
          "--load", gp, "--save", out);
    CHECK(res.status == 0, "loading %s: status %d: %s", gp, res.status,
          res.err);
    CHECK(!strstr(res.err, "warning"), "the tied lm_head.weight should be "
          "ignored silently: %.400s", res.err);
    same_tensors(gp, out, "lm_head.weight");

    /* A tensor the model does not have is ignored with a warning. */
    delta_st_file *f = delta_st_open(gp, NULL, NULL, 0);
    CHECK(f != NULL, "cannot open %s", gp);
    if (f) {
        int n = delta_st_count(f);
        delta_st_entry *e = calloc((size_t)n + 1, sizeof *e);
        float extra[3] = {1, 2, 3};
        for (int i = 0; e && i < n; i++) {
            const delta_st_tensor *t = delta_st_at(f, i);
            e[i] = (delta_st_entry){.name = t->name, .st_dtype = t->st_dtype,
                                    .ndim = t->ndim, .data = t->data};
            memcpy(e[i].shape, t->shape, sizeof e[i].shape);
        }
        if (e) {
            e[n] = (delta_st_entry){.name = "foo.bar", .st_dtype = "F32",
                                    .ndim = 1, .shape = {3}, .data = extra};
            char path[128];
            path_in_tmp(path, sizeof path, "extra.safetensors");
            CHECK(delta_st_write(path, e, n + 1, NULL, 0, NULL, 0) ==
                      DELTA_OK, "writing %s", path);
            TRAIN("--model", "gpt2-tiny", "--hidden", "32", "--steps", "0",
                  "--load", path, "--quiet");
            CHECK(res.status == 0 && strstr(res.err, "warning: ignoring "
                                                     "'foo.bar'"),
                  "extra tensor: status %d, stderr %.300s", res.status,
                  res.err);
        }
        free(e);
        delta_st_close(f);
    }

    /* And training goes on from it. */
    TRAIN("--model", "gpt2-tiny", "--hidden", "32", "--steps", "2", "--load",
          gp, "--quiet");
    CHECK(res.status == 0, "training from %s: status %d: %s", gp,
          res.status, res.err);
}

/* gp's tensors into path, as transformers would write them: without
 * lm_head.weight (save_pretrained leaves tied aliases out), each name
 * stripped of "transformer." when base (a GPT2Model's file, as the Hub's
 * gpt2), and lm_head.weight set to other values than the embedding when
 * untied. "format": "pt". */
static void write_hf_variant(const char *gp, const char *path, bool base,
                             bool untied) {
    delta_st_file *f = delta_st_open(gp, NULL, NULL, 0);
    CHECK(f != NULL, "cannot open %s", gp);
    if (!f) return;
    int n = delta_st_count(f), k = 0;
    delta_st_entry *e = calloc((size_t)n, sizeof *e);
    float *other = NULL;
    for (int i = 0; e && i < n; i++) {
        const delta_st_tensor *t = delta_st_at(f, i);
        const char *name = t->name;
        if (!strcmp(name, "lm_head.weight") && !untied) continue;
        if (base && !strncmp(name, "transformer.", 12)) name += 12;
        e[k] = (delta_st_entry){.name = name, .st_dtype = t->st_dtype,
                                .ndim = t->ndim, .data = t->data};
        memcpy(e[k].shape, t->shape, sizeof e[k].shape);
        if (!strcmp(name, "lm_head.weight")) {
            other = calloc(1, t->nbytes);
            e[k].data = other;
        }
        k++;
    }
    const char *meta[] = {"format", "pt"};
    CHECK(e && delta_st_write(path, e, k, meta, 1, NULL, 0) == DELTA_OK,
          "writing %s", path);
    free(other);
    free(e);
    delta_st_close(f);
}

/* Hugging Face GPT-2 files both ways (issue 16, defect 7): delta writes
 * "format": "pt" (transformers' loader refuses anything else) and the tied
 * lm_head.weight as a copy of transformer.wte.weight (a GPT2LMHeadModel's
 * state dict lists it, so load_state_dict(strict=True) wants it); it reads
 * files with the head and without it, and files of a GPT2Model (no
 * "transformer." prefix), and warns when a file's head is not tied. The
 * other side, a module shaped exactly like transformers' loading delta's
 * files strictly, is test_resume's test_pytorch_takes_checkpoints. */
static void test_hugging_face_gpt2(void) {
    const char *gp = "tests/fixtures/checkpoints/gpt2_torch.safetensors";
    char out[128], noh[128], base[128], untied[128];
    path_in_tmp(out, sizeof out, "hf_out.safetensors");
    path_in_tmp(noh, sizeof noh, "hf_nohead.safetensors");
    path_in_tmp(base, sizeof base, "hf_base.safetensors");
    path_in_tmp(untied, sizeof untied, "hf_untied.safetensors");
#define HF_TINY "--model", "gpt2-tiny", "--hidden", "32", "--steps", "0"
    TRAIN(HF_TINY, "--load", gp, "--save", out);
    CHECK(res.status == 0, "loading %s: %d %s", gp, res.status, res.err);
    delta_st_file *f = delta_st_open(out, NULL, NULL, 0);
    const delta_st_tensor *head = f ? delta_st_find(f, "lm_head.weight") : NULL;
    const delta_st_tensor *wte = f ? delta_st_find(f, "transformer.wte.weight")
                                   : NULL;
    const char *fmt = f ? delta_st_metadata(f, "format") : NULL;
    CHECK(fmt && !strcmp(fmt, "pt"), "format '%s', want 'pt'",
          fmt ? fmt : "(none)");
    CHECK(head && wte && head->nbytes == wte->nbytes &&
              head->ndim == 2 && head->shape[0] == wte->shape[0] &&
              head->shape[1] == wte->shape[1] &&
              !memcmp(head->data, wte->data, wte->nbytes),
          "lm_head.weight should be saved as a copy of the embedding");
    delta_st_close(f);
    same_tensors(gp, out, NULL);  /* the fixture's head is the copy too */

    write_hf_variant(gp, noh, false, false);
    write_hf_variant(gp, base, true, false);
    write_hf_variant(gp, untied, false, true);
    const char *files[] = {noh, base};
    for (int i = 0; i < 2; i++) {
        TRAIN(HF_TINY, "--load", files[i], "--save", out);
        CHECK(res.status == 0 && !strstr(res.err, "warning"),
              "loading %s: status %d, stderr %.400s", files[i], res.status,
              res.err);
        same_tensors(gp, out, NULL);
    }
    TRAIN(HF_TINY, "--load", untied, "--quiet");
    CHECK(res.status == 0 && strstr(res.err, "warning: 'lm_head.weight' in") &&
              strstr(res.err, "differs from 'transformer.wte.weight'"),
          "an untied head: status %d, stderr %.400s", res.status, res.err);
    /* BERT's tied decoder is written too */
    TRAIN("--model", "bert-tiny", "--layers", "1", "--steps", "0", "--save",
          out, "--quiet");
    f = delta_st_open(out, NULL, NULL, 0);
    CHECK(f && delta_st_find(f, "cls.predictions.decoder.weight") &&
              delta_st_find(f, "cls.predictions.decoder.bias"),
          "bert-tiny: no cls.predictions.decoder.{weight,bias} (%d)",
          res.status);
    delta_st_close(f);
#undef HF_TINY
}

/* A module shaped exactly like transformers' GPT2LMHeadModel (tied
 * lm_head.weight in its state dict) and BertForMaskedLM (tied decoder)
 * takes delta's files with load_state_dict(strict=True), and their
 * metadata format is one transformers' loader accepts
 * (scripts/make_checkpoint_fixture.py --check). Skipped without Debian's
 * python3-torch. */
static void test_transformers_load_strictly(void) {
    if (!have_pytorch())
        TEST_SKIP("no PyTorch in /usr/bin/python3 (package python3-torch)");
    char g[128], b[128], files[300];
    path_in_tmp(g, sizeof g, "strict_gpt2.safetensors");
    path_in_tmp(b, sizeof b, "strict_bert.safetensors");
    TRAIN("--model", "gpt2-tiny", "--hidden", "32", "--steps", "1", "--save",
          g, "--quiet");
    CHECK(res.status == 0, "gpt2 save: %d %s", res.status, res.err);
    TRAIN("--model", "bert-tiny", "--layers", "1", "--steps", "1", "--save",
          b, "--quiet");
    CHECK(res.status == 0, "bert save: %d %s", res.status, res.err);
    snprintf(files, sizeof files, "%s %s", g, b);
    static char out[4096];
    int rc = pytorch_check(files, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "model gpt2-tiny") &&
              strstr(out, "model bert-tiny"),
          "transformers-shaped modules: %d %s", rc, out);
}

/* ---- training --------------------------------------------------------------- */

static void test_loss_falls_on_fashion_mnist(void) {
    if (!have_fashion_mnist())
        TEST_SKIP("Fashion-MNIST is not installed (" DELTA_FASHION_MNIST_DIR
                  ")");
    char json[128];
    path_in_tmp(json, sizeof json, "fmnist.jsonl");
    TRAIN("--model", "resnet18", "--width", "8", "--batch", "32", "--steps",
          "30", "--lr", "0.05", "--eval-batches", "4", "--json", json);
    CHECK(res.status == 0, "status %d: %s", res.status, res.err);
    CHECK(strstr(res.err, "fashion-mnist train"), "data: %.300s", res.err);
    CHECK(strstr(res.out, "test accuracy: "), "no test accuracy printed: "
          "%s", res.out);
    cJSON *objs[40];
    int n = read_json_lines(json, objs, 40);
    CHECK(n == 31, "%d JSON lines", n);
    if (n != 31) {
        for (int i = 0; i < n; i++) cJSON_Delete(objs[i]);
        return;
    }
    double first = 0, last = 0;
    for (int i = 0; i < 5; i++) {
        first += num(objs[i], "loss") / 5;
        last += num(objs[25 + i], "loss") / 5;
    }
    CHECK(last < 0.75 * first, "loss fell from %.4f to only %.4f", first,
          last);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(objs[30], "summary");
    double acc = num(s, "test_accuracy");
    CHECK(acc > 0.3 && acc <= 1, "test accuracy %g after 30 steps", acc);
    for (int i = 0; i < n; i++) cJSON_Delete(objs[i]);
}

/* Without Fashion-MNIST the default data falls back to synthetic images
 * of its shape, saying so; asking for it explicitly is an error. */
static void test_fallback_without_fashion_mnist(void) {
    char json[128];
    path_in_tmp(json, sizeof json, "fallback.jsonl");
    setenv("DELTA_FASHION_MNIST_DIR", "/no/such/fashion-mnist", 1);
    TRAIN("--model", "resnet18", "--width", "4", "--batch", "4", "--steps",
          "2", "--json", json);
    CHECK(res.status == 0, "status %d: %s", res.status, res.err);
    CHECK(strstr(res.err, "not available") && strstr(res.err, "synthetic"),
          "the fallback is not announced: %.400s", res.err);
    CHECK(!strstr(res.out, "test accuracy"), "no evaluation on synthetic "
          "data: %s", res.out);
    cJSON *objs[4];
    int n = read_json_lines(json, objs, 4);
    const cJSON *s = n == 3 ? check_log("fallback", objs, n, 2, false) : NULL;
    CHECK(s && !cJSON_GetObjectItemCaseSensitive(s, "test_accuracy"),
          "fallback summary (%d lines)", n);
    for (int i = 0; i < n; i++) cJSON_Delete(objs[i]);
    FAILS(2, "/no/such/fashion-mnist", "--model", "resnet18", "--steps", "1",
          "--data", "fashion-mnist");
    unsetenv("DELTA_FASHION_MNIST_DIR");
}

static void sim_run(const char *model, const char *batch) {
    char json[128], name[64];
    snprintf(name, sizeof name, "sim-%s.jsonl", model);
    path_in_tmp(json, sizeof json, name);
    TRAIN("--backend", "sim", "--gpu", "a100-80g", "--model", model,
          "--batch", batch, "--steps", "3", "--json", json);
    CHECK(res.status == 0, "%s: status %d: %s", model, res.status, res.err);
    /* reported, not asserted: these machines are shared and noisy */
    printf("  %s batch %s on sim: %.2f s of real time for 3 steps\n", model,
           batch, res.seconds);
    CHECK(strstr(res.out, "simulated"), "%s: '%s'", model, res.out);
    cJSON *objs[8];
    int n = read_json_lines(json, objs, 8);
    CHECK(n >= 0, "%s: the JSON log does not parse", model);
    if (n < 0) return;
    const cJSON *s = check_log(model, objs, n, 3, true);
    if (s) {
        const cJSON *g = cJSON_GetObjectItemCaseSensitive(s, "gpu");
        CHECK(cJSON_IsString(g) && !strcmp(g->valuestring, "a100-80g"),
              "%s: summary gpu", model);
        CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(s,
                                                            "final_loss")),
              "%s: sim final_loss should be null", model);
        CHECK(num(s, "budget_bytes") == 80.0 * 1024 * 1024 * 1024,
              "%s: an unlimited budget on sim is the GPU's 80 GiB", model);
    }
    for (int i = 0; i < n; i++) cJSON_Delete(objs[i]);
}

/* delta plan: the dry plan of every family, from shapes alone */
static void test_plan(void) {
    const char *models[] = {"mlp", "resnet50", "gpt2-xl", "bert-base"};
    for (int i = 0; i < 4; i++) {
        char json[128];
        path_in_tmp(json, sizeof json, "plan.jsonl");
        const char *a[] = {"plan", "--model", models[i], "--batch", "2",
                           "--data", "synthetic", "--quiet", "--json", json,
                           NULL};
        run_tool(&res, false, a);
        CHECK(res.status == 0, "%s: status %d: %s", models[i], res.status,
              res.err);
        CHECK(strstr(res.out, "unconstrained peak") &&
                  strstr(res.out, "minimum budget"),
              "%s: '%s'", models[i], res.out);
        cJSON *objs[2];
        int n = read_json_lines(json, objs, 2);
        CHECK(n == 1, "%s: one JSON line, got %d", models[i], n);
        if (n != 1) continue;
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(objs[0], "plan");
        double peak = num(p, "baseline_peak_bytes");
        double minb = num(p, "min_budget_bytes");
        CHECK(peak > 0 && minb > 0 && minb <= peak, "%s: peak %.0f min %.0f",
              models[i], peak, minb);
        CHECK(num(p, "max_live_bytes") <= peak);
        /* what forward leaves for backward: some, and no more than all
           activations */
        double saved = num(p, "saved_for_backward_bytes");
        CHECK(saved > 0 && saved <= num(p, "activation_bytes"),
              "%s: saved %.0f of %.0f", models[i], saved,
              num(p, "activation_bytes"));
        cJSON_Delete(objs[0]);
    }
    const char *bad[] = {"plan", "--model", "nope", NULL};
    run_tool(&res, false, bad);
    CHECK(res.status == 2 && strstr(res.err, "nope"), "%d %s", res.status,
          res.err);
}

/* The schedule's and clipping's options: bad values exit 2 before any
 * work; the help names them; --json has lr and grad_norm per step. */
static void test_lr_schedule_options(void) {
#define TINY "--model", "gpt2-tiny", "--steps", "2", "--quiet"
    FAILS(2, "--warmup", TINY, "--warmup", "-1");
    FAILS(2, "--lr-min", TINY, "--lr-schedule", "cosine", "--lr-min", "1.5");
    FAILS(2, "--lr-min", TINY, "--lr-min", "-0.1");
    FAILS(2, "give it with --lr-schedule cosine or linear", TINY, "--lr-min",
          "0.1");
    FAILS(2, "--grad-clip", TINY, "--grad-clip", "-1");
    FAILS(2, "unknown --lr-schedule 'step'", TINY, "--lr-schedule", "step");
    FAILS(2, "needs the run's total steps", "--model", "gpt2-tiny",
          "--steps", "0", "--lr-schedule", "linear", "--quiet");
    FAILS(2, "each ZeRO-1 rank holds only its shard's", TINY, "--grad-clip",
          "1", "--zero", "1", "--ranks", "2", "--backend", "sim");
    const char *help[] = {"--help", NULL};
    run_tool(&res, true, help);
    CHECK(res.status == 0 && strstr(res.out, "--lr-schedule NAME") &&
              strstr(res.out, "--warmup N") && strstr(res.out, "--lr-min F") &&
              strstr(res.out, "--grad-clip C"),
          "--help lacks the schedule's options");
    char log[128];
    path_in_tmp(log, sizeof log, "sched.jsonl");
    /* warmup longer than the run is allowed: it stays in warmup */
    TRAIN("--model", "gpt2-tiny", "--steps", "3", "--quiet", "--lr", "0.01",
          "--lr-schedule", "linear", "--warmup", "4", "--grad-clip", "1",
          "--json", log);
    CHECK(res.status == 0, "%d %s", res.status, res.err);
    cJSON *objs[8];
    int n = read_json_lines(log, objs, 8);
    CHECK(n == 4, "%d lines", n); /* 3 steps and the summary */
    for (int i = 0; i < n && i < 3; i++) {
        /* written with 9 digits: a float's value exactly */
        CHECK((float)num(objs[i], "lr") == (float)(0.01 * (i + 1) / 4),
              "step %d: lr %.9g", i + 1, num(objs[i], "lr"));
        CHECK(num(objs[i], "grad_norm") > 0, "step %d", i + 1);
    }
    for (int i = 0; i < n; i++) cJSON_Delete(objs[i]);
#undef TINY
}

/* ---- changing shapes --------------------------------------------------------- */

/* Compares two files byte for byte. */
static bool same_bytes(const char *pa, const char *pb) {
    static char a[1 << 20], b[1 << 20];
    FILE *fa = fopen(pa, "rb"), *fb = fopen(pb, "rb");
    size_t na = fa ? fread(a, 1, sizeof a, fa) : 0;
    size_t nb = fb ? fread(b, 1, sizeof b, fb) : 0;
    bool ok = fa && fb && na == nb && na < sizeof a && !memcmp(a, b, na);
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return ok;
}

/* The steps' shapes of a JSON log (n lines, the last the summary) into
 * batch[] and seq[] (0 when the line has none). */
static void step_shapes(cJSON **objs, int n, double *batch, double *seq) {
    for (int i = 0; i + 1 < n; i++) {
        batch[i] = num(objs[i], "batch");
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(objs[i], "seq_len");
        seq[i] = cJSON_IsNumber(s) ? s->valuedouble : 0;
    }
}

/* (a) --seq-len-range 16:48 under dtr at 60% of the largest shape's peak
 * saves the bytes keep saves with no budget; every step stays inside the
 * one budget; both runs draw the same lengths, more than one of them. */
static void test_seq_len_range_exact(void) {
    char a[128], b[128], ja[128], jb[128];
    path_in_tmp(a, sizeof a, "range_dtr.safetensors");
    path_in_tmp(b, sizeof b, "range_keep.safetensors");
    path_in_tmp(ja, sizeof ja, "range_dtr.jsonl");
    path_in_tmp(jb, sizeof jb, "range_keep.jsonl");
    TRAIN("--model", "gpt2-tiny", "--seq-len-range", "16:48", "--steps", "6",
          "--policy", "dtr", "--budget", "60%", "--save", a, "--json", ja);
    CHECK(res.status == 0, "dtr 60%%: status %d: %s", res.status, res.err);
    CHECK(strstr(res.out, "shapes: ") && strstr(res.out, "planning "),
          "no shapes line in the report: %s", res.out);
    CHECK(strstr(res.err, "largest shape"), "the budget's reference is not "
          "said: %.400s", res.err);
    TRAIN("--model", "gpt2-tiny", "--seq-len-range", "16:48", "--steps", "6",
          "--save", b, "--json", jb, "--quiet");
    CHECK(res.status == 0, "keep: status %d: %s", res.status, res.err);
    CHECK(same_bytes(a, b), "%s and %s differ", a, b);
    cJSON *oa[8], *ob[8];
    int na = read_json_lines(ja, oa, 8), nb = read_json_lines(jb, ob, 8);
    const cJSON *sa = na == 7 ? check_log("range dtr", oa, na, 6, false)
                              : NULL;
    CHECK(sa && nb == 7, "%d and %d JSON lines", na, nb);
    if (sa && nb == 7) {
        double ba[6], sqa[6], bb[6], sqb[6], budget = num(sa, "budget_bytes");
        step_shapes(oa, na, ba, sqa);
        step_shapes(ob, nb, bb, sqb);
        int distinct = 0;
        for (int i = 0; i < 6; i++) {
            CHECK(ba[i] == 8 && sqa[i] >= 16 && sqa[i] <= 48 &&
                      sqa[i] == sqb[i] && bb[i] == 8,
                  "step %d: batch %g x %g tokens (keep: %g x %g)", i + 1,
                  ba[i], sqa[i], bb[i], sqb[i]);
            bool seen = false;
            for (int k = 0; k < i; k++) seen |= sqa[k] == sqa[i];
            distinct += !seen;
            CHECK(num(oa[i], "budget_bytes") == budget &&
                      num(oa[i], "peak_device_bytes") <= budget,
                  "step %d: peak %.0f, budget %.0f", i + 1,
                  num(oa[i], "peak_device_bytes"),
                  num(oa[i], "budget_bytes"));
        }
        CHECK(num(sa, "shapes") == distinct && distinct > 1,
              "summary shapes %g, %d distinct lengths", num(sa, "shapes"),
              distinct);
        CHECK(num(sa, "seq_len") == 48 && num(sa, "seq_len_min") == 16 &&
                  num(sa, "seq_len_max") == 48,
              "summary lengths");
        /* the budget is 60% of the largest shape's (48 tokens) peak */
        CHECK(fabs(budget - 0.6 * num(sa, "baseline_peak_bytes")) <= 1,
              "budget %.0f is not 60%% of the largest peak %.0f", budget,
              num(sa, "baseline_peak_bytes"));
        CHECK(num(sa, "plan_s") > 0 &&
                  num(sa, "plan_max_s") <= num(sa, "plan_s"),
              "plan_s %g, plan_max_s %g", num(sa, "plan_s"),
              num(sa, "plan_max_s"));
    }
    for (int i = 0; i < na; i++) cJSON_Delete(oa[i]);
    for (int i = 0; i < nb; i++) cJSON_Delete(ob[i]);
    /* delta (the default with a budget) over 12 steps of changing lengths,
     * coming back to shapes it has seen (its measurements are kept per
     * program), saves keep's bytes too */
    char c[128], d[128];
    path_in_tmp(c, sizeof c, "range_delta.safetensors");
    path_in_tmp(d, sizeof d, "range_keep12.safetensors");
    TRAIN("--model", "gpt2-tiny", "--seq-len-range", "16:24", "--steps", "12",
          "--budget", "50%", "--save", c, "--quiet");
    CHECK(res.status == 0, "delta 50%%: status %d: %s", res.status, res.err);
    TRAIN("--model", "gpt2-tiny", "--seq-len-range", "16:24", "--steps", "12",
          "--save", d, "--quiet");
    CHECK(res.status == 0, "keep: status %d: %s", res.status, res.err);
    CHECK(same_bytes(c, d), "%s and %s differ", c, d);
}

/* (b) 10 images in batches of 4: every epoch ends with a batch of 2, which
 * is trained as its own shape. Seven steps cross two epoch boundaries;
 * autoswap at 60% of the peak saves the bytes keep saves with no budget;
 * --drop-last skips the short batches (and so trains something else). */
static void test_partial_batch_exact(void) {
    char dir[128];
    make_tiny_idx(dir, sizeof dir, "tiny-idx");

    char a[128], b[128], c[128], ja[128];
    path_in_tmp(a, sizeof a, "partial_swap.safetensors");
    path_in_tmp(b, sizeof b, "partial_keep.safetensors");
    path_in_tmp(c, sizeof c, "partial_drop.safetensors");
    path_in_tmp(ja, sizeof ja, "partial.jsonl");
#define TINY "--model", "resnet18", "--width", "4", "--data", dir, "--batch", \
             "4", "--steps", "7", "--eval-batches", "0"
    TRAIN(TINY, "--policy", "autoswap", "--budget", "60%", "--save", a,
          "--json", ja);
    CHECK(res.status == 0, "autoswap 60%%: status %d: %s", res.status,
          res.err);
    CHECK(strstr(res.err, "batch of 2") && strstr(res.out, "2 steps on an "
                                                            "epoch's shorter"),
          "the partial batch is not announced: %.300s / %.300s", res.err,
          res.out);
    TRAIN(TINY, "--save", b, "--quiet");
    CHECK(res.status == 0, "keep: status %d: %s", res.status, res.err);
    CHECK(same_bytes(a, b), "%s and %s differ", a, b);
    cJSON *o[9];
    int n = read_json_lines(ja, o, 9);
    const cJSON *s = n == 8 ? check_log("partial", o, n, 7, false) : NULL;
    if (s) {
        double bt[7], sq[7], budget = num(s, "budget_bytes");
        step_shapes(o, n, bt, sq);
        const double want[7] = {4, 4, 2, 4, 4, 2, 4};
        for (int i = 0; i < 7; i++) {
            CHECK(bt[i] == want[i] && sq[i] == 0, "step %d: batch %g", i + 1,
                  bt[i]);
            CHECK(num(o[i], "peak_device_bytes") <= budget,
                  "step %d: peak %.0f over the budget %.0f", i + 1,
                  num(o[i], "peak_device_bytes"), budget);
        }
        CHECK(num(s, "shapes") == 2 && num(s, "partial_batches") == 2 &&
                  num(s, "shape_switches") == 4,
              "shapes %g, partial batches %g, switches %g",
              num(s, "shapes"), num(s, "partial_batches"),
              num(s, "shape_switches"));
    }
    for (int i = 0; i < n; i++) cJSON_Delete(o[i]);
    TRAIN(TINY, "--drop-last", "--save", c, "--json", ja, "--quiet");
    CHECK(res.status == 0, "--drop-last: status %d: %s", res.status,
          res.err);
    n = read_json_lines(ja, o, 9);
    s = n == 8 ? check_log("drop-last", o, n, 7, false) : NULL;
    if (s)
        CHECK(num(s, "shapes") == 1 && num(s, "partial_batches") == 0,
              "--drop-last trained %g shapes", num(s, "shapes"));
    for (int i = 0; i < n; i++) cJSON_Delete(o[i]);
    CHECK(!same_bytes(b, c), "the partial batches changed nothing");
#undef TINY
}

static void test_sim_backend(void) {
    sim_run("resnet50", "64");
    sim_run("gpt2-xl", "1");
}

/* --check-streams: training on the stream-order checker runs clean (a
 * violation would abort: status 134) and says nothing more. */
static void test_check_streams(void) {
    TRAIN("--backend", "sim", "--gpu", "a100-80g", "--model", "gpt2-tiny",
          "--steps", "3", "--budget", "50%", "--check-streams");
    CHECK(res.status == 0, "sim: status %d: %s", res.status, res.err);
    CHECK(!strstr(res.err, "stream-order"), "sim: %s", res.err);
    TRAIN("--model", "mlp", "--data", "synthetic", "--batch", "64", "--steps",
          "3", "--budget", "80%", "--check-streams", "--eval-batches", "0");
    CHECK(res.status == 0, "cpu: status %d: %s", res.status, res.err);
    CHECK(!strstr(res.err, "stream-order"), "cpu: %s", res.err);
}

int main(int argc, char **argv) {
    if (!cli_setup(argc, argv, "delta_test_cli")) return 1;
    TEST_RUN(test_help_and_version);
    TEST_RUN(test_usage_errors);
    TEST_RUN(test_budget_errors);
    TEST_RUN(test_json_log);
    TEST_RUN(test_dtr_in_budget);
    TEST_RUN(test_budget_below_minimum);
    TEST_RUN(test_budget_mid_run);
    TEST_RUN(test_trace);
    TEST_RUN(test_trace_errors);
    TEST_RUN(test_save_load_roundtrip);
    TEST_RUN(test_load_errors);
    TEST_RUN(test_pytorch_checkpoints);
    TEST_RUN(test_hugging_face_gpt2);
    TEST_RUN(test_transformers_load_strictly);
    TEST_RUN(test_loss_falls_on_fashion_mnist);
    TEST_RUN(test_fallback_without_fashion_mnist);
    TEST_RUN(test_sim_backend);
    TEST_RUN(test_plan);
    TEST_RUN(test_seq_len_range_exact);
    TEST_RUN(test_partial_batch_exact);
    TEST_RUN(test_check_streams);
    TEST_RUN(test_lr_schedule_options);
    cli_cleanup();
    TEST_MAIN_END();
}
