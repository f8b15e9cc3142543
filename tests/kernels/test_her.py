"""HER on the cuda backend: the seed's scenarios, and random multi-step runs audited step by step
against the NumPy oracle (every output of every HER kernel, on the GPU's own inputs)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.her_scenarios import Stepper, build, wave_book
from tests.test_hindsight import (
    check_forward_fates,
    check_forward_table,
    check_forward_visits_the_oldest_live_claims_in_slot_order,
    check_inject_table,
    check_many_closes_in_one_step,
    check_track_accumulates_peak,
)

pytestmark = pytest.mark.gpu


def test_track_accumulates_peak_gpu(cuda_backend) -> None:
    check_track_accumulates_peak(cuda_backend)


def test_inject_fires_on_done_with_peak_gpu(cuda_backend) -> None:
    check_inject_table(cuda_backend)


def test_forward_injects_after_lookahead_gpu(cuda_backend) -> None:
    check_forward_table(cuda_backend)


def test_forward_visits_the_oldest_live_claims_in_slot_order_gpu(cuda_backend) -> None:
    check_forward_visits_the_oldest_live_claims_in_slot_order(cuda_backend)


def test_many_closes_in_one_step_gpu(cuda_backend) -> None:
    check_many_closes_in_one_step(cuda_backend)


@pytest.mark.parametrize("B", [1, 33, 1024, 5000])
@pytest.mark.parametrize("variant", ["'on'", "backward", "forward"])
def test_her_matches_reference_over_random_steps(cuda_backend, B: int, variant: str) -> None:
    # the ring must outlive the lookahead: with B envs closing every few steps, ~8 B slots
    ring = max(64, 1 << int(np.ceil(np.log2(8 * B))))
    overrides = [f"env.num_envs={B}", f"her={variant}", "her.threshold=1.0",
                 f"replay.capacity_log2={max(15, int(np.log2(ring)))}"]  # fmt: skip
    if variant != "backward":
        overrides += ["her.lookahead=4", f"her.closed_ring={ring}"]
    env, replay, hs, _, _ = build(cuda_backend, wave_book(T=300), overrides)
    gen = np.random.default_rng(B)
    run = Stepper(env, replay, hs, audit=True)
    for _ in range(60):  # crosses the end of the data: forced closes and restarts
        run.step(gen.choice([0, 1, 2], size=B, p=[0.3, 0.35, 0.35]))
    bad = {k: v for k, v in run.mismatches.items() if v}
    assert not bad, f"GPU and oracle differ: {bad}"
    totals = hs.totals()
    assert totals["steps"] == 60
    if variant != "forward":
        assert totals["backward"] > 0
    if variant != "backward" and B > 1:
        assert totals["forward"] > 0


@pytest.mark.parametrize(
    ("B", "ring", "lookaheads"),
    [(64, "64", (4,)), (64, "auto", (4, 12, 4)), (3000, "4096", (4,)), (3000, "auto", (4, 10, 4))],
)
def test_forward_fates_match_reference(cuda_backend, B: int, ring: str, lookaheads) -> None:
    # a ring that overflows (overwritten claims) and one that does not, wrapping around, with a
    # lookahead that grows and shrinks back (expired claims): every counter audited each step
    totals = check_forward_fates(cuda_backend, ring, lookaheads, audit=True, B=B)
    if ring == "auto":
        assert totals["overwritten"] == 0 and totals["expired"] > 0
    else:
        assert totals["overwritten"] > 0
