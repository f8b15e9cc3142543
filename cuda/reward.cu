// reward.cu — the per-step reward-component diagnostics (step 5); built once per layout
// (-DRC_STRIDE=6|7). One launch, reward_diagnostics, computes all of them.
//
// Over the n envs (a = isv[alpha_idx]; the means are over all n):
//   component EMAs: isv[ema_idx + c] = (1 - a) isv[ema_idx + c] + a mean_b rc[b, c], c = 0..5
//     (c6 aux_align is left out on purpose);
//   aux-align EMA (stride 7 only): the same for c6 into isv[aux_ema_idx];
//   magnitudes: isv[abs_idx + c] = the same EMA of mean_b |rc[b, c]|, c = 0..5, then
//     isv[ratio_idx + c] = isv[abs_idx + c] / sum_{c' != c} isv[abs_idx + c'] (0 if that is 0);
//   decomposition: rows per position state before the step (prev_dir 0 flat, +1 long, -1 short ->
//     rows 0, 1, 2), columns [count, mean reward, mean |reward|, mean of sum_{c < RC_STRIDE}
//     |rc_c|, mean rc_0 .. mean rc_{RC_STRIDE-1}] into diag[row * (4 + RC_STRIDE) + col]; an
//     empty row is all zeros.
// The ISV groups are skipped when isv is NULL or n == 0, each slot group when its index is < 0
// (the ratios also when abs_idx is); diag is always written.
// Blocks of REWARD_BLOCK threads take REWARD_ROWS envs each; a thread adds its envs in order,
// the block adds its threads by warps (reduce.cuh) into partial[block, REWARD_SUMS], and the last
// block to finish adds the blocks in block order and writes the results: deterministic for a
// given n. done[0] is the blocks-done scratch (0 between launches).
// Arrays: rc [n*RC_STRIDE] f32 row-major by env; reward [n] f32; prev_dir [n] i32;
//   isv [isv_size] f32; diag [3 * (4 + RC_STRIDE)] f32; partial [blocks * REWARD_SUMS] f32.
#include "common.cuh"
#include "isv.cuh"
#include "reduce.cuh"
#include "reward_layout.cuh"

#define REWARD_BLOCK 256
#define REWARD_ROWS 512                          // envs per block
#define DECOMP_ROWS 3                            // flat, long, short
#define DECOMP_LEAD 4                            // count, mean reward, mean |reward|, mean abs-sum
#define DECOMP_COLS (DECOMP_LEAD + RC_STRIDE)    // ... then the mean of each component
// the sums a block adds: components 0..5, c6 (stride 7), |components 0..5|, the decomposition
#define SUM_MEAN 0
#define SUM_AUX RC_CORE
#define SUM_ABS (SUM_AUX + RC_STRIDE - RC_CORE)
#define SUM_DECOMP (SUM_ABS + RC_CORE)
#define REWARD_SUMS (SUM_DECOMP + DECOMP_ROWS * DECOMP_COLS)

ALPHA_RL_EXPORT(REWARD_BLOCK);
ALPHA_RL_EXPORT(REWARD_ROWS);
// REWARD_SUMS depends on the layout, so it is not exported: Python's reference.reward.block_sums
// computes it by this formula
static_assert(REWARD_SUMS == RC_CORE + RC_STRIDE + DECOMP_ROWS * DECOMP_COLS, "see block_sums");
ALPHA_RL_EXPORT(DECOMP_ROWS);
ALPHA_RL_EXPORT(DECOMP_LEAD);

__device__ __forceinline__ float ema(float old, float a, float mean) {
    return (1.0f - a) * old + a * mean;
}

// The envs [first, last) of this block added into acc, each thread its own envs in order.
__device__ __forceinline__ void reward_sums(const float* __restrict__ rc,
                                            const float* __restrict__ reward,
                                            const int* __restrict__ prev_dir, int first, int last,
                                            float (&acc)[REWARD_SUMS]) {
#pragma unroll 2  // loads of the next env run ahead of the (in-order) additions
    for (int b = first + static_cast<int>(threadIdx.x); b < last; b += REWARD_BLOCK) {
        const int d = prev_dir[b];
        const int row = d > 0 ? 1 : (d < 0 ? 2 : 0);
        const float r = reward[b];
        float comp[RC_STRIDE], abs_sum = 0.0f;
#pragma unroll
        for (int c = 0; c < RC_STRIDE; ++c) {
            comp[c] = rc[rc_offset(b, c)];
            abs_sum += fabsf(comp[c]);
        }
#pragma unroll
        for (int c = 0; c < RC_CORE; ++c) {
            acc[SUM_MEAN + c] += comp[c];
            acc[SUM_ABS + c] += fabsf(comp[c]);
        }
#if RC_STRIDE > RC_AUX_ALIGN
        acc[SUM_AUX] += comp[RC_AUX_ALIGN];
#endif
#pragma unroll
        for (int k = 0; k < DECOMP_ROWS; ++k) {
            if (k != row) continue;
            float* cell = acc + SUM_DECOMP + k * DECOMP_COLS;
            cell[0] += 1.0f;
            cell[1] += r;
            cell[2] += fabsf(r);
            cell[3] += abs_sum;
#pragma unroll
            for (int c = 0; c < RC_STRIDE; ++c) cell[DECOMP_LEAD + c] += comp[c];
        }
    }
}

extern "C" __global__ void __launch_bounds__(REWARD_BLOCK)
reward_diagnostics(const float* __restrict__ rc, const float* __restrict__ reward,
                   const int* __restrict__ prev_dir, float* __restrict__ isv,
                   float* __restrict__ diag, float* __restrict__ partial,
                   unsigned long long* __restrict__ done, int n, int ema_idx, int aux_ema_idx,
                   int abs_idx, int ratio_idx, int alpha_idx, const AgentAxis agent_axis) {
    agent_slice(agent_axis, rc, reward, prev_dir, isv, diag, partial, done);
    __shared__ float sums[REWARD_BLOCK / 32][REWARD_SUMS];
    __shared__ float abs_ema[RC_CORE];
    const int tid = static_cast<int>(threadIdx.x);
    const int first = blockIdx.x * REWARD_ROWS, last = min(n, first + REWARD_ROWS);
    float acc[REWARD_SUMS] = {};
    reward_sums(rc, reward, prev_dir, first, last, acc);
    block_sum_warps<REWARD_SUMS, REWARD_BLOCK>(acc, sums);
    if (tid < REWARD_SUMS) partial[static_cast<size_t>(blockIdx.x) * REWARD_SUMS + tid] = sums[0][tid];
    if (!last_block_done(done)) return;
    // the last block: every block's sums, in block order, into sums[0]
    if (tid < REWARD_SUMS) {
        float s = 0.0f;
#pragma unroll 8
        for (int k = 0; k < static_cast<int>(gridDim.x); ++k) {
            s += __ldcg(partial + static_cast<size_t>(k) * REWARD_SUMS + tid);
        }
        sums[0][tid] = s;
    }
    if (tid == 0) done[0] = 0ull;
    __syncthreads();
    const float* total = sums[0];
    if (tid < DECOMP_ROWS * DECOMP_COLS) {
        const int row = tid / DECOMP_COLS, col = tid % DECOMP_COLS;
        const float count = total[SUM_DECOMP + row * DECOMP_COLS];
        diag[tid] = col == 0 ? count : (count > 0.0f ? total[SUM_DECOMP + tid] / count : 0.0f);
    }
    if (isv == nullptr || n <= 0) return;
    const float a = isv[alpha_idx], count = static_cast<float>(n);
    const int c = tid;
    if (c < RC_CORE) {
        if (ema_idx >= 0) isv[ema_idx + c] = ema(isv[ema_idx + c], a, total[SUM_MEAN + c] / count);
        if (abs_idx >= 0) {
            abs_ema[c] = ema(isv[abs_idx + c], a, total[SUM_ABS + c] / count);
            isv[abs_idx + c] = abs_ema[c];
        }
    }
#if RC_STRIDE > RC_AUX_ALIGN
    if (c == 0 && aux_ema_idx >= 0) {
        isv[aux_ema_idx] = ema(isv[aux_ema_idx], a, total[SUM_AUX] / count);
    }
#endif
    __syncthreads();
    if (c < RC_CORE && abs_idx >= 0 && ratio_idx >= 0) {
        float others = 0.0f;
        for (int k = 0; k < RC_CORE; ++k) others += k == c ? 0.0f : abs_ema[k];
        isv[ratio_idx + c] = others > 0.0f ? abs_ema[c] / others : 0.0f;
    }
}
