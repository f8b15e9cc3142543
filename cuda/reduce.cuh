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
