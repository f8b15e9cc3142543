"""The kill check on MLflow stores built here with known trajectories."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

from alpha_rl.killcheck.stats import holm
from alpha_rl.tracking.view import VIEW_TAG
from tests.killcheck.store import (
    EVALS,
    SEEDS,
    STABILITY,
    STEPS,
    Store,
    l_q_curve,
    pnl_curve,
    ramp,
    rows,
    verdicts,
)

BROKEN = "5 runs that broke (rate)"
BENEFIT = "6 no held-out harm (eval/pnl)"
DECIDING_HER = (STABILITY, BROKEN, BENEFIT)  # the her axis's statistical rows
HER_HEADER = ("deciding on the her axis: audits, injections, stability, broken, benefit; alpha "
              "0.025 family-wise (Holm over the check's {} tests)")  # fmt: skip


def test_a_stable_her_ablation_is_kept(tmp_path: Path, capsys) -> None:
    store = Store(tmp_path)
    store.ablation()
    code, report = store.check(tmp_path, "require_audit=true")  # the default: nothing non-default
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert code == 0 and report["verdict"] == "KEEP", out
    assert report["axis"] == {"name": "her", "baseline": "off"}
    assert set(verdicts(report).values()) == {"PASS", "INFO"}
    # three statistical rows decide: criterion 5 and held-out harm tested together; no run
    # broke, so Fisher's test could not reach alpha (its smallest p is 1): not in the family
    assert report["non_default"] == {} and report["tests_in_family"] == 2
    assert lines[0] == HER_HEADER.format(2)
    found = rows(report)
    for name in DECIDING_HER:
        row = found[name]
        assert row["verdict"] == "PASS" and row["required"] and 0 <= row["p"] <= 1, name
    for name in (STABILITY, BENEFIT):
        e = found[name]["evidence"]
        assert e["family"] == 2 and e["p_adjusted"] >= found[name]["p"]
        assert "(of 2 tests)" in found[name]["value"]
    assert found[BROKEN]["evidence"]["outside_family"] == 1
    assert "p_adjusted" not in found[BROKEN]["evidence"]
    assert "its smallest possible p 1 > alpha: not tested" in found[BROKEN]["value"]
    stability = found[STABILITY]
    assert stability["value"].startswith("geometric-mean ratio ")
    assert "over 5 pairs, p " in stability["value"]
    e = stability["evidence"]
    assert e["n"] == 5 and e["bound"] == pytest.approx(np.log(1.1))
    assert e["geometric_mean"] == pytest.approx(np.exp(e["mean"]))
    assert e["low"] < e["mean"] < e["high"]  # on the log scale
    ratios = [pair["ratio"] for pair in e["pairs"]]
    assert e["arithmetic_mean_of_ratios"] == pytest.approx(np.mean(ratios))
    assert e["geometric_mean"] == pytest.approx(np.exp(np.mean(np.log(ratios))))
    assert found[BROKEN]["value"].startswith("0 of 5 her=on runs broke vs 0 of 5 her=off (p 1)")
    assert found[BENEFIT]["value"].startswith("paired difference ")
    assert "verdict her=on: KEEP" in out and lines[-1] == "verdict: KEEP (her=on kept)"
    client = store.client
    parent = client.get_run(store.parent).data.tags
    assert parent["kill_check.verdict"] == "KEEP" and parent["kill_check.verdict.on"] == "KEEP"
    assert parent["kill_check.criteria"] == "default"
    assert "non-default" not in parent["mlflow.note.content"]
    names = {a.path for a in client.list_artifacts(store.parent, "kill_check")}
    assert names == {"kill_check/kill_check.json", "kill_check/kill_check.png"}
    # panels: the probe loss, l_q, the capture ratio, the held-out PnL: 4 x 6 inches at 110 dpi
    assert plt.imread(tmp_path / "report" / "kill_check.png").shape[1] == 2640
    children = client.search_runs([store.eid], "tags.`mlflow.parentRunId` != ''")
    roles = {r.data.tags["her"]: r.data.tags["kill_check.role"] for r in children}
    assert roles == {"on": "treatment", "off": "baseline"}


def test_her_l_q_above_the_baseline_is_info_while_the_probe_decides(tmp_path: Path) -> None:
    """HER's batch l_q 1.8x the baseline's (other data) with the same probe loss: kept; judged
    on the seed's literal l_q instead, the same store is killed."""
    store = Store(tmp_path)
    store.ablation(log=lambda her, seed: {"loss/l_q": l_q_curve(seed + 10, 1.8)})
    code, report = store.check(tmp_path)
    literal = rows(report)["l_q over the whole batch (the seed's)"]
    assert code == 0 and literal["verdict"] == "INFO" and not literal["required"]
    ratio = literal["evidence"]["ratio"]
    assert ratio["geometric_mean"] == pytest.approx(1.8, rel=0.05) and ratio["n"] == 5
    assert ratio["low"] < ratio["geometric_mean"] < ratio["high"]
    assert "not comparable across arms" in literal["threshold"]
    code, report = store.check(tmp_path, "stability_metric=loss/l_q")
    assert code == 1 and verdicts(report)["5 no destabilisation (loss/l_q)"] == "KILL"


def test_a_diverging_probe_loss_is_killed(tmp_path: Path) -> None:
    store = Store(tmp_path)

    def rising(her: str, seed: int) -> dict:
        return {"eval/l_q_probe": l_q_curve(seed, 0.5, EVALS) * np.linspace(1, 40, EVALS.size)}

    store.ablation(evals=rising)
    code, report = store.check(tmp_path)
    assert code == 1 and verdicts(report)[STABILITY] == "KILL"
    assert verdicts(report)[BROKEN] == "PASS"  # worse, not broken: below 10 x its own median
    assert rows(report)[STABILITY]["evidence"]["geometric_mean"] > 10


def test_a_slightly_worse_but_noisy_probe_loss_is_not_killed_on_noise(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.ablation(evals=lambda her, seed: {"eval/l_q_probe": l_q_curve(seed + 30, 0.525, EVALS)})
    code, report = store.check(tmp_path)
    assert code == 0 and verdicts(report)[STABILITY] == "PASS"


def test_one_her_run_with_a_nan_is_a_rate_not_a_kill(tmp_path: Path) -> None:
    """One treatment run of five with a NaN in its l_q: 1 of 5 broke against 0 of 5, Fisher's
    p = 0.5: not a kill; its pair leaves criterion 5 and held-out harm, so the four others
    decide them where min_seeds allows four (by default five usable pairs are needed)."""
    store = Store(tmp_path)
    curve = l_q_curve(3)
    curve[-1] = np.nan
    store.ablation(log=lambda her, seed: {"loss/l_q": curve} if seed == 1 else {})
    code, report = store.check(tmp_path)
    assert code == 2 and rows(report)[BENEFIT]["evidence"]["not_judged"].startswith("4 pairs")
    code, report = store.check(tmp_path, "min_seeds=4")
    found = rows(report)
    broken = found[BROKEN]
    assert code == 0 and broken["verdict"] == "PASS"
    assert broken["value"].startswith("1 of 5 her=on runs broke vs 0 of 5 her=off (p 0.5)")
    assert "non-finite loss/l_q" in broken["value"]
    assert broken["evidence"]["counts"] == [1, 5, 0, 5] and broken["p"] == pytest.approx(0.5)
    # one broken run of ten could at best give p = 0.5: it cannot decide, whatever the arm
    assert broken["evidence"]["outside_family"] == pytest.approx(0.5)
    assert list(broken["evidence"]["treatment_broken"].values()) == ["non-finite loss/l_q"]
    for name in (STABILITY, BENEFIT):
        assert found[name]["verdict"] == "PASS" and found[name]["evidence"]["n"] == 4
        assert "(1 skipped: a run broke: non-finite loss/l_q)" in found[name]["value"]


def test_every_her_run_broken_against_none_of_the_baselines_is_killed(tmp_path: Path) -> None:
    """Five treatment runs broken five ways (failed, a NaN in l_q or in the probe loss, l_q and
    probe blow-ups), no baseline run broken: p = 1/252, killed on the rate alone (criterion 5 and
    held-out harm have no pair left)."""
    store = Store(tmp_path)

    def spoiled(key: str, seed: int, at: int, value: float) -> np.ndarray:
        curve = l_q_curve(seed + 10) if key == "loss/l_q" else l_q_curve(seed + 30, 0.5, EVALS)
        curve[at] = value
        return curve

    logs = {1: {"loss/l_q": spoiled("loss/l_q", 1, 3, np.nan)},
            3: {"loss/l_q": spoiled("loss/l_q", 3, -1, 50.0)}}  # fmt: skip
    evals = {2: {"eval/l_q_probe": spoiled("probe", 2, 5, np.nan)},
             4: {"eval/l_q_probe": spoiled("probe", 4, -2, 50.0)}}  # fmt: skip
    failed = {"alpha_rl.failure_reason": "CUDA error: an illegal memory access"}
    store.ablation(log=lambda her, seed: logs.get(seed, {}),
                   evals=lambda her, seed: evals.get(seed, {}),
                   tags=lambda her, seed: failed if seed == 0 else {})  # fmt: skip
    code, report = store.check(tmp_path)
    found = rows(report)
    broken = found[BROKEN]
    assert code == 1 and broken["verdict"] == "KILL" and report["tests_in_family"] == 1
    assert broken["value"].startswith("5 of 5 her=on runs broke vs 0 of 5 her=off")
    assert broken["p"] == pytest.approx(1 / 252)
    why = sorted(broken["evidence"]["treatment_broken"].values())
    assert why[0] == "CUDA error: an illegal memory access"
    assert [w.split(" blew up")[0] for w in why[1:3]] == ["eval/l_q_probe", "loss/l_q"]
    assert "> 10 x its median" in why[1] and why[3:] == ["non-finite eval/l_q_probe",
                                                         "non-finite loss/l_q"]  # fmt: skip
    assert broken["evidence"]["baseline_broken"] == {}
    assert found[STABILITY]["verdict"] == found[BENEFIT]["verdict"] == "NOT-EVALUATED"
    assert report["treatments"][0]["verdict"] == "KILL"


def test_a_test_on_fewer_usable_pairs_than_min_seeds_is_not_judged(tmp_path: Path) -> None:
    """Three of five treatment runs failed (p 0.083: not enough for a KILL at five runs) while
    the two left lose held-out PnL: two usable pairs decide nothing, whatever the rest."""
    store = Store(tmp_path)
    failed = {"alpha_rl.failure_reason": "non-finite loss/l_q"}
    store.ablation(evals=lambda her, seed: {"eval/pnl": pnl_curve(seed + 50, 20_000.0)},
                   tags=lambda her, seed: failed if seed < 3 else {})  # fmt: skip
    code, report = store.check(tmp_path)
    found = rows(report)
    assert code == 2 and found[BROKEN]["verdict"] == "PASS"
    for name in (STABILITY, BENEFIT):
        assert found[name]["verdict"] == "NOT-EVALUATED"
        assert found[name]["evidence"]["not_judged"] == "2 pairs < min_seeds 5: not judged"
    assert report["treatments"][0]["blocked_by"].endswith("2 pairs < min_seeds 5: not judged")


def test_an_infinite_probe_loss_outside_the_window_is_a_broken_run(tmp_path: Path) -> None:
    store = Store(tmp_path)
    probe = l_q_curve(32, 0.5, EVALS)
    probe[5] = np.inf  # at step 4000, before the window; the trainer does not stop on the probe
    store.ablation(evals=lambda her, seed: {"eval/l_q_probe": probe} if seed == 2 else {})
    _, report = store.check(tmp_path)
    broken = rows(report)[BROKEN]
    assert list(broken["evidence"]["treatment_broken"].values()) == ["non-finite eval/l_q_probe"]


def test_probe_sets_that_differ_cannot_be_compared(tmp_path: Path) -> None:
    store = Store(tmp_path)
    for seed in SEEDS:
        store.her_run("on", seed)
        rid = store.her_run("off", seed)
        store.client.set_tag(rid, "probe_digest", "another")
    code, report = store.check(tmp_path)
    stability = rows(report)[STABILITY]
    assert code == 2 and stability["verdict"] == "NOT-EVALUATED"
    assert "probe sets differ" in stability["value"]
    assert report["treatments"][0]["blocked_by"].startswith(f"{STABILITY}: 0 pairs to compare")


def test_zero_injections_after_10k_steps_is_killed(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.ablation(log=lambda her, seed: {"her/inject_total": np.zeros(STEPS.size),
                                          "her/backward_total": np.zeros(STEPS.size)})  # fmt: skip
    code, report = store.check(tmp_path)
    assert code == 1 and verdicts(report)["4 injections on done steps"] == "KILL"


def test_audit_mismatches_are_killed_even_with_too_few_pairs(tmp_path: Path) -> None:
    store = Store(tmp_path)
    bad = np.zeros(STEPS.size)
    bad[7] = 3
    store.ablation(seeds=(0, 1, 2), log=lambda her, seed: {"audit/her_forward": bad})
    code, report = store.check(tmp_path)
    assert code == 1
    assert verdicts(report)["3 forward inject"] == "KILL" and verdicts(report)["1 track"] == "PASS"
    # a mismatch is a fact: it kills with 3 pairs, where the statistical rows are not judged
    assert {verdicts(report)[name] for name in DECIDING_HER} == {"NOT-EVALUATED"}


@pytest.mark.parametrize("how", ["her/forward_overwritten_total", "her/forward_expired_total"])
@pytest.mark.slow
def test_a_forward_arm_whose_ring_lost_closes_is_not_judged(tmp_path: Path, capsys,
                                                           how: str) -> None:  # fmt: skip
    store = Store(tmp_path)
    lost = {how: STEPS * 5.0}  # one close in ten, in one run
    worse = {"eval/l_q_probe": l_q_curve(7, 1.5, EVALS)}  # criterion 5 would kill it
    store.ablation(treatments=("backward", "on"), log=lambda her, seed: lost if seed == 2 else {},
                   evals=lambda her, seed: worse if her == "on" else {})  # fmt: skip
    code, report = store.check(tmp_path)
    row = rows(report)["3 forward inject"]
    assert row["verdict"] == "NOT-EVALUATED" and row["required"] and row["blocks"]
    assert "forward HER lost closes unjudged in 1 of 5 runs" in row["value"]
    assert "10.0%" in row["value"] and "her.closed_ring=auto" in row["value"]
    assert row["threshold"].endswith("closes lost unjudged <= 1%")
    assert verdicts(report)[STABILITY] == "KILL"  # what was tested is not forward HER: no verdict
    got = {t["value"]: t["verdict"] for t in report["treatments"]}
    assert got == {"backward": "KEEP", "on": "CANNOT-JUDGE"}
    assert code == 2 and "Traceback" not in capsys.readouterr().err
    # the limit is the check's own setting, not the run's
    _, report = store.check(tmp_path, "max_forward_lost=0.2")
    assert verdicts(report)["3 forward inject"] == "PASS"
    assert {t["value"]: t["verdict"] for t in report["treatments"]}["on"] == "KILL"


def test_a_forward_arm_without_the_count_of_lost_closes_is_not_judged(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.forward_counted = False
    store.ablation(treatments=("forward",))
    _, report = store.check(tmp_path)
    row = rows(report, "forward")["3 forward inject"]
    assert row["verdict"] == "NOT-EVALUATED"
    assert row["value"].startswith("5 of 5 forward runs have no her/forward_overwritten_total")


def test_a_forward_arm_that_judged_every_close_passes(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.ablation(treatments=("forward",))
    row = rows(store.check(tmp_path)[1], "forward")["3 forward inject"]
    assert row["verdict"] == "PASS" and "at most 0.00% of closes lost unjudged" in row["value"]


def test_more_backward_injections_than_closes_is_killed(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.ablation(log=lambda her, seed: {"trade/count": np.full(STEPS.size, 10.0)})
    code, report = store.check(tmp_path)
    assert code == 1 and verdicts(report)["2 backward inject"] == "KILL"


@pytest.mark.slow
def test_three_treatments_get_three_verdicts_and_one_kill_exits_1(tmp_path: Path, capsys) -> None:
    store = Store(tmp_path)
    worse = {"eval/l_q_probe": l_q_curve(7, 1.5, EVALS)}  # the probe loss 3x the baseline's
    store.ablation(treatments=("backward", "forward", "on"),
                   evals=lambda her, seed: worse if her == "forward" else {})  # fmt: skip
    code, report = store.check(tmp_path)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert code == 1 and report["verdict"] == "KILL"
    got = {t["value"]: t["verdict"] for t in report["treatments"]}
    assert got == {"backward": "KEEP", "forward": "KILL", "on": "KEEP"}
    assert [t["value"] for t in report["treatments"]] == ["backward", "forward", "on"]
    assert all(len(t["pairs"]) == 5 for t in report["treatments"])
    # every treatment against the same five baselines
    bases = [{p["baseline"] for p in t["pairs"]} for t in report["treatments"]]
    assert bases[0] == bases[1] == bases[2] and len(bases[0]) == 5
    assert lines[-1] == "verdict: KILL (her=forward killed; her=backward, her=on kept)"
    # one family: criterion 5 and held-out harm of each of the three treatments, Holm over all
    # six (no run broke: the broken rates cannot reach alpha and stay out)
    assert lines[0] == HER_HEADER.format(6) and report["tests_in_family"] == 6
    tested = [r for t in report["treatments"] for r in t["criteria"]
              if r["required"] and r["p"] is not None]  # fmt: skip
    family = [r for r in tested if "p_adjusted" in r["evidence"]]
    assert [r["criterion"] for r in family] == [STABILITY, BENEFIT] * 3
    assert {r["criterion"] for r in tested if r not in family} == {BROKEN}
    adjusted = holm([r["p"] for r in family])
    assert [r["evidence"]["p_adjusted"] for r in family] == pytest.approx(adjusted)
    assert [r["verdict"] == "KILL" for r in family] == [a <= 0.025 for a in adjusted]
    # a direction the treatment does not run has no criterion to meet
    assert verdicts(report, "backward")["3 forward inject"] == "NOT-APPLICABLE"
    assert verdicts(report, "forward")["2 backward inject"] == "NOT-APPLICABLE"
    parent = store.client.get_run(store.parent).data.tags
    assert (parent["kill_check.verdict.forward"], parent["kill_check.verdict.on"]) == (
        "KILL",
        "KEEP",
    )
    # one curve per arm (four arms in the legend of each panel), four panels
    assert plt.imread(tmp_path / "report" / "kill_check.png").shape[1] == 2640


def test_unpaired_runs_cannot_be_judged(tmp_path: Path, capsys) -> None:
    store = Store(tmp_path)
    store.ablation(with_base=False)
    store.her_run("off", 7)  # a baseline of another seed
    code, report = store.check(tmp_path)
    assert code == 2 and report["verdict"] == "CANNOT-JUDGE"
    assert len(report["unpaired"]) == 6 and report["treatments"] == []  # 5 treatments, 1 base
    out = capsys.readouterr().out
    assert out.count("unpaired:") == 6
    assert out.splitlines()[-1] == "verdict: CANNOT-JUDGE (no treatment)"


def test_the_check_links_the_runs_and_gives_their_experiment_its_view(
    tmp_path: Path, capsys
) -> None:
    """An experiment made elsewhere has no runs view: a check that writes nothing links MLflow's
    own table; one that writes gives the experiment the view first and links it."""
    store = Store(tmp_path)
    store.her_run("off", 0)  # nothing to judge: the link is what this test reads
    link = (f"then http://127.0.0.1:5000/#/experiments/{store.eid}/runs?"
            "workflowType=machine_learning&compareRunsMode=TABLE")  # fmt: skip
    for args, ending in ((["--no-write"], link), ([], f"{link}&viewStateShareKey=alpha_rl_runs")):
        store.check(tmp_path, *args)
        lines = capsys.readouterr().out.splitlines()
        assert lines[-2].startswith("runs in the UI: make ui STORE=") and lines[-2].endswith(ending)
        assert (VIEW_TAG in store.client.get_experiment(store.eid).tags) == (not args)


def test_runs_differing_beyond_the_axis_do_not_pair(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.ablation(seeds=(0,), with_base=False)
    store.her_run("off", 0, **{"agent.lr": "0.001"})
    code, report = store.check(tmp_path)
    assert code == 2 and len(report["unpaired"]) == 2


def test_a_baseline_at_an_absolute_target_by_its_first_evaluation_gives_a_bound(
    tmp_path: Path, capsys
) -> None:
    store = Store(tmp_path)
    # baselines at 0.5 from the first evaluation (250); HER reaches 0.4 at 4000 (0.3 at 3000)
    store.ablation(base_evals=lambda seed: {"eval/capture_ratio": np.full(EVALS.size, 0.5)},
                   evals=lambda her, seed: {"eval/capture_ratio": ramp(5000, 0.5)})  # fmt: skip
    code, report = store.check(tmp_path, "capture_target=0.4")
    assert code == 0
    speed = rows(report)["steps to capture target"]
    e = speed["evidence"]
    # the baseline's Turnbull median is censored at its first evaluation: a bound, not a value
    assert e["speedup"] == {"kind": "upper bound", "high": pytest.approx(250 / 4000)}
    assert e["medians"] == {"treatment": {"kind": "value", "steps": 4000.0},
                            "baseline": {"kind": "at most", "steps": 250.0}}  # fmt: skip
    assert "speed-up <= 0.0625x (a bound: censored medians)" in speed["value"]
    assert ("her=off: 5 of 5 reached, median <= 250, 5 at the first evaluation (<= 250)"
            in speed["value"])  # fmt: skip
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
    code, report = store.check(tmp_path)
    assert code == 0
    speed = rows(report)["steps to capture target"]
    e = speed["evidence"]
    start = 0.4 * 250 / 12000
    assert e["pairs"][0]["target"] == pytest.approx(start + 0.8 * (0.35 - start))
    assert e["speedup"] == {"kind": "lower bound", "low": pytest.approx(9000 / 250)}
    assert "speed-up >= 36x (a bound: censored medians)" in speed["value"]
    assert "her=on: 5 of 5 reached, median <= 250, 5 at the first evaluation" in speed["value"]
    assert e["sign_test"]["faster"] == 5


def test_an_arm_that_never_reaches_the_target_is_counted_as_censored(tmp_path: Path) -> None:
    store = Store(tmp_path)
    # the baselines reach their target (0.2817) at 9000; HER in seeds 1-3 never gets past 0.2
    stuck = {"eval/capture_ratio": np.full(EVALS.size, 0.2)}
    store.ablation(evals=lambda her, seed: stuck if seed in (1, 2, 3) else {})
    code, report = store.check(tmp_path)
    assert code == 0
    speed = rows(report)["steps to capture target"]
    assert "her=on: 2 of 5 reached, median > 12,000" in speed["value"]
    assert "3 never (> 12000)" in speed["value"]
    assert len(speed["evidence"]["pairs"]) == 5  # counted, not dropped
    # the never-reached runs hold HER's median past the last evaluation: the speed-up is at most
    # the baseline's median over that last evaluation
    assert speed["evidence"]["medians"]["treatment"] == {"kind": "more than", "steps": 12000.0}
    assert speed["evidence"]["speedup"] == {"kind": "upper bound",
                                            "high": pytest.approx(9000 / 12000)}  # fmt: skip
    assert "speed-up <= 0.75x" in speed["value"]
    sign = speed["evidence"]["sign_test"]
    assert (sign["faster"], sign["slower"], sign["undecided"]) == (2, 3, 0)
    assert "faster in 2, slower in 3 of 5 pairs (sign test p 1)" in speed["value"]


def test_exact_times_give_the_ratio_of_the_arms_turnbull_medians(tmp_path: Path) -> None:
    store = Store(tmp_path)
    # the baseline starts at 0.4 / 12000 x 250 and rises to its plateau (its mean over
    # 9000-12000) 0.35; the target, its start + 0.8 x the rise, 0.28, is reached by the baseline
    # at 9000 (0.3) and by HER (0.4 at 4000) at 3000 (0.3)
    store.ablation()
    code, report = store.check(tmp_path)
    assert code == 0
    speed = rows(report)["steps to capture target"]
    e = speed["evidence"]
    assert e["speedup"] == {"kind": "value", "speedup": pytest.approx(9000 / 3000)}
    assert e["medians"] == {"treatment": {"kind": "value", "steps": 3000.0},
                            "baseline": {"kind": "value", "steps": 9000.0}}  # fmt: skip
    assert {(p["treatment_reach"]["low"], p["treatment_reach"]["high"]) for p in e["pairs"]} == {
        (2000.0, 3000.0)}  # fmt: skip
    assert e["sign_test"] == {"faster": 5, "slower": 0, "undecided": 0,
                              "p": pytest.approx(1 / 16)}  # fmt: skip
    assert speed["value"].startswith("speed-up 3x over 5 pairs")


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
    code, report = store.check(tmp_path)
    assert code == 0
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
    code, report = store.check(tmp_path)
    assert code == 0
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


def test_a_bad_setting_is_refused_naming_it(tmp_path: Path, capsys) -> None:
    store = Store(tmp_path)
    store.ablation(seeds=(0,))
    from alpha_rl.killcheck.cli import main

    for bad, named in (
        ("stability_metric=loss/l_q_synthetic", "stability_metric"),
        ("windw=0.5", "windw"),
        ("capture_target_frac=2", "capture_target_frac"),
        ("alpha=0.5", "alpha=0.5 must be in (0, 0.5)"),
        ("deciding.other=[speed]", "deciding.other: unknown criteria ['speed']"),
        ("benefit_metric=loss/l_q", "benefit_metric"),
        ("min_seeds=2.5", "min_seeds=2.5 must be a whole number"),
    ):
        with pytest.raises(SystemExit) as stop:
            main(["--tracking-uri", store.uri, "--parent", store.parent, "--no-write", bad])
        assert stop.value.code == 2 and named in capsys.readouterr().err


LAYOUTS = {"stride6": ("6", "sentinel", "0.0"), "stride7_sentinel": ("7", "sentinel", "0.0"),
           "stride7_active": ("7", "active", "0.1"),
           "stride7_active_controller": ("7", "active", "0.1")}  # fmt: skip


def reward_variants(store: Store, seeds=SEEDS, layouts=tuple(LAYOUTS)[:3], evals=None) -> None:
    """experiment=reward_variants: stride6, stride7 + sentinel, stride7 + active per seed (the
    `layouts` named; `evals(layout, seed)` changes a run's held-out metrics)."""
    for seed in seeds:
        for layout in layouts:
            stride, mode, scale = LAYOUTS[layout]
            params = {"reward.stride": stride, "beta.mode": mode, "beta.scale": scale,
                      "isv.slots.beta.aux_align_scale.init": scale}  # fmt: skip
            if stride == "7":
                params |= {"reward.aux_align_weight": "1.0",
                           "isv.slots.reward.w_aux_align.index": "537"}  # fmt: skip
            if layout.endswith("controller"):
                params["beta.controller"] = "share"
            store.her_run("on", seed, evals=evals(layout, seed) if evals else None, **params)


def test_axis_beta_pairs_active_with_the_sentinel(tmp_path: Path, capsys) -> None:
    store = Store(tmp_path)
    reward_variants(store)
    code, report = store.check(tmp_path, "--axis", "beta")
    out = capsys.readouterr().out
    assert report["axis"] == {"name": "beta", "baseline": "sentinel"}
    [active] = report["treatments"]
    assert active["value"] == "active" and len(active["pairs"]) == 5
    names = {r.info.run_id: r.data.params for r in store.client.search_runs([store.eid])}
    for pair in active["pairs"]:
        t, b = names[pair["treatment"]], names[pair["baseline"]]
        assert (t["beta.mode"], b["beta.mode"]) == ("active", "sentinel")
        assert t["reward.stride"] == b["reward.stride"] == "7" and t["seed"] == b["seed"]
    # the stride-6 runs differ in reward.*, beyond the axis: listed, not paired
    assert len(report["unpaired"]) == 5 and all("sentinel run without" in u["why"]
                                                for u in report["unpaired"])  # fmt: skip
    got = verdicts(report, "active")
    assert {got[k] for k in ("1 track", "2 backward inject", "3 forward inject",
                             "4 injections on done steps")} == {"NOT-APPLICABLE"}  # fmt: skip
    # off the her axis the rate of broken runs and held-out harm decide; criterion 5 is INFO
    assert (got[STABILITY], got[BROKEN], got[BENEFIT]) == ("INFO", "PASS", "PASS") and code == 0
    assert out.splitlines()[0] == ("deciding on the beta axis: broken, benefit; alpha 0.025 "
                                   "family-wise (Holm over the check's 1 test)")  # fmt: skip
    assert "== beta=active vs beta=sentinel: 5 pairs" in out


def test_axis_reward_pairs_stride7_with_stride6(tmp_path: Path) -> None:
    store = Store(tmp_path)
    reward_variants(store)
    code, report = store.check(tmp_path, "--axis", "reward")
    assert code == 0
    [seven] = report["treatments"]
    assert seven["label"] == "reward=stride7" and len(seven["pairs"]) == 5
    assert report["axis"]["baseline"] == "stride6"


def test_runs_whose_ring_resolved_from_their_lookahead_still_pair(tmp_path: Path) -> None:
    store = Store(tmp_path)
    for seed in SEEDS:  # her.closed_ring=auto: B x (lookahead + 1) rounded up, at B = 4096
        store.her_run("forward", seed, **{"her.lookahead": "50",
                                          "her.closed_ring_resolved": "262144"})  # fmt: skip
        store.her_run("forward", seed, **{"her.lookahead": "160",
                                          "her.closed_ring_resolved": "1048576"})  # fmt: skip
    _, report = store.check(tmp_path, "--axis", "her.lookahead", "--baseline", "50")
    assert len(report["treatments"][0]["pairs"]) == 5


@pytest.mark.slow
def test_any_config_key_is_an_axis_with_its_default_as_baseline(tmp_path: Path) -> None:
    store = Store(tmp_path)
    for seed in SEEDS:
        store.her_run("on", seed)  # agent.lr 0.0003, the default config's
        store.her_run("on", seed, **{"agent.lr": "0.001"})
    code, report = store.check(tmp_path, "--axis", "agent.lr")
    assert code == 0
    assert report["axis"] == {"name": "agent.lr", "baseline": "0.0003"}
    [faster] = report["treatments"]
    assert faster["label"] == "agent.lr=0.001" and len(faster["pairs"]) == 5
    _, report = store.check(tmp_path, "--axis", "agent.lr", "--baseline", "0.001")
    assert report["treatments"][0]["label"] == "agent.lr=0.0003"


def walk_forward_store(tmp_path: Path, worse_fold: int, factor: float) -> Store:
    """Seeds 0, 1 x folds 0, 1, 2 of her=on and her=off; in `worse_fold` HER's probe loss is
    `factor` x the baseline's and its held-out PnL 30 lower; elsewhere they are equal."""
    store = Store(tmp_path)
    for seed in (0, 1):
        for fold in range(3):
            probe = l_q_curve(seed + 100 * fold, 0.5, EVALS)
            pnl = np.full(EVALS.size, 10.0 * fold + seed)
            worse = fold == worse_fold
            store.her_run("on", seed, evals={"eval/l_q_probe": probe * (factor if worse else 1),
                                             "eval/pnl": pnl - (30 if worse else 0)},
                          **{"market.fold": str(fold)})  # fmt: skip
            store.her_run("off", seed, evals={"eval/l_q_probe": probe, "eval/pnl": pnl},
                          **{"market.fold": str(fold)})  # fmt: skip
    return store


def test_walk_forward_runs_pair_by_seed_and_fold_with_a_row_per_fold(tmp_path: Path,
                                                                      capsys) -> None:  # fmt: skip
    store = walk_forward_store(tmp_path, worse_fold=2, factor=1.5)
    code, report = store.check(tmp_path)
    out = capsys.readouterr().out
    names = {r.info.run_id: r for r in store.client.search_runs([store.eid])}
    pairs = report["treatments"][0]["pairs"]
    assert len(pairs) == 6 and not report["unpaired"]
    for pair in pairs:  # same seed and same fold, never across folds
        t, b = (names[pair[k]].data.params for k in ("treatment", "baseline"))
        assert (t["seed"], t["market.fold"]) == (b["seed"], b["market.fold"])
    found = rows(report)
    # pooled over folds the geometric-mean ratio is (1 x 1 x 1.5)^(1/3); its interval stratified
    e = found[STABILITY]["evidence"]
    assert e["geometric_mean"] == pytest.approx(1.5 ** (1 / 3)) and e["strata"] == 3
    assert e["arithmetic_mean_of_ratios"] == pytest.approx(3.5 / 3) and e["n"] == 6
    assert "over 6 pairs in 3 folds" in found[STABILITY]["value"]
    # each fold constant across its two seeds: no spread within folds, the interval is a point
    assert (e["low"], e["high"]) == pytest.approx((e["mean"], e["mean"])) and e["df"] == 3
    assert found[STABILITY]["verdict"] == "KILL", "1.14 > 1 + tolerance 0.1, a point interval"
    # and the held-out PnL 30 lower in fold 2: a mean difference of -10, below 0 without doubt
    assert found[BENEFIT]["verdict"] == "KILL" and found[BENEFIT]["evidence"]["mean"] == -10
    assert code == 1
    for fold, want in (("0", 1.0), ("1", 1.0), ("2", 1.5)):
        row = found[f"fold {fold}"]
        assert row["verdict"] == "INFO" and not row["required"]
        assert row["evidence"]["log_ratios"] == pytest.approx([np.log(want)] * 2)
        assert row["evidence"]["differences"] == [-30.0 if fold == "2" else 0.0] * 2
    assert ("2 pairs; eval/l_q_probe geometric-mean ratio 1.5 [1.5, 1.5]; held-out pnl "
            "difference -30 [-30, -30]") in out  # fmt: skip


def test_a_fold_without_its_baseline_leaves_its_runs_unpaired(tmp_path: Path) -> None:
    store = walk_forward_store(tmp_path, worse_fold=0, factor=1.0)
    store.her_run("on", 0, **{"market.fold": "3"})  # fold 3 has no her=off run
    _, report = store.check(tmp_path)
    assert len(report["treatments"][0]["pairs"]) == 6
    assert [u["why"] for u in report["unpaired"]] == [
        "her=on run without a her=off run of the same config and seed"
    ]


def harmed_pnl(seed: int) -> dict:
    """A held-out PnL 5000 below the healthy runs', with noise of its own."""
    return {"eval/pnl": pnl_curve(seed + 60) - 5000.0}


def test_held_out_harm_is_killed_on_the_her_axis_beyond_its_margin(tmp_path: Path,
                                                                   capsys) -> None:  # fmt: skip
    store = Store(tmp_path)
    store.ablation(evals=lambda her, seed: harmed_pnl(seed))
    code, report = store.check(tmp_path)
    lines = capsys.readouterr().out.splitlines()
    found = rows(report)
    benefit = found[BENEFIT]
    assert code == 1 and benefit["verdict"] == "KILL" and benefit["required"]
    assert found[STABILITY]["verdict"] == "PASS" and found[BROKEN]["verdict"] == "PASS"
    assert benefit["value"].startswith("paired difference -")
    assert benefit["evidence"]["mean"] == pytest.approx(-5000, abs=1000)
    assert benefit["evidence"]["high"] < 0 and benefit["evidence"]["p_adjusted"] <= 0.025
    assert lines[-1] == "verdict: KILL (her=on killed)"
    # a margin of 6000 USD: a loss of 5000 is within it
    code, report = store.check(tmp_path, "benefit_margin=6000")
    benefit = rows(report)[BENEFIT]
    assert code == 0 and benefit["verdict"] == "PASS"
    assert benefit["evidence"]["bound"] == -6000 and "not below -6,000" in benefit["threshold"]


def test_on_the_beta_axis_held_out_harm_kills_and_criterion_5_is_info(tmp_path: Path,
                                                                      capsys) -> None:  # fmt: skip
    """beta=active loses held-out PnL in every pair: killed; beta=active_controller's probe loss
    is 3x the sentinel's: reported (INFO), not a fault off the her axis: kept."""
    store = Store(tmp_path)
    worse_probe = {"eval/l_q_probe": l_q_curve(7, 1.5, EVALS)}
    reward_variants(store, layouts=("stride7_sentinel", "stride7_active",
                                    "stride7_active_controller"),
                    evals=lambda layout, seed: harmed_pnl(seed) if layout == "stride7_active"
                    else worse_probe if layout.endswith("controller") else {})  # fmt: skip
    code, report = store.check(tmp_path, "--axis", "beta")
    lines = capsys.readouterr().out.splitlines()
    assert code == 1 and not report["unpaired"]
    got = {t["value"]: t["verdict"] for t in report["treatments"]}
    assert got == {"active": "KILL", "active_controller": "KEEP"}
    assert report["tests_in_family"] == 2  # benefit for each of the two (none broke)
    active = rows(report, "active")
    assert (active[BENEFIT]["verdict"], active[STABILITY]["verdict"]) == ("KILL", "INFO")
    probe = rows(report, "active_controller")[STABILITY]
    assert probe["verdict"] == "INFO" and not probe["required"] and not probe["blocks"]
    assert probe["evidence"]["geometric_mean"] > 2 and probe["evidence"]["p"] < 0.001
    assert "p_adjusted" not in probe["evidence"]  # outside the family
    assert probe["threshold"].startswith("reported: a learner's probe loss is not a fault here")
    assert verdicts(report, "active_controller")[BENEFIT] == "PASS"
    assert lines[-1] == "verdict: KILL (beta=active killed; beta=active_controller kept)"


def test_fewer_pairs_than_min_seeds_cannot_be_judged(tmp_path: Path, capsys) -> None:
    store = Store(tmp_path)
    store.ablation(seeds=(0, 1, 2))
    code, report = store.check(tmp_path)
    lines = capsys.readouterr().out.splitlines()
    assert code == 2 and report["verdict"] == "CANNOT-JUDGE"
    found = rows(report)
    for name in DECIDING_HER:
        assert found[name]["verdict"] == "NOT-EVALUATED" and found[name]["required"]
        assert "3 pairs < min_seeds 5: not judged" in found[name]["value"]
        assert "p_adjusted" not in found[name]["evidence"]
    assert report["tests_in_family"] == 0 and lines[0] == HER_HEADER.format(0)
    blocked = "5 no destabilisation (eval/l_q_probe): 3 pairs < min_seeds 5: not judged"
    assert report["treatments"][0]["blocked_by"].startswith(blocked)
    last = lines[-1]
    assert last.startswith(f"verdict: CANNOT-JUDGE (her=on cannot be judged: {blocked}")
    assert "3 pairs < min_seeds 5" in last
    assert store.client.get_run(store.parent).data.tags["kill_check.verdict"] == "CANNOT-JUDGE"
    # three pairs suffice when min_seeds says so
    code, report = store.check(tmp_path, "min_seeds=3")
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and {verdicts(report)[n] for n in DECIDING_HER} == {"PASS"}
    assert lines[0] == "non-default criteria: min_seeds=3 (default 5)"
    assert lines[-1] == "verdict: KEEP (her=on kept)"


@pytest.mark.slow
def test_a_non_default_check_records_over_a_default_verdict_only_with_record(
    tmp_path: Path, capsys
) -> None:
    store = Store(tmp_path)
    # the probe loss 1.3x the baseline's: killed at tolerance 0.1, kept at 0.5
    store.ablation(evals=lambda her, seed: {"eval/l_q_probe": l_q_curve(seed + 30, 0.65, EVALS)})
    treated = [r.info.run_id for r in store.client.search_runs([store.eid], "tags.her = 'on'")]

    def tags(run_id: str) -> dict[str, str]:
        return store.client.get_run(run_id).data.tags

    code, report = store.check(tmp_path)
    capsys.readouterr()
    assert code == 1 and verdicts(report)[STABILITY] == "KILL"
    assert tags(store.parent)["kill_check.verdict"] == "KILL"
    assert tags(store.parent)["kill_check.criteria"] == "default"
    changed = "tolerance=0.5 (default 0.1)"
    code, report = store.check(tmp_path, "tolerance=0.5")
    out = capsys.readouterr().out
    assert code == 0 and report["verdict"] == "KEEP"
    assert report["non_default"] == {"tolerance": {"value": 0.5, "default": 0.1}}
    assert report["settings"]["tolerance"] == 0.5
    assert out.splitlines()[0] == f"non-default criteria: {changed}"
    # 5 treatment runs, 5 baselines and the parent hold the default criteria's verdict
    assert (f"not recorded on the runs: 11 of them hold a verdict of the default criteria, which "
            f"these settings ({changed}) would overwrite; give --record") in out  # fmt: skip
    assert out.splitlines()[-1] == "verdict: KEEP (her=on kept)"
    assert tags(store.parent)["kill_check.verdict"] == "KILL"
    assert {tags(r)["kill_check.verdict"] for r in treated} == {"KILL"}
    # --record: recorded, and the record says under which settings
    code, _ = store.check(tmp_path, "tolerance=0.5", "--record")
    out = capsys.readouterr().out
    assert code == 0 and "not recorded" not in out
    parent = tags(store.parent)
    assert parent["kill_check.verdict"] == "KEEP"
    assert parent["kill_check.criteria"] == f"non-default: {changed}"
    assert f"non-default criteria: {changed}" in parent["mlflow.note.content"]
    for run_id in treated:
        assert tags(run_id)["kill_check.verdict"] == "KEEP"
        assert tags(run_id)["kill_check.criteria"] == f"non-default: {changed}"


@pytest.mark.slow
def test_numpy_backend_runs_have_nothing_to_audit(tmp_path: Path) -> None:
    """Runs of the numpy backend executed the oracles: criteria 1-3 are NOT-APPLICABLE (forward
    HER's count of lost closes still read, not blocking) and the audit does not hold back a KEEP;
    one run of another backend without audits in the arm makes it not audited again."""
    store = Store(tmp_path)
    store.numpy_backend = True
    store.ablation(treatments=("backward", "on"))
    code, report = store.check(tmp_path)
    assert code == 0, report
    backward, on = verdicts(report, "backward"), verdicts(report, "on")
    audits = ("1 track", "2 backward inject", "3 forward inject")
    assert [backward[k] for k in audits] == ["NOT-APPLICABLE"] * 3
    assert [on[k] for k in audits] == ["NOT-APPLICABLE", "NOT-APPLICABLE", "PASS"]
    assert "backend numpy" in rows(report, "backward")["1 track"]["value"]
    forward = rows(report, "on")["3 forward inject"]
    assert not forward["required"] and "at most 0.00% of closes lost unjudged" in forward["value"]
    assert backward["4 injections on done steps"] == on["4 injections on done steps"] == "PASS"
    [run] = store.client.search_runs([store.eid], "tags.her = 'backward' and params.seed = '2'")
    store.client.set_tag(run.info.run_id, "audit", "every 100 steps")
    code, report = store.check(tmp_path)
    track = rows(report, "backward")["1 track"]
    assert code == 2 and track["verdict"] == "NOT-EVALUATED" and track["required"]
    assert track["value"].startswith("no audits (audit: ")


def test_the_injection_step_is_a_fraction_of_a_short_run(tmp_path: Path) -> None:
    """Criterion 4 by min(min_steps_with_her, min_steps_with_her_frac x the run's last step):
    runs of 12k steps must inject by 6000 at the default 0.5."""
    store = Store(tmp_path)
    late = np.where(STEPS > 6000, STEPS * 3.0, 0.0)  # the first injection after step 6000
    store.ablation(log=lambda her, seed: {"her/inject_total": late})
    code, report = store.check(tmp_path)
    row = rows(report)["4 injections on done steps"]
    assert code == 1 and row["verdict"] == "KILL"
    assert row["threshold"].startswith("her/inject_total > 0 by step 6000 ")
    assert row["value"] == "0 of 5 runs injected (min 0)"
    code, report = store.check(tmp_path, "min_steps_with_her_frac=1")
    row = rows(report)["4 injections on done steps"]
    assert code == 0 and row["verdict"] == "PASS"
    assert row["threshold"].startswith("her/inject_total > 0 by step 10000 ")


def test_a_report_goes_under_its_sweep_or_outputs_never_the_working_directory() -> None:
    from alpha_rl.killcheck.cli import report_dir

    assert report_dir([Path("multirun/a")]).parent == Path("multirun/a/kill_check")
    assert report_dir([Path("multirun/a"), Path("multirun/b")]).parent == Path("outputs/kill_check")
    assert report_dir([]).parent == Path("outputs/kill_check")
