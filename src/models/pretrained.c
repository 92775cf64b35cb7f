/* The model a checkpoint file holds (delta_model_config_pretrained in
 * delta/models.h): from delta's own metadata, from Hugging Face's
 * config.json beside the file, or from the tensors' shapes. */
#include "delta/models.h"
#include "delta/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every published GPT-2 (and GPT-2 style model on the Hub) has 64-wide
 * attention heads, so the head count follows from the width when no
 * config.json says it. */
#define GPT2_HEAD_DIM 64

/* The architecture fields the file decides. */
typedef struct arch {
    int64_t layers, hidden, heads, vocab, positions;
} arch;

static void set_err(char *err, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t n, const char *fmt, ...) {
    if (!err || !n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

/* A non-negative integer of delta's metadata ("0" when absent). */
static int64_t meta_int(const delta_st_file *f, const char *key) {
    const char *v = delta_st_metadata(f, key);
    if (!v) return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    return (end != v && !*end && !errno && x > 0) ? x : 0;
}

/* A file delta saved: its "model" metadata and config fields. */
static delta_status from_metadata(const delta_st_file *f,
                                  delta_model_config *cfg, char *err,
                                  size_t n) {
    const char *name = delta_st_metadata(f, "model");
    const char *const *names = delta_model_names();
    const char *known = NULL;
    for (int i = 0; names[i] && !known; i++)
        if (!strcmp(names[i], name)) known = names[i];
    if (!known) {
        set_err(err, n, "the file says it holds model '%s', which this "
                "delta does not know", name);
        return DELTA_ERR_FORMAT;
    }
    struct {
        int64_t *field;
        const char *key;
    } fields[] = {
        {&cfg->image_size, "image_size"}, {&cfg->channels, "channels"},
        {&cfg->classes, "classes"},       {&cfg->width, "width"},
        {&cfg->mlp_hidden, "mlp_hidden"}, {&cfg->layers, "layers"},
        {&cfg->hidden, "hidden"},         {&cfg->heads, "heads"},
        {&cfg->vocab, "vocab"},           {&cfg->positions, "positions"},
    };
    cfg->name = known;
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        if (!*fields[i].field) *fields[i].field = meta_int(f, fields[i].key);
    return DELTA_OK;
}

/* The file's tensor under a GPT2LMHeadModel name or a GPT2Model one. */
static const delta_st_tensor *gpt2_tensor(const delta_st_file *f,
                                          const char *name) {
    char full[128];
    snprintf(full, sizeof full, "transformer.%s", name);
    const delta_st_tensor *t = delta_st_find(f, full);
    return t ? t : delta_st_find(f, name);
}

/* Layers, width, vocabulary and positions from the tensors' shapes. */
static delta_status arch_of_shapes(const delta_st_file *f, arch *a,
                                   char *err, size_t n) {
    const delta_st_tensor *wte = gpt2_tensor(f, "wte.weight");
    const delta_st_tensor *wpe = gpt2_tensor(f, "wpe.weight");
    if (!wte || wte->ndim != 2 || !wpe || wpe->ndim != 2 ||
        wpe->shape[1] != wte->shape[1]) {
        set_err(err, n, "wte.weight and wpe.weight are missing or not two "
                "matrices of one width");
        return DELTA_ERR_FORMAT;
    }
    a->vocab = wte->shape[0];
    a->hidden = wte->shape[1];
    a->positions = wpe->shape[0];
    a->layers = 0;
    char name[64];
    for (;;) {
        snprintf(name, sizeof name, "h.%" PRId64 ".ln_1.weight", a->layers);
        if (!gpt2_tensor(f, name)) break;
        a->layers++;
    }
    if (!a->layers) {
        set_err(err, n, "no transformer block (h.0.ln_1.weight) in the file");
        return DELTA_ERR_FORMAT;
    }
    return DELTA_OK;
}

/* Reads config.json's positive integer `key` into *v (left alone when
 * absent); false for a value that is not one. */
static bool json_int(const cJSON *root, const char *key, int64_t *v) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!x) return true;
    if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > 1e9 ||
        x->valuedouble != (double)(int64_t)x->valuedouble)
        return false;
    *v = (int64_t)x->valuedouble;
    return true;
}

/* The folder of path + "/config.json" into buf. */
static void config_path(const char *path, char *buf, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(buf, n, "config.json");
    else snprintf(buf, n, "%.*s/config.json", (int)(slash - path), path);
}

/* Reads Hugging Face's config.json (GPT2Config) at cpath into a, when it
 * exists. *found says whether it did. */
static delta_status arch_of_config(const char *cpath, arch *a, bool *found,
                                   char *err, size_t n) {
    *found = false;
    FILE *fp = fopen(cpath, "rb");
    if (!fp) {
        if (errno == ENOENT) return DELTA_OK;
        set_err(err, n, "cannot read %s: %s", cpath, strerror(errno));
        return DELTA_ERR_IO;
    }
    char buf[64 * 1024];
    size_t len = fread(buf, 1, sizeof buf - 1, fp);
    bool whole = feof(fp) && !ferror(fp);
    fclose(fp);
    if (!whole) {
        set_err(err, n, "cannot read %s: larger than %zu bytes or unreadable",
                cpath, sizeof buf - 1);
        return DELTA_ERR_FORMAT;
    }
    buf[len] = '\0';
    cJSON *root = cJSON_ParseWithLength(buf, len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        set_err(err, n, "%s is not a JSON object", cpath);
        return DELTA_ERR_FORMAT;
    }
    delta_status st = DELTA_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "gpt2"))) {
        set_err(err, n, "%s has model_type %s; delta reads GPT-2's (\"gpt2\")",
                cpath, cJSON_IsString(type) ? type->valuestring : "(not text)");
        st = DELTA_ERR_FORMAT;
    }
    const struct {
        const char *key;
        int64_t *v;
    } keys[] = {
        {"n_layer", &a->layers}, {"n_embd", &a->hidden},
        {"n_head", &a->heads},   {"vocab_size", &a->vocab},
        {"n_positions", &a->positions},
    };
    for (size_t i = 0; st == DELTA_OK && i < sizeof keys / sizeof *keys; i++)
        if (!json_int(root, keys[i].key, keys[i].v)) {
            set_err(err, n, "%s: %s is not a positive integer", cpath,
                    keys[i].key);
            st = DELTA_ERR_FORMAT;
        }
    cJSON_Delete(root);
    *found = st == DELTA_OK;
    return st;
}

/* A Hugging Face GPT-2 file: config.json's sizes, else the shapes'. */
static delta_status from_gpt2(const char *path, const delta_st_file *f,
                              delta_model_config *cfg, char *err, size_t n) {
    arch shapes = {0}, a;
    delta_status st = arch_of_shapes(f, &shapes, err, n);
    if (st != DELTA_OK) return st;
    a = shapes;
    char cpath[4096];
    config_path(path, cpath, sizeof cpath);
    bool found;
    st = arch_of_config(cpath, &a, &found, err, n);
    if (st != DELTA_OK) return st;
    /* config.json and the tensors must tell one story (the loader would
     * refuse the tensors anyway; this names the setting) */
    const struct {
        const char *what;
        int64_t config, file;
    } agree[] = {
        {"n_layer (blocks h.N)", a.layers, shapes.layers},
        {"n_embd (wte.weight's columns)", a.hidden, shapes.hidden},
        {"vocab_size (wte.weight's rows)", a.vocab, shapes.vocab},
        {"n_positions (wpe.weight's rows)", a.positions, shapes.positions},
    };
    for (size_t i = 0; found && i < sizeof agree / sizeof *agree; i++)
        if (agree[i].config != agree[i].file) {
            set_err(err, n, "%s says %s %" PRId64 ", the tensors of %s have "
                    "%" PRId64, cpath, agree[i].what, agree[i].config, path,
                    agree[i].file);
            return DELTA_ERR_FORMAT;
        }
    if (!a.heads) a.heads = cfg->heads; /* the caller's, when set */
    if (!a.heads) {
        if (a.hidden % GPT2_HEAD_DIM) {
            set_err(err, n, "%s: width %" PRId64 " is not a multiple of 64 "
                    "and there is no config.json beside it to give n_head: "
                    "give --heads", path, a.hidden);
            return DELTA_ERR_FORMAT;
        }
        a.heads = a.hidden / GPT2_HEAD_DIM;
    }
    /* the built-in whose sizes these are, else gpt2-small resized */
    cfg->name = "gpt2-small";
    const char *const *names = delta_model_names();
    for (int i = 0; names[i]; i++) {
        if (strncmp(names[i], "gpt2-", 5)) continue;
        delta_model_config b = {.name = names[i], .batch = 1};
        if (delta_model_resolve(&b, &b, NULL, 0) != DELTA_OK) continue;
        if (b.layers == a.layers && b.hidden == a.hidden &&
            b.heads == a.heads && b.vocab == a.vocab &&
            b.positions == a.positions) {
            cfg->name = names[i];
            break;
        }
    }
    int64_t *dst[] = {&cfg->layers, &cfg->hidden, &cfg->heads, &cfg->vocab,
                      &cfg->positions};
    const int64_t src[] = {a.layers, a.hidden, a.heads, a.vocab, a.positions};
    for (int i = 0; i < 5; i++)
        if (!*dst[i]) *dst[i] = src[i];
    /* a table shorter than the built-in's default length caps it */
    delta_model_config b = {.name = cfg->name, .batch = 1};
    if (!cfg->seq_len && delta_model_resolve(&b, &b, NULL, 0) == DELTA_OK &&
        b.seq_len > cfg->positions)
        cfg->seq_len = cfg->positions;
    return DELTA_OK;
}

delta_status delta_model_config_pretrained(const char *path,
                                           delta_model_config *cfg, char *err,
                                           size_t err_len) {
    if (!path || !cfg) {
        set_err(err, err_len, "NULL path or configuration");
        return DELTA_ERR_INVALID_ARG;
    }
    delta_status st = DELTA_OK;
    char sub[512] = "";
    delta_st_file *f = delta_st_open(path, &st, sub, sizeof sub);
    if (!f) {
        set_err(err, err_len, "%s", sub);
        return st;
    }
    char why[600] = "";
    if (delta_st_metadata(f, "model"))
        st = from_metadata(f, cfg, why, sizeof why);
    else if (gpt2_tensor(f, "wte.weight"))
        st = from_gpt2(path, f, cfg, why, sizeof why);
    else {
        snprintf(why, sizeof why, "it has no \"model\" metadata (delta's "
                 "files) and no GPT-2 tensors (transformer.wte.weight)");
        st = DELTA_ERR_FORMAT;
    }
    delta_st_close(f);
    if (st != DELTA_OK)
        set_err(err, err_len, "cannot tell the model of %s: %s", path, why);
    return st;
}
