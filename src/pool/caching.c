/* An emulation of PyTorch's CUDA caching allocator (c10/cuda/
 * CUDACachingAllocator.cpp, default settings, one stream), to compare the
 * bytes it reserves with delta's pool on the same alloc/free sequence.
 *
 * Segments are laid out one above the other in a virtual address space
 * (segment i starts where segment i - 1 ends), which gives the best-fit
 * tie-break on address the real allocator uses. Blocks of all segments are
 * kept in one table; each segment's blocks form a linked list in address
 * order so a freed block merges with free neighbours of its own segment.
 * Best fit is a linear scan over the table: this is a measuring device, not
 * a hot path. */
#include "delta/pool.h"
#include "core/grow.h"

#include <stdlib.h>
#include <string.h>

#define MIN_BLOCK ((size_t)512)
#define SMALL_SIZE ((size_t)1 << 20)       /* largest small request */
#define SMALL_BUFFER ((size_t)2 << 20)     /* small pool segment */
#define LARGE_BUFFER ((size_t)20 << 20)    /* segment for 1-10 MiB requests */
#define MIN_LARGE_ALLOC ((size_t)10 << 20)
#define ROUND_LARGE ((size_t)2 << 20)

typedef struct cblock {
    size_t off;       /* within its segment */
    size_t size;
    size_t req;       /* caller's request (live blocks) */
    int seg;
    int prev, next;   /* segment neighbours; next also links spare slots */
    bool used, small, in_use_slot;
} cblock;

typedef struct cseg {
    size_t base, size;
    bool small;
} cseg;

struct delta_caching {
    cblock *b;
    int n_b, cap_b, spare;
    cseg *seg;
    int n_seg, cap_seg;
    delta_caching_stats st;
};

delta_caching *delta_caching_new(void) {
    delta_caching *c = calloc(1, sizeof *c);
    if (c) c->spare = -1;
    return c;
}

void delta_caching_free(delta_caching *c) {
    if (!c) return;
    free(c->b);
    free(c->seg);
    free(c);
}

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

/* c10's round_size: at least 512, a multiple of 512. */
static size_t round_size(size_t bytes) {
    return bytes < MIN_BLOCK ? MIN_BLOCK : round_up(bytes, MIN_BLOCK);
}

/* c10's get_allocation_size: the segment a new request gets. */
static size_t segment_size(size_t size) {
    if (size <= SMALL_SIZE) return SMALL_BUFFER;
    if (size < MIN_LARGE_ALLOC) return LARGE_BUFFER;
    return round_up(size, ROUND_LARGE);
}

static int block_take(delta_caching *c) {
    int i;
    if (c->spare >= 0) {
        i = c->spare;
        c->spare = c->b[i].next;
    } else {
        if (!delta_grow((void **)&c->b, &c->cap_b, c->n_b + 1, sizeof *c->b,
                        256))
            return -1;
        i = c->n_b++;
    }
    memset(&c->b[i], 0, sizeof c->b[i]);
    c->b[i].prev = c->b[i].next = -1;
    c->b[i].in_use_slot = true;
    return i;
}

static void block_put(delta_caching *c, int i) {
    c->b[i].in_use_slot = false;
    c->b[i].next = c->spare;
    c->spare = i;
}

static size_t addr_of(const delta_caching *c, int i) {
    return c->seg[c->b[i].seg].base + c->b[i].off;
}

delta_status delta_caching_alloc(delta_caching *c, size_t bytes, int *handle) {
    size_t size = round_size(bytes);
    bool small = size <= SMALL_SIZE;
    int best = -1;
    for (int i = 0; i < c->n_b; i++) {
        const cblock *x = &c->b[i];
        if (!x->in_use_slot || x->used || x->small != small || x->size < size)
            continue;
        if (best < 0 || x->size < c->b[best].size ||
            (x->size == c->b[best].size && addr_of(c, i) < addr_of(c, best)))
            best = i;
    }
    if (best < 0) { /* a new segment, appended above the others */
        if (!delta_grow((void **)&c->seg, &c->cap_seg, c->n_seg + 1,
                        sizeof *c->seg, 64))
            return DELTA_ERR_NOMEM;
        best = block_take(c);
        if (best < 0) return DELTA_ERR_NOMEM;
        size_t ss = segment_size(size);
        c->seg[c->n_seg] = (cseg){c->st.reserved_bytes, ss, small};
        c->b[best].seg = c->n_seg++;
        c->b[best].size = ss;
        c->b[best].small = small;
        c->st.reserved_bytes += ss;
        c->st.n_segments++;
        if (small) c->st.n_small_segments++;
        if (c->st.reserved_bytes > c->st.peak_reserved_bytes)
            c->st.peak_reserved_bytes = c->st.reserved_bytes;
    }
    size_t rem = c->b[best].size - size;
    bool split = small ? rem >= MIN_BLOCK : rem > SMALL_SIZE;
    if (split) {
        int r = block_take(c); /* may move c->b */
        if (r < 0) return DELTA_ERR_NOMEM;
        cblock *x = &c->b[best], *y = &c->b[r];
        y->seg = x->seg;
        y->off = x->off + size;
        y->size = rem;
        y->small = small;
        y->prev = best;
        y->next = x->next;
        if (x->next >= 0) c->b[x->next].prev = r;
        x->next = r;
        x->size = size;
    }
    cblock *x = &c->b[best];
    x->used = true;
    x->req = bytes;
    c->st.allocated_bytes += x->size;
    c->st.requested_bytes += bytes;
    c->st.n_live++;
    if (c->st.allocated_bytes > c->st.peak_allocated_bytes)
        c->st.peak_allocated_bytes = c->st.allocated_bytes;
    if (c->st.requested_bytes > c->st.peak_requested_bytes)
        c->st.peak_requested_bytes = c->st.requested_bytes;
    *handle = best;
    return DELTA_OK;
}

static bool live_handle(const delta_caching *c, int h) {
    return h >= 0 && h < c->n_b && c->b[h].in_use_slot && c->b[h].used;
}

delta_status delta_caching_release(delta_caching *c, int h) {
    if (!live_handle(c, h)) return DELTA_ERR_INVALID_ARG;
    cblock *x = &c->b[h];
    x->used = false;
    c->st.allocated_bytes -= x->size;
    c->st.requested_bytes -= x->req;
    c->st.n_live--;
    int p = x->prev;
    if (p >= 0 && !c->b[p].used) { /* merge x into its free predecessor */
        c->b[p].size += x->size;
        c->b[p].next = x->next;
        if (x->next >= 0) c->b[x->next].prev = p;
        block_put(c, h);
        h = p;
        x = &c->b[h];
    }
    int n = x->next;
    if (n >= 0 && !c->b[n].used) {
        x->size += c->b[n].size;
        x->next = c->b[n].next;
        if (x->next >= 0) c->b[x->next].prev = h;
        block_put(c, n);
    }
    return DELTA_OK;
}

delta_status delta_caching_block(const delta_caching *c, int h, int *segment,
                                 size_t *offset, size_t *size,
                                 size_t *segment_size_out) {
    if (!live_handle(c, h)) return DELTA_ERR_INVALID_ARG;
    const cblock *x = &c->b[h];
    if (segment) *segment = x->seg;
    if (offset) *offset = x->off;
    if (size) *size = x->size;
    if (segment_size_out) *segment_size_out = c->seg[x->seg].size;
    return DELTA_OK;
}

void delta_caching_get_stats(const delta_caching *c, delta_caching_stats *s) {
    *s = c->st;
}
