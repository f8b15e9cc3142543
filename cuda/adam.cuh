// adam.cuh — one parameter's Adam step and its target copy's sync, shared by dqn_adam and
// aux_alpha_update.
#pragma once

// Bias-corrected Adam on parameter k with gradient g at step t (>= 1): m[k], v[k] and param[k]
// in place (param -= lr m_hat / (sqrt(v_hat) + eps)); returns the new param[k].
__device__ __forceinline__ float adam_step(float g, float t, float* __restrict__ m,
                                           float* __restrict__ v, float* __restrict__ param, int k,
                                           float lr, float beta1, float beta2, float eps) {
    const float mk = beta1 * m[k] + (1.0f - beta1) * g;
    const float vk = beta2 * v[k] + (1.0f - beta2) * g * g;
    m[k] = mk;
    v[k] = vk;
    const float m_hat = mk / (1.0f - powf(beta1, t));
    const float v_hat = vk / (1.0f - powf(beta2, t));
    const float p = param[k] - lr * m_hat / (sqrtf(v_hat) + eps);
    param[k] = p;
    return p;
}

// Target k after its parameter's update to p: Polyak (tau > 0), else a hard copy when the step is
// a multiple of `period`.
__device__ __forceinline__ void target_sync(float p, float* __restrict__ target, int k, float tau,
                                            unsigned long long step, int period) {
    if (tau > 0.0f) {
        target[k] = tau * p + (1.0f - tau) * target[k];
    } else if (step % static_cast<unsigned long long>(period) == 0ull) {
        target[k] = p;
    }
}
