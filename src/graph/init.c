/* First values of tensors: a tensor's init spec drawn with the
 * counter-based RNG keyed by (seed, tensor init_id: its id when it was
 * made, which a renumbering pass keeps), so the simple executor,
 * the managed runtime and every backend start persistent tensors from the
 * same bits. */
#include "graph/graph_impl.h"
#include "core/rng.h"

#include <string.h>

void delta_init_fill(float *data, int64_t n, delta_init init, uint64_t seed,
                     int tensor_id) {
    uint64_t key = delta_mix64(seed ^ delta_mix64((uint64_t)tensor_id + 1));
    for (int64_t i = 0; i < n; i++) {
        switch (init.kind) {
        case DELTA_INIT_ONES: data[i] = 1.0f; break;
        case DELTA_INIT_CONSTANT: data[i] = init.a; break;
        case DELTA_INIT_UNIFORM:
            data[i] = init.a + (init.b - init.a) *
                                   delta_rng_uniform(key, (uint64_t)i);
            break;
        case DELTA_INIT_NORMAL:
            data[i] = init.a + init.b * delta_rng_normal(key, (uint64_t)i);
            break;
        default: data[i] = 0.0f; break;
        }
    }
}

void delta_init_tensor(void *data, const delta_tensor *t, uint64_t seed) {
    if (t->dtype == DELTA_F32 && t->init.kind != DELTA_INIT_NONE)
        delta_init_fill(data, t->numel, t->init, seed, t->init_id);
    else
        memset(data, 0, t->bytes);
}
