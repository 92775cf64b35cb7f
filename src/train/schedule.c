/* The learning-rate schedule (train.h, delta_lr_sched): llm.c's warmup
 * and decays, computed on the host in double and rounded once, so the
 * float every update op reads is the same on every policy, backend and
 * rank. */
#include "train_impl.h"

#include <math.h>

static const char *const sched_names[] = {"constant", "cosine", "linear"};

const char *delta_lr_schedule_name(delta_lr_schedule k) {
    return (unsigned)k < 3 ? sched_names[k] : "?";
}

bool delta_lr_schedule_find(const char *name, delta_lr_schedule *k) {
    for (int i = 0; name && i < 3; i++)
        if (!strcmp(name, sched_names[i])) {
            *k = (delta_lr_schedule)i;
            return true;
        }
    return false;
}

bool delta_lr_sched_varies(const delta_lr_sched *s) {
    return s->kind != DELTA_LR_CONSTANT || s->warmup > 0;
}

float delta_lr_sched_at(const delta_lr_sched *s, double lr, int64_t step) {
    if (step < s->warmup)
        return (float)(lr * (double)(step + 1) / (double)s->warmup);
    if (s->kind == DELTA_LR_CONSTANT) return (float)lr;
    double span = (double)(s->steps - s->warmup);
    double r = span > 0 ? (double)(step - s->warmup) / span : 1.0;
    if (r > 1.0) r = 1.0;
    double lo = lr * s->min_frac;
    if (s->kind == DELTA_LR_COSINE)
        return (float)(lo + 0.5 * (1.0 + cos(M_PI * r)) * (lr - lo));
    return (float)(lr - r * (lr - lo));
}
