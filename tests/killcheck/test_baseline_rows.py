"""The kill check's INFO row per arm: held-out net PnL against the best trivial baseline on the
same windows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from alpha_rl.killcheck.cli import wanted
from tests.killcheck.store import EVALS, Store, rows, verdicts

ON_ROW = "held-out pnl: her=on vs the best trivial baseline in hindsight"
OFF_ROW = "held-out pnl: her=off vs the best trivial baseline in hindsight"


def baselines(buy: float) -> dict[str, np.ndarray]:
    """The trivial baselines of one run's evaluations: flat 0, buy-and-hold `buy`, sell-and-hold
    -`buy`, random -5000 (and a figure the check does not read)."""
    flat = np.zeros(EVALS.size)
    return {"eval/baseline/flat/pnl": flat, "eval/baseline/buy_and_hold/pnl": flat + buy,
            "eval/baseline/sell_and_hold/pnl": flat - buy,
            "eval/baseline/random/pnl": flat - 5000.0,
            "eval/baseline/random/turnover": flat + 300.0}  # fmt: skip


def test_each_arm_is_read_against_its_best_trivial_baseline(tmp_path: Path) -> None:
    """her=on makes ~50,000 and buy-and-hold 60,000 on its windows: every run loses to it by
    ~10,000; her=off's windows held 40,000: every run beats it. Neither row decides."""
    store = Store(tmp_path)
    store.ablation(evals=lambda her, seed: baselines(60_000.0),
                   base_evals=lambda seed: baselines(40_000.0))  # fmt: skip
    code, report = store.check(tmp_path)
    found = rows(report)
    on, off = found[ON_ROW], found[OFF_ROW]
    assert on["verdict"] == off["verdict"] == "INFO" and not on["required"]
    assert on["value"].startswith("mean margin -") and "0 of 5 runs beat" in on["value"]
    assert "(best: buy_and_hold x5)" in on["value"]
    assert np.mean(on["evidence"]["margins"]["all"]) == pytest.approx(-10_000, abs=2_000)
    assert off["value"].startswith("mean margin +") and "5 of 5 runs beat" in off["value"]
    assert verdicts(report)[ON_ROW] == "INFO"
    # a trivial baseline never decides the verdict: five pairs within every tolerance leave the
    # treatment undecided (the rate of broken runs is not shown within 0.2), not killed
    assert code == 2 and report["treatments"][0]["verdict"] == "UNDECIDED"


def test_runs_recorded_before_the_baselines_have_no_row(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.ablation()
    _, report = store.check(tmp_path)
    assert ON_ROW not in rows(report) and OFF_ROW not in rows(report)


def test_of_the_baselines_figures_only_their_pnl_is_read_back() -> None:
    assert wanted("eval/baseline/buy_and_hold/pnl") and wanted("eval/pnl")
    assert not wanted("eval/baseline/random/turnover") and not wanted("system/gpu_util")
