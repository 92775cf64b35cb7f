/* autoswap: placeholder while the policy is being written (same session). */
#include "runtime/managed.h"

#include <stdlib.h>

static void *create(managed *m) {
    (void)m;
    return calloc(1, 1);
}

static void destroy(void *p) { free(p); }

const policy_ops delta_policy_autoswap = {
    .name = "autoswap",
    .create = create,
    .destroy = destroy,
};
