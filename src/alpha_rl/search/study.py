"""A hyper-parameter search as an Optuna study driven through Hydra's launcher.

The sweeper (`hydra/sweeper=alpha_rl_optuna`, set by a `hparams_search=` preset) asks the study
for `n_jobs` trials at a time, launches them as one batch of jobs (the basic launcher runs them
one after another in this process; `hydra/launcher=local_gpus` one per GPU), and tells the study
each job's return value: the run's objective (alpha_rl.pipeline.configure.objective). A trial whose
job fails (a config error, a diverged run, a crash) or returns NaN is told FAIL and the search goes
on. Every trial is an MLflow run nested under the sweep's parent run and tagged with the study and
its trial number; after each batch the parent gets the best trial so far as tags.

The study lives in SQLite beside the MLflow store (`<store dir>/optuna.db`; `storage` to
choose), under the preset's name: the same command again adds `n_trials` more trials to it.
Its user attributes record what a later confirmation needs: the objective, the space, the fixed
overrides, and the parent run of every search that added trials.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from alpha_rl.errors import ConfigError
from alpha_rl.pipeline.configure.objective import Objective
from alpha_rl.search import space as search_space
from alpha_rl.tracking.config import TrackingConfig
from alpha_rl.tracking.parent import parent_run_for, set_parent_tags, stop_parent
from alpha_rl.tracking.store import sqlite_path

log = logging.getLogger("alpha_rl.search")

SAMPLERS = ("tpe", "random", "grid")
RESULTS_FILE = "search_results.yaml"
STUDY_TAG, TRIAL_TAG = "search.study", "search.trial"


@dataclass(frozen=True)
class SamplerConfig:
    """hydra.sweeper.sampler: which Optuna sampler and its seed."""

    name: str = "tpe"
    seed: int | None = 0
    n_startup_trials: int = 8  # TPE: random trials before the model (Optuna's default is 10)

    def build(self, space: dict, offset: int = 0) -> Any:
        """The sampler, its seed moved on by `offset` (the trials a resumed study holds)."""
        import optuna

        seed = None if self.seed is None else self.seed + offset
        if self.name == "tpe":
            return optuna.samplers.TPESampler(seed=seed, n_startup_trials=self.n_startup_trials)
        if self.name == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        grid = {}
        for key, d in space.items():
            if isinstance(d, optuna.distributions.CategoricalDistribution):
                grid[key] = list(d.choices)
            elif isinstance(d, optuna.distributions.IntDistribution) and not d.log:
                grid[key] = list(range(d.low, d.high + 1, d.step))
            else:
                raise ConfigError(
                    f"hydra.sweeper.sampler.name=grid: {key} is a continuous "
                    "interval; give it as choice() or range()"
                )
        return ask_tell_grid(grid, seed)


def ask_tell_grid(grid: dict, seed: int | None) -> Any:
    """Optuna's GridSampler without its stop at the last grid point, which raises outside
    `study.optimize` (the search caps its trials at the grid's size itself)."""
    import optuna

    class AskTellGrid(optuna.samplers.GridSampler):
        def after_trial(self, study: Any, trial: Any, state: Any, values: Any) -> None:
            pass

    return AskTellGrid(grid, seed=seed)


def grid_size(space: dict) -> int:
    """The number of points of a grid over `space` (choices and ranges only)."""
    from optuna.distributions import CategoricalDistribution

    n = 1
    for d in space.values():
        n *= (
            len(d.choices)
            if isinstance(d, CategoricalDistribution)
            else (d.high - d.low) // d.step + 1
        )
    return n


@dataclass(frozen=True)
class SearchConfig:
    """The sweeper's settings (conf/hydra/sweeper/alpha_rl_optuna.yaml), checked."""

    study: str
    storage: str
    n_trials: int
    n_jobs: int
    sampler: SamplerConfig
    params: dict

    @classmethod
    def build(cls, settings: dict, config: DictConfig) -> SearchConfig:
        study = settings.get("study") or config.hydra.runtime.choices.get("hparams_search")
        if not study:
            raise ConfigError(
                "hydra.sweeper.study: name the study (a hparams_search= preset "
                "names it after itself)"
            )
        try:
            n_trials, n_jobs = int(settings.get("n_trials", 0)), int(settings.get("n_jobs", 1))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"hydra.sweeper.n_trials, n_jobs: whole numbers ({exc})") from exc
        if n_trials < 1:
            raise ConfigError(f"hydra.sweeper.n_trials={n_trials}: at least 1")
        if n_jobs < 1:
            raise ConfigError(f"hydra.sweeper.n_jobs={n_jobs}: trials launched at once, >= 1")
        given = dict(settings.get("sampler") or {})
        unknown = sorted(set(given) - set(SamplerConfig.__dataclass_fields__))
        if unknown:
            raise ConfigError(f"hydra.sweeper.sampler: unknown key(s) {', '.join(unknown)} "
                              "(name, seed, n_startup_trials)")  # fmt: skip
        sampler = SamplerConfig(**given)
        if sampler.name not in SAMPLERS:
            raise ConfigError(
                f"hydra.sweeper.sampler.name={sampler.name!r}: one of {', '.join(SAMPLERS)}"
            )
        storage = settings.get("storage") or default_storage(str(config.tracking.uri))
        return cls(
            str(study), str(storage), n_trials, n_jobs, sampler, dict(settings.get("params") or {})
        )


def default_storage(tracking_uri: str) -> str:
    """`sqlite:///<MLflow store's dir>/optuna.db`, or ./optuna.db beside a tracking server."""
    path = sqlite_path(tracking_uri)
    where = path.resolve().parent if path is not None else Path.cwd()
    return f"sqlite:///{where / 'optuna.db'}"


@dataclass
class TrialResult:
    """What one job gave back: its value (NaN: failed), its MLflow run and why it failed."""

    value: float
    run_id: str | None
    error: str | None


def result_of(ret: Any) -> TrialResult:
    """The objective a Hydra JobReturn carries, NaN when the job failed or returned none."""
    from hydra.core.utils import JobStatus

    run_id = None
    if ret.hydra_cfg is not None:
        record = Path(ret.hydra_cfg.hydra.runtime.output_dir) / "tracking.json"
        if record.is_file():
            run_id = json.loads(record.read_text()).get("run_id")
    if ret.status != JobStatus.COMPLETED:
        return TrialResult(
            math.nan, run_id, f"{type(ret._return_value).__name__}: {ret._return_value}"
        )
    value = ret._return_value
    if not isinstance(value, int | float) or not math.isfinite(value):
        return TrialResult(math.nan, run_id, "the run did not finish with a finite objective")
    return TrialResult(float(value), run_id, None)


class Search:
    """One invocation of a search: asks, launches, tells, tags the parent."""

    def __init__(self, cfg: SearchConfig, config: DictConfig, launcher: Any) -> None:
        self.cfg, self.config, self.launcher = cfg, config, launcher
        self.objective = Objective.from_cfg(config)
        self.tracking = TrackingConfig.from_cfg(config.tracking)
        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        self.job_idx = 0

    def run(self, arguments: list[str]) -> Any:
        import optuna

        space, fixed = search_space.parse(self.cfg.params, arguments)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(
            study_name=self.cfg.study,
            storage=self.cfg.storage,
            sampler=optuna.samplers.RandomSampler(),  # replaced below, once the study is read
            direction=self.objective.direction,
            load_if_exists=True,
        )
        self.record(study, space, fixed)
        # a resumed study draws on: its sampler's seed moves on by the trials it already holds
        study.sampler = self.cfg.sampler.build(space, len(study.trials))
        n_trials = self.trials_left(space, len(study.trials))
        parent = parent_run_for(self.sweep_dir, self.tracking, create=False)
        before = len(study.trials)
        log.info(
            "search %s (%s): %d trials, %d at a time, %s %s; the study has %d trials",
            self.cfg.study,
            self.cfg.storage,
            n_trials,
            self.cfg.n_jobs,
            self.objective.direction,
            self.objective.describe(),
            before,
        )
        done = 0
        while done < n_trials:
            trials = [study.ask(space) for _ in range(min(self.cfg.n_jobs, n_trials - done))]
            batch = [
                [
                    *fixed,
                    *(search_space.as_override(k, v) for k, v in t.params.items()),
                    f"{STUDY_TAG}={self.cfg.study}",
                    f"{TRIAL_TAG}={t.number}",
                ]
                for t in trials
            ]
            try:
                returns = self.launcher.launch(batch, initial_job_idx=self.job_idx)
            except BaseException:  # a dead worker, Ctrl-C: no trial stays RUNNING for ever
                for trial in trials:
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
                raise
            self.job_idx += len(batch)
            for trial, ret in zip(trials, returns, strict=True):
                self.tell(study, trial, result_of(ret))
            done += len(trials)
            self.tag_parent(parent, study)
        return self.finish(study, before)

    def trials_left(self, space: dict, held: int) -> int:
        """The trials to run: n_trials, or what a grid has left of its points after the `held`
        trials the study holds (ConfigError when none is left)."""
        n_trials = self.cfg.n_trials
        if self.cfg.sampler.name != "grid":
            return n_trials
        left = grid_size(space) - held
        if left <= 0:
            raise ConfigError(f"study {self.cfg.study!r} has run every point of its grid "
                              f"({grid_size(space)}); name another study (hydra.sweeper."
                              "study) to search again")  # fmt: skip
        if n_trials > left:
            log.info("the grid has %d points left: %d trials, not %d", left, left, n_trials)
        return min(n_trials, left)

    def record(self, study: Any, space: dict, fixed: list[str]) -> None:
        """The study's own record of what it searches; a resumed study must search the same."""
        record = {
            "objective": OmegaConf.to_container(self.config.objective),
            "space": search_space.describe(space),
            "fixed": sorted(
                f for f in fixed if not f.lstrip("+~").startswith(("hydra.", "hydra/"))
            ),
            "seed": int(self.config.seed),  # the seed and split every trial ran on
            "validation": str(self.config.validation.name),
            "split": self.config.validation.get("split"),  # single: its training fraction
            "fold": self.config.market.get("fold"),
        }
        for key, value in record.items():
            old = study.user_attrs.get(key)
            if old is not None and old != value:
                raise ConfigError(
                    f"study {self.cfg.study!r} in {self.cfg.storage} was created with "
                    f"{key} {old}, not {value}: resume it with the same settings (its fixed "
                    "overrides too) or name another study (hydra.sweeper.study)"
                )
            study.set_user_attr(key, value)

    def tell(self, study: Any, trial: Any, result: TrialResult) -> None:
        import optuna

        if result.run_id:
            trial.set_user_attr("mlflow_run_id", result.run_id)
        if result.error is None:
            study.tell(trial, result.value)
            log.info(
                "trial %d: %s = %.6g (%s)",
                trial.number,
                self.objective.metric,
                result.value,
                ", ".join(f"{k}={v}" for k, v in trial.params.items()),
            )
            return
        trial.set_user_attr("error", result.error[:1000])
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        log.warning(
            "trial %d failed (%s): %s; the search goes on",
            trial.number,
            ", ".join(f"{k}={v}" for k, v in trial.params.items()),
            result.error,
        )

    def tag_parent(self, parent: str | None, study: Any) -> None:
        """The best trial so far (and the trial counts) as tags of the sweep's parent run."""
        import optuna

        if parent is None:
            return
        states = [t.state for t in study.trials]
        tags = {
            STUDY_TAG: self.cfg.study,
            "search.storage": self.cfg.storage,
            "search.objective": f"{self.objective.direction} {self.objective.describe()}",
            "search.trials_complete": str(states.count(optuna.trial.TrialState.COMPLETE)),
            "search.trials_failed": str(states.count(optuna.trial.TrialState.FAIL)),
        }
        best = best_trial(study)
        if best is not None:
            tags |= {"search.best_trial": str(best.number), "search.best_value": repr(best.value)}
            tags |= {f"search.best.{k}": str(v) for k, v in best.params.items()}
            run = best.user_attrs.get("mlflow_run_id")
            if run:
                tags["search.best_run"] = run
        set_parent_tags(self.tracking, parent, tags)
        parents = list(study.user_attrs.get("parents", []))
        if parent not in parents:
            study.set_user_attr("parents", [*parents, parent])

    def finish(self, study: Any, before: int) -> dict:
        """Log the best trial, write <sweep dir>/search_results.yaml; exit 1 when no trial of
        this invocation completed."""
        import optuna

        added = study.trials[before:]
        complete = [t for t in added if t.state == optuna.trial.TrialState.COMPLETE]
        best = best_trial(study)
        results = {
            "study": self.cfg.study,
            "storage": self.cfg.storage,
            "objective": f"{self.objective.direction} {self.objective.describe()}",
            "trials": len(study.trials),
            "added": len(added),
            "failed": sum(t.state == optuna.trial.TrialState.FAIL for t in added),
        }
        if best is not None:
            results |= {
                "best_trial": best.number,
                "best_value": best.value,
                "best_params": dict(best.params),
            }
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        (self.sweep_dir / RESULTS_FILE).write_text(OmegaConf.to_yaml(OmegaConf.create(results)))
        log.info(
            "search %s: %d of %d trials completed; the study's best: %s",
            self.cfg.study,
            len(complete),
            len(added),
            "none" if best is None else f"trial {best.number}, {best.value:.6g}, {best.params}",
        )
        if not complete:
            log.error("no trial of this search completed (%s)", self.sweep_dir)
            stop_parent(
                self.sweep_dir, self.tracking, "no trial of the search completed", status="FAILED"
            )
            raise SystemExit(1)
        return results


def best_trial(study: Any) -> Any:
    """The study's best completed trial (Optuna's), or None when none completed."""
    try:
        return study.best_trial
    except ValueError:  # Optuna: no trial is completed yet
        return None
