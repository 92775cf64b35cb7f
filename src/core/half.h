/* IEEE-754 binary16 (F16) to binary32, exact: every half is a float.
 * Pretrained checkpoints (Hugging Face's F16 safetensors) come in it;
 * delta computes in F32 or BF16 (src/core/bf16.h), so F16 is only ever
 * widened on reading. */
#ifndef DELTA_CORE_HALF_H
#define DELTA_CORE_HALF_H

#include <stdint.h>
#include <string.h>

static inline float delta_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0x1f) { /* inf, NaN (payload kept, quiet bit as it was) */
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) { /* normal: rebias 15 -> 127 */
        u = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) { /* +-0 */
        u = sign;
    } else { /* subnormal: normalise (a float holds it exactly) */
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400u));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
