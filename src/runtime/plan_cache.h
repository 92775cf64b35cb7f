/* The plan cache (delta_plan_cache of delta/session.h): a small store of
 * blobs keyed by (policy name, program key) that lets a policy keep what it
 * planned for a program across sessions. A run whose shapes change (the
 * last, shorter batch of an epoch; a sequence length drawn per step)
 * creates a session per shape change; a policy that finds its plan for the
 * program's key in the cache skips planning it again.
 *
 * The cache owns copies of the blobs. It is not locked: one session at a
 * time uses it (a backend holds one arena, so only one session per backend
 * is alive anyway). */
#ifndef DELTA_PLAN_CACHE_H
#define DELTA_PLAN_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "delta/session.h"

/* The blob stored for (policy, program_key), or NULL (also for a NULL
 * cache). *bytes (may be NULL) gets its size. The pointer stays valid until
 * the same key is put again or the cache is freed. */
const void *plan_cache_get(delta_plan_cache *c, const char *policy,
                           uint64_t program_key, size_t *bytes);

/* Stores a copy of blob (bytes may be 0) for (policy, program_key),
 * replacing any earlier one. false when c or policy is NULL or memory runs
 * out (the cache is then unchanged). */
bool plan_cache_put(delta_plan_cache *c, const char *policy,
                    uint64_t program_key, const void *blob, size_t bytes);

/* Entries held (for tests and reports). */
int plan_cache_count(const delta_plan_cache *c);

/* A 64-bit hash (xxHash64-style rounds over 64-bit values, then a final
 * SplitMix64 mix) of everything
 * that defines a program's shape and schedule: the op list (type, phase,
 * inputs, outputs, attributes, flags, workspace) and every tensor (dtype,
 * kind, shape, view, producer). Names, the seed and initial values are left
 * out: they change no plan. Identical programs give identical keys;
 * programs of different shapes (batch, sequence length) give different
 * ones. */
uint64_t delta_program_key(const delta_ctx *ctx);

#endif
