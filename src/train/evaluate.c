/* Evaluation (delta_trainer_evaluate): the model in eval mode over
 * Fashion-MNIST's test split at the main shape, its accuracy and mean
 * loss computed on the host from the kept logits. */
#include "train_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

delta_status delta_trainer_evaluate(delta_trainer *tr) {
    if (!train_will_evaluate(tr)) return DELTA_OK;
    if (!tr->session)
        return train_fail(tr, DELTA_ERR_STATE, "delta_trainer_evaluate: %s",
                          tr->started ? "the session has ended"
                                      : "call delta_trainer_start first");
    /* At the main shape (training may have ended on a shorter batch). */
    delta_status st = train_use_shape(tr, tr->shapes[0]->batch,
                                      tr->shapes[0]->seq_len);
    if (st != DELTA_OK) return st;
    const delta_model *model = &tr->shapes[0]->model;
    const delta_model_config *m = &model->cfg;
    char sub[512];
    delta_dataset *test = delta_dataset_fashion_mnist_new(
        tr->fmnist_dir, DELTA_SPLIT_TEST, &st, sub, sizeof sub);
    if (!test) return train_fail(tr, st, "%s", sub);
    delta_data_info ti = delta_dataset_info(test),
                    di = delta_dataset_info(tr->data);
    if (ti.channels != di.channels || ti.height != di.height ||
        ti.width != di.width) {
        st = train_fail(tr, DELTA_ERR_FORMAT, "the test images of %s are %"
                        PRId64 "x%" PRId64 "x%" PRId64 ", the training "
                        "images %" PRId64 "x%" PRId64 "x%" PRId64 "; they "
                        "must match", tr->fmnist_dir, ti.channels, ti.height,
                        ti.width, di.channels, di.height, di.width);
        delta_dataset_free(test);
        return st;
    }
    /* The last batch may be partial: its remaining rows keep the previous
     * batch's samples (eval mode treats rows independently) and are not
     * counted. */
    delta_loader *l = delta_loader_new(test, m->batch, tr->cfg.seed, false,
                                       false, &st, sub, sizeof sub);
    int64_t classes = m->classes;
    float *logits = malloc((size_t)(m->batch * classes) * sizeof *logits);
    if (!l || !logits) {
        if (l) st = train_fail(tr, DELTA_ERR_NOMEM, "out of memory");
        else train_fail(tr, st, "%s", sub);
        goto done;
    }
    int64_t nb = delta_loader_batches_per_epoch(l);
    if (tr->cfg.eval_batches > 0 && tr->cfg.eval_batches < nb)
        nb = tr->cfg.eval_batches;
    train_info(tr, "evaluating on %" PRId64 " test images",
               nb * m->batch < ti.len ? nb * m->batch : ti.len);
    int64_t correct = 0, seen = 0;
    double loss_sum = 0;
    for (int64_t b = 0; b < nb; b++) {
        delta_loader_next(l, &tr->batch);
        st = train_write_batch(tr, &tr->batch);
        if (st != DELTA_OK) goto done;
        st = delta_session_run(tr->session, DELTA_RUN_EVAL, NULL);
        if (st == DELTA_OK)
            st = delta_session_read(tr->session, model->logits, logits,
                                    delta_tensor_bytes(model->logits));
        if (st != DELTA_OK) {
            train_fail(tr, st, "evaluating: %s",
                       delta_session_error(tr->session));
            goto done;
        }
        for (int64_t i = 0; i < tr->batch.size; i++) {
            const float *row = logits + i * classes;
            int64_t best = 0;
            double mx = row[0];
            for (int64_t k = 1; k < classes; k++)
                if (row[k] > row[best]) best = k, mx = row[k];
            double se = 0;
            for (int64_t k = 0; k < classes; k++) se += exp(row[k] - mx);
            int32_t y = tr->batch.target[i];
            loss_sum += mx + log(se) - row[y];
            correct += best == y;
            seen++;
        }
    }
    tr->result.evaluated = true;
    tr->result.test_samples = seen;
    tr->result.test_accuracy = seen ? (double)correct / (double)seen : 0;
    tr->result.test_loss = seen ? loss_sum / (double)seen : NAN;
    st = DELTA_OK;
done:
    free(logits);
    delta_loader_free(l);
    delta_dataset_free(test);
    return st;
}

