// c51.cu — the distributional (C51) head (DESIGN §7; Bellemare et al. 2017, Rainbow's value
// distribution): Z atoms z_j = v_min + j dz, dz = (v_max - v_min) / (Z - 1) (float32, rounded op
// by op), and per action a softmax over Z logits.
//
// Logits are laid out atom-major, logits[(i Z + j) A + a] for row i, atom j, action a (the
// dueling combination then runs on [M Z, A + 1] rows unchanged). p_i,a = softmax_j logits[i, :, a];
// Q(i, a) = sum_j p_i,a,j z_j. Softmaxes subtract the row's max first; a warp's sums are
// butterflies of shuffles (every lane ends with the same total).
//
// c51_q (a thread per (i, a)): q[i A + a] = Q(i, a), the atoms added in order.
// c51_project (a warp per row i): a* = argmax_a Q_online(i, a) over logits_tp1, each Q as c51_q
//   computes it (first on ties: double-DQN selection by the online net), p_j = p_target(i, a*)_j over logits_target;
//   Tz_j = clamp(r_i + g_i (1 - cut_on_done * done_i) z_j, v_min, v_max), g_i = discount[i] or
//   gamma when discount is NULL; b_j = clamp((Tz_j - v_min) / dz, 0, Z - 1); the projected target
//   m[i Z + k] = sum_j p_j max(0, 1 - |b_j - k|), j in order (Bellemare's eq. 7: an atom that
//   lands between two neighbours splits its mass between them, one that lands on an atom gives it
//   all of its mass).
// c51_loss (a warp per row, blocks of C51_BLOCK threads): with a_i = action[i], log p_j = logits_t[i, j, a_i] - max - log sum exp(...), the cross-entropy
//   loss_i = -sum_j m_ij log p_j; delta[i] = loss_i (the replay's priority);
//   dlogits[i, j, a] = (w_i / M) (p_j S_i - m_ij) for a = a_i (S_i = sum_j m_ij), 0 elsewhere
//   (the gradient of sum_i w_i loss_i / M). The last block to finish (done[0] counts the blocks,
//   reset to 0 by it) writes l_q and its real and synthetic parts into the ISV, with loss_i as in
//   td_loss.cuh, its thread t adding rows t, t + C51_BLOCK, ... in order.
#include "common.cuh"

#include "reduce.cuh"
#include "td_loss.cuh"

#define C51_BLOCK 256       // c51_loss: a warp per row; its last block adds the loss
#define C51_MAX_ATOMS 128   // c51_project keeps a row's p and b in shared memory
#define C51_PROJECT_BLOCK 256
ALPHA_RL_EXPORT(C51_BLOCK);
ALPHA_RL_EXPORT(C51_MAX_ATOMS);
ALPHA_RL_EXPORT(C51_PROJECT_BLOCK);

__device__ __forceinline__ float atom_step(float v_min, float v_max, int Z) {
    return __fdiv_rn(__fsub_rn(v_max, v_min), static_cast<float>(Z - 1));
}

__device__ __forceinline__ float atom(float v_min, float dz, int j) {
    return __fadd_rn(v_min, __fmul_rn(static_cast<float>(j), dz));
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

// The max over atoms of column a of row `row` ([Z, A]), by the warp (lane j reads j, j + 32, ...).
__device__ __forceinline__ float column_max(const float* row, int Z, int A, int a, int lane) {
    float m = -CUDART_INF_F;
    for (int j = lane; j < Z; j += 32) m = fmaxf(m, row[j * A + a]);
    return warp_max(m);
}

// Q of action a of one row ([Z, A] logits): sum_j softmax_j z_j, the atoms in order.
__device__ __forceinline__ float expected_value(const float* row, int Z, int A, int a, float v_min,
                                                float dz) {
    float mx = row[a];
    for (int j = 1; j < Z; ++j) mx = fmaxf(mx, row[j * A + a]);
    float s = 0.0f, sz = 0.0f;
    for (int j = 0; j < Z; ++j) {
        const float p = expf(row[j * A + a] - mx);
        s += p;
        sz += p * atom(v_min, dz, j);
    }
    return sz / s;
}

extern "C" __global__ void c51_q(const float* __restrict__ logits, const float* __restrict__ isv,
                                 float* __restrict__ q, int M, int A, int Z, int support_idx,
                                 const AgentAxis agent_axis) {
    agent_slice(agent_axis, logits, isv, q);
    const int e = global_index_1d();
    if (e >= M * A) return;
    const float v_min = isv[support_idx], v_max = isv[support_idx + 1];
    const int i = e / A, a = e - i * A;
    const float* row = logits + static_cast<size_t>(i) * Z * A;
    q[e] = expected_value(row, Z, A, a, v_min, atom_step(v_min, v_max, Z));
}

extern "C" __global__ void __launch_bounds__(C51_PROJECT_BLOCK)
c51_project(const float* __restrict__ logits_tp1, const float* __restrict__ logits_target,
            const float* __restrict__ reward, const float* __restrict__ done,
            const float* __restrict__ discount, const float* __restrict__ isv,
            float* __restrict__ m, int M, int A, int Z, int gamma_idx, int cut_idx,
            int support_idx, const AgentAxis agent_axis) {
    agent_slice(agent_axis, logits_tp1, logits_target, reward, done, discount, isv, m);
    const float gamma = isv[gamma_idx], v_min = isv[support_idx], v_max = isv[support_idx + 1];
    const bool cut_on_done = isv[cut_idx] != 0.0f;
    constexpr int WARPS = C51_PROJECT_BLOCK / 32;
    __shared__ float shared_p[WARPS][C51_MAX_ATOMS], shared_b[WARPS][C51_MAX_ATOMS];
    const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
    const int i = static_cast<int>(blockIdx.x) * WARPS + warp;
    if (i >= M) return;  // the whole warp
    const float dz = atom_step(v_min, v_max, Z);
    const float* online = logits_tp1 + static_cast<size_t>(i) * Z * A;
    // lane a computes Q(i, a) as c51_q does (the atoms in order), then the warp keeps the
    // largest, the lowest action on ties
    int best = A;
    float best_q = -CUDART_INF_F;
    for (int a = lane; a < A; a += 32) {
        const float qa = expected_value(online, Z, A, a, v_min, dz);
        if (best == A || qa > best_q) best = a, best_q = qa;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float other_q = __shfl_xor_sync(0xffffffffu, best_q, offset);
        const int other = __shfl_xor_sync(0xffffffffu, best, offset);
        if (other != A && (best == A || other_q > best_q || (other_q == best_q && other < best))) {
            best = other, best_q = other_q;
        }
    }
    const float* target = logits_target + static_cast<size_t>(i) * Z * A;
    const float mx = column_max(target, Z, A, best, lane);
    float s = 0.0f;
    for (int j = lane; j < Z; j += 32) s += expf(target[j * A + best] - mx);
    s = warp_sum(s);
    const float g = discount != nullptr ? discount[i] : gamma;
    const float cont = cut_on_done ? __fsub_rn(1.0f, done[i]) : 1.0f;
    const float scale = __fmul_rn(g, cont);
    for (int j = lane; j < Z; j += 32) {
        shared_p[warp][j] = __fdiv_rn(expf(target[j * A + best] - mx), s);
        const float tz = fminf(fmaxf(__fadd_rn(reward[i], __fmul_rn(scale, atom(v_min, dz, j))),
                                     v_min), v_max);
        shared_b[warp][j] = fminf(fmaxf(__fdiv_rn(__fsub_rn(tz, v_min), dz), 0.0f),
                                  static_cast<float>(Z - 1));
    }
    __syncwarp();
    for (int k = lane; k < Z; k += 32) {
        float acc = 0.0f;
        for (int j = 0; j < Z; ++j) {
            const float w = fmaxf(0.0f, __fsub_rn(1.0f, fabsf(__fsub_rn(shared_b[warp][j],
                                                                          static_cast<float>(k)))));
            acc = __fadd_rn(acc, __fmul_rn(shared_p[warp][j], w));
        }
        m[static_cast<size_t>(i) * Z + k] = acc;
    }
}

extern "C" __global__ void __launch_bounds__(C51_BLOCK)
c51_loss(const float* __restrict__ logits_t, const int* __restrict__ action,
         const float* __restrict__ m, const float* __restrict__ weight,
         const uint8_t* __restrict__ synthetic, float* __restrict__ delta,
         float* __restrict__ dlogits, float* __restrict__ isv,
         unsigned long long* __restrict__ done, int M, int A, int Z, int loss_idx, int real_idx,
         int synthetic_idx, int frac_idx, const AgentAxis agent_axis) {
    agent_slice(agent_axis, logits_t, action, m, weight, synthetic, delta, dlogits, isv, done);
    constexpr int WARPS = C51_BLOCK / 32;
    const int lane = static_cast<int>(threadIdx.x) & 31, warp = static_cast<int>(threadIdx.x) >> 5;
    const int i = static_cast<int>(blockIdx.x) * WARPS + warp;
    if (i < M) {
        const int a_i = action[i];
        const float* row = logits_t + static_cast<size_t>(i) * Z * A;
        const float* target = m + static_cast<size_t>(i) * Z;
        const float mx = column_max(row, Z, A, a_i, lane);
        float s = 0.0f;
        for (int j = lane; j < Z; j += 32) s += expf(row[j * A + a_i] - mx);
        const float log_s = logf(warp_sum(s));
        float ce = 0.0f, mass = 0.0f;
        for (int j = lane; j < Z; j += 32) {
            ce -= target[j] * (row[j * A + a_i] - mx - log_s);
            mass += target[j];
        }
        ce = warp_sum(ce);
        mass = warp_sum(mass);
        const float scale = weight[i] / static_cast<float>(M);
        float* out = dlogits + static_cast<size_t>(i) * Z * A;
        for (int j = lane; j < Z; j += 32) {
            const float p = expf(row[j * A + a_i] - mx - log_s);
            for (int a = 0; a < A; ++a) out[j * A + a] = a == a_i ? scale * (p * mass - target[j]) : 0.0f;
        }
        if (lane == 0) delta[i] = ce;
    }
    if (!last_block_done(done)) return;
    // the last block: thread t adds rows t, t + C51_BLOCK, ... in order (as dqn_td does)
    __shared__ float partial[TD_SUMS][C51_BLOCK];
    float acc[TD_SUMS] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int r = threadIdx.x; r < M; r += C51_BLOCK) td_loss_add(acc, synthetic, r, weight[r], __ldcg(delta + r));
    if (threadIdx.x == 0) done[0] = 0ull;
    td_loss_slots<C51_BLOCK>(acc, partial, isv, M, loss_idx, real_idx, synthetic_idx, frac_idx);
}
