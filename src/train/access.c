/* The trainer's accessors (train.h): its settings, figures and parts. */
#include "train_impl.h"

const char *delta_trainer_error(const delta_trainer *tr) { return tr->err; }

const delta_train_config *delta_trainer_config(const delta_trainer *tr) {
    return &tr->cfg;
}

const delta_train_result *delta_trainer_result(const delta_trainer *tr) {
    return &tr->result;
}

const delta_dry_plan *delta_trainer_dry_plan(const delta_trainer *tr) {
    return &tr->plan;
}

size_t delta_trainer_budget_bytes(const delta_trainer *tr) {
    return tr->budget_bytes;
}

delta_session *delta_trainer_session(const delta_trainer *tr) {
    return tr->session;
}

const delta_ctx *delta_trainer_ctx(const delta_trainer *tr) {
    return tr->shapes[tr->cur]->ctx;
}

const delta_model *delta_trainer_model(const delta_trainer *tr) {
    return &tr->shapes[tr->cur]->model;
}

const delta_model *delta_trainer_main_model(const delta_trainer *tr) {
    return &tr->shapes[0]->model;
}

int delta_trainer_n_model_tensors(const delta_trainer *tr) {
    return tr->shapes[tr->cur]->n_model_tensors;
}

delta_tensor *const *delta_trainer_persistent(const delta_trainer *tr,
                                              int *n) {
    *n = tr->shapes[tr->cur]->n_persist;
    return tr->shapes[tr->cur]->persist;
}

int delta_trainer_programs(const delta_trainer *tr) { return tr->n_shapes; }

const delta_dataset *delta_trainer_dataset(const delta_trainer *tr) {
    return tr->data;
}

bool delta_trainer_synthetic(const delta_trainer *tr) {
    return tr->synthetic;
}

const char *delta_trainer_fashion_mnist_dir(const delta_trainer *tr) {
    return tr->fmnist_dir;
}

delta_loader *delta_trainer_loader(const delta_trainer *tr) {
    return tr->loader;
}

delta_backend *delta_trainer_backend(const delta_trainer *tr) {
    return tr->backend;
}

const delta_gpu_preset *delta_trainer_gpu(const delta_trainer *tr) {
    return tr->gpu;
}

bool delta_trainer_image(const delta_trainer *tr) { return tr->image; }

bool delta_trainer_simulated(const delta_trainer *tr) { return tr->sim; }

bool delta_trainer_evaluates(const delta_trainer *tr) {
    return train_will_evaluate(tr);
}

const char *delta_trainer_optimizer(const delta_trainer *tr, double *lr,
                                    double *momentum, double *weight_decay) {
    if (lr) *lr = tr->lr;
    if (momentum) *momentum = tr->momentum;
    if (weight_decay) *weight_decay = tr->weight_decay;
    return tr->optimizer_name;
}

int delta_trainer_rank(const delta_trainer *tr) { return tr->rank; }

int delta_trainer_ranks(const delta_trainer *tr) { return tr->ranks; }
