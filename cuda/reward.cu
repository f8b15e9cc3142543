// reward.cu — per-step reward-component diagnostics; built once per layout (-DRC_STRIDE=6|7).
//
// reward_component_ema (one block of exactly REWARD_EMA_BLOCK = 256 threads, any n):
//   mean_c = (1/n) * sum_{b<n} rc[b*RC_STRIDE + c]                     for c = 0..5
//   isv[ema_idx + c] = (1 - a) * isv[ema_idx + c] + a * mean_c,  a = isv[alpha_idx]
//   The stride-7 aux_align component (c=6) is deliberately not part of these EMAs.
//   n == 0 or a NULL isv leaves the ISV untouched. Deterministic: fixed per-thread order, then
//   a shared-memory tree.
//   rc   [n * RC_STRIDE] float32, row-major by env
//   isv  [isv_size] float32, slots ema_idx .. ema_idx+5 read and written, alpha_idx read
#include "common.cuh"
#include "isv.cuh"
#include "reward_layout.cuh"

#define REWARD_EMA_BLOCK 256

extern "C" __global__ void __launch_bounds__(REWARD_EMA_BLOCK)
reward_component_ema(const float* __restrict__ rc, float* __restrict__ isv, int n, int ema_idx,
                     int alpha_idx) {
    if (isv == nullptr || n <= 0) return;
    __shared__ float partial[RC_CORE][REWARD_EMA_BLOCK];
    const int tid = static_cast<int>(threadIdx.x);

    float acc[RC_CORE];
#pragma unroll
    for (int c = 0; c < RC_CORE; ++c) acc[c] = 0.0f;
    for (int b = tid; b < n; b += REWARD_EMA_BLOCK) {
#pragma unroll
        for (int c = 0; c < RC_CORE; ++c) acc[c] += rc[rc_offset(b, c)];
    }
#pragma unroll
    for (int c = 0; c < RC_CORE; ++c) partial[c][tid] = acc[c];
    __syncthreads();

    for (int width = REWARD_EMA_BLOCK / 2; width > 0; width >>= 1) {
        if (tid < width) {
#pragma unroll
            for (int c = 0; c < RC_CORE; ++c) partial[c][tid] += partial[c][tid + width];
        }
        __syncthreads();
    }

    if (tid < RC_CORE) {
        const float a = isv[alpha_idx];
        const float mean = partial[tid][0] / static_cast<float>(n);
        isv[ema_idx + tid] = (1.0f - a) * isv[ema_idx + tid] + a * mean;
    }
}
