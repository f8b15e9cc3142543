"""The synthetic wave market: a seeded L-level book whose mid is trending waves plus noise.

Latent price, in ticks: start_price / tick_size + trend_t + noise_ticks * N(0, 1) (the noise does
not accumulate). The trend is a sequence of waves w = 0, 1, ...: length n_w ~ U{wave_len}; flat
with probability p_flat, else up with P(up) = logistic(-level_w / revert_ticks), level_w being
the trend (ticks away from start_price) when the wave begins, so the series reverts toward
start_price; a trending wave moves amp_w ~ U(wave_amp) ticks, spread linearly over its ticks.

Quotes: spread s_t in {1, 2, 3} ticks with probabilities spread_probs; best bid
round(latent - s_t / 2), best ask = bid + s_t; each deeper level one tick further out.
Sizes (lots): I_t = clip(imbalance_signal * sign(mid_{t+1} - mid_t) + imbalance_noise * N(0, 1),
+-imbalance_clip) (sign 0 on the last tick); level 0 is base * (1 + I_t) on the bid and
base * (1 - I_t) on the ask, base ~ U(depth_size); deeper levels ~ U(depth_size); all rounded to
whole lots, at least 1.

Randomness: uniform k of item i (a tick or a wave) is draw_uniform(seed, Stream.MARKET,
i * K + k), K draw kinds in all; normals come from Box-Muller. The book depends on no NumPy
generator, and the first T ticks of a longer series equal the shorter series (but for the
level-0 sizes of its last tick, which see the next move).
"""

from __future__ import annotations

import numpy as np

from alpha_rl.errors import MarketDataError
from alpha_rl.market.book import Book
from alpha_rl.market.config import SyntheticWavesConfig
from alpha_rl.portable import cos, log1p, sin, tanh
from alpha_rl.rng import Stream, draw_uniform

# draw kinds: per wave ...
_WAVE_LEN, _WAVE_FLAT, _WAVE_DIR, _WAVE_AMP = 0, 1, 2, 3
# ... and per tick (Box-Muller pair -> latent noise and imbalance noise; deeper sizes last)
_NORMAL_R, _NORMAL_THETA, _SPREAD, _DEPTH0, _DEEPER = 4, 5, 6, 7, 8


def synthetic_waves(cfg: SyntheticWavesConfig, seed: int) -> Book:
    """A book of cfg.ticks ticks and cfg.levels levels drawn from (seed, Stream.MARKET)."""
    T, L = cfg.ticks, cfg.levels
    kinds = _DEEPER + 2 * (L - 1)
    draw = _Draws(seed, kinds)
    z_latent, z_imbalance = draw.normal_pair(T)
    trend = _wave_trend(cfg, draw, T)
    latent = cfg.start_price / cfg.tick_size + trend + cfg.noise_ticks * z_latent
    spread = 1 + np.searchsorted(
        np.cumsum(cfg.spread_probs)[:-1], draw.uniform(T, _SPREAD), "right"
    )
    bid0 = np.floor(latent - spread / 2 + 0.5)
    deepest = float(bid0.min()) - (L - 1)
    if deepest < 1:
        raise MarketDataError(
            f"synthetic_waves(seed={seed}): a bid fell to {deepest * cfg.tick_size:.6g} USD; "
            "raise market.start_price or lower market.wave_amp / market.revert_ticks"
        )
    offsets = np.arange(L, dtype=np.float64)
    bid_ticks = bid0[:, None] - offsets
    ask_ticks = (bid0 + spread)[:, None] + offsets
    bid_sz, ask_sz = _sizes(cfg, draw, 2 * bid0 + spread, z_imbalance)
    return Book(
        bid_px=bid_ticks * cfg.tick_size,
        ask_px=ask_ticks * cfg.tick_size,
        bid_sz=bid_sz,
        ask_sz=ask_sz,
        tick_size=cfg.tick_size,
        source=f"synthetic_waves(seed={seed})",
    )


class _Draws:
    """Uniforms and normals of one seed, addressed by (item, kind) on Stream.MARKET."""

    def __init__(self, seed: int, kinds: int) -> None:
        self.seed, self.kinds = int(seed), kinds

    def uniform(self, n: int, kind: int | np.ndarray) -> np.ndarray:
        """[n] (or [n, len(kind)]) float64 uniforms in [0, 1) of items 0..n-1."""
        items = np.arange(n, dtype=np.uint64) * np.uint64(self.kinds)
        if np.ndim(kind):
            index = items[:, None] + np.asarray(kind, dtype=np.uint64)[None, :]
        else:
            index = items + np.uint64(kind)
        return draw_uniform(self.seed, Stream.MARKET, index).astype(np.float64)

    def normal_pair(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Two independent [n] standard normals (Box-Muller; 1 - u is in (0, 1]: log is finite)."""
        radius = np.sqrt(-2.0 * log1p(-self.uniform(n, _NORMAL_R)))
        theta = 2.0 * np.pi * self.uniform(n, _NORMAL_THETA)
        return radius * cos(theta), radius * sin(theta)


def _wave_trend(cfg: SyntheticWavesConfig, draw: _Draws, T: int) -> np.ndarray:
    """[T] float64: the trend in ticks away from start_price (0 at tick 0)."""
    lo, hi = cfg.wave_len
    most = -(-T // lo)  # enough waves to cover T ticks, each at least lo long
    lengths = lo + np.floor(draw.uniform(most, _WAVE_LEN) * (hi - lo + 1)).astype(np.int64)
    count = int(np.searchsorted(np.cumsum(lengths), T)) + 1
    lengths = lengths[:count]
    amp_lo, amp_hi = cfg.wave_amp
    amps = amp_lo + draw.uniform(count, _WAVE_AMP) * (amp_hi - amp_lo)
    flat = draw.uniform(count, _WAVE_FLAT) < cfg.p_flat
    signs = _directions(flat, draw.uniform(count, _WAVE_DIR), amps, cfg.revert_ticks)
    steps = np.repeat(signs * amps / lengths, lengths)[: T - 1]
    return np.concatenate(([0.0], np.cumsum(steps)))


def _directions(
    flat: np.ndarray, u_dir: np.ndarray, amps: np.ndarray, revert_ticks: float
) -> np.ndarray:
    """[W] float64 in {-1, 0, +1}: each wave's direction, biased back toward start_price."""
    signs = np.zeros(len(amps))
    level = 0.0
    for w, (is_flat, u, amp) in enumerate(
        zip(flat.tolist(), u_dir.tolist(), amps.tolist(), strict=True)
    ):
        if is_flat:
            continue
        p_up = 0.5 * (1.0 - float(tanh(level / (2.0 * revert_ticks))))  # logistic(-level/revert)
        signs[w] = 1.0 if u < p_up else -1.0
        level += signs[w] * amp
    return signs


def _sizes(
    cfg: SyntheticWavesConfig, draw: _Draws, mid2: np.ndarray, z_imbalance: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Bid and ask sizes [T, L] in whole lots; mid2 is twice the mid in ticks (an integer)."""
    T, L = cfg.ticks, cfg.levels
    lo, hi = cfg.depth_size
    move = np.append(np.sign(np.diff(mid2)), 0.0)
    clip = cfg.imbalance_clip
    imbalance = np.clip(
        cfg.imbalance_signal * move + cfg.imbalance_noise * z_imbalance, -clip, clip
    )
    base = lo + draw.uniform(T, _DEPTH0) * (hi - lo)
    bid_sz = np.empty((T, L))
    ask_sz = np.empty((T, L))
    bid_sz[:, 0] = base * (1.0 + imbalance)
    ask_sz[:, 0] = base * (1.0 - imbalance)
    if L > 1:
        deeper = lo + draw.uniform(T, _DEEPER + np.arange(2 * (L - 1))) * (hi - lo)
        bid_sz[:, 1:] = deeper[:, : L - 1]
        ask_sz[:, 1:] = deeper[:, L - 1 :]
    return _lots(bid_sz), _lots(ask_sz)


def _lots(size: np.ndarray) -> np.ndarray:
    return np.maximum(1.0, np.floor(size + 0.5))
