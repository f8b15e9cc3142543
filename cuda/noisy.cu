// noisy.cu — factorised Gaussian noisy layers (DESIGN §7; Fortunato et al. 2018, Rainbow's
// exploration): every dense layer's W and b are mu + sigma * noise, the noise drawn afresh from
// the counter RNG for each act call and each learner update, so acting needs no epsilon.
//
// A network's parameters theta [2P] are the means mu = theta[0, P) (the layout of a plain
// network: W [n_out, n_in] then b [n_out] per layer) and the scales sigma = theta[P, 2P) in the
// same layout. Noise units: each layer's n_in inputs and n_out outputs own one unit each, N units
// in all; parameter k draws on units unit_in[k] (-1 for a bias) and unit_out[k].
//
// noise_unit(seed, d, u) of draw d, unit u: g = sqrt(-2 ln(1 - u1)) cos(2 pi u2) (Box-Muller),
//   u1, u2 = rng_uniform(seed, NOISE, 2 (d N + u) + {0, 1}); f(g) = sign(g) sqrt(|g|).
//   A parameter's noise is f(g_out) f(g_in) for a weight, f(g_out) for a bias.
// noisy_compose (a thread per parameter of each net): draw d = 3 c + role, c = counters[word]
//   (the acting step for act calls, Adam's step for updates: both read before their kernels
//   advance them). weights[k] = mu[k] + sigma[k] * noise_k for net 0 (theta, role) and, with
//   nets = 2, weights[P + k] the same for net 1 (target, role + 1); noise[k] = net 0's noise_k
//   (NULL: not kept). Roles: 0 acting, 1 the online net of an update, 2 its target net.
// noisy_grad (a thread per parameter): grad[P + k] = grad[k] * noise[k]: with grad[0, P) the
//   gradient wrt the noisy weights (= wrt mu), the gradient wrt sigma.
#include "common.cuh"

#include "rng.cuh"

#define NOISY_ROLE_ACT 0
#define NOISY_ROLE_ONLINE 1
#define NOISY_ROLES 3  // draws per counter value: acting, online, target
ALPHA_RL_EXPORT(NOISY_ROLE_ACT);
ALPHA_RL_EXPORT(NOISY_ROLE_ONLINE);
ALPHA_RL_EXPORT(NOISY_ROLES);

__device__ __forceinline__ float noise_unit(unsigned long long seed, unsigned long long draw,
                                            int N, int unit) {
    const unsigned long long index = 2ull * (draw * static_cast<unsigned long long>(N) + unit);
    const float u1 = rng_uniform(seed, RNG_STREAM_NOISE, index);
    const float u2 = rng_uniform(seed, RNG_STREAM_NOISE, index + 1ull);
    const float radius = sqrtf(__fmul_rn(-2.0f, logf(__fsub_rn(1.0f, u1))));
    const float g = __fmul_rn(radius, cosf(__fmul_rn(6.28318530717958647692f, u2)));
    return copysignf(sqrtf(fabsf(g)), g);
}

extern "C" __global__ void noisy_compose(const float* __restrict__ theta,
                                         const float* __restrict__ target,
                                         const int* __restrict__ unit_in,
                                         const int* __restrict__ unit_out,
                                         const unsigned long long* __restrict__ counters,
                                         const unsigned long long* __restrict__ run_seed,
                                         float* __restrict__ weights, float* __restrict__ noise,
                                         int P, int N, int nets,
                                         int word, int role, const AgentAxis agent_axis) {
    agent_slice(agent_axis, theta, target, unit_in, unit_out, counters, run_seed, weights, noise);
    const unsigned long long seed = run_seed[0];  // the agent's own
    const int e = global_index_1d();
    if (e >= nets * P) return;
    const int net = e / P, k = e - net * P;
    const float* params = net == 0 ? theta : target;
    const unsigned long long draw =
        static_cast<unsigned long long>(NOISY_ROLES) * counters[word] + role + net;
    const int in = unit_in[k];
    float eps = noise_unit(seed, draw, N, unit_out[k]);
    if (in >= 0) eps = __fmul_rn(eps, noise_unit(seed, draw, N, in));
    weights[e] = __fadd_rn(params[k], __fmul_rn(params[P + k], eps));
    if (net == 0 && noise != nullptr) noise[k] = eps;
}

extern "C" __global__ void noisy_grad(const float* __restrict__ noise, float* __restrict__ grad,
                                      int P, const AgentAxis agent_axis) {
    agent_slice(agent_axis, noise, grad);
    const int k = global_index_1d();
    if (k < P) grad[P + k] = __fmul_rn(grad[k], noise[k]);
}
