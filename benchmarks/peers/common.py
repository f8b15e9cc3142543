"""What every peer of the training step shares: the reference configuration, the book, timing.

The step every peer runs (the semantics of `torch_eager.Peer.step`, the reference): B envs over
the synthetic book of alpha_rl.market (seed 0), an H = 32 observation (horizon returns, spread,
two imbalances, position, unrealised PnL, peak distance, age, through a frozen tanh projection),
online and target MLPs 32 -> 256 -> 256 -> 3, epsilon-greedy acting, FLAT/LONG/SHORT targets
filled at the touch, reward = realised PnL minus fees, HER (peak tracking, backward injection at a
close when the peak PnL beat THRESHOLD x the realised one, a ring of closed trades judged after
LOOKAHEAD steps for forward injection), PER over N = 2^20 slots (priority^ALPHA, IS weights with
BETA, new priorities from |TD|), a double-DQN Huber loss on a batch of 512, Adam, global-norm
clipping at 10, a hard target sync every 1000 steps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import numpy as np

H, HIDDEN, BATCH, LOG2, A = 32, 256, 512, 20, 3
HORIZONS = (1, 4, 16, 64)
LOT_MULT, FEE, ALPHA, BETA, GAMMA = 100.0, 0.5, 0.6, 0.4, 0.99
THRESHOLD, BOOST, LOOKAHEAD, RING = 1.5, 3.0, 50, 65536
LR, CLIP, TARGET_PERIOD, EPS_STEPS, EPS_END = 3e-4, 10.0, 1000, 20000, 0.05
B1, B2, ADAM_EPS = 0.9, 0.999, 1e-8  # torch.optim.Adam's defaults
WARMUP, STEPS, REPEATS = 300, 100, 7  # steps before timing; steps per sample; samples


def ring_for(B: int) -> int:
    """Closed trades a ring must hold so that none is overwritten before it is judged: the
    smallest power of two >= B x (LOOKAHEAD + 1), as the pipeline's her.closed_ring=auto. (RING,
    the torch peers' fixed ring, holds that only up to 1,285 envs; above it their forward HER
    judges only what survives.)"""
    return 1 << (B * (LOOKAHEAD + 1) - 1).bit_length()


def book() -> dict[str, np.ndarray | float | int]:
    """The synthetic book every peer trades (float32, prices as offsets from the first mid)."""
    from omegaconf import OmegaConf

    from alpha_rl import paths
    from alpha_rl.market.config import market_config
    from alpha_rl.market.synthetic import synthetic_waves

    node = OmegaConf.load(paths.conf_dir() / "market" / "synthetic_waves.yaml")
    node.seed = 0
    b = synthetic_waves(market_config(node), 0)
    ref = float(b.mid[0])
    f32 = lambda x: np.asarray(x, dtype=np.float32)  # noqa: E731
    bid, ask = f32(b.bid_px[:, 0] - ref), f32(b.ask_px[:, 0] - ref)
    return {"bid": bid, "ask": ask, "mid": (bid + ask) / np.float32(2), "bsz": f32(b.bid_sz),
            "asz": f32(b.ask_sz), "tick": float(b.tick_size), "T": int(b.T)}  # fmt: skip


def median_us(run_steps: Callable[[int], None], sync: Callable[[], None]) -> float:
    """Median µs per step of `run_steps(STEPS)` over REPEATS samples, after WARMUP steps."""
    run_steps(WARMUP)
    sync()
    samples = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        run_steps(STEPS)
        sync()
        samples.append((time.perf_counter() - t0) * 1e6 / STEPS)
    return statistics.median(samples)


def arguments(doc: str, precisions: tuple[str, ...] = ("float32", "tf32")) -> argparse.Namespace:
    """The command line every peer takes: --envs, --precision, --json (rows of the table)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[4096, 65536])
    parser.add_argument("--precision", nargs="+", default=list(precisions))
    parser.add_argument("--json", help="append the rows {peer, envs, precision, us} here")
    return parser.parse_known_args()[0]


def report(rows: list[dict], path: str | None) -> None:
    """Print the rows as a table and add them to the JSON list at `path` (if given)."""
    print("| peer | B | precision | µs/step |\n|---|---|---|---|")
    for r in rows:
        us = r["us"] if isinstance(r["us"], str) else f"{r['us']:.1f}"
        print(f"| {r['peer']} | {r['envs']} | {r['precision']} | {us} |", flush=True)
    if path:
        try:
            with open(path) as f:
                old = json.load(f)
        except FileNotFoundError:
            old = []
        with open(path, "w") as f:
            json.dump(old + rows, f, indent=1)
