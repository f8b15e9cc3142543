// her.cu — GPU-native bidirectional hindsight experience replay (DESIGN §8).
//
// Per-env state: mid ring [B * HER_RING] and count; entry_mid, peak_mid, dir of the open trade;
// the snapshot of the trade that closed this step (snap_entry, snap_peak, snap_dir, snap_episode);
// last_episode (the env's episode at the previous step). Forward ring of R closed trades (R a
// power of two, R >= B): f_entry, f_exit_step (i64), f_dir (0 = empty), f_actual, f_env,
// f_episode, f_h [R * H]; the trade of ring claim c (claims are numbered in close order by
// ring_state's push counters) lives in slot c mod R. counters [8] u64 (HER_*). ISV slots by
// index: threshold, priority boost, reward scale, lookahead, per-step counts. lot_mult = lot *
// multiplier (USD per price unit).
//
// her_track (one thread per env, after the env step): a close snapshots (entry, peak, dir) and
//   the episode the trade lived in; an open (a flip included) sets entry = peak = the fill-tick
//   mid and dir = sign(position); while in a trade the post-step mid is appended to the ring and
//   the peak moves in the trade's favour (max long, min short); flat: count = 0, dir = 0.
//   The last block advances counters[HER_STEP] (the step number the other kernels read).
// her_inject and her_forward copy the state rows they write with all the block's threads together
// (consecutive threads on consecutive features), as per_push does.
// her_inject (HER_BLOCK threads a block, one per env, after the real push): for a closed trade,
//   peak_pnl = dir * (peak - entry) * lot_mult, actual = rc[b * S + 0]; when push_backward it
//   fires iff peak_pnl > 0 and peak_pnl > threshold * actual and pushes (per_push.cuh) the row
//   state = next state = h_t[b], action = eff_action[b], reward = peak_pnl * reward_scale,
//   done = 1, leaf = boost^alpha * max_leaf, synthetic = 1, and (with a storage discount, n-step
//   returns) discount = gamma: synthetic transitions are one step. The launch's count goes to
//   isv[count_idx] and counters[HER_BACKWARD_TOTAL]. When record_forward, every closed trade
//   also claims the next claim c of the forward ring, in env order, and is written into slot
//   c mod R: entry mid, exit step = the current step, dir, actual PnL, env, episode, h_t[b]
//   (R >= B, so one step's closes never overwrite each other). A slot that still holds a live
//   entry (dir != 0) loses a claim never judged: counters[HER_FORWARD_OVERWRITTEN] counts them.
// her_forward (HER_BLOCK threads a block, at most W of them judging): the live claims are
//   [lo, head) with head the ring's claim count and lo = max(counters[HER_RING_TAIL], head - R)
//   (claims below the tail are judged; older ones are overwritten); it visits the first
//   min(W, head - lo) of them in slot order (those whose slot wrapped past R - 1 first). An
//   entry: empty: skip; age = step - exit; age < lookahead: wait; age > 2 * lookahead or the
//   env's episode changed: expire; otherwise forward_pnl = dir * (post_mid[env] - entry) *
//   lot_mult fires iff > 0 and > threshold * actual, pushing state = next state = the stored h,
//   action = LONG (dir > 0) or SHORT, reward = forward_pnl * reward_scale, done = 1, boosted
//   leaf; expired or evaluated entries are cleared. Of the due entries the counters tell
//   HER_FORWARD_JUDGED (evaluated, fired or not), HER_FORWARD_EXPIRED (age > 2 x lookahead) and
//   HER_FORWARD_ENDED (the env's episode changed), so every claim ever made (the ring's head) is
//   judged, expired, ended, overwritten or still live in the ring. The tail moves to the first visited claim that
//   waits (to lo + the visited count when none waits). Exit steps grow with the claims, so with
//   W = B and a lookahead that does not change, every trade is judged on the step it comes due (a
//   step closes at most B). The count goes to isv[count_idx] and counters[HER_FORWARD_TOTAL].
#include "common.cuh"
#include "env.cuh"
#include "isv.cuh"
#include "per_push.cuh"
#include "reduce.cuh"

#define HER_RING 512
#define HER_BLOCK 256
#define HER_STEP 0
#define HER_BACKWARD_TOTAL 1
#define HER_FORWARD_TOTAL 2
#define HER_TRACK_DONE 3
#define HER_LAUNCH_TOTAL 4
#define HER_RING_TOTAL 5
#define HER_RING_TAIL 6     // forward ring claims below this are judged
#define HER_RING_WAITING 7  // her_forward's scratch: W - the first waiting claim's offset (0: none)
#define HER_FORWARD_JUDGED 8       // ring claims judged (fired or not) inside their window
#define HER_FORWARD_EXPIRED 9      // due claims found past their window (age > 2 x lookahead)
#define HER_FORWARD_ENDED 10       // due claims whose env started another episode meanwhile
#define HER_FORWARD_OVERWRITTEN 11 // claims whose slot was taken before they were judged
#define HER_COUNTERS 12  // u64 words of the counters array

ALPHA_RL_EXPORT(HER_RING);
ALPHA_RL_EXPORT(HER_BLOCK);
ALPHA_RL_EXPORT(HER_STEP);
ALPHA_RL_EXPORT(HER_BACKWARD_TOTAL);
ALPHA_RL_EXPORT(HER_FORWARD_TOTAL);
ALPHA_RL_EXPORT(HER_LAUNCH_TOTAL);
ALPHA_RL_EXPORT(HER_TRACK_DONE);
ALPHA_RL_EXPORT(HER_RING_TOTAL);
ALPHA_RL_EXPORT(HER_RING_TAIL);
ALPHA_RL_EXPORT(HER_RING_WAITING);
ALPHA_RL_EXPORT(HER_FORWARD_JUDGED);
ALPHA_RL_EXPORT(HER_FORWARD_EXPIRED);
ALPHA_RL_EXPORT(HER_FORWARD_ENDED);
ALPHA_RL_EXPORT(HER_FORWARD_OVERWRITTEN);
ALPHA_RL_EXPORT(HER_COUNTERS);

#define MUL __fmul_rn
#define SUB __fsub_rn

// The block's rows: thread r's row src_row of src to row slot of s_h_t (and of s_h_tp1 when not
// NULL), skipped where slot < 0; consecutive threads copy consecutive features of a row
// (coalesced). Every thread of the block must call it, with its own row's source and slot.
__device__ __forceinline__ void her_copy_rows(const float* __restrict__ src, long long src_row,
                                              long long slot, float* __restrict__ s_h_t,
                                              float* __restrict__ s_h_tp1, int H) {
    __shared__ long long s_slot[HER_BLOCK], s_src[HER_BLOCK];
    __syncthreads();  // a previous copy in this kernel may still be reading s_slot
    s_slot[threadIdx.x] = slot;
    s_src[threadIdx.x] = src_row;
    __syncthreads();
    for (int e = threadIdx.x; e < HER_BLOCK * H; e += HER_BLOCK) {
        const int r = e / H, k = e - r * H;
        const long long dst_slot = s_slot[r];
        if (dst_slot < 0) continue;
        const float v = src[static_cast<size_t>(s_src[r]) * H + k];
        const size_t dst = static_cast<size_t>(dst_slot) * H + k;
        s_h_t[dst] = v;
        if (s_h_tp1 != nullptr) s_h_tp1[dst] = v;
    }
}

extern "C" __global__ void her_track(
    const uint8_t* __restrict__ opened, const uint8_t* __restrict__ closed,
    const int* __restrict__ pos, const int* __restrict__ episode,
    const float* __restrict__ fill_mid, const float* __restrict__ post_mid,
    float* __restrict__ mid_ring, int* __restrict__ count, float* __restrict__ entry_mid,
    float* __restrict__ peak_mid, int* __restrict__ dir, float* __restrict__ snap_entry,
    float* __restrict__ snap_peak, int* __restrict__ snap_dir, int* __restrict__ snap_episode,
    int* __restrict__ last_episode, unsigned long long* __restrict__ counters, int B,
                                     const AgentAxis agent_axis) {
    agent_slice(agent_axis, opened, closed, pos, episode, fill_mid, post_mid, mid_ring, count,
                entry_mid, peak_mid, dir, snap_entry, snap_peak, snap_dir, snap_episode,
                last_episode, counters);
    const int b = global_index_1d();
    if (b < B) {
        if (closed[b]) {
            snap_entry[b] = entry_mid[b];
            snap_peak[b] = peak_mid[b];
            snap_dir[b] = dir[b];
            snap_episode[b] = last_episode[b];
        }
        const int p = pos[b];
        if (opened[b]) {
            entry_mid[b] = fill_mid[b];
            peak_mid[b] = fill_mid[b];
            count[b] = 0;
        }
        if (p != 0) {
            const int c = count[b];
            const float mid = post_mid[b];
            mid_ring[static_cast<size_t>(b) * HER_RING + (c & (HER_RING - 1))] = mid;
            count[b] = c + 1;
            peak_mid[b] = p > 0 ? fmaxf(peak_mid[b], mid) : fminf(peak_mid[b], mid);
            dir[b] = p > 0 ? 1 : -1;
        } else {
            count[b] = 0;
            dir[b] = 0;
        }
        last_episode[b] = episode[b];
    }
    if (last_block_done(counters + HER_TRACK_DONE) && threadIdx.x == 0) {
        counters[HER_STEP] += 1ull;
        counters[HER_TRACK_DONE] = 0ull;
    }
}

// A synthetic transition's scalar fields at replay slot `slot` (its rows are copied apart): one
// step and terminal (done = 1, discount gamma), flagged synthetic, with its boosted leaf.
__device__ __forceinline__ void her_write_synthetic(long long slot, int action, float reward,
                                                    int* s_action, float* s_reward, float* s_done,
                                                    uint8_t* s_synthetic, float* s_discount,
                                                    float* leaves, float gamma, float leaf) {
    s_action[slot] = action;
    s_reward[slot] = reward;
    s_done[slot] = 1.0f;
    s_synthetic[slot] = 1;
    if (s_discount != nullptr) s_discount[slot] = gamma;
    leaves[slot] = leaf;
}

// The launch's injections (counted by the claims) into a direction's running total and the ISV.
__device__ __forceinline__ void her_count_launch(unsigned long long* counters, int total_word,
                                                 float* isv, int count_idx) {
    const unsigned long long total = counters[HER_LAUNCH_TOTAL];
    counters[total_word] += total;
    if (count_idx >= 0) isv[count_idx] = static_cast<float>(total);
}

extern "C" __global__ void __launch_bounds__(HER_BLOCK) her_inject(
    const uint8_t* __restrict__ closed, const float* __restrict__ snap_entry,
    const float* __restrict__ snap_peak, const int* __restrict__ snap_dir,
    const int* __restrict__ snap_episode, const float* __restrict__ rc,
    const float* __restrict__ h_t, const int* __restrict__ eff_action,
    const float* __restrict__ max_leaf, float* __restrict__ s_h_t, float* __restrict__ s_h_tp1,
    int* __restrict__ s_action, float* __restrict__ s_reward, float* __restrict__ s_done,
    uint8_t* __restrict__ s_synthetic, float* __restrict__ leaves, float* __restrict__ s_discount,
    unsigned long long* __restrict__ rstate, unsigned long long* __restrict__ rlookback,
    unsigned long long* __restrict__ ring_state, unsigned long long* __restrict__ ring_lookback,
    float* __restrict__ f_entry, long long* __restrict__ f_exit_step, int* __restrict__ f_dir,
    float* __restrict__ f_actual, int* __restrict__ f_env, int* __restrict__ f_episode,
    float* __restrict__ f_h, unsigned long long* __restrict__ counters,
    float* __restrict__ isv, int B, int H, int S, int R, unsigned long long mask, int alpha_idx,
    int gamma_idx, int lot_mult_idx, int threshold_idx, int boost_idx, int scale_idx, int count_idx,
    int backward_idx, int forward_idx, const AgentAxis agent_axis) {
    agent_slice(agent_axis, closed, snap_entry, snap_peak, snap_dir, snap_episode, rc, h_t,
                eff_action, max_leaf, s_h_t, s_h_tp1, s_action, s_reward, s_done, s_synthetic,
                leaves, s_discount, rstate, rlookback, ring_state, ring_lookback, f_entry,
                f_exit_step, f_dir, f_actual, f_env, f_episode, f_h, counters, isv);
    // the other parts' numbers: the replay's alpha, the learner's gamma, the env's lot x multiplier
    const float alpha = isv[alpha_idx], gamma = isv[gamma_idx], lot_mult = isv[lot_mult_idx];
    // the variant, as numbers (a direction whose slot the layout lacks is off)
    const bool push_backward = isv_read(isv, backward_idx, 0.0f) != 0.0f;
    const bool record_forward = isv_read(isv, forward_idx, 0.0f) != 0.0f;
    const int ticket = per_push_ticket(rstate);
    const int row = ticket * HER_BLOCK + static_cast<int>(threadIdx.x);
    const bool was_closed = row < B && closed[row] != 0;
    bool fires = false;
    float peak_pnl = 0.0f;
    if (was_closed && push_backward) {
        const float d = static_cast<float>(snap_dir[row]);
        peak_pnl = MUL(MUL(d, SUB(snap_peak[row], snap_entry[row])), lot_mult);
        const float actual = rc[static_cast<size_t>(row) * S];
        fires = peak_pnl > 0.0f && peak_pnl > MUL(isv[threshold_idx], actual);
    }
    const long long slot = per_push_claim(rstate, rlookback, ticket, gridDim.x, fires, mask,
                                          counters + HER_LAUNCH_TOTAL);
    her_copy_rows(h_t, row, slot, s_h_t, s_h_tp1, H);
    if (slot >= 0) {
        her_write_synthetic(slot, eff_action[row], MUL(peak_pnl, isv[scale_idx]), s_action,
                            s_reward, s_done, s_synthetic, s_discount, leaves, gamma,
                            per_new_leaf(max_leaf, isv[boost_idx], alpha));
    }
    if (record_forward) {
        const long long claim = per_push_claim(ring_state, ring_lookback, ticket, gridDim.x,
                                               was_closed, ~0ull, counters + HER_RING_TOTAL);
        const long long s = claim >= 0 ? claim & static_cast<long long>(R - 1) : -1;
        // a live entry in the slot (f_dir != 0: her_forward clears what it judged) is a claim
        // lost before its judgement; R >= B, so no two claims of this launch share a slot
        const int lost = __syncthreads_count(s >= 0 && f_dir[s] != 0);
        if (threadIdx.x == 0 && lost > 0) {
            atomicAdd(counters + HER_FORWARD_OVERWRITTEN, static_cast<unsigned long long>(lost));
        }
        her_copy_rows(h_t, row, s, f_h, nullptr, H);
        if (s >= 0) {
            f_entry[s] = snap_entry[row];
            f_exit_step[s] = static_cast<long long>(counters[HER_STEP]);
            f_dir[s] = snap_dir[row];
            f_actual[s] = rc[static_cast<size_t>(row) * S];
            f_env[s] = row;
            f_episode[s] = snap_episode[row];
        }
    }
    if (ticket == static_cast<int>(gridDim.x) - 1 && threadIdx.x == 0) {
        her_count_launch(counters, HER_BACKWARD_TOTAL, isv, count_idx);
    }
}

extern "C" __global__ void __launch_bounds__(HER_BLOCK) her_forward(
    const float* __restrict__ f_entry, const long long* __restrict__ f_exit_step,
    const float* __restrict__ f_actual, const int* __restrict__ f_env,
    const int* __restrict__ f_episode, const float* __restrict__ f_h,
    const int* __restrict__ episode, const float* __restrict__ post_mid,
    const float* __restrict__ max_leaf, const unsigned long long* __restrict__ ring_state,
    int* __restrict__ f_dir, float* __restrict__ s_h_t, float* __restrict__ s_h_tp1,
    int* __restrict__ s_action, float* __restrict__ s_reward, float* __restrict__ s_done,
    uint8_t* __restrict__ s_synthetic, float* __restrict__ leaves, float* __restrict__ s_discount,
    unsigned long long* __restrict__ rstate, unsigned long long* __restrict__ rlookback,
    unsigned long long* __restrict__ counters, float* __restrict__ isv, int W, int R, int H,
    unsigned long long mask, int alpha_idx, int gamma_idx, int lot_mult_idx, int threshold_idx,
    int boost_idx, int scale_idx, int lookahead_idx, int count_idx, const AgentAxis agent_axis) {
    agent_slice(agent_axis, f_entry, f_exit_step, f_actual, f_env, f_episode, f_h, episode,
                post_mid, max_leaf, ring_state, f_dir, s_h_t, s_h_tp1, s_action, s_reward, s_done,
                s_synthetic, leaves, s_discount, rstate, rlookback, counters, isv);
    __shared__ unsigned long long s_waiting;
    const float alpha = isv[alpha_idx], gamma = isv[gamma_idx], lot_mult = isv[lot_mult_idx];
    const int ticket = per_push_ticket(rstate);
    const int i = ticket * HER_BLOCK + static_cast<int>(threadIdx.x);
    // every block reads the tail before the last one moves it (it waits for all of them)
    const long long head = static_cast<long long>(ring_state[PER_HEAD]);
    const long long lo = max(static_cast<long long>(counters[HER_RING_TAIL]), head - R);
    const long long visited = min(static_cast<long long>(W), head - lo);
    const long long wrap_at = (lo / R + 1) * R;  // the first claim after lo in slot 0
    const long long wrapped = max(0ll, lo + visited - wrap_at);
    const long long claim = i < wrapped ? wrap_at + i : lo + i - wrapped;
    const int s = static_cast<int>(claim & static_cast<long long>(R - 1));
    const int d = i < visited ? f_dir[s] : 0;
    bool fires = false, clear = false, judged = false, expired = false, ended = false;
    float forward_pnl = 0.0f;
    if (threadIdx.x == 0) s_waiting = 0ull;
    __syncthreads();
    if (d != 0) {
        const long long age = static_cast<long long>(counters[HER_STEP]) - f_exit_step[s];
        const long long lookahead = static_cast<long long>(isv[lookahead_idx]);
        const int env = f_env[s];
        if (age >= lookahead) {
            clear = true;
            expired = age > 2 * lookahead;
            ended = !expired && episode[env] != f_episode[s];
            judged = !expired && !ended;
            if (judged) {
                forward_pnl = MUL(MUL(static_cast<float>(d), SUB(post_mid[env], f_entry[s])), lot_mult);
                fires = forward_pnl > 0.0f && forward_pnl > MUL(isv[threshold_idx], f_actual[s]);
            }
        } else {
            atomicMax(&s_waiting, static_cast<unsigned long long>(W - (claim - lo)));
        }
    }
    const int n_judged = __syncthreads_count(judged);  // also the barrier after s_waiting's max
    const int n_expired = __syncthreads_count(expired);
    const int n_ended = __syncthreads_count(ended);
    if (threadIdx.x == 0) {
        if (n_judged > 0) atomicAdd(counters + HER_FORWARD_JUDGED, static_cast<unsigned long long>(n_judged));
        if (n_expired > 0) atomicAdd(counters + HER_FORWARD_EXPIRED, static_cast<unsigned long long>(n_expired));
        if (n_ended > 0) atomicAdd(counters + HER_FORWARD_ENDED, static_cast<unsigned long long>(n_ended));
        if (s_waiting != 0ull) atomicMax(counters + HER_RING_WAITING, s_waiting);
        __threadfence();  // before this block's count is published by the claim below
    }
    const long long slot = per_push_claim(rstate, rlookback, ticket, gridDim.x, fires, mask,
                                          counters + HER_LAUNCH_TOTAL);
    her_copy_rows(f_h, s, slot, s_h_t, s_h_tp1, H);
    if (slot >= 0) {
        her_write_synthetic(slot, d > 0 ? ACTION_LONG : ACTION_SHORT,
                            MUL(forward_pnl, isv[scale_idx]), s_action, s_reward, s_done,
                            s_synthetic, s_discount, leaves, gamma,
                            per_new_leaf(max_leaf, isv[boost_idx], alpha));
    }
    if (clear) f_dir[s] = 0;
    if (ticket == static_cast<int>(gridDim.x) - 1 && threadIdx.x == 0) {
        // every other block has published its count, so its waiting claim is in by now
        her_count_launch(counters, HER_FORWARD_TOTAL, isv, count_idx);
        const long long waiting = static_cast<long long>(atomicExch(counters + HER_RING_WAITING, 0ull));
        counters[HER_RING_TAIL] = static_cast<unsigned long long>(lo + min(W - waiting, visited));
    }
}
