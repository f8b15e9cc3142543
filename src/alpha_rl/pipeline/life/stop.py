"""A graceful stop on SIGTERM (what SLURM and `kill` send) and SIGINT (Ctrl-C).

Inside `StopSignals()` the first of them only asks the loop to stop: the step in progress
finishes, the run checkpoints at that step, flushes its metrics and ends KILLED with the command
that resumes it, and the process exits 128 + the signal's number (143, 130) without a traceback.
A second signal stops at once: SIGINT raises StoppedAtOnce (a KeyboardInterrupt), SIGTERM takes
its default action; the last checkpoint written stays valid either way (checkpoints are renamed
into place whole).
Outside the main thread (where Python cannot install handlers) signals keep their defaults.

Under submitit (hydra/launcher=slurm or submitit_local), whose SIGUSR2 handler requeues a job
that times out or is preempted, `requeue=True` takes SIGUSR2 too: the run checkpoints at the end
of its step, its MLflow run stays open, and then submitit's own handler is called (`requeue()`),
which resubmits the job; the restarted job finds the checkpoint in its output directory and
continues the same run (pipeline/life/run.py). SLURM itself requeues with SIGTERM (`scontrol
requeue`, a preemption that requeues, a node that failed): a SIGTERM under submitit on SLURM asks
slurmctld whether this job is being requeued (its restart count is past this attempt's) and, if
so, is a requeue too, one that SLURM has already made; otherwise (scancel) it stops the run as
anywhere else. A SIGTERM that follows a requeue is SLURM ending this attempt: the checkpoint is
written, the process is on its way out, and KillWait's SIGKILL comes if it is not.

Before that, through the start-up (imports, Hydra composing the config), `sigint_held()` only
records a SIGINT, and `sigint_raised()` (the task) raises it as KeyboardInterrupt where nothing is
left half done: raised inside an import or inside Hydra, it would not end the process cleanly.
OmegaConf's clean-up of a node it was building when interrupted raises another error instead,
which Hydra reports as a config error (exit 1) or, composing in `Hydra.get_mode`, swallows, so the
run went on to the end; and one raised inside `exec` (dataclasses build their methods so, at
import) makes CPython end `python -m` by SIGINT whatever exit status was asked for.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

log = logging.getLogger("alpha_rl")

SIGNALS = (signal.SIGTERM, signal.SIGINT)
REQUEUE = signal.SIGUSR2  # submitit's timeout / preemption signal


class StoppedAtOnce(KeyboardInterrupt):
    """A second SIGINT inside StopSignals: the run stops where it is (the task says so); a
    KeyboardInterrupt of any other kind is a Ctrl-C outside the run's loop (train.py's line)."""


class StopSignals:
    """Context manager: records the first SIGTERM/SIGINT instead of dying of it."""

    def __init__(self, requeue: bool = False) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}
        self._requeue = requeue  # False: SIGUSR2 stops the run like SIGTERM, without a requeue
        self._submitit: Any = None  # submitit's SIGUSR2 handler, called by requeue()
        self._slurm_requeues: bool | None = None  # SIGTERM: asked of slurmctld once

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    @property
    def requeued(self) -> bool:
        """Whether the cluster asked for a requeue (SIGUSR2 under submitit, checkpoint.requeue),
        or requeues the job itself (a SIGTERM of SLURM's requeue)."""
        if not self._requeue:
            return False
        if self.signum == signal.SIGTERM and under_submitit():
            if self._slurm_requeues is None:
                self._slurm_requeues = slurm_requeues_this_job()
            return self._slurm_requeues
        return self.signum == REQUEUE

    def requeue(self) -> None:
        """Hand the job to submitit's own handler, which resubmits it and exits (SystemExit),
        or raises when the job may not be requeued again (max_num_timeout). A job that SLURM
        requeues already (SIGTERM) only exits: submitit waits for its next attempt."""
        if self.signum == signal.SIGTERM:
            log.warning("SLURM requeues this job: the next attempt continues this run from its "
                        "checkpoint")  # fmt: skip
            raise SystemExit(self.exit_status)
        self._submitit(REQUEUE, None)

    def requeue_or_end(self, tracker: Any, reason: str | None) -> tuple[str, str]:
        """Leave the run's MLflow run open (`tracker`'s) and let submitit resubmit the job (it
        exits the process); when it may not (timed out max_num_timeout times), the run ends
        KILLED: (status, reason)."""
        try:
            self.requeue()
        except SystemExit:
            tracker.suspend()
            raise
        except Exception as exc:  # submitit's UncompletedJobError: no requeue left
            log.error("the job is not requeued again (%s); resume it by hand", exc)
            return "KILLED", f"{reason}, not requeued: {exc}"
        return "KILLED", f"{reason}, not requeued"

    @property
    def exit_status(self) -> int:
        """The shell's status for death by this signal: 128 + its number."""
        return 128 + int(self.signum or 0)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
            if under_submitit():
                self._submitit = self._previous[REQUEUE] = signal.signal(REQUEUE, self._handle)
            # a process started with them blocked (a pack's process: its launcher holds them
            # through the start) takes them from here, one that came meanwhile at once
            signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signum == REQUEUE and self._requeue and signum == signal.SIGTERM:
            log.info("SIGTERM after the requeue: SLURM ends this attempt of the job")
            return
        if self.signum is not None:  # the second: stop now
            self._restore()
            log.warning("%s again: stopping at once (the last checkpoint stays valid)",
                        signal.Signals(signum).name)  # fmt: skip
            if signum == signal.SIGINT:
                raise StoppedAtOnce
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.signum = signum
        if self.requeued and signum == REQUEUE:
            log.warning("SIGUSR2 from the cluster (a time limit or preemption): a checkpoint "
                        "after the current step, then the job is requeued and continues "
                        "this run")  # fmt: skip
            return
        if self.requeued:
            log.warning("SIGTERM: SLURM requeues this job (a preemption, scontrol requeue): a "
                        "checkpoint after the current step, then the next attempt continues "
                        "this run")  # fmt: skip
            return
        log.warning("%s: stopping after the current step (a checkpoint at that step, then exit); "
                    "send it again to stop at once", self.name)  # fmt: skip


_sigint_held = False  # a SIGINT came inside sigint_held() and was not raised yet


@contextlib.contextmanager
def sigint_held() -> Iterator[None]:
    """Inside: a SIGINT is recorded, not raised; on leaving, one recorded is raised as
    KeyboardInterrupt. Installed whatever SIGINT's inherited disposition (a background job's is
    SIG_IGN), as StopSignals' handler is: the run takes Ctrl-C from its first moment to its last."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _raise_held()


@contextlib.contextmanager
def sigint_raised() -> Iterator[None]:
    """Inside sigint_held(): SIGINT raises KeyboardInterrupt at once again, and one that came
    while held is raised on entering."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _raise_held()
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _hold(signum: int, frame: FrameType | None) -> None:
    global _sigint_held
    _sigint_held = True


def _raise_held() -> None:
    global _sigint_held
    if _sigint_held:
        _sigint_held = False
        raise KeyboardInterrupt


def slurm_requeues_this_job() -> bool:
    """Whether SLURM is requeueing this job: the restart count slurmctld holds for it is past
    this attempt's (SLURM_RESTART_COUNT, absent on the first), as it is from the moment
    `scontrol requeue`, a requeueing preemption or a failed node sends SIGTERM; scancel leaves it
    as it was. False outside SLURM and, with a warning, when slurmctld does not answer."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return False
    try:
        shown = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True,
                               text=True, timeout=10)  # fmt: skip
        restarts = re.search(r"\bRestarts=(\d+)", shown.stdout)
        if shown.returncode or restarts is None:
            raise OSError(shown.stderr.strip() or f"no Restarts= in {shown.stdout[:200]!r}")
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning("cannot ask SLURM whether job %s is being requeued (%s): the run ends as "
                    "stopped", job, exc)  # fmt: skip
        return False
    return int(restarts.group(1)) > int(os.environ.get("SLURM_RESTART_COUNT") or 0)


def under_submitit() -> bool:
    """Whether this process is a job that submitit started (it sets SUBMITIT_EXECUTOR)."""
    return bool(os.environ.get("SUBMITIT_EXECUTOR"))
