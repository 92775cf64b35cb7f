/* `delta sample` (tools/cmd_sample.c), run as a child process:
 *  - greedy decoding equals PyTorch's greedy decoding of the same
 *    checkpoint (scripts/sample_reference.py, a reference GPT-2 module run
 *    on exactly the context's tokens, no padding), with a context shorter
 *    than the text so the window slides (skipped without Debian's
 *    python3-torch);
 *  - a seed gives the same text every time, another seed another text,
 *    with the GPT-2 tokenizer of tests/fixtures on a model trained a few
 *    steps; the printed ids decode to the printed text;
 *  - a file in Hugging Face's layout without delta's metadata takes its
 *    configuration from its shapes;
 *  - bad input exits 2 with a message, a failed write exits 1. */
#include "cli_run.h"
#include "delta/delta.h"

static const char *tokenizer_json = "tests/fixtures/gpt2_tokenizer.json";

#define SAMPLE(...)                                                        \
    do {                                                                   \
        const char *a_[] = {__VA_ARGS__, NULL};                            \
        run_cmd(&res, "sample", a_);                                       \
    } while (0)

/* A gpt2-tiny (2 layers, width 32, 2 heads, vocab 256, 64 positions) with
 * weights drawn N(0, 0.5) from the test's generator (layer norms' weights
 * 1): random enough that greedy decoding does not repeat one token and
 * the best two logits stay apart (the reference prints the smallest gap),
 * written with delta's metadata as `delta train --save` writes it. */
static bool write_random_gpt2(const char *path) {
    delta_ctx *ctx = delta_ctx_new();
    delta_model m;
    delta_model_config cfg = {.name = "gpt2-tiny", .batch = 1, .seq_len = 8,
                              .hidden = 32, .positions = 64};
    if (delta_model_build(ctx, &cfg, &m) != DELTA_OK) {
        delta_ctx_free(ctx);
        return false;
    }
    delta_st_entry e[64];
    float *bufs[64];
    int n = 0;
    test_rng_seed(20);
    for (int i = 0; i < delta_ctx_n_tensors(ctx) && n < 64; i++) {
        const delta_tensor *t = delta_ctx_tensor(ctx, i);
        if (delta_tensor_kind_of(t) != DELTA_KIND_PARAM) continue;
        int64_t k = delta_tensor_numel(t);
        bufs[n] = malloc((size_t)k * sizeof(float));
        const char *name = delta_tensor_name(t);
        bool ln_weight = strstr(name, "ln_") && strstr(name, ".weight");
        for (int64_t j = 0; j < k; j++) {
            float u1 = test_rng_f(1e-6f, 1), u2 = test_rng_f(0, 1);
            float g = sqrtf(-2 * logf(u1)) * cosf(6.2831853f * u2);
            bufs[n][j] = ln_weight ? 1.0f : 0.5f * g;
        }
        e[n] = (delta_st_entry){.name = name, .st_dtype = "F32",
                                .ndim = delta_tensor_ndim(t), .data = bufs[n]};
        for (int d = 0; d < e[n].ndim; d++) e[n].shape[d] = delta_tensor_dim(t, d);
        n++;
    }
    const char *meta[] = {"format", "pt", "model", "gpt2-tiny", "layers", "2",
                          "hidden", "32", "heads", "2", "vocab", "256",
                          "positions", "64"};
    char err[256];
    bool ok = delta_st_write(path, e, n, meta, 7, err, sizeof err) == DELTA_OK;
    if (!ok) fprintf(stderr, "  %s\n", err);
    for (int i = 0; i < n; i++) free(bufs[i]);
    delta_ctx_free(ctx);
    return ok;
}

/* Trims a trailing newline of s in place. */
static char *chomp(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' ')) s[--n] = '\0';
    return s;
}

static void test_greedy_matches_pytorch(void) {
    char ck[128];
    path_in_tmp(ck, sizeof ck, "random_gpt2.safetensors");
    CHECK(write_random_gpt2(ck), "cannot write %s", ck);
    const char *prompt = "72,101,108,108,111,44,32";
    static char mine[2][4096];
    const char *ctxs[2] = {"64", "6"}; /* all of it; a window that slides */
    for (int c = 0; c < 2; c++) {
        SAMPLE("--load", ck, "--prompt-ids", prompt, "--tokens", "24",
               "--top-k", "1", "--seq-len", ctxs[c]);
        CHECK(res.status == 0, "greedy, context %s: status %d: %s", ctxs[c],
              res.status, res.err);
        snprintf(mine[c], sizeof mine[c], "%s", chomp(res.out));
        if (c == 1)
            CHECK(strstr(res.err, "warning: the prompt is 7 tokens, longer "
                                  "than the context of 6"),
                  "no warning of the long prompt: %.300s", res.err);
    }
    /* not one token over and over */
    int distinct = 0;
    for (int id = 0; id < 256; id++) {
        char pat[16];
        snprintf(pat, sizeof pat, " %d ", id);
        char padded[4200];
        snprintf(padded, sizeof padded, " %s ", mine[0]);
        distinct += strstr(padded, pat) != NULL;
    }
    CHECK(distinct >= 4, "greedy wrote %d distinct tokens: %s", distinct,
          mine[0]);
    if (!have_pytorch())
        TEST_SKIP("no PyTorch in /usr/bin/python3 (package python3-torch)");
    for (int c = 0; c < 2; c++) {
        char cmd[1024], log[128], out[128];
        static char ref[4096], why[4096];
        path_in_tmp(log, sizeof log, "reference.err");
        path_in_tmp(out, sizeof out, "reference.out");
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 scripts/sample_reference.py "
                 "%s --prompt-ids %s --tokens 24 --seq-len %s >%s 2>%s", ck,
                 prompt, ctxs[c], out, log);
        int rc = system(cmd);
        slurp(out, ref, sizeof ref);
        slurp(log, why, sizeof why);
        printf("  context %s: %s; PyTorch's %s\n", ctxs[c], mine[c], chomp(why));
        CHECK(rc == 0 && !strcmp(chomp(ref), mine[c]),
              "context %s: delta's greedy ids\n    %s\n  PyTorch's\n    %s\n"
              "  (%d; %s)", ctxs[c], mine[c], ref, rc, why);
    }
}

/* A model trained a few steps on GPT-2's vocabulary, made once. */
static char trained[128];

static bool train_gpt2_vocab(void) {
    if (trained[0]) return true;
    path_in_tmp(trained, sizeof trained, "trained.safetensors");
    TRAIN("--model", "gpt2-tiny", "--hidden", "32", "--vocab", "50257",
          "--seq-len", "16", "--batch", "2", "--steps", "3", "--save", trained,
          "--quiet");
    CHECK(res.status == 0, "training: status %d: %s", res.status, res.err);
    if (res.status) trained[0] = '\0';
    return res.status == 0;
}

/* Encoding a prompt needs PCRE2 (decoding does not). */
static bool have_pcre2(void) { return strstr(delta_build_features(), "pcre2"); }

static void test_seed_is_deterministic(void) {
    if (!have_pcre2()) TEST_SKIP("built without PCRE2: no --prompt");
    if (!train_gpt2_vocab()) return;
    static char first[OUT_CAP], other[OUT_CAP];
    SAMPLE("--load", trained, "--tokenizer", tokenizer_json, "--prompt",
           "Hello, world", "--tokens", "12", "--top-k", "40", "--seed", "7",
           "--ids");
    CHECK(res.status == 0, "status %d: %s", res.status, res.err);
    memcpy(first, res.out, sizeof first);
    CHECK(!strncmp(first, "Hello, world", 12), "the prompt is not printed "
          "first: %.200s", first);
    SAMPLE("--load", trained, "--tokenizer", tokenizer_json, "--prompt",
           "Hello, world", "--tokens", "12", "--top-k", "40", "--seed", "7",
           "--ids");
    CHECK(res.status == 0 && !strcmp(res.out, first),
          "seed 7 twice:\n%s\n%s", first, res.out);
    SAMPLE("--load", trained, "--tokenizer", tokenizer_json, "--prompt",
           "Hello, world", "--tokens", "12", "--top-k", "40", "--seed", "8",
           "--ids");
    memcpy(other, res.out, sizeof other);
    CHECK(res.status == 0 && strcmp(other, first),
          "seeds 7 and 8 wrote the same: %s", first);

    /* the ids line decodes to the text after the prompt */
    char *ids_line = strstr(first, "\nids:");
    CHECK(ids_line, "no ids line: %s", first);
    if (!ids_line) return;
    int32_t ids[64];
    size_t n = 0;
    for (char *p = ids_line + 5; n < 64;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        ids[n++] = (int32_t)v;
        p = end;
    }
    CHECK(n == 12, "%zu ids: %s", n, ids_line);
    char err[512], text[2048];
    delta_tokenizer *tok = delta_tokenizer_load(tokenizer_json, NULL, err,
                                                sizeof err);
    CHECK(tok, "%s", err);
    size_t len;
    if (tok && delta_tokenizer_decode(tok, ids, n, text, sizeof text, &len) ==
                   DELTA_OK) {
        *ids_line = '\0';
        CHECK(!strcmp(first + 12, text), "the ids decode to \"%s\", the text "
              "after the prompt is \"%s\"", text, first + 12);
    }
    delta_tokenizer_free(tok);

    /* greedy is one text whatever the seed */
    SAMPLE("--load", trained, "--tokenizer", tokenizer_json, "--tokens", "8",
           "--seed", "1");
    memcpy(other, res.out, sizeof other);
    CHECK(res.status == 0, "greedy: %d %s", res.status, res.err);
    SAMPLE("--load", trained, "--tokenizer", tokenizer_json, "--tokens", "8",
           "--seed", "2", "--top-k", "1");
    CHECK(res.status == 0 && !strcmp(res.out, other), "greedy with two seeds:"
          "\n%s\n%s", other, res.out);
}

static void test_bad_input(void) {
    if (!train_gpt2_vocab()) return;
    char ck[128], bad_tok[128], mlp[128];
    path_in_tmp(ck, sizeof ck, "random_gpt2.safetensors");
    write_random_gpt2(ck);
    path_in_tmp(bad_tok, sizeof bad_tok, "bad_tokenizer.json");
    write_text(bad_tok, "{\"model\": {\"type\": \"Unigram\"}}");
    path_in_tmp(mlp, sizeof mlp, "mlp.safetensors");
    TRAIN("--model", "mlp", "--steps", "0", "--data", "synthetic", "--save",
          mlp, "--quiet");
    const char *t = tokenizer_json;
    USAGE_FAILS(&res, "sample", "--load FILE is required", "--prompt-ids", "1");
    USAGE_FAILS(&res, "sample", "cannot load the checkpoint", "--load",
                "/no/such.safetensors", "--prompt-ids", "1");
    USAGE_FAILS(&res, "sample", "--tokens", "--load", ck, "--prompt-ids", "1",
                "--tokens", "0");
    USAGE_FAILS(&res, "sample", "--top-k", "--load", ck, "--prompt-ids", "1",
                "--top-k", "-1");
    USAGE_FAILS(&res, "sample", "--temperature", "--load", ck, "--prompt-ids",
                "1", "--temperature", "0");
    USAGE_FAILS(&res, "sample", "--prompt-ids '1,x'", "--load", ck,
                "--prompt-ids", "1,x");
    USAGE_FAILS(&res, "sample", "needs --tokenizer", "--load", ck, "--prompt",
                "hi");
    USAGE_FAILS(&res, "sample", "the prompt must be ids", "--load", ck);
    USAGE_FAILS(&res, "sample", "cannot open the tokenizer", "--load", trained,
                "--tokenizer", "/no/tokenizer.json");
    USAGE_FAILS(&res, "sample", "Unigram", "--load", trained, "--tokenizer",
                bad_tok);
    write_text(bad_tok, "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, "
               "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
               "\"merges\": []}}");
    USAGE_FAILS(&res, "sample", "no <|endoftext|> to start from", "--load",
                trained, "--tokenizer", bad_tok);
    USAGE_FAILS(&res, "sample", "does not fit model gpt2-tiny", "--load", ck,
                "--prompt-ids", "1", "--hidden", "64", "--heads", "2");
    USAGE_FAILS(&res, "sample", "holds a mlp: delta sample generates from GPT-2", "--load", mlp,
                "--prompt-ids", "1");
    USAGE_FAILS(&res, "sample", "outside the model's vocabulary of 256",
                "--load", ck, "--prompt-ids", "1,256");
    if (have_pcre2())
        USAGE_FAILS(&res, "sample", "(is the tokenizer the model's?)",
                    "--load", ck, "--tokenizer", t, "--prompt", "Hello");
    USAGE_FAILS(&res, "sample", "longer than the model's 64 positions",
                "--load", ck, "--prompt-ids", "1", "--seq-len", "65");
    USAGE_FAILS(&res, "sample", "sim has no data", "--load", ck,
                "--prompt-ids", "1", "--backend", "sim");
    USAGE_FAILS(&res, "sample", "unknown option", "--load", ck, "--prompt-ids",
                "1", "--budget", "50%");

    /* a Hugging Face-layout file (no delta metadata, here PyTorch's
     * tiny GPT-2 of scripts/make_checkpoint_fixture.py): the shapes give
     * the model but not its heads */
    const char *hf = "tests/fixtures/checkpoints/gpt2_torch.safetensors";
    USAGE_FAILS(&res, "sample", "give --heads", "--load", hf, "--prompt-ids",
                "1");
    SAMPLE("--load", hf, "--prompt-ids", "1,2", "--tokens", "3", "--heads",
           "2");
    CHECK(res.status == 0 && strstr(res.err, "2 layers, width 32, 2 heads, "
                                             "vocab 256"),
          "a Hugging Face-layout file: status %d: %.300s", res.status, res.err);

    /* a write that fails: exit 1 (stderr is cut at the limit too) */
    run_fsize_limit = 8;
    SAMPLE("--load", ck, "--prompt-ids", "1,2", "--tokens", "40");
    run_fsize_limit = 0;
    CHECK(res.status == 1, "a failed write: status %d: %.300s", res.status,
          res.err);
}

int main(int argc, char **argv) {
    if (!cli_setup(argc, argv, "delta_test_sample")) return 1;
    TEST_RUN(test_greedy_matches_pytorch);
    TEST_RUN(test_seed_is_deterministic);
    TEST_RUN(test_bad_input);
    cli_cleanup();
    TEST_MAIN_END();
}
