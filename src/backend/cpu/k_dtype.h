/* Element access for CPU kernels that take F32 or BF16 float operands with
 * one body: a kernel reads each element widened to fp32 (exact for BF16),
 * computes as its F32 form does, and stores each result rounded once to
 * nearest even when the operand is BF16 (src/core/bf16.h). So a BF16 op's
 * bits are those of the F32 kernel run on fp32 copies of its operands
 * (delta_cpu_run_widened), without the copies.
 *
 * `bf` must be a compile-time constant where these are used in a loop: a
 * kernel calls an always-inline body with a literal true or false inside
 * its parallel loop (OpenMP outlines the loop before inlining, so a flag
 * read outside it would stay a run-time branch per element and stop the
 * F32 loop from vectorizing). K_BODY marks such bodies. */
#ifndef DELTA_CPU_K_DTYPE_H
#define DELTA_CPU_K_DTYPE_H

#include "core/bf16.h"
#include "graph/graph_impl.h"

#define K_BODY static inline __attribute__((always_inline))

/* p[i] as fp32: p holds floats, or BF16 values when bf. */
K_BODY float k_ld(const void *p, int64_t i, bool bf) {
    return bf ? delta_bf16_to_f32(((const uint16_t *)p)[i])
              : ((const float *)p)[i];
}

/* p[i] = v, rounded to BF16 when bf. */
K_BODY void k_st(void *p, int64_t i, float v, bool bf) {
    if (bf) ((uint16_t *)p)[i] = delta_f32_to_bf16(v);
    else ((float *)p)[i] = v;
}

/* v as a tensor of the kernel's dtype would hold it: v, or (bf) v rounded
 * to BF16 and widened back. For a kernel that computes what several ops
 * did and must round where their intermediate tensors were stored. */
K_BODY float k_round(float v, bool bf) {
    return bf ? delta_bf16_round(v) : v;
}

/* &p[i] for F32 or (bf) BF16 elements. */
K_BODY const void *k_at(const void *p, int64_t i, bool bf) {
    return (const char *)p + (size_t)i * (bf ? 2 : 4);
}
K_BODY void *k_at_mut(void *p, int64_t i, bool bf) {
    return (char *)p + (size_t)i * (bf ? 2 : 4);
}

/* Whether t holds BF16 values (else F32). */
static inline bool k_is_bf16(const delta_tensor *t) {
    return t->dtype == DELTA_BF16;
}

#endif
