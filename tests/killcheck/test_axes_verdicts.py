"""The kill check on the beta, reward and any-key axes and on walk-forward folds, on stores
built here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.killcheck.store import (
    BENEFIT,
    BROKEN,
    EVALS,
    SEEDS,
    STABILITY,
    Store,
    l_q_curve,
    reward_variants,
    rows,
    verdicts,
)


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
    # off the her axis the rate of broken runs and held-out harm decide; criterion 5 is INFO;
    # five clean runs an arm do not show the broken rate within 0.2: undecided
    assert (got[STABILITY], got[BROKEN], got[BENEFIT]) == ("INFO", "OPEN", "PASS") and code == 2
    assert out.splitlines()[0] == ("deciding on the beta axis: broken, benefit; KILL: alpha 0.025 "
                                   "family-wise (Holm over the check's 1 test); KEEP: beta 0.1 "
                                   "family-wise (harmlessness shown on every deciding "
                                   "criterion; Holm over 1 treatment)")  # fmt: skip
    assert "== beta=active vs beta=sentinel: 5 pairs" in out


def test_axis_reward_pairs_stride7_with_stride6(tmp_path: Path) -> None:
    store = Store(tmp_path)
    reward_variants(store)
    code, report = store.check(tmp_path, "--axis", "reward")
    [seven] = report["treatments"]
    assert code == 2 and seven["verdict"] == "UNDECIDED"  # judged: five pairs decide nothing
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
    assert code == 2 and report["treatments"][0]["verdict"] == "UNDECIDED"
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
