// nstep.cu — n-step returns (DESIGN §7; Rainbow's multi-step targets): per env a ring of its
// last n steps, from which the replay receives (h_s, a_s, R_s, h_{t+1}, gamma^k, done) transitions.
//
// nstep_accumulate (a warp per env b, after the env step t and the observation of t + 1): env b's
//   ring has n slots, slot j at ring_h[(j * B + b) * H ..], ring_action[j * B + b],
//   ring_reward[j * B + b]; pos[b] is the slot step t goes into, count[b] how many steps before t
//   the ring holds (< n). Step t (h_t[b], eff_action[b], reward[b]) goes into slot pos[b], so the
//   ring holds held = count[b] + 1 steps, t - held + 1 .. t. The transition of a held step s ends
//   now, after k = t - s + 1 steps: R = r_s + gamma (r_{s+1} + ... + gamma r_t) (Horner from r_t,
//   round-to-nearest, no FMA contraction), discount = gamma^k (k products from 1), state h_s,
//   action a_s, next state h_tp1[b], done = done[b].
//   A boundary — done[b] != 0 (a trade closed: the return is cut at the close) or episode[b] !=
//   episode_seen[b] (step t was its episode's last, so h_tp1 is the next episode's first
//   observation) — empties the ring. At a close every held step is emitted, oldest first. At an
//   episode's end that closes nothing (a truncation: the end of the data or of a session, flat)
//   no transition may reach h_tp1: each held step s < t is emitted ending at t - 1 (k = t - s,
//   R from r_s to r_{t-1}, next state h_t[b], the last state of its episode, done 0) and step t's
//   own transition is dropped, as the env's stored = 0 drops it with n = 1. Otherwise, once
//   held == n, the oldest is emitted (k = n) and n - 1 stay. Env b's emissions go to rows
//   b * n + j (j = 0 the oldest) of the staging arrays out_h_t, out_h_tp1 [B * n * H],
//   out_action, out_reward, out_done, out_discount [B * n] with flags[b * n + j] = 1; its other
//   rows get flag 0 and keep their values. Then pos[b] = (pos[b] + 1) mod n,
//   episode_seen[b] = episode[b].
#include "common.cuh"

#define NSTEP_BLOCK 256  // threads a block: a warp per env
ALPHA_RL_EXPORT(NSTEP_BLOCK);

#define MUL __fmul_rn
#define ADD __fadd_rn

extern "C" __global__ void __launch_bounds__(NSTEP_BLOCK) nstep_accumulate(
    const float* __restrict__ h_t, const float* __restrict__ h_tp1,
    const int* __restrict__ eff_action, const float* __restrict__ reward,
    const float* __restrict__ done, const int* __restrict__ episode,
    const float* __restrict__ isv, float* __restrict__ ring_h, int* __restrict__ ring_action, float* __restrict__ ring_reward,
    int* __restrict__ pos, int* __restrict__ count, int* __restrict__ episode_seen,
    uint8_t* __restrict__ flags, float* __restrict__ out_h_t, float* __restrict__ out_h_tp1,
    int* __restrict__ out_action, float* __restrict__ out_reward, float* __restrict__ out_done,
    float* __restrict__ out_discount, int B, int H, int n, int gamma_idx,
                                                                           const AgentAxis agent_axis) {
    agent_slice(agent_axis, h_t, h_tp1, eff_action, reward, done, episode, isv, ring_h, ring_action,
                ring_reward, pos, count, episode_seen, flags, out_h_t, out_h_tp1, out_action,
                out_reward, out_done, out_discount);
    const float gamma = isv[gamma_idx];
    const int lane = static_cast<int>(threadIdx.x) & 31;
    const int b = static_cast<int>(blockIdx.x) * (NSTEP_BLOCK / 32) +
                  (static_cast<int>(threadIdx.x) >> 5);
    if (b >= B) return;  // the whole warp
    const int p = pos[b];
    const int held = count[b] + 1;
    const bool closed = done[b] != 0.0f, restarted = episode[b] != episode_seen[b];
    const bool boundary = closed || restarted;
    const int cut = restarted && !closed ? 1 : 0;  // a truncation: returns end at t - 1, at h_t
    const int emit = boundary ? held - cut : (held == n ? 1 : 0);
    const size_t ub = static_cast<size_t>(B);
    for (int k = lane; k < H; k += 32) {
        ring_h[(static_cast<size_t>(p) * ub + b) * H + k] = h_t[static_cast<size_t>(b) * H + k];
    }
    // the rows of the emitted steps, oldest first: step j of the held ones is in slot
    // (p - held + 1 + j) mod n
    for (int j = 0; j < emit; ++j) {
        const int slot = (p - held + 1 + j + n) % n;
        const size_t row = static_cast<size_t>(b) * n + j;
        for (int k = lane; k < H; k += 32) {
            out_h_t[row * H + k] = slot == p ? h_t[static_cast<size_t>(b) * H + k]
                                             : ring_h[(static_cast<size_t>(slot) * ub + b) * H + k];
            out_h_tp1[row * H + k] = cut ? h_t[static_cast<size_t>(b) * H + k]
                                         : h_tp1[static_cast<size_t>(b) * H + k];
        }
    }
    if (lane != 0) return;
    const float r_t = reward[b];
    for (int j = 0; j < n; ++j) {
        const size_t row = static_cast<size_t>(b) * n + j;
        flags[row] = j < emit ? 1 : 0;
        if (j >= emit) continue;
        const int steps = held - j - cut;  // k of this transition
        float ret = cut ? ring_reward[static_cast<size_t>((p - 1 + n) % n) * ub + b] : r_t;
        float discount = 1.0f;
        for (int i = steps - 2; i >= 0; --i) {  // r of the earlier steps, newest first
            const int slot = (p - cut - (steps - 1 - i) + 2 * n) % n;
            ret = ADD(ring_reward[static_cast<size_t>(slot) * ub + b], MUL(gamma, ret));
        }
        for (int i = 0; i < steps; ++i) discount = MUL(discount, gamma);
        const int first = (p - held + 1 + j + n) % n;
        out_action[row] =
            first == p ? eff_action[b] : ring_action[static_cast<size_t>(first) * ub + b];
        out_reward[row] = ret;
        out_done[row] = done[b];
        out_discount[row] = discount;
    }
    ring_action[static_cast<size_t>(p) * ub + b] = eff_action[b];
    ring_reward[static_cast<size_t>(p) * ub + b] = r_t;
    count[b] = boundary ? 0 : (held == n ? n - 1 : held);
    pos[b] = (p + 1) % n;
    episode_seen[b] = episode[b];
}
