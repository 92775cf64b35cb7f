/* Fine-tuning a pretrained GPT-2 as a user of llm.c or transformers would
 * (issue: fine-tune real models), through `delta train`:
 *  - a Hugging Face-layout GPT-2 (scripts/make_pretrained_fixture.py: the
 *    Hub's F32 file with GPT2Model names and mask buffers, and a BF16
 *    GPT2LMHeadModel state dict with the tied lm_head, each with its
 *    config.json) loads without --model and gives PyTorch's first loss on
 *    the first batch of an llm.c token file read in file order;
 *  - --val-data / --val-every report the validation loss (equal to the
 *    training loss of the same batch when nothing was learnt);
 *  - fine-tuning under a budget is bit-identical to keep, and the result
 *    samples;
 *  - bad input exits 2 with the offset or the setting named.
 * Skips the PyTorch parts without Debian's python3-torch. */
#include "cli_run.h"

static char dir[128];      /* the fixture's folder, made once */
static double ref_f32, ref_bf16;

static bool make_fixture(void) {
    if (dir[0]) return true;
    if (!have_pytorch()) return false;
    path_in_tmp(dir, sizeof dir, "pretrained");
    char cmd[512], refp[192];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 "
             "scripts/make_pretrained_fixture.py %s", dir);
    int rc = system(cmd);
    CHECK(rc == 0, "%s: exit %d", cmd, rc);
    snprintf(refp, sizeof refp, "%s/reference.txt", dir);
    FILE *f = fopen(refp, "r");
    bool ok = rc == 0 && f &&
              fscanf(f, "f32 %lf bf16 %lf", &ref_f32, &ref_bf16) == 2;
    if (f) fclose(f);
    CHECK(ok, "no reference losses in %s", refp);
    if (!ok) dir[0] = '\0';
    return ok;
}

/* Field `key` of the JSON Lines record of step `step` in path (NAN when
 * absent). */
static double json_at(const char *path, int step, const char *key) {
    static char log[OUT_CAP];
    slurp(path, log, sizeof log);
    double v = NAN;
    for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        const cJSON *s = cJSON_GetObjectItem(o, "step");
        const cJSON *x = cJSON_GetObjectItem(o, key);
        if (cJSON_IsNumber(s) && s->valueint == step && cJSON_IsNumber(x))
            v = x->valuedouble;
        cJSON_Delete(o);
    }
    return v;
}

static void path_in(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", dir, name);
}

/* Both layouts load without --model and start at PyTorch's loss.
 * Tolerance: delta computes in fp32, the reference in float64 from the
 * same values; 2e-6 relative is ~17 float32 ulps of a loss of 6.2 (the
 * logits are sums of 64 products). */
static void test_first_loss_matches_pytorch(void) {
    if (!make_fixture())
        TEST_SKIP("no PyTorch in /usr/bin/python3 (package python3-torch)");
    char tokens[192];
    path_in(tokens, sizeof tokens, "tokens.bin");
    const struct {
        const char *file;
        double *ref;
    } cases[] = {{"hub/model.safetensors", &ref_f32},
                 {"bf16/model.safetensors", &ref_bf16}};
    for (int i = 0; i < 2; i++) {
        char model[192], json[192];
        path_in(model, sizeof model, cases[i].file);
        path_in_tmp(json, sizeof json, "first.jsonl");
        TRAIN("--load", model, "--data", tokens, "--no-shuffle", "--batch",
              "4", "--seq-len", "32", "--steps", "1", "--dropout", "0",
              "--json", json);
        CHECK(res.status == 0, "%s: status %d: %.400s", model, res.status,
              res.err);
        /* the Hub's names, its mask buffers and the tied head: no warning */
        CHECK(!strstr(res.err, "warning"), "%s: %.400s", model, res.err);
        double l = json_at(json, 1, "loss");
        CHECK(fabs(l - *cases[i].ref) <= 2e-6 * *cases[i].ref,
              "%s: first loss %.7f, PyTorch's %.7f", model, l,
              *cases[i].ref);
        printf("  %s: first loss %.7f, PyTorch %.7f\n", cases[i].file, l,
               *cases[i].ref);
    }
    /* the two references differ (bf16 weights), so the check can fail */
    CHECK(ref_f32 != ref_bf16);
}

/* A validation loss before the first step (llm.c's step 0), after every
 * second step and after the last. Before training it is the first
 * training batch's loss exactly (the same batch, no dropout: eval mode
 * computes the same ops); training lowers it. */
static void test_validation(void) {
    if (!make_fixture())
        TEST_SKIP("no PyTorch in /usr/bin/python3 (package python3-torch)");
    char model[192], tokens[192], json[192];
    path_in(model, sizeof model, "hub/model.safetensors");
    path_in(tokens, sizeof tokens, "tokens.bin");
    path_in_tmp(json, sizeof json, "val.jsonl");
    TRAIN("--load", model, "--data", tokens, "--no-shuffle", "--batch", "4",
          "--seq-len", "32", "--steps", "5", "--dropout", "0", "--val-data",
          tokens, "--val-every", "2", "--eval-batches", "1", "--lr", "1e-2",
          "--json", json);
    CHECK(res.status == 0, "status %d: %.400s", res.status, res.err);
    double first = json_at(json, 1, "loss");
    double v0 = json_at(json, 0, "val_loss");
    CHECK((float)v0 == (float)first, "val loss %.9g before training, the "
          "first batch's loss %.9g", v0, first);
    for (int step = 1; step <= 5; step++) {
        double v = json_at(json, step, "val_loss");
        CHECK(isnan(v) == (step % 2 && step != 5), "step %d: val loss %g",
              step, v);
    }
    CHECK(json_at(json, 5, "val_loss") < v0 - 0.01, "val loss %.6f after 5 "
          "steps, %.6f before", json_at(json, 5, "val_loss"), v0);
    CHECK(strstr(res.err, "step 0: val loss") &&
              strstr(res.err, "step 4: val loss"),
          "%.600s", res.err);
    CHECK(strstr(res.out, "val loss") != NULL, "%.400s", res.out);
}

/* Fine-tuning the pretrained model inside 60% of keep's peak under every
 * policy: the same weights as keep, bit for bit; the result samples. */
static void test_budget_and_sample(void) {
    if (!make_fixture())
        TEST_SKIP("no PyTorch in /usr/bin/python3 (package python3-torch)");
    char model[192], tokens[192], keep[192], tight[192];
    path_in(model, sizeof model, "bf16/model.safetensors");
    path_in(tokens, sizeof tokens, "tokens.bin");
    path_in_tmp(keep, sizeof keep, "ft_keep.safetensors");
    path_in_tmp(tight, sizeof tight, "ft_delta.safetensors");
    TRAIN("--load", model, "--data", tokens, "--batch", "4", "--seq-len",
          "32", "--steps", "6", "--seed", "5", "--save", keep, "--quiet");
    CHECK(res.status == 0, "keep: %.400s", res.err);
    /* every policy; validating between steps changes nothing of the
     * training */
    const char *policies[] = {"delta", "dtr", "swap", "checkpoint",
                              "capuchin", "autoswap"};
    /* at 80% every policy fits; at 60% a policy that cannot says so
     * (exit 3: dtr, swap and √n checkpointing move only activations, a
     * small part of this model's peak), and delta must not be one */
    const char *budgets[] = {"80%", "60%"};
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 6; i++) {
            unlink(tight);
            TRAIN("--load", model, "--data", tokens, "--batch", "4",
                  "--seq-len", "32", "--steps", "6", "--seed", "5", "--save",
                  tight, "--budget", budgets[b], "--policy", policies[i],
                  "--quiet", "--val-data", tokens, "--val-every", "2");
            CHECK(res.status == 0 || (res.status == 3 && b && i),
                  "%s at %s: status %d: %.400s", policies[i], budgets[b],
                  res.status, res.err);
            if (res.status == 0) same_tensors(keep, tight, NULL);
        }
    const char *args[] = {"--load", tight, "--prompt-ids", "1,2,3",
                          "--tokens", "4", "--ids", NULL};
    run_cmd(&res, "sample", args);
    CHECK(res.status == 0, "sample: %.400s", res.err);
    int n = 0;
    for (char *p = strtok(res.out, " \n"); p; p = strtok(NULL, " \n")) n++;
    CHECK(n == 4, "sample wrote %d ids: %.200s", n, res.out);
}

static void test_bad_input(void) {
    char bad[192], txt[192], none[192];
    path_in_tmp(bad, sizeof bad, "bad.bin");
    path_in_tmp(txt, sizeof txt, "notes.txt");
    path_in_tmp(none, sizeof none, "none.safetensors");
    CHECK(write_text(bad, "this is not an llm.c token file, it is text"));
    CHECK(write_text(txt, "a few words of text for a byte-level model, and "
                          "some more so that it holds a window or two."));
    FAILS(2, "magic", "--model", "gpt2-tiny", "--data", bad, "--steps", "1");
    FAILS(2, "magic", "--model", "gpt2-tiny", "--data", txt, "--val-data",
          bad, "--steps", "1");
    FAILS(2, "--val-data", "--model", "gpt2-tiny", "--val-every", "2",
          "--steps", "1");
    FAILS(2, "language models", "--model", "mlp", "--val-data", txt,
          "--steps", "1");
    FAILS(2, "fewer than one batch", "--model", "gpt2-tiny", "--data", txt,
          "--val-data", txt, "--seq-len", "32", "--batch", "8", "--steps",
          "1");
    FAILS(2, "sim", "--model", "gpt2-tiny", "--backend", "sim",
          "--val-data", txt, "--steps", "1");
    FAILS(2, "validate nothing", "--model", "gpt2-tiny", "--data", txt,
          "--val-data", txt, "--seq-len", "8", "--eval-batches", "0",
          "--steps", "1");
    /* a file that says nothing of its model, without --model */
    const delta_st_entry e = {"w", "F32", 1, {2}, (float[]){1, 2}};
    CHECK(delta_st_write(none, &e, 1, NULL, 0, NULL, 0) == DELTA_OK);
    FAILS(2, "cannot tell the model", "--load", none, "--steps", "1");
    FAILS(2, "no model given", "--steps", "1");
    if (!make_fixture()) return;
    /* token ids at or above the model's vocab: the index is named */
    char model[192], tokens[192];
    path_in(model, sizeof model, "hub/model.safetensors");
    path_in(tokens, sizeof tokens, "tokens.bin");
    FAILS(2, "token", "--load", model, "--data", tokens, "--vocab", "100",
          "--steps", "1");
    /* without --seq-len, the file's 128 positions cap the length */
    TRAIN("--load", model, "--data", tokens, "--steps", "1", "--batch", "2",
          "--quiet");
    CHECK(res.status == 0, "%.400s", res.err);
}

int main(int argc, char **argv) {
    if (!cli_setup(argc, argv, "delta_test_finetune")) return 1;
    TEST_RUN(test_first_loss_matches_pytorch);
    TEST_RUN(test_validation);
    TEST_RUN(test_budget_and_sample);
    TEST_RUN(test_bad_input);
    cli_cleanup();
    TEST_MAIN_END();
}
