"""Worker processes for a pack's host work.

A pack drives all its runs from one thread, so what a run does on the host runs one run after
another: a lone run's evaluation ledgers (pipeline/evaluate.py) cost ~0.2 s of NumPy each at the
reference scale, and a pack's runs evaluate together. `open_workers` gives a pack of more than
one run a pool of worker processes that compute the ledgers side by side while the pack's thread
goes on; a lone run computes them in its own thread, as before. A worker is started with `spawn`
(never `fork`: the parent holds a CUDA context and threads), imports no GPU code, and ignores
SIGINT and SIGTERM: a stop signal is the pack's to handle, and the pool is shut down with it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from concurrent.futures import Executor, ProcessPoolExecutor


def worker_count(runs: int, cpus: int | None = None) -> int:
    """Workers for a pack of `runs`: one per run, at most one fewer than the CPUs (the pack's
    own thread keeps one), at least one; none for a lone run."""
    if runs < 2:
        return 0
    cpus = cpus if cpus is not None else (os.cpu_count() or 2)
    return max(1, min(runs, cpus - 1))


def open_workers(runs: int) -> Executor | None:
    """A process pool for a pack of `runs` (None for a lone run); the caller shuts it down."""
    count = worker_count(runs)
    if count == 0:
        return None
    return ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_ignore_stop_signals)  # fmt: skip


def _ignore_stop_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
