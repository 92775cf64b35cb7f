/* delta — what every dataset shares (see include/delta/data.h): the record's
 * allocation and release, the accessors, batch buffers, error messages and
 * the masked-LM corruption used by the text and synthetic sources. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/rng.h"
#include "data/data_impl.h"

/* Distinct RNG streams for the masked-LM draws. */
#define MLM_SALT 0x6d6c6d5f6d61736bULL

delta_dataset *delta_data_alloc(delta_data_kind kind) {
    delta_dataset *ds = calloc(1, sizeof *ds);
    if (!ds) return NULL;
    ds->info.kind = kind;
    ds->info.mask_id = -1;
    return ds;
}

void *delta_data_fail(delta_status *status, char *err, size_t err_len,
                      delta_status s, const char *fmt, ...) {
    if (status) *status = s;
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return NULL;
}

bool delta_data_check_args(const char *what, const char *path, bool has_opts,
                           int64_t seq_len, delta_status *status, char *err,
                           size_t err_len) {
    if (status) *status = DELTA_OK;
    if (err && err_len) err[0] = '\0';
    if (!path || !has_opts) {
        delta_data_fail(status, err, err_len, DELTA_ERR_INVALID_ARG,
                        "%s: no %s given", what, path ? "options" : "path");
        return false;
    }
    if (seq_len < 1 || seq_len > DELTA_DATA_MAX_SEQ) {
        delta_data_fail(status, err, err_len, DELTA_ERR_INVALID_ARG,
                        "%s %s: seq_len %lld, expected 1..%lld", what, path,
                        (long long)seq_len, (long long)DELTA_DATA_MAX_SEQ);
        return false;
    }
    return true;
}

void delta_dataset_free(delta_dataset *ds) {
    if (!ds) return;
    free(ds->pixels);
    free(ds->labels);
    free(ds->text);
    if (ds->map) munmap(ds->map, ds->map_len);
    free(ds);
}

int64_t delta_dataset_len(const delta_dataset *ds) {
    DELTA_ASSERT(ds);
    return ds->info.len;
}

delta_data_info delta_dataset_info(const delta_dataset *ds) {
    DELTA_ASSERT(ds);
    return ds->info;
}

const char *delta_dataset_name(const delta_dataset *ds) {
    DELTA_ASSERT(ds);
    return ds->name;
}

void delta_dataset_get(const delta_dataset *ds, int64_t index, uint64_t seed,
                       uint64_t epoch, void *input, int32_t *target,
                       float *mask) {
    DELTA_ASSERT(ds && input && target);
    DELTA_ASSERTF(index >= 0 && index < ds->info.len,
                  "sample %lld of a dataset of %lld", (long long)index,
                  (long long)ds->info.len);
    ds->get(ds, index, seed, epoch, input, target, mask, ds->info.seq_len);
}

/* ---- batch buffers ---------------------------------------------------- */

delta_status delta_batch_alloc(delta_batch *b, const delta_dataset *ds,
                               int64_t batch) {
    DELTA_ASSERT(b && ds);
    memset(b, 0, sizeof *b);
    if (batch < 1) return DELTA_ERR_INVALID_ARG;
    const delta_data_info *in = &ds->info;
    size_t n = (size_t)batch, bi, bt, bm;
    if (__builtin_mul_overflow(n, (size_t)in->input_numel * 4, &bi) ||
        __builtin_mul_overflow(n, (size_t)in->target_numel * 4, &bt) ||
        __builtin_mul_overflow(n, (size_t)in->mask_numel * 4, &bm))
        return DELTA_ERR_NOMEM;
    /* Inputs are F32 or I32 and masks F32: 4 bytes an element. */
    b->input = delta_alloc_aligned(bi);
    b->target = delta_alloc_aligned(bt);
    if (in->mask_numel) b->mask = delta_alloc_aligned(bm);
    if (!b->input || !b->target || (in->mask_numel && !b->mask)) {
        delta_batch_release(b);
        return DELTA_ERR_NOMEM;
    }
    return DELTA_OK;
}

void delta_batch_release(delta_batch *b) {
    if (!b) return;
    delta_free_aligned(b->input);
    delta_free_aligned(b->target);
    delta_free_aligned(b->mask);
    memset(b, 0, sizeof *b);
}

/* ---- masked LM -------------------------------------------------------- */

/* Uniform integer in [0, n) from 64 random bits (multiply-high: the bias is
 * at most n / 2^64). */
static inline uint64_t below(uint64_t r, uint64_t n) {
    return (uint64_t)(((unsigned __int128)r * n) >> 64);
}

uint64_t delta_data_draw_key(uint64_t seed, uint64_t epoch, int64_t index) {
    return delta_rng_u64(delta_rng_u64(seed ^ MLM_SALT, epoch),
                         (uint64_t)index);
}

void delta_data_mlm_mask(int32_t *tokens, int32_t *target, int64_t T,
                         int32_t mask_id, int64_t n_random, uint64_t key) {
    /* Exactly k positions, chosen by selection sampling (Knuth's algorithm
     * S): position t is taken with probability need / (T - t), which gives
     * every k-subset the same chance, in one pass and without scratch. */
    int64_t k = (int64_t)((double)DELTA_MLM_PROB * (double)T + 0.5);
    if (k < 1) k = 1;
    int64_t need = k;
    for (int64_t t = 0; t < T; t++) {
        uint64_t c = 3 * (uint64_t)t;
        if ((int64_t)below(delta_rng_u64(key, c), (uint64_t)(T - t)) >= need) {
            target[t] = DELTA_DATA_IGNORE;
            continue;
        }
        need--;
        target[t] = tokens[t];
        float u = delta_rng_uniform(key, c + 1);
        if (u < DELTA_MLM_MASK_SHARE)
            tokens[t] = mask_id;
        else if (u < DELTA_MLM_MASK_SHARE + DELTA_MLM_RANDOM_SHARE)
            tokens[t] = (int32_t)below(delta_rng_u64(key, c + 2),
                                       (uint64_t)n_random);
    }
}
