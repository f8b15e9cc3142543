"""A run's tear sheet: its calendar backtest (pipeline/evaluation/backtest.py) read as daily
returns by date, by QuantStats (its statistics, drawdowns and plots, none written here), beside the
trivial baselines.

The series: each day's net PnL of the walk, the span's steps in time order, divided by the
notional of one position at the span's mean mid, so a return of 1% is 1% of that notional; the
ratios are annualised by the trading days a year the market's own timestamps show
(market/calendar.py), not compounded. Buy-and-hold on the very same ticks is QuantStats'
benchmark; tearsheet.png draws the agent's net equity by date with every baseline's.

No dates are ever made up. A market without them (the synthetic one, a file without timestamps or
with plain numbers), or a run without the backtest (`eval.backtest.enabled=false`: the
evaluation's windows are seeded stretches of the span, not the span in order), gets a page that
says so, with the figures per 1,000 steps, and tearsheet.png by step.
"""

from __future__ import annotations

import html
import logging
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from alpha_rl.market.book import Book
from alpha_rl.pipeline.evaluation.backtest import Backtest
from alpha_rl.pipeline.evaluation.ledger import LedgerStats

log = logging.getLogger("alpha_rl")

HTML, PNG = "tearsheet.html", "tearsheet.png"
BENCHMARK = "buy_and_hold"


def write_tearsheet(out_dir: Path, title: str, currency: str, walked: Backtest | None,
                    windows: tuple[LedgerStats, dict[str, LedgerStats]] | None,
                    why: str) -> list[Path]:  # fmt: skip
    """tearsheet.html and tearsheet.png in `out_dir`: QuantStats' report of the backtest `walked`
    when it has dates, else a page saying why there are none (`why`) with the figures of the
    backtest or of the last evaluation's `windows` (the agent's ledger and the baselines'); the
    paths written."""
    png, page = out_dir / PNG, out_dir / HTML
    if walked is not None and walked.dates is not None:
        curves = {"agent": walked.agent.net} | {n: t.net for n, t in walked.baselines.items()}
        _equity_plot(png, {n: pd.Series(np.cumsum(v), walked.dates) for n, v in curves.items()},
                     f"{title}\nheld-out backtest {walked.span()}, net of spread and fees",
                     "date", currency)  # fmt: skip
        return [png, *_quantstats(page, walked, title, currency)]
    if walked is not None:
        curves = {"agent": walked.agent.net} | {n: t.net for n, t in walked.baselines.items()}
        figures = {"agent": walked.figures(walked.agent)}
        for n, t in walked.baselines.items():  # a mean of random walks: no path's ratios
            figures[n] = walked.figures(t, ratios=n != "random")
        what = f"the held-out span walked in order, {walked.agent.net.size:,} steps"
    elif windows is not None:
        agent, baselines = windows
        curves = {"agent": np.diff(agent.equity, prepend=0.0)} | {
            n: np.diff(t.equity, prepend=0.0) for n, t in baselines.items()}  # fmt: skip
        figures = {"agent": agent.metrics()} | {n: t.metrics() for n, t in baselines.items()}
        what = (f"the last evaluation's windows, {agent.envs} envs x {agent.steps} steps "
                "(summed over the envs)")  # fmt: skip
    else:
        return []
    _equity_plot(png, {n: pd.Series(np.cumsum(v)) for n, v in curves.items()},
                 f"{title}\n{what}, net of spread and fees", "step", currency)  # fmt: skip
    page.write_text(_undated(title, why, what, figures, currency))
    return [png, page]


def undated(book: Book, walks: bool) -> str:
    """Why a run on `book` has a tear sheet without dates (when it has one); `walks`: whether
    the run was to end with the backtest."""
    if book.timestamps is None:
        return "the market has no timestamps (the synthetic market, or a file without them)"
    if not book.times:
        return "the market's timestamps are plain numbers, not times"
    if walks:
        return (
            "the run ended before its last step, where the backtest walks the held-out span "
            "in order: the last evaluation's windows are seeded stretches of it"
        )
    return (
        "eval.backtest.enabled=false: the evaluation's windows are seeded stretches of the "
        "held-out span, not the span in order"
    )


def _quantstats(page: Path, walked: Backtest, title: str, currency: str) -> list[Path]:
    try:
        import quantstats as qs  # a second or two to import: only at the end of a run
    except ImportError as exc:
        log.warning("%s not written: QuantStats cannot be imported (%s); pip install "
                    "quantstats", page, exc)  # fmt: skip
        return []
    calendar = walked.calendar
    assert calendar is not None  # dates come with a calendar
    strategy = walked.returns(walked.agent).rename("agent")
    benchmark = walked.returns(walked.baselines[BENCHMARK]).rename(BENCHMARK)
    strategy.index = benchmark.index = strategy.index.tz_localize(None)  # QuantStats: naive
    heading = (f"{title}: held-out backtest {walked.span()}, {walked.agent.net.size:,} steps "
               f"in order, {walked.segments} segments; daily returns on {walked.capital:,.0f} "
               f"{currency} (one position), net of spread and fees; annualised by "
               f"{calendar.days_per_year:.4g} trading days a year; benchmark {BENCHMARK} on the "
               "same ticks")  # fmt: skip
    fonts = logging.getLogger("matplotlib.font_manager")
    level = fonts.level
    fonts.setLevel(logging.ERROR)  # its plots ask for Arial, absent on most Linux hosts
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its own pandas and matplotlib deprecations
            qs.reports.html(strategy, benchmark=benchmark, output=str(page), title=heading,
                            periods_per_year=round(calendar.days_per_year), compounded=False,
                            download_filename=str(page))  # fmt: skip
    except Exception as exc:  # its plots of a short or flat series (a KDE of one point, ...)
        log.warning("%s not written: QuantStats could not report %d days: %s: %s", page,
                    strategy.size, type(exc).__name__,
                    str(exc).splitlines()[0] if str(exc) else "")  # fmt: skip
        return []
    finally:
        fonts.setLevel(level)
    return [page]


def _undated(title: str, why: str, what: str, figures: dict[str, dict[str, float]],
             currency: str) -> str:  # fmt: skip
    """A page of the figures, saying why it has no dates."""
    names = sorted({k for f in figures.values() for k in f})
    head = "".join(f"<th>{html.escape(n)}</th>" for n in figures)
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td>"
        + "".join(f"<td>{f[k]:,.6g}</td>" if k in f else "<td>-</td>" for f in figures.values())
        + "</tr>"
        for k in names
    )
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title></head><body><h1>{html.escape(title)}</h1><p><b>No dates:</b> "
            f"{html.escape(why)}. Nothing here is dated or annualised; money in {currency}, "
            f"rates per 1,000 steps.</p><p>Figures of {html.escape(what)}, net of spread and "
            f"fees:</p><table border='1'><tr><th></th>{head}</tr>{rows}</table>"
            f"<p><img src='{PNG}' alt='net equity by step'></p></body></html>")  # fmt: skip


def _equity_plot(path: Path, curves: dict[str, pd.Series], title: str, axis: str,
                 currency: str) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name, equity in curves.items():
        end = float(equity.iloc[-1]) if equity.size else 0.0
        agent = name == "agent"
        ax.plot(equity.index, equity.to_numpy(), lw=2 if agent else 1,
                color="black" if agent else None, label=f"{name} {end:+,.0f}")  # fmt: skip
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xlabel(axis)
    ax.set_ylabel(f"net PnL so far ({currency})")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
