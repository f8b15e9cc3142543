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
         int M, int N, int K, int trans_a, int trans_b, int relu) {                                \
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
              int relu) {
    const int tiles_1 = ((M1 + MLP_TILE - 1) / MLP_TILE) * ((N + MLP_TILE - 1) / MLP_TILE);
    const int tile = blockIdx.x;
    if (tile < tiles_1) {
        mlp_gemm_tile<MlpSmall>(X1, W1, bias1, nullptr, Y1, M1, N, K, 0, 1, relu, tile, 0, K);
    } else {
        mlp_gemm_tile<MlpSmall>(X2, W2, bias2, nullptr, Y2, M2, N, K, 0, 1, relu, tile - tiles_1,
                                0, K);
    }
}

extern "C" __global__ void __launch_bounds__(MLP_THREADS)
mlp_gemm_partial(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ P,
                 int M, int N, int K, int trans_a, int trans_b, int splits) {
    using T = MlpSmall;
    const int tiles = ((M + T::BM - 1) / T::BM) * ((N + T::BN - 1) / T::BN);
    const int split = blockIdx.x / tiles, tile = blockIdx.x - split * tiles;
    const int chunk = ((K + splits - 1) / splits + MLP_BK - 1) / MLP_BK * MLP_BK;
    const int k_begin = split * chunk, k_end = min(K, k_begin + chunk);
    mlp_gemm_tile<T>(A, B, nullptr, nullptr, P + static_cast<size_t>(split) * M * N, M, N, K,
                     trans_a, trans_b, 0, tile, k_begin, k_end);
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
              int relu) {
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
                   int relu) {
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

// Columns [block * MLP_BG_COLS, +MLP_BG_COLS) of db = sum_m dY[m, :] by a block of
// MLP_BG_COLS x MLP_BG_LANES threads (see mlp_bias_grad).
__device__ __forceinline__ void bias_grad_block(const float* __restrict__ dY, float* __restrict__ db,
                                                int M, int N, int block) {
    __shared__ float part[MLP_BG_LANES][MLP_BG_COLS + 1];
    const int c = threadIdx.x % MLP_BG_COLS, lane = threadIdx.x / MLP_BG_COLS;
    const int n = block * MLP_BG_COLS + c;
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
               float* __restrict__ db, int MN, int splits, int M, int N) {
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
mlp_bias_grad(const float* __restrict__ dY, float* __restrict__ db, int M, int N) {
    bias_grad_block(dY, db, M, N, blockIdx.x);
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
