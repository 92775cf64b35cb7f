/* Checkpoints (see checkpoint.h). */
#include "checkpoint.h"
#include "core/bf16.h"
#include "core/half.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "delta/safetensors.h"

/* Names and details printed for each kind of problem before "... and N
 * more". */
#define MAX_LISTED 20

static bool has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

/* A PARAM or STATE tensor that delta_model_build made. */
static bool is_model_tensor(const delta_tensor *t) {
    delta_tensor_kind k = delta_tensor_kind_of(t);
    return k == DELTA_KIND_PARAM || k == DELTA_KIND_STATE;
}

/* "(64, 3, 7, 7)" into buf. */
static const char *shape_str(const int64_t *shape, int ndim, char *buf,
                             size_t n) {
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, i ? ", " : "",
                              shape[i]);
    if (k < n) snprintf(buf + k, n - k, "%s)", ndim == 1 ? "," : "");
    return buf;
}

/* Hugging Face's tied aliases. transformers' state dicts list a tied
 * weight under both names (GPT2LMHeadModel's lm_head.weight is
 * transformer.wte.weight; BertForMaskedLM's decoder is the word embeddings
 * and cls.predictions.bias), so load_state_dict(strict=True) wants the
 * alias too, while save_pretrained leaves it out of its files. delta's
 * models hold the target alone: a save writes each alias of a target it
 * has, as a copy of the target's bytes; a load takes the target and warns
 * when an alias in the file holds other values. */
static const struct {
    const char *alias, *target;
} tied[] = {
    {"lm_head.weight", "transformer.wte.weight"},
    {"cls.predictions.decoder.weight",
     "bert.embeddings.word_embeddings.weight"},
    {"cls.predictions.decoder.bias", "cls.predictions.bias"},
};
enum { N_TIED = sizeof tied / sizeof tied[0] };

/* The prefixes of transformers' task models over their base model
 * (GPT2LMHeadModel over GPT2Model, BertForMaskedLM over BertModel): a file
 * saved from the base model (the Hub's "gpt2" is one) names
 * transformer.h.0.ln_1.weight h.0.ln_1.weight. */
static const char *const base_prefixes[] = {"transformer.", "bert."};

/* The file's tensor for the model's tensor `name`: by that name, else by
 * the name without a base-model prefix. */
static const delta_st_tensor *find_in_file(const delta_st_file *f,
                                           const char *name) {
    const delta_st_tensor *t = delta_st_find(f, name);
    for (size_t i = 0; !t && i < sizeof base_prefixes / sizeof *base_prefixes;
         i++) {
        size_t n = strlen(base_prefixes[i]);
        if (!strncmp(name, base_prefixes[i], n)) t = delta_st_find(f, name + n);
    }
    return t;
}

/* The model's tensor that file tensor `name` stands for (by its own name
 * or with a base-model prefix added), or NULL. */
static const delta_tensor *model_tensor_for(const delta_ctx *ctx,
                                            int n_model_tensors,
                                            const char *name) {
    char buf[DELTA_NAME_LEN + 32];
    for (size_t i = 0; i <= sizeof base_prefixes / sizeof *base_prefixes;
         i++) {
        const char *pre = i ? base_prefixes[i - 1] : "";
        if ((size_t)snprintf(buf, sizeof buf, "%s%s", pre, name) >= sizeof buf)
            continue;
        const delta_tensor *t = delta_ctx_find(ctx, buf);
        if (t && delta_tensor_id(t) < n_model_tensors && is_model_tensor(t))
            return t;
    }
    return NULL;
}

/* ---- save ----------------------------------------------------------------- */

/* Reads t out of the session into a new buffer (*buf, freed by the caller)
 * and describes it as entry e under name. */
static delta_status read_entry(const char *path, delta_session *s,
                               const delta_tensor *t, const char *name,
                               bool bf16, delta_st_entry *e, void **buf,
                               char *err, size_t err_len) {
    size_t bytes = delta_tensor_bytes(t);
    *buf = malloc(bytes ? bytes : 1);
    if (!*buf) {
        snprintf(err, err_len, "out of memory reading '%s' to save %s",
                 delta_tensor_name(t), path);
        return DELTA_ERR_NOMEM;
    }
    delta_status st = delta_session_read(s, t, *buf, bytes);
    if (st != DELTA_OK) {
        snprintf(err, err_len, "reading '%s' from the device to save %s: %s",
                 delta_tensor_name(t), path, delta_session_error(s));
        return st;
    }
    e->name = name;
    e->st_dtype = delta_tensor_dtype(t) == DELTA_I32 ? "I32" : "F32";
    if (bf16 && delta_tensor_dtype(t) == DELTA_F32) {
        /* rounded to nearest, ties to even, in place: the halves pack
         * into the buffer's front */
        const float *f = *buf;
        delta_bf16 *h = *buf;
        for (size_t i = 0; i < bytes / 4; i++) h[i] = delta_f32_to_bf16(f[i]);
        e->st_dtype = "BF16";
    }
    e->ndim = delta_tensor_ndim(t);
    for (int d = 0; d < e->ndim; d++) e->shape[d] = delta_tensor_dim(t, d);
    e->data = *buf;
    return DELTA_OK;
}

delta_status checkpoint_save(const char *path, delta_session *s,
                             const delta_ctx *ctx, int n_model_tensors,
                             const delta_model *m, int64_t step,
                             const checkpoint_extra *extra, char *err,
                             size_t err_len) {
    int n_model = 0, n_bn = 0;
    int n_extra = extra ? extra->n_tensors + extra->n_blobs : 0;
    for (int i = 0; i < n_model_tensors; i++) {
        const delta_tensor *t = delta_ctx_tensor(ctx, i);
        if (!is_model_tensor(t)) continue;
        n_model++;
        n_bn += has_suffix(delta_tensor_name(t), ".running_mean");
    }
    int cap = n_model + n_bn + N_TIED + n_extra;
    delta_st_entry *e = calloc((size_t)(cap ? cap : 1), sizeof *e);
    void **bufs = calloc((size_t)(cap ? cap : 1), sizeof *bufs);
    /* num_batches_tracked names, then the extra tensors' prefixed names */
    char (*names)[DELTA_NAME_LEN + 32] =
        calloc((size_t)(n_bn + n_extra ? n_bn + n_extra : 1), sizeof *names);
    int64_t tracked = step;
    delta_status st = DELTA_OK;
    int n = 0, nb = 0;
    if (!e || !bufs || !names) {
        snprintf(err, err_len, "out of memory saving %s", path);
        st = DELTA_ERR_NOMEM;
        goto done;
    }
    for (int i = 0; i < n_model_tensors; i++) {
        const delta_tensor *t = delta_ctx_tensor(ctx, i);
        if (!is_model_tensor(t)) continue;
        st = read_entry(path, s, t, delta_tensor_name(t),
                        extra && extra->bf16, &e[n], &bufs[n], err, err_len);
        if (st != DELTA_OK) goto done;
        n++;
        const char *name = delta_tensor_name(t);
        if (has_suffix(name, ".running_mean")) {
            snprintf(names[nb], sizeof names[nb], "%.*s.num_batches_tracked",
                     (int)(strlen(name) - strlen(".running_mean")), name);
            e[n].name = names[nb];
            e[n].st_dtype = "I64";
            e[n].ndim = 0;
            e[n].data = &tracked;
            n++;
            nb++;
        }
    }

    /* the tied aliases, sharing their target's buffer (bufs[] stays NULL
     * for them, so it is freed once) */
    int n_saved = n;
    for (int k = 0; k < N_TIED; k++)
        for (int i = 0; i < n_saved; i++) {
            if (strcmp(e[i].name, tied[k].target)) continue;
            e[n] = e[i];
            e[n].name = tied[k].alias;
            n++;
            break;
        }

    for (int i = 0; extra && i < extra->n_tensors; i++) {
        const delta_tensor *t = extra->tensors[i];
        snprintf(names[n_bn + i], sizeof names[n_bn + i], "%s%s",
                 extra->prefix, delta_tensor_name(t));
        st = read_entry(path, s, t, names[n_bn + i], false, &e[n], &bufs[n],
                        err, err_len);
        if (st != DELTA_OK) goto done;
        n++;
    }
    for (int i = 0; extra && i < extra->n_blobs; i++) {
        const checkpoint_blob *b = &extra->blobs[i];
        char *nm = names[n_bn + extra->n_tensors + i];
        snprintf(nm, DELTA_NAME_LEN + 32, "%s%s", extra->prefix, b->name);
        e[n].name = nm;
        e[n].st_dtype = "F32";
        e[n].ndim = b->ndim;
        for (int d = 0; d < b->ndim; d++) e[n].shape[d] = b->shape[d];
        e[n].data = b->data;
        n++;
    }

    /* Metadata: format, model, step, version and the config fields set. */
    const delta_model_config *c = &m->cfg;
    const struct {
        const char *key;
        int64_t v;
    } fields[] = {
        {"step", step},
        {"image_size", c->image_size},
        {"channels", c->channels},
        {"classes", c->classes},
        {"width", c->width},
        {"mlp_hidden", c->mlp_hidden},
        {"layers", c->layers},
        {"hidden", c->hidden},
        {"heads", c->heads},
        {"seq_len", c->seq_len},
        {"vocab", c->vocab},
        {"positions", c->positions},
    };
    enum { N_FIELDS = sizeof fields / sizeof fields[0] };
    int n_meta = extra ? extra->n_meta : 0;
    const char **kv = malloc(sizeof *kv * (size_t)(2 * (N_FIELDS + 3 + n_meta)));
    char vals[N_FIELDS][24];
    int nm = 0;
    if (!kv) {
        snprintf(err, err_len, "out of memory saving %s", path);
        st = DELTA_ERR_NOMEM;
        goto done;
    }
    /* "pt": transformers' loader takes only files that say so (and the
     * tensors are PyTorch's, by name and layout); delta_version says who
     * wrote it */
    kv[2 * nm] = "format", kv[2 * nm + 1] = "pt", nm++;
    kv[2 * nm] = "model", kv[2 * nm + 1] = c->name, nm++;
    kv[2 * nm] = "delta_version", kv[2 * nm + 1] = DELTA_VERSION_STRING, nm++;
    for (int i = 0; i < N_FIELDS; i++) {
        if (!fields[i].v && i) continue;
        snprintf(vals[i], sizeof vals[i], "%" PRId64, fields[i].v);
        kv[2 * nm] = fields[i].key, kv[2 * nm + 1] = vals[i], nm++;
    }
    for (int i = 0; i < n_meta; i++) {
        kv[2 * nm] = extra->meta_kv[2 * i];
        kv[2 * nm + 1] = extra->meta_kv[2 * i + 1];
        nm++;
    }
    char sub[512];
    st = delta_st_write(path, e, n, kv, nm, sub, sizeof sub);
    free(kv);
    if (st != DELTA_OK)
        snprintf(err, err_len, "cannot save the checkpoint %s: %s", path,
                 sub);
done:
    for (int i = 0; bufs && i < cap; i++) free(bufs[i]);
    free(bufs);
    free(e);
    free(names);
    return st;
}

/* ---- load ----------------------------------------------------------------- */

/* Tensors of PyTorch state dicts that delta's models have no counterpart
 * for, and need none: bookkeeping buffers and weights tied to others. */
static bool known_extra(const char *name) {
    return has_suffix(name, ".num_batches_tracked") ||
           !strncmp(name, "optimizer.", 10) ||
           !strcmp(name, "lm_head.weight") ||
           !strcmp(name, "cls.predictions.decoder.weight") ||
           !strcmp(name, "cls.predictions.decoder.bias") ||
           has_suffix(name, ".attn.bias") ||
           has_suffix(name, ".attn.masked_bias") ||
           !strcmp(name, "bert.embeddings.position_ids");
}

/* The step a file records: "step" metadata, else a num_batches_tracked
 * scalar, else 0. */
static int64_t file_step(const delta_st_file *f) {
    const char *v = delta_st_metadata(f, "step");
    if (v) {
        char *end;
        long long s = strtoll(v, &end, 10);
        if (end != v && !*end && s >= 0) return s;
    }
    for (int i = 0; i < delta_st_count(f); i++) {
        const delta_st_tensor *t = delta_st_at(f, i);
        if (has_suffix(t->name, ".num_batches_tracked") &&
            !strcmp(t->st_dtype, "I64") && t->numel == 1) {
            int64_t s;
            memcpy(&s, t->data, sizeof s);
            if (s >= 0) return s;
        }
    }
    return 0;
}

/* Whether a file tensor of this dtype loads into an F32 model tensor: F32
 * as it is; BF16 and F16 (pretrained weights are often saved so) widened,
 * exactly, to fp32 masters. */
static bool widens_to_f32(const char *st_dtype) {
    return !strcmp(st_dtype, "F32") || !strcmp(st_dtype, "BF16") ||
           !strcmp(st_dtype, "F16");
}

/* Writes file tensor ft into model tensor t, widening BF16 or F16 to F32. */
static delta_status write_widened(delta_session *s, const delta_tensor *t,
                                  const delta_st_tensor *ft, char *err,
                                  size_t err_len) {
    bool bf16 = !strcmp(ft->st_dtype, "BF16"), f16 = !strcmp(ft->st_dtype, "F16");
    if (!bf16 && !f16) return delta_session_write(s, t, ft->data, ft->nbytes);
    size_t n = ft->nbytes / 2;
    float *w = malloc(n ? n * sizeof *w : 1);
    if (!w) {
        snprintf(err, err_len, "out of memory widening '%s'", ft->name);
        return DELTA_ERR_NOMEM;
    }
    const unsigned char *p = ft->data;
    for (size_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2); /* safetensors is little-endian, as here */
        w[i] = bf16 ? delta_bf16_to_f32(h) : delta_f16_to_f32(h);
    }
    delta_status st = delta_session_write(s, t, w, n * sizeof *w);
    free(w);
    return st;
}

delta_status checkpoint_load(const char *path, delta_session *s,
                             const delta_ctx *ctx, int n_model_tensors,
                             const delta_model *m, int64_t *step, FILE *diag,
                             char *err, size_t err_len) {
    delta_status st = DELTA_OK;
    char sub[512] = "";
    delta_st_file *f = delta_st_open(path, &st, sub, sizeof sub);
    if (!f) {
        snprintf(err, err_len, "cannot load the checkpoint %s: %s", path,
                 sub);
        return st != DELTA_OK ? st : DELTA_ERR_IO;
    }
    st = checkpoint_load_file(f, path, false, s, ctx, n_model_tensors, m,
                              step, diag,
                              err, err_len);
    delta_st_close(f);
    return st;
}

delta_status checkpoint_load_file(const delta_st_file *f, const char *path,
                                  bool exact,
                                  delta_session *s, const delta_ctx *ctx,
                                  int n_model_tensors, const delta_model *m,
                                  int64_t *step, FILE *diag, char *err,
                                  size_t err_len) {
    delta_status st = DELTA_OK;
    const char *model = m->cfg.name;
    const char *file_model = delta_st_metadata(f, "model");
    int missing = 0, mismatched = 0, listed = 0;
    for (int i = 0; i < n_model_tensors; i++) {
        const delta_tensor *t = delta_ctx_tensor(ctx, i);
        if (!is_model_tensor(t)) continue;
        const char *name = delta_tensor_name(t);
        const delta_st_tensor *ft = find_in_file(f, name);
        char want[96], got[96];
        shape_str(delta_tensor_shape(t), delta_tensor_ndim(t), want,
                  sizeof want);
        if (!ft) {
            missing++;
            if (diag && listed++ < MAX_LISTED)
                fprintf(diag, "  missing: %s %s F32\n", name, want);
            continue;
        }
        bool same = ft->ndim == delta_tensor_ndim(t) &&
                    (delta_tensor_dtype(t) == DELTA_I32
                         ? !strcmp(ft->st_dtype, "I32")
                         : exact ? !strcmp(ft->st_dtype, "F32")
                                 : widens_to_f32(ft->st_dtype));
        for (int d = 0; same && d < ft->ndim; d++)
            same = ft->shape[d] == delta_tensor_dim(t, d);
        if (!same) {
            mismatched++;
            if (diag && listed++ < MAX_LISTED)
                fprintf(diag, "  mismatch: %s is %s %s in the file, the "
                        "model has %s %s\n", name,
                        shape_str(ft->shape, ft->ndim, got, sizeof got),
                        ft->st_dtype, want,
                        delta_dtype_name(delta_tensor_dtype(t)));
        }
    }
    if (diag && listed > MAX_LISTED)
        fprintf(diag, "  ... and %d more\n", listed - MAX_LISTED);
    if (missing || mismatched) {
        snprintf(err, err_len, "checkpoint %s does not fit model %s: %d "
                 "tensor%s missing, %d with another shape or dtype%s%s%s",
                 path, model, missing, missing == 1 ? "" : "s", mismatched,
                 file_model ? " (the file was saved from " : "",
                 file_model ? file_model : "", file_model ? ")" : "");
        return DELTA_ERR_FORMAT;
    }

    /* Extras: silently ignored when known, else a warning each. */
    int unknown = 0;
    for (int i = 0; i < delta_st_count(f); i++) {
        const delta_st_tensor *ft = delta_st_at(f, i);
        if (model_tensor_for(ctx, n_model_tensors, ft->name) ||
            known_extra(ft->name))
            continue;
        if (diag && unknown < MAX_LISTED)
            fprintf(diag, "delta train: warning: ignoring '%s' in %s: model %s has "
                    "no such tensor\n", ft->name, path, model);
        unknown++;
    }
    if (diag && unknown > MAX_LISTED)
        fprintf(diag, "delta train: warning: ... and %d more tensors ignored\n",
                unknown - MAX_LISTED);
    /* A tied alias is not read: the model has only its target, so say so
     * when the file's alias holds other values than the target. */
    for (int k = 0; diag && k < N_TIED; k++) {
        const delta_st_tensor *a = delta_st_find(f, tied[k].alias);
        const delta_st_tensor *b = find_in_file(f, tied[k].target);
        if (!a || !b || !model_tensor_for(ctx, n_model_tensors, tied[k].target))
            continue;
        if (a->nbytes != b->nbytes || strcmp(a->st_dtype, b->st_dtype) ||
            memcmp(a->data, b->data, a->nbytes))
            fprintf(diag, "delta train: warning: '%s' in %s differs from "
                    "'%s'; model %s ties the two, so the file's '%s' is not "
                    "used\n", tied[k].alias, path, tied[k].target, model,
                    tied[k].alias);
    }

    for (int i = 0; i < n_model_tensors && st == DELTA_OK; i++) {
        const delta_tensor *t = delta_ctx_tensor(ctx, i);
        if (!is_model_tensor(t)) continue;
        const delta_st_tensor *ft = find_in_file(f, delta_tensor_name(t));
        st = write_widened(s, t, ft, err, err_len);
        if (st == DELTA_ERR_NOMEM) break;
        if (st != DELTA_OK)
            snprintf(err, err_len, "writing '%s' from %s to the device: %s",
                     ft->name, path, delta_session_error(s));
    }
    if (step) *step = file_step(f);
    return st;
}
