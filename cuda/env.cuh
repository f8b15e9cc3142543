// env.cuh — shared definitions of the batched trading environment (DESIGN §3).
//
// Actions are target positions: ACTION_FLAT -> 0, ACTION_LONG -> +lot, ACTION_SHORT -> -lot;
// any other value is treated as FLAT. Directions are ints in {-1, 0, +1}.
// Prices on the device are float32 offsets from the book's reference price (a multiple of the
// tick): only differences of prices enter PnL and features, and offsets keep float32 exact
// for instruments whose absolute price is large.
#pragma once

#include "common.cuh"
#include "rng.cuh"

#define ACTION_FLAT 0
#define ACTION_LONG 1
#define ACTION_SHORT 2
#define ACTIONS 3  // the Q-network's outputs: one per action

ALPHA_RL_EXPORT(ACTION_FLAT);
ALPHA_RL_EXPORT(ACTION_LONG);
ALPHA_RL_EXPORT(ACTION_SHORT);
ALPHA_RL_EXPORT(ACTIONS);

__device__ __forceinline__ int action_direction(int action) {
    return action == ACTION_LONG ? 1 : (action == ACTION_SHORT ? -1 : 0);
}

__device__ __forceinline__ int direction_action(int dir) {
    return dir > 0 ? ACTION_LONG : (dir < 0 ? ACTION_SHORT : ACTION_FLAT);
}

// Index of env b's episode `episode` start in the table of start ticks: uniform in [0, count) by
// Lemire's multiply-shift on one draw of the ENV stream at index (episode << 32) | b.
// reference/experience.py: start_index.
__device__ __forceinline__ int env_start_index(uint64_t seed, int b, int episode, int count) {
    const uint64_t index = (static_cast<uint64_t>(static_cast<uint32_t>(episode)) << 32) |
                           static_cast<uint32_t>(b);
    const uint32_t bits = rng_u32(seed, RNG_STREAM_ENV, index);
    return static_cast<int>((static_cast<uint64_t>(bits) * static_cast<uint64_t>(count)) >> 32);
}
