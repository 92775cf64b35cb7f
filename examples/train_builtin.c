/* An example of delta's trainer as a library (delta/train.h): a built-in
 * model trained as `delta train` trains it, inside a device-memory budget
 * of half its unconstrained peak with the delta policy, on the cpu
 * backend, with a callback after every step.
 *
 *   train_builtin [MODEL [STEPS [BUDGET%]]]    default: resnet18 60 50
 *
 * A ResNet is built 8 channels wide at its first stage (torchvision's is
 * 64) and trained in batches of 32, so that a run takes seconds on a few
 * cores.
 *
 * The data is Fashion-MNIST when it is installed (Debian's package
 * dataset-fashion-mnist), else synthetic images of its shape; transformers
 * (gpt2-tiny, bert-tiny, ...) train on synthetic tokens. The callback
 * prints the loss every tenth step and the memory the step held; at the
 * end the test accuracy (Fashion-MNIST) and one summary line:
 *   steps N loss L peak P budget B unconstrained U
 * (bytes), exit 0; or why it failed, exit 1. */
#include <delta/delta.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Called after each step; returning false would stop the run there. */
static bool on_step(const delta_train_step *s, void *user_data) {
    int64_t every = *(const int64_t *)user_data;
    if (s->step == 1 || s->step % every == 0) {
        char held[32];
        printf("step %4lld  loss %.4f  %6.0f %s/s  device memory %s\n",
               (long long)s->step, s->loss,
               s->stats->step_s > 0 ? s->units / s->stats->step_s : 0,
               s->seq_len ? "tokens" : "samples",
               delta_format_bytes((double)s->stats->peak_device_bytes, held,
                                  sizeof held));
    }
    return true;
}

int main(int argc, char **argv) {
    delta_train_config cfg = delta_train_config_default();
    cfg.model.name = argc > 1 ? argv[1] : "resnet18";
    if (!strncmp(cfg.model.name, "resnet", 6)) {
        cfg.model.width = 8;
        cfg.model.batch = 32;
    }
    int64_t steps = argc > 2 ? atoll(argv[2]) : 60;
    double percent = argc > 3 ? atof(argv[3]) : 50;
    cfg.budget = (delta_budget){.kind = DELTA_BUDGET_PERCENT,
                                .percent = percent};
    cfg.policy = "delta";      /* the default with a budget, said here */
    cfg.eval_batches = 20;     /* a part of the test split, when there */
    cfg.info = stderr;         /* the data, model, backend and budget */

    char err[1024];
    delta_trainer *tr;
    delta_status st = delta_trainer_new(&cfg, &tr, err, sizeof err);
    if (st != DELTA_OK) {
        fprintf(stderr, "train_builtin: %s\n", err);
        return 1;
    }
    int64_t every = steps >= 10 ? steps / 10 : 1;
    st = delta_trainer_train(tr, steps, on_step, &every);
    if (st == DELTA_OK) st = delta_trainer_evaluate(tr);
    if (st != DELTA_OK) {
        fprintf(stderr, "train_builtin: %s: %s\n", delta_status_name(st),
                delta_trainer_error(tr));
        delta_trainer_free(tr);
        return 1;
    }
    const delta_train_result *r = delta_trainer_result(tr);
    if (r->evaluated)
        printf("test accuracy %.4f on %lld images\n", r->test_accuracy,
               (long long)r->test_samples);
    printf("steps %lld loss %.4f peak %zu budget %zu unconstrained %zu\n",
           (long long)r->steps_done, r->final_loss, r->peak_device_bytes,
           delta_trainer_budget_bytes(tr),
           delta_trainer_dry_plan(tr)->peak_bytes);
    delta_trainer_free(tr);
    return 0;
}
