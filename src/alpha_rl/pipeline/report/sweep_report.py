"""What a multirun ends with: its directory, its runs counted by how they ended, and the command
that judges it (or, after a search, the one that confirms it).

Each job writes `<job dir>/outcome.json` ({status, steps, reason}) when its run ends; a job that
did not start is in `<sweep dir>/failed_jobs.jsonl`; a job directory with neither ended without
a word (killed hard) or is still running elsewhere.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from alpha_rl.commands import script_command
from alpha_rl.errors import AlphaRlError
from alpha_rl.masking import redact, secrets
from alpha_rl.tracking import TrackingConfig
from alpha_rl.tracking.parent import OUTCOME_FILE, failed_jobs, recorded_parent, ui_opening
from alpha_rl.tracking.records import write_json

log = logging.getLogger("alpha_rl")

# what a sweep varies besides its variant: the pairs of a kill check, never its axis
PAIRING_KEYS = ("seed", "market.fold")
# the kill check's name of the axis a swept group belongs to (any other key is its own axis)
AXIS_OF = {"her": "her", "beta": "beta", "alpha": "alpha", "reward": "reward",
           "reward_variant": "beta", "agent": "agent"}  # fmt: skip
NO_END = "no end recorded"


def write_outcome(run_dir: Path, status: str, steps: int, reason: str | None,
                  group: dict[str, Any] | None = None) -> None:  # fmt: skip
    """<run dir>/outcome.json: how the run ended (the reason with the environment's secrets
    masked: an unexpected error's text is as it came), and the group of agents its steps were
    launched with (an id, its size, and why its steps went one agent at a time, if they did)."""
    reason = None if reason is None else redact(reason, secrets())
    outcome = {"status": status, "steps": steps, "reason": reason}
    write_json(run_dir / OUTCOME_FILE, outcome | ({"group": group} if group else {}))


def groups_line(sweep_dir: Path) -> str | None:
    """How the sweep's runs were launched: the groups of agents whose steps shared each launch
    (their sizes), from the runs' outcome.json; None when no run stepped in a group."""
    groups: dict[str, dict] = {}
    for outcome in sweep_dir.glob("*/" + OUTCOME_FILE):
        try:
            group = json.loads(outcome.read_text()).get("group")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(group, dict) and "id" in group:
            groups[str(group["id"])] = group
    if not groups:
        return None
    sizes = sorted((int(g.get("agents", 1)) for g in groups.values()), reverse=True)
    apart = sum(1 for g in groups.values() if g.get("apart"))
    said = f"; {apart} of them stepped one agent at a time at least once (see the runs' logs)"
    return (
        f"launched as {len(groups)} group{'s' * (len(groups) != 1)} of agents, each kernel "
        f"once a step for all of a group ({', '.join(map(str, sizes))} agents)"
        + (said if apart else "")
    )


def job_states(sweep_dir: Path, not_started: list[dict]) -> Counter:
    """How many of the sweep's jobs ended in each state: the runs' statuses (FINISHED, FAILED,
    KILLED), `did not start` and `no end recorded`."""
    states: Counter = Counter()
    skipped = {str(f.get("job")) for f in not_started}
    for job in sorted(p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()):
        if job.name in skipped:
            continue
        try:
            states[json.loads((job / OUTCOME_FILE).read_text())["status"]] += 1
        except (OSError, ValueError, KeyError, TypeError):
            states[NO_END] += 1
    if not_started:
        states["did not start"] = len(not_started)
    return states


def swept_keys(config: DictConfig) -> list[str]:
    """The keys and groups a multirun varies: the sweeper's params and the command line's sweeps,
    in the order given."""
    keys = [str(k) for k in (OmegaConf.select(config, "hydra.sweeper.params") or {})]
    typed = [str(o) for o in OmegaConf.select(config, "hydra.overrides.task", default=[]) or []]
    for override in OverridesParser.create().parse_overrides(typed):
        if override.is_sweep_override():
            keys.append(override.key_or_group)
    return list(dict.fromkeys(k.lstrip("+~") for k in keys))


def next_commands(config: DictConfig, sweep_dir: Path) -> list[str]:
    """The command lines that judge this sweep, as the user runs them (alpha_rl.commands): one
    kill check per variant axis it sweeps (none for seeds alone); after a search, the
    confirmation of its best trials."""
    tracking = []
    uri = str(OmegaConf.select(config, "tracking.uri", default="") or "")
    experiment = str(OmegaConf.select(config, "tracking.experiment", default="") or "")
    if uri and uri != "sqlite:///mlflow.db":
        tracking += ["--tracking-uri", uri]
    if experiment and experiment != "alpha_rl":
        tracking += ["--experiment", experiment]
    if _searched(config):
        parent = _parent_id(sweep_dir)
        if parent is None:
            return []
        return [script_command("alpha-rl-confirm", ["--parent", parent, *tracking])]
    axes = [AXIS_OF.get(k, k) for k in swept_keys(config) if k not in PAIRING_KEYS]
    return [script_command("alpha-rl-kill-check", ["--sweep", str(sweep_dir),
                                                   *([] if axis == "her" else ["--axis", axis]),
                                                   *tracking])
            for axis in dict.fromkeys(axes)]  # fmt: skip


def _ui(config: DictConfig) -> str | None:
    """How to open the sweep's runs in the UI (None when its store has no UI of ours, or its
    tracking settings do not read: the jobs have said why)."""
    try:
        return ui_opening(TrackingConfig.from_cfg(config.tracking))
    except AlphaRlError:
        return None


def _searched(config: DictConfig) -> bool:
    """Whether the multirun is a hyper-parameter search (hparams_search=...)."""
    return OmegaConf.select(config, "hydra.runtime.choices.hparams_search") is not None


def _parent_id(sweep_dir: Path) -> str | None:
    try:
        return recorded_parent(sweep_dir)
    except AlphaRlError:  # its jobs have said what is wrong with it
        return None


def sweep_lines(config: DictConfig, not_started: list[dict]) -> list[str]:
    """The lines a multirun ends with."""
    sweep_dir = Path(str(config.hydra.sweep.dir))
    states = job_states(sweep_dir, not_started)
    counted = ", ".join(f"{n} {state}" for state, n in states.most_common())
    total = sum(states.values())
    lines = [f"sweep {sweep_dir}: {total} job{'s' * (total != 1)}: {counted or 'none ran'}"]
    grouped = groups_line(sweep_dir)
    lines += [grouped] if grouped else []
    opening = _ui(config)
    lines += [f"its runs in the UI: {opening}"] if opening else []
    commands = next_commands(config, sweep_dir)
    verb = "confirm it" if _searched(config) else "judge it"
    lines += [f"{verb}: {c}" for c in commands]
    if not commands and not _searched(config):
        varied = ", ".join(swept_keys(config))
        varies = f"only {varied}" if varied else "nothing"
        lines.append(f"nothing to judge: the sweep varies {varies} (a kill check compares the "
                     "arms of a variant)")  # fmt: skip
    return lines


class SweepReportCallback(Callback):
    """Hydra callback: a multirun's last lines (sweep_lines). Listed after the parent run's
    callback, so it speaks before the parent is closed (Hydra ends callbacks in reverse)."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        for line in sweep_lines(config, failed_jobs(sweep_dir)):
            log.info("%s", line)
