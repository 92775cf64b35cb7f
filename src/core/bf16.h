/* bfloat16 <-> float conversions, shared by the CPU kernels, the graph's
 * tests and (header-only, so one definition) the CUDA kernels, which
 * compile the same functions for the device so a cast or a rounded output
 * is the CPU's bit for bit.
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

#ifdef __CUDACC__
#define DELTA_BF16_FN static inline __host__ __device__
#else
#define DELTA_BF16_FN static inline
#endif

/* A float's bits and back: memcpy on the host, the intrinsics on the
 * device (a register move either way). */
DELTA_BF16_FN uint32_t delta_f32_bits(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

DELTA_BF16_FN float delta_f32_of_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

DELTA_BF16_FN float delta_bf16_to_f32(delta_bf16 h) {
    return delta_f32_of_bits((uint32_t)h << 16);
}

DELTA_BF16_FN delta_bf16 delta_f32_to_bf16(float f) {
    uint32_t u = delta_f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: keep the sign, quiet it */
        return (delta_bf16)((u >> 16) | 0x0040u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (delta_bf16)(u >> 16);
}

/* f rounded to the nearest bf16 and widened back: what a bf16 tensor
 * would hold. */
DELTA_BF16_FN float delta_bf16_round(float f) {
    return delta_bf16_to_f32(delta_f32_to_bf16(f));
}

#endif
