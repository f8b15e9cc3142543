"""The kill check's settings (conf/kill_criteria/*.yaml), typed and checked."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from alpha_rl import paths
from alpha_rl.errors import ConfigError, require
from alpha_rl.vocabulary import L_Q, L_Q_REAL, PROBE

STABILITY_METRICS = (PROBE, L_Q_REAL, L_Q)
# the criteria a `deciding` set may name: HER's audits (1-3) and injections (4), criterion 5 on
# the stability metric, the rate of broken runs, and no held-out harm
DECIDING = ("audits", "injections", "stability", "broken", "benefit")
OTHER_AXES = "other"  # the set of every axis without its own


@dataclass(frozen=True)
class Criteria:
    """Thresholds of the criteria and settings of the reports (every key commented in
    conf/kill_criteria/default.yaml)."""

    alpha: float
    beta: float
    spending_gamma: float
    deciding: dict[str, tuple[str, ...]]
    min_steps_with_her: int
    min_steps_with_her_frac: float
    max_forward_lost: float
    require_audit: bool
    window: float
    stability_metric: str
    tolerance: float
    blowup_factor: float
    benefit_metric: str
    benefit_margin: float | None
    benefit_margin_sd: float | None
    broken_margin: float
    confidence: float
    resamples: int
    bootstrap_seed: int
    capture_target_frac: float | None
    capture_target: float | None
    claimed_speedup: float
    min_seeds: int
    pair_ignore: tuple[str, ...]

    @classmethod
    def load(cls, path: Path | None = None, overrides: list[str] | None = None) -> Criteria:
        """conf/kill_criteria/default.yaml (or `path`) with `key=value` overrides applied."""
        path = path or paths.conf_dir() / "kill_criteria" / "default.yaml"
        try:
            node = OmegaConf.merge(OmegaConf.load(path), OmegaConf.from_dotlist(overrides or []))
        except Exception as exc:  # a YAML or dotlist syntax error
            raise ConfigError(f"{path}: {exc}") from exc
        data: dict[str, Any] = OmegaConf.to_container(node, resolve=True)  # type: ignore[assignment]
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"{path}: unknown kill-criteria key(s) {unknown}; known: {sorted(known)}"
            )
        missing = sorted(known - set(data))
        if missing:
            raise ConfigError(f"{path}: missing kill-criteria key(s) {missing}")
        data["pair_ignore"] = tuple(str(p) for p in data["pair_ignore"])
        data["deciding"] = _deciding(data["deciding"], path)
        for key in ("capture_target_frac", "capture_target", "benefit_margin",
                    "benefit_margin_sd"):  # fmt: skip
            if data[key] is not None and not isinstance(data[key], int | float):
                raise ConfigError(f"{path}: {key}={data[key]!r} must be a number or null")
        for f in fields(cls):  # whole numbers stay whole: min_seeds=2.5 means nothing
            if f.type == "int" and not (isinstance(data[f.name], int)
                                        and not isinstance(data[f.name], bool)):  # fmt: skip
                raise ConfigError(f"{path}: {f.name}={data[f.name]!r} must be a whole number")
        crit = cls(**data)
        frac = crit.capture_target_frac
        require(
            [
                (0 < crit.alpha < 0.5, f"alpha={crit.alpha} must be in (0, 0.5)"),
                (crit.min_steps_with_her >= 1, "min_steps_with_her must be >= 1"),
                (0 < crit.min_steps_with_her_frac <= 1,
                 "min_steps_with_her_frac must be in (0, 1]"),
                (0 <= crit.max_forward_lost <= 1, "max_forward_lost must be in [0, 1]"),
                (0 < crit.window <= 1, "window must be in (0, 1]"),
                (crit.stability_metric in STABILITY_METRICS,
                 f"stability_metric={crit.stability_metric!r} must be one of "
                 f"{', '.join(STABILITY_METRICS)}"),
                (crit.tolerance >= 0 and crit.blowup_factor >= 1,
                 "tolerance must be >= 0 and blowup_factor >= 1"),
                (crit.benefit_metric.startswith("eval/"),
                 f"benefit_metric={crit.benefit_metric!r} must be a held-out metric (eval/...)"),
                (crit.benefit_margin is None or crit.benefit_margin >= 0,
                 "benefit_margin must be >= 0 (or null)"),
                (crit.benefit_margin_sd is None or crit.benefit_margin_sd >= 0,
                 "benefit_margin_sd must be >= 0 (or null)"),
                ((crit.benefit_margin is None) != (crit.benefit_margin_sd is None),
                 "set one of benefit_margin (the metric's units) and benefit_margin_sd (standard "
                 "deviations of the paired differences), the other null"),
                (0 < crit.beta < 0.5, f"beta={crit.beta} must be in (0, 0.5)"),
                (0 <= crit.broken_margin < 1, "broken_margin must be in [0, 1)"),
                (-40 <= crit.spending_gamma <= 40, "spending_gamma must be in [-40, 40]"),
                (0 < crit.confidence < 1, "confidence must be in (0, 1)"),
                (crit.resamples >= 100, "resamples must be >= 100"),
                (frac is None or 0 < frac <= 1, f"capture_target_frac={frac} must be in (0, 1]"),
                (frac is not None or crit.capture_target is not None,
                 "set capture_target_frac or capture_target (both are null)"),
                (crit.claimed_speedup > 0, "claimed_speedup must be > 0"),
                (crit.min_seeds >= 1, "min_seeds must be >= 1"),
            ],
            str(path),
        )  # fmt: skip
        return crit

    def margin_text(self) -> str:
        """How the held-out harm's margin is set, for the table."""
        if self.benefit_margin is not None:
            return f"{self.benefit_margin:g}"
        return f"{self.benefit_margin_sd:g} x the sd of the paired differences"

    def target_text(self) -> str:
        """How the capture target is set, for the table."""
        if self.capture_target is not None:
            return f"capture >= {self.capture_target:g}"
        return (f"capture >= the baseline's start + {self.capture_target_frac:g} x its rise to "
                "its plateau")  # fmt: skip

    def deciding_for(self, axis: str) -> tuple[str, ...]:
        """The criteria that decide on `axis` (its own set, else the `other` set)."""
        return self.deciding.get(axis, self.deciding[OTHER_AXES])

    def non_default(self) -> dict[str, dict[str, Any]]:
        """The settings that differ from conf/kill_criteria/default.yaml: {key: {value,
        default}}."""
        default = Criteria.load()

        def same(a: Any, b: Any) -> bool:  # sets of criteria compare in any order
            if isinstance(a, dict):
                return a.keys() == b.keys() and all(set(a[k]) == set(b[k]) for k in a)
            return a == b

        return {
            f.name: {"value": getattr(self, f.name), "default": getattr(default, f.name)}
            for f in fields(self)
            if not same(getattr(self, f.name), getattr(default, f.name))
        }

    def non_default_text(self) -> str:
        """`tolerance=0.2 (default 0.1), ...`; empty with the default settings."""
        return ", ".join(f"{k}={_show(v['value'])} (default {_show(v['default'])})"
                         for k, v in self.non_default().items())  # fmt: skip


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: [{', '.join(v)}]" for k, v in value.items()) + "}"
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _deciding(node: Any, path: Path) -> dict[str, tuple[str, ...]]:
    """The `deciding` mapping checked: axis -> criteria it names, with the `other` set."""
    if not isinstance(node, dict) or OTHER_AXES not in node:
        raise ConfigError(f"{path}: deciding must map axes to lists of criteria, with an "
                          f"'{OTHER_AXES}' entry for every axis without its own")  # fmt: skip
    out = {}
    for axis, names in node.items():
        if not isinstance(names, list) or not names:
            raise ConfigError(f"{path}: deciding.{axis} must be a non-empty list of criteria "
                              f"({', '.join(DECIDING)})")  # fmt: skip
        bad = [n for n in names if n not in DECIDING]
        if bad:
            raise ConfigError(f"{path}: deciding.{axis}: unknown criteria {bad}; known: "
                              f"{', '.join(DECIDING)}")  # fmt: skip
        out[str(axis)] = tuple(str(n) for n in names)
    return out
