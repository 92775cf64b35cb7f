/* The online allocator: best fit with splitting and coalescing over the
 * arena [0, capacity).
 *
 * The arena is tiled by blocks, each live (used) or free, kept in a table
 * allocated once (2 * max_live + 1 entries: between and around n live blocks
 * there are at most n + 1 free ranges, since free neighbours always merge).
 * Three structures index the same entries, all by table index, so nothing
 * is allocated after creation:
 *   - a doubly linked list in address order (neighbours for coalescing);
 *   - a treap of every block keyed by offset (release by offset, the block
 *     containing an offset for alloc_at);
 *   - a treap of the free blocks keyed by (size, offset): best fit is the
 *     lower bound of the request's size.
 * Every operation is O(log n) expected. Treap priorities are a fixed hash of
 * the table index, so runs are deterministic. */
#include "pool/pool_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NIL UINT32_MAX

enum { T_ADDR = 0, T_FREE = 1 };

typedef struct pool_node {
    size_t off, size;
    uint64_t tag;            /* caller's tag (live blocks) */
    uint32_t prev, next;     /* address order; `next` also links spares */
    uint32_t kid[2][2];      /* [tree][left, right] */
    uint32_t prio;
    uint8_t used;
} pool_node;

struct delta_pool {
    size_t capacity;
    pool_node *nodes;
    uint32_t n_nodes;        /* table entries */
    uint32_t spare;          /* unused entries, linked through next */
    uint32_t root[2];        /* T_ADDR, T_FREE */
    int max_live, n_live, n_free;
    size_t live, peak_live, peak_addr;
    char err[256];
};

#define N(i) (p->nodes[(i)])

size_t delta_pool_round(size_t bytes) {
    if (bytes == 0) return DELTA_POOL_ALIGN;
    if (bytes > SIZE_MAX - (DELTA_POOL_ALIGN - 1)) return SIZE_MAX;
    return (bytes + DELTA_POOL_ALIGN - 1) & ~(size_t)(DELTA_POOL_ALIGN - 1);
}

static void set_err(delta_pool *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_err(delta_pool *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, sizeof p->err, fmt, ap);
    va_end(ap);
}

static uint32_t hash32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/* ---- treaps ------------------------------------------------------------ */

static bool key_less(const delta_pool *p, int t, uint32_t a, uint32_t b) {
    const pool_node *x = &p->nodes[a], *y = &p->nodes[b];
    if (t == T_FREE && x->size != y->size) return x->size < y->size;
    return x->off < y->off;
}

static uint32_t tr_insert(delta_pool *p, int t, uint32_t r, uint32_t x) {
    if (r == NIL) {
        N(x).kid[t][0] = N(x).kid[t][1] = NIL;
        return x;
    }
    int d = key_less(p, t, x, r) ? 0 : 1;
    uint32_t c = tr_insert(p, t, N(r).kid[t][d], x);
    N(r).kid[t][d] = c;
    if (N(c).prio > N(r).prio) { /* rotate c above r */
        N(r).kid[t][d] = N(c).kid[t][!d];
        N(c).kid[t][!d] = r;
        return c;
    }
    return r;
}

/* Joins two treaps where every key of a is below every key of b. */
static uint32_t tr_merge(delta_pool *p, int t, uint32_t a, uint32_t b) {
    if (a == NIL) return b;
    if (b == NIL) return a;
    if (N(a).prio > N(b).prio) {
        N(a).kid[t][1] = tr_merge(p, t, N(a).kid[t][1], b);
        return a;
    }
    N(b).kid[t][0] = tr_merge(p, t, a, N(b).kid[t][0]);
    return b;
}

static uint32_t tr_remove(delta_pool *p, int t, uint32_t r, uint32_t x) {
    DELTA_ASSERTF(r != NIL, "pool: block %u missing from tree %d", x, t);
    if (r == x) return tr_merge(p, t, N(x).kid[t][0], N(x).kid[t][1]);
    int d = key_less(p, t, x, r) ? 0 : 1;
    N(r).kid[t][d] = tr_remove(p, t, N(r).kid[t][d], x);
    return r;
}

static void tree_insert(delta_pool *p, int t, uint32_t x) {
    p->root[t] = tr_insert(p, t, p->root[t], x);
}
static void tree_remove(delta_pool *p, int t, uint32_t x) {
    p->root[t] = tr_remove(p, t, p->root[t], x);
}

/* The block with the largest offset <= off (the one containing off). */
static uint32_t find_floor(const delta_pool *p, size_t off) {
    uint32_t r = p->root[T_ADDR], best = NIL;
    while (r != NIL) {
        if (N(r).off <= off) {
            best = r;
            r = N(r).kid[T_ADDR][1];
        } else {
            r = N(r).kid[T_ADDR][0];
        }
    }
    return best;
}

/* The free block of smallest (size, offset) with size >= bytes. */
static uint32_t find_best_fit(const delta_pool *p, size_t bytes) {
    uint32_t r = p->root[T_FREE], best = NIL;
    while (r != NIL) {
        if (N(r).size >= bytes) {
            best = r;
            r = N(r).kid[T_FREE][0];
        } else {
            r = N(r).kid[T_FREE][1];
        }
    }
    return best;
}

static uint32_t extreme(const delta_pool *p, int t, int side) {
    uint32_t r = p->root[t];
    if (r == NIL) return NIL;
    while (N(r).kid[t][side] != NIL) r = N(r).kid[t][side];
    return r;
}

/* ---- table ------------------------------------------------------------- */

static uint32_t node_take(delta_pool *p) {
    uint32_t x = p->spare;
    DELTA_ASSERTF(x != NIL, "pool: block table exhausted below its limit");
    p->spare = N(x).next;
    N(x).prev = N(x).next = NIL;
    N(x).kid[0][0] = N(x).kid[0][1] = N(x).kid[1][0] = N(x).kid[1][1] = NIL;
    N(x).used = 0;
    N(x).tag = 0;
    return x;
}

static void node_put(delta_pool *p, uint32_t x) {
    N(x).next = p->spare;
    p->spare = x;
}

/* Links y right after x in address order. */
static void link_after(delta_pool *p, uint32_t x, uint32_t y) {
    N(y).prev = x;
    N(y).next = N(x).next;
    if (N(x).next != NIL) N(N(x).next).prev = y;
    N(x).next = y;
}

static void unlink_node(delta_pool *p, uint32_t x) {
    if (N(x).prev != NIL) N(N(x).prev).next = N(x).next;
    if (N(x).next != NIL) N(N(x).next).prev = N(x).prev;
}

static delta_status table_grow(delta_pool *p, int max_live) {
    size_t want = 2 * (size_t)max_live + 1;
    if (want > NIL - 1) return DELTA_ERR_INVALID_ARG;
    if (want <= p->n_nodes) {
        if (max_live > p->max_live) p->max_live = max_live;
        return DELTA_OK;
    }
    pool_node *nn = realloc(p->nodes, want * sizeof *nn);
    if (!nn) return DELTA_ERR_NOMEM;
    p->nodes = nn;
    for (uint32_t i = (uint32_t)want; i-- > p->n_nodes;) {
        memset(&N(i), 0, sizeof N(i));
        N(i).prio = hash32(i * 2654435761U + 1U);
        node_put(p, i);
    }
    p->n_nodes = (uint32_t)want;
    p->max_live = max_live;
    return DELTA_OK;
}

/* ---- public ------------------------------------------------------------ */

delta_pool *delta_pool_new(size_t capacity, int max_live, char *err,
                           size_t err_len) {
    char dummy[8];
    if (!err) { err = dummy; err_len = sizeof dummy; }
    size_t cap = capacity & ~(size_t)(DELTA_POOL_ALIGN - 1);
    if (cap == 0) {
        snprintf(err, err_len, "pool capacity %zu is below the %d-byte "
                 "alignment unit", capacity, DELTA_POOL_ALIGN);
        return NULL;
    }
    if (max_live < 1) {
        snprintf(err, err_len, "pool block limit %d must be at least 1",
                 max_live);
        return NULL;
    }
    delta_pool *p = calloc(1, sizeof *p);
    if (!p) goto nomem;
    p->capacity = cap;
    p->spare = NIL;
    p->root[0] = p->root[1] = NIL;
    delta_status st = table_grow(p, max_live);
    if (st != DELTA_OK) {
        delta_pool_free(p);
        if (st == DELTA_ERR_NOMEM) goto nomem;
        snprintf(err, err_len, "pool block limit %d is too large", max_live);
        return NULL;
    }
    uint32_t x = node_take(p);
    N(x).off = 0;
    N(x).size = cap;
    tree_insert(p, T_ADDR, x);
    tree_insert(p, T_FREE, x);
    p->n_free = 1;
    return p;
nomem:
    snprintf(err, err_len, "out of host memory for a pool of %d blocks",
             max_live);
    return NULL;
}

void delta_pool_free(delta_pool *p) {
    if (!p) return;
    free(p->nodes);
    free(p);
}

delta_status delta_pool_reserve(delta_pool *p, int max_live) {
    delta_status st = table_grow(p, max_live);
    if (st == DELTA_ERR_NOMEM)
        set_err(p, "out of host memory growing the block table to %d blocks",
                max_live);
    else if (st != DELTA_OK)
        set_err(p, "block limit %d is too large", max_live);
    return st;
}

/* Turns [off, off + size) of free block f into a live block, leaving the
 * free parts on either side as free blocks. */
static void carve(delta_pool *p, uint32_t f, size_t off, size_t size,
                  uint64_t tag) {
    size_t left = off - N(f).off;
    size_t right = N(f).off + N(f).size - (off + size);
    tree_remove(p, T_FREE, f);
    p->n_free--;
    uint32_t u = f;
    if (left > 0) {
        N(f).size = left;
        tree_insert(p, T_FREE, f);
        p->n_free++;
        u = node_take(p);
        N(u).off = off;
        link_after(p, f, u);
        tree_insert(p, T_ADDR, u);
    }
    N(u).size = size;
    N(u).used = 1;
    N(u).tag = tag;
    if (right > 0) {
        uint32_t r = node_take(p);
        N(r).off = off + size;
        N(r).size = right;
        link_after(p, u, r);
        tree_insert(p, T_ADDR, r);
        tree_insert(p, T_FREE, r);
        p->n_free++;
    }
    p->n_live++;
    p->live += size;
    if (p->live > p->peak_live) p->peak_live = p->live;
    if (off + size > p->peak_addr) p->peak_addr = off + size;
}

static size_t largest_free(const delta_pool *p) {
    uint32_t x = extreme(p, T_FREE, 1);
    return x == NIL ? 0 : N(x).size;
}

static bool table_full(delta_pool *p, size_t size) {
    if (p->n_live < p->max_live) return false;
    set_err(p, "cannot place %zu bytes: the pool's block table is full "
            "(%d live blocks); reserve more with delta_pool_reserve",
            size, p->n_live);
    return true;
}

delta_status delta_pool_alloc_tagged(delta_pool *p, size_t size, uint64_t tag,
                                     size_t *off) {
    DELTA_ASSERT(size > 0 && size % DELTA_POOL_ALIGN == 0);
    if (table_full(p, size)) return DELTA_ERR_BUDGET;
    uint32_t f = find_best_fit(p, size);
    if (f == NIL) {
        set_err(p, "no free range of %zu bytes: %zu of %zu bytes live in %d "
                "blocks, largest free range %zu bytes", size, p->live,
                p->capacity, p->n_live, largest_free(p));
        return DELTA_ERR_BUDGET;
    }
    *off = N(f).off;
    carve(p, f, N(f).off, size, tag);
    return DELTA_OK;
}

delta_status delta_pool_alloc(delta_pool *p, size_t bytes, size_t *off) {
    size_t size = delta_pool_round(bytes);
    if (size == SIZE_MAX) {
        set_err(p, "request of %zu bytes is larger than any pool", bytes);
        return DELTA_ERR_BUDGET;
    }
    return delta_pool_alloc_tagged(p, size, 0, off);
}

delta_status delta_pool_alloc_at_tagged(delta_pool *p, size_t off, size_t size,
                                        uint64_t tag) {
    DELTA_ASSERT(size > 0 && size % DELTA_POOL_ALIGN == 0);
    if (off % DELTA_POOL_ALIGN) {
        set_err(p, "offset %zu is not a multiple of %d", off,
                DELTA_POOL_ALIGN);
        return DELTA_ERR_INVALID_ARG;
    }
    if (off >= p->capacity || size > p->capacity - off) {
        set_err(p, "range [%zu, +%zu) ends past the capacity %zu", off, size,
                p->capacity);
        return DELTA_ERR_BUDGET;
    }
    if (table_full(p, size)) return DELTA_ERR_BUDGET;
    uint32_t f = find_floor(p, off);
    DELTA_ASSERT(f != NIL);
    if (N(f).used || N(f).off + N(f).size < off + size) {
        set_err(p, "range [%zu, +%zu) is not free", off, size);
        return DELTA_ERR_BUDGET;
    }
    carve(p, f, off, size, tag);
    return DELTA_OK;
}

delta_status delta_pool_alloc_at(delta_pool *p, size_t off, size_t bytes) {
    size_t size = delta_pool_round(bytes);
    if (size == SIZE_MAX) {
        set_err(p, "request of %zu bytes is larger than any pool", bytes);
        return DELTA_ERR_BUDGET;
    }
    return delta_pool_alloc_at_tagged(p, off, size, 0);
}

delta_status delta_pool_release_tagged(delta_pool *p, size_t off,
                                       uint64_t *tag) {
    uint32_t x = find_floor(p, off);
    if (x == NIL || N(x).off != off || !N(x).used) {
        set_err(p, "release of offset %zu: no live block starts there", off);
        return DELTA_ERR_INVALID_ARG;
    }
    if (tag) *tag = N(x).tag;
    N(x).used = 0;
    p->live -= N(x).size;
    p->n_live--;
    uint32_t prv = N(x).prev, nxt = N(x).next;
    if (prv != NIL && !N(prv).used) {
        /* grow prv over x; prv's offset (its address key) is unchanged */
        tree_remove(p, T_FREE, prv);
        p->n_free--;
        N(prv).size += N(x).size;
        tree_remove(p, T_ADDR, x);
        unlink_node(p, x);
        node_put(p, x);
        x = prv;
    }
    if (nxt != NIL && !N(nxt).used) {
        tree_remove(p, T_FREE, nxt);
        tree_remove(p, T_ADDR, nxt);
        p->n_free--;
        N(x).size += N(nxt).size;
        unlink_node(p, nxt);
        node_put(p, nxt);
    }
    tree_insert(p, T_FREE, x);
    p->n_free++;
    return DELTA_OK;
}

delta_status delta_pool_release(delta_pool *p, size_t off) {
    return delta_pool_release_tagged(p, off, NULL);
}

size_t delta_pool_block_size(const delta_pool *p, size_t off) {
    uint32_t x = find_floor(p, off);
    if (x == NIL || N(x).off != off || !N(x).used) return 0;
    return N(x).size;
}

bool delta_pool_range_free(const delta_pool *p, size_t off, size_t bytes) {
    size_t size = delta_pool_round(bytes);
    if (size == SIZE_MAX || off >= p->capacity || size > p->capacity - off)
        return false;
    /* free neighbours merge, so a free range is one block */
    uint32_t f = find_floor(p, off);
    return f != NIL && !N(f).used && N(f).off + N(f).size >= off + size;
}

/* End of the highest live block: the arena is tiled and free neighbours
 * merge, so it is the last block's end if that one is live, else its
 * start. */
static size_t top_address(const delta_pool *p) {
    uint32_t x = extreme(p, T_ADDR, 1);
    DELTA_ASSERT(x != NIL);
    return N(x).used ? N(x).off + N(x).size : N(x).off;
}

void delta_pool_get_stats(const delta_pool *p, delta_pool_stats *s) {
    memset(s, 0, sizeof *s);
    s->capacity = p->capacity;
    s->live_bytes = p->live;
    s->peak_live_bytes = p->peak_live;
    s->peak_address = p->peak_addr;
    s->largest_free = largest_free(p);
    s->n_live = p->n_live;
    s->n_free = p->n_free;
    s->max_live = p->max_live;
    s->fragmentation = p->peak_live
                           ? (double)p->peak_addr / (double)p->peak_live
                           : 1.0;
}

void delta_pool_reset_peaks(delta_pool *p) {
    p->peak_live = p->live;
    p->peak_addr = top_address(p);
}

const char *delta_pool_error(const delta_pool *p) { return p->err; }

void delta_pool_for_each_live(const delta_pool *p,
                              void (*fn)(size_t off, size_t size, void *user),
                              void *user) {
    for (uint32_t x = extreme(p, T_ADDR, 0); x != NIL; x = N(x).next)
        if (N(x).used) fn(N(x).off, N(x).size, user);
}

void delta_pool_for_each_live_tagged(const delta_pool *p,
                                     void (*fn)(size_t off, size_t size,
                                                uint64_t tag, void *user),
                                     void *user) {
    for (uint32_t x = extreme(p, T_ADDR, 0); x != NIL; x = N(x).next)
        if (N(x).used) fn(N(x).off, N(x).size, N(x).tag, user);
}

/* ---- validation ---------------------------------------------------------- */

/* In-order walk of tree t checking order and heap property; counts nodes
 * and returns false on the first violation (message set). */
static bool check_tree(delta_pool *p, int t, uint32_t r, uint32_t *last,
                       int *count, int depth) {
    if (r == NIL) return true;
    if (depth > 200 || *count > (int)p->n_nodes) {
        set_err(p, "tree %d is deeper than any treap of its size", t);
        return false;
    }
    for (int d = 0; d < 2; d++) {
        uint32_t c = N(r).kid[t][d];
        if (c != NIL && N(c).prio > N(r).prio) {
            set_err(p, "tree %d: heap order broken at block %u", t, r);
            return false;
        }
    }
    if (!check_tree(p, t, N(r).kid[t][0], last, count, depth + 1))
        return false;
    if (*last != NIL && !key_less(p, t, *last, r)) {
        set_err(p, "tree %d: keys out of order at offset %zu", t, N(r).off);
        return false;
    }
    if (t == T_FREE && N(r).used) {
        set_err(p, "live block at %zu is in the free tree", N(r).off);
        return false;
    }
    *last = r;
    (*count)++;
    return check_tree(p, t, N(r).kid[t][1], last, count, depth + 1);
}

bool delta_pool_validate(const delta_pool *cp) {
    delta_pool *p = (delta_pool *)cp; /* only the message is written */
    size_t at = 0, live = 0;
    int n_live = 0, n_free = 0, n = 0;
    uint32_t prev = NIL;
    for (uint32_t x = extreme(p, T_ADDR, 0); x != NIL; x = N(x).next) {
        if (N(x).prev != prev) {
            set_err(p, "block at %zu: broken back link", N(x).off);
            return false;
        }
        if (N(x).off != at || N(x).size == 0 ||
            N(x).off % DELTA_POOL_ALIGN || N(x).size % DELTA_POOL_ALIGN) {
            set_err(p, "block [%zu, +%zu) does not follow %zu aligned",
                    N(x).off, N(x).size, at);
            return false;
        }
        if (prev != NIL && !N(prev).used && !N(x).used) {
            set_err(p, "free blocks at %zu and %zu were not merged",
                    N(prev).off, N(x).off);
            return false;
        }
        if (N(x).used) {
            n_live++;
            live += N(x).size;
        } else {
            n_free++;
        }
        at += N(x).size;
        prev = x;
        if (++n > (int)p->n_nodes) {
            set_err(p, "address list has a cycle");
            return false;
        }
    }
    if (at != p->capacity) {
        set_err(p, "blocks cover %zu bytes of %zu", at, p->capacity);
        return false;
    }
    if (n_live != p->n_live || n_free != p->n_free || live != p->live) {
        set_err(p, "counts differ: %d/%d live, %d/%d free, %zu/%zu bytes",
                n_live, p->n_live, n_free, p->n_free, live, p->live);
        return false;
    }
    uint32_t last = NIL;
    int count = 0;
    if (!check_tree(p, T_ADDR, p->root[T_ADDR], &last, &count, 0)) return false;
    if (count != n) {
        set_err(p, "address tree holds %d blocks, list %d", count, n);
        return false;
    }
    last = NIL;
    count = 0;
    if (!check_tree(p, T_FREE, p->root[T_FREE], &last, &count, 0))
        return false;
    if (count != n_free) {
        set_err(p, "free tree holds %d blocks, list %d", count, n_free);
        return false;
    }
    if (p->peak_live < p->live || p->peak_addr < top_address(p)) {
        set_err(p, "peaks below the current state");
        return false;
    }
    return true;
}
