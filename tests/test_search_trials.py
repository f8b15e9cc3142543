"""A search's trials over seeds and folds (alpha_rl.search.instances): each instance's value an
intermediate value at its id, the trial's value their mean; the Wilcoxon pruner stopping a trial
that is worse than the best on a constructed objective (a launcher that makes the values); the
study's journal written by two searches at once; the margin objective; the settings refused."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import optuna
import pytest
from hydra.core.utils import JobReturn, JobStatus
from omegaconf import OmegaConf

from alpha_rl.errors import ConfigError
from alpha_rl.pipeline.configure.config import plan_run
from alpha_rl.pipeline.configure.objective import Objective
from alpha_rl.search.instances import instances, trial_order
from alpha_rl.search.storage import open_storage, storage_url
from alpha_rl.search.study import Search, SearchConfig
from tests.helpers import compose_train

ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}


class MadeUp:
    """A launcher whose jobs return a made-up objective: `value(trial, seed, fold)`, recording
    every job it was given."""

    def __init__(self, value) -> None:
        self.value, self.jobs = value, []

    def launch(self, batch: list[list[str]], initial_job_idx: int) -> list[JobReturn]:
        returns = []
        for overrides in batch:
            given = dict(o.split("=", 1) for o in overrides)
            self.jobs.append(given)
            fold = given.get("market.fold")
            ret = JobReturn(overrides=overrides, status=JobStatus.COMPLETED)
            ret.return_value = self.value(int(given["search.trial"]), int(given["seed"]),
                                          None if fold is None else int(fold))  # fmt: skip
            returns.append(ret)
        return returns


def made_up_search(tmp_path: Path, launcher: MadeUp, **settings) -> Search:
    """A search over her.threshold (3 choices, random sampler) on folds 0 and 1 with `settings`
    (of hydra.sweeper), its study in a journal under tmp_path, run by `launcher`."""
    cfg, _ = compose_train([f"hydra.sweep.dir={tmp_path}/sweep", "hparams_search=her_optuna",
                            f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
                            "validation=walk_forward"])  # fmt: skip
    given = {"n_trials": 3, "sampler": {"name": "random", "seed": 0}, "folds": [0, 1],
             "params": {"her.threshold": "choice(1.0,2.0,3.0)"}} | settings  # fmt: skip
    return Search(SearchConfig.build(given, cfg), cfg, launcher)


def test_a_trial_worse_than_the_best_on_every_instance_is_pruned_by_wilcoxon(tmp_path: Path):
    """Trial 0 is worth 10 more than any other on every (seed, fold): 4 seeds x 2 folds, 2 at a
    time; the later trials are pruned once the signed-rank test has enough pairs, their other
    instances never run, and each records its partial mean."""
    launcher = MadeUp(lambda trial, seed, fold: (10.0 if trial == 0 else 0.0) + seed + 3 * fold)
    search = made_up_search(tmp_path, launcher, seeds=[0, 1, 2, 3], wave=2,
                            pruner={"n_startup_steps": 2})  # fmt: skip
    search.run([])
    study = optuna.load_study(study_name="her_optuna",
                              storage=open_storage(search.cfg.storage))  # fmt: skip
    assert search.cfg.storage == f"journal://{tmp_path / 'optuna.journal'}"
    held = instances([0, 1, 2, 3], [0, 1])
    best, *others = study.trials
    assert best.state == optuna.trial.TrialState.COMPLETE
    assert best.intermediate_values == {i.id: 10.0 + i.seed + 3 * i.fold for i in held}
    assert best.value == pytest.approx(np.mean([10.0 + i.seed + 3 * i.fold for i in held]))
    for trial in others:
        assert trial.state == optuna.trial.TrialState.PRUNED, trial
        ran = dict(trial.intermediate_values)
        partial = ran.pop(len(held))  # its partial mean, at the step past the last instance's
        assert trial.value == partial  # Optuna's value of a pruned trial: its last step's
        assert 2 <= len(ran) < len(held) and len(ran) % 2 == 0  # whole waves, not all of them
        order = trial_order(len(held), 0, trial.number)
        assert sorted(ran) == sorted(order[: len(ran)])  # in the trial's own order
        assert ran == {i: held[i].seed + 3.0 * held[i].fold for i in ran}
        assert (
            partial
            == trial.user_attrs["partial_mean"]
            == pytest.approx(np.mean(list(ran.values())))
        )
        assert trial.user_attrs["instances_run"] == len(ran)
        jobs = [j for j in launcher.jobs if j["search.trial"] == str(trial.number)]
        assert len(jobs) == len(ran)  # the pruned instances never ran
        assert {int(j["search.instance"]) for j in jobs} == set(ran)
    results = OmegaConf.load(tmp_path / "sweep" / "search_results.yaml")
    assert (results.pruned, results.failed, results.best_trial) == (2, 0, 0)


def test_without_waves_or_with_a_failed_instance_nothing_is_pruned(tmp_path: Path) -> None:
    """wave=0 (the default) runs every instance at once: nothing to prune. A trial one of whose
    runs returns NaN fails with the instance named; the search goes on."""
    launcher = MadeUp(lambda trial, seed, fold: math.nan if (trial, seed) == (1, 2)
                      else (10.0 if trial == 0 else 0.0) + seed)  # fmt: skip
    search = made_up_search(tmp_path, launcher, seeds=[0, 1, 2, 3])
    search.run([])
    study = optuna.load_study(study_name="her_optuna", storage=open_storage(search.cfg.storage))
    states = [t.state.name for t in study.trials]
    assert states == ["COMPLETE", "FAIL", "COMPLETE"]
    assert study.trials[1].user_attrs["error"].startswith("seed 2 fold ")
    assert len(launcher.jobs) == 3 * 8 and len(study.trials[2].intermediate_values) == 8


@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ({"seeds": []}, "hydra.sweeper.seeds=[]: a list of whole numbers"),
        ({"seeds": [1, 1]}, "a seed given twice"),
        ({"folds": [4]}, "walk-forward folds in 0..3"),
        ({"wave": -1}, "hydra.sweeper.wave=-1"),
        ({"storage": "mysql"}, "hydra.sweeper.storage='mysql': one of journal, rdb"),
        ({"pruner": {"name": "median"}}, "hydra.sweeper.pruner.name='median': one of wilcoxon"),
        ({"pruner": {"p": 0.1}}, "hydra.sweeper.pruner: unknown key(s) p"),
        ({"waves": 2}, "hydra.sweeper: unknown key(s) waves"),
        ({"wave": 1.5}, "hydra.sweeper.wave=1.5: instances of a trial launched at once"),
        ({"pruner": {"p_threshold": "x"}}, "hydra.sweeper.pruner.p_threshold='x': a number"),
        ({"pruner": {"n_startup_steps": -1}}, "hydra.sweeper.pruner.n_startup_steps=-1"),
        ({"sampler": {"seed": "a"}}, "hydra.sweeper.sampler.seed='a': the sampler's seed"),
        ({"storage_url": 3}, "hydra.sweeper.storage_url=3: a file path or a URL"),
    ],
)
def test_bad_search_settings_are_refused_by_name(tmp_path: Path, setting: dict, says: str):
    with pytest.raises(ConfigError, match=re.escape(says)):
        made_up_search(tmp_path, MadeUp(lambda *a: 0.0), **setting)


def test_the_search_refuses_to_search_or_fix_what_it_sets_itself(tmp_path: Path) -> None:
    search = made_up_search(tmp_path, MadeUp(lambda *a: 0.0))
    with pytest.raises(ConfigError, match="seed: the search sets it on each run"):
        search.run(["seed=3"])


def test_a_study_made_with_other_instances_is_refused(tmp_path: Path) -> None:
    """A search resumes a study only on the instances it was made with (another search of the
    same study may have recorded its own at the same moment)."""
    made_up_search(tmp_path, MadeUp(lambda *a: 1.0), seeds=[0, 1], n_trials=1).run([])
    other = made_up_search(tmp_path, MadeUp(lambda *a: 1.0), seeds=[0, 2], n_trials=1)
    with pytest.raises(ConfigError, match="was created with instances"):
        other.run([])
    with pytest.raises(ConfigError, match=r"runs its trials on the instances \[\[0, 0\]"):
        study = optuna.load_study(study_name="her_optuna", storage=open_storage(
            other.cfg.storage))  # fmt: skip
        other.same_instances(study)


def test_storages_are_recorded_as_one_string() -> None:
    here = Path.cwd()
    assert storage_url("journal", None, "sqlite:////x/mlflow.db") == "journal:///x/optuna.journal"
    assert storage_url("journal", None, "http://host:5000") == f"journal://{here}/optuna.journal"
    assert storage_url("rdb", None, "sqlite:////x/mlflow.db") == "sqlite:////x/optuna.db"
    assert storage_url("rdb", "postgresql://u@h/db", "http://h") == "postgresql://u@h/db"
    with pytest.raises(ConfigError, match="a journal is a file path"):
        storage_url("journal", "postgresql://u@h/db", "http://h")
    with pytest.raises(ConfigError, match="an RDB's URL"):
        storage_url("rdb", "optuna.db", "http://h")


def test_the_margin_objective_runs_the_backtest_and_names_its_baseline() -> None:
    cfg, _ = compose_train(["objective=margin"])
    objective = Objective.from_cfg(cfg)
    assert (objective.baseline, objective.source) == ("flat", "backtest/baseline/flat/margin")
    assert plan_run(cfg).eval.backtest is True  # the synthetic market has no dates: forced on
    cfg, _ = compose_train(["objective=margin", "market=file", "market.path=x.csv"])
    assert Objective.from_cfg(cfg).baseline == "buy_and_hold"
    cfg, _ = compose_train(["objective=margin", "objective.baseline=sell_and_hold"])
    assert Objective.from_cfg(cfg).source == "backtest/baseline/sell_and_hold/margin"
    with pytest.raises(
        ConfigError, match=re.escape("objective.baseline='index': one of auto, flat")
    ):
        Objective.from_cfg(compose_train(["objective=margin", "objective.baseline=index"])[0])
    with pytest.raises(ConfigError, match="objective=margin is measured on the calendar backtest"):
        plan_run(compose_train(["objective=margin", "eval.backtest.enabled=false"])[0])


def tiny_search(where: Path, sweep: str, sampler_seed: int) -> subprocess.Popen:
    """A numpy search of 2 trials x 2 seeds into `where`/<sweep>, its study in
    where/study.journal."""
    return subprocess.Popen(
        [sys.executable, "-m", "alpha_rl.train", "-m", "hparams_search=her_optuna", "debug=tiny",
         "steps=20", "backend=numpy", "objective=margin", f"hydra.sweep.dir={where}/{sweep}",
         f"tracking.uri=sqlite:///{where}/{sweep}.db", "hydra.sweeper.n_trials=2",
         "hydra.sweeper.seeds=[0,1]", f"hydra.sweeper.storage_url={where}/study.journal",
         f"hydra.sweeper.sampler.seed={sampler_seed}"],
        cwd=where, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


@pytest.mark.slow
def test_two_searches_write_one_journal_at_the_same_time(tmp_path: Path) -> None:
    """Two processes search one study in one journal file at once, each its own trials: the
    study holds the four, numbered apart, each with its two seeds' margins as intermediate values
    (the MLflow runs' search/objective) and their mean as its value."""
    started = time.time()
    searches = [tiny_search(tmp_path, f"worker{w}", w) for w in (0, 1)]
    outs = [s.communicate(timeout=600)[0] for s in searches]
    assert [s.returncode for s in searches] == [0, 0], outs[0][-3000:] + outs[1][-3000:]
    study = optuna.load_study(study_name="her_optuna", storage=open_storage(
        f"journal://{tmp_path / 'study.journal'}"))  # fmt: skip
    assert sorted(t.number for t in study.trials) == [0, 1, 2, 3]
    by_worker = {w: [t for t in study.trials if t.user_attrs["sweep"] == str(tmp_path / w)]
                 for w in ("worker0", "worker1")}  # fmt: skip
    assert [len(v) for v in by_worker.values()] == [2, 2]
    from mlflow.tracking import MlflowClient

    for worker, trials in by_worker.items():
        client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/{worker}.db")
        for t in trials:
            assert t.state == optuna.trial.TrialState.COMPLETE and set(t.intermediate_values) == {
                0,
                1,
            }
            assert t.value == pytest.approx(np.mean(list(t.intermediate_values.values())))
            for instance, run_id in t.user_attrs["mlflow_run_ids"].items():
                run = client.get_run(run_id)
                assert run.data.tags["search.instance"] == instance
                assert run.data.params["seed"] == instance  # instance i is seed i here
                assert run.data.metrics["search/objective"] == t.intermediate_values[int(instance)]
                assert "backtest/baseline/flat/margin" in run.data.metrics
    # at the same time: each worker's trials began before the other's last one ended
    spans = {w: (min(t.datetime_start for t in v), max(t.datetime_complete for t in v))
             for w, v in by_worker.items()}  # fmt: skip
    assert spans["worker0"][0] < spans["worker1"][1] and spans["worker1"][0] < spans["worker0"][1]
    print(f"two searches of 2 trials x 2 seeds: {time.time() - started:.0f} s")
