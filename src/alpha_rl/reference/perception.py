"""Oracle of cuda/perception.cu: the observation h [B, H] of each env.

Features x [B, F], F = K + 7 (K = len(horizons)), in float32 with one rounding per operation:
    x[k]   = (mid_t - mid_{max(t - h_k, s_t)}) / tick / sqrt(h_k),  s_t = session_first[t]
    x[K]   = (ask0 - bid0) / tick - 1
    x[K+1] = level-0 size imbalance (b - a) / (b + a);  x[K+2] the same over all levels
    x[K+3] = d;  x[K+4] = d (mid - entry_px) / tick * inv_pnl_scale
    x[K+5] = trade_len * inv_time_scale;  x[K+6] = d (peak_mid - mid) / tick * inv_pnl_scale
    (the last three 0 when flat). h = x without a projection, else
    h = tanh(proj_b + proj_w @ x) with the sum taken in order of the features.
"""

from __future__ import annotations

import numpy as np

from alpha_rl.abi import PERCEPTION
from alpha_rl.portable import cos, log1p, tanh
from alpha_rl.reference.rng import Stream, rng_uniform

F32 = np.float32
# spread, two imbalances, direction, unrealised PnL, time in trade, peak gap (cuda/perception.cu)
EXTRA_FEATURES = PERCEPTION["PERCEPTION_EXTRA_FEATURES"]
MAX_FEATURES = PERCEPTION["PERCEPTION_MAX_FEATURES"]


def feature_count(num_horizons: int) -> int:
    """F for K return horizons."""
    return num_horizons + EXTRA_FEATURES


def projection_weights(seed: int, features: int, hidden: int) -> tuple[np.ndarray, np.ndarray]:
    """Frozen random projection: W [hidden * features] ~ N(0, 1/features) by Box-Muller on the
    INIT stream, bias [hidden] = 0. Both float32."""
    count = hidden * features
    u1 = rng_uniform(seed, Stream.INIT, np.arange(count, dtype=np.uint64)).astype(np.float64)
    u2 = rng_uniform(seed, Stream.INIT, np.arange(count, 2 * count, dtype=np.uint64))
    normal = np.sqrt(-2.0 * log1p(-u1)) * cos(2.0 * np.pi * u2.astype(np.float64))
    weights = (normal / np.sqrt(features)).astype(F32)
    return weights, np.zeros(hidden, dtype=F32)


def _mid(bid_px: np.ndarray, ask_px: np.ndarray, t: np.ndarray, L: int) -> np.ndarray:
    return F32(0.5) * (bid_px[t * L] + ask_px[t * L])


def _imbalance(bid_size: np.ndarray, ask_size: np.ndarray) -> np.ndarray:
    total = bid_size + ask_size
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > 0, (bid_size - ask_size) / total, F32(0)).astype(F32)


def features(
    bid_px, ask_px, bid_sz, ask_sz, session_first, cursor, pos, trade_len, entry_px, peak_mid,
    horizons, n, L, tick, inv_pnl_scale, inv_time_scale,
) -> np.ndarray:  # fmt: skip
    """The [n, F] float32 feature matrix (see the module docstring)."""
    t, d = cursor[:n], pos[:n]
    first = session_first[t]
    tick, inv_pnl, inv_time = F32(tick), F32(inv_pnl_scale), F32(inv_time_scale)
    mid = _mid(bid_px, ask_px, t, L)
    K = len(horizons)
    x = np.zeros((n, feature_count(K)), dtype=F32)
    for k, hk in enumerate(horizons):
        past = _mid(bid_px, ask_px, np.maximum(t - int(hk), first), L)
        x[:, k] = ((mid - past) / tick) / np.sqrt(F32(hk))
    x[:, K] = (ask_px[t * L] - bid_px[t * L]) / tick - F32(1)
    x[:, K + 1] = _imbalance(bid_sz[t * L], ask_sz[t * L])
    bid_total, ask_total = np.zeros(n, F32), np.zeros(n, F32)
    for level in range(L):  # in order, as the kernel adds them
        bid_total = bid_total + bid_sz[t * L + level]
        ask_total = ask_total + ask_sz[t * L + level]
    x[:, K + 2] = _imbalance(bid_total, ask_total)
    dir_ = d.astype(F32)
    in_trade = d != 0
    x[:, K + 3] = dir_
    x[:, K + 4] = np.where(in_trade, ((dir_ * (mid - entry_px[:n])) / tick) * inv_pnl, F32(0))
    x[:, K + 5] = np.where(in_trade, trade_len[:n].astype(F32) * inv_time, F32(0))
    x[:, K + 6] = np.where(in_trade, ((dir_ * (peak_mid[:n] - mid)) / tick) * inv_pnl, F32(0))
    return x


def perception_observe(
    bid_px, ask_px, bid_sz, ask_sz, session_first, cursor, pos, trade_len, entry_px, peak_mid,
    horizons, proj_w, proj_b, isv, h,
    n, T, L, K, H, tick, scales_idx,
) -> None:  # fmt: skip
    """h[b*H + j] for b < n: the features, or their frozen tanh projection (1 / pnl_scale_ticks
    and 1 / time_scale_steps at isv[scales_idx + k])."""
    n, L, H = int(n), int(L), int(H)
    inv_pnl_scale, inv_time_scale = isv[scales_idx], isv[scales_idx + 1]
    if n <= 0:
        return
    x = features(bid_px, ask_px, bid_sz, ask_sz, session_first, cursor, pos, trade_len,
                 entry_px, peak_mid, horizons[: int(K)], n, L, tick, inv_pnl_scale,
                 inv_time_scale)  # fmt: skip
    out = h[: n * H].reshape(n, H)
    if proj_w is None:
        out[:] = x[:, :H]
        return
    F = x.shape[1]
    weights = proj_w[: H * F].reshape(H, F)
    acc = np.broadcast_to(proj_b[:H], (n, H)).astype(F32)
    for f in range(F):  # in order of the features, as the kernel sums them
        acc = acc + weights[:, f] * x[:, f : f + 1]
    out[:] = tanh(acc)
