"""The Q-network's parameter layout (DESIGN §7): one flat float32 vector of each dense layer's W
then b, its initial values, the noisy layers' initial scales and noise units, views of it per
layer, and which gemm kernel runs a product of a given shape."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from alpha_rl.abi import ENV_ACTIONS
from alpha_rl.kernels import mlp
from alpha_rl.rng import Stream, draw_uniform

F32, I32 = np.float32, np.int32
ACTIONS = ENV_ACTIONS["ACTIONS"]  # FLAT, LONG, SHORT (cuda/env.cuh)
SPLIT_ROWS, MAX_SPLITS = 128, 8  # split-K of the weight gradients: rows per split, most splits
# products that fill WIDE_MIN_BLOCKS 128 x 128 tiles run on mlp_gemm_128, whatever K (at K = 32
# its cp.async stages match the 32 x 32 tile: 65536 x 256 x 32 ~91 vs 92.4 µs in the step), and
# those that fill as many 64 x 64 tiles over K >= WIDE_MIN_K on mlp_gemm_64 (H200,
# benchmarks/gemm_shapes.py: 4096 x 256 x 256 26.8 µs wide vs 41.2 µs on 32 x 32 tiles;
# 4096 x 256 x 32 9.3 µs vs 7.8 µs: with K = 32 the 64 tile's longer set-up does not pay)
WIDE_MIN_BLOCKS, WIDE_MIN_K = 128, 128


def gemm_kind(M: int, N: int, K: int) -> str:
    """Which gemm runs an [M, N] output over K: "gemm_128", "gemm_64" or "gemm" (all three add
    in the same order, so the choice changes the speed, never the result)."""
    if mlp.tiles(M, N, mlp.HUGE_TILE) >= WIDE_MIN_BLOCKS:
        return "gemm_128"
    if K >= WIDE_MIN_K and mlp.tiles(M, N, mlp.WIDE_TILE) >= WIDE_MIN_BLOCKS:
        return "gemm_64"
    return "gemm"


@dataclass(frozen=True)
class Layer:
    """One dense layer's place in the flat parameter vector: W [n_out, n_in] then b [n_out]."""

    w: int
    b: int
    n_in: int
    n_out: int


@dataclass(frozen=True)
class NetLayout:
    """obs_dim -> hidden... -> out_dim, ReLU between. out_dim = atoms x A, or atoms x (A + 1)
    with the dueling head; atom-major (C51: logits[row, atom, action]; atoms = 1: Q itself)."""

    layers: tuple[Layer, ...]
    actions: int
    dueling: bool
    atoms: int = 1

    @classmethod
    def build(
        cls, obs_dim: int, hidden: tuple[int, ...], actions: int, dueling: bool, atoms: int = 1
    ) -> NetLayout:
        widths = (obs_dim, *hidden, atoms * (actions + 1 if dueling else actions))
        layers, offset = [], 0
        for n_in, n_out in itertools.pairwise(widths):
            layers.append(Layer(offset, offset + n_in * n_out, n_in, n_out))
            offset += n_in * n_out + n_out
        return cls(tuple(layers), actions, dueling, atoms)

    @property
    def size(self) -> int:
        last = self.layers[-1]
        return last.b + last.n_out

    @property
    def outputs(self) -> int:
        """Values a row's forward gives: atoms x A (Q [A] when atoms = 1)."""
        return self.atoms * self.actions


def init_params(layout: NetLayout, seed: int) -> np.ndarray:
    """W and b of each layer ~ U(-1/sqrt(n_in), 1/sqrt(n_in)) from the PARAMS stream (float32)."""
    u = draw_uniform(seed, Stream.PARAMS, np.arange(layout.size, dtype=np.uint64))
    u = u.astype(np.float64)
    theta = np.empty(layout.size, F32)
    for layer in layout.layers:
        stop = layer.b + layer.n_out
        theta[layer.w : stop] = ((2 * u[layer.w : stop] - 1) / np.sqrt(layer.n_in)).astype(F32)
    return theta


def init_sigma(layout: NetLayout, sigma0: float) -> np.ndarray:
    """Noisy layers' initial scales: sigma0 / sqrt(n_in) for each layer's W and b (float32)."""
    sigma = np.empty(layout.size, F32)
    for layer in layout.layers:
        sigma[layer.w : layer.b + layer.n_out] = F32(sigma0 / np.sqrt(layer.n_in))
    return sigma


def noise_units(layout: NetLayout) -> tuple[np.ndarray, np.ndarray, int]:
    """Each parameter's noise units (cuda/noisy.cu): unit_in [P] (-1 for a bias), unit_out [P],
    and the number of units N (each layer's n_in inputs, then its n_out outputs)."""
    unit_in = np.empty(layout.size, I32)
    unit_out = np.empty(layout.size, I32)
    first = 0
    for ly in layout.layers:
        outs = first + ly.n_in + np.arange(ly.n_out, dtype=I32)
        unit_in[ly.w : ly.b] = np.tile(first + np.arange(ly.n_in, dtype=I32), ly.n_out)
        unit_out[ly.w : ly.b] = np.repeat(outs, ly.n_in)
        unit_in[ly.b : ly.b + ly.n_out] = -1
        unit_out[ly.b : ly.b + ly.n_out] = outs
        first += ly.n_in + ly.n_out
    return unit_in, unit_out, first


def layer_views(theta: Any, layout: NetLayout) -> list[tuple[Any, Any]]:
    """(W, b) views into a flat parameter (or gradient) vector, one pair per layer."""
    return [(theta[ly.w : ly.b], theta[ly.b : ly.b + ly.n_out]) for ly in layout.layers]
