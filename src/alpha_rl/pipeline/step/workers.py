"""Helpers for a pack's host work.

A pack drives all its runs from one thread, so what a run does on the host runs one run after
another: a lone run's evaluation ledgers (pipeline/evaluation/evaluate.py) cost ~0.2 s of NumPy
each at the reference scale, an audit's oracles and comparisons (kernels/audit.py) more, and a
pack's runs evaluate and audit at the same steps. `open_workers` gives a pack of more than one run
- worker processes (`processes`) for the evaluations' ledgers and the end-of-run plots, and
- a thread pool (`threads`) for the audits' oracles and comparisons, whose arrays (the replay
  among them) are too large to send to a process; their NumPy work releases the GIL,
while the pack's thread goes on stepping the runs that are not waiting on them (a run whose
evaluation's ledgers are being computed steps on, its log point held: pipeline/life/record.py's
Point). A lone run does this work in its own thread, as before. A worker process is started
with `spawn` (never `fork`: the parent holds a CUDA context and threads), imports no GPU code,
and ignores SIGINT and SIGTERM: a stop signal is the pack's to handle, and the pools are shut
down with it.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
from collections.abc import Callable
from concurrent.futures import (
    BrokenExecutor,
    Executor,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
)
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("alpha_rl")


@dataclass(frozen=True)
class Workers:
    """A pack's pools (see the module docstring)."""

    processes: ProcessPoolExecutor
    threads: ThreadPoolExecutor

    def shutdown(self) -> None:
        """Stop both pools, dropping work not yet started."""
        self.processes.shutdown(cancel_futures=True)
        self.threads.shutdown(cancel_futures=True)


def worker_count(runs: int, cpus: int | None = None) -> int:
    """Workers for a pack of `runs`: one per run, at most one fewer than the CPUs this process
    may run on (the pack's own thread keeps one), at least one; none for a lone run."""
    if runs < 2:
        return 0
    cpus = cpus if cpus is not None else len(os.sched_getaffinity(0))  # a job's allotment
    return max(1, min(runs, cpus - 1))


def open_workers(runs: int, cpus: int | None = None) -> Workers | None:
    """The pools of a pack of `runs` (None for a lone run) on `cpus` CPUs (default: all this
    process may use; a pack beside others gets its share); the caller shuts them down."""
    count = worker_count(runs, cpus)
    if count == 0:
        return None
    processes = ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("spawn"),
                                    initializer=_ignore_stop_signals)  # fmt: skip
    return Workers(processes, ThreadPoolExecutor(count, thread_name_prefix="audit"))


def submitted(pool: Executor | None, fn: Callable[..., Any], *args: Any) -> Future:
    """`fn(*args)` in `pool`, or here when there is none or it is broken (a worker process
    that died: the pack's runs go on without it); its result or error in the future."""
    if pool is not None:
        try:
            return pool.submit(fn, *args)
        except (BrokenExecutor, RuntimeError) as exc:  # RuntimeError: shut down
            log.warning("a pack's helper pool cannot take work (%s): computing here", exc)
    done: Future = Future()
    try:
        done.set_result(fn(*args))
    except Exception as exc:
        done.set_exception(exc)
    return done


def outcome(done: Future, fn: Callable[..., Any], *args: Any) -> Any:
    """The result of `done`, `fn(*args)`'s; computed here again when its worker died."""
    try:
        return done.result()
    except BrokenExecutor as exc:
        log.warning("a pack's helper died (%s): computing its work here", exc)
        return fn(*args)


def _ignore_stop_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
