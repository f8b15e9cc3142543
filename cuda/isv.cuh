// isv.cuh — access to the ISV, the float32 slot vector of parameters and diagnostics.
//
// Kernels never hard-code a slot: the host passes each slot's index as an int argument (taken
// from the validated layout), and a negative index or a NULL ISV means "absent".
#pragma once

__device__ __forceinline__ float isv_read(const float* __restrict__ isv, int idx, float fallback) {
    return (isv != nullptr && idx >= 0) ? isv[idx] : fallback;
}
