"""The progress display: a redrawn bar on a terminal, a log line per tenth of the run otherwise."""

from __future__ import annotations

import io
import json
import logging

import matplotlib.pyplot as plt

from alpha_rl.pipeline.report.curves import main, read_series
from alpha_rl.pipeline.report.progress import Progress
from alpha_rl.pipeline.report.summary import Summary


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar_with_rate_loss_and_capture() -> None:
    screen = Terminal()
    bar = Progress(100, stream=screen)
    bar.update(50, {"loss/l_q": 0.125, "trade/capture_ratio": 0.5})
    bar.update(100)
    bar.close()
    last = screen.getvalue().split("\r")[-1]
    assert last.startswith("step 100/100 [" + "#" * 24 + "]")
    assert "l_q 0.125" in last and "train capture 0.500" in last and "steps/s" in last
    assert "held-out -" in last, "no evaluation yet"
    assert last.endswith("\n")


def test_the_line_shows_the_latest_held_out_result_beside_the_training_figures() -> None:
    bar = Progress(2000, stream=io.StringIO())
    bar.update(500, {"loss/l_q": 0.5, "trade/capture_ratio": -1.9})
    bar.update(1000, {"eval/pnl": 1234.4, "eval/capture_ratio": 0.34})
    bar.update(1100, {"trade/capture_ratio": -1.7})
    line = bar.line()
    assert "train capture -1.700" in line and "held-out@1000: pnl +1,234 capture 0.340" in line


def test_a_run_ends_with_its_held_out_result_and_l_q_trend() -> None:
    summary = Summary("USD", 16, 200, 20)
    for step, l_q in zip(
        range(100, 900, 100), [4.0, 3.0, 2.0, 2.0, 1.0, 1.0, 0.5, 0.5], strict=True
    ):
        summary.update(step, {"loss/l_q": l_q})
    assert summary.lines()[0] == "held-out: no evaluation ran"
    summary.update(800, {"eval/pnl": -321.5, "eval/capture_ratio": 0.25, "eval/sharpe": 1.5,
                         "eval/trades": 42.0})  # fmt: skip
    held, trend = summary.lines()
    assert held == ("held-out, the last evaluation (step 800, greedy, 16 envs x 200 steps): pnl "
                    "-322 USD in all (-100 per env per 1,000 steps), capture 0.250, Sharpe 1.5 per "
                    "20-step interval, trades 42")  # fmt: skip
    assert trend == "l_q 3.5 -> 0.5 (mean of the first and the last quarter of 8 log points)"
    summary.update(900, {"eval/pnl": -321.5, "eval/pnl_gross": 478.0, "eval/cost_spread": 600.0,
                         "eval/cost_fees": 200.0, "eval/turnover": 125.0,
                         "eval/baseline/flat/pnl": 0.0, "eval/baseline/buy_and_hold/pnl": -400.0,
                         "eval/baseline/sell_and_hold/pnl": 380.0,
                         "eval/baseline/random/pnl": -900.0})  # fmt: skip
    _, costs, versus, _ = summary.lines()
    assert costs == ("held-out costs: gross +478 USD - spread 600 - fees 200 = net -322; "
                     "turnover 125 fills per env per 1,000 steps")  # fmt: skip
    assert versus == ("baselines on the same windows, net (flat +0, buy_and_hold -400, "
                      "sell_and_hold +380, random -900): this run's net is above buy_and_hold, "
                      "random; not above flat, sell_and_hold (one evaluation's windows, no "
                      "interval)")  # fmt: skip
    assert "beat" not in " ".join(summary.lines())


def test_the_line_says_how_many_baselines_the_net_was_above_without_claiming_a_win() -> None:
    """One evaluation of one run has no interval: the line compares, it does not say "beats"."""
    bar = Progress(2000, stream=io.StringIO())
    bar.update(1000, {"eval/pnl": 10.0, "eval/baseline/flat/pnl": 0.0,
                      "eval/baseline/buy_and_hold/pnl": 30.0})  # fmt: skip
    line = bar.line()
    assert "held-out@1000: pnl +10 capture - above 1/2 baselines' net (these windows)" in line
    assert "beat" not in line


def test_without_a_terminal_a_line_is_logged_per_tenth(caplog) -> None:
    log = io.StringIO()
    bar = Progress(100, stream=log)
    with caplog.at_level(logging.INFO, logger="alpha_rl"):
        for step in range(1, 101):
            bar.update(step, {"loss/l_q": 1.0} if step % 5 == 0 else None)
    assert log.getvalue() == ""
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 10 and lines[0].startswith("step 5/100") and "l_q 1" in lines[0]


def test_curves_are_drawn_from_a_run_directory(tmp_path) -> None:
    lines = [{"step": s, "metrics": {"loss/l_q": 1.0 / s, "trade/capture_ratio": -1.0}}
             for s in (5, 10, 15)]  # fmt: skip
    lines.append({"step": 15, "metrics": {"eval/pnl": 12.0, "eval/capture_ratio": float("nan")}})
    (tmp_path / "diag.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    series = read_series(tmp_path / "diag.jsonl")
    assert series["loss/l_q"][0].tolist() == [5, 10, 15] and "eval/capture_ratio" not in series
    assert main([str(tmp_path)]) == 0
    assert plt.imread(tmp_path / "curves.png").shape[:2] == (360, 2000)  # 4 panels, 20 x 3.6 in


def test_the_curves_say_what_run_they_show(tmp_path) -> None:
    from alpha_rl.pipeline.life.labels import curves_title
    from tests.helpers import compose_train

    overrides = ["experiment=her_walk_forward", "market=file", "seed=3", "her='off'",
                 "market.path=/data/eurusd.csv", "market.fold=2"]  # fmt: skip
    cfg, choices = compose_train(overrides)
    title = "her-off, seed 3, market file eurusd.csv, fold 2, experiment her_walk_forward"
    assert curves_title(cfg, choices, tmp_path) == f"{title}  ({tmp_path})"
