// mlp.cu — the dense layers of the Q-network (DESIGN §7): a tiled GEMM for the forward and both
// backward products, bias gradients, and the dueling head.
//
// mlp_gemm: C[M, N] = op(A)[M, K] @ op(B)[K, N] (+ bias[N]) (ReLU if relu) (* (mask > 0)),
//   op(A) = A [M, K] row-major, or A^T when trans_a (A stored [K, M]);
//   op(B) = B [K, N] row-major, or B^T when trans_b (B stored [N, K]).
//   Forward Y = X W^T + b: A = X, B = W (trans_b). Input gradient dX = dY W (* act mask): A = dY,
//   B = W. Weight gradient dW = dY^T X: A = dY (trans_a), B = X. bias and mask may be NULL.
//   Tiles of MLP_BM x MLP_BN outputs per block of 256 threads, each thread a 2 x 2 micro-tile,
//   K in steps of MLP_BK; every output sums k = 0 .. K-1 in order. (32 x 32 tiles: the learner's
//   512-row products then run on 128 blocks instead of 32.)
// mlp_gemm_partial: split-K for products with few outputs and a long K (the weight gradients):
//   P[s, M, N] = op(A)[:, Ks] @ op(B)[Ks, :] for the s-th of `splits` chunks Ks of K (chunks of
//   ceil(K / splits) rounded up to MLP_BK), one block per (split, tile); no bias, ReLU or mask.
// mlp_sum_splits: C[i] = sum_s P[s, i] for i < MN, splits added in order (deterministic).
// mlp_bias_grad: db[n] = sum_m dY[m, n]: blocks of MLP_BG_COLS columns x MLP_BG_LANES lanes; lane
//   l sums rows l, l + LANES, ... in order, then lane 0 adds the lanes in order (deterministic).
// mlp_dueling_forward: Q[m, a] = VA[m, A] + VA[m, a] - mean_{a'} VA[m, a'],   VA [M, A+1]
//   holding the A advantages then the value.
// mlp_dueling_backward: dVA[m, a] = dQ[m, a] - mean_{a'} dQ[m, a'], dVA[m, A] = sum_a dQ[m, a].
#include "common.cuh"

#define MLP_BM 32
#define MLP_BN 32
#define MLP_TM 2  // rows of a thread's micro-tile (MLP_BM / 16)
#define MLP_TN 2  // columns (MLP_BN / 16)
#define MLP_BK 16
#define MLP_THREADS 256

__device__ __forceinline__ float load_a(const float* __restrict__ A, int m, int k, int M, int K,
                                        int trans_a) {
    if (m >= M || k >= K) return 0.0f;
    return trans_a ? A[static_cast<size_t>(k) * M + m] : A[static_cast<size_t>(m) * K + k];
}

__device__ __forceinline__ float load_b(const float* __restrict__ B, int k, int n, int K, int N,
                                        int trans_b) {
    if (k >= K || n >= N) return 0.0f;
    return trans_b ? B[static_cast<size_t>(n) * K + k] : B[static_cast<size_t>(k) * N + n];
}

// The tile product over k in [k_begin, k_end) into acc (the thread's micro-tile at m0, n0).
__device__ __forceinline__ void mlp_tile(const float* __restrict__ A, const float* __restrict__ B,
                                         int M, int N, int K, int trans_a, int trans_b,
                                         int m0, int n0, int k_begin, int k_end,
                                         float (&acc)[MLP_TM][MLP_TN]) {
    __shared__ float As[MLP_BK][MLP_BM];
    __shared__ float Bs[MLP_BK][MLP_BN];
    const int tid = threadIdx.x;
    const int tm = (tid / 16) * MLP_TM, tn = (tid % 16) * MLP_TN;
    for (int k0 = k_begin; k0 < k_end; k0 += MLP_BK) {
        for (int e = tid; e < MLP_BK * MLP_BM; e += MLP_THREADS) {
            const int kk = trans_a ? e / MLP_BM : e % MLP_BK;
            const int mm = trans_a ? e % MLP_BM : e / MLP_BK;
            As[kk][mm] = k0 + kk < k_end ? load_a(A, m0 + mm, k0 + kk, M, K, trans_a) : 0.0f;
        }
        for (int e = tid; e < MLP_BK * MLP_BN; e += MLP_THREADS) {
            const int kk = trans_b ? e % MLP_BK : e / MLP_BN;
            const int nn = trans_b ? e / MLP_BK : e % MLP_BN;
            Bs[kk][nn] = k0 + kk < k_end ? load_b(B, k0 + kk, n0 + nn, K, N, trans_b) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < MLP_BK; ++kk) {
            float a[MLP_TM], b[MLP_TN];
#pragma unroll
            for (int i = 0; i < MLP_TM; ++i) a[i] = As[kk][tm + i];
#pragma unroll
            for (int j = 0; j < MLP_TN; ++j) b[j] = Bs[kk][tn + j];
#pragma unroll
            for (int i = 0; i < MLP_TM; ++i) {
#pragma unroll
                for (int j = 0; j < MLP_TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
            }
        }
        __syncthreads();
    }
}

extern "C" __global__ void __launch_bounds__(MLP_THREADS)
mlp_gemm(const float* __restrict__ A, const float* __restrict__ B, const float* __restrict__ bias,
         const float* __restrict__ mask, float* __restrict__ C, int M, int N, int K, int trans_a,
         int trans_b, int relu) {
    const int tiles_n = (N + MLP_BN - 1) / MLP_BN;
    const int m0 = (blockIdx.x / tiles_n) * MLP_BM, n0 = (blockIdx.x % tiles_n) * MLP_BN;
    const int tm = (threadIdx.x / 16) * MLP_TM, tn = (threadIdx.x % 16) * MLP_TN;
    float acc[MLP_TM][MLP_TN] = {};
    mlp_tile(A, B, M, N, K, trans_a, trans_b, m0, n0, 0, K, acc);
#pragma unroll
    for (int i = 0; i < MLP_TM; ++i) {
        const int m = m0 + tm + i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < MLP_TN; ++j) {
            const int n = n0 + tn + j;
            if (n >= N) continue;
            float v = acc[i][j] + (bias != nullptr ? bias[n] : 0.0f);
            if (relu) v = fmaxf(v, 0.0f);
            const size_t at = static_cast<size_t>(m) * N + n;
            if (mask != nullptr && !(mask[at] > 0.0f)) v = 0.0f;
            C[at] = v;
        }
    }
}

extern "C" __global__ void __launch_bounds__(MLP_THREADS)
mlp_gemm_partial(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ P,
                 int M, int N, int K, int trans_a, int trans_b, int splits) {
    const int tiles_n = (N + MLP_BN - 1) / MLP_BN;
    const int tiles = ((M + MLP_BM - 1) / MLP_BM) * tiles_n;
    const int split = blockIdx.x / tiles, tile = blockIdx.x - split * tiles;
    const int chunk = ((K + splits - 1) / splits + MLP_BK - 1) / MLP_BK * MLP_BK;
    const int k_begin = split * chunk, k_end = min(K, k_begin + chunk);
    const int m0 = (tile / tiles_n) * MLP_BM, n0 = (tile % tiles_n) * MLP_BN;
    const int tm = (threadIdx.x / 16) * MLP_TM, tn = (threadIdx.x % 16) * MLP_TN;
    float acc[MLP_TM][MLP_TN] = {};
    mlp_tile(A, B, M, N, K, trans_a, trans_b, m0, n0, k_begin, k_end, acc);
    float* out = P + static_cast<size_t>(split) * M * N;
#pragma unroll
    for (int i = 0; i < MLP_TM; ++i) {
        const int m = m0 + tm + i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < MLP_TN; ++j) {
            const int n = n0 + tn + j;
            if (n < N) out[static_cast<size_t>(m) * N + n] = acc[i][j];
        }
    }
}

extern "C" __global__ void mlp_sum_splits(const float* __restrict__ P, float* __restrict__ C,
                                          int MN, int splits) {
    const int i = global_index_1d();
    if (i >= MN) return;
    float s = 0.0f;
    for (int k = 0; k < splits; ++k) s += P[static_cast<size_t>(k) * MN + i];
    C[i] = s;
}

#define MLP_BG_COLS 32
#define MLP_BG_LANES 32

extern "C" __global__ void __launch_bounds__(MLP_BG_COLS * MLP_BG_LANES)
mlp_bias_grad(const float* __restrict__ dY, float* __restrict__ db, int M, int N) {
    __shared__ float part[MLP_BG_LANES][MLP_BG_COLS + 1];
    const int c = threadIdx.x % MLP_BG_COLS, lane = threadIdx.x / MLP_BG_COLS;
    const int n = blockIdx.x * MLP_BG_COLS + c;
    float s = 0.0f;
    if (n < N) {
        for (int m = lane; m < M; m += MLP_BG_LANES) s += dY[static_cast<size_t>(m) * N + n];
    }
    part[lane][c] = s;
    __syncthreads();
    if (lane == 0 && n < N) {
        float t = 0.0f;
        for (int l = 0; l < MLP_BG_LANES; ++l) t += part[l][c];
        db[n] = t;
    }
}

extern "C" __global__ void mlp_dueling_forward(const float* __restrict__ VA, float* __restrict__ Q,
                                               int M, int A) {
    const int m = global_index_1d();
    if (m >= M) return;
    const float* row = VA + static_cast<size_t>(m) * (A + 1);
    float mean = 0.0f;
    for (int a = 0; a < A; ++a) mean += row[a];
    mean /= static_cast<float>(A);
    for (int a = 0; a < A; ++a) Q[static_cast<size_t>(m) * A + a] = row[A] + row[a] - mean;
}

extern "C" __global__ void mlp_dueling_backward(const float* __restrict__ dQ,
                                                float* __restrict__ dVA, int M, int A) {
    const int m = global_index_1d();
    if (m >= M) return;
    const float* row = dQ + static_cast<size_t>(m) * A;
    float sum = 0.0f;
    for (int a = 0; a < A; ++a) sum += row[a];
    const float mean = sum / static_cast<float>(A);
    float* out = dVA + static_cast<size_t>(m) * (A + 1);
    for (int a = 0; a < A; ++a) out[a] = row[a] - mean;
    out[A] = sum;
}
