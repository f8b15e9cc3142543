// mlp.cu — the dense layers of the Q-network (DESIGN §7): a tiled GEMM for the forward and both
// backward products, bias gradients, and the dueling head.
//
// mlp_gemm: C[M, N] = op(A)[M, K] @ op(B)[K, N] (+ bias[N]) (ReLU if relu) (* (mask > 0)),
//   op(A) = A [M, K] row-major, or A^T when trans_a (A stored [K, M]);
//   op(B) = B [K, N] row-major, or B^T when trans_b (B stored [N, K]).
//   Forward Y = X W^T + b: A = X, B = W (trans_b). Input gradient dX = dY W (* act mask): A = dY,
//   B = W. Weight gradient dW = dY^T X: A = dY (trans_a), B = X. bias and mask may be NULL.
//   Tiles of 32 x 32 outputs per block of 256 threads, each thread a 2 x 2 micro-tile, K in
//   steps of MLP_BK; every output sums k = 0 .. K-1 in order (fmaf), so the result does not
//   depend on the tile. (32 x 32 tiles: the learner's 512-row products run on 128 blocks.)
// mlp_gemm_64: the same product on 64 x 64 tiles, a 4 x 4 micro-tile per thread (half the
//   shared-memory reads per multiply-add), for products with enough rows to fill the GPU with
//   64 x 64 tiles (the acting forward over every env). Bit-identical to mlp_gemm.
// mlp_gemm_128: the same on 128 x 128 tiles, 8 x 8 per thread in 2 x 2 pieces of 4 x 4 (see
//   MlpTile), for products that fill the GPU with them (the acting forward over tens of thousands
//   of envs); K steps of 16 in two shared-memory stages filled by cp.async (mlp_tile_async), two
//   blocks per SM. Bit-identical to mlp_gemm (it multiplies the same padding zeros up to a
//   multiple of MLP_BK, so even the sign of a zero sum agrees).
// mlp_gemm_rows: Y[M, N] = X[M, K] W[N, K]^T (+ bias) (ReLU if relu) for N <= MLP_ROWS_MAX_N
//   (the Q head): a warp per row, lane l multiplying k = l, l + 32, ... in order, then a
//   butterfly of shuffles; output n is lane n's total (deterministic, not mlp_gemm's order).
// mlp_gemm_pair, mlp_gemm_rows_pair: two forward products of the same shape but their own rows,
//   inputs, weights and outputs in one launch (the online and the target network's layer of a
//   learner update), each bit-identical to its own mlp_gemm / mlp_gemm_rows launch.
// mlp_gemm_partial: split-K for products with few outputs and a long K (the weight gradients):
//   P[s, M, N] = op(A)[:, Ks] @ op(B)[Ks, :] for the s-th of `splits` chunks Ks of K (chunks of
//   ceil(K / splits) rounded up to MLP_BK), one block per (split, tile); no bias, ReLU or mask.
// mlp_sum_splits: C[i] = sum_s P[s, i] for i < MN, splits added in order (deterministic), and in
//   the same launch (its last ceil(N / MLP_BG_COLS) blocks; none when N == 0) the layer's bias
//   gradient db = sum_m dY[m, :] exactly as mlp_bias_grad adds it.
// mlp_bias_grad: db[n] = sum_m dY[m, n]: blocks of MLP_BG_COLS columns x MLP_BG_LANES lanes; lane
//   l sums rows l, l + LANES, ... in order, then lane 0 adds the lanes in order (deterministic).
// mlp_dueling_forward: Q[m, a] = VA[m, A] + VA[m, a] - mean_{a'} VA[m, a'],   VA [M, A+1]
//   holding the A advantages then the value.
// mlp_dueling_backward: dVA[m, a] = dQ[m, a] - mean_{a'} dQ[m, a'], dVA[m, A] = sum_a dQ[m, a].
#include "common.cuh"

#define MLP_BK 32
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

// T consecutive floats from shared memory (16- or 8-byte aligned by construction) into r.
template <int T>
__device__ __forceinline__ void load_frag(const float* p, float (&r)[T]) {
    if constexpr (T % 4 == 0) {
#pragma unroll
        for (int i = 0; i < T; i += 4) {
            const float4 v = *reinterpret_cast<const float4*>(p + i);
            r[i] = v.x, r[i + 1] = v.y, r[i + 2] = v.z, r[i + 3] = v.w;
        }
    } else if constexpr (T % 2 == 0) {
#pragma unroll
        for (int i = 0; i < T; i += 2) {
            const float2 v = *reinterpret_cast<const float2*>(p + i);
            r[i] = v.x, r[i + 1] = v.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < T; ++i) r[i] = p[i];
    }
}

// A tile shape: BM x BN outputs per block of MLP_THREADS threads, a TM x TN micro-tile each.
// PARTS > 1 splits a thread's micro-tile into PARTS x PARTS pieces spaced BM / PARTS rows and
// BN / PARTS columns apart, so that a warp's shared-memory reads of a k-row are contiguous
// (conflict-free) rather than TN floats apart; which outputs a thread holds changes, the order in
// which each output adds its products does not.
// ASYNC: the product runs through mlp_tile_async (cp.async stages) rather than mlp_tile.
template <int BM_, int BN_, int TM_, int TN_, int PARTS_ = 1, bool ASYNC_ = false>
struct MlpTile {
    static constexpr int BM = BM_, BN = BN_, TM = TM_, TN = TN_, PARTS = PARTS_;
    static constexpr bool ASYNC = ASYNC_;
    static constexpr int COLS = BN / TN;  // threads along N
    static_assert((BM / TM) * (BN / TN) == MLP_THREADS, "one micro-tile per thread");
    static_assert(TM % PARTS == 0 && TN % PARTS == 0, "whole pieces");
    static constexpr int PM = TM / PARTS, PN = TN / PARTS;  // a piece's rows and columns
    static constexpr int LA = BM * MLP_BK / MLP_THREADS;  // A elements each thread stages
    static constexpr int LB = BN * MLP_BK / MLP_THREADS;
    // the tile row of the thread's micro-tile row i, the tile column of its column j
    __device__ static __forceinline__ int row(int tid, int i) {
        return (tid / COLS) * PM + (i % PM) + (i / PM) * (BM / PARTS);
    }
    __device__ static __forceinline__ int col(int tid, int j) {
        return (tid % COLS) * PN + (j % PN) + (j / PN) * (BN / PARTS);
    }
};
#define MLP_TILE 32       // output tile side of mlp_gemm and mlp_gemm_partial
#define MLP_WIDE_TILE 64  // output tile side of mlp_gemm_64
#define MLP_HUGE_TILE 128  // output tile side of mlp_gemm_128
using MlpSmall = MlpTile<MLP_TILE, MLP_TILE, 2, 2>;  // mlp_gemm, mlp_gemm_partial
using MlpWide = MlpTile<MLP_WIDE_TILE, MLP_WIDE_TILE, 4, 4>;  // mlp_gemm_64
using MlpHuge = MlpTile<MLP_HUGE_TILE, MLP_HUGE_TILE, 8, 8, 2, true>;  // mlp_gemm_128

// One k of the tile product: the thread's micro-tile adds a[i] * b[j] from the k-rows As_k, Bs_k
// of the staged tiles (fmaf, so each output adds its products in k order).
template <class T>
__device__ __forceinline__ void mlp_k_step(const float* As_k, const float* Bs_k, int tid,
                                           float (&acc)[T::TM][T::TN]) {
    float a[T::TM], b[T::TN];
#pragma unroll
    for (int part = 0; part < T::PARTS; ++part) {
        float pa[T::PM], pb[T::PN];
        load_frag<T::PM>(As_k + T::row(tid, part * T::PM), pa);
        load_frag<T::PN>(Bs_k + T::col(tid, part * T::PN), pb);
#pragma unroll
        for (int i = 0; i < T::PM; ++i) a[part * T::PM + i] = pa[i];
#pragma unroll
        for (int j = 0; j < T::PN; ++j) b[part * T::PN + j] = pb[j];
    }
#pragma unroll
    for (int i = 0; i < T::TM; ++i) {
#pragma unroll
        for (int j = 0; j < T::TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
}

// The tile product over k in [k_begin, k_end) into acc (the thread's micro-tile at m0, n0).
// The next K-step's elements are fetched into registers while the current one is multiplied
// from shared memory. Every output adds its products in k order (fmaf), whatever the tile.
template <class T>
__device__ __forceinline__ void mlp_tile(const float* __restrict__ A, const float* __restrict__ B,
                                         int M, int N, int K, int trans_a, int trans_b,
                                         int m0, int n0, int k_begin, int k_end,
                                         float (&acc)[T::TM][T::TN]) {
    // rows padded by 4 floats: the transposing stores spread over banks, float4 reads stay aligned
    __shared__ __align__(16) float As[MLP_BK][T::BM + 4];
    __shared__ __align__(16) float Bs[MLP_BK][T::BN + 4];
    const int tid = threadIdx.x;
    float ra[T::LA], rb[T::LB];
    // staged element i of this thread: (kk, mm) in the A tile, (kk, nn) in the B tile, chosen so
    // that consecutive threads read consecutive addresses of the stored matrix
    auto a_at = [&](int i, int& kk, int& mm) {
        const int e = tid + i * MLP_THREADS;
        kk = trans_a ? e / T::BM : e % MLP_BK;
        mm = trans_a ? e % T::BM : e / MLP_BK;
    };
    auto b_at = [&](int i, int& kk, int& nn) {
        const int e = tid + i * MLP_THREADS;
        kk = trans_b ? e % MLP_BK : e / T::BN;
        nn = trans_b ? e / MLP_BK : e % T::BN;
    };
    auto fetch = [&](int k0) {
#pragma unroll
        for (int i = 0; i < T::LA; ++i) {
            int kk, mm;
            a_at(i, kk, mm);
            ra[i] = k0 + kk < k_end ? load_a(A, m0 + mm, k0 + kk, M, K, trans_a) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < T::LB; ++i) {
            int kk, nn;
            b_at(i, kk, nn);
            rb[i] = k0 + kk < k_end ? load_b(B, k0 + kk, n0 + nn, K, N, trans_b) : 0.0f;
        }
    };
    if (k_begin < k_end) fetch(k_begin);
    for (int k0 = k_begin; k0 < k_end; k0 += MLP_BK) {
#pragma unroll
        for (int i = 0; i < T::LA; ++i) {
            int kk, mm;
            a_at(i, kk, mm);
            As[kk][mm] = ra[i];
        }
#pragma unroll
        for (int i = 0; i < T::LB; ++i) {
            int kk, nn;
            b_at(i, kk, nn);
            Bs[kk][nn] = rb[i];
        }
        __syncthreads();
        if (k0 + MLP_BK < k_end) fetch(k0 + MLP_BK);
#pragma unroll
        for (int kk = 0; kk < MLP_BK; ++kk) mlp_k_step<T>(As[kk], Bs[kk], tid, acc);
        __syncthreads();
    }
}

// A 4-byte global -> shared copy that does not pass through registers (cp.async, sm_80+);
// `valid` false stores 0 (src-size 0: nothing is read).
__device__ __forceinline__ void copy_async_4(float* dst, const float* src, bool valid) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(src),
                 "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING>
__device__ __forceinline__ void copy_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
}

#define MLP_ASYNC_BK 16  // K step of mlp_tile_async (two stages of both tiles in 48 KB)

// mlp_tile's product with two shared-memory stages filled by cp.async: the copy of K-step s + 1
// runs while step s is multiplied, and no staging registers are held, so a 128 x 128 tile fits
// two blocks per SM. The same k order and padding, so the same result as mlp_tile to the last bit.
template <class T>
__device__ __forceinline__ void mlp_tile_async(const float* __restrict__ A,
                                               const float* __restrict__ B, int M, int N, int K,
                                               int trans_a, int trans_b, int m0, int n0,
                                               int k_begin, int k_end,
                                               float (&acc)[T::TM][T::TN]) {
    constexpr int BK = MLP_ASYNC_BK;
    constexpr int LA = T::BM * BK / MLP_THREADS, LB = T::BN * BK / MLP_THREADS;
    __shared__ __align__(16) float As[2][BK][T::BM + 4];
    __shared__ __align__(16) float Bs[2][BK][T::BN + 4];
    const int tid = threadIdx.x;
    // staged element i of this thread, consecutive threads on consecutive stored addresses
    auto stage = [&](int buf, int k0) {
#pragma unroll
        for (int i = 0; i < LA; ++i) {
            const int e = tid + i * MLP_THREADS;
            const int kk = trans_a ? e / T::BM : e % BK, mm = trans_a ? e % T::BM : e / BK;
            const int m = m0 + mm, k = k0 + kk;
            const bool ok = m < M && k < k_end;
            const size_t at = trans_a ? static_cast<size_t>(k) * M + m
                                      : static_cast<size_t>(m) * K + k;
            copy_async_4(&As[buf][kk][mm], ok ? A + at : A, ok);
        }
#pragma unroll
        for (int i = 0; i < LB; ++i) {
            const int e = tid + i * MLP_THREADS;
            const int kk = trans_b ? e % BK : e / T::BN, nn = trans_b ? e / BK : e % T::BN;
            const int n = n0 + nn, k = k0 + kk;
            const bool ok = n < N && k < k_end;
            const size_t at = trans_b ? static_cast<size_t>(n) * K + k
                                      : static_cast<size_t>(k) * N + n;
            copy_async_4(&Bs[buf][kk][nn], ok ? B + at : B, ok);
        }
        copy_async_commit();
    };
    // mlp_tile's padded bound (whole MLP_BK steps, zeros past k_end), so the same padding zeros
    // are multiplied: the same result to the last bit, the sign of a zero included
    static_assert(MLP_BK % BK == 0, "the async K step must divide MLP_BK");
    const int k_stop = k_begin + (k_end - k_begin + MLP_BK - 1) / MLP_BK * MLP_BK;
    if (k_begin < k_stop) stage(0, k_begin);
    int buf = 0;
    for (int k0 = k_begin; k0 < k_stop; k0 += BK, buf ^= 1) {
        if (k0 + BK < k_stop) {
            stage(buf ^ 1, k0 + BK);
            copy_async_wait<1>();  // this step's stage has landed; the next may still fly
        } else {
            copy_async_wait<0>();
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) mlp_k_step<T>(As[buf][kk], Bs[buf][kk], tid, acc);
        __syncthreads();  // every thread is done with buf before the next stage refills it
    }
}

// One block's tile `tile` of C[M, N] = op(A)[:, k_begin:k_end] op(B)[k_begin:k_end, :] (+ bias)
// (ReLU if relu) (* (mask > 0)); bias and mask may be NULL.
template <class T>
__device__ __forceinline__ void mlp_gemm_tile(const float* __restrict__ A,
                                              const float* __restrict__ B,
                                              const float* __restrict__ bias,
                                              const float* __restrict__ mask,
                                              float* __restrict__ C, int M, int N, int K,
                                              int trans_a, int trans_b, int relu, int tile,
                                              int k_begin, int k_end) {
    const int tiles_n = (N + T::BN - 1) / T::BN;
    const int m0 = (tile / tiles_n) * T::BM, n0 = (tile % tiles_n) * T::BN;
    const int tid = threadIdx.x;
    float acc[T::TM][T::TN] = {};
    if constexpr (T::ASYNC) {
        mlp_tile_async<T>(A, B, M, N, K, trans_a, trans_b, m0, n0, k_begin, k_end, acc);
    } else {
        mlp_tile<T>(A, B, M, N, K, trans_a, trans_b, m0, n0, k_begin, k_end, acc);
    }
#pragma unroll
    for (int i = 0; i < T::TM; ++i) {
        const int m = m0 + T::row(tid, i);
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < T::TN; ++j) {
            const int n = n0 + T::col(tid, j);
            if (n >= N) continue;
            float v = acc[i][j] + (bias != nullptr ? bias[n] : 0.0f);
            if (relu) v = fmaxf(v, 0.0f);
            const size_t at = static_cast<size_t>(m) * N + n;
            if (mask != nullptr && !(mask[at] > 0.0f)) v = 0.0f;
            C[at] = v;
        }
    }
}

// mlp_gemm (32 x 32 tiles), mlp_gemm_64 and mlp_gemm_128: the one product on a tile shape each
// (the launch bounds last: a minimum of blocks per SM caps the registers, and naming one at all
// changes ptxas's allocation, so the others name none)
#define MLP_GEMM_KERNEL(NAME, TILE, ...)                                                            \
    extern "C" __global__ void __launch_bounds__(__VA_ARGS__)                                      \
    NAME(const float* __restrict__ A, const float* __restrict__ B,                                 \
         const float* __restrict__ bias, const float* __restrict__ mask, float* __restrict__ C,    \
         int M, int N, int K, int trans_a, int trans_b, int relu,                                  \
         const AgentAxis agent_axis) {                                                             \
        agent_slice(agent_axis, A, B, bias, mask, C);                                              \
        mlp_gemm_tile<TILE>(A, B, bias, mask, C, M, N, K, trans_a, trans_b, relu, blockIdx.x, 0,   \
                            K);                                                                    \
    }
MLP_GEMM_KERNEL(mlp_gemm, MlpSmall, MLP_THREADS)
MLP_GEMM_KERNEL(mlp_gemm_64, MlpWide, MLP_THREADS)
MLP_GEMM_KERNEL(mlp_gemm_128, MlpHuge, MLP_THREADS, 2)  // two blocks per SM: 128 registers each

// Two forward products (Y = X W^T + bias, ReLU if relu) of the same N and K in one launch: the
// first tiles_1 blocks compute the first, the rest the second; each exactly as mlp_gemm would.
extern "C" __global__ void __launch_bounds__(MLP_THREADS)
mlp_gemm_pair(const float* __restrict__ X1, const float* __restrict__ W1,
              const float* __restrict__ bias1, const float* __restrict__ X2,
              const float* __restrict__ W2, const float* __restrict__ bias2,
              float* __restrict__ Y1, float* __restrict__ Y2, int M1, int M2, int N, int K,
              int relu, const AgentAxis agent_axis) {
    agent_slice(agent_axis, X1, W1, bias1, X2, W2, bias2, Y1, Y2);
    const int tiles_1 = ((M1 + MLP_TILE - 1) / MLP_TILE) * ((N + MLP_TILE - 1) / MLP_TILE);
    const int tile = blockIdx.x;
    if (tile < tiles_1) {
        mlp_gemm_tile<MlpSmall>(X1, W1, bias1, nullptr, Y1, M1, N, K, 0, 1, relu, tile, 0, K);
    } else {
        mlp_gemm_tile<MlpSmall>(X2, W2, bias2, nullptr, Y2, M2, N, K, 0, 1, relu, tile - tiles_1,
                                0, K);
    }
}

// Split `split` (of `splits`, whole MLP_BK steps of K each) of output tile `tile` of
// op(A) op(B) into Ps, that split's [M, N] partial (a block of mlp_gemm_partial or
// mlp_gemm_splitk).
__device__ __forceinline__ void mlp_partial_tile(const float* __restrict__ A,
                                                 const float* __restrict__ B, float* Ps, int M,
                                                 int N, int K, int trans_a, int trans_b,
                                                 int splits, int split, int tile) {
    const int chunk = ((K + splits - 1) / splits + MLP_BK - 1) / MLP_BK * MLP_BK;
    const int k_begin = split * chunk, k_end = min(K, k_begin + chunk);
    mlp_gemm_tile<MlpSmall>(A, B, nullptr, nullptr, Ps, M, N, K, trans_a, trans_b, 0, tile,
                            k_begin, k_end);
}

extern "C" __global__ void __launch_bounds__(MLP_THREADS)
mlp_gemm_partial(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ P,
                 int M, int N, int K, int trans_a, int trans_b, int splits,
                 const AgentAxis agent_axis) {
    agent_slice(agent_axis, A, B, P);
    using T = MlpSmall;
    const int tiles = ((M + T::BM - 1) / T::BM) * ((N + T::BN - 1) / T::BN);
    const int split = blockIdx.x / tiles, tile = blockIdx.x - split * tiles;
    mlp_partial_tile(A, B, P + static_cast<size_t>(split) * M * N, M, N, K, trans_a, trans_b,
                     splits, split, tile);
}

#define MLP_ROWS_MAX_N 8  // mlp_gemm_rows: outputs per row
#define MLP_ROWS_WARPS 8   // rows (one warp each) per block of 256 threads

// Row m of Y[M, N] = X W^T (+ bias) (ReLU if relu) by one warp (see mlp_gemm_rows).
__device__ __forceinline__ void gemm_row(const float* __restrict__ X, const float* __restrict__ W,
                                         const float* __restrict__ bias, float* __restrict__ Y,
                                         int m, int N, int K, int relu) {
    const int lane = static_cast<int>(threadIdx.x) & 31;
    float acc[MLP_ROWS_MAX_N] = {};
    const float* x = X + static_cast<size_t>(m) * K;
    for (int k = lane; k < K; k += 32) {
        const float v = x[k];
#pragma unroll
        for (int n = 0; n < MLP_ROWS_MAX_N; ++n) {
            if (n < N) acc[n] = fmaf(v, __ldg(W + static_cast<size_t>(n) * K + k), acc[n]);
        }
    }
    float out = 0.0f;
#pragma unroll
    for (int n = 0; n < MLP_ROWS_MAX_N; ++n) {
        float v = acc[n];
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
        if (n == lane) out = v;
    }
    if (lane < N) {
        float v = out + (bias != nullptr ? bias[lane] : 0.0f);
        if (relu) v = fmaxf(v, 0.0f);
        Y[static_cast<size_t>(m) * N + lane] = v;
    }
}

extern "C" __global__ void __launch_bounds__(MLP_ROWS_WARPS * 32)
mlp_gemm_rows(const float* __restrict__ X, const float* __restrict__ W,
              const float* __restrict__ bias, float* __restrict__ Y, int M, int N, int K,
              int relu, const AgentAxis agent_axis) {
    agent_slice(agent_axis, X, W, bias, Y);
    const int m = blockIdx.x * MLP_ROWS_WARPS + (static_cast<int>(threadIdx.x) >> 5);
    if (m >= M) return;  // warp-uniform
    gemm_row(X, W, bias, Y, m, N, K, relu);
}

// Two mlp_gemm_rows products of the same N and K in one launch: rows 0 .. M1-1 of the first, then
// the M2 rows of the second (row blocks of the first, then of the second).
extern "C" __global__ void __launch_bounds__(MLP_ROWS_WARPS * 32)
mlp_gemm_rows_pair(const float* __restrict__ X1, const float* __restrict__ W1,
                   const float* __restrict__ bias1, const float* __restrict__ X2,
                   const float* __restrict__ W2, const float* __restrict__ bias2,
                   float* __restrict__ Y1, float* __restrict__ Y2, int M1, int M2, int N, int K,
                   int relu, const AgentAxis agent_axis) {
    agent_slice(agent_axis, X1, W1, bias1, X2, W2, bias2, Y1, Y2);
    const int blocks_1 = (M1 + MLP_ROWS_WARPS - 1) / MLP_ROWS_WARPS;
    const int warp = static_cast<int>(threadIdx.x) >> 5;
    if (static_cast<int>(blockIdx.x) < blocks_1) {
        const int m = blockIdx.x * MLP_ROWS_WARPS + warp;
        if (m < M1) gemm_row(X1, W1, bias1, Y1, m, N, K, relu);  // warp-uniform
    } else {
        const int m = (blockIdx.x - blocks_1) * MLP_ROWS_WARPS + warp;
        if (m < M2) gemm_row(X2, W2, bias2, Y2, m, N, K, relu);
    }
}

#define MLP_BG_COLS 32
#define MLP_BG_LANES 32

ALPHA_RL_EXPORT(MLP_BK);
ALPHA_RL_EXPORT(MLP_THREADS);
ALPHA_RL_EXPORT(MLP_TILE);
ALPHA_RL_EXPORT(MLP_WIDE_TILE);
ALPHA_RL_EXPORT(MLP_HUGE_TILE);
ALPHA_RL_EXPORT(MLP_ROWS_MAX_N);
ALPHA_RL_EXPORT(MLP_ROWS_WARPS);
ALPHA_RL_EXPORT(MLP_BG_COLS);
ALPHA_RL_EXPORT(MLP_BG_LANES);

// Columns [block * COLS, +COLS) of db = sum_m dY[m, :] by a block of COLS x MLP_BG_LANES
// threads (see mlp_bias_grad): each column's sum in the same order whatever COLS.
template <int COLS = MLP_BG_COLS>
__device__ __forceinline__ void bias_grad_block(const float* __restrict__ dY, float* __restrict__ db,
                                                int M, int N, int block) {
    __shared__ float part[MLP_BG_LANES][COLS + 1];
    const int c = threadIdx.x % COLS, lane = threadIdx.x / COLS;
    const int n = block * COLS + c;
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

extern "C" __global__ void __launch_bounds__(MLP_BG_COLS * MLP_BG_LANES)
mlp_sum_splits(const float* __restrict__ P, const float* __restrict__ dY, float* __restrict__ C,
               float* __restrict__ db, int MN, int splits, int M, int N,
               const AgentAxis agent_axis) {
    agent_slice(agent_axis, P, dY, C, db);
    const int sum_blocks = (MN + MLP_BG_COLS * MLP_BG_LANES - 1) / (MLP_BG_COLS * MLP_BG_LANES);
    if (static_cast<int>(blockIdx.x) >= sum_blocks) {  // the bias gradient's blocks
        bias_grad_block(dY, db, M, N, blockIdx.x - sum_blocks);
        return;
    }
    const int i = global_index_1d();
    if (i >= MN) return;
    float s = 0.0f;
    for (int k = 0; k < splits; ++k) s += P[static_cast<size_t>(k) * MN + i];
    C[i] = s;
}

extern "C" __global__ void __launch_bounds__(MLP_BG_COLS * MLP_BG_LANES)
mlp_bias_grad(const float* __restrict__ dY, float* __restrict__ db, int M, int N,
              const AgentAxis agent_axis) {
    agent_slice(agent_axis, dY, db);
    bias_grad_block(dY, db, M, N, blockIdx.x);
}

extern "C" __global__ void mlp_dueling_forward(const float* __restrict__ VA, float* __restrict__ Q,
                                               int M, int A, const AgentAxis agent_axis) {
    agent_slice(agent_axis, VA, Q);
    const int m = global_index_1d();
    if (m >= M) return;
    const float* row = VA + static_cast<size_t>(m) * (A + 1);
    float mean = 0.0f;
    for (int a = 0; a < A; ++a) mean += row[a];
    mean /= static_cast<float>(A);
    for (int a = 0; a < A; ++a) Q[static_cast<size_t>(m) * A + a] = row[A] + row[a] - mean;
}

extern "C" __global__ void mlp_dueling_backward(const float* __restrict__ dQ,
                                                float* __restrict__ dVA, int M, int A,
                                                const AgentAxis agent_axis) {
    agent_slice(agent_axis, dQ, dVA);
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

// mlp_gemm_tf32, mlp_gemm_tf32_64, mlp_gemm_tf32_32: the product of mlp_gemm on the tensor
// cores with TF32 operands (each rounded to 10 mantissa bits, to nearest, ties away:
// cvt.rna.tf32.f32) and float32 accumulation by mma.sync m16n8k8; the order of additions inside
// an mma is the hardware's, so the result is not mlp_gemm's bit for bit: its oracle rounds the
// operands alike and the kernel is held to float32 accumulation's bound around it.
//   TcTile<BM, BN, WARPS_M, WARPS_N>: BM x BN outputs per block, each warp (BM / WARPS_M) x
//   (BN / WARPS_N) of 16 x 8 mma tiles; K in steps of MLP_TC_BK through MLP_TC_STAGES
//   shared-memory stages filled by cp.async (16-byte copies where the operand's contiguous
//   dimension is a multiple of 4 floats and its base 16-byte aligned, 4-byte ones otherwise). An
//   operand whose k is contiguous in memory (op(A) not transposed, op(B) transposed) is staged
//   [row][k] (rows padded by 4 floats), the others [k][row] (padded by 8): either way the
//   fragment reads of a warp fall on 32 different banks. The operands are rounded to TF32 as the
//   fragments are read (rounding each value once in place, after it lands, was slower: 65536 x
//   256 x 256 in 129.9 µs against 120.6 on the H200). 128 x 128 on 8 warps (mlp_gemm_tf32) for
//   the products that fill the GPU with such tiles, 64 x 64 on 4 warps (mlp_gemm_tf32_64), 32 x
//   32 on 4 warps (mlp_gemm_tf32_32) for the learner's few hundred rows.
// mlp_gemm_tf32_pair: mlp_gemm_pair's two forward products on the 32 x 32 TF32 tile, each
//   exactly as its own mlp_gemm_tf32_32 launch.
#define MLP_TC_TILE 128      // output tile side of mlp_gemm_tf32 (8 warps)
#define MLP_TC_WIDE_TILE 64  // of mlp_gemm_tf32_64 (4 warps)
#define MLP_TC_SMALL_TILE 32  // of mlp_gemm_tf32_32 and mlp_gemm_tf32_pair (4 warps)
#define MLP_TC_BK 32
#define MLP_TC_STAGES 3

template <int BM_, int BN_, int WARPS_M, int WARPS_N>
struct TcTile {
    static constexpr int BM = BM_, BN = BN_, THREADS = 32 * WARPS_M * WARPS_N;
    static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // a warp's outputs
    static constexpr int MI = WM / 16, NJ = WN / 8;             // its mma tiles
    static_assert(WM % 16 == 0 && WN % 8 == 0, "whole mma tiles per warp");
    static_assert(BM * MLP_TC_BK % (4 * THREADS) == 0 && BN * MLP_TC_BK % (4 * THREADS) == 0,
                  "whole 16-byte copies per thread");
};
using TcHuge = TcTile<MLP_TC_TILE, MLP_TC_TILE, 2, 4>;            // warps of 64 x 32
using TcWide = TcTile<MLP_TC_WIDE_TILE, MLP_TC_WIDE_TILE, 2, 2>;  // warps of 32 x 32
using TcSmall = TcTile<MLP_TC_SMALL_TILE, MLP_TC_SMALL_TILE, 2, 2>;  // warps of 16 x 16

__device__ __forceinline__ uint32_t mlp_tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// c += a b for one 16 x 8 x 8 tile: a, b TF32 fragments (see the fragment layouts below)
__device__ __forceinline__ void mlp_mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void copy_async_16(float* dst, const float* src, bool valid) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src),
                 "r"(valid ? 16 : 0));
}

// One operand's stage: ROWS x MLP_TC_BK values of op(X) for rows [row0, +ROWS) (M of op(A) or
// N of op(B)), k in [k0, +MLP_TC_BK). K_FAST: k is contiguous in memory (X[row * K + k]) and the
// stage is [row][k]; else X[k * rows + row] and the stage is [k][row].
template <int ROWS, bool K_FAST>
struct TcOperand {
    static constexpr int LD = K_FAST ? MLP_TC_BK + 4 : ROWS + 8;  // the stage's row pitch
    static constexpr int SIZE = (K_FAST ? ROWS : MLP_TC_BK) * LD;  // floats per stage
    __device__ static __forceinline__ int at(int row, int k) {
        return K_FAST ? row * LD + k : k * LD + row;
    }
    // the stage's copies by THREADS threads, consecutive threads on consecutive addresses
    template <int THREADS>
    __device__ static __forceinline__ void stage(float* s, const float* __restrict__ X, int rows,
                                                 int K, int row0, int k0, bool vec) {
        constexpr int FAST = K_FAST ? MLP_TC_BK : ROWS;  // the contiguous side of the block
        if (vec) {
            constexpr int COPIES = ROWS * MLP_TC_BK / 4 / THREADS;
#pragma unroll
            for (int r = 0; r < COPIES; ++r) {
                const int c = threadIdx.x + r * THREADS;
                const int f = c % (FAST / 4) * 4, slow = c / (FAST / 4);
                const int row = K_FAST ? slow : f, k = K_FAST ? f : slow;
                const int gr = row0 + row, gk = k0 + k;  // a chunk is in or out whole
                const bool ok = gr < rows && gk < K;
                const size_t g = K_FAST ? static_cast<size_t>(gr) * K + gk
                                        : static_cast<size_t>(gk) * rows + gr;
                copy_async_16(s + at(row, k), ok ? X + g : X, ok);
            }
        } else {
            constexpr int COPIES = ROWS * MLP_TC_BK / THREADS;
#pragma unroll 4
            for (int r = 0; r < COPIES; ++r) {
                const int e = threadIdx.x + r * THREADS;
                const int f = e % FAST, slow = e / FAST;
                const int row = K_FAST ? slow : f, k = K_FAST ? f : slow;
                const int gr = row0 + row, gk = k0 + k;
                const bool ok = gr < rows && gk < K;
                const size_t g = K_FAST ? static_cast<size_t>(gr) * K + gk
                                        : static_cast<size_t>(gk) * rows + gr;
                copy_async_4(s + at(row, k), ok ? X + g : X, ok);
            }
        }
    }
};

// Whether a 16-byte copy of op(X)'s contiguous side is aligned: its length a multiple of 4 and
// the base 16-byte aligned.
__device__ __forceinline__ bool mlp_tc_vec(const float* X, int contiguous) {
    return contiguous % 4 == 0 && (reinterpret_cast<uintptr_t>(X) & 15) == 0;
}

template <class T, bool TRANS_A, bool TRANS_B>
__device__ __forceinline__ void mlp_gemm_tc(const float* __restrict__ A,
                                            const float* __restrict__ B,
                                            const float* __restrict__ bias,
                                            const float* __restrict__ mask, float* __restrict__ C,
                                            int M, int N, int K, int relu, int tile) {
    using OpA = TcOperand<T::BM, !TRANS_A>;
    using OpB = TcOperand<T::BN, TRANS_B>;
    extern __shared__ __align__(16) float mlp_tc_smem[];
    float* As = mlp_tc_smem;                          // MLP_TC_STAGES x OpA::SIZE
    float* Bs = mlp_tc_smem + MLP_TC_STAGES * OpA::SIZE;  // MLP_TC_STAGES x OpB::SIZE
    constexpr int WARPS_N = T::BN / T::WN;
    const int tiles_n = (N + T::BN - 1) / T::BN;
    const int bm = (tile / tiles_n) * T::BM, bn = (tile % tiles_n) * T::BN;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = (warp / WARPS_N) * T::WM, wn = (warp % WARPS_N) * T::WN;
    const int g = lane >> 2, t = lane & 3;  // the fragment's group and thread-in-group
    const bool vec_a = mlp_tc_vec(A, TRANS_A ? M : K), vec_b = mlp_tc_vec(B, TRANS_B ? K : N);
    float acc[T::MI][T::NJ][4];
#pragma unroll
    for (int i = 0; i < T::MI; ++i)
#pragma unroll
        for (int j = 0; j < T::NJ; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;
    const int steps = (K + MLP_TC_BK - 1) / MLP_TC_BK;
    auto issue = [&](int step) {  // one commit group per step, empty past the last
        if (step < steps) {
            const int buf = step % MLP_TC_STAGES, k0 = step * MLP_TC_BK;
            OpA::template stage<T::THREADS>(As + buf * OpA::SIZE, A, M, K, bm, k0, vec_a);
            OpB::template stage<T::THREADS>(Bs + buf * OpB::SIZE, B, N, K, bn, k0, vec_b);
        }
        copy_async_commit();
    };
#pragma unroll
    for (int s = 0; s < MLP_TC_STAGES - 1; ++s) issue(s);
    for (int step = 0; step < steps; ++step) {
        copy_async_wait<MLP_TC_STAGES - 2>();  // this step's stage has landed
        __syncthreads();  // ... for every thread, and every thread is done with step - 1's
        issue(step + MLP_TC_STAGES - 1);  // into the buffer step - 1 used
        const float* as = As + (step % MLP_TC_STAGES) * OpA::SIZE;
        const float* bs = Bs + (step % MLP_TC_STAGES) * OpB::SIZE;
#pragma unroll
        for (int ks = 0; ks < MLP_TC_BK; ks += 8) {
            uint32_t a[T::MI][4], b[T::NJ][2];
#pragma unroll
            for (int i = 0; i < T::MI; ++i) {
                const int m = wm + i * 16 + g;
                a[i][0] = mlp_tf32(as[OpA::at(m, ks + t)]);
                a[i][1] = mlp_tf32(as[OpA::at(m + 8, ks + t)]);
                a[i][2] = mlp_tf32(as[OpA::at(m, ks + t + 4)]);
                a[i][3] = mlp_tf32(as[OpA::at(m + 8, ks + t + 4)]);
            }
#pragma unroll
            for (int j = 0; j < T::NJ; ++j) {
                const int n = wn + j * 8 + g;
                b[j][0] = mlp_tf32(bs[OpB::at(n, ks + t)]);
                b[j][1] = mlp_tf32(bs[OpB::at(n, ks + t + 4)]);
            }
#pragma unroll
            for (int i = 0; i < T::MI; ++i)
#pragma unroll
                for (int j = 0; j < T::NJ; ++j)
                    mlp_mma_tf32(acc[i][j], a[i], b[j][0], b[j][1]);
        }
    }
    copy_async_wait<0>();  // no copy left in flight (the groups past the last step are empty)
    // c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1) of each 16 x 8 tile
    const bool pairs = N % 2 == 0 && (reinterpret_cast<uintptr_t>(C) & 7) == 0 &&
                       (mask == nullptr || (reinterpret_cast<uintptr_t>(mask) & 7) == 0);
#pragma unroll
    for (int i = 0; i < T::MI; ++i)
#pragma unroll
        for (int j = 0; j < T::NJ; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int m = bm + wm + i * 16 + g + h * 8;
                const int n = bn + wn + j * 8 + 2 * t;
                if (m >= M || n >= N) continue;
                const size_t at = static_cast<size_t>(m) * N + n;
                float v[2];
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    v[c] = acc[i][j][2 * h + c];
                    if (n + c < N && bias != nullptr) v[c] += bias[n + c];
                    if (relu) v[c] = fmaxf(v[c], 0.0f);
                }
                if (pairs) {  // n even and N even: n + 1 < N too
                    if (mask != nullptr) {
                        const float2 mk = *reinterpret_cast<const float2*>(mask + at);
                        if (!(mk.x > 0.0f)) v[0] = 0.0f;
                        if (!(mk.y > 0.0f)) v[1] = 0.0f;
                    }
                    *reinterpret_cast<float2*>(C + at) = make_float2(v[0], v[1]);
                } else {
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        if (n + c >= N) continue;
                        if (mask != nullptr && !(mask[at + c] > 0.0f)) v[c] = 0.0f;
                        C[at + c] = v[c];
                    }
                }
            }
}

// Dynamic shared memory of a TcTile's launch: both operands' stages in the larger layout.
template <class T>
constexpr int mlp_tc_smem_bytes() {
    constexpr int a = TcOperand<T::BM, true>::SIZE > TcOperand<T::BM, false>::SIZE
                          ? TcOperand<T::BM, true>::SIZE
                          : TcOperand<T::BM, false>::SIZE;
    constexpr int b = TcOperand<T::BN, true>::SIZE > TcOperand<T::BN, false>::SIZE
                          ? TcOperand<T::BN, true>::SIZE
                          : TcOperand<T::BN, false>::SIZE;
    return MLP_TC_STAGES * (a + b) * 4;
}

template <class T>
__device__ __forceinline__ void mlp_gemm_tc_any(const float* __restrict__ A,
                                                const float* __restrict__ B,
                                                const float* __restrict__ bias,
                                                const float* __restrict__ mask,
                                                float* __restrict__ C, int M, int N, int K,
                                                int trans_a, int trans_b, int relu, int tile) {
    if (trans_a) {
        if (trans_b) mlp_gemm_tc<T, true, true>(A, B, bias, mask, C, M, N, K, relu, tile);
        else mlp_gemm_tc<T, true, false>(A, B, bias, mask, C, M, N, K, relu, tile);
    } else {
        if (trans_b) mlp_gemm_tc<T, false, true>(A, B, bias, mask, C, M, N, K, relu, tile);
        else mlp_gemm_tc<T, false, false>(A, B, bias, mask, C, M, N, K, relu, tile);
    }
}

#define MLP_TC_KERNEL(NAME, TILE, ...)                                                             \
    extern "C" __global__ void __launch_bounds__(__VA_ARGS__)                                      \
    NAME(const float* __restrict__ A, const float* __restrict__ B,                                 \
         const float* __restrict__ bias, const float* __restrict__ mask, float* __restrict__ C,    \
         int M, int N, int K, int trans_a, int trans_b, int relu,                                  \
         const AgentAxis agent_axis) {                                                             \
        agent_slice(agent_axis, A, B, bias, mask, C);                                              \
        mlp_gemm_tc_any<TILE>(A, B, bias, mask, C, M, N, K, trans_a, trans_b, relu, blockIdx.x);   \
    }
MLP_TC_KERNEL(mlp_gemm_tf32, TcHuge, TcHuge::THREADS, 2)  // two blocks per SM
MLP_TC_KERNEL(mlp_gemm_tf32_64, TcWide, TcWide::THREADS)
MLP_TC_KERNEL(mlp_gemm_tf32_32, TcSmall, TcSmall::THREADS)
// the dynamic shared memory each launch needs (bytes; the pair's is the 32 tile's)
#define MLP_TC_THREADS (TcHuge::THREADS)  // threads a block (the others: MLP_TC_SMALL_THREADS)
#define MLP_TC_SMALL_THREADS (TcWide::THREADS)
static_assert(TcSmall::THREADS == MLP_TC_SMALL_THREADS, "the 64 and 32 tiles share a block size");
ALPHA_RL_EXPORT(MLP_TC_THREADS);
ALPHA_RL_EXPORT(MLP_TC_SMALL_THREADS);
#define MLP_TC_SMEM (mlp_tc_smem_bytes<TcHuge>())
#define MLP_TC_WIDE_SMEM (mlp_tc_smem_bytes<TcWide>())
#define MLP_TC_SMALL_SMEM (mlp_tc_smem_bytes<TcSmall>())
ALPHA_RL_EXPORT(MLP_TC_SMEM);
ALPHA_RL_EXPORT(MLP_TC_WIDE_SMEM);
ALPHA_RL_EXPORT(MLP_TC_SMALL_SMEM);
ALPHA_RL_EXPORT(MLP_TC_TILE);
ALPHA_RL_EXPORT(MLP_TC_WIDE_TILE);
ALPHA_RL_EXPORT(MLP_TC_SMALL_TILE);

extern "C" __global__ void __launch_bounds__(TcSmall::THREADS)
mlp_gemm_tf32_pair(const float* __restrict__ X1, const float* __restrict__ W1,
                   const float* __restrict__ bias1, const float* __restrict__ X2,
                   const float* __restrict__ W2, const float* __restrict__ bias2,
                   float* __restrict__ Y1, float* __restrict__ Y2, int M1, int M2, int N, int K,
                   int relu, const AgentAxis agent_axis) {
    agent_slice(agent_axis, X1, W1, bias1, X2, W2, bias2, Y1, Y2);
    constexpr int S = MLP_TC_SMALL_TILE;
    const int tiles_1 = ((M1 + S - 1) / S) * ((N + S - 1) / S);
    const int tile = blockIdx.x;
    if (tile < tiles_1) {
        mlp_gemm_tc<TcSmall, false, true>(X1, W1, bias1, nullptr, Y1, M1, N, K, relu, tile);
    } else {
        mlp_gemm_tc<TcSmall, false, true>(X2, W2, bias2, nullptr, Y2, M2, N, K, relu,
                                          tile - tiles_1);
    }
}

// mlp_gemm_splitk: mlp_gemm_partial, mlp_sum_splits and the bias gradient in one launch, bit for
// bit: the first splits x tiles blocks compute their split's partial tile into P as
// mlp_gemm_partial; the last of a tile's blocks to finish (a counter per tile, back at 0 after
// it: the counters must not be shared by launches that may overlap) adds the tile's splits in
// order as mlp_sum_splits and writes C; with
// with_bias, the blocks after them compute db[n] = sum_k dY[k, n] (dY [K, M]: the output
// gradient whose transpose is op(A)) MLP_SPLITK_BG_COLS columns a block, each column's sum in
// mlp_bias_grad's order.
#define MLP_SPLITK_BG_COLS (MLP_THREADS / MLP_BG_LANES)

extern "C" __global__ void __launch_bounds__(MLP_THREADS)
mlp_gemm_splitk(const float* __restrict__ A, const float* __restrict__ B,
                const float* __restrict__ dY, float* P, float* __restrict__ C,
                float* __restrict__ db, unsigned int* __restrict__ counters, int M, int N, int K,
                int trans_a, int trans_b, int splits, int with_bias, const AgentAxis agent_axis) {
    agent_slice(agent_axis, A, B, dY, P, C, db, counters);
    using T = MlpSmall;
    const int tiles_n = (N + T::BN - 1) / T::BN, tiles = ((M + T::BM - 1) / T::BM) * tiles_n;
    const int partial_blocks = splits * tiles;
    if (static_cast<int>(blockIdx.x) >= partial_blocks) {  // the bias gradient's blocks
        const int block = blockIdx.x - partial_blocks;
        if (with_bias && dY != nullptr && db != nullptr)
            bias_grad_block<MLP_SPLITK_BG_COLS>(dY, db, K, M, block);
        return;
    }
    const int split = blockIdx.x / tiles, tile = blockIdx.x - split * tiles;
    const size_t MN = static_cast<size_t>(M) * N;
    mlp_partial_tile(A, B, P + split * MN, M, N, K, trans_a, trans_b, splits, split, tile);
    // the tile's count: atomicInc wraps it to 0 for its last block, ready for the next launch
    __shared__ bool last;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();  // this block's partial (its threads' stores, by the barrier), then
        last = atomicInc(counters + tile, static_cast<unsigned>(splits - 1)) ==
               static_cast<unsigned>(splits - 1);
        if (last) __threadfence();  // ... every other split's partial, after their counts
    }
    __syncthreads();
    if (!last) return;
    const int m0 = (tile / tiles_n) * T::BM, n0 = (tile % tiles_n) * T::BN;
    for (int e = threadIdx.x; e < T::BM * T::BN; e += MLP_THREADS) {
        const int m = m0 + e / T::BN, n = n0 + e % T::BN;
        if (m >= M || n >= N) continue;
        const size_t i = static_cast<size_t>(m) * N + n;
        float sum = 0.0f;
        for (int k = 0; k < splits; ++k) sum += __ldcg(P + k * MN + i);
        C[i] = sum;
    }
}
ALPHA_RL_EXPORT(MLP_SPLITK_BG_COLS);
