"""A run's tear sheet: its last held-out evaluation read as a return series, by QuantStats (its
statistics, drawdowns and plots, none written here), beside the trivial baselines.

The series: one period per env step of the evaluation, its net PnL summed over the eval envs
divided by the capital those envs would tie up holding one position each at the book's mean mid
(envs x lot x multiplier x mean mid), so a return of 1% is 1% of that notional. A step is a day on
daily closes, an hour on hourly quotes: the ratios are per step (`periods_per_year=1`, no
annualisation) and the dates on the axes only number the steps, one business day each.
Buy-and-hold is QuantStats' benchmark; tearsheet.png draws the agent's net equity step by step
with every baseline's on the same axes.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from alpha_rl.market.book import Book
from alpha_rl.pipeline.evaluation.ledger import Costs, LedgerStats
from alpha_rl.portable import mean

log = logging.getLogger("alpha_rl")

HTML, PNG = "tearsheet.html", "tearsheet.png"
BENCHMARK = "buy_and_hold"
FIRST_PERIOD = "2000-01-03"  # the (arbitrary) date of period 1: dates only number the periods


def capital(book: Book, costs: Costs, envs: int) -> float:
    """The notional of one position in each of `envs` envs at the book's mean mid (currency)."""
    return envs * costs.lot_mult * float(mean(book.mid))


def returns(stats: LedgerStats, base: float, name: str) -> pd.Series:
    """Each step's net PnL (summed over the envs) as a return on `base`, a business day a step."""
    net = np.diff(np.concatenate([[0.0], stats.equity]))
    index = pd.bdate_range(FIRST_PERIOD, periods=net.size, name="step")
    return pd.Series(net / base, index=index, name=name)


def write_tearsheet(out_dir: Path, agent: LedgerStats, baselines: dict[str, LedgerStats],
                    book: Book, costs: Costs, title: str) -> list[Path]:  # fmt: skip
    """tearsheet.html (QuantStats, buy-and-hold as the benchmark) and tearsheet.png (the net
    equity of the agent and each baseline) in `out_dir`; the paths written."""
    png = out_dir / PNG
    _equity_plot(png, agent, baselines, title)
    try:
        import quantstats as qs  # a second or two to import: only at the end of a run
    except ImportError as exc:
        log.warning("%s not written: QuantStats cannot be imported (%s); pip install "
                    "quantstats", out_dir / HTML, exc)  # fmt: skip
        return [png]

    base = capital(book, costs, agent.envs)
    strategy = returns(agent, base, "agent")
    benchmark = returns(baselines[BENCHMARK], base, BENCHMARK)
    html = out_dir / HTML
    heading = (f"{title}: held-out, {agent.envs} envs x {agent.steps} steps, one period a "
               f"step; returns on {base:,.0f} of notional, net of spread and fees; benchmark "
               f"{BENCHMARK}")  # fmt: skip
    fonts = logging.getLogger("matplotlib.font_manager")
    level = fonts.level
    fonts.setLevel(logging.ERROR)  # its plots ask for Arial, absent on most Linux hosts
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its own pandas and matplotlib deprecations
            qs.reports.html(
                strategy,
                benchmark=benchmark,
                output=str(html),
                title=heading,
                periods_per_year=1,
                compounded=False,
                download_filename=str(html),
            )
    except Exception as exc:  # its plots of a short or flat series (a KDE of one point, ...)
        log.warning(
            "%s not written: QuantStats could not report %d steps: %s: %s",
            html,
            agent.steps,
            type(exc).__name__,
            str(exc).splitlines()[0] if str(exc) else "",
        )
        return [png]
    finally:
        fonts.setLevel(level)
    return [png, html]


def _equity_plot(path: Path, agent: LedgerStats, baselines: dict[str, LedgerStats],
                 title: str) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    steps = np.arange(1, agent.steps + 1)
    ax.plot(steps, agent.equity, color="black", lw=2, label=f"agent {agent.pnl:+,.0f}")
    for name, stats in baselines.items():
        ax.plot(steps, stats.equity, lw=1, label=f"{name} {stats.pnl:+,.0f}")
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xlabel("held-out step")
    ax.set_ylabel("net PnL so far, summed over the eval envs")
    ax.set_title(f"{title}\nnet of spread and fees; open positions closed at the last step",
                 fontsize=9)  # fmt: skip
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
