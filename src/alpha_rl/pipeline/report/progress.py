"""Progress of a run: a one-line bar on a terminal, a log line every tenth of the run otherwise."""

from __future__ import annotations

import logging
import math
import sys
import time
from typing import TextIO

from alpha_rl.pipeline.report.summary import signed, versus_baselines
from alpha_rl.vocabulary import CAPTURE, L_Q, PNL, TRAIN_CAPTURE

log = logging.getLogger("alpha_rl")
WIDTH = 24


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


class Progress:
    """Steps done of `total`, steps/s, and the latest l_q and capture ratio."""

    def __init__(self, total: int, start: int = 0, stream: TextIO | None = None) -> None:
        self.total, self.start, self.done = total, start, start
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.t0 = time.perf_counter()
        self.l_q: float | None = None
        self.capture: float | None = None  # training: under exploration
        self.held_out: tuple[int, float, float, str] | None = None  # (step, pnl, capture,
        # the baselines this evaluation's net was above, of those logged, "2/4")
        self._next_log = start
        self._drawn = 0.0

    @property
    def steps_per_s(self) -> float:
        elapsed = time.perf_counter() - self.t0
        return (self.done - self.start) / elapsed if elapsed > 0 else 0.0

    def update(self, done: int, metrics: dict[str, float] | None = None) -> None:
        """Record `done` steps (and a log point's metrics); redraw at most ten times a second."""
        self.done = done
        if metrics:
            self.record(metrics, done)
        if self.tty:
            now = time.perf_counter()
            if now - self._drawn >= 0.1 or done == self.total:
                self._drawn = now
                self.stream.write("\r" + self.line())
                self.stream.flush()
        elif metrics and done >= self._next_log:
            log.info("%s", self.line())
            self._next_log = done + max(1, self.total // 10)

    def record(self, metrics: dict[str, float], at: int) -> None:
        """The figures of step `at`'s log point (a held one's, written after later steps), drawn
        at the next update."""
        self.l_q = metrics.get(L_Q, self.l_q)
        self.capture = metrics.get(TRAIN_CAPTURE, self.capture)
        if PNL in metrics:
            capture = metrics.get(CAPTURE, float("nan"))
            above, below = versus_baselines(metrics)
            versus = f"{len(above)}/{len(above) + len(below)}" if above or below else "-"
            self.held_out = (at, metrics[PNL], capture, versus)

    def line(self) -> str:
        """`step 1200/2000 [#####...] 850 steps/s  l_q 0.0123  train capture -1.9  held-out
        @1000: pnl +1,234 capture 0.41 above 2/4 baselines' net (these windows)  eta 1s`
        (training figures are under exploration; pnl net of costs; one evaluation of one run on
        its windows, no interval: a comparison, not a win)."""
        frac = self.done / self.total if self.total else 1.0
        bar = "#" * int(frac * WIDTH) + "." * (WIDTH - int(frac * WIDTH))
        sps = self.steps_per_s
        eta = (self.total - self.done) / sps if sps > 0 else float("nan")
        held = "held-out -"
        if self.held_out is not None:
            step, pnl, capture, versus = self.held_out
            held = (f"held-out@{step}: pnl {signed(pnl)} capture {_fmt(capture, '.3f')} "
                    f"above {versus} baselines' net (these windows)")  # fmt: skip
        return (
            f"step {self.done}/{self.total} [{bar}] {sps:7.1f} steps/s  "
            f"l_q {_fmt(self.l_q, '.4g')}  train capture {_fmt(self.capture, '.3f')}  "
            f"{held}  eta {_fmt(eta, '.0f')}s"
        )

    def close(self) -> None:
        """End the bar's line."""
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
