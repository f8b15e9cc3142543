"""The kill check's held-out harm rows, too few pairs, recorded verdicts and audits, on stores
built here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.killcheck.store import (
    BENEFIT,
    BROKEN,
    DECIDING_HER,
    EVALS,
    STABILITY,
    STEPS,
    Store,
    her_header,
    l_q_curve,
    pnl_curve,
    reward_variants,
    rows,
    seed_effect,
    verdicts,
)


def harmed_pnl(seed: int) -> dict:
    """A held-out PnL 5000 below the healthy runs', with noise of its own."""
    return {"eval/pnl": pnl_curve(seed + 60) + seed_effect(seed) - 5000.0}


def test_held_out_harm_is_killed_on_the_her_axis_beyond_its_margin(tmp_path: Path,
                                                                   capsys) -> None:  # fmt: skip
    store = Store(tmp_path)
    store.ablation(evals=lambda her, seed: harmed_pnl(seed))
    code, report = store.check(tmp_path)
    lines = capsys.readouterr().out.splitlines()
    found = rows(report)
    benefit = found[BENEFIT]
    assert code == 1 and benefit["verdict"] == "KILL" and benefit["required"]
    assert found[STABILITY]["verdict"] == "PASS" and found[BROKEN]["verdict"] == "OPEN"
    assert benefit["value"].startswith("paired difference -")
    e = benefit["evidence"]
    assert e["mean"] == pytest.approx(-5000, abs=1000)
    # the margin: half the sd of the paired differences (the runs' own noise, ~800 USD apart)
    assert 100 < e["margin"] < 2000 and e["bound"] == -e["margin"]
    assert e["high"] < -e["margin"] and benefit["p"] <= e["level"] <= 0.025
    assert "-0.5 x the sd of the paired differences" in benefit["threshold"]
    assert lines[-1] == "verdict: KILL (her=on killed)"
    # a margin of 6000 USD: a loss of 5000 is within it, shown so; five pairs do not show the
    # rate of broken runs within 0.2 (undecided)
    code, report = store.check(tmp_path, "benefit_margin=6000", "benefit_margin_sd=null")
    benefit = rows(report)[BENEFIT]
    assert code == 2 and benefit["verdict"] == "PASS"
    assert benefit["evidence"]["bound"] == -6000 and "against -6,000 " in benefit["threshold"]
    assert report["treatments"][0]["verdict"] == "UNDECIDED"


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
    assert got == {"active": "KILL", "active_controller": "UNDECIDED"}
    assert report["tests_in_family"] == 2  # benefit for each of the two (none broke)
    active = rows(report, "active")
    assert (active[BENEFIT]["verdict"], active[STABILITY]["verdict"]) == ("KILL", "INFO")
    probe = rows(report, "active_controller")[STABILITY]
    assert probe["verdict"] == "INFO" and not probe["required"] and not probe["blocks"]
    assert probe["evidence"]["geometric_mean"] > 2 and probe["evidence"]["p"] < 0.001
    assert "level" not in probe["evidence"]  # outside the family
    assert probe["threshold"].startswith("reported: a learner's probe loss is not a fault here")
    assert verdicts(report, "active_controller")[BENEFIT] == "PASS"
    assert lines[-1].startswith(
        "verdict: KILL (beta=active killed; beta=active_controller "
        "undecided: 6 runs that broke (rate): open"
    )


def test_fewer_pairs_than_min_seeds_are_undecided(tmp_path: Path, capsys) -> None:
    """Three pairs, fewer than min_seeds: the statistical rows wait for pairs and the treatment
    is UNDECIDED (more seeds would decide it), saying how many would."""
    store = Store(tmp_path)
    store.ablation(seeds=(0, 1, 2))
    code, report = store.check(tmp_path)
    lines = capsys.readouterr().out.splitlines()
    assert code == 2 and report["verdict"] == "UNDECIDED"
    found = rows(report)
    for name in DECIDING_HER:
        assert found[name]["verdict"] == "NOT-EVALUATED" and found[name]["required"]
        assert "3 pairs < min_seeds 5: not judged" in found[name]["value"]
        assert "level" not in found[name]["evidence"]
        assert found[name]["evidence"]["seeds_to_decide"] is not None
    assert report["tests_in_family"] == 0 and lines[0] == her_header(0)
    blocked = "5 no destabilisation (eval/l_q_probe): 3 pairs < min_seeds 5: not judged, about "
    assert report["treatments"][0]["blocked_by"].startswith(blocked)
    last = lines[-1]
    assert last.startswith(f"verdict: UNDECIDED (her=on undecided: {blocked}")
    assert store.client.get_run(store.parent).data.tags["kill_check.verdict"] == "UNDECIDED"
    # three pairs are judged when min_seeds says so (too few to show the broken rate within)
    code, report = store.check(tmp_path, "min_seeds=3")
    lines = capsys.readouterr().out.splitlines()
    assert code == 2 and "NOT-EVALUATED" not in {verdicts(report)[n] for n in DECIDING_HER}
    assert lines[0] == "non-default criteria: min_seeds=3 (default 5)"
    assert lines[-1].startswith("verdict: UNDECIDED (her=on undecided: ")
    assert "6 runs that broke (rate): open, about " in lines[-1]


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
    assert code == 2 and report["verdict"] == "UNDECIDED"
    assert report["non_default"] == {"tolerance": {"value": 0.5, "default": 0.1}}
    assert report["settings"]["tolerance"] == 0.5
    assert out.splitlines()[0] == f"non-default criteria: {changed}"
    # 5 treatment runs, 5 baselines and the parent hold the default criteria's verdict
    assert (f"not recorded on the runs: 11 of them hold a verdict of the default criteria, which "
            f"these settings ({changed}) would overwrite; give --record") in out  # fmt: skip
    assert out.splitlines()[-1].startswith("verdict: UNDECIDED (her=on undecided: ")
    assert tags(store.parent)["kill_check.verdict"] == "KILL"
    assert {tags(r)["kill_check.verdict"] for r in treated} == {"KILL"}
    # --record: recorded, and the record says under which settings
    code, _ = store.check(tmp_path, "tolerance=0.5", "--record")
    out = capsys.readouterr().out
    assert code == 2 and "not recorded" not in out
    parent = tags(store.parent)
    assert parent["kill_check.verdict"] == "UNDECIDED"
    assert parent["kill_check.criteria"] == f"non-default: {changed}"
    assert f"non-default criteria: {changed}" in parent["mlflow.note.content"]
    for run_id in treated:
        assert tags(run_id)["kill_check.verdict"] == "UNDECIDED"
        assert tags(run_id)["kill_check.criteria"] == f"non-default: {changed}"


@pytest.mark.slow
def test_numpy_backend_runs_have_nothing_to_audit(tmp_path: Path) -> None:
    """Runs of the numpy backend executed the oracles: criteria 1-3 are NOT-APPLICABLE (forward
    HER's count of lost closes still read, not blocking) and the audit does not hold back a KEEP;
    one run of another backend without audits in the arm makes it not audited again."""
    store = Store(tmp_path)
    store.numpy_backend = True
    # two treatments share beta (0.05 each): enough pairs to show both within every tolerance
    store.ablation(treatments=("backward", "on"), seeds=range(20))
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
    assert code == 2 and row["verdict"] == "PASS"  # five pairs: undecided, not killed
    assert report["treatments"][0]["verdict"] == "UNDECIDED"
    assert row["threshold"].startswith("her/inject_total > 0 by step 10000 ")


def test_a_report_goes_under_its_sweep_or_outputs_never_the_working_directory() -> None:
    from alpha_rl.killcheck.cli import report_dir

    assert report_dir([Path("multirun/a")]).parent == Path("multirun/a/kill_check")
    assert report_dir([Path("multirun/a"), Path("multirun/b")]).parent == Path("outputs/kill_check")
    assert report_dir([]).parent == Path("outputs/kill_check")
