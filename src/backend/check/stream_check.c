/* The stream-order checker: a backend that wraps another, forwards every
 * call to it, and checks that the runtime orders every reuse of a byte
 * range across streams on the device (docs/DEVICE.md, "The stream-order
 * checker"). An ordering bug in an asynchronous runtime corrupts training
 * silently and only now and then; this makes it fail at once, naming the
 * op, the tensor and both streams.
 *
 * Parties: the four streams (compute, the two copy streams, the
 * communication stream of collective ops) and the host. Each party's items (kernels,
 * copies, device-side moves; the host's own uploads, downloads and frees)
 * are numbered 1, 2, ... as the inner backend numbers them (an event
 * (s, n) is complete when item n of s is).
 *
 * Ordering model: vector clocks. knows[p][q] is the highest item of party q
 * that party p's next item is ordered after. A stream knows its own items
 * (streams are in order); wait(s, e) teaches s item e.seq of e.stream and,
 * transitively, everything e.stream knew at that item (a snapshot per item
 * in a ring of DELTA_SPAN_HISTORY: `marks`); sync(e), a query(e) that says
 * complete, and upload/download (ordered after every kernel issued before:
 * the backend contract) teach the host the same way. Every item a stream
 * is given afterwards inherits what the host knows, since the host issued
 * it after it saw that.
 *
 * Accesses: a kernel reads its inputs' bytes and writes its outputs' and
 * its workspace (a reshape is a view: none); a copy reads its source and
 * writes its destination; the host's upload writes, download reads, and
 * host_free writes the freed block (nothing may touch it any more). Per
 * byte range the map keeps the last write (party, item, tensor) and the
 * last read per party. An access by p conflicts with an earlier access by
 * another party q that p does not know: a write with any read or write, a
 * read with a write. Two maps: the arena (by offset) and the host store
 * (by address). Segments are split on access boundaries and a write
 * collapses its range into one segment, so their number stays near the
 * number of live blocks; the map is a sorted array (binary search, memmove
 * on a split), and all storage grows geometrically: no allocation per op
 * in a steady step.
 *
 * Known looseness: a wait that adds no item to the inner stream (the event
 * was already complete, or the sim, which counts no waits) updates the
 * snapshot of that stream's newest item, so an event recorded before such
 * a wait is credited with it; and an event older than DELTA_SPAN_HISTORY
 * items of its stream orders only its own stream's items, not what that
 * stream knew (stricter, never looser). */
#include "backend/backend.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HOST DELTA_STREAM_COUNT        /* the 5th party */
#define PARTIES (DELTA_STREAM_COUNT + 1)
#define HISTORY DELTA_SPAN_HISTORY
#define LABEL_LEN DELTA_NAME_LEN
/* Where the fake arena starts when the inner arena has no address (sim):
 * above every sim host-store token (< 2^62) and every user-space address,
 * so arena and host ranges never meet. Never dereferenced. */
#define FAKE_BASE ((uintptr_t)1 << 62)

typedef enum item_kind {
    ITEM_NONE, ITEM_KERNEL, ITEM_COPY, ITEM_WAIT, ITEM_UPLOAD, ITEM_DOWNLOAD,
    ITEM_FREE,
} item_kind;

/* One item of a party: what it knew and what it was, for waits on its
 * event and for messages. */
typedef struct mark {
    uint64_t seq;                  /* the item this slot holds (0: none) */
    uint64_t knows[PARTIES];
    item_kind kind;
    int op_id;
    delta_op_type op_type;
    size_t bytes;                  /* copies and host accesses */
    char name[LABEL_LEN];          /* the op's name or the copy's label */
} mark;

/* An access to a range: item `seq` of its party (0: none); tensor is the
 * tensor's name for kernels (it lives as long as the program), NULL for
 * copies and host accesses (their mark holds the label). */
typedef struct access {
    uint64_t seq;
    const char *tensor;
} access;

typedef struct seg {
    size_t lo, hi;                 /* [lo, hi): offsets or host addresses */
    access w;                      /* the last write */
    int wparty;
    access r[PARTIES];             /* the last read per party */
} seg;

typedef struct range_map {
    seg *s;
    size_t n, cap;
} range_map;

typedef struct host_block {
    uintptr_t p;                   /* 0: empty, 1: deleted */
    size_t bytes;
} host_block;

typedef struct checker {
    delta_backend base;            /* base.ctx == this */
    delta_backend *inner;
    bool record_only;              /* DELTA_CHECK_RECORD */
    long violations;
    char first[1024];
    /* the arena as the runtime sees it, and the inner backend's base */
    uintptr_t arena, arena_bytes;
    void *inner_base;
    bool fake;                     /* arena is FAKE_BASE */
    uint64_t seq[PARTIES];         /* items issued */
    uint64_t knows[PARTIES][PARTIES];
    mark *marks;                   /* [party][HISTORY] */
    char label[DELTA_STREAM_COUNT][LABEL_LEN];
    range_map arena_map, host_map;
    host_block *blocks;            /* open addressing, by pointer */
    size_t n_blocks, cap_blocks;   /* n_blocks counts deleted slots too, so
                                      they go at the next rehash */
} checker;

static const char *party_name(int p) {
    static const char *const names[PARTIES] = {"compute", "to-host",
                                               "to-device", "comm", "host"};
    return (unsigned)p < PARTIES ? names[p] : "?";
}

static mark *mark_of(checker *c, int party, uint64_t seq) {
    return &c->marks[(size_t)party * HISTORY + (size_t)(seq % HISTORY)];
}

static void merge(uint64_t *into, const uint64_t *from) {
    for (int q = 0; q < PARTIES; q++)
        if (from[q] > into[q]) into[q] = from[q];
}

/* What an event's completion orders after: its item and, while its
 * snapshot is kept, everything its stream knew there. */
static void learn(checker *c, uint64_t *into, delta_event e) {
    DELTA_ASSERTF((unsigned)e.stream < DELTA_STREAM_COUNT,
                  "stream check: event of stream %d", (int)e.stream);
    DELTA_ASSERTF(e.seq <= c->seq[e.stream], "stream check: event %llu of "
                  "%s was never recorded (%llu items issued)",
                  (unsigned long long)e.seq, party_name(e.stream),
                  (unsigned long long)c->seq[e.stream]);
    if (e.seq == 0) return;
    const mark *m = mark_of(c, e.stream, e.seq);
    if (m->seq == e.seq) merge(into, m->knows);
    if (e.seq > into[e.stream]) into[e.stream] = e.seq;
}

/* A new item of party p: numbered, given what the host knows, snapshot. */
static mark *issue(checker *c, int p, item_kind kind) {
    if (p != HOST) merge(c->knows[p], c->knows[HOST]);
    uint64_t n = ++c->seq[p];
    c->knows[p][p] = n;
    mark *m = mark_of(c, p, n);
    m->seq = n;
    memcpy(m->knows, c->knows[p], sizeof m->knows);
    m->kind = kind;
    m->op_id = -1;
    m->op_type = DELTA_OP_TYPE_COUNT;
    m->bytes = 0;
    m->name[0] = '\0';
    /* a label names the next copy or kernel: a wait issued between the
     * label and its copy leaves it pending */
    if (p != HOST && kind != ITEM_WAIT && c->label[p][0]) {
        memcpy(m->name, c->label[p], sizeof m->name);
        c->label[p][0] = '\0';
    }
    return m;
}

/* Brings stream s's numbering level with the inner backend's after a
 * call that may or may not have added an item there (a wait). */
static void resync(checker *c, delta_stream s) {
    uint64_t n = c->inner->ops->record(c->inner->ctx, s).seq;
    DELTA_ASSERTF(n >= c->seq[s], "stream check: %s went back from item "
                  "%llu to %llu", party_name(s),
                  (unsigned long long)c->seq[s], (unsigned long long)n);
    if (n == c->seq[s]) {
        /* no item: the newest snapshot takes what was learnt (see the top) */
        if (n) memcpy(mark_of(c, s, n)->knows, c->knows[s],
                      sizeof c->knows[s]);
        return;
    }
    while (c->seq[s] < n) issue(c, s, ITEM_WAIT);
}

/* ---- messages ------------------------------------------------------------- */

static void describe(checker *c, char *buf, size_t n, int party, access a) {
    const mark *m = mark_of(c, party, a.seq);
    if (m->seq != a.seq) {
        snprintf(buf, n, "item %llu, no longer remembered",
                 (unsigned long long)a.seq);
        return;
    }
    switch (m->kind) {
    case ITEM_KERNEL:
        snprintf(buf, n, "op %d %s '%s', %s%s%s, item %llu", m->op_id,
                 delta_op_type_name(m->op_type), m->name,
                 a.tensor ? "tensor '" : "its workspace",
                 a.tensor ? a.tensor : "", a.tensor ? "'" : "",
                 (unsigned long long)a.seq);
        return;
    case ITEM_COPY:
        if (m->name[0])
            snprintf(buf, n, "%s of '%s', %zu bytes, item %llu",
                     party == DELTA_STREAM_COMPUTE ? "device move" : "copy",
                     m->name, m->bytes, (unsigned long long)a.seq);
        else
            snprintf(buf, n, "unlabelled %s of %zu bytes, item %llu",
                     party == DELTA_STREAM_COMPUTE ? "device move" : "copy",
                     m->bytes, (unsigned long long)a.seq);
        return;
    case ITEM_UPLOAD:
    case ITEM_DOWNLOAD:
    case ITEM_FREE:
        snprintf(buf, n, "%s of %zu bytes, host access %llu",
                 m->kind == ITEM_UPLOAD     ? "upload"
                 : m->kind == ITEM_DOWNLOAD ? "download"
                                            : "host_free",
                 m->bytes, (unsigned long long)a.seq);
        return;
    default:
        snprintf(buf, n, "item %llu", (unsigned long long)a.seq);
        return;
    }
}

static void violation(checker *c, const range_map *map, int p, access a,
                      bool write, int q, access b, bool b_write, size_t lo,
                      size_t hi) {
    char da[384], db[384], msg[sizeof c->first];
    describe(c, da, sizeof da, p, a);
    describe(c, db, sizeof db, q, b);
    char where[96];
    if (map == &c->arena_map)
        snprintf(where, sizeof where, "bytes [%zu, %zu) of the arena", lo, hi);
    else
        snprintf(where, sizeof where, "bytes [0x%zx, 0x%zx) of the host store",
                 lo, hi);
    snprintf(msg, sizeof msg,
             "stream-order violation: %s on %s (%s) is not ordered after %s "
             "on %s (%s); %s",
             write ? "write" : "read", party_name(p), da,
             b_write ? "write" : "read", party_name(q), db, where);
    if (!c->record_only) {
        fprintf(stderr, "%s\n", msg);
        fflush(stderr);
        abort();
    }
    if (c->violations++ == 0) snprintf(c->first, sizeof c->first, "%s", msg);
}

/* ---- the range map -------------------------------------------------------- */

/* The first segment whose end is above x. */
static size_t seg_find(const range_map *m, size_t x) {
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->s[mid].hi > x) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* Opens k empty slots at i (k < 0: removes slots i .. i - k - 1). */
static void seg_shift(range_map *m, size_t i, long k) {
    if (k > 0 && m->n + (size_t)k > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 256;
        while (cap < m->n + (size_t)k) cap *= 2;
        seg *s = realloc(m->s, sizeof *s * cap);
        DELTA_ASSERTF(s, "stream check: out of memory for %zu segments", cap);
        m->s = s;
        m->cap = cap;
    }
    size_t from = k >= 0 ? i : i + (size_t)(-k);
    size_t to = k >= 0 ? i + (size_t)k : i;
    memmove(m->s + to, m->s + from, sizeof *m->s * (m->n - from));
    m->n = k >= 0 ? m->n + (size_t)k : m->n - (size_t)(-k);
}

static const seg EMPTY_SEG = {0, 0, {0, NULL}, 0, {{0, NULL}}};

/* Checks an access of [lo, hi) by party p (item a, knowing K) against
 * every earlier access it overlaps; reports the first conflict. */
static void check_range(checker *c, range_map *m, size_t lo, size_t hi,
                        int p, access a, const uint64_t *K, bool write) {
    for (size_t i = seg_find(m, lo); i < m->n && m->s[i].lo < hi; i++) {
        const seg *g = &m->s[i];
        size_t a0 = g->lo > lo ? g->lo : lo, a1 = g->hi < hi ? g->hi : hi;
        if (g->w.seq && g->wparty != p && K[g->wparty] < g->w.seq) {
            violation(c, m, p, a, write, g->wparty, g->w, true, a0, a1);
            return;
        }
        if (!write) continue;
        for (int q = 0; q < PARTIES; q++)
            if (q != p && g->r[q].seq && K[q] < g->r[q].seq) {
                violation(c, m, p, a, write, q, g->r[q], false, a0, a1);
                return;
            }
    }
}

/* A write of [lo, hi): one segment replaces whatever covered it. */
static void map_write(range_map *m, size_t lo, size_t hi, int p, access a) {
    size_t i = seg_find(m, lo), j = i;
    while (j < m->n && m->s[j].lo < hi) j++;
    bool left = i < j && m->s[i].lo < lo, right = i < j && m->s[j - 1].hi > hi;
    seg l = left ? m->s[i] : EMPTY_SEG, r = right ? m->s[j - 1] : EMPTY_SEG;
    long d = (long)left + 1 + (long)right - (long)(j - i);
    /* slots i..j-1 are rewritten: open the extra ones at j, or close the
     * surplus just below j */
    seg_shift(m, d >= 0 ? j : j - (size_t)(-d), d);
    size_t at = i;
    if (left) {
        l.hi = lo;
        m->s[at++] = l;
    }
    seg w = EMPTY_SEG;
    w.lo = lo;
    w.hi = hi;
    w.w = a;
    w.wparty = p;
    m->s[at++] = w;
    if (right) {
        r.lo = hi;
        m->s[at] = r;
    }
}

/* A read of [lo, hi): boundaries at lo and hi, gaps filled, and p's read
 * noted on every segment inside. */
static void map_read(range_map *m, size_t lo, size_t hi, int p, access a) {
    size_t i = seg_find(m, lo);
    if (i < m->n && m->s[i].lo < lo) { /* split at lo */
        seg_shift(m, i, 1);
        m->s[i + 1] = m->s[i];
        m->s[i].hi = lo;
        m->s[i + 1].lo = lo;
        i++;
    }
    size_t cur = lo;
    while (cur < hi) {
        if (i < m->n && m->s[i].lo <= cur) {
            if (m->s[i].hi > hi) { /* split at hi */
                seg_shift(m, i, 1);
                m->s[i + 1] = m->s[i];
                m->s[i].hi = hi;
                m->s[i + 1].lo = hi;
            }
            m->s[i].r[p] = a;
            cur = m->s[i].hi;
            i++;
            continue;
        }
        size_t end = i < m->n && m->s[i].lo < hi ? m->s[i].lo : hi;
        seg_shift(m, i, 1);
        m->s[i] = EMPTY_SEG;
        m->s[i].lo = cur;
        m->s[i].hi = end;
        m->s[i].r[p] = a;
        cur = end;
        i++;
    }
}

/* Forgets [lo, hi) (a freed host block, a new arena). */
static void map_forget(range_map *m, size_t lo, size_t hi) {
    if (lo >= hi) return;
    map_write(m, lo, hi, 0, (access){0, NULL});
    size_t i = seg_find(m, lo);
    if (i < m->n && m->s[i].lo == lo) seg_shift(m, i, -1);
}

/* An access of bytes at p by party `party`, item a. */
static void touch(checker *c, const void *ptr, size_t bytes, int party,
                  access a, bool write) {
    if (!ptr || !bytes) return;
    uintptr_t x = (uintptr_t)ptr;
    range_map *m = &c->host_map;
    size_t lo = x, hi = x + bytes;
    if (c->arena_bytes && x >= c->arena && x - c->arena < c->arena_bytes) {
        DELTA_ASSERTF(bytes <= c->arena_bytes - (x - c->arena),
                      "stream check: %zu bytes at offset %zu run past the "
                      "arena's %zu", bytes, (size_t)(x - c->arena),
                      (size_t)c->arena_bytes);
        m = &c->arena_map;
        lo = x - c->arena;
        hi = lo + bytes;
    }
    const uint64_t *K = c->knows[party];
    check_range(c, m, lo, hi, party, a, K, write);
    if (write) map_write(m, lo, hi, party, a);
    else map_read(m, lo, hi, party, a);
}

/* ---- host-store blocks (their sizes, for host_free) ------------------------ */

static size_t block_slot(const checker *c, uintptr_t p) {
    uint64_t h = (uint64_t)p * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 20) & (c->cap_blocks - 1);
}

static void block_put(checker *c, uintptr_t p, size_t bytes) {
    if ((c->n_blocks + 1) * 2 > c->cap_blocks) {
        host_block *old = c->blocks;
        size_t n = c->cap_blocks;
        c->cap_blocks = n ? n * 2 : 256;
        c->blocks = calloc(c->cap_blocks, sizeof *c->blocks);
        DELTA_ASSERTF(c->blocks, "stream check: out of memory");
        c->n_blocks = 0;
        for (size_t i = 0; i < n; i++)
            if (old[i].p > 1) block_put(c, old[i].p, old[i].bytes);
        free(old);
    }
    size_t i = block_slot(c, p);
    while (c->blocks[i].p > 1) i = (i + 1) & (c->cap_blocks - 1);
    c->blocks[i] = (host_block){p, bytes};
    c->n_blocks++;
}

/* The size of block p, removed from the table; 0 when unknown. */
static size_t block_take(checker *c, uintptr_t p) {
    if (!c->cap_blocks) return 0;
    size_t i = block_slot(c, p);
    while (c->blocks[i].p) {
        if (c->blocks[i].p == p) {
            c->blocks[i].p = 1; /* deleted: probes go on past it */
            return c->blocks[i].bytes;
        }
        i = (i + 1) & (c->cap_blocks - 1);
    }
    return 0;
}

/* ---- the interface -------------------------------------------------------- */

/* The inner backend's address for one of ours (the arena may be fake). */
static void *inner_ptr(const checker *c, const void *p) {
    uintptr_t x = (uintptr_t)p;
    if (!p || !c->fake || x < c->arena || x - c->arena >= c->arena_bytes)
        return (void *)p;
    return NULL; /* the inner arena has no addresses: as the runtime passes */
}

/* The host learns every stream's end: the backend drained them. */
static void drained(checker *c) {
    for (int s = 0; s < DELTA_STREAM_COUNT; s++)
        learn(c, c->knows[HOST],
              (delta_event){(delta_stream)s, c->seq[s], 0});
}

static delta_status ck_arena_create(void *ctx, size_t bytes, void **base) {
    checker *c = ctx;
    void *b = NULL;
    delta_status st = c->inner->ops->arena_create(c->inner->ctx, bytes, &b);
    drained(c);
    c->arena_map.n = 0;
    c->inner_base = b;
    c->fake = st == DELTA_OK && !b;
    c->arena = st != DELTA_OK ? 0 : c->fake ? FAKE_BASE : (uintptr_t)b;
    c->arena_bytes = st == DELTA_OK ? bytes : 0;
    if (base) *base = st == DELTA_OK ? (void *)c->arena : NULL;
    return st;
}

static void ck_arena_destroy(void *ctx) {
    checker *c = ctx;
    c->inner->ops->arena_destroy(c->inner->ctx);
    drained(c);
    c->arena_map.n = 0;
    c->arena = c->arena_bytes = 0;
    c->fake = false;
}

static void *ck_host_alloc(void *ctx, size_t bytes) {
    checker *c = ctx;
    void *p = c->inner->ops->host_alloc(c->inner->ctx, bytes);
    if (p) {
        block_put(c, (uintptr_t)p, bytes);
        map_forget(&c->host_map, (uintptr_t)p, (uintptr_t)p + bytes);
    }
    return p;
}

static void ck_host_free(void *ctx, void *p) {
    checker *c = ctx;
    size_t bytes = p ? block_take(c, (uintptr_t)p) : 0;
    if (bytes) {
        /* nothing may still read or write a block the host gives back */
        mark *m = issue(c, HOST, ITEM_FREE);
        m->bytes = bytes;
        touch(c, p, bytes, HOST, (access){m->seq, NULL}, true);
        map_forget(&c->host_map, (uintptr_t)p, (uintptr_t)p + bytes);
    }
    c->inner->ops->host_free(c->inner->ctx, p);
}

/* A kernel on stream s (compute, or a collective on comm): its accesses,
 * then the inner backend's run or collective. */
static void ck_kernel(checker *c, delta_stream s, const delta_kargs *k,
                      void (*fn)(void *, const delta_kargs *)) {
    const delta_op *op = k->op;
    mark *m = issue(c, s, ITEM_KERNEL);
    m->op_id = op->id;
    m->op_type = op->type;
    snprintf(m->name, sizeof m->name, "%s", op->name);
    access a = {m->seq, NULL};
    if (op->type != DELTA_OP_RESHAPE) { /* a view moves no bytes */
        for (int j = 0; j < op->n_in; j++) {
            if (!k->in_t[j]) continue;
            a.tensor = k->in_t[j]->name;
            touch(c, k->in[j], k->in_t[j]->bytes, s, a, false);
        }
        for (int j = 0; j < op->n_out; j++) {
            if (!k->out_t[j]) continue;
            a.tensor = k->out_t[j]->name;
            touch(c, k->out[j], k->out_t[j]->bytes, s, a, true);
        }
        a.tensor = NULL;
        touch(c, k->ws, op->workspace, s, a, true);
    }
    if (!c->fake) {
        fn(c->inner->ctx, k);
        return;
    }
    delta_kargs ik = *k;
    for (int j = 0; j < op->n_in; j++) ik.in[j] = inner_ptr(c, k->in[j]);
    for (int j = 0; j < op->n_out; j++) ik.out[j] = inner_ptr(c, k->out[j]);
    ik.ws = inner_ptr(c, k->ws);
    fn(c->inner->ctx, &ik);
}

static void ck_run(void *ctx, const delta_kargs *k) {
    checker *c = ctx;
    ck_kernel(c, DELTA_STREAM_COMPUTE, k, c->inner->ops->run);
}

static void ck_collective(void *ctx, const delta_kargs *k) {
    checker *c = ctx;
    DELTA_ASSERTF(c->inner->ops->collective, "stream check: the %s backend "
                  "has no communication stream", c->inner->name);
    ck_kernel(c, DELTA_STREAM_COMM, k, c->inner->ops->collective);
}

static void ck_copy(void *ctx, delta_stream s, void *dst, const void *src,
                    size_t bytes) {
    checker *c = ctx;
    DELTA_ASSERT((unsigned)s < DELTA_STREAM_COUNT);
    mark *m = issue(c, s, ITEM_COPY);
    m->bytes = bytes;
    access a = {m->seq, NULL};
    touch(c, src, bytes, s, a, false);
    touch(c, dst, bytes, s, a, true);
    c->inner->ops->copy(c->inner->ctx, s, inner_ptr(c, dst),
                        inner_ptr(c, src), bytes);
}

static delta_event ck_record(void *ctx, delta_stream s) {
    checker *c = ctx;
    delta_event e = c->inner->ops->record(c->inner->ctx, s);
    DELTA_ASSERTF(e.seq == c->seq[s], "stream check: %s is at item %llu, "
                  "the checker counted %llu (a call the checker does not "
                  "see added items?)", party_name(s),
                  (unsigned long long)e.seq, (unsigned long long)c->seq[s]);
    return e;
}

static void ck_wait(void *ctx, delta_stream s, delta_event e) {
    checker *c = ctx;
    DELTA_ASSERT((unsigned)s < DELTA_STREAM_COUNT);
    c->inner->ops->wait(c->inner->ctx, s, e);
    if (e.stream == s) return; /* a stream is in order */
    learn(c, c->knows[s], e);
    resync(c, s);
}

static bool ck_query(void *ctx, delta_event e) {
    checker *c = ctx;
    bool done = c->inner->ops->query(c->inner->ctx, e);
    if (done) learn(c, c->knows[HOST], e);
    return done;
}

static void ck_sync(void *ctx, delta_event e) {
    checker *c = ctx;
    c->inner->ops->sync(c->inner->ctx, e);
    learn(c, c->knows[HOST], e);
}

static bool ck_span(void *ctx, delta_event e, double *t0, double *t1) {
    checker *c = ctx;
    return c->inner->ops->span(c->inner->ctx, e, t0, t1);
}

static bool ck_event_time(void *ctx, delta_event e, double *t) {
    checker *c = ctx;
    return c->inner->ops->event_time(c->inner->ctx, e, t);
}

static double ck_clock(void *ctx) {
    checker *c = ctx;
    return c->inner->ops->clock(c->inner->ctx);
}

static double ck_op_cost(void *ctx, const delta_op *op) {
    checker *c = ctx;
    return c->inner->ops->op_cost ? c->inner->ops->op_cost(c->inner->ctx, op)
                                  : -1.0;
}

static void ck_fit_program(void *ctx, delta_ctx *g) {
    checker *c = ctx;
    delta_backend_fit_program(c->inner, g);
}

/* upload/download are the host's own accesses, ordered after every kernel
 * issued before (the backend contract): the host learns the compute
 * stream's end, then its access is checked against the copy streams. */
static mark *host_access(checker *c, item_kind kind, const void *dev,
                         size_t bytes, bool write) {
    learn(c, c->knows[HOST],
          (delta_event){DELTA_STREAM_COMPUTE, c->seq[DELTA_STREAM_COMPUTE], 0});
    mark *m = issue(c, HOST, kind);
    m->bytes = bytes;
    touch(c, dev, bytes, HOST, (access){m->seq, NULL}, write);
    return m;
}

static void ck_upload(void *ctx, void *dev, const void *host, size_t bytes) {
    checker *c = ctx;
    host_access(c, ITEM_UPLOAD, dev, bytes, true);
    if (c->inner->ops->upload)
        c->inner->ops->upload(c->inner->ctx, inner_ptr(c, dev), host, bytes);
    else if (!c->fake && bytes && c->inner->has_data)
        memcpy(dev, host, bytes);
}

static void ck_download(void *ctx, void *host, const void *dev,
                        size_t bytes) {
    checker *c = ctx;
    host_access(c, ITEM_DOWNLOAD, dev, bytes, false);
    if (c->inner->ops->download)
        c->inner->ops->download(c->inner->ctx, host, inner_ptr(c, dev),
                                bytes);
    else if (!c->fake && c->inner->has_data) {
        if (bytes) memcpy(host, dev, bytes);
    } else if (bytes) {
        memset(host, 0, bytes); /* no data: reads give zeros */
    }
}

static void ck_label(void *ctx, delta_stream s, const char *what) {
    checker *c = ctx;
    DELTA_ASSERT((unsigned)s < DELTA_STREAM_COUNT);
    snprintf(c->label[s], sizeof c->label[s], "%s", what ? what : "");
    if (c->inner->ops->label) c->inner->ops->label(c->inner->ctx, s, what);
}

/* Frees the checker only: the inner backend is its owner's. */
static void ck_destroy(void *ctx) {
    checker *c = ctx;
    free(c->marks);
    free(c->arena_map.s);
    free(c->host_map.s);
    free(c->blocks);
    free(c);
}

static const delta_backend_ops check_ops = {
    .arena_create = ck_arena_create,
    .arena_destroy = ck_arena_destroy,
    .host_alloc = ck_host_alloc,
    .host_free = ck_host_free,
    .run = ck_run,
    .collective = ck_collective,
    .copy = ck_copy,
    .record = ck_record,
    .wait = ck_wait,
    .query = ck_query,
    .sync = ck_sync,
    .span = ck_span,
    .event_time = ck_event_time,
    .clock = ck_clock,
    .fit_program = ck_fit_program,
    .op_cost = ck_op_cost,
    .destroy = ck_destroy,
    .upload = ck_upload,
    .download = ck_download,
    .label = ck_label,
};

delta_backend *delta_backend_check_new(delta_backend *inner, unsigned flags,
                                       char *err, size_t err_len) {
    if (!inner) {
        if (err && err_len) snprintf(err, err_len, "stream check: no backend "
                                     "to wrap");
        return NULL;
    }
    checker *c = calloc(1, sizeof *c);
    if (c) c->marks = calloc((size_t)PARTIES * HISTORY, sizeof *c->marks);
    if (!c || !c->marks) {
        free(c);
        if (err && err_len) snprintf(err, err_len, "stream check: out of "
                                     "memory");
        return NULL;
    }
    c->inner = inner;
    c->record_only = flags & DELTA_CHECK_RECORD;
    /* the inner streams may already hold items (another session ran on
     * it): number ours from where it is; those are outside the check */
    for (int s = 0; s < DELTA_STREAM_COUNT; s++) {
        c->seq[s] = inner->ops->record(inner->ctx, (delta_stream)s).seq;
        c->knows[s][s] = c->seq[s];
        c->knows[HOST][s] = c->seq[s];
    }
    c->base = *inner;
    c->base.ops = &check_ops;
    c->base.ctx = c;
    c->base.host_syncs = c->base.throttle_waits = 0;
    c->base.host_wait_s = 0;
    return &c->base;
}

long delta_backend_check_violations(const delta_backend *b, const char **msg) {
    if (!b || b->ops != &check_ops) return -1;
    const checker *c = b->ctx;
    if (msg) *msg = c->first;
    return c->violations;
}
