"""The sampler of a search (`hydra.sweeper.sampler`): Optuna's TPE, random or grid sampler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from alpha_rl.errors import ConfigError

SAMPLERS = ("tpe", "random", "grid")


def whole(value: Any, key: str, least: int, what: str, none_ok: bool = False) -> int | None:
    """A whole-number setting `key` >= least; ConfigError naming it and `what` it is."""
    if value is None and none_ok:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ConfigError(f"{key}={value!r}: {what}, a whole number >= {least}")
    return value


def named_settings(cls: type, given: dict, where: str, names: tuple[str, ...]) -> Any:
    """`cls(**given)` of a section of named settings (`where`: hydra.sweeper.sampler, ...):
    ConfigError for a key the dataclass lacks, or a `name` not among `names`."""
    fields = tuple(cls.__dataclass_fields__)
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} ({', '.join(fields)})")
    made = cls(**given)
    if made.name not in names:
        raise ConfigError(f"{where}.name={made.name!r}: one of {', '.join(names)}")
    return made


def checked_sampler(given: dict) -> SamplerConfig:
    """hydra.sweeper.sampler, each key checked by name."""
    cfg = named_settings(SamplerConfig, given, "hydra.sweeper.sampler", SAMPLERS)
    whole(cfg.seed, "hydra.sweeper.sampler.seed", 0, "the sampler's seed (null: fresh entropy)",
          none_ok=True)  # fmt: skip
    whole(cfg.n_startup_trials, "hydra.sweeper.sampler.n_startup_trials", 0,
          "random trials before TPE's model")  # fmt: skip
    return cfg


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
