// reduce.cuh — deterministic block reductions: fixed per-thread order, then a shared-memory tree.
#pragma once

// Sums acc[i] over the BLOCK threads of the block for each i < N; the totals end up in
// shared[i][0] (visible to every thread on return). BLOCK must be a power of two and equal to
// blockDim.x; `shared` is a __shared__ float[N][BLOCK] of the caller.
template <int N, int BLOCK>
__device__ __forceinline__ void block_sum(const float (&acc)[N], float (*shared)[BLOCK]) {
    static_assert((BLOCK & (BLOCK - 1)) == 0, "BLOCK must be a power of two");
    const int tid = static_cast<int>(threadIdx.x);
#pragma unroll
    for (int i = 0; i < N; ++i) shared[i][tid] = acc[i];
    __syncthreads();
    for (int width = BLOCK / 2; width > 0; width >>= 1) {
        if (tid < width) {
#pragma unroll
            for (int i = 0; i < N; ++i) shared[i][tid] += shared[i][tid + width];
        }
        __syncthreads();
    }
}

// Sums acc[i] over the BLOCK threads for each i < N, by warps: a butterfly of shuffles within
// each warp (every lane ends with the same total), then the warps added in warp order; the totals
// end up in shared[0][i] (visible to every thread on return). Deterministic, and needs N x BLOCK/32
// floats of shared memory instead of N x BLOCK. `shared` is a __shared__ float[BLOCK / 32][N].
template <int N, int BLOCK>
__device__ __forceinline__ void block_sum_warps(const float (&acc)[N], float (*shared)[N]) {
    static_assert(BLOCK % 32 == 0, "BLOCK must be whole warps");
    const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
#pragma unroll
    for (int i = 0; i < N; ++i) {
        float v = acc[i];
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
        if (lane == 0) shared[warp][i] = v;
    }
    __syncthreads();
    if (tid < N) {
        float s = shared[0][tid];
        for (int w = 1; w < BLOCK / 32; ++w) s += shared[w][tid];
        shared[0][tid] = s;
    }
    __syncthreads();
}

// True in every thread of the block that is the last of the grid to get here (its earlier global
// writes, and every other block's, are visible to it); `counter` counts arrivals and must be reset
// to 0 by that last block before the next launch.
__device__ __forceinline__ bool last_block_done(unsigned long long* counter) {
    __shared__ bool is_last;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        is_last = atomicAdd(counter, 1ull) == gridDim.x - 1;
    }
    __syncthreads();
    return is_last;
}
