/* bfloat16 <-> float conversions, shared by the CPU kernels, the graph's
 * tests and (header-only, so one definition) any other backend's host code.
 *
 * bf16 is the top half of an IEEE-754 binary32: 1 sign, 8 exponent and 7
 * mantissa bits. Widening is exact (shift left 16). Narrowing rounds to
 * nearest, ties to even, as PyTorch's c10::BFloat16 and CUDA's
 * __float2bfloat16_rn do:
 *   - finite values: add 0x7FFF + (bit 16 of the input) and truncate; a
 *     carry into the exponent rounds up correctly, including to infinity
 *     for values at or above the largest bf16 plus half an ulp;
 *   - subnormals round the same way (bf16 keeps float's exponent range, so
 *     there is no flush to zero);
 *   - infinities keep their sign;
 *   - NaN stays NaN with its sign: the top mantissa bit is set (quiet), so
 *     a NaN whose payload lives only in the low 16 bits cannot turn into
 *     an infinity. */
#ifndef DELTA_BF16_H
#define DELTA_BF16_H

#include <stdint.h>
#include <string.h>

typedef uint16_t delta_bf16;

static inline float delta_bf16_to_f32(delta_bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline delta_bf16 delta_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: keep the sign, quiet it */
        return (delta_bf16)((u >> 16) | 0x0040u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (delta_bf16)(u >> 16);
}

/* f rounded to the nearest bf16 and widened back: what a bf16 tensor
 * would hold. */
static inline float delta_bf16_round(float f) {
    return delta_bf16_to_f32(delta_f32_to_bf16(f));
}

#endif
