// perception.cu — the observation h [B, H] of each env (DESIGN §3).
//
// perception_observe, blocks of PERCEPTION_ENVS envs (n = B): one thread per env computes its
//   features into shared memory, then the block's threads share the H outputs of its envs (each
//   output summed over f in order, as before). For env b at tick t = cursor[b], position dir d:
//   features x [F], F = K + 7, each independent of the instrument's price level:
//     x[k]   = (mid_t - mid_{max(t - h_k, s_t)}) / tick / sqrt(h_k)    k < K, h = horizons,
//              s_t = session_first[t]: a return never reaches back across a session break (at a
//              session's first ticks it is over the session's own ticks, as at the data's start)
//     x[K]   = (ask0 - bid0) / tick - 1                                 spread beyond one tick
//     x[K+1] = (bid_sz0 - ask_sz0) / (bid_sz0 + ask_sz0)                level-0 imbalance
//     x[K+2] = (sum bid_sz - sum ask_sz) / (sum bid_sz + sum ask_sz)    all-level imbalance
//     x[K+3] = d
//     x[K+4] = d * (mid_t - entry_px) / tick * inv_pnl_scale            unrealised, ticks
//     x[K+5] = trade_len * inv_time_scale                               time in trade
//     x[K+6] = d * (peak_mid - mid_t) / tick * inv_pnl_scale            distance from the peak
//   (the last three are 0 when flat; an imbalance with zero total size is 0).
//   h[b*H + j] = x[j] when proj_w is NULL (then H == F), else
//   h[b*H + j] = tanh(proj_b[j] + sum_{f<F} proj_w[j*F + f] * x[f]), summed in order of f.
// Arrays: bid_px, ask_px, bid_sz, ask_sz [T*L] f32 (prices as offsets); session_first [T] i32 (per
//   tick, the first tick of its session; 0 without breaks); cursor, pos, trade_len
//   [B] i32; entry_px, peak_mid [B] f32; horizons [K] i32 (>= 1); proj_w [H*F], proj_b [H] f32
//   or both NULL; h [B*H] f32 written.
#include "common.cuh"

#define PERCEPTION_MAX_FEATURES 32
#define PERCEPTION_EXTRA_FEATURES 7  // F = K + 7: spread, two imbalances, direction, PnL, time, gap

#define MUL __fmul_rn
#define ADD __fadd_rn
#define SUB __fsub_rn
#define DIV __fdiv_rn

__device__ __forceinline__ float mid_at(const float* __restrict__ bid_px,
                                        const float* __restrict__ ask_px, int t, int L) {
    return MUL(0.5f, ADD(bid_px[t * L], ask_px[t * L]));
}

__device__ __forceinline__ float imbalance(float bid_size, float ask_size) {
    const float total = ADD(bid_size, ask_size);
    return total > 0.0f ? DIV(SUB(bid_size, ask_size), total) : 0.0f;
}

#define PERCEPTION_ENVS 32      // envs per block
#define PERCEPTION_THREADS 256  // threads per block

ALPHA_RL_EXPORT(PERCEPTION_MAX_FEATURES);
ALPHA_RL_EXPORT(PERCEPTION_EXTRA_FEATURES);
ALPHA_RL_EXPORT(PERCEPTION_ENVS);
ALPHA_RL_EXPORT(PERCEPTION_THREADS);

// The features x [K + 7] of env b (see the header).
__device__ __forceinline__ void perception_features(
    const float* __restrict__ bid_px, const float* __restrict__ ask_px,
    const float* __restrict__ bid_sz, const float* __restrict__ ask_sz, int first_tick, int t,
    int d, int len, float entry, float peak, const int* __restrict__ horizons, int L, int K,
    float tick, float inv_pnl_scale, float inv_time_scale, float* __restrict__ x) {
    const float dir = static_cast<float>(d);
    const float mid = mid_at(bid_px, ask_px, t, L);
    for (int k = 0; k < K; ++k) {
        const int hk = horizons[k];
        const float past = mid_at(bid_px, ask_px, max(t - hk, first_tick), L);
        x[k] = DIV(DIV(SUB(mid, past), tick), sqrtf(static_cast<float>(hk)));
    }
    x[K] = SUB(DIV(SUB(ask_px[t * L], bid_px[t * L]), tick), 1.0f);
    x[K + 1] = imbalance(bid_sz[t * L], ask_sz[t * L]);
    float bid_total = 0.0f, ask_total = 0.0f;
    for (int l = 0; l < L; ++l) {
        bid_total = ADD(bid_total, bid_sz[t * L + l]);
        ask_total = ADD(ask_total, ask_sz[t * L + l]);
    }
    x[K + 2] = imbalance(bid_total, ask_total);
    x[K + 3] = dir;
    const bool in_trade = d != 0;
    x[K + 4] = in_trade ? MUL(DIV(MUL(dir, SUB(mid, entry)), tick), inv_pnl_scale) : 0.0f;
    x[K + 5] = in_trade ? MUL(static_cast<float>(len), inv_time_scale) : 0.0f;
    x[K + 6] = in_trade ? MUL(DIV(MUL(dir, SUB(peak, mid)), tick), inv_pnl_scale) : 0.0f;
}

extern "C" __global__ void __launch_bounds__(PERCEPTION_THREADS) perception_observe(
    const float* __restrict__ bid_px, const float* __restrict__ ask_px,
    const float* __restrict__ bid_sz, const float* __restrict__ ask_sz,
    const int* __restrict__ session_first, const int* __restrict__ cursor,
    const int* __restrict__ pos,
    const int* __restrict__ trade_len, const float* __restrict__ entry_px,
    const float* __restrict__ peak_mid, const int* __restrict__ horizons,
    const float* __restrict__ proj_w, const float* __restrict__ proj_b,
    const float* __restrict__ isv, float* __restrict__ h, int n, int T, int L, int K, int H,
    float tick, int scales_idx, const AgentAxis agent_axis) {
    agent_slice(agent_axis, bid_px, ask_px, bid_sz, ask_sz, session_first, cursor, pos, trade_len,
                entry_px, peak_mid, horizons, proj_w, proj_b, isv, h);
    __shared__ float xs[PERCEPTION_ENVS][PERCEPTION_MAX_FEATURES];
    // the env part's perception numbers: 1 / pnl_scale_ticks, 1 / time_scale_steps
    const float inv_pnl_scale = isv[scales_idx], inv_time_scale = isv[scales_idx + 1];
    const int first = blockIdx.x * PERCEPTION_ENVS;
    const int envs = min(PERCEPTION_ENVS, n - first);
    const int F = K + PERCEPTION_EXTRA_FEATURES;
    if (threadIdx.x < envs) {
        const int b = first + threadIdx.x;
        const int t = cursor[b];
        perception_features(bid_px, ask_px, bid_sz, ask_sz, session_first[t], t, pos[b],
                            trade_len[b], entry_px[b], peak_mid[b], horizons, L, K, tick,
                            inv_pnl_scale, inv_time_scale, xs[threadIdx.x]);
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < envs * H; idx += PERCEPTION_THREADS) {
        const int e = idx / H, j = idx - e * H;
        float v;
        if (proj_w == nullptr) {
            v = xs[e][j];
        } else {
            float acc = proj_b[j];
            for (int f = 0; f < F; ++f) acc = ADD(acc, MUL(proj_w[j * F + f], xs[e][f]));
            v = tanhf(acc);
        }
        h[static_cast<size_t>(first + e) * H + j] = v;
    }
}
