"""A trial's instances and its pruner: the objective of a trial is the mean over `seeds` x folds.

One lucky seed fools a search that scores a trial on one run. A trial here runs its config on
every instance, a (seed, walk-forward fold) pair (the fold is None under a single split), and
reports each instance's value to Optuna as an intermediate value whose step is the instance's id,
the same id for the same pair in every trial of the study. The trial's value is their mean.

The instances run in waves (`wave` at a time per trial; 0: all at once), each trial in its own
seeded order (Optuna's advice for the Wilcoxon pruner: no trial is judged on the same first
instances). After each wave but the last, `optuna.pruners.WilcoxonPruner` compares the trial with
the study's best on the instances both ran, a paired signed-rank test, and a trial that is worse
with p below `p_threshold` is pruned: its other instances never run, it is told PRUNED, and its
partial mean is recorded (the user attribute `partial_mean`, with `instances_run`).
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf

from alpha_rl.errors import ConfigError
from alpha_rl.portable import mean
from alpha_rl.search.sampler import named_settings, whole

PRUNERS = ("wilcoxon", "none")


@dataclass(frozen=True)
class Instance:
    """One (seed, fold) of a trial; `id` its step in Optuna's intermediate values."""

    id: int
    seed: int
    fold: int | None

    def overrides(self) -> list[str]:
        fold = [] if self.fold is None else [f"market.fold={self.fold}"]
        return [f"seed={self.seed}", *fold, f"search.instance={self.id}"]

    def describe(self) -> str:
        return f"seed {self.seed}" + ("" if self.fold is None else f" fold {self.fold}")


def instances(seeds: list[int], folds: list[int] | None) -> list[Instance]:
    """Every (seed, fold), fold by fold, numbered from 0."""
    pairs = [(s, f) for f in (folds if folds is not None else [None]) for s in seeds]
    return [Instance(i, s, f) for i, (s, f) in enumerate(pairs)]


def trial_order(n: int, seed: int | None, trial: int) -> list[int]:
    """The order a trial runs the instances in: a permutation of 0..n-1 seeded by the sampler's
    seed and the trial's number (fresh entropy when the seed is None)."""
    rng = np.random.default_rng(None if seed is None else [seed, trial])
    return [int(i) for i in rng.permutation(n)]


@dataclass(frozen=True)
class PrunerConfig:
    """hydra.sweeper.pruner: the Wilcoxon pruner's settings, or none."""

    name: str = "wilcoxon"
    p_threshold: float = 0.1
    n_startup_steps: int = 2

    @classmethod
    def build(cls, given: dict) -> PrunerConfig:
        cfg = named_settings(cls, given, "hydra.sweeper.pruner", PRUNERS)
        p = cfg.p_threshold
        if not isinstance(p, int | float) or isinstance(p, bool) or not 0.0 < p < 1.0:
            raise ConfigError(f"hydra.sweeper.pruner.p_threshold={p!r}: a number in (0, 1)")
        whole(cfg.n_startup_steps, "hydra.sweeper.pruner.n_startup_steps", 0,
              "paired instances before a trial may be pruned")  # fmt: skip
        return cfg

    def pruner(self) -> Any:
        import optuna

        if self.name == "none":
            return optuna.pruners.NopPruner()
        with warnings.catch_warnings():  # "experimental" (Optuna 3.6 to 5.1 at least)
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.pruners.WilcoxonPruner(
                p_threshold=float(self.p_threshold), n_startup_steps=int(self.n_startup_steps)
            )


def seeds_of(given: Any) -> list[int]:
    """hydra.sweeper.seeds checked: distinct whole numbers, at least one."""
    values = list(given) if isinstance(given, list | tuple) else None
    if not values or not all(isinstance(s, int) and not isinstance(s, bool) for s in values):
        raise ConfigError(f"hydra.sweeper.seeds={given!r}: a list of whole numbers (the seeds "
                          "every trial runs on), e.g. [0,1,2,3,4]")  # fmt: skip
    if len(set(values)) != len(values):
        raise ConfigError(f"hydra.sweeper.seeds={values}: a seed given twice")
    return [int(s) for s in values]


def folds_of(given: Any, validation: Any) -> list[int] | None:
    """hydra.sweeper.folds checked against the run's validation: None under a single split;
    with walk-forward the folds named (null: every fold)."""
    if validation.name != "walk_forward":
        if given is not None:
            raise ConfigError(f"hydra.sweeper.folds={given!r}: folds need validation="
                              "walk_forward (a single split has none)")  # fmt: skip
        return None
    k = int(validation.folds)
    values = list(range(k)) if given is None else list(given)
    if not values or not all(isinstance(f, int) and 0 <= f < k for f in values):
        raise ConfigError(f"hydra.sweeper.folds={given!r}: walk-forward folds in 0..{k - 1} "
                          "(null: every fold)")  # fmt: skip
    if len(set(values)) != len(values):
        raise ConfigError(f"hydra.sweeper.folds={values}: a fold given twice")
    return values


# set by the search on each of its jobs: a search over them, or fixed, would not be that search
OWN_KEYS = ("seed", "market.fold", "search.")


def check_own_keys(space: dict, fixed: list[str]) -> None:
    """ConfigError for a searched or fixed seed, fold or search.* key: the search sets them."""
    keys = [*space, *(f.lstrip("+~").split("=", 1)[0] for f in fixed)]
    for key in keys:
        if key in OWN_KEYS[:2] or key.startswith(OWN_KEYS[2]):
            raise ConfigError(f"{key}: the search sets it on each run; give the seeds as "
                              "hydra.sweeper.seeds=[...] and the folds as hydra.sweeper.folds="
                              "[...] (with validation=walk_forward)")  # fmt: skip


def plain(value: Any) -> Any:
    """A setting as plain Python (Hydra hands the sweeper its lists and maps as OmegaConf's)."""
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


class Running:
    """A trial on its way through its instances: its order, its values so far, its runs."""

    def __init__(self, trial: Any, order: list[int]) -> None:
        self.trial, self.order = trial, order
        self.values: dict[int, float] = {}  # instance id -> value
        self.runs: dict[int, str] = {}  # instance id -> MLflow run
        self.error: str | None = None

    def next_wave(self, wave: int) -> list[int]:
        done = len(self.values)
        return self.order[done : done + wave]

    def partial_mean(self) -> float:
        return float(mean(np.array([self.values[i] for i in sorted(self.values)])))


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
