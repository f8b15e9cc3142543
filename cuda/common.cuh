// common.cuh — included first by every cuda/<stem>.cu.
//
// Build information: every cubin carries these __constant__ ints so the runtime can read back
// what the module was compiled with and refuse a cubin whose build disagrees with the config.
//   alpha_rl_abi            version of the kernel-argument conventions below (bump on a change)
//   alpha_rl_axis_<DEFINE>  the value of each build axis the stem is compiled for (ALPHA_RL_AXIS)
#pragma once

#include <stdint.h>

#define ALPHA_RL_ABI 2

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

// The agent axis. A launch steps the agents of a session side by side: blockIdx.y is the agent,
// and every array argument holds one slice per agent, agent a's at a * stride elements from the
// pointer passed (a stride of 0: one array every agent shares, e.g. the market's prices). The
// launcher passes each pointer argument's stride, in declaration order, as the kernel's last
// parameter; each kernel's first statement moves its pointers onto its agent's slice, so the rest
// of a kernel is written for one agent. A launch of one agent passes gridDim.y = 1 and strides 0.
#define ALPHA_RL_AGENT_SLOTS 32  // at most this many pointer arguments a kernel

struct AgentAxis {
    long long stride[ALPHA_RL_AGENT_SLOTS];  // elements between agents, per pointer argument
};

template <class... Pointers>
__device__ __forceinline__ void agent_slice(const AgentAxis& axis, Pointers&... pointers) {
    static_assert(sizeof...(Pointers) <= ALPHA_RL_AGENT_SLOTS, "too many pointer arguments");
    const long long agent = blockIdx.y;
    int k = 0;
    ((pointers += agent * axis.stride[k++]), ...);
}
