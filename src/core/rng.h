/* Counter-based random numbers: every draw is a pure function of a key and
 * a counter, so any op can be run again (recomputation) and draw the same
 * numbers, and draws need no shared state between threads. */
#ifndef DELTA_RNG_H
#define DELTA_RNG_H

#include <math.h>
#include <stdint.h>

/* The draws are also compiled into CUDA kernels (src/backend/cuda), which
 * must draw exactly the same numbers: one definition for both. */
#ifdef __CUDACC__
#define DELTA_RNG_FN static inline __host__ __device__
#else
#define DELTA_RNG_FN static inline
#endif

/* SplitMix64's finalizer: a bijective mix with good avalanche. */
DELTA_RNG_FN uint64_t delta_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* 64 random bits for (key, counter). */
DELTA_RNG_FN uint64_t delta_rng_u64(uint64_t key, uint64_t counter) {
    return delta_mix64(delta_mix64(key) ^ (counter * 0x9e3779b97f4a7c15ULL));
}

/* Uniform in [0, 1) with 24 bits, exactly representable as float. */
DELTA_RNG_FN float delta_rng_uniform(uint64_t key, uint64_t counter) {
    return (float)(delta_rng_u64(key, counter) >> 40) * (1.0f / 16777216.0f);
}

/* Standard normal by Box-Muller from two uniforms. */
static inline float delta_rng_normal(uint64_t key, uint64_t counter) {
    uint64_t r = delta_rng_u64(key, counter);
    double u1 = ((double)(r >> 40) + 1.0) / 16777217.0; /* (0, 1] */
    double u2 = (double)((r >> 16) & 0xffffff) / 16777216.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

#endif
