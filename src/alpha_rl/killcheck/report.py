"""The kill check's outputs: the verdict, the printed table, the JSON report and the PNG."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from alpha_rl.killcheck.criteria import KILL, NOT_EVALUATED, Judgement
from alpha_rl.killcheck.pairs import Pairing
from alpha_rl.tracking import RunRecord
from alpha_rl.tracking.records import json_safe

KEEP, CANNOT_JUDGE = "KEEP", "CANNOT-JUDGE"
EXIT = {KEEP: 0, KILL: 1, CANNOT_JUDGE: 2}


def verdict(rows: list[Judgement], pairing: Pairing) -> str:
    """KILL if any criterion kills; CANNOT-JUDGE without pairs or with a required criterion
    not evaluated; KEEP otherwise."""
    if any(r.verdict == KILL for r in rows):
        return KILL
    if not pairing.pairs or any(r.required and r.verdict == NOT_EVALUATED for r in rows):
        return CANNOT_JUDGE
    return KEEP


def table(rows: list[Judgement], overall: str, pairing: Pairing) -> str:
    """The verdict table as text, with the unpaired runs listed under it."""
    head = ("criterion", "value", "threshold", "verdict")
    body = [(r.criterion, r.value, r.threshold, r.verdict + ("" if r.required else " *"))
            for r in rows]  # fmt: skip
    widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(4)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    out = [line(head), line(["-" * w for w in widths]), *map(line, body)]
    out.append(f"verdict: {overall}   ({len(pairing.pairs)} pairs; * = not blocking)")
    out += [f"unpaired: {run.name} ({run.run_id}): {why}" for run, why in pairing.unpaired]
    return "\n".join(out)


def write_json(path: Path, rows: list[Judgement], overall: str, pairing: Pairing,
               meta: dict[str, Any]) -> None:  # fmt: skip
    """The whole report: settings, pairs, unpaired runs, every row with its evidence."""
    report = {
        **meta,
        "verdict": overall,
        "pairs": [
            {"her": h.run_id, "baseline": b.run_id, "her_name": h.name, "baseline_name": b.name}
            for h, b in pairing.pairs
        ],
        "unpaired": [{"run": r.run_id, "name": r.name, "why": why} for r, why in pairing.unpaired],
        "criteria": [asdict(r) for r in rows],
    }
    path.write_text(json.dumps(json_safe(report), indent=1, allow_nan=False))


def _band(runs: list[RunRecord], key: str) -> tuple[np.ndarray, ...] | None:
    """(steps, median, min, max) over runs of `key`, each run interpolated onto all steps."""
    series = [r.series(key) for r in runs]
    series = [(s, v) for s, v in series if s.size]
    if not series:
        return None
    grid = np.unique(np.concatenate([s for s, _ in series]))
    stack = np.array([np.interp(grid, s, v, left=np.nan, right=np.nan) for s, v in series])
    with np.errstate(all="ignore"):
        return grid, np.nanmedian(stack, 0), np.nanmin(stack, 0), np.nanmax(stack, 0)


PNL_KEY = "eval/pnl"


def plot(path: Path, pairing: Pairing, capture_key: str | None, target: float, title: str) -> None:
    """Panels of HER on vs off (median over seeds, min-max band): l_q, the capture ratio, and
    the held-out PnL when every run has it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = {"HER on": [h for h, _ in pairing.pairs], "HER off": [b for _, b in pairing.pairs]}
    panels = [("loss/l_q", "l_q (IS-weighted Huber TD loss)")]
    panels.append((capture_key, f"{capture_key} (target {target:g})") if capture_key else None)
    runs = [r for pair in pairing.pairs for r in pair]
    if runs and all(r.metrics.get(PNL_KEY) for r in runs):
        panels.append((PNL_KEY, "eval/pnl (held-out PnL per evaluation)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5))
    for ax, panel in zip(axes, panels, strict=True):
        if panel is None:
            ax.set_axis_off()
            continue
        key, label = panel
        for (arm, runs), color in zip(arms.items(), ("tab:red", "tab:blue"), strict=True):
            band = _band(runs, key)
            if band is None:
                continue
            steps, mid, lo, hi = band
            ax.plot(steps, mid, color=color, label=f"{arm} (median of {len(runs)} seeds)")
            ax.fill_between(steps, lo, hi, color=color, alpha=0.2, label=f"{arm} min-max")
        if key == capture_key:
            ax.axhline(target, color="gray", linestyle="--", linewidth=1, label="target")
        ax.set_xlabel("env step")
        ax.set_title(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
