/* A file of tuned kernel choices kept between runs: for each (device, key)
 * the algorithm a backend picked by timing and the workspace it needs.
 * The cuda backend keeps cuDNN's convolution choices here (per GPU, cuDNN
 * version and shape: cudnn_conv.c), so a second run neither times them
 * again nor risks a different pick (a different algorithm rounds
 * differently: runs of one machine stay bit-identical to each other).
 *
 * The file is text, one choice a line: DEVICE<TAB>KEY<TAB>ALGO<TAB>BYTES.
 * Lines of other devices are kept as they are; a malformed line is
 * skipped. Saving rereads the file, keeps what other runs added since,
 * and replaces it atomically (a reader never sees half a file). Plain C
 * with no CUDA in it, so it is tested on any machine. */
#ifndef DELTA_ALGO_CACHE_H
#define DELTA_ALGO_CACHE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct delta_algo_cache delta_algo_cache;

/* The default file: $XDG_CACHE_HOME/delta/NAME, else ~/.cache/delta/NAME;
 * "" when neither variable is set. */
void delta_algo_cache_default_path(const char *name, char *buf, size_t n);

/* Opens the cache of device at path (NULL or "": nothing is read or
 * written), reading what is there. NULL only when out of memory. */
delta_algo_cache *delta_algo_cache_open(const char *path, const char *device);
void delta_algo_cache_free(delta_algo_cache *c);

/* The choice kept for key on this device. */
bool delta_algo_cache_get(const delta_algo_cache *c, const char *key,
                          int *algo, size_t *bytes);
/* Keeps a choice (replacing one for the same key), to be saved. */
void delta_algo_cache_put(delta_algo_cache *c, const char *key, int algo,
                          size_t bytes);
/* Writes the file when something was put since the last save; true when
 * nothing needed writing or it was written, false with err otherwise (the
 * choices stay in memory either way). */
bool delta_algo_cache_save(delta_algo_cache *c, char *err, size_t err_len);

#endif
