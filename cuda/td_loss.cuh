// td_loss.cuh — the batch loss of a learner update into the ISV, shared by dqn_td and c51_loss:
// l_q = sum_i w_i loss_i / sum_i w_i over the batch (0 when the weights sum to 0), the same over
// its real (synthetic == 0) and its synthetic rows alone, each over its own weight sum (NaN when
// the batch has no such row), and the synthetic rows' share. Every thread adds its rows in order
// into one pair of sums per source; a row's source decides which, so a batch of real rows only
// gives l_q == l_q_real bit for bit.
#pragma once

#include <math_constants.h>

#include "reduce.cuh"

enum { TD_LOSS_REAL, TD_WEIGHT_REAL, TD_LOSS_SYN, TD_WEIGHT_SYN, TD_ROWS_SYN, TD_SUMS };

__device__ __forceinline__ void put_slot(float* isv, int idx, float value) {
    if (isv != nullptr && idx >= 0) isv[idx] = value;
}

// Row i's weighted loss into this thread's sums (synthetic NULL: every row real).
__device__ __forceinline__ void td_loss_add(float (&acc)[TD_SUMS], const uint8_t* synthetic, int i,
                                            float weight, float loss) {
    if (synthetic != nullptr && synthetic[i] != 0) {
        acc[TD_LOSS_SYN] += weight * loss;
        acc[TD_WEIGHT_SYN] += weight;
        acc[TD_ROWS_SYN] += 1.0f;
    } else {
        acc[TD_LOSS_REAL] += weight * loss;
        acc[TD_WEIGHT_REAL] += weight;
    }
}

// The block's sums (block_sum over every thread), then thread 0 writes the slots.
template <int BLOCK>
__device__ __forceinline__ void td_loss_slots(const float (&acc)[TD_SUMS],
                                              float (*partial)[BLOCK], float* isv, int M,
                                              int loss_idx, int real_idx, int synthetic_idx,
                                              int frac_idx) {
    block_sum<TD_SUMS, BLOCK>(acc, partial);
    if (threadIdx.x != 0) return;
    const float s_r = partial[TD_LOSS_REAL][0], w_r = partial[TD_WEIGHT_REAL][0];
    const float s_s = partial[TD_LOSS_SYN][0], w_s = partial[TD_WEIGHT_SYN][0];
    const float n_s = partial[TD_ROWS_SYN][0], n_r = static_cast<float>(M) - n_s;
    const float w = w_r + w_s;
    put_slot(isv, loss_idx, w > 0.0f ? (s_r + s_s) / w : 0.0f);
    put_slot(isv, real_idx, n_r > 0.0f && w_r > 0.0f ? s_r / w_r : CUDART_NAN_F);
    put_slot(isv, synthetic_idx, n_s > 0.0f && w_s > 0.0f ? s_s / w_s : CUDART_NAN_F);
    put_slot(isv, frac_idx, n_s / static_cast<float>(M));
}
