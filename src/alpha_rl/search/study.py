"""A hyper-parameter search as an Optuna study driven through Hydra's launcher.

The sweeper (`hydra/sweeper=alpha_rl_optuna`, set by a `hparams_search=` preset) asks the study
for `n_jobs` trials at a time and runs each on its instances, the `seeds` x walk-forward `folds`
(alpha_rl.search.instances), a wave of instances of every trial of the batch as one batch of jobs
(the basic launcher runs them one after another in this process, `hydra/launcher=packed` as
packs, `local_gpus` one per GPU, `slurm` as a job array). Each job returns its run's objective
(alpha_rl.pipeline.configure.objective); the study is told each as the trial's intermediate value
at the instance's id, the Wilcoxon pruner may stop a trial between waves, and a trial that ran
every instance is told their mean. A trial one of whose jobs fails (a config error, a diverged
run, a crash) or returns NaN is told FAIL and the search goes on. Every run is an MLflow run
nested under the sweep's parent run and tagged with the study, its trial and instance; after each
batch the parent gets the best trial so far as tags.

The study lives in a journal file beside the MLflow store (`storage`: alpha_rl.search.storage),
under the preset's name: the same command again adds `n_trials` more trials to it, and searches
in other processes may add theirs at the same time. Its user attributes record what a later
confirmation needs: the objective, the space, the fixed overrides, the instances, and the parent
run of every search that added trials.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from alpha_rl.errors import ConfigError
from alpha_rl.pipeline.configure.objective import Objective
from alpha_rl.search import space as search_space
from alpha_rl.search.instances import (
    Instance,
    PrunerConfig,
    Running,
    check_own_keys,
    folds_of,
    instances,
    plain,
    result_of,
    seeds_of,
    trial_order,
)
from alpha_rl.search.sampler import SamplerConfig, checked_sampler, grid_size, whole
from alpha_rl.search.storage import SQLITE_FILE, journal_file, open_storage, storage_url
from alpha_rl.tracking.config import TrackingConfig
from alpha_rl.tracking.parent import parent_run_for, set_parent_tags, stop_parent

log = logging.getLogger("alpha_rl.search")

RESULTS_FILE = "search_results.yaml"
WALK_FORWARD_KEYS = ("folds", "scheme", "test_fraction", "embargo")
NOT_RECORDED = (
    "hydra.",
    "hydra/",
    "tracking.",
    "tracking=",
)  # fixed overrides a study may differ in
SETTINGS = (
    "study",
    "storage",
    "storage_url",
    "n_trials",
    "n_jobs",
    "seeds",
    "folds",
    "wave",
    "pruner",
    "sampler",
    "params",
)  # conf/hydra/sweeper/alpha_rl_optuna.yaml's keys
STUDY_TAG, TRIAL_TAG = "search.study", "search.trial"


@dataclass(frozen=True)
class SearchConfig:
    """The sweeper's settings (conf/hydra/sweeper/alpha_rl_optuna.yaml), checked."""

    study: str
    storage: str  # the recorded storage string (alpha_rl.search.storage)
    n_trials: int
    n_jobs: int
    sampler: SamplerConfig
    params: dict
    instances: list[Instance]
    wave: int  # instances of a trial launched at once (every one when 0)
    pruner: PrunerConfig

    @classmethod
    def build(cls, settings: dict, config: DictConfig) -> SearchConfig:
        settings = {k: plain(v) for k, v in settings.items()}
        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            raise ConfigError(f"hydra.sweeper: unknown key(s) {', '.join(unknown)} (one of "
                              f"{', '.join(SETTINGS)})")  # fmt: skip
        study = settings.get("study") or config.hydra.runtime.choices.get("hparams_search")
        if not study:
            raise ConfigError(
                "hydra.sweeper.study: name the study (a hparams_search= preset "
                "names it after itself)"
            )
        n_trials = whole(settings.get("n_trials", 0), "hydra.sweeper.n_trials", 1,
                         "trials this invocation adds")  # fmt: skip
        n_jobs = whole(settings.get("n_jobs", 1), "hydra.sweeper.n_jobs", 1,
                       "trials launched at once")  # fmt: skip
        wave = whole(settings.get("wave", 0), "hydra.sweeper.wave", 0,
                     "instances of a trial launched at once (0: all of them)")  # fmt: skip
        sampler = checked_sampler(dict(settings.get("sampler") or {}))
        url = settings.get("storage_url")
        if url is not None and not isinstance(url, str):
            raise ConfigError(f"hydra.sweeper.storage_url={url!r}: a file path or a URL")
        storage = storage_url(str(settings.get("storage") or "journal"), url,
                              str(config.tracking.uri))  # fmt: skip
        held = instances(seeds_of(settings.get("seeds", [0])),
                         folds_of(settings.get("folds"), config.validation))  # fmt: skip
        return cls(str(study), storage, n_trials, n_jobs, sampler,
                   dict(settings.get("params") or {}), held, wave or len(held),
                   PrunerConfig.build(dict(settings.get("pruner") or {})))  # fmt: skip


class Search:
    """One invocation of a search: asks, launches, tells, tags the parent."""

    def __init__(self, cfg: SearchConfig, config: DictConfig, launcher: Any) -> None:
        self.cfg, self.config, self.launcher = cfg, config, launcher
        self.objective = Objective.from_cfg(config)
        self.tracking = TrackingConfig.from_cfg(config.tracking)
        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        self.job_idx = 0
        self.mine: set[int] = set()  # the numbers of this invocation's trials

    def run(self, arguments: list[str]) -> Any:
        import optuna

        space, fixed = search_space.parse(self.cfg.params, arguments)
        check_own_keys(space, fixed)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(
            study_name=self.cfg.study,
            storage=open_storage(self.cfg.storage),
            sampler=optuna.samplers.RandomSampler(),  # replaced below, once the study is read
            pruner=self.cfg.pruner.pruner(),
            direction=self.objective.direction,
            load_if_exists=True,
        )
        self.record(study, space, fixed)
        self.say_old_storage()
        # a resumed study draws on: its sampler's seed moves on by the trials it already holds
        study.sampler = self.cfg.sampler.build(space, len(study.trials))
        n_trials = self.trials_left(space, len(study.trials))
        parent = parent_run_for(self.sweep_dir, self.tracking, create=False)
        before = len(study.trials)
        n = len(self.cfg.instances)
        log.info(
            "search %s (%s): %d trials, %d at a time, each on %d instance%s (%s) %s at a time, "
            "pruner %s; %s %s; the study has %d trials",
            self.cfg.study, self.cfg.storage, n_trials, self.cfg.n_jobs, n, "" if n == 1 else "s",
            ", ".join(i.describe() for i in self.cfg.instances), self.cfg.wave,
            self.cfg.pruner.name, self.objective.direction, self.objective.describe(), before,
        )  # fmt: skip
        done = 0
        while done < n_trials:
            self.same_instances(study)  # another search may have made the study since
            trials = [study.ask(space) for _ in range(min(self.cfg.n_jobs, n_trials - done))]
            self.mine |= {t.number for t in trials}
            running = [Running(t, trial_order(n, self.cfg.sampler.seed, t.number)) for t in trials]
            try:
                self.run_batch(study, running, fixed)
            except BaseException:  # a dead worker, Ctrl-C: no trial stays RUNNING for ever
                for r in running:
                    if study.trials[r.trial.number].state == optuna.trial.TrialState.RUNNING:
                        study.tell(r.trial, state=optuna.trial.TrialState.FAIL)
                raise
            done += len(trials)
            self.tag_parent(parent, study)
        return self.finish(study)

    def run_batch(self, study: Any, running: list[Running], fixed: list[str]) -> None:
        """The batch's trials through their instances, a wave at a time; each told its end."""
        live = list(running)
        while live:
            waves = [(r, self.cfg.instances[i]) for r in live for i in r.next_wave(self.cfg.wave)]
            batch = [
                [*fixed, *(search_space.as_override(k, v) for k, v in r.trial.params.items()),
                 f"{STUDY_TAG}={self.cfg.study}", f"{TRIAL_TAG}={r.trial.number}",
                 *instance.overrides()]
                for r, instance in waves
            ]  # fmt: skip
            returns = self.launcher.launch(batch, initial_job_idx=self.job_idx)
            self.job_idx += len(batch)
            for (r, instance), ret in zip(waves, returns, strict=True):
                result = result_of(ret)
                if result.run_id:
                    r.runs[instance.id] = result.run_id
                if result.error is not None:
                    r.error = r.error or f"{instance.describe()}: {result.error}"
                    continue
                r.values[instance.id] = result.value
                r.trial.report(result.value, instance.id)
            still = []
            for r in live:
                goes_on = r.error is None and len(r.values) < len(r.order)
                if goes_on and not r.trial.should_prune():
                    still.append(r)
                    continue
                self.tell(study, r)
            live = still

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
            "fixed": sorted(  # what the trials run, not where they are recorded
                f for f in fixed if not f.lstrip("+~").startswith(NOT_RECORDED)
            ),
            # the instances every trial runs on: instance id -> [seed, fold]
            "instances": [[i.seed, i.fold] for i in self.cfg.instances],
            "seeds": sorted({i.seed for i in self.cfg.instances}),
            "validation": str(self.config.validation.name),
            "split": self.config.validation.get("split"),  # single: its training fraction
            "folds": sorted({i.fold for i in self.cfg.instances if i.fold is not None}) or None,
            # walk-forward: the layout its folds are of, which a confirmation's folds must share
            "walk_forward": {k: self.config.validation.get(k) for k in WALK_FORWARD_KEYS}
            if self.config.validation.name == "walk_forward"
            else None,
            "baseline": self.objective.baseline,  # objective=margin: the one it is over
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

    def say_old_storage(self) -> None:
        """A warning when a study database of the former default lies beside the journal: the
        studies in it are not this one (hydra.sweeper.storage=rdb resumes them)."""
        journal = journal_file(self.cfg.storage)
        if journal is not None and (journal.parent / SQLITE_FILE).is_file():
            log.warning("%s holds studies of earlier searches; this search writes %s. To resume "
                        "one of them: hydra.sweeper.storage=rdb", journal.parent / SQLITE_FILE,
                        journal)  # fmt: skip

    def same_instances(self, study: Any) -> None:
        """ConfigError unless the study's instances are this search's (a search that began at
        the same moment with other seeds or folds may have recorded its own)."""
        mine = [[i.seed, i.fold] for i in self.cfg.instances]
        recorded = study.user_attrs.get("instances")
        if recorded != mine:
            raise ConfigError(f"study {self.cfg.study!r} in {self.cfg.storage} runs its trials on "
                              f"the instances {recorded}, not {mine}: give the same seeds and "
                              "folds, or name another study (hydra.sweeper.study)")  # fmt: skip

    def tell(self, study: Any, r: Running) -> None:
        """A trial's end: FAIL (a job failed), PRUNED (stopped by the pruner, its partial mean
        recorded) or COMPLETE with the mean over its instances."""
        import optuna

        trial, params = r.trial, ", ".join(f"{k}={v}" for k, v in r.trial.params.items())
        trial.set_user_attr("sweep", str(self.sweep_dir))  # where its runs' directories are
        if r.runs:
            first = r.runs[min(r.runs)]
            trial.set_user_attr("mlflow_run_id", first)
            runs = {str(i): run for i, run in sorted(r.runs.items())}
            trial.set_user_attr("mlflow_run_ids", runs)
        if r.values:
            trial.set_user_attr("instances_run", len(r.values))
        if r.error is not None:
            trial.set_user_attr("error", r.error[:1000])
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            log.warning("trial %d failed (%s): %s; the search goes on", trial.number, params,
                        r.error)  # fmt: skip
            return
        value = r.partial_mean()
        if len(r.values) < len(r.order):
            trial.set_user_attr("partial_mean", value)
            # reported at the step past the last instance's, which Optuna takes as a pruned
            # trial's value (its last step) and the pruner never pairs (no trial runs it)
            trial.report(value, len(self.cfg.instances))
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            log.info("trial %d pruned after %d of %d instances (Wilcoxon against trial %d): "
                     "mean %.6g so far (%s)", trial.number, len(r.values), len(r.order),
                     study.best_trial.number, value, params)  # fmt: skip
            return
        study.tell(trial, value)
        log.info("trial %d: %s = %.6g, the mean over %d instance%s (%s)", trial.number,
                 self.objective.source, value, len(r.values), "" if len(r.values) == 1 else "s",
                 params)  # fmt: skip

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
            "search.trials_pruned": str(states.count(optuna.trial.TrialState.PRUNED)),
            "search.instances": str(len(self.cfg.instances)),
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

    def finish(self, study: Any) -> dict:
        """Log the best trial, write <sweep dir>/search_results.yaml; exit 1 when no trial of
        this invocation completed."""
        import optuna

        added = [t for t in study.trials if t.number in self.mine]  # not other workers'
        complete = [t for t in added if t.state == optuna.trial.TrialState.COMPLETE]
        best = best_trial(study)
        results = {
            "study": self.cfg.study,
            "storage": self.cfg.storage,
            "objective": f"{self.objective.direction} {self.objective.describe()}",
            "trials": len(study.trials),
            "added": len(added),
            "failed": sum(t.state == optuna.trial.TrialState.FAIL for t in added),
            "pruned": sum(t.state == optuna.trial.TrialState.PRUNED for t in added),
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
            "search %s: %d of %d trials completed (%d pruned); the study's best: %s",
            self.cfg.study,
            len(complete),
            len(added),
            results["pruned"],
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
