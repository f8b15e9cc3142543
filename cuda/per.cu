// per.cu — GPU prioritized experience replay (DESIGN §6): push, sum-tree rebuild, stratified
// sampling with importance weights, priority update. Capacity N is a power of two.
//
// Storage: h_t, h_tp1 [N*H] f32; action [N] i32; reward, done [N] f32; synthetic [N] u8;
//   discount [N] f32 (NULL but with n-step returns: the bootstrap discount gamma^k of the slot);
//   leaves [N] f32 = priority^alpha of each slot (0 for slots never written);
//   tree: the internal levels of the sum tree, fan-out PER_FANOUT, concatenated; level l has
//   ceil(size_{l-1} / PER_FANOUT) entries and the top level one (the total);
//   tree_max: the same shape for maxima; its top entry is max_leaf, the largest leaf of the
//   current contents (recomputed by every rebuild, raised by updates in between);
//   layout [1 + 2 * levels] i32 = {levels, offset_1, size_1, offset_2, size_2, ...};
//   state [PER_STATE_WORDS] u64, lookback [max push blocks] u64: see per_push.cuh.
//
// per_push (PER_PUSH_BLOCK threads a block, ceil(n / PER_PUSH_BLOCK) blocks; a block's rows are
//   copied by all its threads together, consecutive threads on consecutive floats): row r < n is
//   pushed iff flags is NULL or flags[r] != 0, into slot (head + pushed rows before r) mod N;
//   its leaf is priority[r]^alpha, or max_leaf (1 when that is 0) when priority is NULL; with a
//   storage discount (not NULL) its discount is discount[r]. slot_out[r] = the slot or -1 (when slot_out is not NULL).
// per_tree_reduce (one block of PER_REDUCE_BLOCK threads per output): out[j] = the sum (and the
//   max) of in[j*F .. j*F+F) in a fixed order: thread t adds children t, t+256, t+512, t+768 to
//   0 in turn, then a shared-memory tree halves 256 -> 1. Launched once per level.
// per_sample (one warp per sample, PER_SAMPLE_BLOCK threads a block): sample i < M draws
//   U = rng_uniform(seed, PER stream, epoch * M + i), u = (i + U) / M * total and descends: at
//   each level the warp sums 32 children per lane in order, scans the lane sums (Hillis-Steele),
//   takes the first lane with u < its inclusive sum and a positive sum, then the first positive
//   child in that lane with u < the running sum (the last positive child when rounding leaves
//   none), and continues with u minus the running sum before that child. P_i = leaf / total.
//   size == 0: index -1, weight 0, state[PER_STATUS] |= 1. total == 0: stratified uniform
//   index floor((i + U) / M * size), P = 1 / size. The last block to finish sets
//   weight_i = (size P_i)^-beta / max_j (size P_j)^-beta, beta = min(1, beta0 + (1 - beta0) *
//   epoch / anneal), writes beta to isv[beta_idx], and advances the epoch.
// per_update (one block of PER_UPDATE_BLOCK threads, M <= PER_MAX_BATCH): for each index >= 0,
//   leaves[index] = (|delta| + eps)^alpha; an index repeated in the batch takes the value of its
//   LAST occurrence; max_leaf is raised to the largest new value.
#include "common.cuh"
#include "per_push.cuh"
#include "reduce.cuh"
#include "rng.cuh"

#define PER_FANOUT 1024
#define PER_PUSH_BLOCK 256
#define PER_REDUCE_BLOCK 256
#define PER_SAMPLE_BLOCK 256
#define PER_UPDATE_BLOCK 1024
#define PER_MAX_BATCH 4096

ALPHA_RL_EXPORT(PER_FANOUT);
ALPHA_RL_EXPORT(PER_PUSH_BLOCK);
ALPHA_RL_EXPORT(PER_REDUCE_BLOCK);
ALPHA_RL_EXPORT(PER_SAMPLE_BLOCK);
ALPHA_RL_EXPORT(PER_UPDATE_BLOCK);
ALPHA_RL_EXPORT(PER_MAX_BATCH);
ALPHA_RL_EXPORT(PER_HEAD);
ALPHA_RL_EXPORT(PER_TAG);
ALPHA_RL_EXPORT(PER_TICKET);
ALPHA_RL_EXPORT(PER_SAMPLE_EPOCH);
ALPHA_RL_EXPORT(PER_SAMPLE_DONE);
ALPHA_RL_EXPORT(PER_STATUS);
ALPHA_RL_EXPORT(PER_STATE_WORDS);
ALPHA_RL_EXPORT(PER_STATUS_EMPTY_SAMPLE);

#define ADD __fadd_rn
#define MUL __fmul_rn
#define SUB __fsub_rn
#define DIV __fdiv_rn

extern "C" __global__ void __launch_bounds__(PER_PUSH_BLOCK)
per_push(const uint8_t* __restrict__ flags, const float* __restrict__ h_t,
         const float* __restrict__ h_tp1, const int* __restrict__ action,
         const float* __restrict__ reward, const float* __restrict__ done,
         const float* __restrict__ priority, const float* __restrict__ discount,
         const float* __restrict__ max_leaf, const float* __restrict__ isv,
         float* __restrict__ s_h_t,
         float* __restrict__ s_h_tp1, int* __restrict__ s_action, float* __restrict__ s_reward,
         float* __restrict__ s_done, uint8_t* __restrict__ s_synthetic,
         float* __restrict__ leaves, float* __restrict__ s_discount,
         int* __restrict__ slot_out, unsigned long long* __restrict__ state,
         unsigned long long* __restrict__ lookback, int n, int H, unsigned long long mask,
         int alpha_idx, int synthetic, const AgentAxis agent_axis) {
    agent_slice(agent_axis, flags, h_t, h_tp1, action, reward, done, priority, discount, max_leaf,
                isv, s_h_t, s_h_tp1, s_action, s_reward, s_done, s_synthetic, leaves, s_discount,
                slot_out, state, lookback);
    __shared__ long long s_slot[PER_PUSH_BLOCK];
    const float alpha = isv[alpha_idx];
    const int ticket = per_push_ticket(state);
    const int first_row = ticket * PER_PUSH_BLOCK;
    const int row = first_row + static_cast<int>(threadIdx.x);
    const bool flag = row < n && (flags == nullptr || flags[row] != 0);
    const long long slot = per_push_claim(state, lookback, ticket, gridDim.x, flag, mask);
    s_slot[threadIdx.x] = slot;
    if (row < n && slot_out != nullptr) slot_out[row] = static_cast<int>(slot);
    __syncthreads();
    const int rows = min(PER_PUSH_BLOCK, n - first_row);
    for (int e = threadIdx.x; e < rows * H; e += PER_PUSH_BLOCK) {  // coalesced row copies
        const int r = e / H, k = e - r * H;
        const long long dst_slot = s_slot[r];
        if (dst_slot < 0) continue;
        const size_t src = static_cast<size_t>(first_row + r) * H + k;
        const size_t dst = static_cast<size_t>(dst_slot) * H + k;
        s_h_t[dst] = h_t[src];
        s_h_tp1[dst] = h_tp1[src];
    }
    if (slot < 0) return;
    s_action[slot] = action[row];
    s_reward[slot] = reward[row];
    s_done[slot] = done[row];
    s_synthetic[slot] = synthetic ? 1 : 0;
    if (s_discount != nullptr) s_discount[slot] = discount[row];
    leaves[slot] = priority != nullptr ? powf(priority[row], alpha) : per_new_leaf(max_leaf, 1.0f, alpha);
}

extern "C" __global__ void __launch_bounds__(PER_REDUCE_BLOCK)
per_tree_reduce(const float* __restrict__ in_sum, const float* __restrict__ in_max,
                float* __restrict__ out_sum, float* __restrict__ out_max, int n_in, int n_out,
                const AgentAxis agent_axis) {
    agent_slice(agent_axis, in_sum, in_max, out_sum, out_max);
    __shared__ float s_sum[PER_REDUCE_BLOCK], s_max[PER_REDUCE_BLOCK];
    const int j = blockIdx.x, tid = threadIdx.x;
    if (j >= n_out) return;
    const float* __restrict__ maxima = in_max != nullptr ? in_max : in_sum;
    float sum = 0.0f, mx = 0.0f;
#pragma unroll
    for (int k = 0; k < PER_FANOUT / PER_REDUCE_BLOCK; ++k) {
        const int c = j * PER_FANOUT + k * PER_REDUCE_BLOCK + tid;
        if (c < n_in) {
            sum = ADD(sum, in_sum[c]);
            mx = fmaxf(mx, maxima[c]);
        }
    }
    s_sum[tid] = sum;
    s_max[tid] = mx;
    __syncthreads();
    for (int width = PER_REDUCE_BLOCK / 2; width > 0; width >>= 1) {
        if (tid < width) {
            s_sum[tid] = ADD(s_sum[tid], s_sum[tid + width]);
            s_max[tid] = fmaxf(s_max[tid], s_max[tid + width]);
        }
        __syncthreads();
    }
    if (tid == 0) {
        out_sum[j] = s_sum[0];
        out_max[j] = s_max[0];
    }
}

// Child of `node` that u falls into, among children[node*F ...) (n_child entries in all), and the
// running sum before it. Every lane of the warp returns the same answer.
__device__ __forceinline__ int per_descend(const float* __restrict__ children, int n_child,
                                           int node, float u, float* before) {
    const int lane = threadIdx.x & 31;
    const int first = node * PER_FANOUT + lane * 32;
    float lane_sum = 0.0f;
    for (int j = 0; j < 32; ++j) {
        const int c = first + j;
        lane_sum = ADD(lane_sum, c < n_child ? children[c] : 0.0f);
    }
    float inclusive = lane_sum;
#pragma unroll
    for (int offset = 1; offset < 32; offset <<= 1) {
        const float t = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive = ADD(t, inclusive);
    }
    float exclusive = __shfl_up_sync(0xffffffffu, inclusive, 1);
    if (lane == 0) exclusive = 0.0f;
    const unsigned hit = __ballot_sync(0xffffffffu, u < inclusive && lane_sum > 0.0f);
    const unsigned positive = __ballot_sync(0xffffffffu, lane_sum > 0.0f);
    const int chosen = hit != 0 ? __ffs(hit) - 1 : 31 - __clz(positive);
    const float base = __shfl_sync(0xffffffffu, exclusive, chosen);
    const int start = node * PER_FANOUT + chosen * 32;
    float run = base, pick_before = 0.0f, last_before = 0.0f;
    int pick = -1, last = -1;
    for (int j = 0; j < 32; ++j) {
        const int c = start + j;
        const float v = c < n_child ? children[c] : 0.0f;
        const float prev = run;
        run = ADD(run, v);
        if (v > 0.0f) {
            last = j;
            last_before = prev;
            if (pick < 0 && u < run) {
                pick = j;
                pick_before = prev;
            }
        }
    }
    if (pick < 0) {
        pick = last;
        pick_before = last_before;
    }
    *before = pick_before;
    return start + pick;
}

extern "C" __global__ void __launch_bounds__(PER_SAMPLE_BLOCK)
per_sample(const float* __restrict__ leaves, const float* __restrict__ tree,
           const int* __restrict__ layout, const unsigned long long* __restrict__ run_seed,
           int* __restrict__ indices, float* __restrict__ weights,
           float* __restrict__ probs, unsigned long long* __restrict__ state, float* __restrict__ isv,
           int M, int N, int schedule_idx, int beta_idx, const AgentAxis agent_axis) {
    agent_slice(agent_axis, leaves, tree, layout, run_seed, indices, weights, probs, state, isv);
    const unsigned long long seed = run_seed[0];  // the agent's own
    __shared__ float s_min[PER_SAMPLE_BLOCK];
    const float beta0 = isv[schedule_idx], anneal = isv[schedule_idx + 1];
    const int lane = threadIdx.x & 31;
    const int i = blockIdx.x * (PER_SAMPLE_BLOCK / 32) + (threadIdx.x >> 5);
    volatile unsigned long long* vstate = state;
    const unsigned long long head = vstate[PER_HEAD];
    const unsigned long long epoch = vstate[PER_SAMPLE_EPOCH];
    const int size = head < static_cast<unsigned long long>(N) ? static_cast<int>(head) : N;
    const int levels = layout[0];
    const float total = tree[layout[2 * levels - 1]];
    if (i < M) {
        const float U = rng_uniform(seed, RNG_STREAM_PER, epoch * static_cast<unsigned long long>(M) + i);
        const float frac = DIV(ADD(static_cast<float>(i), U), static_cast<float>(M));
        int idx = -1;
        float p = 0.0f;
        if (size > 0 && !(total > 0.0f)) {
            idx = min(size - 1, static_cast<int>(MUL(frac, static_cast<float>(size))));
            p = DIV(1.0f, static_cast<float>(size));
        } else if (size > 0) {
            float u = MUL(frac, total), before;
            int node = 0;
            for (int level = levels; level >= 1; --level) {
                const bool to_leaves = level == 1;
                const float* children = to_leaves ? leaves : tree + layout[2 * level - 3];
                const int n_child = to_leaves ? N : layout[2 * level - 2];
                node = per_descend(children, n_child, node, u, &before);
                u = SUB(u, before);
            }
            idx = node;
            p = DIV(leaves[idx], total);
        }
        if (lane == 0) {
            indices[i] = idx;
            probs[i] = p;
        }
    }
    if (!last_block_done(state + PER_SAMPLE_DONE)) return;
    const float beta = fminf(1.0f, ADD(beta0, MUL(SUB(1.0f, beta0),
                                                  DIV(static_cast<float>(epoch), anneal))));
    float pmin = 3.402823466e38f;
    for (int k = threadIdx.x; k < M; k += PER_SAMPLE_BLOCK) pmin = fminf(pmin, __ldcg(probs + k));
    s_min[threadIdx.x] = pmin;
    __syncthreads();
    for (int width = PER_SAMPLE_BLOCK / 2; width > 0; width >>= 1) {
        if (threadIdx.x < width) s_min[threadIdx.x] = fminf(s_min[threadIdx.x], s_min[threadIdx.x + width]);
        __syncthreads();
    }
    const float w_max = powf(MUL(static_cast<float>(size), s_min[0]), -beta);
    for (int k = threadIdx.x; k < M; k += PER_SAMPLE_BLOCK) {
        weights[k] = size > 0 ? DIV(powf(MUL(static_cast<float>(size), __ldcg(probs + k)), -beta), w_max)
                              : 0.0f;
    }
    if (threadIdx.x == 0) {
        if (size == 0) vstate[PER_STATUS] = vstate[PER_STATUS] | PER_STATUS_EMPTY_SAMPLE;
        if (isv != nullptr && beta_idx >= 0) isv[beta_idx] = beta;
        vstate[PER_SAMPLE_EPOCH] = epoch + 1ull;
        vstate[PER_SAMPLE_DONE] = 0ull;
        __threadfence();
    }
}

extern "C" __global__ void __launch_bounds__(PER_UPDATE_BLOCK)
per_update(const int* __restrict__ indices, const float* __restrict__ delta,
           const float* __restrict__ isv, float* __restrict__ leaves, float* __restrict__ max_leaf,
           int M, int alpha_idx, int eps_idx, const AgentAxis agent_axis) {
    agent_slice(agent_axis, indices, delta, isv, leaves, max_leaf);
    __shared__ __align__(16) int s_idx[PER_MAX_BATCH + 4];
    const float alpha = isv[alpha_idx], eps = isv[eps_idx];
    if (M > PER_MAX_BATCH) return;
    for (int k = threadIdx.x; k < M + 4; k += PER_UPDATE_BLOCK) s_idx[k] = k < M ? indices[k] : -2;
    __syncthreads();
    const int4* quads = reinterpret_cast<const int4*>(s_idx);
    const int n_quads = (M + 3) >> 2;
    for (int k = threadIdx.x; k < M; k += PER_UPDATE_BLOCK) {
        const int slot = s_idx[k];
        if (slot < 0) continue;
        // does the slot occur again after position k? branch-free over quads, so the shared
        // loads overlap instead of waiting on one another
        bool repeated_later = false;
        for (int q = (k + 1) >> 2; q < n_quads; ++q) {
            const int4 w = quads[q];
            const int at = q << 2;
            repeated_later |= (at > k && w.x == slot) | (at + 1 > k && w.y == slot) |
                              (at + 2 > k && w.z == slot) | (at + 3 > k && w.w == slot);
        }
        if (repeated_later) continue;
        const float value = powf(ADD(fabsf(delta[k]), eps), alpha);
        leaves[slot] = value;
        atomicMax(reinterpret_cast<int*>(max_leaf), __float_as_int(value));
    }
}
