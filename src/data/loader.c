/* delta — the batch loader (see include/delta/data.h). The order of an
 * epoch is a pure function of (seed, epoch): a Fisher-Yates shuffle whose
 * draws come from the counter-based RNG of core/rng.h, so no state but
 * (epoch, index) needs saving to resume, and the order is the same on any
 * machine and thread count. The loader keeps the current epoch's
 * permutation (len int64s, made once per epoch); batches are written
 * straight into the caller's buffers. */
#include <stdio.h>
#include <stdlib.h>

#include "core/rng.h"
#include "data/data_impl.h"

#define SHUFFLE_SALT 0x73687566666c65ULL
#define LOADER_PAR_MIN ((int64_t)1 << 18) /* elements per batch */

struct delta_loader {
    const delta_dataset *ds;
    int64_t batch;
    uint64_t seed;
    bool shuffle, drop_last;
    int64_t *perm;        /* (len) order of perm_epoch; NULL without shuffle */
    int64_t perm_epoch;   /* epoch perm holds, -1 none */
    int64_t epoch, index; /* position of the next batch */
    int rank, ranks;      /* data parallel: this loader's share (0 of 1) */
};

void delta_data_permutation(int64_t n, uint64_t seed, int64_t epoch,
                            int64_t *perm) {
    DELTA_ASSERT(n >= 0 && (perm || n == 0));
    uint64_t key = delta_rng_u64(seed ^ SHUFFLE_SALT, (uint64_t)epoch);
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    /* Fisher-Yates from the end: slot i takes a uniform pick of [0, i]
     * (multiply-high of 64 random bits: bias at most n / 2^64). */
    for (int64_t i = n - 1; i > 0; i--) {
        uint64_t r = delta_rng_u64(key, (uint64_t)i);
        int64_t j = (int64_t)(((unsigned __int128)r * (uint64_t)(i + 1)) >> 64);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

delta_loader *delta_loader_new(const delta_dataset *ds, int64_t batch,
                               uint64_t seed, bool shuffle, bool drop_last,
                               delta_status *status, char *err,
                               size_t err_len) {
    if (status) *status = DELTA_OK;
    if (err && err_len) err[0] = '\0';
    if (!ds)
        return delta_data_fail(status, err, err_len, DELTA_ERR_INVALID_ARG,
                               "loader: no dataset given");
    int64_t len = ds->info.len;
    if (batch < 1)
        return delta_data_fail(status, err, err_len, DELTA_ERR_INVALID_ARG,
                               "loader over %s: batch %lld, expected >= 1",
                               ds->name, (long long)batch);
    if (drop_last && batch > len)
        return delta_data_fail(
            status, err, err_len, DELTA_ERR_INVALID_ARG,
            "loader over %s: batch %lld is larger than the dataset (%lld "
            "samples), so with drop_last an epoch has no batch; use a batch "
            "of at most %lld or keep the last partial batch",
            ds->name, (long long)batch, (long long)len, (long long)len);
    delta_loader *l = calloc(1, sizeof *l);
    if (!l)
        return delta_data_fail(status, err, err_len, DELTA_ERR_NOMEM,
                               "loader: out of memory");
    l->ds = ds;
    l->batch = batch;
    l->seed = seed;
    l->shuffle = shuffle;
    l->drop_last = drop_last;
    l->perm_epoch = -1;
    l->ranks = 1;
    if (shuffle) {
        l->perm = malloc((size_t)len * sizeof *l->perm);
        if (!l->perm) {
            free(l);
            return delta_data_fail(status, err, err_len, DELTA_ERR_NOMEM,
                                   "loader over %s: out of memory for the "
                                   "order of %lld samples",
                                   ds->name, (long long)len);
        }
    }
    return l;
}

void delta_loader_free(delta_loader *l) {
    if (!l) return;
    free(l->perm);
    free(l);
}

/* Samples of a global batch: every rank's batch. */
static int64_t global_batch(const delta_loader *l) {
    return l->batch * l->ranks;
}

/* Samples of an epoch that go into batches: whole global batches, and the
 * last partial one unless it is dropped or too small to give every rank a
 * sample. */
static int64_t epoch_end(const delta_loader *l) {
    int64_t len = l->ds->info.len, g = global_batch(l);
    int64_t full = len / g * g;
    if (l->drop_last || (len - full) / l->ranks == 0) return full;
    return len;
}

int64_t delta_loader_batches_per_epoch(const delta_loader *l) {
    DELTA_ASSERT(l);
    int64_t g = global_batch(l);
    return (epoch_end(l) + g - 1) / g;
}

delta_status delta_loader_set_shard(delta_loader *l, int rank, int ranks) {
    DELTA_ASSERT(l);
    if (ranks < 1 || rank < 0 || rank >= ranks ||
        (l->drop_last && l->batch * ranks > l->ds->info.len))
        return DELTA_ERR_INVALID_ARG;
    l->rank = rank;
    l->ranks = ranks;
    return DELTA_OK;
}

void delta_loader_next(delta_loader *l, delta_batch *out) {
    delta_loader_next_len(l, out, l->ds->info.seq_len);
}

void delta_loader_next_len(delta_loader *l, delta_batch *out,
                           int64_t seq_len) {
    DELTA_ASSERT(l && out && out->input && out->target);
    const delta_data_info *in = &l->ds->info;
    /* token samples: seq_len tokens each, stored densely; images: whole */
    bool tokens = in->kind != DELTA_DATA_IMAGES;
    int64_t len = tokens ? seq_len : 0;
    DELTA_ASSERTF(!tokens || (seq_len >= 1 && seq_len <= in->seq_len),
                  "seq_len %lld of samples of %lld tokens",
                  (long long)seq_len, (long long)in->seq_len);
    if (l->index >= epoch_end(l)) {
        l->epoch++;
        l->index = 0;
    }
    if (l->shuffle && l->perm_epoch != l->epoch) {
        delta_data_permutation(l->ds->info.len, l->seed, l->epoch, l->perm);
        l->perm_epoch = l->epoch;
    }
    /* the global batch at index, and this rank's share of it */
    int64_t g = in->len - l->index;
    if (g > global_batch(l)) g = global_batch(l);
    int64_t n = g / l->ranks, first = l->index + l->rank * n;
    int64_t in_numel = tokens ? len : in->input_numel;
    int64_t tg_numel = tokens ? len : in->target_numel;
    int64_t mk_numel = in->mask_numel ? len : 0;
    size_t in_stride = (size_t)in_numel * delta_dtype_size(in->input_dtype);
    float *mask = in->mask_numel ? out->mask : NULL;
    /* Samples are independent and each is written by one thread, so the
     * batch is the same for any thread count; threads pay off for big
     * samples (synthetic 224x224 images draw ~150k normals each). */
#ifdef _OPENMP
#pragma omp parallel for schedule(static) \
    if (n * in_numel >= LOADER_PAR_MIN)
#endif
    for (int64_t s = 0; s < n; s++) {
        int64_t pos = first + s;
        int64_t i = l->shuffle ? l->perm[pos] : pos;
        l->ds->get(l->ds, i, l->seed, (uint64_t)l->epoch,
                   (char *)out->input + (size_t)s * in_stride,
                   out->target + (size_t)s * (size_t)tg_numel,
                   mask ? mask + (size_t)s * (size_t)mk_numel : NULL, len);
    }
    out->size = n;
    out->epoch = l->epoch;
    out->index = l->index;
    l->index += g;
}

delta_loader_pos delta_loader_get_pos(const delta_loader *l) {
    DELTA_ASSERT(l);
    return (delta_loader_pos){l->epoch, l->index};
}

delta_status delta_loader_set_pos(delta_loader *l, delta_loader_pos pos) {
    DELTA_ASSERT(l);
    if (pos.epoch < 0 || pos.index < 0 || pos.index > l->ds->info.len)
        return DELTA_ERR_INVALID_ARG;
    l->epoch = pos.epoch;
    l->index = pos.index;
    return DELTA_OK;
}
