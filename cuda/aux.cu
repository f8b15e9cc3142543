// aux.cu — the aux-direction signal in the learner and the reward (DESIGN §7; the seed's Phase
// 3b): α, a learned bias of the directional actions' Q-values on the aux head's prediction, and
// the controller of w_aux_align, the weight of the β reward c6.
//
// aux_alpha_bias (a thread per row i < M): aux_i = 2 sigmoid(z) - 1, z = aux_w[H] + sum_k
//   aux_w[k] h[i, k] (k in order), the aux head of dqn_act; q[i, a] += w[a] aux_i for each
//   a < ACTIONS (in place: Q' = Q + w_α aux); aux_out[i] = aux_i (NULL: not kept).
// aux_alpha_update (one block of AUX_BLOCK threads): the gradient of the learner's loss wrt w_α,
//   g[a] = sum_i dq[i, a] aux[i] over i < M (dq: the loss's gradient wrt Q' of the batch's h_t
//   rows; every thread adds its rows in order, then the block by halving), g[FLAT] unused: w[FLAT]
//   stays as it was (0). For the directional actions, Adam with its own moments m, v and the
//   network's step t = counters[0] (already advanced by dqn_grad_norm): m = b1 m + (1 - b1) g;
//   v = b2 v + (1 - b2) g^2; w -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps), then w =
//   clamp(w, -bound, bound) (a NaN or inf is kept, for the run's finiteness check); then the target's sync as dqn_adam's (tau > 0: Polyak, else a copy
//   when t % period == 0). isv[long_idx] = w[LONG], isv[short_idx] = w[SHORT] (each skipped when
//   its index is < 0).
// aux_controller (one thread): the share of the aux-align reward in the magnitude of the reward
//   paid, each component at its weight: with w = isv[w_idx] (w_6, the weight the env step pays c6
//   with) and w_c = isv[weight_idx + c], share = w |isv[aux_ema_idx]| / (w |isv[aux_ema_idx]| +
//   sum_{c < core} |w_c| isv[abs_idx + c]) (0 when that sum is 0; the EMAs are of the unweighted
//   components), into isv[share_idx]; then w = clamp(w + gain (target - share), 0, w_max) into
//   isv[w_idx]. Since the share grows with w, w settles where the share meets the target.
#include "common.cuh"

#include "adam.cuh"
#include "env.cuh"
#include "reduce.cuh"

#define AUX_BLOCK 256
ALPHA_RL_EXPORT(AUX_BLOCK);

#define MUL __fmul_rn
#define ADD __fadd_rn

__device__ __forceinline__ float aux_signal(const float* __restrict__ h,
                                            const float* __restrict__ aux_w, int i, int H) {
    float z = aux_w[H];
    for (int k = 0; k < H; ++k) z += aux_w[k] * h[static_cast<size_t>(i) * H + k];
    return 2.0f / (1.0f + expf(-z)) - 1.0f;
}

extern "C" __global__ void aux_alpha_bias(const float* __restrict__ h,
                                          const float* __restrict__ aux_w,
                                          const float* __restrict__ w, float* __restrict__ q,
                                          float* __restrict__ aux_out, int M, int H,
                                          const AgentAxis agent_axis) {
    agent_slice(agent_axis, h, aux_w, w, q, aux_out);
    const int i = global_index_1d();
    if (i >= M) return;
    const float aux = aux_signal(h, aux_w, i, H);
#pragma unroll
    for (int a = 0; a < ACTIONS; ++a) {
        float* qa = q + static_cast<size_t>(i) * ACTIONS + a;
        *qa = ADD(*qa, MUL(w[a], aux));
    }
    if (aux_out != nullptr) aux_out[i] = aux;
}

extern "C" __global__ void __launch_bounds__(AUX_BLOCK)
aux_alpha_update(const float* __restrict__ dq, const float* __restrict__ aux,
                 const unsigned long long* __restrict__ counters, float* __restrict__ w,
                 float* __restrict__ m, float* __restrict__ v, float* __restrict__ target,
                 float* __restrict__ isv, int M, int adam_idx, int long_idx, int short_idx,
                 const AgentAxis agent_axis) {
    agent_slice(agent_axis, dq, aux, counters, w, m, v, target, isv);
    __shared__ float partial[ACTIONS][AUX_BLOCK];
    // α's numbers, in ALPHA_NUMBERS' order (kernels/aux.py)
    const float lr = isv[adam_idx], beta1 = isv[adam_idx + 1], beta2 = isv[adam_idx + 2];
    const float eps = isv[adam_idx + 3], bound = isv[adam_idx + 4], tau = isv[adam_idx + 5];
    const int period = static_cast<int>(isv[adam_idx + 6]);
    float acc[ACTIONS] = {};
    for (int i = threadIdx.x; i < M; i += AUX_BLOCK) {
#pragma unroll
        for (int a = 0; a < ACTIONS; ++a) acc[a] += dq[static_cast<size_t>(i) * ACTIONS + a] * aux[i];
    }
    block_sum<ACTIONS, AUX_BLOCK>(acc, partial);
    const int a = static_cast<int>(threadIdx.x);
    if (a >= ACTIONS || a == ACTION_FLAT) return;
    const unsigned long long step = counters[0];
    const float stepped = adam_step(partial[a][0], static_cast<float>(step), m, v, w, a, lr, beta1,
                                    beta2, eps);
    const float p = isfinite(stepped) ? fminf(fmaxf(stepped, -bound), bound) : stepped;  // NaN shows
    w[a] = p;
    target_sync(p, target, a, tau, step, period);
    const int idx = a == ACTION_LONG ? long_idx : short_idx;
    if (isv != nullptr && idx >= 0) isv[idx] = p;
}

extern "C" __global__ void aux_controller(float* __restrict__ isv, int aux_ema_idx, int abs_idx,
                                          int weight_idx, int core, int w_idx, int share_idx,
                                          int numbers_idx, const AgentAxis agent_axis) {
    agent_slice(agent_axis, isv);
    if (global_index_1d() != 0) return;
    // β's numbers, in CONTROLLER_NUMBERS' order (kernels/aux.py)
    const float gain = isv[numbers_idx], target = isv[numbers_idx + 1];
    const float w_max = isv[numbers_idx + 2];
    const float w = isv[w_idx];
    const float aux = MUL(w, fabsf(isv[aux_ema_idx]));
    float total = aux;
    for (int c = 0; c < core; ++c) total = ADD(total, MUL(fabsf(isv[weight_idx + c]), isv[abs_idx + c]));
    const float share = total > 0.0f ? __fdiv_rn(aux, total) : 0.0f;
    isv[share_idx] = share;
    isv[w_idx] = fminf(fmaxf(ADD(w, MUL(gain, __fsub_rn(target, share))), 0.0f), w_max);
}
