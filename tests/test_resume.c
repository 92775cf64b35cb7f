/* Training checkpoints and --resume (tools/resume.c), through the built
 * delta:
 *  - N steps in one run save the same tensors, byte for byte (parameters,
 *    batch-norm state, optimizer state), as K steps + --resume + N - K
 *    steps: ResNet with SGD (momentum, running stats), GPT-2 with AdamW and
 *    dropout, with no budget and under delta, swap and dtr at 50-60% of the
 *    peak (the halves under different policies too), GPT-2 with SGD under
 *    swap then dtr at 50%, with --seq-len-range
 *    and with an epoch's partial last batch (resuming at the end of an
 *    epoch and just before its short batch);
 *  - a resume with other settings, of a model file, past --steps, of a
 *    file missing optimizer state, is refused with exit 2 and a message;
 *  - SIGKILL in the middle of a save (the test hook DELTA_TEST_SAVE_PAUSE
 *    stops it there) leaves the previous checkpoint whole and resumable,
 *    and the stale temporary does not disturb the next run; kills at
 *    random moments never leave a file that does not open;
 *  - a host store cap (--host-memory) that a later, longer step exceeds
 *    stops the run with exit 1 and a message naming the checkpoint left,
 *    which resumes to the uninterrupted result. */
#include <signal.h>

#include "cli_run.h"
#include "core/bf16.h"
#include "core/half.h"

/* The file's "step" metadata, -1 when it has none. */
static int64_t file_step(const char *path) {
    delta_st_file *f = delta_st_open(path, NULL, NULL, 0);
    const char *v = f ? delta_st_metadata(f, "step") : NULL;
    int64_t s = v ? strtoll(v, NULL, 10) : -1;
    delta_st_close(f);
    return s;
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

/* How many tensors of path start with prefix. */
static int count_prefixed(const char *path, const char *prefix) {
    delta_st_file *f = delta_st_open(path, NULL, NULL, 0);
    int n = 0;
    for (int i = 0; f && i < delta_st_count(f); i++)
        n += !strncmp(delta_st_at(f, i)->name, prefix, strlen(prefix));
    delta_st_close(f);
    return n;
}

/* ---- exactness ------------------------------------------------------------ */

#define RESNET "--model", "resnet18", "--width", "4", "--image-size", "16", \
               "--channels", "1", "--classes", "10", "--data", "synthetic", \
               "--batch", "4", "--quiet"
#define GPT2 "--model", "gpt2-tiny", "--link-bw", "0", "--quiet"

/* ResNet-18 with SGD: 10 steps == 5 + 5, with no budget and under delta
 * at 50% (both halves), and the first half under keep, the second under
 * delta. */
static void test_resnet_sgd_exact(void) {
    char full[128], half[128], a[128], b[128];
    path_in_tmp(full, sizeof full, "rn_full.safetensors");
    path_in_tmp(half, sizeof half, "rn_half.safetensors");
    path_in_tmp(a, sizeof a, "rn_a.safetensors");
    path_in_tmp(b, sizeof b, "rn_b.safetensors");
    TRAIN(RESNET, "--steps", "10", "--checkpoint-every", "10", "--save",
          full);
    CHECK(res.status == 0, "10 steps: %d %s", res.status, res.err);
    CHECK(count_prefixed(full, "optimizer.conv1.weight.momentum_buffer") ==
                  1 &&
              count_prefixed(full, "optimizer.bn1.weight.momentum_buffer") ==
                  1,
          "no momentum buffers in %s", full);
    TRAIN(RESNET, "--steps", "5", "--checkpoint-every", "5", "--save", half);
    CHECK(res.status == 0 && file_step(half) == 5, "5 steps: %d %s",
          res.status, res.err);
    TRAIN(RESNET, "--steps", "10", "--resume", half, "--save", a);
    CHECK(res.status == 0, "resume: %d %s", res.status, res.err);
    CHECK(file_step(a) == 10, "resumed file at step %lld",
          (long long)file_step(a));
    same_tensors(full, a, NULL);
    TRAIN(RESNET, "--steps", "5", "--checkpoint-every", "5", "--save", half,
          "--budget", "50%", "--policy", "delta");
    CHECK(res.status == 0, "5 steps at 50%%: %d %s", res.status, res.err);
    TRAIN(RESNET, "--steps", "10", "--resume", half, "--save", b, "--budget",
          "50%");
    CHECK(res.status == 0, "resume at 50%%: %d %s", res.status, res.err);
    same_tensors(full, b, NULL);
}

/* GPT-2 with AdamW and dropout: 4 steps == 2 + 2 with no budget, under
 * delta at 50%, and with the halves under swap at 50% and dtr at 60%
 * either way round. */
static void test_gpt2_adamw_exact(void) {
    char full[128], half[128], out[128];
    path_in_tmp(full, sizeof full, "g_full.safetensors");
    path_in_tmp(half, sizeof half, "g_half.safetensors");
    path_in_tmp(out, sizeof out, "g_out.safetensors");
    TRAIN(GPT2, "--steps", "4", "--checkpoint-every", "4", "--save", full);
    CHECK(res.status == 0, "4 steps: %d %s", res.status, res.err);
    CHECK(count_prefixed(full, "optimizer.") ==
              2 * count_prefixed(full, "transformer."),
          "expected exp_avg and exp_avg_sq for every parameter");
    static const char *const plan[][4] = {
        /* first half's policy, budget; the resumed half's */
        {"keep", "unlimited", "keep", "unlimited"},
        {"delta", "50%", "delta", "50%"},
        {"swap", "50%", "dtr", "60%"},
        {"dtr", "60%", "swap", "50%"},
    };
    for (int i = 0; i < 4; i++) {
        remove(out);
        TRAIN(GPT2, "--steps", "2", "--checkpoint-every", "2", "--save",
              half, "--policy", plan[i][0], "--budget", plan[i][1]);
        CHECK(res.status == 0, "%s %s, 2 steps: %d %s", plan[i][0],
              plan[i][1], res.status, res.err);
        TRAIN(GPT2, "--steps", "4", "--resume", half, "--save", out,
              "--policy", plan[i][2], "--budget", plan[i][3]);
        CHECK(res.status == 0, "resume under %s %s: %d %s", plan[i][2],
              plan[i][3], res.status, res.err);
        same_tensors(full, out, NULL);
    }
}

/* SGD under the peers at 50%: GPT-2 with --optimizer sgd (its momentum
 * buffers are smaller than AdamW's moments, so dtr fits 50% too), the
 * first half under swap, the second under dtr. */
static void test_gpt2_sgd_peers_exact(void) {
    char full[128], half[128], out[128];
    path_in_tmp(full, sizeof full, "gs_full.safetensors");
    path_in_tmp(half, sizeof half, "gs_half.safetensors");
    path_in_tmp(out, sizeof out, "gs_out.safetensors");
    TRAIN(GPT2, "--optimizer", "sgd", "--steps", "4", "--checkpoint-every",
          "4", "--save", full);
    CHECK(res.status == 0, "4 steps: %d %s", res.status, res.err);
    TRAIN(GPT2, "--optimizer", "sgd", "--steps", "2", "--checkpoint-every",
          "2", "--save", half, "--policy", "swap", "--budget", "50%");
    CHECK(res.status == 0, "swap 50%%, 2 steps: %d %s", res.status, res.err);
    TRAIN(GPT2, "--optimizer", "sgd", "--steps", "4", "--resume", half,
          "--save", out, "--policy", "dtr", "--budget", "50%");
    CHECK(res.status == 0, "resume under dtr 50%%: %d %s", res.status,
          res.err);
    same_tensors(full, out, NULL);
    CHECK(count_prefixed(out, "optimizer.") ==
              count_prefixed(out, "transformer."),
          "expected a momentum buffer for every parameter");
}

/* --seq-len-range: the lengths are drawn from (seed, step counter), so the
 * resumed run must draw the rest of the same sequence. */
static void test_seq_len_range_exact(void) {
    char full[128], half[128], out[128], ja[128], jb[128];
    path_in_tmp(full, sizeof full, "r_full.safetensors");
    path_in_tmp(half, sizeof half, "r_half.safetensors");
    path_in_tmp(out, sizeof out, "r_out.safetensors");
    path_in_tmp(ja, sizeof ja, "r_full.jsonl");
    path_in_tmp(jb, sizeof jb, "r_res.jsonl");
    TRAIN(GPT2, "--seq-len-range", "16:48", "--steps", "6",
          "--checkpoint-every", "6", "--save", full, "--json", ja);
    CHECK(res.status == 0, "6 steps: %d %s", res.status, res.err);
    TRAIN(GPT2, "--seq-len-range", "16:48", "--steps", "3",
          "--checkpoint-every", "3", "--save", half, "--budget", "50%");
    CHECK(res.status == 0, "3 steps: %d %s", res.status, res.err);
    TRAIN(GPT2, "--seq-len-range", "16:48", "--steps", "6", "--resume", half,
          "--save", out, "--budget", "50%", "--json", jb);
    CHECK(res.status == 0, "resume: %d %s", res.status, res.err);
    same_tensors(full, out, NULL);
    /* the resumed log numbers its steps 4..6 with the same lengths */
    cJSON *oa[8], *ob[8];
    int na = read_json_lines(ja, oa, 8), nb = read_json_lines(jb, ob, 8);
    CHECK(na == 7 && nb == 4, "%d and %d JSON lines", na, nb);
    for (int i = 0; na == 7 && nb == 4 && i < 3; i++)
        CHECK(num(ob[i], "step") == 4 + i &&
                  num(ob[i], "seq_len") == num(oa[3 + i], "seq_len"),
              "resumed line %d: step %g, length %g (want %d, %g)", i,
              num(ob[i], "step"), num(ob[i], "seq_len"), 4 + i,
              num(oa[3 + i], "seq_len"));
    for (int i = 0; i < na; i++) cJSON_Delete(oa[i]);
    for (int i = 0; i < nb; i++) cJSON_Delete(ob[i]);
}

/* 10 images in batches of 4: batches 4, 4, 2 | 4, 4, 2 | 4. Resuming
 * after step 3 starts a new epoch (the position is at the epoch's end);
 * after step 5 the next batch is the short one. */
static void test_partial_batch_exact(void) {
    char dir[128];
    make_tiny_idx(dir, sizeof dir, "tiny-idx");
#define TINY "--model", "resnet18", "--width", "4", "--data", dir, "--batch", \
             "4", "--eval-batches", "0", "--quiet"
    char full[128], half[128], out[128];
    path_in_tmp(full, sizeof full, "p_full.safetensors");
    path_in_tmp(half, sizeof half, "p_half.safetensors");
    path_in_tmp(out, sizeof out, "p_out.safetensors");
    TRAIN(TINY, "--steps", "7", "--checkpoint-every", "7", "--save", full);
    CHECK(res.status == 0, "7 steps: %d %s", res.status, res.err);
    const char *at[] = {"3", "5"};
    for (int i = 0; i < 2; i++) {
        TRAIN(TINY, "--steps", at[i], "--checkpoint-every", at[i], "--save",
              half, "--policy", "autoswap", "--budget", "60%");
        CHECK(res.status == 0, "%s steps: %d %s", at[i], res.status,
              res.err);
        delta_st_file *f = delta_st_open(half, NULL, NULL, 0);
        const char *idx = f ? delta_st_metadata(f, "data_index") : NULL;
        CHECK(idx && !strcmp(idx, i == 0 ? "10" : "8"),
              "data_index after %s steps: %s", at[i], idx ? idx : "none");
        delta_st_close(f);
        TRAIN(TINY, "--steps", "7", "--resume", half, "--save", out,
              "--budget", "50%");
        CHECK(res.status == 0, "resume at %s: %d %s", at[i], res.status,
              res.err);
        same_tensors(full, out, NULL);
    }
#undef TINY
}

/* PyTorch takes the training checkpoints of the tests above as
 * docs/CHECKPOINTS.md says: the model with load_state_dict(strict=True)
 * once the "optimizer." entries are set apart, those into torch.optim
 * (scripts/make_checkpoint_fixture.py --check does both). Skipped without
 * Debian's python3-torch. */
static void test_pytorch_takes_checkpoints(void) {
    if (!have_pytorch())
        TEST_SKIP("no PyTorch in /usr/bin/python3 (package python3-torch)");
    char files[300];
    snprintf(files, sizeof files, "%s/rn_full.safetensors %s/g_full.safetensors",
             tmpdir, tmpdir);
    static char out[4096];
    int rc = pytorch_check(files, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "of optimizer state, model resnet18") &&
              strstr(out, "of optimizer state, model gpt2-tiny"),
          "PyTorch check: %d %s", rc, out);
}

/* ---- refusals --------------------------------------------------------------- */

/* --save-dtype bf16 writes each F32 model tensor rounded to BF16 (nearest,
 * ties to even) and nothing else changed; --load widens it back exactly:
 * a run loading it and saving F32 at once holds the widened values. */
static void test_bf16_weights(void) {
    char f32[128], bf[128], back[128];
    path_in_tmp(f32, sizeof f32, "w_f32.safetensors");
    path_in_tmp(bf, sizeof bf, "w_bf16.safetensors");
    path_in_tmp(back, sizeof back, "w_back.safetensors");
    TRAIN(GPT2, "--steps", "2", "--save", f32);
    CHECK(res.status == 0, "%s", res.err);
    TRAIN(GPT2, "--steps", "2", "--save", bf, "--save-dtype", "bf16");
    CHECK(res.status == 0, "%s", res.err);
    TRAIN(GPT2, "--steps", "0", "--load", bf, "--save", back);
    CHECK(res.status == 0, "%s", res.err);
    delta_st_file *a = delta_st_open(f32, NULL, NULL, 0);
    delta_st_file *b = delta_st_open(bf, NULL, NULL, 0);
    delta_st_file *c = delta_st_open(back, NULL, NULL, 0);
    CHECK(a && b && c, "the three files open");
    int rounded = 0, bad = 0;
    for (int i = 0; a && b && c && i < delta_st_count(a); i++) {
        const delta_st_tensor *ta = delta_st_at(a, i);
        const delta_st_tensor *tb = delta_st_find(b, ta->name);
        const delta_st_tensor *tc = delta_st_find(c, ta->name);
        if (!tb || !tc) {
            bad++;
            continue;
        }
        if (strcmp(ta->st_dtype, "F32")) {
            bad += strcmp(tb->st_dtype, ta->st_dtype) != 0;
            continue;
        }
        if (strcmp(tb->st_dtype, "BF16") || strcmp(tc->st_dtype, "F32") ||
            tb->nbytes * 2 != ta->nbytes || tc->nbytes != ta->nbytes) {
            bad++;
            continue;
        }
        const float *fa = ta->data, *fc = tc->data;
        const uint16_t *hb = tb->data;
        for (size_t k = 0; k < ta->nbytes / 4; k++) {
            bad += hb[k] != delta_f32_to_bf16(fa[k]) ||
                   fc[k] != delta_bf16_to_f32(hb[k]);
        }
        rounded++;
    }
    CHECK(bad == 0 && rounded > 4, "%d tensors rounded, %d wrong", rounded,
          bad);
    delta_st_close(a);
    delta_st_close(b);
    delta_st_close(c);
    FAILS(2, "--save-dtype 'f16': use f32 or bf16", GPT2, "--steps", "1",
          "--save", bf, "--save-dtype", "f16");
}

/* F16 widens exactly: normal, subnormal, zero, infinity and NaN halves. */
static void test_f16_widening(void) {
    const struct { uint16_t h; float f; } cases[] = {
        {0x3c00, 1.0f}, {0xc000, -2.0f}, {0x7bff, 65504.0f},
        {0x0400, 6.103515625e-05f}, {0x0001, 5.9604644775390625e-08f},
        {0x03ff, 6.0975551605224609375e-05f}, {0x8000, -0.0f},
        {0x0000, 0.0f}, {0x3555, 0.333251953125f}, {0x7c00, INFINITY},
        {0xfc00, -INFINITY}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float got = delta_f16_to_f32(cases[i].h);
        CHECK(got == cases[i].f && signbit(got) == signbit(cases[i].f),
              "0x%04x: %.9g, want %.9g", cases[i].h, got, cases[i].f);
    }
    CHECK(isnan(delta_f16_to_f32(0x7e00)) && isnan(delta_f16_to_f32(0xfe01)));
}

/* A cosine schedule with warmup and clipping: 4 steps == 2 + 2 (the
 * second half under dtr at 60%: the schedule goes on from the session's
 * step); a resume with another schedule, clip or length is refused, and
 * a cosine decaying to --lr-min 1 (the lr tensor holding lr each step) is
 * the constant run's bits. */
#define SCHED "--lr-schedule", "cosine", "--warmup", "1", "--lr-min", "0.1", \
              "--grad-clip", "0.5"
static void test_schedule_resume(void) {
    char full[128], half[128], out[128], flat[128], plain[128];
    path_in_tmp(full, sizeof full, "s_full.safetensors");
    path_in_tmp(half, sizeof half, "s_half.safetensors");
    path_in_tmp(out, sizeof out, "s_out.safetensors");
    path_in_tmp(flat, sizeof flat, "s_flat.safetensors");
    path_in_tmp(plain, sizeof plain, "s_plain.safetensors");
    TRAIN(GPT2, SCHED, "--steps", "4", "--checkpoint-every", "4", "--save",
          full);
    CHECK(res.status == 0, "4 steps: %d %s", res.status, res.err);
    /* the first half: the 4-step schedule's run stopped at step 3 (the
     * test hook), its checkpoint of step 2 intact */
    setenv("DELTA_TEST_RANK_FAIL", "0:3", 1);
    TRAIN(GPT2, SCHED, "--steps", "4", "--checkpoint-every", "2", "--save",
          half);
    unsetenv("DELTA_TEST_RANK_FAIL");
    CHECK(res.status == 1 && file_step(half) == 2, "stopped at 3: %d %s",
          res.status, res.err);
    remove(out);
    TRAIN(GPT2, SCHED, "--steps", "4", "--resume", half, "--save", out,
          "--policy", "dtr", "--budget", "60%");
    CHECK(res.status == 0, "resume: %d %s", res.status, res.err);
    same_tensors(full, out, NULL);
    FAILS(2, "--lr-schedule: cosine in the checkpoint, linear in this run",
          GPT2, "--lr-schedule", "linear", "--warmup", "1", "--lr-min",
          "0.1", "--grad-clip", "0.5", "--steps", "4", "--resume", full);
    FAILS(2, "--grad-clip: 0.5 in the checkpoint, 1 in this run", GPT2,
          "--lr-schedule", "cosine", "--warmup", "1", "--lr-min", "0.1",
          "--grad-clip", "1", "--steps", "4", "--resume", full);
    FAILS(2, "--steps (the schedule's): 4 in the checkpoint, 6 in this run",
          GPT2, SCHED, "--steps", "6", "--resume", full);
    FAILS(2, "--lr-schedule: cosine in the checkpoint, constant in this run",
          GPT2, "--steps", "6", "--resume", full);
    TRAIN(GPT2, "--steps", "3", "--lr-schedule", "cosine", "--lr-min", "1",
          "--save", flat);
    CHECK(res.status == 0, "--lr-min 1: %d %s", res.status, res.err);
    TRAIN(GPT2, "--steps", "3", "--save", plain);
    CHECK(res.status == 0, "constant: %d %s", res.status, res.err);
    same_tensors(flat, plain, NULL);
}

static void test_resume_refusals(void) {
    const char *help[] = {"--help", NULL};
    run_tool(&res, true, help);
    CHECK(res.status == 0 && strstr(res.out, "--checkpoint-every N") &&
              strstr(res.out, "--resume FILE") &&
              strstr(res.out, "--host-memory SIZE"),
          "--help lacks the checkpoint options: %.300s", res.out);
    char ck[128], model[128], cut[128];
    path_in_tmp(ck, sizeof ck, "ref_ck.safetensors");
    path_in_tmp(model, sizeof model, "ref_model.safetensors");
    path_in_tmp(cut, sizeof cut, "ref_cut.safetensors");
    TRAIN(RESNET, "--steps", "2", "--checkpoint-every", "2", "--save", ck);
    CHECK(res.status == 0, "checkpoint: %d %s", res.status, res.err);
    TRAIN(RESNET, "--steps", "2", "--save", model);
    CHECK(res.status == 0, "model file: %d %s", res.status, res.err);
    CHECK(count_prefixed(model, "optimizer.") == 0,
          "a plain --save holds optimizer state");

    FAILS(2, "not a training checkpoint", RESNET, "--steps", "4",
          "--resume", model);
    FAILS(2, "--lr: 0.050000000000000003 in the checkpoint, 0.10000000000000001 in this run",
          RESNET, "--steps", "4", "--lr", "0.1", "--resume", ck);
    FAILS(2, "--seed: 0 in the checkpoint, 3 in this run", RESNET, "--steps",
          "4", "--seed", "3", "--resume", ck);
    FAILS(2, "--batch: 4 in the checkpoint, 2 in this run", "--model",
          "resnet18", "--width", "4", "--image-size", "16", "--channels",
          "1", "--classes", "10", "--data", "synthetic", "--batch", "2",
          "--steps", "4", "--resume", ck);
    FAILS(2, "--width: 4 in the checkpoint, 8 in this run", "--model",
          "resnet18", "--width", "8", "--image-size", "16", "--channels",
          "1", "--classes", "10", "--data", "synthetic", "--batch", "4",
          "--steps", "4", "--resume", ck);
    FAILS(2, "--precision: fp32 in the checkpoint, bf16 in this run",
          RESNET, "--precision", "bf16", "--steps", "4", "--resume", ck);
    FAILS(2, "must keep its fp32 masters exact", RESNET, "--steps", "4",
          "--resume", ck, "--save", ck, "--save-dtype", "bf16");
    FAILS(2, "--optimizer: sgd in the checkpoint, adamw in this run",
          RESNET, "--optimizer", "adamw", "--steps", "4", "--resume", ck);
    FAILS(2, "--model: resnet18 in the checkpoint, mlp in this run", "--model",
          "mlp", "--data", "synthetic", "--steps", "4", "--resume", ck);
    FAILS(2, "has trained 2 steps already", RESNET, "--steps", "1",
          "--resume", ck);
    FAILS(2, "give one", RESNET, "--steps", "4", "--resume", ck, "--load",
          ck);
    FAILS(2, "--checkpoint-every needs --save", RESNET, "--steps", "4",
          "--checkpoint-every", "2");
    FAILS(2, "--checkpoint-every", RESNET, "--checkpoint-every", "0",
          "--save", ck);
    FAILS(2, "sim backend", "--model", "gpt2-tiny", "--backend", "sim",
          "--steps", "4", "--resume", ck);
    FAILS(2, "/no/such/file", RESNET, "--steps", "4", "--resume",
          "/no/such/file");
    FAILS(2, "is not a regular file", RESNET, "--steps", "4", "--resume",
          tmpdir);
    const char *plan[] = {"plan", "--model", "mlp", "--resume", ck, NULL};
    run_tool(&res, false, plan);
    CHECK(res.status == 2 && strstr(res.err, "delta plan trains nothing"),
          "plan --resume: %d %s", res.status, res.err);

    /* a checkpoint without one momentum buffer */
    delta_st_file *f = delta_st_open(ck, NULL, NULL, 0);
    CHECK(f != NULL, "cannot open %s", ck);
    if (f) {
        int n = delta_st_count(f), k = 0, nm = 0;
        delta_st_entry *e = calloc((size_t)n, sizeof *e);
        const char *kv[64];
        nm = st_meta_pairs(f, kv);
        for (int i = 0; e && i < n; i++) {
            const delta_st_tensor *t = delta_st_at(f, i);
            if (!strcmp(t->name, "optimizer.fc.bias.momentum_buffer"))
                continue;
            e[k] = (delta_st_entry){.name = t->name, .st_dtype = t->st_dtype,
                                    .ndim = t->ndim, .data = t->data};
            memcpy(e[k].shape, t->shape, sizeof e[k].shape);
            k++;
        }
        CHECK(k == n - 1, "no optimizer.fc.bias.momentum_buffer in %s", ck);
        CHECK(delta_st_write(cut, e, k, kv, nm, NULL, 0) == DELTA_OK,
              "writing %s", cut);
        free(e);
        delta_st_close(f);
        FAILS(2, "optimizer.fc.bias.momentum_buffer: missing", RESNET,
              "--steps", "4", "--resume", cut);
        CHECK(strstr(res.err, "does not hold the sgd optimizer's state"),
              "%.400s", res.err);
    }
}

/* ---- SIGKILL in the middle of a save --------------------------------------- */

/* Starts `train args` with stderr on a pipe (*errfd) and env set. */
static pid_t spawn_train(const char *const *args, const char *env_key,
                         const char *env_val, int *errfd) {
    const char *argv[MAX_ARGS + 3];
    tool_argv(argv, true, args);
    int p[2];
    if (pipe(p) != 0) return -1;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        dup2(p[1], 2);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, 1);
        if (env_key) setenv(env_key, env_val, 1);
        execv(tool, (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    *errfd = p[0];
    return pid;
}

/* Reads fd until its text holds needle or it ends; true when found. */
static bool wait_for_text(int fd, const char *needle, char *buf,
                          size_t cap) {
    size_t n = 0;
    buf[0] = '\0';
    for (;;) {
        ssize_t k = read(fd, buf + n, cap - 1 - n);
        if (k <= 0) return false;
        n += (size_t)k;
        buf[n] = '\0';
        if (strstr(buf, needle)) return true;
        if (n == cap - 1) n = 0; /* keep reading; the needle is short */
    }
}

/* Checkpoints at steps 2, 4, 6, 8; the third save (step 6) is stopped
 * halfway through its data and killed. The step-4 checkpoint is whole,
 * the stale temporary is there, and a resume over the same path finishes
 * the run with the uninterrupted run's tensors and no temporary left. */
static void test_kill_mid_save(void) {
    char ck[128], tmp[256] = "", full[128];
    path_in_tmp(ck, sizeof ck, "kill.safetensors");
    path_in_tmp(full, sizeof full, "kill_full.safetensors");
    TRAIN(RESNET, "--steps", "8", "--checkpoint-every", "8", "--save", full);
    CHECK(res.status == 0, "8 steps: %d %s", res.status, res.err);

    const char *args[] = {RESNET, "--steps", "8", "--checkpoint-every", "2",
                          "--save", ck, NULL};
    int fd = -1;
    pid_t pid = spawn_train(args, "DELTA_TEST_SAVE_PAUSE", "3", &fd);
    CHECK(pid > 0, "fork");
    if (pid <= 0) return;
    static char buf[1 << 14];
    bool paused = wait_for_text(fd, "paused in save 3", buf, sizeof buf);
    CHECK(paused, "the save did not pause: %.400s", buf);
    /* "..., writing PATH.delta-XXXXXX.tmp": the save's unique temporary */
    const char *w = strstr(buf, "writing ");
    if (w) snprintf(tmp, sizeof tmp, "%.*s", (int)strcspn(w + 8, "\n"),
                    w + 8);
    CHECK(strstr(tmp, ".delta-") && strstr(tmp, ".tmp"),
          "not a unique temporary: '%s'", tmp);
    CHECK(exists(tmp), "no temporary %s while saving", tmp);
    kill(pid, SIGKILL);
    int ws = 0;
    waitpid(pid, &ws, 0);
    close(fd);
    CHECK(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL, "not killed: %d", ws);
    CHECK(file_step(ck) == 4, "after the kill %s is at step %lld, want 4",
          ck, (long long)file_step(ck));
    CHECK(exists(tmp), "SIGKILL cannot remove the temporary; expected it");
    TRAIN(RESNET, "--steps", "8", "--checkpoint-every", "2", "--resume", ck,
          "--save", ck);
    CHECK(res.status == 0, "resume after the kill: %d %s", res.status,
          res.err);
    CHECK(!exists(tmp), "%s left behind by a good run", tmp);
    same_tensors(full, ck, NULL);
}

/* Defect 11: the --json log is written in whole lines, so a run killed
 * mid-save leaves every step it trained logged and parseable (it was
 * written in 4 KiB blocks: nothing, or a half line); a resume with the same
 * --json cuts the killed run's lines after its checkpoint and appends, so
 * the log holds steps 1..N once each and the summary (it was truncated,
 * losing steps 1..K). */
static void test_json_log_across_resume(void) {
    char ck[128], log[128];
    path_in_tmp(ck, sizeof ck, "json_kill.safetensors");
    path_in_tmp(log, sizeof log, "json_kill.jsonl");
    const char *args[] = {RESNET, "--steps", "6", "--checkpoint-every", "2",
                          "--save", ck, "--json", log, NULL};
    int fd = -1;
    pid_t pid = spawn_train(args, "DELTA_TEST_SAVE_PAUSE", "2", &fd);
    CHECK(pid > 0, "fork");
    if (pid <= 0) return;
    static char buf[1 << 14];
    CHECK(wait_for_text(fd, "paused in save 2", buf, sizeof buf),
          "no pause: %.300s", buf);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(fd);
    cJSON *objs[16];
    int n = read_json_lines(log, objs, 16);
    CHECK(n == 4, "the killed run logged %d whole lines, want 4 (steps "
          "1-4)", n);
    for (int i = 0; i < n; i++) cJSON_Delete(objs[i]);
    TRAIN(RESNET, "--steps", "6", "--checkpoint-every", "2", "--resume", ck,
          "--save", ck, "--json", log);
    CHECK(res.status == 0, "resume: %d %.300s", res.status, res.err);
    n = read_json_lines(log, objs, 16);
    CHECK(n == 7, "%d lines after the resume, want 6 steps + summary", n);
    for (int i = 0; i < n; i++) {
        if (i < 6)
            CHECK(num(objs[i], "step") == i + 1, "line %d is step %g", i,
                  num(objs[i], "step"));
        else
            CHECK(cJSON_GetObjectItem(objs[i], "summary"), "no summary");
        cJSON_Delete(objs[i]);
    }
}

/* Defect 6: the data is identified by content. The same file by another
 * path resumes (it was refused: the path was compared as text); another
 * file of the same path and size does not (it was accepted, and the resume
 * was silently no longer exact). */
static void test_resume_data_by_content(void) {
    char txt[128], alias[160], ck[128], out[128];
    path_in_tmp(txt, sizeof txt, "notes.txt");
    snprintf(alias, sizeof alias, "%s/./notes.txt", tmpdir);
    path_in_tmp(ck, sizeof ck, "notes.safetensors");
    path_in_tmp(out, sizeof out, "notes_out.safetensors");
    char text[4096];
    for (size_t i = 0; i < sizeof text - 1; i++)
        text[i] = (char)('a' + (i * 7 + i / 13) % 26);
    text[sizeof text - 1] = '\0';
    CHECK(write_text(txt, text), "writing %s", txt);
    TRAIN(GPT2, "--data", txt, "--seq-len", "32", "--batch", "2", "--steps",
          "2", "--checkpoint-every", "2", "--save", ck);
    CHECK(res.status == 0, "first run: %d %.300s", res.status, res.err);
    TRAIN(GPT2, "--data", alias, "--seq-len", "32", "--batch", "2",
          "--steps", "3", "--resume", ck, "--save", out);
    CHECK(res.status == 0, "the same file by another path: %d %.300s",
          res.status, res.err);
    text[100] = text[100] == 'x' ? 'y' : 'x';
    CHECK(write_text(txt, text), "writing %s", txt);
    FAILS(2, "--data (its content)", GPT2, "--data", txt, "--seq-len", "32",
          "--batch", "2", "--steps", "3", "--resume", ck, "--save", out);
}

/* Kills at random moments of a run that saves after every step: whatever
 * the moment, the checkpoint (when one was written) opens, and resumes. */
static void test_kill_at_random(void) {
    char ck[128];
    path_in_tmp(ck, sizeof ck, "random_kill.safetensors");
    srand(7);
    int mid_run = 0;
    for (int round = 0; round < 4; round++) {
        remove(ck);
        /* far more steps than a second trains: killed mid-run */
        const char *args[] = {RESNET, "--steps", "1000", "--checkpoint-every",
                              "1", "--save", ck, NULL};
        int fd = -1;
        pid_t pid = spawn_train(args, NULL, NULL, &fd);
        CHECK(pid > 0, "fork");
        if (pid <= 0) return;
        usleep((useconds_t)(200000 + rand() % 800000));
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close(fd);
        if (!exists(ck)) continue;
        delta_status st;
        char err[256] = "";
        delta_st_file *f = delta_st_open(ck, &st, err, sizeof err);
        CHECK(f != NULL, "round %d: the checkpoint does not open: %s", round,
              err);
        delta_st_close(f);
        int64_t step = file_step(ck);
        mid_run += step > 0 && step < 1000;
        char steps[24];
        snprintf(steps, sizeof steps, "%lld", (long long)step + 1);
        TRAIN(RESNET, "--steps", steps, "--resume", ck, "--save", ck);
        CHECK(res.status == 0 && file_step(ck) == step + 1,
              "round %d: resuming step %lld: %d %s", round, (long long)step,
              res.status, res.err);
    }
    printf("# random kills: %d of 4 left a checkpoint of a run cut short\n",
           mid_run);
}

/* ---- host memory ------------------------------------------------------------ */

/* GPT-2 under swap at 50% with lengths drawn in 16:64: the host store a
 * step needs follows its length. An uncapped run's log gives each step's
 * need; a cap between what the early steps need and what a later step
 * needs stops the run at that step, after a checkpoint, which resumes
 * (uncapped) to the uncapped run's tensors. */
static void test_host_memory_mid_run(void) {
#define HOSTRUN GPT2, "--seq-len-range", "16:64", "--seed", "2", "--policy", \
                "swap", "--budget", "50%"
    char full[128], ck[128], out[128], j[128];
    path_in_tmp(full, sizeof full, "h_full.safetensors");
    path_in_tmp(ck, sizeof ck, "h_ck.safetensors");
    path_in_tmp(out, sizeof out, "h_out.safetensors");
    path_in_tmp(j, sizeof j, "h_full.jsonl");
    TRAIN(HOSTRUN, "--steps", "6", "--checkpoint-every", "6", "--save", full,
          "--json", j);
    CHECK(res.status == 0, "uncapped: %d %s", res.status, res.err);
    cJSON *o[8];
    int n = read_json_lines(j, o, 8);
    CHECK(n == 7, "%d JSON lines", n);
    double host[6], most = 0;
    int k = -1; /* 0-based step whose need exceeds every earlier one */
    for (int i = 0; n == 7 && i < 6; i++) {
        host[i] = num(o[i], "host_bytes");
        if (i >= 2 && k < 0 && host[i] > most) k = i;
        if (host[i] > most) most = host[i];
    }
    for (int i = 0; i < n; i++) cJSON_Delete(o[i]);
    CHECK(k >= 2, "no later step needs more host memory than steps 1-2");
    if (k < 2) return;
    double cap = 0;
    for (int i = 0; i < k; i++)
        if (host[i] > cap) cap = host[i];
    char cap_s[32];
    snprintf(cap_s, sizeof cap_s, "%.0f", cap);
    TRAIN(HOSTRUN, "--steps", "6", "--checkpoint-every", "2", "--save", ck,
          "--host-memory", cap_s);
    int64_t want = k / 2 * 2; /* the last checkpoint before step k + 1 */
    CHECK(res.status == 1 && strstr(res.err, "host store") &&
              strstr(res.err, "--host-memory") && strstr(res.err, "--resume"),
          "capped at %s: status %d, stderr %.600s", cap_s, res.status,
          res.err);
    char step_s[48];
    snprintf(step_s, sizeof step_s, "step %d:", k + 1);
    CHECK(strstr(res.err, step_s), "expected the failure at %s: %.400s",
          step_s, res.err);
    CHECK(file_step(ck) == want, "checkpoint at step %lld, want %lld",
          (long long)file_step(ck), (long long)want);
    TRAIN(HOSTRUN, "--steps", "6", "--resume", ck, "--save", out);
    CHECK(res.status == 0, "resume: %d %s", res.status, res.err);
    same_tensors(full, out, NULL);
    FAILS(2, "--host-memory", HOSTRUN, "--steps", "1", "--host-memory", "0");
    FAILS(2, "--host-memory", HOSTRUN, "--steps", "1", "--host-memory",
          "lots");
#undef HOSTRUN
}

int main(int argc, char **argv) {
    if (!cli_setup(argc, argv, "delta_test_resume")) return 1;
    TEST_RUN(test_resnet_sgd_exact);
    TEST_RUN(test_gpt2_adamw_exact);
    TEST_RUN(test_gpt2_sgd_peers_exact);
    TEST_RUN(test_seq_len_range_exact);
    TEST_RUN(test_partial_batch_exact);
    TEST_RUN(test_pytorch_takes_checkpoints);
    TEST_RUN(test_resume_refusals);
    TEST_RUN(test_schedule_resume);
    TEST_RUN(test_bf16_weights);
    TEST_RUN(test_f16_widening);
    TEST_RUN(test_kill_mid_save);
    TEST_RUN(test_json_log_across_resume);
    TEST_RUN(test_resume_data_by_content);
    TEST_RUN(test_kill_at_random);
    TEST_RUN(test_host_memory_mid_run);
    cli_cleanup();
    TEST_MAIN_END();
}
