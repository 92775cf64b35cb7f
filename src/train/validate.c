/* The validation loss of a language model (cfg.val_data): the first
 * batches of a held-out file, in file order, in eval mode at the main
 * shape, as llm.c's val_loss_every does (it also starts its val loader
 * over each time). */
#include "train_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "delta/comm.h"

/* llm.c's val_max_steps: batches a validation runs by default. */
#define VAL_BATCHES_DEFAULT 20

delta_status train_open_validation(delta_trainer *tr) {
    const delta_train_config *c = &tr->cfg;
    if (!c->val_data) return DELTA_OK;
    if (tr->image)
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "--val-data %s: "
                          "validation is for language models; image models "
                          "evaluate on Fashion-MNIST's test split",
                          c->val_data);
    if (tr->sim)
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "--val-data %s: the "
                          "sim backend computes no values, so there is no "
                          "loss to validate", c->val_data);
    if (c->eval_batches == 0)
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "--val-data %s with "
                          "--eval-batches 0 would validate nothing",
                          c->val_data);
    const delta_model_config *m = &tr->shapes[0]->model.cfg;
    bool masked = tr->shapes[0]->model.task == DELTA_TASK_MASKED_LM;
    delta_status st;
    char sub[512];
    tr->val_data = train_open_lm_file(tr, "--val-data", c->val_data,
                                      m->seq_len, m->vocab, masked, &st);
    if (!tr->val_data) return st;
    delta_data_info in = delta_dataset_info(tr->val_data);
    if (in.vocab > m->vocab)
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "--val-data %s needs a "
                          "vocab of %" PRId64 ", the model has %" PRId64,
                          c->val_data, in.vocab, m->vocab);
    int64_t len = delta_dataset_len(tr->val_data);
    if (len < m->batch * tr->ranks)
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "--val-data %s holds %"
                          PRId64 " sample%s of %" PRId64 " tokens, fewer "
                          "than one batch of %" PRId64 "%s", c->val_data,
                          len, len == 1 ? "" : "s", m->seq_len,
                          m->batch * tr->ranks,
                          tr->ranks > 1 ? " over the ranks" : "");
    /* file order, whole batches only: every validation sees the same
     * samples, and the mean of the batches' means is the tokens' mean */
    tr->val_loader = delta_loader_new(tr->val_data, m->batch, c->seed, false,
                                      true, &st, sub, sizeof sub);
    if (!tr->val_loader) return train_fail(tr, st, "--val-data: %s", sub);
    if (tr->ranks > 1 &&
        delta_loader_set_shard(tr->val_loader, tr->rank, tr->ranks) !=
            DELTA_OK)
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "--val-data: no global "
                          "batch for %d ranks", tr->ranks);
    if (delta_batch_alloc(&tr->val_batch, tr->val_data, m->batch) !=
        DELTA_OK)
        return train_fail(tr, DELTA_ERR_NOMEM, "out of memory for a batch");
    int64_t nb = delta_loader_batches_per_epoch(tr->val_loader);
    int64_t want = c->eval_batches < 0 ? VAL_BATCHES_DEFAULT : c->eval_batches;
    tr->val_batches = want < nb ? want : nb;
    char when[64] = "after the last step";
    if (c->val_every == 1)
        snprintf(when, sizeof when, "after every step");
    else if (c->val_every)
        snprintf(when, sizeof when, "every %" PRId64 " steps and after the "
                 "last", c->val_every);
    train_info(tr, "validation: %s, %" PRId64 " batch%s of %" PRId64 " x %"
               PRId64 " tokens, %s", delta_dataset_name(tr->val_data),
               tr->val_batches, tr->val_batches == 1 ? "" : "es", m->batch,
               m->seq_len, when);
    return DELTA_OK;
}

bool train_validation_due(const delta_trainer *tr, int64_t step, bool last) {
    int64_t every = tr->cfg.val_every;
    return tr->val_loader && (last || (every > 0 && step % every == 0));
}

delta_status delta_trainer_validate(delta_trainer *tr, double *loss) {
    if (!tr->val_loader || !tr->session)
        return train_fail(tr, DELTA_ERR_STATE, "delta_trainer_validate: %s",
                          !tr->val_loader ? "no validation data (val_data)"
                          : tr->started   ? "the session has ended"
                                          : "call delta_trainer_start first");
    delta_status st = train_use_shape(tr, tr->shapes[0]->batch,
                                      tr->shapes[0]->seq_len);
    if (st != DELTA_OK) return st;
    const delta_model *model = &tr->shapes[0]->model;
    delta_loader_set_pos(tr->val_loader, (delta_loader_pos){0, 0});
    double sum[2] = {0, 0}; /* loss x samples, samples */
    for (int64_t b = 0; b < tr->val_batches; b++) {
        delta_loader_next(tr->val_loader, &tr->val_batch);
        st = train_write_batch(tr, &tr->val_batch);
        if (st != DELTA_OK) return st;
        float l = 0;
        st = delta_session_run(tr->session, DELTA_RUN_EVAL, NULL);
        if (st == DELTA_OK)
            st = delta_session_read(tr->session, model->loss, &l, sizeof l);
        if (st != DELTA_OK)
            return train_fail(tr, st, "validating: %s",
                              delta_session_error(tr->session));
        sum[0] += (double)l * (double)tr->val_batch.size;
        sum[1] += (double)tr->val_batch.size;
    }
    if (tr->ranks > 1) delta_comm_sum(tr->cfg.comm, sum, 2, "validation");
    delta_train_result *r = &tr->result;
    r->val_loss = sum[1] > 0 ? sum[0] / sum[1] : NAN;
    r->val_samples = (int64_t)sum[1];
    r->val_step = tr->steps_before + r->steps_done;
    r->validations++;
    if (loss) *loss = r->val_loss;
    return DELTA_OK;
}
