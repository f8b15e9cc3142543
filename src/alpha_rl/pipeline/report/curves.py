"""A run's curves as one PNG, from its own diag.jsonl (no tracking store needed):
`python -m alpha_rl.pipeline.report.curves <run dir> [--out file.png]`. Every run writes
`<run dir>/curves.png` at its end, and logs it as an artifact."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from alpha_rl.pipeline.report.summary import per_env_kstep
from alpha_rl.tracking.records import read_diag
from alpha_rl.vocabulary import CAPTURE, L_Q, PNL, PROBE, SHARPE, TRAIN_CAPTURE

PANELS = (
    ("training TD loss", ((L_Q, "loss/l_q (batches)"),
                          (PROBE, "eval/l_q_probe (held-out probe)"))),
    ("capture ratio", ((TRAIN_CAPTURE, "training (exploring)"),
                       (CAPTURE, "held-out (greedy)"))),
    ("held-out PnL per evaluation", ((PNL, "eval/pnl, all eval envs"),)),
    ("held-out Sharpe", ((SHARPE, SHARPE),)),
)  # fmt: skip


NON_FINITE = ("nan", "inf", "-inf")  # how diag.jsonl spells a non-finite metric


def read_series(diag: Path, finite_only: bool = True) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(steps, values) per metric of a run's diag.jsonl (finite values only, unless told)."""
    points: dict[str, list[tuple[int, float]]] = {}
    for record in read_diag(diag):  # a torn last line is dropped, with a warning
        metrics = record.get("metrics")
        for key, value in (metrics if isinstance(metrics, dict) else {}).items():
            if not finite_only and value in NON_FINITE:  # written as strings (json_safe)
                value = float(value)
            if isinstance(value, int | float) and (np.isfinite(value) or not finite_only):
                points.setdefault(key, []).append((int(record["step"]), float(value)))
    return {
        k: (np.array([s for s, _ in v]), np.array([x for _, x in v])) for k, v in points.items()
    }


def plot_run(run_dir: Path, out: Path, title: str, unit: str,
             eval_shape: tuple[int, int] | None = None) -> Path:  # fmt: skip
    """The four panels of PANELS for the run in `run_dir`, written to `out`. With `eval_shape`
    (eval envs, eval steps) the held-out PnL gets a second axis: per env per 1,000 steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = read_series(run_dir / "diag.jsonl")
    k = per_env_kstep(1.0, *eval_shape) if eval_shape else 1.0
    per_kstep, total = (lambda v: v * k), (lambda v: v / k)
    fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 3.6), squeeze=False)
    for ax, (name, curves) in zip(axes[0], PANELS, strict=True):
        for key, label in curves:
            if key in series:
                ax.plot(*series[key], marker="." if key.startswith("eval/") else None,
                        label=label)  # fmt: skip
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("env step")
        if "PnL" in name:
            ax.set_ylabel(f"{unit}, summed over the evaluation", fontsize=8)
            if eval_shape:
                right = ax.secondary_yaxis("right", functions=(per_kstep, total))
                right.set_ylabel(f"{unit} per env per 1,000 steps ({eval_shape[0]} envs x "
                                 f"{eval_shape[1]} steps)", fontsize=8)  # fmt: skip
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def eval_shape_of(run_dir: Path) -> tuple[int, int] | None:
    """(eval.num_envs, eval.steps) from the run's .hydra/config.yaml; None when not there."""
    import yaml

    try:
        ev = yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())["eval"]
        return int(ev["num_envs"]), int(ev["steps"])
    except (OSError, KeyError, TypeError, ValueError, yaml.YAMLError):
        return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m alpha_rl.pipeline.report.curves", description=__doc__
    )
    p.add_argument("run_dir", type=Path, help="a run directory (it holds diag.jsonl)")
    p.add_argument("--out", type=Path, help="the PNG (default <run dir>/curves.png)")
    p.add_argument("--unit", default="USD", help="the PnL unit for the axis title")
    args = p.parse_args(argv)
    if not (args.run_dir / "diag.jsonl").is_file():
        p.error(f"{args.run_dir}: no diag.jsonl there (not a run directory?)")
    out = plot_run(args.run_dir, args.out or args.run_dir / "curves.png", str(args.run_dir),
                   args.unit, eval_shape_of(args.run_dir))  # fmt: skip
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
