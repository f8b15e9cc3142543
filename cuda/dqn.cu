// dqn.cu — the double-DQN learner around the MLP (DESIGN §7): batch gather, TD loss l_q,
// gradient norm, Adam, target sync, epsilon-greedy action selection, the aux direction head.
//
// dqn_gather: for i < M, k < H (one thread per element): x_t[i, k] = s_h_t[idx_i, k],
//   x_tp1[i, k] = s_h_tp1[idx_i, k], and (k == 0) action, reward, done, synthetic (and, with
//   s_discount, the discount) of idx_i; a negative index gives zeros.
// dqn_td (one block of DQN_BLOCK threads, M <= DQN_MAX_BATCH): for each i,
//   a* = argmax_a q_tp1[i, a] (first on ties), y = r + g_i * (1 - cut_on_done * done) *
//   q_tp1_target[i, a*] with g_i = discount[i] (n-step returns: gamma^k) or gamma when discount
//   is NULL, delta_i = y - q_t[i, action_i], huber(d) = d^2 / 2 if |d| <= kappa
//   else kappa * (|d| - kappa / 2); dq[i, a] = -(w_i / M) clip(delta_i, +-kappa) for
//   a = action_i, 0 elsewhere (the gradient of sum_i w_i huber(delta_i) / M wrt q_t).
//   Into the ISV (each slot skipped when its index is < 0; synthetic NULL = every row real), as
//   td_loss.cuh says with loss_i = huber_i: isv[loss_idx] = l_q = sum_i w_i huber_i / sum_i
//   w_i, isv[real_idx], isv[synthetic_idx] the same over the real and the synthetic rows alone,
//   isv[frac_idx] = synthetic rows / M.
// dqn_grad_norm (one block): norm = sqrt(sum g^2) into stats[0] and isv[norm_idx];
//   counters[0] (Adam's step t) += 1.
// dqn_adam (one thread per parameter): g' = g * min(1, clip / norm) when clip > 0;
//   m = b1 m + (1 - b1) g'; v = b2 v + (1 - b2) g'^2;
//   p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps), t = counters[0]; then the target
//   network's sync from the new p: tau > 0: target = tau p + (1 - tau) target; else target = p
//   when t % period == 0.
// dqn_act (one thread per env): eps = eps_end + (eps_start - eps_end) * max(0, 1 - s / decay),
//   s = counters[1]; u1, u2 = rng_uniform(seed, ACT, 2 (s B + b) + {0, 1}); u1 < eps: action
//   = min(A - 1, floor(u2 A)), else argmax_a q[b, a]. The last block to finish advances s and
//   writes eps to isv[eps_idx]. counters[2] is the blocks-done scratch. With p_up (else NULL, and
//   h, aux_w unread) also the aux head: p_up[b] = sigmoid(aux_w[H] + sum_k aux_w[k] h[b, k]).
// dqn_aux_train (blocks of DQN_AUX_ROWS rows; a thread per (weight, row lane), the lanes added in
//   order; H + 3 <= DQN_BLOCK): y_b = 1 if post_mid > fill_mid, 0 if below, unlabeled if
//   equal; over labeled rows g = mean (p_up - y) [h, 1],
//   l_aux = mean BCE (p clamped to [1e-7, 1 - 1e-7]); partial sums per block in partial
//   [blocks, H + 3], added by the last block (its lane l the blocks l, l + lanes, ... in order,
//   then the lanes in order), which applies w -= lr * g and writes l_aux to isv[loss_idx] (no
//   labeled row: nothing changes). counters[3]: scratch.
#include "common.cuh"

#include "adam.cuh"
#include "reduce.cuh"
#include "rng.cuh"
#include "td_loss.cuh"

#define DQN_BLOCK 1024
#define DQN_MAX_BATCH 4096
#define DQN_AUX_ROWS 64  // rows per block, spread over the block's row lanes
#define DQN_ADAM_STEP 0
#define DQN_ACT_STEP 1
#define DQN_ACT_DONE 2
#define DQN_AUX_DONE 3
#define DQN_COUNTERS 4  // u64 words of a counters array

ALPHA_RL_EXPORT(DQN_BLOCK);
ALPHA_RL_EXPORT(DQN_MAX_BATCH);
ALPHA_RL_EXPORT(DQN_AUX_ROWS);
ALPHA_RL_EXPORT(DQN_ADAM_STEP);
ALPHA_RL_EXPORT(DQN_ACT_STEP);
ALPHA_RL_EXPORT(DQN_ACT_DONE);
ALPHA_RL_EXPORT(DQN_AUX_DONE);
ALPHA_RL_EXPORT(DQN_COUNTERS);

extern "C" __global__ void dqn_gather(const int* __restrict__ idx, const float* __restrict__ s_h_t,
                                      const float* __restrict__ s_h_tp1,
                                      const int* __restrict__ s_action,
                                      const float* __restrict__ s_reward,
                                      const float* __restrict__ s_done,
                                      const uint8_t* __restrict__ s_synthetic,
                                      const float* __restrict__ s_discount,
                                      float* __restrict__ x_t, float* __restrict__ x_tp1,
                                      int* __restrict__ action, float* __restrict__ reward,
                                      float* __restrict__ done, uint8_t* __restrict__ synthetic,
                                      float* __restrict__ discount, int M, int H,
                                      const AgentAxis agent_axis) {
    agent_slice(agent_axis, idx, s_h_t, s_h_tp1, s_action, s_reward, s_done, s_synthetic,
                s_discount, x_t, x_tp1, action, reward, done, synthetic, discount);
    const int e = global_index_1d();
    if (e >= M * H) return;
    const int i = e / H, k = e - i * H;
    const int slot = idx[i];
    const size_t src = static_cast<size_t>(slot) * H + k;
    x_t[e] = slot >= 0 ? s_h_t[src] : 0.0f;
    x_tp1[e] = slot >= 0 ? s_h_tp1[src] : 0.0f;
    if (k == 0) {
        action[i] = slot >= 0 ? s_action[slot] : 0;
        reward[i] = slot >= 0 ? s_reward[slot] : 0.0f;
        done[i] = slot >= 0 ? s_done[slot] : 0.0f;
        synthetic[i] = slot >= 0 ? s_synthetic[slot] : 0;
        if (discount != nullptr) discount[i] = slot >= 0 ? s_discount[slot] : 0.0f;
    }
}

extern "C" __global__ void __launch_bounds__(DQN_BLOCK)
dqn_td(const float* __restrict__ q_t, const float* __restrict__ q_tp1,
       const float* __restrict__ q_tp1_target, const int* __restrict__ action,
       const float* __restrict__ reward, const float* __restrict__ done,
       const float* __restrict__ weight, const uint8_t* __restrict__ synthetic,
       const float* __restrict__ discount, float* __restrict__ delta, float* __restrict__ dq, float* __restrict__ isv, int M, int A,
       int gamma_idx, int cut_idx, int kappa_idx, int loss_idx, int real_idx, int synthetic_idx,
       int frac_idx, const AgentAxis agent_axis) {
    agent_slice(agent_axis, q_t, q_tp1, q_tp1_target, action, reward, done, weight, synthetic,
                discount, delta, dq, isv);
    __shared__ float partial[TD_SUMS][DQN_BLOCK];
    const float gamma = isv[gamma_idx], kappa = isv[kappa_idx];
    const bool cut_on_done = isv[cut_idx] != 0.0f;
    float acc[TD_SUMS] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = threadIdx.x; i < M; i += DQN_BLOCK) {
        const float* row = q_tp1 + static_cast<size_t>(i) * A;
        int best = 0;
        for (int a = 1; a < A; ++a) best = row[a] > row[best] ? a : best;
        const float cont = cut_on_done ? 1.0f - done[i] : 1.0f;
        const float disc = discount != nullptr ? discount[i] : gamma;
        const float y = reward[i] + disc * cont * q_tp1_target[static_cast<size_t>(i) * A + best];
        const int a_i = action[i];
        const float d = y - q_t[static_cast<size_t>(i) * A + a_i];
        const float ad = fabsf(d);
        const float huber = ad <= kappa ? 0.5f * d * d : kappa * (ad - 0.5f * kappa);
        td_loss_add(acc, synthetic, i, weight[i], huber);
        delta[i] = d;
        const float g = -(weight[i] / static_cast<float>(M)) * fminf(fmaxf(d, -kappa), kappa);
        for (int a = 0; a < A; ++a) dq[static_cast<size_t>(i) * A + a] = a == a_i ? g : 0.0f;
    }
    td_loss_slots<DQN_BLOCK>(acc, partial, isv, M, loss_idx, real_idx, synthetic_idx, frac_idx);
}

extern "C" __global__ void __launch_bounds__(DQN_BLOCK)
dqn_grad_norm(const float* __restrict__ grad, float* __restrict__ stats,
              unsigned long long* __restrict__ counters, float* __restrict__ isv, int P,
              int norm_idx, const AgentAxis agent_axis) {
    agent_slice(agent_axis, grad, stats, counters, isv);
    __shared__ float partial[DQN_BLOCK];
    float s = 0.0f;
    for (int k = threadIdx.x; k < P; k += DQN_BLOCK) s += grad[k] * grad[k];
    partial[threadIdx.x] = s;
    __syncthreads();
    for (int width = DQN_BLOCK / 2; width > 0; width >>= 1) {
        if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const float norm = sqrtf(partial[0]);
        stats[0] = norm;
        if (isv != nullptr && norm_idx >= 0) isv[norm_idx] = norm;
        counters[DQN_ADAM_STEP] += 1ull;
    }
}

extern "C" __global__ void dqn_adam(const float* __restrict__ grad, const float* __restrict__ stats,
                                    const unsigned long long* __restrict__ counters,
                                    const float* __restrict__ isv,
                                    float* __restrict__ param, float* __restrict__ m,
                                    float* __restrict__ v, float* __restrict__ target, int P,
                                    int adam_idx, const AgentAxis agent_axis) {
    agent_slice(agent_axis, grad, stats, counters, isv, param, m, v, target);
    const int k = global_index_1d();
    // the learner's numbers, in ADAM_NUMBERS' order (kernels/dqn.py)
    const float lr = isv[adam_idx], beta1 = isv[adam_idx + 1], beta2 = isv[adam_idx + 2];
    const float eps = isv[adam_idx + 3], clip = isv[adam_idx + 4], tau = isv[adam_idx + 5];
    const int period = static_cast<int>(isv[adam_idx + 6]);
    if (k >= P) return;
    const float norm = stats[0];
    const float scale = clip > 0.0f && norm > clip ? clip / norm : 1.0f;
    const float g = grad[k] * scale;
    const unsigned long long step = counters[DQN_ADAM_STEP];
    const float p = adam_step(g, static_cast<float>(step), m, v, param, k, lr, beta1, beta2, eps);
    target_sync(p, target, k, tau, step, period);
}

extern "C" __global__ void dqn_act(const float* __restrict__ q, const float* __restrict__ h,
                                   const float* __restrict__ aux_w,
                                   const unsigned long long* __restrict__ run_seed,
                                   int* __restrict__ action,
                                   unsigned long long* __restrict__ counters,
                                   float* __restrict__ isv, float* __restrict__ p_up, int B, int A,
                                   int H, int schedule_idx, int eps_idx,
                                   const AgentAxis agent_axis) {
    agent_slice(agent_axis, q, h, aux_w, run_seed, action, counters, isv, p_up);
    const unsigned long long seed = run_seed[0];  // the agent's own
    const int b = global_index_1d();
    const unsigned long long s = counters[DQN_ACT_STEP];
    // rounded op by op (no contraction), so the oracle reproduces eps and each u1 < eps exactly;
    // no schedule: greedy (eps 0)
    float eps = 0.0f;
    if (schedule_idx >= 0) {
        const float eps_start = isv[schedule_idx], eps_end = isv[schedule_idx + 1];
        const float decay = isv[schedule_idx + 2];
        const float frac = fmaxf(0.0f, __fsub_rn(1.0f, __fdiv_rn(static_cast<float>(s), decay)));
        eps = __fadd_rn(eps_end, __fmul_rn(__fsub_rn(eps_start, eps_end), frac));
    }
    if (b < B) {
        const unsigned long long base = 2ull * (s * static_cast<unsigned long long>(B) + b);
        const float u1 = rng_uniform(seed, RNG_STREAM_ACT, base);
        const float* row = q + static_cast<size_t>(b) * A;
        int best = 0;
        for (int a = 1; a < A; ++a) best = row[a] > row[best] ? a : best;
        if (u1 < eps) {
            const float u2 = rng_uniform(seed, RNG_STREAM_ACT, base + 1ull);
            best = min(A - 1, static_cast<int>(__fmul_rn(u2, static_cast<float>(A))));
        }
        action[b] = best;
        if (p_up != nullptr) {  // the aux head: p_up = sigmoid(w . h + b)
            float z = aux_w[H];
            for (int k = 0; k < H; ++k) z += aux_w[k] * h[static_cast<size_t>(b) * H + k];
            p_up[b] = 1.0f / (1.0f + expf(-z));
        }
    }
    if (last_block_done(counters + DQN_ACT_DONE) && threadIdx.x == 0) {
        counters[DQN_ACT_STEP] = s + 1ull;
        counters[DQN_ACT_DONE] = 0ull;
        if (isv != nullptr && eps_idx >= 0) isv[eps_idx] = eps;
    }
}

// Column j of the block's lane sums (lane_sum[l * cols + j], l < lanes), the lanes in order.
__device__ __forceinline__ float lanes_total(const float* lane_sum, int lanes, int cols, int j) {
    float acc = 0.0f;
    for (int l = 0; l < lanes; ++l) acc += lane_sum[l * cols + j];
    return acc;
}

extern "C" __global__ void __launch_bounds__(DQN_BLOCK)
dqn_aux_train(const float* __restrict__ h, const float* __restrict__ p_up,
              const float* __restrict__ fill_mid, const float* __restrict__ post_mid,
              float* __restrict__ w, float* __restrict__ partial,
              unsigned long long* __restrict__ counters, float* __restrict__ isv, int B, int H,
              int lr_idx, int loss_idx, const AgentAxis agent_axis) {
    agent_slice(agent_axis, h, p_up, fill_mid, post_mid, w, partial, counters, isv);
    // column j of (H weights, bias, loss, count); lane l of the block's `lanes` walks rows
    // first + l, first + l + lanes, ... in order; lane 0 then adds the lanes in order
    __shared__ float lane_sum[DQN_BLOCK];
    const int cols = H + 3, lanes = static_cast<int>(blockDim.x) / cols;
    const int j = static_cast<int>(threadIdx.x) % cols, lane = static_cast<int>(threadIdx.x) / cols;
    const int first = blockIdx.x * DQN_AUX_ROWS, last = min(B, first + DQN_AUX_ROWS);
    if (lane < lanes) {
        float acc = 0.0f;
        for (int b = first + lane; b < last; b += lanes) {
            const float up = post_mid[b], before = fill_mid[b];
            if (up == before) continue;
            const float y = up > before ? 1.0f : 0.0f;
            const float p = p_up[b];
            if (j < H) {
                acc += (p - y) * h[static_cast<size_t>(b) * H + j];
            } else if (j == H) {
                acc += p - y;
            } else if (j == H + 1) {
                const float pc = fminf(fmaxf(p, 1e-7f), 1.0f - 1e-7f);
                acc += -(y * logf(pc) + (1.0f - y) * logf(1.0f - pc));
            } else {
                acc += 1.0f;
            }
        }
        lane_sum[threadIdx.x] = acc;
    }
    __syncthreads();
    if (lane == 0) {
        partial[static_cast<size_t>(blockIdx.x) * cols + j] = lanes_total(lane_sum, lanes, cols, j);
    }
    if (!last_block_done(counters + DQN_AUX_DONE)) return;
    // the last block: lane l adds blocks l, l + lanes, ... in order, then lane 0 the lanes in order
    __shared__ float total[DQN_BLOCK];
    if (lane < lanes) {
        float acc = 0.0f;
#pragma unroll 4
        for (int k = lane; k < static_cast<int>(gridDim.x); k += lanes) {
            acc += __ldcg(partial + static_cast<size_t>(k) * cols + j);
        }
        lane_sum[threadIdx.x] = acc;
    }
    __syncthreads();
    if (lane == 0) total[j] = lanes_total(lane_sum, lanes, cols, j);
    if (threadIdx.x == 0) counters[DQN_AUX_DONE] = 0ull;
    __syncthreads();
    const float count = total[H + 2];
    if (count <= 0.0f || lane != 0 || j > H + 1) return;
    const float mean = total[j] / count;
    if (j <= H) {
        w[j] -= isv[lr_idx] * mean;
    } else if (loss_idx >= 0) {
        isv[loss_idx] = mean;
    }
}
