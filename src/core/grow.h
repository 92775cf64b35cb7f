/* Growing an array of structs: one copy of "double the capacity (first
 * `first`) until `need` fit", header-only like median.h, for the graph,
 * the pools and the backends' caches. */
#ifndef DELTA_CORE_GROW_H
#define DELTA_CORE_GROW_H

#include <stdbool.h>
#include <stdlib.h>

/* Makes *p (elements of elem bytes, *cap of them) hold at least need:
 * false when the memory cannot be had (*p and *cap as they were). */
static inline bool delta_grow(void **p, int *cap, int need, size_t elem,
                              int first) {
    if (need <= *cap) return true;
    int nc = *cap ? *cap * 2 : first;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return false;
    *p = q;
    *cap = nc;
    return true;
}

#endif
