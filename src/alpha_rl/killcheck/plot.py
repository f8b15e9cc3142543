"""The kill check's plot: a panel per metric every judged run has (criterion 5's, l_q, the
capture ratio, held-out PnL), a curve per arm: the median over its runs with a min-max band."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from alpha_rl.killcheck.pairs import Pairing
from alpha_rl.killcheck.report import Treatment
from alpha_rl.tracking import RunRecord
from alpha_rl.vocabulary import L_Q, PNL


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


PANELS = (
    ("{stability}", "{stability} (criterion 5)"),
    (L_Q, "loss/l_q over the whole batch (INFO: not comparable)"),
    ("{capture}", "{capture} (held-out)"),
    (PNL, "eval/pnl (held-out PnL per evaluation)"),
)


def plot(path: Path, treatments: list[Treatment], pairing: Pairing, keys: dict[str, str | None],
         title: str) -> None:  # fmt: skip
    """A panel per metric every judged run has (criterion 5's, l_q, the capture ratio, held-out
    PnL), a curve per arm: median over its runs with a min-max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = pairing.axis.label(pairing.axis.baseline)
    arms = {base: list({b.run_id: b for t in treatments for _, b in t.pairs}.values())}
    arms |= {t.label: [a for a, _ in t.pairs] for t in treatments}
    runs = [r for rs in arms.values() for r in rs]
    panels = []
    for key, label in PANELS:
        key = key.format(**{k: v or "" for k, v in keys.items()})
        if key and key not in [k for k, _ in panels] and all(r.metrics.get(key) for r in runs):
            panels.append((key, label.format(**{k: v or "" for k, v in keys.items()})))
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(6 * max(1, len(panels)), 4.5),
                             squeeze=False)  # fmt: skip
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (key, label) in zip(axes[0], panels, strict=False):
        for i, (arm, members) in enumerate(arms.items()):
            band = _band(members, key)
            if band is None:
                continue
            steps, mid, lo, hi = band
            color = colors[i % len(colors)]
            ax.plot(steps, mid, color=color, label=f"{arm} (median of {len(members)})")
            ax.fill_between(steps, lo, hi, color=color, alpha=0.15)
        ax.set_xlabel("env step")
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
