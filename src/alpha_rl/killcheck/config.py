"""The kill check's settings (conf/kill_criteria/*.yaml), typed and checked."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from alpha_rl import paths
from alpha_rl.errors import ConfigError, require


@dataclass(frozen=True)
class Criteria:
    """Thresholds of the five criteria and of the speed-up report."""

    min_steps_with_her: int
    require_audit: bool
    window: float
    tolerance: float
    blowup_factor: float
    confidence: float
    resamples: int
    bootstrap_seed: int
    capture_target: float
    claimed_speedup: float
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
        crit = cls(**data)
        require(
            [
                (crit.min_steps_with_her >= 1, "min_steps_with_her must be >= 1"),
                (0 < crit.window <= 1, "window must be in (0, 1]"),
                (crit.tolerance >= 0 and crit.blowup_factor >= 1,
                 "tolerance must be >= 0 and blowup_factor >= 1"),
                (0 < crit.confidence < 1, "confidence must be in (0, 1)"),
                (crit.resamples >= 100, "resamples must be >= 100"),
                (crit.claimed_speedup > 0, "claimed_speedup must be > 0"),
            ],
            str(path),
        )  # fmt: skip
        return crit
