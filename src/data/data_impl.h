/* delta — the dataset record shared by the data sources (idx.c, text.c,
 * tokens.c, synthetic.c), dataset.c (the common calls) and loader.c. Private. */
#ifndef DELTA_DATA_IMPL_H
#define DELTA_DATA_IMPL_H

#include "delta/data.h"

/* Writes one sample (see delta_dataset_get); must not touch the dataset,
 * so several threads may read samples at once. len: token samples are cut
 * to their first len tokens (1 <= len <= info.seq_len; see
 * delta_loader_next_len); images ignore it. */
typedef void (*data_get_fn)(const delta_dataset *ds, int64_t index,
                            uint64_t seed, uint64_t epoch, void *input,
                            int32_t *target, float *mask, int64_t len);

struct delta_dataset {
    delta_data_info info;
    data_get_fn get;
    char name[320];
    /* Fashion-MNIST / idx */
    uint8_t *pixels;     /* (len, H, W) raw bytes */
    uint8_t *labels;     /* (len) */
    float lut[256];      /* normalized value of each pixel byte */
    /* text */
    uint8_t *text;       /* the file's bytes */
    size_t text_len;
    /* llm.c tokens: the file mapped read-only (munmap'd by _free) */
    void *map;
    size_t map_len;
    const uint8_t *tokens; /* (N) little-endian uint16, after the header */
    /* synthetic */
    uint64_t seed;
};

/* Longest token window of the file-backed token datasets (text, tokens). */
#define DELTA_DATA_MAX_SEQ ((int64_t)1 << 24)

/* The start of every file-backed token dataset's constructor: clears
 * *status and err, then refuses (DELTA_ERR_INVALID_ARG, message naming
 * `what`, e.g. "text dataset", and path) a NULL path, no options
 * (has_opts false) or a seq_len outside 1..DELTA_DATA_MAX_SEQ. */
bool delta_data_check_args(const char *what, const char *path, bool has_opts,
                           int64_t seq_len, delta_status *status, char *err,
                           size_t err_len);

/* A zeroed dataset with info.kind = kind and mask_id -1, or NULL. */
delta_dataset *delta_data_alloc(delta_data_kind kind);

/* Sets *status and writes a formatted message to err (either may be NULL);
 * returns NULL so constructors can `return delta_data_fail(...)`. */
void *delta_data_fail(delta_status *status, char *err, size_t err_len,
                      delta_status s, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Masked-LM corruption of one window, in place: tokens (T) holds the
 * original ids on entry; on return the chosen positions are replaced and
 * target (T) holds the originals there and DELTA_DATA_IGNORE elsewhere.
 * Random replacements are uniform in [0, n_random). key identifies the
 * draw (a function of seed, epoch and window). */
void delta_data_mlm_mask(int32_t *tokens, int32_t *target, int64_t T,
                         int32_t mask_id, int64_t n_random, uint64_t key);

/* Per-draw key for sample `index` of a masked-LM dataset. */
uint64_t delta_data_draw_key(uint64_t seed, uint64_t epoch, int64_t index);

#endif
