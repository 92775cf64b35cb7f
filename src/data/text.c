/* delta — any file as byte-level text (see include/delta/data.h): the whole
 * file is read into memory once; samples are windows into it, copied out
 * as int32 ids, with the masked-LM corruption applied per draw. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data_impl.h"

/* Window `index` starts at byte index * info.seq_len whatever len is: a
 * shorter len takes the window's first len tokens. */
static void get_causal(const delta_dataset *ds, int64_t index, uint64_t seed,
                       uint64_t epoch, void *input, int32_t *target,
                       float *mask, int64_t len) {
    (void)seed, (void)epoch, (void)mask;
    int64_t T = len;
    const uint8_t *w = ds->text + (size_t)index * (size_t)ds->info.seq_len;
    int32_t *x = input;
    for (int64_t t = 0; t < T; t++) {
        x[t] = w[t];
        target[t] = w[t + 1];
    }
}

static void get_masked(const delta_dataset *ds, int64_t index, uint64_t seed,
                       uint64_t epoch, void *input, int32_t *target,
                       float *mask, int64_t len) {
    int64_t T = len;
    const uint8_t *w = ds->text + (size_t)index * (size_t)ds->info.seq_len;
    int32_t *x = input;
    for (int64_t t = 0; t < T; t++) x[t] = w[t];
    delta_data_mlm_mask(x, target, T, ds->info.mask_id, 256,
                        delta_data_draw_key(seed, epoch, index));
    if (mask)
        for (int64_t t = 0; t < T; t++) mask[t] = 1.0f;
}

/* Reads the whole of path into *buf (malloc'd, at least 1 byte). */
static bool read_file(const char *path, uint8_t **buf, size_t *len,
                      delta_status *status, char *err, size_t err_len) {
    *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        delta_data_fail(status, err, err_len, DELTA_ERR_IO,
                        "%s: cannot open: %s", path, strerror(errno));
        return false;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        delta_data_fail(status, err, err_len, DELTA_ERR_IO,
                        "%s: not a regular file", path);
        fclose(f);
        return false;
    }
    if ((uint64_t)sb.st_size >= SIZE_MAX / 2) {
        delta_data_fail(status, err, err_len, DELTA_ERR_NOMEM,
                        "%s: too large to hold in memory", path);
        fclose(f);
        return false;
    }
    size_t n = (size_t)sb.st_size;
    uint8_t *b = malloc(n ? n : 1);
    if (!b) {
        delta_data_fail(status, err, err_len, DELTA_ERR_NOMEM,
                        "%s: out of memory reading %zu bytes", path, n);
        fclose(f);
        return false;
    }
    size_t got = fread(b, 1, n, f);
    if (got != n || ferror(f)) {
        delta_data_fail(status, err, err_len, DELTA_ERR_IO,
                        "%s: read %zu of %zu bytes: %s", path, got, n,
                        ferror(f) ? strerror(errno) : "file shrank");
        fclose(f);
        free(b);
        return false;
    }
    fclose(f);
    *buf = b;
    *len = n;
    return true;
}

delta_dataset *delta_dataset_text_new(const char *path,
                                      const delta_text_opts *opts,
                                      delta_status *status, char *err,
                                      size_t err_len) {
    if (!delta_data_check_args("text dataset", path, opts != NULL,
                               opts ? opts->seq_len : 0, status, err, err_len))
        return NULL;
    bool masked = opts->kind == DELTA_DATA_MASKED_LM;
    if (!masked && opts->kind != DELTA_DATA_CAUSAL_LM)
        return delta_data_fail(status, err, err_len, DELTA_ERR_INVALID_ARG,
                               "text dataset %s: kind %d is neither causal "
                               "nor masked LM",
                               path, (int)opts->kind);
    int64_t T = opts->seq_len;
    int64_t vocab = opts->vocab ? opts->vocab
                    : masked    ? DELTA_TEXT_MLM_VOCAB
                                : 256;
    if (vocab < 256 || vocab > INT32_MAX)
        return delta_data_fail(status, err, err_len, DELTA_ERR_INVALID_ARG,
                               "text dataset %s: vocab %lld, expected at "
                               "least 256 (byte tokens 0..255)",
                               path, (long long)vocab);

    delta_dataset *ds = delta_data_alloc(opts->kind);
    if (!ds)
        return delta_data_fail(status, err, err_len, DELTA_ERR_NOMEM,
                               "text dataset %s: out of memory", path);
    if (!read_file(path, &ds->text, &ds->text_len, status, err, err_len)) {
        delta_dataset_free(ds);
        return NULL;
    }
    /* Causal windows need T + 1 bytes; masked windows need T. */
    uint64_t need = (uint64_t)T + (masked ? 0 : 1);
    if (ds->text_len < need) {
        delta_data_fail(status, err, err_len, DELTA_ERR_FORMAT,
                        "%s: %zu bytes, too short for one window: a %s "
                        "window of seq_len %lld needs at least %llu bytes",
                        path, ds->text_len, masked ? "masked-LM" : "causal-LM",
                        (long long)T, (unsigned long long)need);
        delta_dataset_free(ds);
        return NULL;
    }
    delta_data_info *in = &ds->info;
    in->len = (int64_t)((ds->text_len - (masked ? 0 : 1)) / (uint64_t)T);
    in->seq_len = T;
    in->vocab = vocab;
    in->input_dtype = DELTA_I32;
    in->input_numel = T;
    in->target_numel = T;
    if (masked) {
        in->mask_id = (int32_t)(vocab - 1);
        in->mask_numel = T;
    }
    ds->get = masked ? get_masked : get_causal;
    snprintf(ds->name, sizeof ds->name,
             "text %.200s (%zu bytes; %lld %s windows of %lld bytes)", path,
             ds->text_len, (long long)in->len,
             masked ? "masked-LM" : "causal-LM",
             (long long)T);
    return ds;
}
