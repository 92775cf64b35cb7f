/* Internal interface of the pool module: allocation with a caller's tag
 * stored in the block (replay keeps the trace index there, so a release by
 * offset finds its record without a search). Only src/pool/ uses these. */
#ifndef DELTA_POOL_IMPL_H
#define DELTA_POOL_IMPL_H

#include "delta/pool.h"

/* As delta_pool_alloc / delta_pool_alloc_at, storing tag in the block.
 * bytes must already be rounded (a multiple of DELTA_POOL_ALIGN, > 0). */
delta_status delta_pool_alloc_tagged(delta_pool *pool, size_t bytes,
                                     uint64_t tag, size_t *off);
delta_status delta_pool_alloc_at_tagged(delta_pool *pool, size_t off,
                                        size_t bytes, uint64_t tag);
/* As delta_pool_release; *tag receives the block's tag. */
delta_status delta_pool_release_tagged(delta_pool *pool, size_t off,
                                       uint64_t *tag);

/* As delta_pool_for_each_live, with each block's tag. */
void delta_pool_for_each_live_tagged(const delta_pool *pool,
                                     void (*fn)(size_t off, size_t size,
                                                uint64_t tag, void *user),
                                     void *user);

#endif
