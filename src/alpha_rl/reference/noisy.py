"""Oracle of cuda/noisy.cu: factorised Gaussian noisy layers (DESIGN §7).

The contract is the kernel file's header. The draws are the shared counter RNG's, bit for bit;
the Gaussian's log and cos are alpha_rl.portable's (float64, rounded to float32 once, the same on
every CPU), which may round an ulp away from the device's logf and cosf, so a composed weight
agrees with the GPU's to about one part in 10^6.
"""

from __future__ import annotations

import numpy as np

from alpha_rl.abi import CONSTANTS
from alpha_rl.portable import cos, log
from alpha_rl.reference.rng import Stream, rng_uniform

F32 = np.float32
ROLE_ACT, ROLE_ONLINE, ROLES = (
    CONSTANTS["noisy"][f"NOISY_{k}"] for k in ("ROLE_ACT", "ROLE_ONLINE", "ROLES")
)
TWO_PI = F32(6.28318530717958647692)


def noise_unit(seed: int, draw: int, N: int, unit: np.ndarray) -> np.ndarray:
    """f(g) = sign(g) sqrt(|g|) of the Gaussian g of `unit` (array) in draw `draw`."""
    index = np.uint64(2) * (np.uint64(draw) * np.uint64(N) + unit.astype(np.uint64))
    u1 = rng_uniform(seed, Stream.NOISE, index)
    u2 = rng_uniform(seed, Stream.NOISE, index + np.uint64(1))
    radius = np.sqrt(F32(-2) * log(F32(1) - u1))
    g = radius * cos(TWO_PI * u2)
    return np.copysign(np.sqrt(np.abs(g)), g).astype(F32)


def parameter_noise(seed: int, draw: int, N: int, unit_in: np.ndarray, unit_out: np.ndarray):
    """Each parameter's noise f(g_out) f(g_in) (a bias: f(g_out)) in draw `draw`."""
    eps = noise_unit(seed, draw, N, unit_out)
    weight = unit_in >= 0
    eps[weight] = eps[weight] * noise_unit(seed, draw, N, unit_in[weight])
    return eps


def noisy_compose(theta, target, unit_in, unit_out, counters, run_seed, weights, noise, P, N, nets,
                  word, role) -> None:  # fmt: skip
    """weights = mu + sigma * noise per net (theta; with nets = 2, target too) of draw
    3 counters[word] + role (+ 1 for the target); noise = net 0's."""
    P, N = int(P), int(N)
    base = ROLES * int(counters[int(word)]) + int(role)
    for net, params in enumerate((theta, target)[: int(nets)]):
        eps = parameter_noise(int(run_seed[0]), base + net, N, unit_in[:P], unit_out[:P])
        weights[net * P : (net + 1) * P] = params[:P] + params[P : 2 * P] * eps
        if net == 0 and noise is not None:
            noise[:P] = eps


def noisy_grad(noise, grad, P) -> None:
    """grad[P:2P] = grad[:P] * noise (the gradient wrt sigma from the one wrt the weights)."""
    P = int(P)
    grad[P : 2 * P] = grad[:P] * noise[:P]
