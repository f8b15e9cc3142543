// common.cuh — included first by every cuda/<stem>.cu.
//
// Build information: every cubin carries these __constant__ ints so the runtime can read back
// what the module was compiled with and refuse a cubin whose layout disagrees with the config.
//   alpha_rl_abi        version of the kernel-argument conventions below (bump on a change)
//   alpha_rl_rc_stride  reward components per sample (RC_STRIDE), 0 for stems built without it
#pragma once

#include <stdint.h>

#define ALPHA_RL_ABI 1

#ifdef RC_STRIDE
#if RC_STRIDE != 6 && RC_STRIDE != 7
#error "RC_STRIDE must be 6 or 7"
#endif
#define ALPHA_RL_RC_STRIDE_BUILT RC_STRIDE
#else
#define ALPHA_RL_RC_STRIDE_BUILT 0
#endif

// Every compile-time constant Python needs is exported by the cubin that defines it as
// `alpha_rl_const_<NAME>` (a 4-byte int): the contract test compares each with the one Python
// table, alpha_rl/reference/abi.py, so no Python copy can drift from cuda/.
#define ALPHA_RL_EXPORT(NAME) \
    extern "C" __device__ __constant__ int alpha_rl_const_##NAME = static_cast<int>(NAME)

extern "C" __device__ __constant__ int alpha_rl_abi = ALPHA_RL_ABI;
extern "C" __device__ __constant__ int alpha_rl_rc_stride = ALPHA_RL_RC_STRIDE_BUILT;

// One thread per element of a 1-D launch: the launcher computes grid = ceil(n / blockDim.x).
__device__ __forceinline__ int global_index_1d() {
    return static_cast<int>(blockIdx.x) * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
}
