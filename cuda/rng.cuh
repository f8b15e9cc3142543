// rng.cuh — the counter-based RNG shared by every kernel, bit-identical to reference/rng.py.
//
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
//   key     = (seed & 0xffffffff, seed >> 32)
//   counter = (index & 0xffffffff, index >> 32, stream, 0)
//   rng_u32 = word 0 of the output block
//   rng_uniform = (rng_u32 >> 8) * 2^-24, a float32 in [0, 1) with 24 random bits, exact.
// A draw depends only on (seed, stream, index): no state, so any thread can draw any number and
// the NumPy oracle draws the same one. Each consumer owns a stream id; the index is the draw's
// position within that stream (for example step * n + env).
#pragma once

#include <stdint.h>

// Stream ids: mirrored by RNG_STREAMS in src/alpha_rl/abi.py (the kernel tests compare the
// device's draws of each use with the host's and the oracles').
#define RNG_STREAM_TEST   0u
#define RNG_STREAM_ACT    1u
#define RNG_STREAM_PER    2u
#define RNG_STREAM_MARKET 3u
#define RNG_STREAM_INIT   4u
#define RNG_STREAM_ENV    5u
#define RNG_STREAM_PARAMS 6u
#define RNG_STREAM_PROBE  7u
#define RNG_STREAM_NOISE  8u
#define RNG_STREAM_BASELINE 9u  // host only: the held-out random baseline (pipeline/ledger.py)

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

__device__ __forceinline__ uint4 philox4x32_10(uint4 ctr, uint2 key) {
#pragma unroll
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            key.x += PHILOX_W0;
            key.y += PHILOX_W1;
        }
        const uint32_t lo0 = PHILOX_M0 * ctr.x;
        const uint32_t hi0 = __umulhi(PHILOX_M0, ctr.x);
        const uint32_t lo1 = PHILOX_M1 * ctr.z;
        const uint32_t hi1 = __umulhi(PHILOX_M1, ctr.z);
        ctr = make_uint4(hi1 ^ ctr.y ^ key.x, lo1, hi0 ^ ctr.w ^ key.y, lo0);
    }
    return ctr;
}

__device__ __forceinline__ uint32_t rng_u32(uint64_t seed, uint32_t stream, uint64_t index) {
    const uint2 key = make_uint2(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
    const uint4 ctr = make_uint4(static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                                 stream, 0u);
    return philox4x32_10(ctr, key).x;
}

__device__ __forceinline__ float rng_uniform_from_u32(uint32_t bits) {
    return static_cast<float>(bits >> 8) * 5.9604644775390625e-08f;  // 2^-24
}

__device__ __forceinline__ float rng_uniform(uint64_t seed, uint32_t stream, uint64_t index) {
    return rng_uniform_from_u32(rng_u32(seed, stream, index));
}
