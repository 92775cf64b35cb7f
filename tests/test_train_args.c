/* The command-line parser of `delta train` / `delta plan`
 * (tools/cmd_train.c's train_parse_args), called in-process the way
 * fuzz/fuzz_cli.c calls it:
 *  - a second parse is independent of the first, even after the first
 *    stopped inside a cluster of short options (regression: getopt kept a
 *    pointer into the first argv and the next "--model mlp" failed);
 *  - accepted values land in the config, bad ones exit 2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "commands.h"
#include "progress.h"
#include "test.h"
#include "trainer.h"

/* Parses a NULL-terminated list after "train", from heap copies that are
 * freed (and scribbled over) before returning, as a caller's would be. */
static int parse(train_config *c, const char *const *args) {
    char *argv[32];
    int argc = 0;
    argv[argc++] = strdup("train");
    for (int i = 0; args[i] && argc < 31; i++) argv[argc++] = strdup(args[i]);
    argv[argc] = NULL;
    int rc = train_parse_args(argc, argv, c);
    for (int i = 0; i < argc; i++) {
        memset(argv[i], 'Z', strlen(argv[i]));
        free(argv[i]);
    }
    return rc;
}

static void test_parse_twice_after_cluster(void) {
    static const char *const clusters[][4] = {
        {"-xy", NULL}, {"-hq", NULL}, {"--model", "mlp", "-xyz", NULL}};
    for (size_t i = 0; i < sizeof clusters / sizeof clusters[0]; i++) {
        /* The first argv stays alive, as main's would: the stale pointer
         * then reads its leftover "y" as the next option. */
        char *first_argv[8];
        int argc = 0;
        first_argv[argc++] = "train";
        for (int k = 0; clusters[i][k]; k++)
            first_argv[argc++] = (char *)clusters[i][k];
        first_argv[argc] = NULL;
        train_config c;
        FILE *keep = stdout;  /* -h prints the usage */
        stdout = fopen("/dev/null", "w");
        int first = train_parse_args(argc, first_argv, &c);
        fclose(stdout);
        stdout = keep;
        CHECK(first == 2 || first == 0, "case %zu: first parse gave %d", i,
              first);
        char *argv[] = {"train", "--model", "mlp", "--steps", "3", NULL};
        CHECK(train_parse_args(5, argv, &c) == -1,
              "case %zu: a valid command line after it was refused", i);
        CHECK(c.steps == 3 && c.run.model.name && !strcmp(c.run.model.name, "mlp"),
              "case %zu: steps %lld", i, (long long)c.steps);
    }
}

static void test_parse_values(void) {
    train_config c;
    static const char *const good[] = {"--model", "gpt2-tiny", "--budget",
                                       "60%", "--seq-len-range", "16:128",
                                       "--lr", "3e-4", NULL};
    char *argv[16];
    int argc = 0;
    argv[argc++] = "train";
    for (int i = 0; good[i]; i++) argv[argc++] = (char *)good[i];
    argv[argc] = NULL;
    CHECK(train_parse_args(argc, argv, &c) == -1);
    CHECK(c.run.budget.kind == DELTA_BUDGET_PERCENT && c.run.budget.percent == 60);
    CHECK(c.run.seq_len_min == 16 && c.run.seq_len_max == 128);
    CHECK(c.run.lr > 2.9e-4 && c.run.lr < 3.1e-4);
    static const char *const bad[][5] = {
        {"--model", "mlp", "--steps", "-1", NULL},
        {"--model", "mlp", "--budget", "0", NULL},
        {"--model", "mlp", "--seq-len-range", "9:3", NULL},
        {"--model", "mlp", "--steps", NULL},
        {"--steps", "3", NULL},
        {"--model", "mlp", "--precision", "fp16", NULL},
        {"--model", "mlp", "--precision", "", NULL},
        {"--model", "mlp", "--precision", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(parse(&c, bad[i]) == 2, "bad case %zu", i);
    static const char *const bf16[] = {"--model", "gpt2-tiny", "--precision",
                                       "bf16", NULL};
    CHECK(parse(&c, bf16) == -1 &&
          c.run.model.precision == DELTA_PRECISION_BF16);
    static const char *const fp32[] = {"--model", "mlp", NULL};
    CHECK(parse(&c, fp32) == -1 &&
          c.run.model.precision == DELTA_PRECISION_FP32, "fp32 by default");
    static const char *const cuda[] = {"--model", "mlp", "--precision",
                                       "bf16", "--backend", "cuda", NULL};
    CHECK(parse(&c, cuda) == -1 &&
              c.run.model.precision == DELTA_PRECISION_BF16,
          "bf16 on cuda accepted (the CUDA backend computes BF16)");
}

/* Defect 9: the rate on the last line of a run is over its recent steps,
 * not dragged down by a slow first step (an average seeded by it showed
 * 931 tokens/s where the run did 6568). */
static void test_progress_rate_recent(void) {
    char buf[4096] = "";
    FILE *f = fmemopen(buf, sizeof buf, "w");
    CHECK(f, "fmemopen");
    if (!f) return;
    progress p;
    progress_init(&p, PROGRESS_LINES, f, 6, "samples", 100, false, 0);
    for (int64_t step = 1; step <= 6; step++) {
        delta_step_stats s = {.step_s = step == 1 ? 10.0 : 0.1};
        progress_step(&p, step, 1.0, &s);
    }
    fclose(f);
    const char *last = strstr(buf, "step 6/6");
    CHECK(last && strstr(last, " 1000 samples/s"), "last line: %s",
          last ? last : buf);
}

/* Reports label a run by its backend's name: a CUDA run was labeled "cpu"
 * by bench's labels and CSV and maxbatch's JSON (a ternary of sim or
 * cpu). */
static void test_labels_name_the_backend(void) {
    bench b;
    memset(&b, 0, sizeof b);
    bench_model bm = {.name = "resnet50", .batch = 8, .image_size = 224,
                      .optimizer = "sgd"};
    char label[256];
    static const char *const names[] = {"cpu", "cuda"};
    for (int i = 0; i < 2; i++) {
        b.base.run.backend = names[i];
        bench_label(&b, &bm, label, sizeof label);
        CHECK(!strncmp(label, names[i], strlen(names[i])) &&
                  label[strlen(names[i])] == ':',
              "%s run labeled '%s'", names[i], label);
    }
    b.base.run.backend = NULL;  /* not given: cpu */
    bench_label(&b, &bm, label, sizeof label);
    CHECK(!strncmp(label, "cpu:", 4), "default labeled '%s'", label);
    train_config c;
    char *argv[] = {"train", "--model", "mlp", "--backend", "cuda", NULL};
    CHECK(train_parse_args(5, argv, &c) == -1 && train_on(&c, "cuda") &&
          !strcmp(train_backend(&c), "cuda"));
    static const char *const bad[] = {"--model", "mlp", "--backend", "tpu",
                                      NULL};
    CHECK(parse(&c, bad) == 2);
}

int main(void) {
    TEST_RUN(test_parse_twice_after_cluster);
    TEST_RUN(test_parse_values);
    TEST_RUN(test_progress_rate_recent);
    TEST_RUN(test_labels_name_the_backend);
    TEST_MAIN_END();
}
