"""The kill check on MLflow stores built here with known trajectories."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

from alpha_rl.tracking.links import open_line
from alpha_rl.tracking.view import VIEW_TAG
from tests.killcheck.store import (
    BENEFIT,
    BROKEN,
    DECIDING_HER,
    EVALS,
    KEEP_SEEDS,
    SEEDS,
    STABILITY,
    STEPS,
    Store,
    her_header,
    l_q_curve,
    pnl_curve,
    rows,
    verdicts,
)


def test_a_stable_her_ablation_is_kept(tmp_path: Path, capsys) -> None:
    """Twenty pairs of a treatment within every tolerance: harmlessness shown on each deciding row
    (its interval inside the tolerance), so the treatment is kept."""
    store = Store(tmp_path)
    store.ablation(seeds=KEEP_SEEDS)
    code, report = store.check(tmp_path, "require_audit=true")  # the default: nothing non-default
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert code == 0 and report["verdict"] == "KEEP", out
    assert report["axis"] == {"name": "her", "baseline": "off"}
    assert set(verdicts(report).values()) == {"PASS", "INFO"}
    # three statistical rows decide: criterion 5 and held-out harm tested together; no run
    # broke, so Fisher's test could not reach alpha (its smallest p is 1): not in the family
    assert report["non_default"] == {} and report["tests_in_family"] == 2
    assert lines[0] == her_header(2)
    found = rows(report)
    numbered = [name.split(" ", 1)[0] for name in found if name[0].isdigit()]
    assert numbered == ["1", "2", "3", "4", "5", "6", "7"], list(found)  # each its own number
    for name in DECIDING_HER:
        row = found[name]
        assert row["verdict"] == "PASS" and row["required"] and 0 <= row["p"] <= 1, name
        assert row["p_safe"] <= 0.1 and row["verdict"] == "PASS", name
    for name in (STABILITY, BENEFIT):
        e = found[name]["evidence"]
        assert e["family"] == 2 and e["level"] in (0.0125, 0.025)  # Holm's steps
    assert found[BROKEN]["evidence"]["outside_family"] == 1
    assert "level" not in found[BROKEN]["evidence"]
    assert "its smallest possible p 1 > its level: not tested" in found[BROKEN]["value"]
    stability = found[STABILITY]
    assert stability["value"].startswith("geometric-mean ratio ")
    assert "over 20 pairs, p " in stability["value"]
    e = stability["evidence"]
    assert e["n"] == 20 and e["bound"] == pytest.approx(np.log(1.1))
    assert e["geometric_mean"] == pytest.approx(np.exp(e["mean"]))
    assert e["low"] < e["mean"] < e["high"]  # on the log scale
    ratios = [pair["ratio"] for pair in e["pairs"]]
    assert e["arithmetic_mean_of_ratios"] == pytest.approx(np.mean(ratios))
    assert e["geometric_mean"] == pytest.approx(np.exp(np.mean(np.log(ratios))))
    assert found[BROKEN]["value"].startswith("0 of 20 her=on runs broke vs 0 of 20 her=off (p 1)")
    assert "within +0.2: p 0.013" in found[BROKEN]["value"]
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
    store.ablation(seeds=KEEP_SEEDS, log=lambda her, seed: {"loss/l_q": l_q_curve(seed + 10, 1.8)})
    code, report = store.check(tmp_path)
    literal = rows(report)["l_q over the whole batch (the seed's)"]
    assert code == 0 and literal["verdict"] == "INFO" and not literal["required"]
    ratio = literal["evidence"]["ratio"]
    assert ratio["geometric_mean"] == pytest.approx(1.8, rel=0.05) and ratio["n"] == 20
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
    # worse, not broken (below 10 x its own median); five runs cannot show the rate within 0.2
    assert verdicts(report)[BROKEN] == "OPEN"
    assert rows(report)[STABILITY]["evidence"]["geometric_mean"] > 10


def test_a_slightly_worse_but_noisy_probe_loss_is_not_killed_on_noise(tmp_path: Path) -> None:
    """A probe loss 5% above the baseline's, within the tolerance (10%), on noisy runs: not
    killed; at five pairs not shown within it either (undecided), at twenty it is (kept)."""
    store = Store(tmp_path)

    def worse(her: str, seed: int) -> dict:
        return {"eval/l_q_probe": l_q_curve(seed + 30, 0.525, EVALS)}

    store.ablation(evals=worse)
    code, report = store.check(tmp_path)
    assert code == 2 and verdicts(report)[STABILITY] in ("PASS", "OPEN")
    assert report["treatments"][0]["verdict"] == "UNDECIDED"
    store.ablation(seeds=range(5, 20), evals=worse)
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
    assert code == 2 and broken["verdict"] == "OPEN"  # neither a KILL nor within 0.2
    assert broken["value"].startswith("1 of 5 her=on runs broke vs 0 of 5 her=off (p 0.5)")
    assert "non-finite loss/l_q" in broken["value"]
    assert broken["evidence"]["counts"] == [1, 5, 0, 5] and broken["p"] == pytest.approx(0.5)
    # one broken run of ten could at best give p = 0.5: it cannot decide, whatever the arm
    assert broken["evidence"]["outside_family"] == pytest.approx(0.5)
    assert list(broken["evidence"]["treatment_broken"].values()) == ["non-finite loss/l_q"]
    for name in (STABILITY, BENEFIT):
        assert found[name]["verdict"] != "KILL" and found[name]["evidence"]["n"] == 4
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
    assert code == 2 and found[BROKEN]["verdict"] == "OPEN"
    for name in (STABILITY, BENEFIT):
        assert found[name]["verdict"] == "NOT-EVALUATED"
        assert found[name]["evidence"]["not_judged"] == "2 pairs < min_seeds 5: not judged"
    t = report["treatments"][0]
    assert t["verdict"] == "UNDECIDED"
    assert f"{STABILITY}: 2 pairs < min_seeds 5: not judged" in t["blocked_by"]


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
    assert got == {"backward": "UNDECIDED", "on": "CANNOT-JUDGE"}  # five pairs show no harmlessness
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
    assert got == {"backward": "UNDECIDED", "forward": "KILL", "on": "UNDECIDED"}
    assert [t["value"] for t in report["treatments"]] == ["backward", "forward", "on"]
    assert all(len(t["pairs"]) == 5 for t in report["treatments"])
    # every treatment against the same five baselines
    bases = [{p["baseline"] for p in t["pairs"]} for t in report["treatments"]]
    assert bases[0] == bases[1] == bases[2] and len(bases[0]) == 5
    assert lines[-1].startswith("verdict: KILL (her=forward killed; her=backward undecided: ")
    assert "her=on undecided: " in lines[-1]
    # one family: criterion 5 and held-out harm of each of the three treatments, Holm over all
    # six (no run broke: the broken rates cannot reach alpha and stay out)
    assert lines[0] == her_header(6, 3) and report["tests_in_family"] == 6
    tested = [r for t in report["treatments"] for r in t["criteria"]
              if r["required"] and r["p"] is not None]  # fmt: skip
    family = [r for r in tested if "level" in r["evidence"]]
    assert [r["criterion"] for r in family] == [STABILITY, BENEFIT] * 3
    assert {r["criterion"] for r in tested if r not in family} == {BROKEN}
    # Holm's step-down (closed testing, Bonferroni's local tests): every test left at alpha /
    # (6 - those killed), again with the level the killed free, until none is killed
    left, killed = list(range(6)), 0
    while left:
        now = [i for i in left if family[i]["p"] <= 0.025 / (6 - killed)]
        if not now:
            break
        left, killed = [i for i in left if i not in now], killed + len(now)
    assert [r["verdict"] == "KILL" for r in family] == [i not in left for i in range(6)]
    assert [family[i]["evidence"]["level"] for i in left] == pytest.approx(
        [0.025 / (6 - killed)] * len(left)
    )
    # a direction the treatment does not run has no criterion to meet
    assert verdicts(report, "backward")["3 forward inject"] == "NOT-APPLICABLE"
    assert verdicts(report, "forward")["2 backward inject"] == "NOT-APPLICABLE"
    parent = store.client.get_run(store.parent).data.tags
    assert (parent["kill_check.verdict.forward"], parent["kill_check.verdict.on"]) == (
        "KILL",
        "UNDECIDED",
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
        assert lines[-2] == f"runs in the UI: {open_line(store.uri, store.eid, view=not args)}"
        assert lines[-2].endswith(ending)
        assert (VIEW_TAG in store.client.get_experiment(store.eid).tags) == (not args)


def test_runs_differing_beyond_the_axis_do_not_pair(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.ablation(seeds=(0,), with_base=False)
    store.her_run("off", 0, **{"agent.lr": "0.001"})
    code, report = store.check(tmp_path)
    assert code == 2 and len(report["unpaired"]) == 2


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
