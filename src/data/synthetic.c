/* delta — synthetic datasets (see include/delta/data.h). Nothing is stored:
 * every sample is computed from (seed, index) when it is asked for, so a
 * synthetic dataset of any length costs no memory and any sample can be
 * drawn again bit for bit. */
#include <stdio.h>

#include "core/rng.h"
#include "data/data_impl.h"

/* Separate RNG streams so images, labels, the chain and the walks never
 * share draws. */
#define SALT_PIXELS 0x7069786c73ULL
#define SALT_LABELS 0x6c6162656c73ULL
#define SALT_CHAIN 0x636861696eULL
#define SALT_WALK 0x77616c6bULL
#define SYNTH_MAX ((int64_t)1 << 40)

static inline uint64_t below(uint64_t r, uint64_t n) {
    return (uint64_t)(((unsigned __int128)r * n) >> 64);
}

static void get_image(const delta_dataset *ds, int64_t index, uint64_t seed,
                      uint64_t epoch, void *input, int32_t *target,
                      float *mask, int64_t len) {
    (void)seed, (void)epoch, (void)mask, (void)len;
    uint64_t key = delta_rng_u64(ds->seed ^ SALT_PIXELS, (uint64_t)index);
    float *x = input;
    for (int64_t j = 0; j < ds->info.input_numel; j++)
        x[j] = delta_rng_normal(key, (uint64_t)j);
    target[0] = (int32_t)below(
        delta_rng_u64(ds->seed ^ SALT_LABELS, (uint64_t)index),
        (uint64_t)ds->info.classes);
}

/* Token t >= 1 of walk `key`, following token a over [0, v): one of the
 * DELTA_SYNTH_BRANCH successors of a, which the dataset seed fixes. */
static inline uint64_t walk_step(const delta_dataset *ds, uint64_t key,
                                 uint64_t a, int64_t t, int64_t v) {
    uint64_t b = below(delta_rng_u64(key, (uint64_t)t), DELTA_SYNTH_BRANCH);
    return below(delta_rng_u64(ds->seed ^ SALT_CHAIN,
                               a * DELTA_SYNTH_BRANCH + b),
                 (uint64_t)v);
}

/* Writes tokens [0, n) of walk `index` over [0, v), which starts at a
 * uniform token; returns token n (the one that would follow). */
static uint64_t walk(const delta_dataset *ds, int64_t index, int64_t v,
                     int32_t *out, int64_t n) {
    uint64_t key = delta_rng_u64(ds->seed ^ SALT_WALK, (uint64_t)index);
    uint64_t a = below(delta_rng_u64(key, 0), (uint64_t)v);
    for (int64_t t = 0; t < n; t++) {
        out[t] = (int32_t)a;
        a = walk_step(ds, key, a, t + 1, v);
    }
    return a;
}

static void get_causal(const delta_dataset *ds, int64_t index, uint64_t seed,
                       uint64_t epoch, void *input, int32_t *target,
                       float *mask, int64_t len) {
    (void)seed, (void)epoch, (void)mask;
    int64_t T = len;
    int32_t *x = input;
    /* input = walk[0, T), target = walk[1, T + 1): a prefix of the walk,
     * so a shorter T gives the first T tokens of the longer sample */
    uint64_t last = walk(ds, index, ds->info.vocab, x, T);
    for (int64_t t = 0; t + 1 < T; t++) target[t] = x[t + 1];
    target[T - 1] = (int32_t)last;
}

static void get_masked(const delta_dataset *ds, int64_t index, uint64_t seed,
                       uint64_t epoch, void *input, int32_t *target,
                       float *mask, int64_t len) {
    int64_t T = len, v = ds->info.vocab - 1;
    int32_t *x = input;
    (void)walk(ds, index, v, x, T);
    delta_data_mlm_mask(x, target, T, ds->info.mask_id, v,
                        delta_data_draw_key(seed, epoch, index));
    if (mask)
        for (int64_t t = 0; t < T; t++) mask[t] = 1.0f;
}

delta_dataset *delta_dataset_synthetic_new(const delta_synth_opts *o,
                                           delta_status *status, char *err,
                                           size_t err_len) {
    if (status) *status = DELTA_OK;
    if (err && err_len) err[0] = '\0';
#define BAD(...) \
    delta_data_fail(status, err, err_len, DELTA_ERR_INVALID_ARG, __VA_ARGS__)
    if (!o) return BAD("synthetic dataset: no options given");
    if (o->len < 1 || o->len > SYNTH_MAX)
        return BAD("synthetic dataset: len %lld, expected 1..%lld",
                   (long long)o->len, (long long)SYNTH_MAX);
    delta_dataset *ds = NULL;
    if (o->kind == DELTA_DATA_IMAGES) {
        int64_t c = o->channels, h = o->height, w = o->width;
        if (c < 1 || h < 1 || w < 1 || c > 65536 || h > 65536 || w > 65536 ||
            c * h * w > ((int64_t)1 << 31))
            return BAD("synthetic images: shape %lldx%lldx%lld, expected "
                       "each side >= 1 and at most 2^31 values per image",
                       (long long)c, (long long)h, (long long)w);
        if (o->classes < 1 || o->classes > INT32_MAX)
            return BAD("synthetic images: classes %lld, expected >= 1",
                       (long long)o->classes);
        ds = delta_data_alloc(o->kind);
        if (!ds) goto nomem;
        ds->info.channels = c;
        ds->info.height = h;
        ds->info.width = w;
        ds->info.classes = o->classes;
        ds->info.input_dtype = DELTA_F32;
        ds->info.input_numel = c * h * w;
        ds->info.target_numel = 1;
        ds->get = get_image;
        snprintf(ds->name, sizeof ds->name,
                 "synthetic images (%lld of %lldx%lldx%lld, %lld classes, "
                 "seed %llu)",
                 (long long)o->len, (long long)c, (long long)h, (long long)w,
                 (long long)o->classes, (unsigned long long)o->seed);
    } else if (o->kind == DELTA_DATA_CAUSAL_LM ||
               o->kind == DELTA_DATA_MASKED_LM) {
        bool masked = o->kind == DELTA_DATA_MASKED_LM;
        if (o->seq_len < 1 || o->seq_len > ((int64_t)1 << 24))
            return BAD("synthetic tokens: seq_len %lld, expected 1..2^24",
                       (long long)o->seq_len);
        int64_t vmin = masked ? 3 : 2;
        if (o->vocab < vmin || o->vocab > INT32_MAX)
            return BAD("synthetic tokens: vocab %lld, expected %lld..2^31-1",
                       (long long)o->vocab, (long long)vmin);
        ds = delta_data_alloc(o->kind);
        if (!ds) goto nomem;
        ds->info.seq_len = o->seq_len;
        ds->info.vocab = o->vocab;
        ds->info.input_dtype = DELTA_I32;
        ds->info.input_numel = o->seq_len;
        ds->info.target_numel = o->seq_len;
        if (masked) {
            ds->info.mask_id = (int32_t)(o->vocab - 1);
            ds->info.mask_numel = o->seq_len;
        }
        ds->get = masked ? get_masked : get_causal;
        snprintf(ds->name, sizeof ds->name,
                 "synthetic %s (%lld sequences of %lld tokens, vocab %lld, "
                 "seed %llu)",
                 masked ? "masked-LM" : "causal-LM", (long long)o->len,
                 (long long)o->seq_len, (long long)o->vocab,
                 (unsigned long long)o->seed);
    } else {
        return BAD("synthetic dataset: unknown kind %d", (int)o->kind);
    }
#undef BAD
    ds->info.len = o->len;
    ds->seed = o->seed;
    return ds;
nomem:
    return delta_data_fail(status, err, err_len, DELTA_ERR_NOMEM,
                           "synthetic dataset: out of memory");
}
