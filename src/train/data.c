/* The data a run trains on (train_impl.h): Fashion-MNIST, a text file,
 * an llm.c token file or synthetic samples, picked by cfg.data and the model family, and the
 * model's config fitted to it (image size, channels and classes, or vocab
 * and sequence length). On sim only the shapes are wanted: the data is
 * closed again once they are known. */
#include "train_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Samples of a synthetic training set: any number costs nothing (samples
 * are computed when drawn); this many keeps the loader's shuffle order
 * small while no run comes near an epoch's end. */
#define SYNTH_LEN ((int64_t)1 << 20)

/* Synthetic samples at the (resolved) model's shapes; none on sim. */
static delta_status open_synthetic(delta_trainer *tr,
                                   const delta_model_config *r,
                                   delta_data_kind kind) {
    tr->synthetic = true;
    if (tr->sim) return DELTA_OK;
    delta_synth_opts o = {
        .kind = kind,
        .len = SYNTH_LEN > tr->cfg.model.batch ? SYNTH_LEN
                                               : tr->cfg.model.batch,
        .seed = tr->cfg.seed,
        .channels = r->channels,
        .height = r->image_size,
        .width = r->image_size,
        .classes = r->classes,
        .seq_len = r->seq_len,
        .vocab = r->vocab,
    };
    delta_status st;
    char sub[512];
    tr->data = delta_dataset_synthetic_new(&o, &st, sub, sizeof sub);
    if (!tr->data) return train_fail(tr, st, "synthetic data: %s", sub);
    return DELTA_OK;
}

/* An override must equal what the data holds; 0 takes the data's value. */
static delta_status fit_field(delta_trainer *tr, const char *opt, int64_t *v,
                              int64_t data, const char *what) {
    if (*v && *v != data)
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "%s %" PRId64 " does "
                          "not match the data, whose %s is %" PRId64 "; "
                          "leave %s out or give %" PRId64, opt, *v, what,
                          data, opt, data);
    *v = data;
    return DELTA_OK;
}

static delta_status setup_image_data(delta_trainer *tr) {
    delta_train_config *c = &tr->cfg;
    delta_model_config *mc = &c->model;
    const char *d = c->data;
    const char *dir = NULL;
    bool explicit_fmnist = d && strcmp(d, "synthetic") != 0;
    /* Where "fashion-mnist" is looked for: the environment may move it
     * (tests use it to see the fallback to synthetic data). */
    const char *env = getenv("DELTA_FASHION_MNIST_DIR");
    if (env && *env) dir = env;
    if (d && strcmp(d, "fashion-mnist") && strcmp(d, "synthetic")) {
        struct stat sb;
        if (stat(d, &sb) != 0)
            return train_fail(tr, DELTA_ERR_IO, "--data %s: %s", d,
                              strerror(errno));
        if (!S_ISDIR(sb.st_mode))
            return train_fail(tr, DELTA_ERR_INVALID_ARG, "model %s takes "
                              "images: --data expects fashion-mnist, "
                              "synthetic or a directory of Fashion-MNIST idx "
                              "files, and %s is a file (text files train the "
                              "transformers, e.g. gpt2-tiny)", mc->name, d);
        dir = d;
    }
    /* On sim with no --data the model keeps its own shapes. */
    if ((!d && !tr->sim) || explicit_fmnist) {
        delta_status st;
        char sub[512];
        delta_dataset *ds = delta_dataset_fashion_mnist_new(
            dir, DELTA_SPLIT_TRAIN, &st, sub, sizeof sub);
        if (!ds && d) return train_fail(tr, st, "%s", sub);
        if (!ds) {
            train_info(tr, "Fashion-MNIST is not available (%s); training on "
                 "synthetic 28x28 images instead (Debian package "
                 "dataset-fashion-mnist)", sub);
            if (!mc->image_size) mc->image_size = 28;
            if (!mc->channels) mc->channels = 1;
            if (!mc->classes) mc->classes = DELTA_FASHION_MNIST_CLASSES;
        } else {
            delta_data_info in = delta_dataset_info(ds);
            tr->data = ds;
            tr->fmnist_dir = dir ? dir : DELTA_FASHION_MNIST_DIR;
            if (in.height != in.width)
                return train_fail(tr, DELTA_ERR_FORMAT, "%s: images of %" PRId64
                            "x%" PRId64 "; the models take square images",
                            delta_dataset_name(ds), in.height, in.width);
            delta_status s2 = fit_field(tr, "--image-size", &mc->image_size,
                                        in.height, "image size");
            if (s2 == DELTA_OK)
                s2 = fit_field(tr, "--channels", &mc->channels, in.channels,
                               "channel count");
            if (s2 != DELTA_OK) return s2;
            if (mc->classes && mc->classes < in.classes)
                return train_fail(tr, DELTA_ERR_INVALID_ARG, "--classes %"
                                  PRId64 " is fewer than the %" PRId64
                                  " classes of the data", mc->classes,
                                  in.classes);
            if (!mc->classes) mc->classes = in.classes;
            if (tr->sim) {
                /* Only the shapes are wanted: sim computes nothing. */
                delta_dataset_free(tr->data);
                tr->data = NULL;
            }
            return DELTA_OK;
        }
    }
    delta_model_config r;
    char sub[512];
    delta_status st = delta_model_resolve(mc, &r, sub, sizeof sub);
    if (st != DELTA_OK) return train_fail(tr, st, "%s", sub);
    return open_synthetic(tr, &r, DELTA_DATA_IMAGES);
}

static delta_status setup_token_data(delta_trainer *tr, bool masked) {
    delta_train_config *c = &tr->cfg;
    delta_model_config *mc = &c->model;
    const char *d = c->data;
    delta_data_kind kind = masked ? DELTA_DATA_MASKED_LM
                                  : DELTA_DATA_CAUSAL_LM;
    if (d && !strcmp(d, "fashion-mnist"))
        return train_fail(tr, DELTA_ERR_INVALID_ARG, "model %s is a language "
                          "model and fashion-mnist holds images; use --data "
                          "synthetic or --data FILE (any file, read as "
                          "bytes)", mc->name);
    delta_model_config r;
    char sub[512];
    delta_status st = delta_model_resolve(mc, &r, sub, sizeof sub);
    if (st != DELTA_OK) return train_fail(tr, st, "%s", sub);
    if (c->seq_len_max) {
        /* Every shape shares one position table, which must cover the
         * longest length: the model's own (no --seq-len to raise it). */
        if (c->seq_len_max > r.positions)
            return train_fail(tr, DELTA_ERR_INVALID_ARG, "--seq-len-range %"
                              PRId64 ":%" PRId64 ": %" PRId64 " is above the "
                              "%" PRId64 " positions of %s's position table; "
                              "use lengths up to %" PRId64, c->seq_len_min,
                              c->seq_len_max, c->seq_len_max, r.positions,
                              mc->name, r.positions);
        mc->seq_len = r.seq_len = c->seq_len_max;
        mc->positions = r.positions;
    }
    if (!d || !strcmp(d, "synthetic")) return open_synthetic(tr, &r, kind);

    tr->data = train_open_lm_file(tr, "--data", d, r.seq_len, mc->vocab,
                                  masked, &st);
    if (!tr->data) return st;
    delta_data_info in = delta_dataset_info(tr->data);
    mc->vocab = in.vocab;
    mc->seq_len = in.seq_len;
    if (tr->sim) {
        delta_dataset_free(tr->data);
        tr->data = NULL;
    }
    return DELTA_OK;
}


delta_dataset *train_open_lm_file(delta_trainer *tr, const char *opt,
                                  const char *path, int64_t seq_len,
                                  int64_t vocab, bool masked,
                                  delta_status *st) {
    delta_dataset *ds;
    char sub[512];
    if (train_is_token_file(path)) {
        /* llm.c's token file: GPT-2's ids (the model's vocab, 50,257 unless
         * --vocab says otherwise), windows of T consecutive tokens */
        if (masked) {
            *st = train_fail(tr, DELTA_ERR_INVALID_ARG, "%s %s is a token "
                             "file (llm.c's format), whose samples are "
                             "next-token windows for GPT-2; model %s is a "
                             "masked language model", opt, path,
                             tr->cfg.model.name);
            return NULL;
        }
        delta_tokens_opts o = {.seq_len = seq_len, .vocab = vocab};
        ds = delta_dataset_tokens_new(path, &o, st, sub, sizeof sub);
    } else {
        /* A text file: byte tokens; the model takes the data's vocab (256,
         * or 257 with BERT's [MASK]) unless --vocab asks for more. */
        delta_text_opts o = {.kind = masked ? DELTA_DATA_MASKED_LM
                                            : DELTA_DATA_CAUSAL_LM,
                             .seq_len = seq_len, .vocab = vocab};
        ds = delta_dataset_text_new(path, &o, st, sub, sizeof sub);
    }
    if (!ds) train_fail(tr, *st, "%s", sub);
    return ds;
}

bool train_is_token_file(const char *path) {
    size_t n = strlen(path);
    return delta_tokens_file_is(path) ||
           (n > 4 && !strcmp(path + n - 4, ".bin"));
}

delta_status train_setup_data(delta_trainer *tr, bool masked) {
    return tr->image ? setup_image_data(tr) : setup_token_data(tr, masked);
}
