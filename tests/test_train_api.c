/* The trainer as a library part (include/delta/train.h):
 *  - a run through the library saves the same bytes as `delta train` with
 *    the same settings (the tool is the library's trainer plus files), for
 *    an image model inside a budget with the delta policy and for a
 *    transformer whose sequence length changes per step (shapes switched
 *    inside a budget under dtr), and the budgeted run is bit-identical to
 *    keep with no budget;
 *  - the step callback is called once per step, with increasing step
 *    numbers, a finite loss and the step's figures; returning false stops
 *    the run after that step, and a second call goes on from there;
 *  - bad settings (an unknown model, policy, backend or GPU, no model, an
 *    infeasible budget, start after a plan alone) return their status and
 *    a message, never a crash or a trainer;
 *  - the sim backend gives simulated figures and no loss. */
#include "delta/delta.h"

#include "cli_run.h"

/* The settings both sides of a comparison share. */
static delta_train_config mlp_config(void) {
    delta_train_config c = delta_train_config_default();
    c.model.name = "mlp";
    c.model.batch = 32;
    c.data = "synthetic";
    c.seed = 3;
    c.eval_batches = 0;
    return c;
}

/* Every tensor of the file at path (but num_batches_tracked) equals the
 * tensor of that name in the trainer's session, byte for byte; how many
 * were compared into *n. The tool saves what the library trained, with
 * its own files (tools/checkpoint.c). */
static void same_as_file(delta_trainer *tr, const char *path, int *n) {
    *n = 0;
    delta_status st;
    char err[512];
    delta_st_file *f = delta_st_open(path, &st, err, sizeof err);
    CHECK(f, "%s: %s", path, err);
    if (!f) return;
    const delta_ctx *ctx = delta_trainer_ctx(tr);
    delta_session *s = delta_trainer_session(tr);
    for (int i = 0; i < delta_st_count(f); i++) {
        const delta_st_tensor *t = delta_st_at(f, i);
        if (strstr(t->name, "num_batches_tracked")) continue;
        /* GPT-2's head is tied: the file holds the embedding twice */
        const char *name = strcmp(t->name, "lm_head.weight")
                               ? t->name : "transformer.wte.weight";
        const delta_tensor *x = delta_ctx_find(ctx, name);
        CHECK(x && delta_tensor_bytes(x) == t->nbytes,
              "%s: not in the library's program, or another size", t->name);
        if (!x || delta_tensor_bytes(x) != t->nbytes) continue;
        void *buf = malloc(t->nbytes);
        CHECK(buf && delta_session_read(s, x, buf, t->nbytes) == DELTA_OK,
              "reading %s", t->name);
        if (buf)
            CHECK(!memcmp(buf, t->data, t->nbytes),
                  "%s: the library's values differ from the tool's",
                  t->name);
        free(buf);
        (*n)++;
    }
    delta_st_close(f);
}

/* Every parameter of two trainers' sessions, byte for byte. */
static void same_params(delta_trainer *a, delta_trainer *b) {
    int n;
    delta_tensor *const *pa = delta_trainer_persistent(a, &n);
    int nb;
    delta_tensor *const *pb = delta_trainer_persistent(b, &nb);
    CHECK(n == nb && n > 0, "%d and %d persistent tensors", n, nb);
    for (int i = 0; i < n && i < nb; i++) {
        size_t bytes = delta_tensor_bytes(pa[i]);
        void *x = malloc(bytes), *y = malloc(bytes);
        CHECK(x && y, "out of memory");
        if (x && y) {
            delta_session_read(delta_trainer_session(a), pa[i], x, bytes);
            delta_session_read(delta_trainer_session(b), pb[i], y, bytes);
            CHECK(!memcmp(x, y, bytes), "%s differs",
                  delta_tensor_name(pa[i]));
        }
        free(x);
        free(y);
    }
}

static void test_mlp_matches_cli(void) {
    delta_train_config c = mlp_config();
    c.budget = (delta_budget){.kind = DELTA_BUDGET_PERCENT, .percent = 85};
    delta_trainer *tr = NULL;
    char err[1024];
    delta_status st = delta_trainer_new(&c, &tr, err, sizeof err);
    CHECK(st == DELTA_OK && tr, "delta_trainer_new: %s", err);
    if (!tr) return;
    CHECK(!strcmp(delta_trainer_config(tr)->policy, "delta"),
          "a budget takes the delta policy, not %s",
          delta_trainer_config(tr)->policy);
    st = delta_trainer_train(tr, 6, NULL, NULL);
    CHECK(st == DELTA_OK, "train: %s", delta_trainer_error(tr));
    const delta_train_result *r = delta_trainer_result(tr);
    CHECK(r->steps_done == 6 && isfinite(r->final_loss),
          "%lld steps, loss %g", (long long)r->steps_done, r->final_loss);
    CHECK(r->peak_device_bytes <= delta_trainer_budget_bytes(tr) &&
              delta_trainer_budget_bytes(tr) <
                  delta_trainer_dry_plan(tr)->peak_bytes,
          "peak %zu, budget %zu, unconstrained %zu", r->peak_device_bytes,
          delta_trainer_budget_bytes(tr),
          delta_trainer_dry_plan(tr)->peak_bytes);

    char path[256];
    path_in_tmp(path, sizeof path, "mlp.safetensors");
    const char *args[] = {"--model", "mlp", "--batch", "32", "--data",
                          "synthetic", "--seed", "3", "--eval-batches", "0",
                          "--budget", "85%", "--steps", "6", "--quiet",
                          "--save", path, NULL};
    run_tool(&res, true, args);
    CHECK(res.status == 0, "delta train: %d: %s", res.status, res.err);
    int n = 0;
    if (res.status == 0) same_as_file(tr, path, &n);
    CHECK(n >= 4, "%d tensors compared", n);

    /* keep, no budget: the same bits */
    delta_train_config k = mlp_config();
    delta_trainer *keep = NULL;
    st = delta_trainer_new(&k, &keep, err, sizeof err);
    CHECK(st == DELTA_OK, "keep: %s", err);
    if (keep) {
        CHECK(!strcmp(delta_trainer_config(keep)->policy, "keep"));
        CHECK(delta_trainer_train(keep, 6, NULL, NULL) == DELTA_OK, "%s",
              delta_trainer_error(keep));
        same_params(tr, keep);
    }
    delta_trainer_free(keep);
    delta_trainer_free(tr);
}

/* What the callback saw. */
typedef struct seen {
    int calls;
    int64_t last_step;
    bool increasing, finite, stats;
    int64_t stop_at;            /* return false at this step; 0: never */
    int64_t seq_min, seq_max;   /* the lengths drawn */
} seen;

static bool on_step(const delta_train_step *s, void *ud) {
    seen *x = ud;
    x->calls++;
    x->increasing &= s->step == x->last_step + 1;
    x->last_step = s->step;
    x->finite &= isfinite(s->loss);
    x->stats &= s->stats != NULL && s->stats->step_s >= 0 && s->batch > 0 &&
                s->units > 0;
    if (s->seq_len < x->seq_min) x->seq_min = s->seq_len;
    if (s->seq_len > x->seq_max) x->seq_max = s->seq_len;
    return s->step != x->stop_at;
}

static seen seen_new(int64_t stop_at) {
    return (seen){.increasing = true, .finite = true, .stats = true,
                  .stop_at = stop_at, .seq_min = INT64_MAX};
}

static void test_callback_and_stop(void) {
    delta_train_config c = mlp_config();
    delta_trainer *tr = NULL;
    char err[1024];
    CHECK(delta_trainer_new(&c, &tr, err, sizeof err) == DELTA_OK, "%s", err);
    if (!tr) return;
    seen x = seen_new(0);
    CHECK(delta_trainer_train(tr, 5, on_step, &x) == DELTA_OK, "%s",
          delta_trainer_error(tr));
    CHECK(x.calls == 5 && x.last_step == 5 && x.increasing && x.finite &&
              x.stats,
          "%d calls, last step %lld, increasing %d, finite %d, stats %d",
          x.calls, (long long)x.last_step, x.increasing, x.finite, x.stats);

    /* false at step 7: two more steps, then the run stops there */
    x.stop_at = 7;
    x.calls = 0;
    CHECK(delta_trainer_train(tr, 10, on_step, &x) == DELTA_OK, "%s",
          delta_trainer_error(tr));
    CHECK(x.calls == 2 && x.last_step == 7 && x.increasing,
          "stopped: %d calls, last step %lld", x.calls,
          (long long)x.last_step);
    CHECK(delta_trainer_result(tr)->steps_done == 7, "%lld steps done",
          (long long)delta_trainer_result(tr)->steps_done);
    /* and goes on from there */
    x.calls = 0;
    CHECK(delta_trainer_train(tr, 1, on_step, &x) == DELTA_OK);
    CHECK(x.calls == 1 && x.last_step == 8 && x.increasing,
          "after the stop: %d calls, step %lld", x.calls,
          (long long)x.last_step);
    delta_trainer_free(tr);
}

/* GPT-2 tiny with a sequence length drawn per step, inside a budget under
 * dtr: the library switches sessions between shapes as the tool does. */
static void test_shapes_match_cli(void) {
    delta_train_config c = delta_train_config_default();
    c.model.name = "gpt2-tiny";
    c.model.batch = 4;
    c.seq_len_min = 16;
    c.seq_len_max = 128;
    c.seed = 5;
    c.policy = "dtr";
    c.budget = (delta_budget){.kind = DELTA_BUDGET_PERCENT, .percent = 60};
    delta_trainer *tr = NULL;
    char err[1024];
    CHECK(delta_trainer_new(&c, &tr, err, sizeof err) == DELTA_OK, "%s", err);
    if (!tr) return;
    seen x = seen_new(0);
    CHECK(delta_trainer_train(tr, 6, on_step, &x) == DELTA_OK, "%s",
          delta_trainer_error(tr));
    const delta_train_result *r = delta_trainer_result(tr);
    CHECK(x.calls == 6 && x.increasing && x.finite, "%d calls", x.calls);
    CHECK(x.seq_min >= 16 && x.seq_max <= 128 && x.seq_min < x.seq_max &&
              r->shapes > 1 && r->programs >= r->shapes,
          "lengths %lld..%lld, %lld shapes, %lld programs",
          (long long)x.seq_min, (long long)x.seq_max, (long long)r->shapes,
          (long long)r->programs);

    char path[256];
    path_in_tmp(path, sizeof path, "gpt.safetensors");
    const char *args[] = {"--model", "gpt2-tiny", "--batch", "4",
                          "--seq-len-range", "16:128", "--seed", "5",
                          "--policy", "dtr", "--budget", "60%", "--steps",
                          "6", "--quiet", "--save", path, NULL};
    run_tool(&res, true, args);
    CHECK(res.status == 0, "delta train: %d: %s", res.status, res.err);
    int n = 0;
    if (res.status == 0) same_as_file(tr, path, &n);
    CHECK(n >= 10, "%d tensors compared", n);
    delta_trainer_free(tr);
}

/* new fails with want and a message holding needle, and no trainer. */
static void refused(const delta_train_config *c, delta_status want,
                    const char *needle) {
    delta_trainer *tr = (delta_trainer *)&tr; /* not NULL: must be set */
    char err[1024] = "";
    delta_status st = delta_trainer_new(c, &tr, err, sizeof err);
    CHECK(st == want && tr == NULL && strstr(err, needle),
          "%s: %s (want %s), trainer %p, message '%s'", needle,
          delta_status_name(st), delta_status_name(want), (void *)tr, err);
    delta_trainer_free(st == DELTA_OK ? tr : NULL);
}

static void test_bad_settings(void) {
    delta_train_config c = mlp_config();
    c.model.name = "resnet7";
    refused(&c, DELTA_ERR_INVALID_ARG, "resnet7");
    c = mlp_config();
    c.model.name = NULL;
    refused(&c, DELTA_ERR_INVALID_ARG, "model");
    c = mlp_config();
    c.policy = "nope";
    /* the session's status for a policy it does not know */
    refused(&c, DELTA_ERR_UNSUPPORTED, "unknown policy 'nope'");
    c = mlp_config();
    c.backend = "tpu";
    refused(&c, DELTA_ERR_INVALID_ARG, "tpu");
    c = mlp_config();
    c.backend = "sim";
    c.gpu = "v200";
    refused(&c, DELTA_ERR_INVALID_ARG, "v200");
    c = mlp_config();
    c.budget = (delta_budget){.kind = DELTA_BUDGET_BYTES, .bytes = 4096};
    refused(&c, DELTA_ERR_BUDGET, "budget");
    c = mlp_config();
    c.budget = (delta_budget){.kind = DELTA_BUDGET_PERCENT, .percent = 1};
    refused(&c, DELTA_ERR_BUDGET, "budget");
    c = mlp_config();
    c.data = "/nonexistent/data";
    refused(&c, DELTA_ERR_IO, "/nonexistent/data");

    /* a plan alone: the dry plan, and start refused */
    c = mlp_config();
    c.plan_only = true;
    delta_trainer *tr = NULL;
    char err[512];
    CHECK(delta_trainer_plan(&c, &tr, err, sizeof err) == DELTA_OK, "%s",
          err);
    if (tr) {
        CHECK(delta_trainer_dry_plan(tr)->peak_bytes > 0 &&
              !delta_trainer_session(tr));
        CHECK(delta_trainer_start(tr) == DELTA_ERR_STATE &&
                  strstr(delta_trainer_error(tr), "plan"),
              "start after a plan alone: %s", delta_trainer_error(tr));
        CHECK(delta_trainer_train(tr, 1, NULL, NULL) == DELTA_ERR_STATE);
    }
    delta_trainer_free(tr);
    delta_trainer_free(NULL);
}

static void test_sim(void) {
    delta_train_config c = delta_train_config_default();
    c.model.name = "resnet50";
    c.backend = "sim";
    c.gpu = "a100-80g";
    c.budget = (delta_budget){.kind = DELTA_BUDGET_PERCENT, .percent = 50};
    delta_trainer *tr = NULL;
    char err[512];
    CHECK(delta_trainer_new(&c, &tr, err, sizeof err) == DELTA_OK, "%s", err);
    if (!tr) return;
    CHECK(delta_trainer_simulated(tr) && delta_trainer_gpu(tr) &&
          !delta_trainer_dataset(tr) && !delta_trainer_evaluates(tr));
    CHECK(delta_trainer_train(tr, 3, NULL, NULL) == DELTA_OK, "%s",
          delta_trainer_error(tr));
    const delta_train_result *r = delta_trainer_result(tr);
    CHECK(r->steps_done == 3 && isnan(r->final_loss) &&
              r->median_step_s > 0 &&
              r->peak_device_bytes <= delta_trainer_budget_bytes(tr),
          "sim: %lld steps, loss %g, step %g s, peak %zu of %zu",
          (long long)r->steps_done, r->final_loss, r->median_step_s,
          r->peak_device_bytes, delta_trainer_budget_bytes(tr));
    delta_trainer_free(tr);
}

int main(int argc, char **argv) {
    if (!cli_setup(argc, argv, "delta_test_train_api")) return 1;
    TEST_RUN(test_mlp_matches_cli);
    TEST_RUN(test_callback_and_stop);
    TEST_RUN(test_shapes_match_cli);
    TEST_RUN(test_bad_settings);
    TEST_RUN(test_sim);
    cli_cleanup();
    TEST_MAIN_END();
}
