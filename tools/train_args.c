/* Policy lists for the commands that compare policies (maxbatch, bench):
 * --policies LIST or train's --policy P, every policy by default. The
 * option parser itself is train's (cmd_train.c). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "delta/session.h"
#include "train_args.h"

int train_args_parse_policies(const char *opt, const char *arg, char *buf,
                              size_t buf_len, const char **list, int cap,
                              int *n) {
    char err[512];
    if (!parse_list(opt, arg, buf, buf_len, list, cap, n, err, sizeof err))
        return train_args_error("%s", err);
    for (int i = 0; i < *n; i++) {
        int rc = train_args_check_policy(list[i]);
        if (rc >= 0) return rc;
    }
    return -1;
}

int train_args_pick_policies(const train_config *c, const char **list,
                             int cap, int *n) {
    if (c->run.policy && *n)
        return train_args_error("--policy and --policies both choose "
                                "policies; give one of them");
    if (c->run.policy) list[(*n)++] = c->run.policy;
    if (!*n)
        for (const char *const *p = delta_session_policies(); *p; p++)
            if (*n < cap) list[(*n)++] = *p;
    return -1;
}

void train_args_warn_steps(const char *cmd, int64_t steps,
                           const char *const *list, int n) {
    if (steps >= TRAIN_ARGS_DELTA_MIN_STEPS) return;
    for (int i = 0; i < n; i++) {
        if (strcmp(list[i], "delta")) continue;
        fprintf(stderr, "delta %s: warning: --steps %" PRId64 " is too few "
                "for delta: it profiles in its first step and tries two "
                "planned modes for two steps each, so the median over the "
                "steps after the first third is mostly those trials and "
                "understates it; use --steps %d or more\n", cmd, steps,
                TRAIN_ARGS_DELTA_MIN_STEPS);
        return;
    }
}
