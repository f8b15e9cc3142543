// common.cuh — included first by every cuda/<stem>.cu.
//
// Build information: every cubin carries these __constant__ ints so the runtime can read back
// what the module was compiled with and refuse a cubin whose build disagrees with the config.
//   alpha_rl_abi            version of the kernel-argument conventions below (bump on a change)
//   alpha_rl_axis_<DEFINE>  the value of each build axis the stem is compiled for (ALPHA_RL_AXIS)
#pragma once

#include <stdint.h>

#define ALPHA_RL_ABI 1

// Every compile-time constant Python needs is exported by the cubin that defines it as
// `alpha_rl_const_<NAME>` (a 4-byte int): the contract test compares each with the one Python
// table, src/alpha_rl/abi.py, so no Python copy can drift from cuda/.
#define ALPHA_RL_EXPORT(NAME) \
    extern "C" __device__ __constant__ int alpha_rl_const_##NAME = static_cast<int>(NAME)

// A build axis (a -D define a stem is compiled once per value of, declared with its values in
// alpha_rl/kernels/): exported as `alpha_rl_axis_<DEFINE>` so the loader and the contract test
// can check that a cubin was built for the variant its file name claims.
#define ALPHA_RL_AXIS(DEFINE) \
    extern "C" __device__ __constant__ int alpha_rl_axis_##DEFINE = static_cast<int>(DEFINE)

extern "C" __device__ __constant__ int alpha_rl_abi = ALPHA_RL_ABI;

// One thread per element of a 1-D launch: the launcher computes grid = ceil(n / blockDim.x).
__device__ __forceinline__ int global_index_1d() {
    return static_cast<int>(blockIdx.x) * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
}
