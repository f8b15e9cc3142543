"""Hyper-parameter search (hparams_search=, the alpha_rl_optuna sweeper) as a whole tiny search on
the numpy backend: a failing trial, Optuna and MLflow agreeing on every trial, the parent's
best-trial tags, a search resumed into the same study, its confirmation (alpha-rl-confirm) on an
unseen seed and folds; the search space's grammar and the Deflated Sharpe Ratio."""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import optuna
import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from mlflow.tracking import MlflowClient
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from scipy.stats import norm

from alpha_rl.errors import ConfigError
from alpha_rl.search import confirm as confirm_module
from alpha_rl.search import space
from alpha_rl.search.confirm import unseen_folds
from alpha_rl.search.shrinkage import deflated_sharpe
from alpha_rl.search.storage import JOURNAL, open_storage
from alpha_rl.search.study import STUDY_TAG
from tests.bad_stores import PASSWORD, fingerprint, make
from tests.helpers import paste

ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
# a grid of four trials, one of which (lookahead -1) is refused by the config checks
GRID = [
    "hydra.sweeper.sampler.name=grid",
    "hydra.sweeper.n_trials=4",
    "her.threshold=choice(1.5)",
    "her.priority_boost=choice(3.0)",
    "her.lookahead=choice(4,5,6,-1)",
]


def module(tmp_path: Path, name: str, *args: str) -> subprocess.CompletedProcess:
    """`python -m <name> <args>` in tmp_path."""
    cmd = [sys.executable, "-m", name, *args]
    return subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)


def search(tmp_path: Path, sweep: str, *overrides: str) -> subprocess.CompletedProcess:
    return module(tmp_path, "alpha_rl.train", "-m", "hparams_search=her_optuna", "debug=tiny",
                  "steps=20", "backend=numpy", f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
                  f"hydra.sweep.dir={sweep}", *overrides)  # fmt: skip


def study_of(tmp_path: Path) -> optuna.Study:
    journal = open_storage(f"{JOURNAL}{tmp_path / 'optuna.journal'}")
    return optuna.load_study(study_name="her_optuna", storage=journal)


def parent_of(client: MlflowClient, tmp_path: Path, sweep: str):
    run_id = json.loads((tmp_path / sweep / "mlflow_parent.json").read_text())["run_id"]
    return client.get_run(run_id)


@pytest.mark.slow
def test_a_search_with_a_failing_trial_finishes_and_optuna_and_mlflow_agree(tmp_path: Path):
    done = search(tmp_path, "sweep", *GRID)
    assert done.returncode == 0, done.stderr[-3000:]
    study = study_of(tmp_path)
    states = [t.state for t in study.trials]
    assert len(states) == 4 and states.count(optuna.trial.TrialState.FAIL) == 1
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    parent = parent_of(client, tmp_path, "sweep")
    for trial in study.trials:
        run = client.get_run(trial.user_attrs["mlflow_run_id"])
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.data.tags["search.trial"] == str(trial.number)
        assert run.data.tags["search.study"] == "her_optuna"
        if trial.params["her.lookahead"] == -1:
            assert trial.state == optuna.trial.TrialState.FAIL and trial.value is None
            assert run.info.status == "FAILED"
            assert "her.lookahead=-1" in run.data.tags["alpha_rl.failure_reason"]
            assert "her.lookahead=-1" in trial.user_attrs["error"]
        else:
            assert trial.state == optuna.trial.TrialState.COMPLETE
            assert run.info.status == "FINISHED"
            assert math.isfinite(trial.value)
            assert run.data.metrics["search/objective"] == pytest.approx(trial.value, rel=1e-12)
            assert run.data.params["her.lookahead"] == str(trial.params["her.lookahead"])
    best = max((t for t in study.trials if t.value is not None), key=lambda t: t.value)
    tags = parent.data.tags
    assert tags["search.best_trial"] == str(best.number)
    assert tags["search.best.her.lookahead"] == str(best.params["her.lookahead"])
    assert tags["search.best_run"] == best.user_attrs["mlflow_run_id"]
    assert (tags["search.trials_complete"], tags["search.trials_failed"]) == ("3", "1")
    assert parent.info.status == "FINISHED"
    assert "failed" in (tmp_path / "sweep" / "search_results.yaml").read_text()
    # the search ends with the confirmation to run, which a fresh shell here finds (--help: a
    # confirmation as printed runs for its default seeds, folds and steps)
    suggested = printed_after(done.stdout + done.stderr, "confirm it: ")
    assert f"--parent {parent.info.run_id} --tracking-uri sqlite:///" in suggested
    helped = paste(f"{suggested} --help", tmp_path)
    assert helped.returncode == 0 and "usage: alpha-rl-confirm" in helped.stdout, helped.stdout

    # the same search again adds its trials to the same study, under a parent of its own
    again = search(
        tmp_path,
        "sweep2",
        *GRID[2:],
        "hydra.sweeper.n_trials=1",
        "hydra.sweeper.sampler.name=random",
    )
    assert again.returncode == 0, again.stderr[-3000:]
    study = study_of(tmp_path)
    assert [t.number for t in study.trials] == [0, 1, 2, 3, 4]
    second = parent_of(client, tmp_path, "sweep2")
    assert study.user_attrs["parents"] == [parent.info.run_id, second.info.run_id]
    assert second.data.tags["search.best_trial"] in {str(t.number) for t in study.trials}

    # a resumed study must search what it was created with
    other = search(
        tmp_path, "sweep3", *GRID[2:4], "her.lookahead=choice(7,8)", "hydra.sweeper.n_trials=1"
    )
    assert other.returncode == 2
    assert "was created with space" in other.stderr + other.stdout

    # the confirmation: the best trial and the default again on an unseen seed and two folds
    refused = confirm(tmp_path, parent.info.run_id, "--seeds", "0")
    assert refused.returncode == 2 and "the search's own" in refused.stderr
    done = confirm(
        tmp_path,
        parent.info.run_id,
        "--top",
        "1",
        "--seeds",
        "1",
        "--folds",
        "0,1",
        "debug=tiny",
        "steps=20",
        "backend=numpy",
    )
    # one seed on two folds: 2 pairs per candidate, fewer than the check's min_seeds (5), so its
    # statistical criteria are not judged and the verdict is UNDECIDED (exit 2), saying why
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    last = done.stdout.splitlines()[-1]
    assert last.startswith("verdict: UNDECIDED (search=trial") and "Traceback" not in done.stderr
    assert "2 pairs < min_seeds 5: not judged" in last
    rep = json.loads((tmp_path / "confirm" / "confirm.json").read_text())
    assert rep["verdict"] == "UNDECIDED"
    assert rep["trials_tried"] == 5 and rep["seeds"] == [1] and rep["folds"] == [0, 1]
    default, winner = rep["candidates"]
    assert winner["candidate"] == f"trial{study.best_trial.number}" == rep["winner"]
    assert winner["search"] == study.best_value and default["runs"] == winner["runs"] == 2
    assert winner["shrinkage"] == pytest.approx(winner["search"] - winner["confirmed"])
    assert 0.0 <= rep["deflated_sharpe_ratio"] <= 1.0
    runs = client.search_runs(
        [parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{rep['confirm_parent']}'"
    )
    assert len(runs) == 4 and {r.data.params["seed"] for r in runs} == {"1"}
    assert {r.data.params["market.fold"] for r in runs} == {"0", "1"}
    tags = client.get_run(parent.info.run_id).data.tags
    assert tags["confirm.verdict"] == rep["verdict"] and tags["confirm.trials_tried"] == "5"
    assert "Deflated Sharpe Ratio" in done.stdout
    # the multirun the confirmation ran, as it printed it: its program is found in a fresh shell
    program = shlex.split(printed_after(done.stdout, "confirmation: "))[0]
    assert paste(f"command -v {shlex.quote(program)}", tmp_path).returncode == 0, program


def printed_after(out: str, head: str) -> str:
    """The rest of the one line of `out` that holds `head`, after it."""
    (line,) = [x for x in out.splitlines() if head in x]
    return line.split(head, 1)[1]


def confirm(tmp_path: Path, parent: str, *args: str) -> subprocess.CompletedProcess:
    return module(tmp_path, "alpha_rl.search.confirm", "--parent", parent, "--tracking-uri",
                  f"sqlite:///{tmp_path}/mlflow.db", "--out", "confirm", *args)  # fmt: skip


def confirm_in_process(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str]:
    """(exit status, stderr) of `alpha-rl-confirm argv` run in this process."""
    with pytest.raises(SystemExit) as stop:
        confirm_module.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and PASSWORD not in out + err
    return stop.value.code, err


@pytest.mark.parametrize("kind", ["random bytes", "missing", "server down", "database down"])
def test_the_confirmation_cannot_judge_a_store_it_cannot_read(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    uri, refusal = make(kind, tmp_path / "no template needed", tmp_path)
    before = fingerprint(tmp_path)
    code, err = confirm_in_process(capsys, "--parent", "0" * 32, "--tracking-uri", uri)
    line, verdict = err.splitlines()
    assert code == 2 and line.startswith("alpha-rl-confirm: ") and refusal in line
    assert verdict == "verdict: CANNOT-JUDGE"
    assert fingerprint(tmp_path) == before  # nothing created


def test_the_confirmation_does_not_create_a_missing_study_storage(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    storage = tmp_path / "gone" / "optuna.db"
    tags = {STUDY_TAG: "her_optuna", "search.storage": f"sqlite:///{storage}"}
    parent = client.create_run(client.create_experiment("alpha_rl"), tags=tags).info.run_id
    code, err = confirm_in_process(
        capsys, "--parent", parent, "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db"
    )
    assert code == 2 and err.splitlines() == [
        f"alpha-rl-confirm: no study storage at {storage} (the search.storage tag of --parent "
        f"{parent}): put the search's storage back there",
        "verdict: CANNOT-JUDGE",
    ]
    assert not storage.parent.exists()


def test_the_deflated_sharpe_ratio_deflates_by_the_number_of_trials() -> None:
    trials = np.array([0.1, -0.2, 0.3, 0.0, 0.15])
    few, sr0_few = deflated_sharpe(0.3, trials, 5, 250, 0.0, 3.0)
    many, sr0_many = deflated_sharpe(0.3, trials, 500, 250, 0.0, 3.0)
    assert sr0_many > sr0_few > 0 and many < few
    # at SR0 itself the probability is one half; normal returns: the PSR's plain form
    at, _ = deflated_sharpe(sr0_few, trials, 5, 250, 0.0, 3.0)
    assert at == pytest.approx(0.5)
    want = norm.cdf((0.3 - sr0_few) * np.sqrt(249) / np.sqrt(1 + 0.5 * 0.3**2))
    assert few == pytest.approx(want)
    # fat tails and negative skew widen the estimate's spread: a lower DSR for the same SR
    fat, _ = deflated_sharpe(0.3, trials, 5, 250, -1.0, 9.0)
    assert fat < few
    assert np.isnan(deflated_sharpe(0.3, trials, 1, 250, 0.0, 3.0)[0])


def test_the_default_confirmation_folds_end_before_the_searchs_held_out_part() -> None:
    assert unseen_folds(0.8, 4, 0.1) == [0, 1]  # test windows 0.6-0.7, 0.7-0.8
    assert unseen_folds(0.8, 2, 0.1) == []


def parsed(line: str):
    return space.distribution(OverridesParser.create().parse_overrides([line])[0])


def test_the_search_space_grammar_maps_to_optuna_distributions() -> None:
    assert parsed("a=choice(1,3,5)") == CategoricalDistribution([1, 3, 5])
    assert parsed("a=range(10,210,10)") == IntDistribution(10, 200, step=10)
    assert parsed("a=interval(1.0,3.0)") == FloatDistribution(1.0, 3.0)
    assert parsed("a=tag(log,interval(1e-5,1e-3))") == FloatDistribution(1e-5, 1e-3, log=True)
    assert parsed("a=tag(int,interval(2,9))") == IntDistribution(2, 9)
    bad_lines = [
        ("a=interval(3,1)", "low < high"),
        ("a=tag(log,interval(0,1))", "log"),
        ("a=range(5,5)", "empty"),
        ("a=tag(odd,interval(1,2))", "unknown tag"),
    ]
    for bad, match in bad_lines:
        with pytest.raises(ConfigError, match=match):
            parsed(bad)
    dims, fixed = space.parse(
        {"her.threshold": "interval(1,2)"}, ["seed=3", "agent.lr=choice(1,2)"]
    )
    assert set(dims) == {"her.threshold", "agent.lr"} and fixed == ["seed=3"]
    with pytest.raises(ConfigError, match="no dimension"):
        space.parse({}, ["seed=3"])


@pytest.mark.parametrize(
    ("value", "line"),
    [
        (0.5, "k=0.5"),
        (3, "k=3"),
        (True, "k=true"),
        (None, "k=null"),
        ("off", "k='off'"),
        ("dqn_c51", "k=dqn_c51"),
        ("a b", "k='a b'"),
        ("nan", "k='nan'"),
        ("inf", "k='inf'"),
    ],
)
def test_a_trial_value_becomes_an_override_hydra_reads_back(value, line) -> None:
    assert space.as_override("k", value) == line
    parsed_back = OverridesParser.create().parse_overrides([line])[0].value()
    assert parsed_back == value


def test_the_objectives_iqm_keeps_scipys_middle_half_and_adds_it_portably() -> None:
    from scipy import stats

    from alpha_rl.pipeline.configure.objective import interquartile_mean

    assert interquartile_mean(np.array([100.0, 1.0, 3.0, 2.0])) == 2.5  # 1 and 100 cut
    assert interquartile_mean(np.array([4.0, -1.0, 2.0])) == 5 / 3  # n = 3: nothing cut
    gen = np.random.default_rng(5)
    for n in (5, 8, 13, 40):
        x = gen.normal(size=n)
        assert interquartile_mean(x) == pytest.approx(stats.trim_mean(x, 0.25), rel=1e-12)
