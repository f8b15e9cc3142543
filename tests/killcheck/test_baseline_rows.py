"""The kill check's INFO row per arm: held-out net PnL against the best trivial baseline on the
same windows."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from alpha_rl.killcheck.cli import wanted
from alpha_rl.killcheck.compare import margin_reading
from tests.killcheck.store import EVALS, Store, rows, seed_effect, verdicts

ON_ROW = "held-out pnl: her=on vs the best trivial baseline in hindsight"
OFF_ROW = "held-out pnl: her=off vs the best trivial baseline in hindsight"


def says_beat(text: str) -> bool:
    """Whether `text` has the word beat (beats, beaten): not a run name such as upbeat-owl-42."""
    return re.search(r"\bbeat", text, re.IGNORECASE) is not None


def baselines(buy: float) -> dict[str, np.ndarray]:
    """The trivial baselines of one run's evaluations: flat 0, buy-and-hold `buy`, sell-and-hold
    -`buy`, random -5000 (and a figure the check does not read)."""
    flat = np.zeros(EVALS.size)
    return {"eval/baseline/flat/pnl": flat, "eval/baseline/buy_and_hold/pnl": flat + buy,
            "eval/baseline/sell_and_hold/pnl": flat - buy,
            "eval/baseline/random/pnl": flat - 5000.0,
            "eval/baseline/random/turnover": flat + 300.0}  # fmt: skip


def test_each_arm_is_read_against_its_best_trivial_baseline(tmp_path: Path, capsys) -> None:
    """her=on makes ~50,000 and buy-and-hold 60,000 on its windows: every run is below it by
    ~10,000; her=off's windows held 40,000: every run is above it. Either interval excludes 0, so
    each row says which side it shows; neither decides, and no output says "beat"."""
    store = Store(tmp_path)
    store.ablation(evals=lambda her, seed: baselines(60_000.0),
                   base_evals=lambda seed: baselines(40_000.0))  # fmt: skip
    code, report = store.check(tmp_path)
    found = rows(report)
    on, off = found[ON_ROW], found[OFF_ROW]
    assert on["verdict"] == off["verdict"] == "INFO" and not on["required"]
    assert on["value"].startswith("mean margin -") and " over 5 runs: shown below " in on["value"]
    assert "0 of 5 runs above their best baseline, each one run's net (no interval)" in on["value"]
    assert on["value"].endswith("; best: buy_and_hold x5")
    assert np.mean(on["evidence"]["margins"]["all"]) == pytest.approx(-10_000, abs=2_000)
    assert off["value"].startswith("mean margin +")
    assert " over 5 runs: shown above the best trivial policy; 5 of 5 runs above" in off["value"]
    assert "interval over the runs (stratified t) excludes 0" in on["threshold"]
    assert not says_beat(json.dumps(report)) and not says_beat(capsys.readouterr().out)
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


def test_a_margin_interval_holding_0_shows_no_side(tmp_path: Path) -> None:
    """Buy-and-hold on each seed's windows within a few thousand of that seed's her=on PnL, above
    on some seeds and below on others: the mean margin's interval holds 0."""
    offsets = (3_000.0, -3_000.0, 2_000.0, -2_000.0, 0.0)
    store = Store(tmp_path)
    store.ablation(evals=lambda her, seed: baselines(50_000.0 + seed_effect(seed) + offsets[seed]),
                   base_evals=lambda seed: baselines(40_000.0))  # fmt: skip
    _, report = store.check(tmp_path)
    on = rows(report)[ON_ROW]
    low, high = on["value"].split("[", 1)[1].split("]", 1)[0].split(", ")
    assert float(low.replace(",", "")) < 0 < float(high.replace(",", ""))
    assert (" over 5 runs: not shown above the best trivial policy (the interval holds 0); "
            in on["value"])  # fmt: skip
    assert not says_beat(json.dumps(report))


@pytest.mark.parametrize(
    ("estimate", "n", "reading"),
    [
        ((-1_606.0, -4_984.0, 1_772.0), 20, "not shown above the best trivial policy (the "
         "interval holds 0)"),
        ((2_541.0, 0.0, 5_000.0), 20, "not shown above the best trivial policy (the interval "
         "holds 0)"),
        ((2_541.0, 12.0, 5_000.0), 20, "shown above the best trivial policy"),
        ((-2_541.0, -5_000.0, -12.0), 20, "shown below the best trivial policy"),
        ((500.0, math.nan, math.nan), 1, "nothing shown (no interval from one run)"),
    ],
)  # fmt: skip
def test_only_an_interval_that_excludes_0_shows_a_side(estimate, n: int, reading: str) -> None:
    assert margin_reading(estimate, n) == reading
