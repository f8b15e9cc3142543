// reward.cu — per-step reward-component diagnostics; built once per layout (-DRC_STRIDE=6|7).
// Each kernel runs as one block of exactly REWARD_BLOCK = 256 threads over any n envs and is
// deterministic (reduce.cuh). n == 0 or a NULL isv changes nothing. a = isv[alpha_idx].
//
// reward_component_ema: mean_c = (1/n) sum_b rc[b*RC_STRIDE + c], c = 0..5;
//   isv[ema_idx + c] = (1 - a) * isv[ema_idx + c] + a * mean_c. c6 (aux_align) is left out.
// reward_aux_align_ema (stride 7; a no-op at stride 6): the same for c6 into isv[ema_idx].
// reward_mag_ratio: abs_c = (1/n) sum_b |rc[b, c]|, c = 0..5;
//   isv[abs_idx + c] = (1 - a) * isv[abs_idx + c] + a * abs_c, then
//   isv[ratio_idx + c] = isv[abs_idx + c] / sum_{c' != c} isv[abs_idx + c'] (0 if that is 0).
// reward_decomp_diag: rows per position state before the step (prev_dir 0 flat, +1 long,
//   -1 short -> rows 0, 1, 2), columns [count, mean reward, mean |reward|, mean of
//   sum_{c < RC_STRIDE} |rc_c|, mean rc_0 .. mean rc_{RC_STRIDE-1}] into
//   diag[row * (4 + RC_STRIDE) + col]; an empty row is all zeros.
// Arrays: rc [n*RC_STRIDE] f32 row-major by env; reward [n] f32; prev_dir [n] i32;
//   isv [isv_size] f32; diag [3 * (4 + RC_STRIDE)] f32.
#include "common.cuh"
#include "isv.cuh"
#include "reduce.cuh"
#include "reward_layout.cuh"

#define REWARD_BLOCK 256
#define DECOMP_ROWS 3                            // flat, long, short
#define DECOMP_LEAD 4                            // count, mean reward, mean |reward|, mean abs-sum
#define DECOMP_COLS (DECOMP_LEAD + RC_STRIDE)    // ... then the mean of each component

ALPHA_RL_EXPORT(REWARD_BLOCK);
ALPHA_RL_EXPORT(DECOMP_ROWS);
ALPHA_RL_EXPORT(DECOMP_LEAD);

__device__ __forceinline__ float ema(float old, float a, float mean) {
    return (1.0f - a) * old + a * mean;
}

extern "C" __global__ void __launch_bounds__(REWARD_BLOCK)
reward_component_ema(const float* __restrict__ rc, float* __restrict__ isv, int n, int ema_idx,
                     int alpha_idx) {
    if (isv == nullptr || n <= 0) return;
    __shared__ float partial[RC_CORE][REWARD_BLOCK];
    float acc[RC_CORE] = {};
#pragma unroll 8  // loads of later rows run ahead of the (in-order) additions
    for (int b = threadIdx.x; b < n; b += REWARD_BLOCK) {
#pragma unroll
        for (int c = 0; c < RC_CORE; ++c) acc[c] += rc[rc_offset(b, c)];
    }
    block_sum<RC_CORE, REWARD_BLOCK>(acc, partial);
    const int c = threadIdx.x;
    if (c < RC_CORE) {
        isv[ema_idx + c] = ema(isv[ema_idx + c], isv[alpha_idx], partial[c][0] / static_cast<float>(n));
    }
}

extern "C" __global__ void __launch_bounds__(REWARD_BLOCK)
reward_aux_align_ema(const float* __restrict__ rc, float* __restrict__ isv, int n, int ema_idx,
                     int alpha_idx) {
#if RC_STRIDE == 7
    if (isv == nullptr || n <= 0) return;
    __shared__ float partial[1][REWARD_BLOCK];
    float acc[1] = {0.0f};
#pragma unroll 8  // loads of later rows run ahead of the (in-order) additions
    for (int b = threadIdx.x; b < n; b += REWARD_BLOCK) acc[0] += rc[rc_offset(b, RC_AUX_ALIGN)];
    block_sum<1, REWARD_BLOCK>(acc, partial);
    if (threadIdx.x == 0) {
        isv[ema_idx] = ema(isv[ema_idx], isv[alpha_idx], partial[0][0] / static_cast<float>(n));
    }
#endif
}

extern "C" __global__ void __launch_bounds__(REWARD_BLOCK)
reward_mag_ratio(const float* __restrict__ rc, float* __restrict__ isv, int n, int abs_idx,
                 int ratio_idx, int alpha_idx) {
    if (isv == nullptr || n <= 0) return;
    __shared__ float partial[RC_CORE][REWARD_BLOCK];
    __shared__ float abs_ema[RC_CORE];
    float acc[RC_CORE] = {};
#pragma unroll 8  // loads of later rows run ahead of the (in-order) additions
    for (int b = threadIdx.x; b < n; b += REWARD_BLOCK) {
#pragma unroll
        for (int c = 0; c < RC_CORE; ++c) acc[c] += fabsf(rc[rc_offset(b, c)]);
    }
    block_sum<RC_CORE, REWARD_BLOCK>(acc, partial);
    const int c = threadIdx.x;
    if (c < RC_CORE) {
        abs_ema[c] = ema(isv[abs_idx + c], isv[alpha_idx], partial[c][0] / static_cast<float>(n));
        isv[abs_idx + c] = abs_ema[c];
    }
    __syncthreads();
    if (c < RC_CORE) {
        float others = 0.0f;
        for (int k = 0; k < RC_CORE; ++k) others += k == c ? 0.0f : abs_ema[k];
        isv[ratio_idx + c] = others > 0.0f ? abs_ema[c] / others : 0.0f;
    }
}

extern "C" __global__ void __launch_bounds__(REWARD_BLOCK)
reward_decomp_diag(const float* __restrict__ rc, const float* __restrict__ reward,
                   const int* __restrict__ prev_dir, float* __restrict__ diag, int n) {
    __shared__ float partial[DECOMP_ROWS * DECOMP_COLS][REWARD_BLOCK];
    float acc[DECOMP_ROWS * DECOMP_COLS] = {};
#pragma unroll 8  // loads of later rows run ahead of the (in-order) additions
    for (int b = threadIdx.x; b < n; b += REWARD_BLOCK) {
        const int d = prev_dir[b];
        const int row = d > 0 ? 1 : (d < 0 ? 2 : 0);
        const float r = reward[b];
        float abs_sum = 0.0f;
        float comp[RC_STRIDE];
#pragma unroll
        for (int c = 0; c < RC_STRIDE; ++c) {
            comp[c] = rc[rc_offset(b, c)];
            abs_sum += fabsf(comp[c]);
        }
#pragma unroll
        for (int k = 0; k < DECOMP_ROWS; ++k) {
            if (k != row) continue;
            float* cell = acc + k * DECOMP_COLS;
            cell[0] += 1.0f;
            cell[1] += r;
            cell[2] += fabsf(r);
            cell[3] += abs_sum;
#pragma unroll
            for (int c = 0; c < RC_STRIDE; ++c) cell[4 + c] += comp[c];
        }
    }
    block_sum<DECOMP_ROWS * DECOMP_COLS, REWARD_BLOCK>(acc, partial);
    const int i = threadIdx.x;
    if (i < DECOMP_ROWS * DECOMP_COLS) {
        const int row = i / DECOMP_COLS, col = i % DECOMP_COLS;
        const float count = partial[row * DECOMP_COLS][0];
        const float total = partial[i][0];
        diag[i] = col == 0 ? count : (count > 0.0f ? total / count : 0.0f);
    }
}
