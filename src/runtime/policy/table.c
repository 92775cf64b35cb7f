/* The one list of policies: what `--policy` accepts and the session lists,
 * in this order (keep first: the unconstrained reference). A new policy is
 * a file in this folder and a line here. */
#include "runtime/managed.h"

const policy_ops *const managed_policies[] = {
    &delta_policy_keep,     &delta_policy_swap,     &delta_policy_checkpoint,
    &delta_policy_dtr,      &delta_policy_capuchin, &delta_policy_autoswap,
    &delta_policy_delta,
};
const int managed_n_policies =
    (int)(sizeof managed_policies / sizeof managed_policies[0]);
