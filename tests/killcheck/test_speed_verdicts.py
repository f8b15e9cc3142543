"""The kill check's speed rows (time to a target, censored arms, areas under the held-out
curve) and held-out summaries (mean, IQM, probability of improvement), on stores built here. They
are INFO rows: read from the check's report whatever its verdict (the decision rule's)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.killcheck.store import (
    EVALS,
    Store,
    ramp,
    rows,
)


def test_a_baseline_at_an_absolute_target_by_its_first_evaluation_gives_a_bound(
    tmp_path: Path, capsys
) -> None:
    store = Store(tmp_path)
    # baselines at 0.5 from the first evaluation (250); HER reaches 0.4 at 4000 (0.3 at 3000)
    store.ablation(base_evals=lambda seed: {"eval/capture_ratio": np.full(EVALS.size, 0.5)},
                   evals=lambda her, seed: {"eval/capture_ratio": ramp(5000, 0.5)})  # fmt: skip
    _, report = store.check(tmp_path, "capture_target=0.4")
    speed = rows(report)["steps to capture target"]
    assert speed["verdict"] == "INFO"
    e = speed["evidence"]
    # the baseline's Turnbull median is censored at its first evaluation: a bound, not a value;
    # HER's is 4000, the evaluation that saw its runs there, and lies in (3000, 4000]
    assert e["speedup"] == {"kind": "upper bound", "high": pytest.approx(250 / 4000),
                            "within": pytest.approx([0, 250 / 3000])}  # fmt: skip
    assert {role: (m["kind"], m["steps"], m["within"]) for role, m in e["medians"].items()} == {
        "treatment": ("value", 4000.0, [3000.0, 4000.0]),
        "baseline": ("at most", 250.0, [0.0, 250.0])}  # fmt: skip
    assert ("speed-up <= 0.0625x (a bound: censored medians; censoring allows up to 0.0833x)"
            in speed["value"])  # fmt: skip
    assert ("her=off: 5 of 5 reached, median <= 250 (95% CI (0, inf)), 5 at the first evaluation "
            "(<= 250)" in speed["value"])  # fmt: skip
    assert "capture >= 0.4" in speed["value"]
    # every baseline's interval (0, 250] ends before HER's (3000, 4000] begins: slower in all 5
    assert e["sign_test"] == {"faster": 0, "slower": 5, "undecided": 0,
                              "p": pytest.approx(1 / 16)}  # fmt: skip
    assert "<= 0.0625x" in capsys.readouterr().out


def test_a_treatment_at_the_target_by_its_first_evaluation_gives_a_lower_bound(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path)
    # the baselines start at 0.4 / 12000 x 250 and rise to a 0.35 plateau: the target is their
    # start + 0.8 x the rise, 0.2817, reached at 9000; HER is at 0.5 from its first evaluation
    store.ablation(evals=lambda her, seed: {"eval/capture_ratio": np.full(EVALS.size, 0.5)})
    _, report = store.check(tmp_path)
    speed = rows(report)["steps to capture target"]
    e = speed["evidence"]
    start = 0.4 * 250 / 12000
    assert e["pairs"][0]["target"] == pytest.approx(start + 0.8 * (0.35 - start))
    # the baselines' median 9000 lies in (8000, 9000]
    assert e["speedup"] == {"kind": "lower bound", "low": pytest.approx(9000 / 250),
                            "within": [pytest.approx(8000 / 250), "inf"]}  # fmt: skip
    assert ("speed-up >= 36x (a bound: censored medians; censoring allows 32x or more)"
            in speed["value"])  # fmt: skip
    assert ("her=on: 5 of 5 reached, median <= 250 (95% CI (0, inf)), 5 at the first evaluation"
            in speed["value"])  # fmt: skip
    assert e["sign_test"]["faster"] == 5


def test_an_arm_that_never_reaches_the_target_is_counted_as_censored(tmp_path: Path) -> None:
    store = Store(tmp_path)
    # the baselines reach their target (0.2817) at 9000; HER in seeds 1-3 never gets past 0.2
    stuck = {"eval/capture_ratio": np.full(EVALS.size, 0.2)}
    store.ablation(evals=lambda her, seed: stuck if seed in (1, 2, 3) else {})
    _, report = store.check(tmp_path)
    speed = rows(report)["steps to capture target"]
    assert "her=on: 2 of 5 reached, median > 12,000" in speed["value"]
    assert "3 never (> 12000)" in speed["value"]
    assert len(speed["evidence"]["pairs"]) == 5  # counted, not dropped
    # the never-reached runs hold HER's median past the last evaluation: the speed-up is at most
    # the baseline's median over that last evaluation
    treatment = speed["evidence"]["medians"]["treatment"]
    assert (treatment["kind"], treatment["steps"], treatment["within"]) == (
        "more than", 12000.0, [12000.0, "inf"])  # fmt: skip
    assert speed["evidence"]["speedup"]["kind"] == "upper bound"
    assert speed["evidence"]["speedup"]["high"] == pytest.approx(9000 / 12000)
    assert "speed-up <= 0.75x" in speed["value"]
    sign = speed["evidence"]["sign_test"]
    assert (sign["faster"], sign["slower"], sign["undecided"]) == (2, 3, 0)
    assert "faster in 2, slower in 3 of 5 pairs (sign test p 1)" in speed["value"]


def test_half_an_arm_that_never_reaches_the_target_makes_its_median_a_bound(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path)
    # ten pairs; HER in seeds 0-4 never gets past 0.2, in seeds 5-9 reaches 0.2817 in
    # (2000, 3000]: half the arm by 3000, half not by 12000. The median, the middle of the two
    # middle times, is past (2000 + 12000) / 2 whatever the later one is: a bound, not 3,000
    stuck = {"eval/capture_ratio": np.full(EVALS.size, 0.2)}
    store.ablation(seeds=range(10), evals=lambda her, seed: stuck if seed < 5 else {})
    _, report = store.check(tmp_path)
    speed = rows(report)["steps to capture target"]
    medians = speed["evidence"]["medians"]
    assert (medians["treatment"]["kind"], medians["treatment"]["steps"]) == ("more than", 7000.0)
    assert medians["treatment"]["within"] == [7000.0, "inf"]
    # ten runs: the 95% interval is (X_(2), X_(9)], X_(2) > 2000 and X_(9) past 12000
    assert medians["treatment"]["ci"] == [2000.0, "inf"]
    assert medians["baseline"]["ci"] == [8000.0, 9000.0]
    assert speed["evidence"]["speedup"]["kind"] == "upper bound"
    assert speed["evidence"]["speedup"]["high"] == pytest.approx(9000 / 7000)
    assert "her=on: 5 of 10 reached, median > 7,000 (95% CI (2,000, inf))" in speed["value"]
    assert "speed-up <= 1.29x (a bound: censored medians" in speed["value"]


def test_an_evaluation_without_a_capture_ratio_tells_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path)
    # HER's capture is NaN at 2000 (no closed trade): its runs reached 0.2817 in (1000, 3000],
    # not in (2000, 3000]: its median 3000 lies in (1000, 3000]. In a sixth pair HER's capture is
    # NaN throughout: nothing to judge
    capture = ramp(4000, 0.4)
    capture[EVALS == 2000] = np.nan
    store.ablation(seeds=range(6), evals=lambda her, seed: {
        "eval/capture_ratio": capture if seed < 5 else np.full(EVALS.size, np.nan)})  # fmt: skip
    _, report = store.check(tmp_path)
    speed = rows(report)["steps to capture target"]
    e = speed["evidence"]
    assert [s["why"] for s in e["skipped"]] == ["no evaluation with a value"]
    assert speed["value"].endswith("; 1 pair not judged (no evaluation with a value)")
    assert {(p["treatment_reach"]["low"], p["treatment_reach"]["high"]) for p in e["pairs"]} == {
        (1000.0, 3000.0)}  # fmt: skip
    assert (e["medians"]["treatment"]["steps"], e["medians"]["treatment"]["within"]) == (
        3000.0, [1000.0, 3000.0])  # fmt: skip
    assert e["sign_test"]["faster"] == 5


def test_exact_times_give_the_ratio_of_the_arms_turnbull_medians(tmp_path: Path) -> None:
    store = Store(tmp_path)
    # the baseline starts at 0.4 / 12000 x 250 and rises to its plateau (its mean over
    # 9000-12000) 0.35; the target, its start + 0.8 x the rise, 0.28, is reached by the baseline
    # at 9000 (0.3) and by HER (0.4 at 4000) at 3000 (0.3)
    store.ablation()
    _, report = store.check(tmp_path)
    speed = rows(report)["steps to capture target"]
    e = speed["evidence"]
    # each arm's median is the evaluation that saw its runs at the target, and lies in the
    # interval before it: the speed-up 3x, anywhere from 8000 / 3000 to 9000 / 2000
    assert e["speedup"] == {"kind": "value", "speedup": pytest.approx(9000 / 3000),
                            "within": pytest.approx([8000 / 3000, 9000 / 2000])}  # fmt: skip
    assert e["medians"]["treatment"] == {
        "kind": "value", "steps": 3000.0, "within": [2000.0, 3000.0], "ci": [0.0, "inf"],
        "confidence": 0.95, "converged": True, "gap": 0.0}  # fmt: skip
    assert (e["medians"]["baseline"]["steps"], e["medians"]["baseline"]["within"]) == (
        9000.0, [8000.0, 9000.0])  # fmt: skip
    assert {(p["treatment_reach"]["low"], p["treatment_reach"]["high"]) for p in e["pairs"]} == {
        (2000.0, 3000.0)}  # fmt: skip
    assert e["sign_test"] == {"faster": 5, "slower": 0, "undecided": 0,
                              "p": pytest.approx(1 / 16)}  # fmt: skip
    assert speed["value"].startswith("speed-up 3x (censoring allows 2.67x to 4.5x) over 5 pairs")
    # five runs are too few for a distribution-free 95% interval of a median: P(all above) 1/32
    assert "her=on: 5 of 5 reached, median 3,000 (within (2,000, 3,000], 95% CI (0, inf))" in (
        speed["value"])  # fmt: skip


@pytest.mark.parametrize(
    ("treated", "base", "kind", "want"),
    [
        (3.0, 2.0, "ratio", 1.5),  # every area > 0: the geometric mean of the areas' ratios
        (-1.0, -2.0, "level_difference", 1.0),  # an area <= 0: the mean level difference
    ],
)
def test_areas_under_the_held_out_curve_need_no_target(tmp_path: Path, treated: float,
                                                       base: float, kind: str,
                                                       want: float) -> None:  # fmt: skip
    store = Store(tmp_path)
    store.ablation(evals=lambda her, seed: {"eval/pnl": np.full(EVALS.size, treated)},
                   base_evals=lambda seed: {"eval/pnl": np.full(EVALS.size, base)})  # fmt: skip
    _, report = store.check(tmp_path)
    area = rows(report)["area under held-out pnl"]
    assert set(area["evidence"]) == {"metric", "pairs", kind}
    found = area["evidence"][kind]
    key = "geometric_mean" if kind == "ratio" else "mean"
    assert found[key] == pytest.approx(want) and found["n"] == 5
    assert (found["low"], found["high"]) == pytest.approx((want, want))  # every pair alike
    assert area["value"].startswith("geometric-mean ratio 1.5 [1.5, 1.5]" if kind == "ratio"
                                    else "mean level difference +1 ")  # fmt: skip


def test_held_out_mean_iqm_and_probability_of_improvement(tmp_path: Path) -> None:
    """Five seeds with known PnL levels: the arms' mean and IQM and P(HER > baseline) by hand."""
    her = [10.0, 20.0, 30.0, 40.0, 1000.0]
    base = [15.0, 25.0, 35.0, 5.0, 30.0]
    store = Store(tmp_path)
    store.ablation(seeds=range(5),
                   evals=lambda h, seed: {"eval/pnl": np.full(EVALS.size, her[seed])},
                   base_evals=lambda seed: {"eval/pnl": np.full(EVALS.size, base[seed])},
                   )  # fmt: skip
    _, report = store.check(tmp_path)
    mean = rows(report)["held-out pnl at the end: mean"]["evidence"]
    assert mean["treatment"]["mean"][0] == pytest.approx(220.0)
    assert mean["treatment"]["iqm"][0] == pytest.approx(30.0)  # 20, 30, 40: the middle three
    assert mean["baseline"]["iqm"][0] == pytest.approx(70 / 3)  # 15, 25, 30
    # HER beats 15: 3 (20, 30, 40) + 1000 -> 4; beats 25: 3; 35: 2; 5: 5; 30: 2 + a tie (30) = 2.5
    assert mean["probability_of_improvement"][0] == pytest.approx((4 + 3 + 2 + 5 + 2.5) / 25)
    lo, hi = mean["probability_of_improvement"][1:]
    assert lo <= (4 + 3 + 2 + 5 + 2.5) / 25 <= hi and 0 <= lo < hi <= 1
    assert mean["paired_difference"][0] == pytest.approx(np.mean(np.subtract(her, base)))
    poi = rows(report)["held-out pnl: P(her=on > her=off)"]
    assert poi["verdict"] == "INFO" and "over 5 x 5 runs" in poi["value"]
