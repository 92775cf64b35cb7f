/* The plan cache and program keys (see runtime/plan_cache.h). A run sees a
 * handful of shapes, so the cache is a flat array searched linearly. */
#include "runtime/plan_cache.h"
#include "core/rng.h"
#include "graph/graph_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct plan_entry {
    char *policy;
    uint64_t key;
    void *blob;
    size_t bytes;
} plan_entry;

struct delta_plan_cache {
    plan_entry *e;
    int n, cap;
};

delta_plan_cache *delta_plan_cache_new(void) {
    return calloc(1, sizeof(delta_plan_cache));
}

void delta_plan_cache_free(delta_plan_cache *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].policy);
        free(c->e[i].blob);
    }
    free(c->e);
    free(c);
}

static plan_entry *find(delta_plan_cache *c, const char *policy,
                        uint64_t key) {
    for (int i = 0; i < c->n; i++)
        if (c->e[i].key == key && !strcmp(c->e[i].policy, policy))
            return &c->e[i];
    return NULL;
}

const void *plan_cache_get(delta_plan_cache *c, const char *policy,
                           uint64_t program_key, size_t *bytes) {
    if (bytes) *bytes = 0;
    if (!c || !policy) return NULL;
    plan_entry *e = find(c, policy, program_key);
    if (!e) return NULL;
    if (bytes) *bytes = e->bytes;
    return e->blob;
}

bool plan_cache_put(delta_plan_cache *c, const char *policy,
                    uint64_t program_key, const void *blob, size_t bytes) {
    if (!c || !policy || (bytes && !blob)) return false;
    /* malloc(0) may be NULL: keep one byte so a stored blob is never
     * NULL, which get reserves for "absent" */
    void *copy = malloc(bytes ? bytes : 1);
    if (!copy) return false;
    if (bytes) memcpy(copy, blob, bytes);
    plan_entry *e = find(c, policy, program_key);
    if (e) {
        free(e->blob);
        e->blob = copy;
        e->bytes = bytes;
        return true;
    }
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 8;
        plan_entry *ne = realloc(c->e, sizeof *ne * (size_t)cap);
        if (!ne) {
            free(copy);
            return false;
        }
        c->e = ne;
        c->cap = cap;
    }
    char *name = strdup(policy);
    if (!name) {
        free(copy);
        return false;
    }
    c->e[c->n++] = (plan_entry){name, program_key, copy, bytes};
    return true;
}

int plan_cache_count(const delta_plan_cache *c) { return c ? c->n : 0; }

/* ---- program keys -------------------------------------------------------- */

/* One 64-bit word into the running hash: xxHash64's round (multiply,
 * rotate, multiply), which mixes a word with two multiplies where
 * byte-wise FNV-1a needs eight; values, not bytes, go in, so the key is
 * the same on every machine whatever its byte order. */
#define XX_P1 0x9e3779b185ebca87ULL
#define XX_P2 0xc2b2ae3d27d4eb4fULL
#define XX_SEED 0x27d4eb2f165667c5ULL
static inline uint64_t h64(uint64_t h, uint64_t v) {
    h += v * XX_P2;
    h = (h << 31) | (h >> 33);
    return h * XX_P1;
}

static inline uint64_t hf(uint64_t h, float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return h64(h, u);
}

static inline uint64_t hd(uint64_t h, double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return h64(h, u);
}

/* Attribute by attribute (hashing the struct's bytes would hash padding). */
static uint64_t hash_attrs(uint64_t h, const delta_op_attrs *a) {
    const int ints[] = {a->trans_a, a->trans_b,      a->k,          a->stride,
                        a->pad,     a->dim,          a->dim1,       a->causal,
                        a->has_mask, a->ignore_index, a->fwd_op,    a->nesterov,
                        a->has_momentum, a->gelu_erf, a->ranks, a->rank,
                        a->lr_in,   a->coef_in,      a->has_acc,   a->w_in_out};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        h = h64(h, (uint64_t)(int64_t)ints[i]);
    for (int i = 0; i < DELTA_MAX_OP_IN; i++)
        h = h64(h, (uint64_t)(int64_t)a->owner[i]);
    const float fl[] = {a->alpha, a->eps,   a->momentum,     a->p,
                        a->value, a->lr,    a->beta1,        a->beta2,
                        a->weight_decay, a->opt_eps};
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) h = hf(h, fl[i]);
    return hd(h, a->count);
}


uint64_t delta_program_key(const delta_ctx *ctx) {
    uint64_t h = XX_SEED;
    h = h64(h, (uint64_t)ctx->n_tensors);
    h = h64(h, (uint64_t)ctx->n_ops);
    for (int i = 0; i < ctx->n_tensors; i++) {
        const delta_tensor *t = ctx->tensors[i];
        h = h64(h, (uint64_t)t->dtype);
        h = h64(h, (uint64_t)t->kind);
        h = h64(h, (uint64_t)t->ndim);
        for (int d = 0; d < t->ndim; d++) h = h64(h, (uint64_t)t->shape[d]);
        h = h64(h, (uint64_t)(int64_t)t->view_of);
        h = h64(h, (uint64_t)(int64_t)t->producer);
    }
    for (int i = 0; i < ctx->n_ops; i++) {
        const delta_op *op = &ctx->ops[i];
        h = h64(h, (uint64_t)op->type);
        h = h64(h, (uint64_t)op->phase);
        h = h64(h, ((uint64_t)op->inplace << 1) | op->recomputable);
        h = h64(h, (uint64_t)op->n_in);
        for (int j = 0; j < op->n_in; j++) h = h64(h, (uint64_t)op->in[j]);
        h = h64(h, (uint64_t)op->n_out);
        for (int j = 0; j < op->n_out; j++) h = h64(h, (uint64_t)op->out[j]);
        h = h64(h, (uint64_t)op->workspace);
        h = hash_attrs(h, &op->a);
    }
    return delta_mix64(h);
}
