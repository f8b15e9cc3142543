"""Validation by time: which ticks of the series train and which are held out (`validation=`).

`single` (the default): the first `split` of the series trains, the rest is held out.
`walk_forward`: K folds in time order, purged and embargoed (López de Prado, "Advances in
Financial Machine Learning", ch. 7 and 12). The K test windows, `test_fraction` x T ticks each,
tile the end of the series, fold 0 first; fold k trains on ticks before its test window, ending
`embargo` ticks before it:

    rolling:   train_k = [k n_test, test_start_k - embargo)   every fold trains on as many ticks
    anchored:  train_k = [0,        test_start_k - embargo)   fold k trains on all the past

The held-out part of a fold is its test window plus the `history` ticks before it (the longest
perception horizon), which lie in the embargo: the evaluation starts at the window's first tick
and observes it through ticks that no fold k training ever stepped on. `market.fold=k` picks the
fold a run trains and is evaluated on; a sweep over market.fold=0,1,... is a walk-forward study.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from alpha_rl.errors import ConfigError, MarketDataError
from alpha_rl.kernels.experience import MIN_EPISODE_TICKS

VALIDATIONS = ("single", "walk_forward")
SCHEMES = ("rolling", "anchored")
MIN_PART_TICKS = 2  # validation=single: each part needs a current and a next tick


@dataclass(frozen=True)
class Window:
    """Ticks [start, stop) of the source series."""

    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start

    def ticks(self) -> range:
        return range(self.start, self.stop)


@dataclass(frozen=True)
class Fold:
    """One train / held-out division of a series of T ticks."""

    index: int | None  # the fold (walk_forward) or None (single)
    count: int  # K (1 for single)
    scheme: str  # "single", "rolling" or "anchored"
    train: Window
    test: Window  # the evaluated ticks
    heldout: Window  # what the evaluation reads: the test window and its history before it
    embargo: int  # ticks between train.stop and test.start (0 for single)

    @property
    def label(self) -> str:
        """`single split` or `fold 2 of 4 (rolling)`."""
        if self.index is None:
            return "single split"
        return f"fold {self.index} of {self.count} ({self.scheme})"

    def params(self, stamps: np.ndarray | None) -> dict[str, object]:
        """The ranges as MLflow params: tick indices, and times when the book has them."""
        out: dict[str, object] = {"fold.index": self.index, "fold.embargo": self.embargo}
        for name, w in (("train", self.train), ("test", self.test)):
            out[f"fold.{name}_start"], out[f"fold.{name}_stop"] = w.start, w.stop
            if stamps is not None:
                out[f"fold.{name}_first_time"] = stamp_text(stamps[w.start])
                out[f"fold.{name}_last_time"] = stamp_text(stamps[w.stop - 1])
        return out

    def describe(self, stamps: np.ndarray | None) -> str:
        """One log line: the fold, its train window, the embargo and its test window."""

        def span(w: Window) -> str:
            times = (f" ({stamp_text(stamps[w.start])} .. {stamp_text(stamps[w.stop - 1])})"
                     if stamps is not None else "")  # fmt: skip
            return f"ticks [{w.start}, {w.stop}){times}"

        gap = f", embargo {self.embargo} ticks" if self.index is not None else ""
        return f"{self.label}: train {span(self.train)}{gap}, test {span(self.test)}"


def stamp_text(value: object) -> str:
    """A timestamp as text: int64 nanoseconds as an ISO-8601 UTC time, other numbers as given."""
    if isinstance(value, np.integer) and value > 10**17:  # ns since the epoch (after 1973)
        return pd.Timestamp(int(value), tz="UTC").isoformat()
    return str(value.item() if isinstance(value, np.generic) else value)


@dataclass(frozen=True)
class SingleSplit:
    """validation=single: the first `split` of the ticks train, the rest is held out."""

    split: float

    def fold(self, T: int, source: str) -> Fold:
        cut = round(T * self.split)
        if min(cut, T - cut) < MIN_PART_TICKS:
            raise MarketDataError(
                f"{source}: validation.split={self.split} of {T} ticks leaves {cut} for training "
                f"and {T - cut} held out; each part needs at least {MIN_PART_TICKS} ticks: "
                "use a longer series (market.ticks, or a longer file) or move validation.split "
                "toward 0.5"
            )
        return Fold(None, 1, "single", Window(0, cut), Window(cut, T), Window(cut, T), 0)


@dataclass(frozen=True)
class WalkForward:
    """validation=walk_forward: K purged, embargoed folds; `fold` is the one this run uses."""

    folds: int
    scheme: str
    test_fraction: float
    embargo: int  # resolved (ticks)
    history: int  # the longest perception horizon (ticks)
    fold_index: int

    def all_folds(self, T: int, source: str) -> list[Fold]:
        """Every fold of a series of T ticks, fold 0 (the earliest test window) first."""
        n_test = int(self.test_fraction * T)
        first_test = T - self.folds * n_test
        n_train = first_test - self.embargo
        where = (f"{source}: validation=walk_forward with {self.folds} folds of test_fraction "
                 f"{self.test_fraction} on {T} ticks")  # fmt: skip
        if n_test < MIN_EPISODE_TICKS:
            raise MarketDataError(
                f"{where} gives test windows of {n_test} ticks, fewer than {MIN_EPISODE_TICKS}: "
                "raise validation.test_fraction or use a longer series"
            )
        if n_train < self.history + MIN_EPISODE_TICKS:
            raise MarketDataError(
                f"{where} and an embargo of {self.embargo} ticks leaves {max(n_train, 0)} ticks to "
                f"train fold 0, fewer than the {self.history + MIN_EPISODE_TICKS} a run needs "
                f"({self.history} of perception history): lower validation.folds, "
                "validation.test_fraction or validation.embargo, or use a longer series"
            )
        out = []
        for k in range(self.folds):
            test = Window(first_test + k * n_test, first_test + (k + 1) * n_test)
            start = k * n_test if self.scheme == "rolling" else 0
            train = Window(start, test.start - self.embargo)
            heldout = Window(test.start - self.history, test.stop)
            out.append(Fold(k, self.folds, self.scheme, train, test, heldout, self.embargo))
        return out

    def fold(self, T: int, source: str) -> Fold:
        return self.all_folds(T, source)[self.fold_index]


Validation = SingleSplit | WalkForward


def validation_config(cfg: DictConfig, history: int) -> Validation:
    """The typed `validation` node with `market.fold`; ConfigError names the key.
    `history` is the longest perception horizon (ticks)."""
    node, fold = cfg.validation, cfg.market.get("fold")
    name = node.get("name")
    if name == "single":
        if fold is not None:
            raise ConfigError(
                f"market.fold={fold!r} needs walk-forward folds: add validation=walk_forward "
                "(or drop market.fold for the single split)"
            )
        split = float(node.split)
        if not 0 < split < 1:
            raise ConfigError(
                f"validation.split={split!r}: the training fraction must be in (0, 1)"
            )
        return SingleSplit(split)
    if name != "walk_forward":
        raise ConfigError(
            f"validation.name={name!r}: choose validation={' or validation='.join(VALIDATIONS)}"
        )
    return _walk_forward(node, fold, history)


def _walk_forward(node: DictConfig, fold: object, history: int) -> WalkForward:
    folds, scheme, frac = int(node.folds), str(node.scheme), float(node.test_fraction)
    lookahead = int(node.lookahead)
    checks = [
        (folds >= 1, f"validation.folds={folds} must be >= 1"),
        (scheme in SCHEMES, f"validation.scheme={scheme!r} must be one of {', '.join(SCHEMES)}"),
        (frac > 0 and folds * frac < 1,
         f"validation.test_fraction={frac} must be > 0 with folds x test_fraction < 1 "
         f"({folds} x {frac} = {folds * frac:g})"),
        (lookahead >= 0, f"validation.lookahead={lookahead} must be >= 0 (ticks)"),
    ]  # fmt: skip
    for ok, what in checks:
        if not ok:
            raise ConfigError(f"{what} (conf/validation/walk_forward.yaml)")
    if isinstance(fold, bool) or not isinstance(fold, int) or not 0 <= fold < folds:
        raise ConfigError(
            f"market.fold={fold!r}: validation=walk_forward runs one fold per run; pick one of "
            f"0..{folds - 1} (market.fold=0), or sweep them all: --multirun "
            f"market.fold={','.join(map(str, range(folds)))}"
        )
    embargo = history + lookahead if node.embargo is None else int(node.embargo)
    if embargo < history:
        raise ConfigError(
            f"validation.embargo={embargo} ticks is smaller than the perception history "
            f"({history} ticks, the longest env.perception.horizons): a test window's first "
            f"observations would read training ticks; set validation.embargo >= {history} "
            f"(null: {history} + lookahead {lookahead} = {history + lookahead})"
        )
    return WalkForward(folds, scheme, frac, embargo, history, fold)
