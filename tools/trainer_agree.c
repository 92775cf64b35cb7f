/* Data parallel: the ranks agree on their setup (trainer_agree, see
 * trainer.h). */
#include "trainer.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "delta/comm.h"

/* Every rank's setup outcome, message and settings go to every rank (one
 * allgather of fixed-size records), so they all reach the same decision
 * and rank 0 can name the rank and the setting. */

#define AGREE_SETTINGS 3072

/* The settings every rank must share, as "--option value" lines: what
 * decides the values computed (model, shapes, data, optimizer, seed) and
 * how the step runs (policy, budget, steps, ZeRO, buckets, backend,
 * checkpoints). Threads, the link, jitter and output paths may differ. */
static void settings_text(const trainer *t, char *buf, size_t n) {
    const train_config *c = &t->cfg;
    const delta_model_config *m = &delta_trainer_main_model(t->tr)->cfg;
    const delta_dataset *data = delta_trainer_dataset(t->tr);
    double lr, momentum, weight_decay;
    const char *optimizer = delta_trainer_optimizer(t->tr, &lr, &momentum,
                                                    &weight_decay);
    size_t k = 0;
#define SET(opt, fmt, ...)                                                    \
    do {                                                                      \
        if (k < n)                                                            \
            k += (size_t)snprintf(buf + k, n - k, opt " " fmt "\n",           \
                                  __VA_ARGS__);                               \
    } while (0)
    SET("--model", "%s", m->name ? m->name : "(none)");
    SET("--image-size", "%" PRId64, m->image_size);
    SET("--channels", "%" PRId64, m->channels);
    SET("--classes", "%" PRId64, m->classes);
    SET("--width", "%" PRId64, m->width);
    SET("--hidden", "%" PRId64 " %" PRId64, m->hidden, m->mlp_hidden);
    SET("--layers", "%" PRId64, m->layers);
    SET("--heads", "%" PRId64, m->heads);
    SET("--seq-len", "%" PRId64, m->seq_len);
    SET("--vocab", "%" PRId64, m->vocab);
    SET("--positions", "%" PRId64, m->positions);
    SET("--precision", "%d", (int)m->precision);
    SET("--batch", "%" PRId64, m->batch);
    SET("--dropout", "%.9g", (double)m->dropout);
    SET("--seed", "%" PRIu64, c->run.seed);
    SET("--data", "%s (%" PRId64 " samples)",
        data ? delta_dataset_name(data) : "none",
        data ? delta_dataset_len(data) : 0);
    SET("--seq-len-range", "%" PRId64 ":%" PRId64, c->run.seq_len_min,
        c->run.seq_len_max);
    SET("--drop-last", "%d", (int)c->run.drop_last);
    SET("--no-shuffle", "%d", (int)c->run.no_shuffle);
    SET("--optimizer", "%s", optimizer ? optimizer : "?");
    SET("--lr", "%.17g", lr);
    SET("--momentum", "%.17g", momentum);
    SET("--weight-decay", "%.17g", weight_decay);
    SET("--lr-schedule", "%s", delta_lr_schedule_name(c->run.lr_sched.kind));
    SET("--warmup", "%" PRId64, c->run.lr_sched.warmup);
    SET("--lr-min", "%.17g", c->run.lr_sched.min_frac);
    SET("--grad-clip", "%.17g", c->run.grad_clip);
    SET("--steps", "%" PRId64, c->steps);
    SET("--policy", "%s", c->run.policy ? c->run.policy : "?");
    /* as given: a percentage is of each rank's own plan (ZeRO-1's differ) */
    const delta_budget *b = &c->run.budget;
    if (b->kind == DELTA_BUDGET_PERCENT)
        SET("--budget", "%.17g%%", b->percent);
    else if (b->kind == DELTA_BUDGET_BYTES)
        SET("--budget", "%zu bytes", b->bytes);
    else
        SET("--budget", "%s", "unlimited");
    SET("--zero", "%d", c->run.zero);
    SET("--bucket", "%zu", c->run.bucket_bytes);
    SET("--backend", "%s", train_backend(c));
    SET("--checkpoint-every", "%" PRId64, c->checkpoint_every);
    SET("--save", "%s", c->save ? "given" : "none");
    SET("--resume", "%s", c->resume ? c->resume : "none");
    SET("--load", "%s", c->load ? c->load : "none");
    SET("--eval-batches", "%" PRId64, c->run.eval_batches);
    SET("--val-data", "%s", c->run.val_data ? c->run.val_data : "none");
    SET("--val-every", "%" PRId64, c->run.val_every);
#undef SET
}

/* The value of option `opt` in a settings text, into v. */
static void setting_of(const char *text, const char *opt, char *v, size_t n) {
    size_t len = strlen(opt);
    for (const char *l = text; *l;) {
        const char *e = strchr(l, '\n');
        if (!e) e = l + strlen(l);
        if (!strncmp(l, opt, len) && l[len] == ' ') {
            snprintf(v, n, "%.*s", (int)(e - l - len - 1), l + len + 1);
            return;
        }
        l = *e ? e + 1 : e;
    }
    snprintf(v, n, "(none)");
}

typedef struct agree_rec {
    int32_t st;
    char err[sizeof ((trainer *)0)->err];
    char settings[AGREE_SETTINGS];
} agree_rec;

delta_status trainer_agree(trainer *t, delta_status st) {
    delta_comm *comm = t->cfg.run.comm;
    int P = delta_comm_size(comm);
    if (P == 1) return st;
    agree_rec *mine = calloc(1, sizeof *mine);
    agree_rec *all = calloc((size_t)P, sizeof *all);
    DELTA_ASSERTF(mine && all, "out of memory");
    mine->st = (int32_t)st;
    snprintf(mine->err, sizeof mine->err, "%s", t->err);
    if (st == DELTA_OK) settings_text(t, mine->settings, sizeof mine->settings);
    delta_comm_allgather(comm, mine, all, sizeof *mine, "the ranks' setup");
    delta_status out = DELTA_OK;
    for (int q = 0; q < P && out == DELTA_OK; q++) {
        if (all[q].st == DELTA_OK) continue;
        out = (delta_status)all[q].st;
        if (q == 0) snprintf(t->err, sizeof t->err, "%s", all[0].err);
        else snprintf(t->err, sizeof t->err, "rank %d: %.900s", q, all[q].err);
    }
    for (int q = 1; q < P && out == DELTA_OK; q++) {
        if (!strcmp(all[q].settings, all[0].settings)) continue;
        /* the first line that differs names the setting */
        const char *a = all[0].settings, *b = all[q].settings;
        while (*a && *a == *b) a++, b++;
        while (a > all[0].settings && a[-1] != '\n') a--;
        char opt[64], va[256], vb[256];
        snprintf(opt, sizeof opt, "%.*s", (int)strcspn(a, " \n"), a);
        setting_of(all[0].settings, opt, va, sizeof va);
        setting_of(all[q].settings, opt, vb, sizeof vb);
        out = trainer_fail(t, DELTA_ERR_INVALID_ARG, "the ranks were given "
                           "other settings: %s is %s on rank 0 and %s on "
                           "rank %d; every rank must train the same program "
                           "on its share of the data (mpirun -np P delta "
                           "train ..., one command line)", opt, va, vb, q);
    }
    free(mine);
    free(all);
    return out;
}
