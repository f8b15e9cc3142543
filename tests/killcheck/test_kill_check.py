"""The kill check on MLflow stores built here with known trajectories."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

from tests.killcheck.store import (
    EVALS,
    SEEDS,
    STABILITY,
    STEPS,
    Store,
    l_q_curve,
    ramp,
    rows,
    verdicts,
)


def test_a_stable_her_ablation_is_kept(tmp_path: Path, capsys) -> None:
    store = Store(tmp_path)
    store.ablation()
    code, report = store.check(tmp_path, "require_audit=true")
    out = capsys.readouterr().out
    assert code == 0 and report["verdict"] == "KEEP", out
    assert report["axis"] == {"name": "her", "baseline": "off"}
    assert set(verdicts(report).values()) == {"PASS", "INFO"}
    assert verdicts(report)[STABILITY] == "PASS"
    assert "verdict her=on: KEEP" in out and "verdict: KEEP (her=on kept)" in out
    assert "fewer than 5 runs in an arm (her=on 3, her=off 3)" in out  # 3 seeds
    client = store.client
    parent = client.get_run(store.parent).data.tags
    assert parent["kill_check.verdict"] == "KEEP" and parent["kill_check.verdict.on"] == "KEEP"
    names = {a.path for a in client.list_artifacts(store.parent, "kill_check")}
    assert names == {"kill_check/kill_check.json", "kill_check/kill_check.png"}
    # panels: the probe loss, l_q, the capture ratio (no eval/pnl): 3 x 6 inches at 110 dpi
    assert plt.imread(tmp_path / "report" / "kill_check.png").shape[1] == 1980
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
    assert literal["evidence"]["ratio"]["mean"] == pytest.approx(1.8, rel=0.05)
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


def test_a_slightly_worse_but_noisy_probe_loss_is_not_killed_on_noise(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.ablation(evals=lambda her, seed: {"eval/l_q_probe": l_q_curve(seed + 30, 0.525, EVALS)})
    code, report = store.check(tmp_path)
    assert code == 0 and verdicts(report)[STABILITY] == "PASS"


def test_a_nan_in_the_her_runs_l_q_is_killed(tmp_path: Path) -> None:
    store = Store(tmp_path)
    curve = l_q_curve(3)
    curve[-1] = np.nan
    store.ablation(log=lambda her, seed: {"loss/l_q": curve} if seed == 1 else {})
    code, report = store.check(tmp_path)
    assert code == 1 and verdicts(report)[STABILITY] == "KILL"


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


def test_zero_injections_after_10k_steps_is_killed(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.ablation(log=lambda her, seed: {"her/inject_total": np.zeros(STEPS.size),
                                          "her/backward_total": np.zeros(STEPS.size)})  # fmt: skip
    code, report = store.check(tmp_path)
    assert code == 1 and verdicts(report)["4 injections on done steps"] == "KILL"


def test_audit_mismatches_are_killed(tmp_path: Path) -> None:
    store = Store(tmp_path)
    bad = np.zeros(STEPS.size)
    bad[7] = 3
    store.ablation(log=lambda her, seed: {"audit/her_forward": bad})
    code, report = store.check(tmp_path)
    assert code == 1
    assert verdicts(report)["3 forward inject"] == "KILL" and verdicts(report)["1 track"] == "PASS"


@pytest.mark.parametrize("how", ["her/forward_overwritten_total", "her/forward_expired_total"])
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
    assert "forward HER lost closes unjudged in 1 of 3 runs" in row["value"]
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
    assert row["value"].startswith("3 of 3 forward runs have no her/forward_overwritten_total")


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


def test_three_treatments_get_three_verdicts_and_one_kill_exits_1(tmp_path: Path, capsys) -> None:
    store = Store(tmp_path)
    worse = {"eval/l_q_probe": l_q_curve(7, 1.5, EVALS)}  # the probe loss 3x the baseline's
    store.ablation(treatments=("backward", "forward", "on"), seeds=(0, 1, 2, 3, 4),
                   evals=lambda her, seed: worse if her == "forward" else {})  # fmt: skip
    code, report = store.check(tmp_path)
    out = capsys.readouterr().out
    assert code == 1 and report["verdict"] == "KILL"
    got = {t["value"]: t["verdict"] for t in report["treatments"]}
    assert got == {"backward": "KEEP", "forward": "KILL", "on": "KEEP"}
    assert [t["value"] for t in report["treatments"]] == ["backward", "forward", "on"]
    assert all(len(t["pairs"]) == 5 for t in report["treatments"])
    # every treatment against the same five baselines
    bases = [{p["baseline"] for p in t["pairs"]} for t in report["treatments"]]
    assert bases[0] == bases[1] == bases[2] and len(bases[0]) == 5
    assert "verdict: KILL (her=forward killed; her=backward, her=on kept)" in out
    assert "fewer than" not in out  # five seeds an arm
    # a direction the treatment does not run has no criterion to meet
    assert verdicts(report, "backward")["3 forward inject"] == "NOT-APPLICABLE"
    assert verdicts(report, "forward")["2 backward inject"] == "NOT-APPLICABLE"
    parent = store.client.get_run(store.parent).data.tags
    assert (parent["kill_check.verdict.forward"], parent["kill_check.verdict.on"]) == (
        "KILL",
        "KEEP",
    )
    # one curve per arm: four arms in the legend of each panel
    assert plt.imread(tmp_path / "report" / "kill_check.png").shape[1] == 1980


def test_unpaired_runs_cannot_be_judged(tmp_path: Path, capsys) -> None:
    store = Store(tmp_path)
    store.ablation(with_base=False)
    store.her_run("off", 7)  # a baseline of another seed
    code, report = store.check(tmp_path)
    assert code == 2 and report["verdict"] == "CANNOT-JUDGE"
    assert len(report["unpaired"]) == 4 and report["treatments"] == []
    assert capsys.readouterr().out.count("unpaired:") == 4


def test_runs_differing_beyond_the_axis_do_not_pair(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.ablation(seeds=(0,), with_base=False)
    store.her_run("off", 0, **{"agent.lr": "0.001"})
    code, report = store.check(tmp_path)
    assert code == 2 and len(report["unpaired"]) == 2


def test_a_baseline_at_the_target_by_its_first_evaluation_gives_a_bound(tmp_path, capsys) -> None:
    store = Store(tmp_path)
    # baselines at their plateau 0.5 from the first evaluation (250); HER reaches 0.8 x 0.5 at 4000
    store.ablation(base_evals=lambda seed: {"eval/capture_ratio": np.full(EVALS.size, 0.5)},
                   evals=lambda her, seed: {"eval/capture_ratio": ramp(5000, 0.5)})  # fmt: skip
    code, report = store.check(tmp_path)
    assert code == 0
    speed = rows(report)["steps to capture target"]
    bound = speed["evidence"]["speedup"]
    assert bound == {"kind": "upper bound", "high": pytest.approx(250 / 4000)}
    assert "speed-up <= 0.0625x (a bound: censored pairs)" in speed["value"]
    assert "her=off: 3 of 3 reached, 3 at the first evaluation (<= 250)" in speed["value"]
    assert "<= 0.0625x" in capsys.readouterr().out


def test_an_arm_that_never_reaches_the_target_is_counted_as_censored(tmp_path: Path) -> None:
    store = Store(tmp_path)
    # the baselines reach 0.8 x their 0.35 plateau at 9000; HER in seed 1 never gets past 0.2
    stuck = {"eval/capture_ratio": np.full(EVALS.size, 0.2)}
    store.ablation(evals=lambda her, seed: stuck if seed == 1 else {})
    code, report = store.check(tmp_path)
    assert code == 0
    speed = rows(report)["steps to capture target"]
    assert "her=on: 2 of 3 reached" in speed["value"] and "1 never (> 12000)" in speed["value"]
    # the censored pair bounds the geometric mean from above: 9000/12000 is its largest value
    assert speed["evidence"]["speedup"]["kind"] == "upper bound"
    assert len(speed["evidence"]["pairs"]) == 3  # counted, not dropped
    assert speed["evidence"]["speedup"]["high"] == pytest.approx(
        np.exp(np.mean(np.log([9000 / 3000, 9000 / 12000, 9000 / 3000])))
    )


def test_exact_times_give_a_value_with_an_interval(tmp_path: Path) -> None:
    store = Store(tmp_path)
    # the baseline's plateau: its mean over 9000-12000, 0.35; the target 0.28 is reached by the
    # baseline at 9000 (0.3) and by HER (0.4 at 4000) at 3000 (0.3)
    store.ablation()
    code, report = store.check(tmp_path)
    assert code == 0
    speed = rows(report)["steps to capture target"]["evidence"]["speedup"]
    assert speed["kind"] == "value" and speed["geomean"] == pytest.approx(9000 / 3000)


def test_area_ratios_need_no_target(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.ablation(evals=lambda her, seed: {"eval/pnl": np.full(EVALS.size, 3.0)},
                   base_evals=lambda seed: {"eval/pnl": np.full(EVALS.size, 2.0)})  # fmt: skip
    code, report = store.check(tmp_path)
    assert code == 0
    area = rows(report)["area under held-out pnl"]["evidence"]["ratio"]
    assert area["mean"] == pytest.approx(1.5) and area["n"] == 3


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
    ):
        with pytest.raises(SystemExit) as stop:
            main(["--tracking-uri", store.uri, "--parent", store.parent, "--no-write", bad])
        assert stop.value.code == 2 and named in capsys.readouterr().err


def reward_variants(store: Store, seeds=SEEDS) -> None:
    """experiment=reward_variants: stride6, stride7 + sentinel, stride7 + active per seed."""
    layouts = {"stride6": ("6", "sentinel", "0.0"), "stride7_sentinel": ("7", "sentinel", "0.0"),
               "stride7_active": ("7", "active", "0.1")}  # fmt: skip
    for seed in seeds:
        for stride, mode, scale in layouts.values():
            params = {"reward.stride": stride, "beta.mode": mode, "beta.scale": scale,
                      "isv.slots.beta.aux_align_scale.init": scale}  # fmt: skip
            if stride == "7":
                params |= {"reward.aux_align_weight": "1.0",
                           "isv.slots.reward.w_aux_align.index": "537"}  # fmt: skip
            store.her_run("on", seed, **params)


def test_axis_beta_pairs_active_with_the_sentinel(tmp_path: Path, capsys) -> None:
    store = Store(tmp_path)
    reward_variants(store)
    code, report = store.check(tmp_path, "--axis", "beta")
    out = capsys.readouterr().out
    assert report["axis"] == {"name": "beta", "baseline": "sentinel"}
    [active] = report["treatments"]
    assert active["value"] == "active" and len(active["pairs"]) == 3
    names = {r.info.run_id: r.data.params for r in store.client.search_runs([store.eid])}
    for pair in active["pairs"]:
        t, b = names[pair["treatment"]], names[pair["baseline"]]
        assert (t["beta.mode"], b["beta.mode"]) == ("active", "sentinel")
        assert t["reward.stride"] == b["reward.stride"] == "7" and t["seed"] == b["seed"]
    # the stride-6 runs differ in reward.*, beyond the axis: listed, not paired
    assert len(report["unpaired"]) == 3 and all("sentinel run without" in u["why"]
                                                for u in report["unpaired"])  # fmt: skip
    got = verdicts(report, "active")
    assert {got[k] for k in ("1 track", "2 backward inject", "3 forward inject",
                             "4 injections on done steps")} == {"NOT-APPLICABLE"}  # fmt: skip
    assert got[STABILITY] == "PASS" and code == 0
    assert "== beta=active vs beta=sentinel: 3 pairs" in out


def test_axis_reward_pairs_stride7_with_stride6(tmp_path: Path) -> None:
    store = Store(tmp_path)
    reward_variants(store)
    code, report = store.check(tmp_path, "--axis", "reward")
    assert code == 0
    [seven] = report["treatments"]
    assert seven["label"] == "reward=stride7" and len(seven["pairs"]) == 3
    assert report["axis"]["baseline"] == "stride6"


def test_runs_whose_ring_resolved_from_their_lookahead_still_pair(tmp_path: Path) -> None:
    store = Store(tmp_path)
    for seed in SEEDS:  # her.closed_ring=auto: B x (lookahead + 1) rounded up, at B = 4096
        store.her_run("forward", seed, **{"her.lookahead": "50",
                                          "her.closed_ring_resolved": "262144"})  # fmt: skip
        store.her_run("forward", seed, **{"her.lookahead": "160",
                                          "her.closed_ring_resolved": "1048576"})  # fmt: skip
    _, report = store.check(tmp_path, "--axis", "her.lookahead", "--baseline", "50")
    assert len(report["treatments"][0]["pairs"]) == 3


def test_any_config_key_is_an_axis_with_its_default_as_baseline(tmp_path: Path) -> None:
    store = Store(tmp_path)
    for seed in SEEDS:
        store.her_run("on", seed)  # agent.lr 0.0003, the default config's
        store.her_run("on", seed, **{"agent.lr": "0.001"})
    code, report = store.check(tmp_path, "--axis", "agent.lr")
    assert code == 0
    assert report["axis"] == {"name": "agent.lr", "baseline": "0.0003"}
    [faster] = report["treatments"]
    assert faster["label"] == "agent.lr=0.001" and len(faster["pairs"]) == 3
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
    # pooled over folds the mean ratio is (1 + 1 + 1.5) / 3; its interval is stratified
    ratio = found[STABILITY]["evidence"]["ratio"]
    assert ratio["mean"] == pytest.approx(3.5 / 3) and ratio["strata"] == 3
    assert "over 6 pairs in 3 folds" in found[STABILITY]["value"]
    # each fold constant across its two seeds: the stratified interval is a point
    assert (ratio["low"], ratio["high"]) == pytest.approx((3.5 / 3, 3.5 / 3))
    assert code == 1, "1.17 > 1 + tolerance 0.1 with a point interval: killed"
    for fold, want in (("0", 1.0), ("1", 1.0), ("2", 1.5)):
        row = found[f"fold {fold}"]
        assert row["verdict"] == "INFO" and row["evidence"]["ratios"] == pytest.approx([want] * 2)
        assert row["evidence"]["pnl_differences"] == [-30.0 if fold == "2" else 0.0] * 2
    assert (
        "2 pairs; eval/l_q_probe ratio 1.5 [1.5, 1.5]; held-out pnl difference -30 [-30, -30]"
        in out
    )
    assert "fewer than 5 runs in an arm of a fold (her=on 2, her=off 2)" in out


def test_a_fold_without_its_baseline_leaves_its_runs_unpaired(tmp_path: Path) -> None:
    store = walk_forward_store(tmp_path, worse_fold=0, factor=1.0)
    store.her_run("on", 0, **{"market.fold": "3"})  # fold 3 has no her=off run
    _, report = store.check(tmp_path)
    assert len(report["treatments"][0]["pairs"]) == 6
    assert [u["why"] for u in report["unpaired"]] == [
        "her=on run without a her=off run of the same config and seed"
    ]
