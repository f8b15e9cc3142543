// experience.cu — one step of B trading environments; built once per layout (-DRC_STRIDE=6|7).
//
// experience_env_step, one thread per env b (n = B), env at tick t = cursor[b], position d:
//   target = direction of action[b] (FLAT/LONG/SHORT -> 0/+1/-1), but the position d is kept
//   (target = d) between decisions, at ticks with (tick0 + t) % interval != 0 (tick0: row 0's
//   tick in the source series, so every slice of one series decides at the same ticks), and
//   while a trade has been held fewer than min_hold steps (d != 0, trade_len < min_hold): the
//   env's trading rules, interval and min_hold at isv[trading_idx + 0, 1] (ENV_TRADING; 1 and 0
//   with a negative trading_idx).
//   On the episode's last step (t + 1 >= session_last[t]: the next tick ends the data or the
//   trading session, a time gap follows it) the target is forced to 0 whatever the rules: the
//   forced close is a normal trade close. eff_action is the target's action.
//   If target != d, trades at the touch of tick t: a close of d (sell at bid, buy at ask) then,
//   if target != 0, an open of target (buy at ask, sell at bid). A flip is close + open.
//   Components (USD), rc[b*RC_STRIDE + c], zero unless stated:
//     c0 pnl_close = d * (exit - entry_px) * lot_mult                      on a close
//     c1 mtm       = target * (mid_{t+1} - ref) * lot_mult, ref = entry_px on the opening step,
//                    else mid_t                                              while in a trade
//     c2 cost      = -fee * lot * fills (1 per open or close, 2 on a flip)
//     c3 opp_cost  = -kappa * |mid_{t+1} - mid_t| * lot_mult                 when flat after
//     c4 inventory = -lambda * lot                                           while in a trade
//     c5 drawdown  = -rho * (d * (peak_mid - entry_px) * lot_mult - c0)       on a close
//     c6 aux_align = scale_b * max(0, aux * d) * max(0, c0), aux = 2 * aux_prob[b] - 1,
//                    stride 7 only; 0 when aux_prob or isv is NULL or scale_b == 0
//   reward_raw = sum_c w_c * rc_c (w_0..5 at isv[w_idx..], w_6 at isv[w_aux_idx]);
//   reward = reward_raw * isv[scale_idx]; done = 1 exactly when a trade closed. stored = 0 on
//   the last step of an episode that closes nothing (flat at the end of the data or a session):
//   its next state is the new episode's first, no state of its own, so the transition is not
//   stored (stored = 1 otherwise; a close's done = 1 bootstraps from nothing).
//   A NULL isv reads as unit weights and scale, no penalties, beta off.
//   After the step: peak_mid moves in the trade's favour with mid_{t+1}, trade_len counts steps
//   in the trade, cursor = t + 1, or on the last step a new episode at a seeded start tick:
//   starts[k], k uniform in [0, n_starts) (env_start_index).
//   Per closed trade the stat_* accumulators add 1, realised c0, available
//   d * (peak_mid - entry_mid) * lot_mult (>= 0: the peak starts at the entry mid) and duration.
//   Accounting uses round-to-nearest operations without FMA contraction, in the order written,
//   so the NumPy oracle reproduces it exactly.
// Arrays ([T*L] row-major by tick, level; [B] per env):
//   bid_px, ask_px [T*L] f32 price offsets; session_last [T] i32 (per tick the last tick of its
//   session, T - 1 without sessions); starts [n_starts] i32 (the ticks an episode may start at:
//   at least the perception history in, not a session's last two ticks);
//   action [B] i32; aux_prob [B] f32 or NULL;
//   isv [isv_size] f32 or NULL;
//   state (read and written): cursor, pos, trade_len, episode [B] i32; entry_px, entry_mid,
//   peak_mid [B] f32;
//   written: rc [B*RC_STRIDE] f32; reward_raw, reward, done [B] f32; opened, closed, stored [B]
//   u8;
//   prev_dir, closed_dir, eff_action [B] i32; fill_mid (mid_t), post_mid (mid_{t+1}) [B] f32;
//   accumulated: stat_trades, stat_realised, stat_available, stat_duration [B] f32.
#include "common.cuh"
#include "env.cuh"
#include "isv.cuh"
#include "reward_layout.cuh"

#define MUL __fmul_rn
#define ADD __fadd_rn
#define SUB __fsub_rn

struct Prices {
    float bid, ask, mid;
};

__device__ __forceinline__ Prices touch(const float* __restrict__ bid_px,
                                        const float* __restrict__ ask_px, int t, int L) {
    Prices p;
    p.bid = bid_px[t * L];
    p.ask = ask_px[t * L];
    p.mid = MUL(0.5f, ADD(p.bid, p.ask));
    return p;
}

extern "C" __global__ void experience_env_step(
    const float* __restrict__ bid_px, const float* __restrict__ ask_px,
    const int* __restrict__ session_last, const int* __restrict__ starts,
    const int* __restrict__ action, const float* __restrict__ aux_prob,
    const float* __restrict__ isv, const unsigned long long* __restrict__ run_seed,
    int* __restrict__ cursor, int* __restrict__ pos,
    int* __restrict__ trade_len, int* __restrict__ episode, float* __restrict__ entry_px,
    float* __restrict__ entry_mid, float* __restrict__ peak_mid, float* __restrict__ rc,
    float* __restrict__ reward_raw, float* __restrict__ reward, float* __restrict__ done,
    uint8_t* __restrict__ opened, uint8_t* __restrict__ closed, uint8_t* __restrict__ stored,
    int* __restrict__ prev_dir,
    int* __restrict__ closed_dir, int* __restrict__ eff_action, float* __restrict__ fill_mid,
    float* __restrict__ post_mid, float* __restrict__ stat_trades,
    float* __restrict__ stat_realised, float* __restrict__ stat_available,
    float* __restrict__ stat_duration, int n, int T, int L, int tick0, int costs_idx,
    int trading_idx,
    int w_idx, int scale_idx, int kappa_idx, int lambda_idx, int rho_idx, int w_aux_idx,
    int beta_scale_idx, int n_starts, const AgentAxis agent_axis) {
    agent_slice(agent_axis, bid_px, ask_px, session_last, starts, action, aux_prob, isv, run_seed,
                cursor, pos, trade_len, episode, entry_px, entry_mid, peak_mid, rc, reward_raw,
                reward, done, opened, closed, stored, prev_dir, closed_dir, eff_action, fill_mid,
                post_mid, stat_trades, stat_realised, stat_available, stat_duration);
    const unsigned long long seed = run_seed[0];  // the agent's own
    const int b = global_index_1d();
    if (b >= n) return;
    // the env part's numbers (ENV_COSTS): lot, lot x multiplier, fee per lot
    const float lot = isv[costs_idx], lot_mult = isv[costs_idx + 1], fee = isv[costs_idx + 2];

    // the env's trading rules (ENV_TRADING): decide every `interval` ticks, hold `min_hold` steps
    const bool rules = trading_idx >= 0;  // absent: every tick, no minimum
    const int interval = rules ? static_cast<int>(isv[trading_idx]) : 1;
    const int min_hold = rules ? static_cast<int>(isv[trading_idx + 1]) : 0;

    const int t = cursor[b];
    const int d = pos[b];
    const bool last = t + 1 >= session_last[t];
    const bool holds = (tick0 + t) % interval != 0 || (d != 0 && trade_len[b] < min_hold);
    const int target = last ? 0 : (holds ? d : action_direction(action[b]));
    const Prices now = touch(bid_px, ask_px, t, L);
    const Prices next = touch(bid_px, ask_px, t + 1, L);

    float c[RC_STRIDE];
#pragma unroll
    for (int k = 0; k < RC_STRIDE; ++k) c[k] = 0.0f;
    float fills = 0.0f;
    bool was_closed = false, was_opened = false;
    float e_px = entry_px[b], e_mid = entry_mid[b], peak = peak_mid[b];
    int len = trade_len[b];

    if (target != d && d != 0) {  // close the open trade at the touch of tick t
        const float dir = static_cast<float>(d);
        const float exit = d > 0 ? now.bid : now.ask;
        const float pnl = MUL(MUL(dir, SUB(exit, e_px)), lot_mult);
        const float peak_unrealised = MUL(MUL(dir, SUB(peak, e_px)), lot_mult);
        const float available = MUL(MUL(dir, SUB(peak, e_mid)), lot_mult);
        c[RC_PNL_CLOSE] = pnl;
        c[RC_DRAWDOWN] = -MUL(isv_read(isv, rho_idx, 0.0f), SUB(peak_unrealised, pnl));
#if RC_STRIDE == 7
        if (aux_prob != nullptr && isv != nullptr && beta_scale_idx >= 0) {
            const float scale_beta = isv[beta_scale_idx];
            if (scale_beta != 0.0f) {
                const float aux = SUB(MUL(2.0f, aux_prob[b]), 1.0f);
                c[RC_AUX_ALIGN] =
                    MUL(MUL(scale_beta, fmaxf(0.0f, MUL(aux, dir))), fmaxf(0.0f, pnl));
            }
        }
#endif
        stat_trades[b] = ADD(stat_trades[b], 1.0f);
        stat_realised[b] = ADD(stat_realised[b], pnl);
        stat_available[b] = ADD(stat_available[b], available);
        stat_duration[b] = ADD(stat_duration[b], static_cast<float>(len));
        fills = ADD(fills, 1.0f);
        was_closed = true;
    }
    if (target != d && target != 0) {  // open the target position at the touch of tick t
        e_px = target > 0 ? now.ask : now.bid;
        e_mid = now.mid;
        peak = now.mid;
        len = 0;
        fills = ADD(fills, 1.0f);
        was_opened = true;
    }
    c[RC_COST] = -MUL(MUL(fee, lot), fills);
    if (target != 0) {
        const float dir = static_cast<float>(target);
        const float ref = was_opened ? e_px : now.mid;
        c[RC_MTM] = MUL(MUL(dir, SUB(next.mid, ref)), lot_mult);
        c[RC_INVENTORY] = -MUL(isv_read(isv, lambda_idx, 0.0f), lot);
        peak = target > 0 ? fmaxf(peak, next.mid) : fminf(peak, next.mid);
        len += 1;
    } else {
        c[RC_OPP_COST] =
            -MUL(MUL(isv_read(isv, kappa_idx, 0.0f), fabsf(SUB(next.mid, now.mid))), lot_mult);
    }

    float raw = 0.0f;
#pragma unroll
    for (int k = 0; k < RC_CORE; ++k) raw = ADD(raw, MUL(isv_read(isv, w_idx + k, 1.0f), c[k]));
#if RC_STRIDE == 7
    raw = ADD(raw, MUL(isv_read(isv, w_aux_idx, 1.0f), c[RC_AUX_ALIGN]));
#endif
#pragma unroll
    for (int k = 0; k < RC_STRIDE; ++k) rc[rc_offset(b, k)] = c[k];
    reward_raw[b] = raw;
    reward[b] = MUL(raw, isv_read(isv, scale_idx, 1.0f));
    done[b] = was_closed ? 1.0f : 0.0f;
    opened[b] = was_opened ? 1 : 0;
    closed[b] = was_closed ? 1 : 0;
    stored[b] = last && !was_closed ? 0 : 1;
    prev_dir[b] = d;
    closed_dir[b] = was_closed ? d : 0;
    eff_action[b] = direction_action(target);
    fill_mid[b] = now.mid;
    post_mid[b] = next.mid;

    if (last) {  // new episode at a fresh offset, flat
        const int ep = episode[b] + 1;
        episode[b] = ep;
        cursor[b] = starts[env_start_index(seed, b, ep, n_starts)];
        len = 0;
    } else {
        cursor[b] = t + 1;
    }
    pos[b] = target;
    trade_len[b] = target != 0 ? len : 0;
    entry_px[b] = e_px;
    entry_mid[b] = e_mid;
    peak_mid[b] = peak;
}
