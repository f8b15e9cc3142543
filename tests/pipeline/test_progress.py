"""The progress display: a redrawn bar on a terminal, a log line per tenth of the run otherwise."""

from __future__ import annotations

import io
import logging

from alpha_rl.pipeline.progress import Progress


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
    assert "l_q 0.125" in last and "capture 0.500" in last and "steps/s" in last
    assert last.endswith("\n")


def test_without_a_terminal_a_line_is_logged_per_tenth(caplog) -> None:
    log = io.StringIO()
    bar = Progress(100, stream=log)
    with caplog.at_level(logging.INFO, logger="alpha_rl"):
        for step in range(1, 101):
            bar.update(step, {"loss/l_q": 1.0} if step % 5 == 0 else None)
    assert log.getvalue() == ""
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 10 and lines[0].startswith("step 5/100") and "l_q 1" in lines[0]
