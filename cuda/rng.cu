// rng.cu — bulk draws from the shared counter-based RNG (rng.cuh).
//
// rng_fill: for i in [0, n): out_u32[i] = rng_u32(seed, rng_stream, offset + i),
//                            out_uniform[i] = rng_uniform(seed, rng_stream, offset + i).
//   out_u32      [n] uint32, written
//   out_uniform  [n] float32, written
// Used for the parity test against reference/rng.py and for host-side seeding of device buffers.
#include "common.cuh"
#include "rng.cuh"

extern "C" __global__ void rng_fill(uint32_t* __restrict__ out_u32, float* __restrict__ out_uniform,
                                    int n, unsigned long long seed, unsigned int rng_stream,
                                    unsigned long long offset, const AgentAxis agent_axis) {
    agent_slice(agent_axis, out_u32, out_uniform);
    const int i = global_index_1d();
    if (i >= n) return;
    const uint32_t bits = rng_u32(seed, rng_stream, offset + static_cast<uint64_t>(i));
    out_u32[i] = bits;
    out_uniform[i] = rng_uniform_from_u32(bits);
}
