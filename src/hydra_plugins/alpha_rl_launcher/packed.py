"""`hydra/launcher=packed`: a multirun's jobs as packs of runs in one process (one CUDA context).

Each job is prepared as Hydra's basic launcher prepares it (its config, its output directory,
the .hydra/ files beside it), then the jobs that open the same backend (`backend.name` and
`backend.device`) are run as packs of at most `agents` runs
(alpha_rl.task.run_pack, alpha_rl.pipeline.life.run.run_jobs): every run keeps its own directory,
MLflow run, checkpoints and outcome, and is bit for bit the run it is alone.

With `processes: 1` the packs run one after another in this process. With `processes: P` each
backend's jobs are split into at least P packs of equal size (at most `agents` runs each), and P
packs run at a time, each in a process of its own (spawned; one CUDA context each, on the
configured `backend.device`). A pack's host work (the log points, the evaluations' reads, the
audits' reads, the tracker's sends) runs in one thread, run after run; P processes do it on P
cores, while each still steps its runs together on the device. A stop signal sent to this
process is passed on to every pack's process, which stops its runs with their checkpoints; a
pack's process that dies fails its own jobs, and the other packs go on.

With `mps: true` as well, the packs' processes share the GPU through CUDA MPS (one GPU context
for all, their kernels side by side rather than time-sliced): the launcher starts a control
daemon of the sweep's own for the packs that open a GPU, each pack checks that its context is
an MPS client before it runs, and the daemon is stopped when the last pack ends (docs/cluster.md
says what MPS costs: a fatal GPU fault in one pack ends the others).
"""

from __future__ import annotations

import copy
import logging
import math
import multiprocessing
import os
import pickle
import signal
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from itertools import zip_longest
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus, configure_log, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from hydra_plugins.alpha_rl_launcher.mps import backend_of, mps_control, mps_daemon, require_mps

log = logging.getLogger("alpha_rl")


class PackedLauncher(Launcher):
    """Runs a multirun's jobs `agents` at a time, each group as one process's pack."""

    def __init__(self, agents: int = 20, processes: int = 1, mps: bool = False) -> None:
        from alpha_rl.errors import ConfigError

        for key, value, what in (("agents", agents, "the most runs one pack holds"),
                                 ("processes", processes, "how many packs run at a time, each "
                                  "in a process of its own")):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"hydra.launcher.{key}={value!r}: {what}; a whole number >= 1")
        if not isinstance(mps, bool):
            raise ConfigError(f"hydra.launcher.mps={mps!r}: true or false (share the GPU between "
                              "the packs' processes through CUDA MPS)")  # fmt: skip
        if mps and processes == 1:
            raise ConfigError("hydra.launcher.mps=true shares the GPU between packs run at once, "
                              "each in a process of its own: set hydra.launcher.processes >= 2 "
                              "too")  # fmt: skip
        if mps:
            mps_control()  # refused now, not after every job is composed
        self.agents, self.processes, self.mps = agents, processes, mps
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:  # fmt: skip
        self.config, self.hydra_context = config, hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:  # fmt: skip
        from alpha_rl.pipeline.step.lockstep import group_key
        from alpha_rl.task import job_of, run_pack

        assert self.config is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        returns: list[JobReturn] = []
        ready: list[tuple[int, DictConfig, Any]] = []  # (index in returns, cfg, Job)

        def prepare(cfg: DictConfig) -> None:
            ready.append((len(returns), copy.deepcopy(cfg), job_of(HydraConfig.get())))

        for offset, overrides in enumerate(job_overrides):
            idx = initial_job_idx + offset
            sweep_config = self.hydra_context.config_loader.load_sweep_config(
                self.config, list(overrides)
            )
            with open_dict(sweep_config):
                sweep_config.hydra.job.id = sweep_config.hydra.job.num = idx
            returns.append(run_job(hydra_context=self.hydra_context, task_function=prepare,
                                   config=sweep_config, job_dir_key="hydra.sweep.dir",
                                   job_subdir_key="hydra.sweep.subdir"))  # fmt: skip
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        packs = split(ready, self.agents, self.processes)
        apart = f", {self.processes} at a time" if self.processes > 1 else ""
        log.info("%d jobs in %d pack(s) of at most %d runs%s", len(ready), len(packs),
                 self.agents, apart)  # fmt: skip
        for number, pack in enumerate(packs, 1):
            sizes = Counter(group_key(cfg) for _, cfg, _ in pack).values()
            log.info("pack %d of %d: %d runs in %d group(s) of agents launched together (%s): %s",
                     number, len(packs), len(pack), len(sizes), ", ".join(map(str, sizes)),
                     ", ".join(str(job.output_dir) for _, _, job in pack))  # fmt: skip
        if self.processes == 1:
            for pack in packs:
                settle(returns, pack, run_pack([(cfg, job) for _, cfg, job in pack]))
        else:
            cpus = max(1, len(os.sched_getaffinity(0)) // self.processes)
            logging_cfg = (self.config.hydra.hydra_logging, self.config.hydra.verbose)
            gpu = any(backend_of(cfg)[0] != "numpy" for _, cfg, _ in ready)
            if self.mps and not gpu:
                log.info("hydra.launcher.mps=true: no pack opens a GPU (backend=numpy): no MPS")
            with ExitStack() as daemon:
                try:
                    daemon.enter_context(mps_daemon(Path(str(self.config.hydra.sweep.dir)) / "mps",
                                                    self.mps and gpu))  # fmt: skip
                except RuntimeError as exc:  # it did not start: one line, no traceback
                    raise SystemExit(f"alpha-rl-train: {exc}") from None
                stopped = run_apart(packs, self.processes, cpus, logging_cfg, returns,
                                    self.mps)  # fmt: skip
            if stopped is not None:
                raise SystemExit(stopped)
        return returns


def split(ready: list, agents: int, processes: int) -> list[list]:
    """`ready` (index, cfg, Job) as packs: jobs that share a process share its backend, so packs
    never mix backends; each backend's jobs in packs of at most `agents`, and in at least
    `processes` packs of equal size where there are jobs enough, the jobs of one shape
    (lockstep.group_key: agents of one launch) side by side. The backends' packs take turns in
    the order (one device's packs never wait for all of another's)."""
    from alpha_rl.pipeline.step.lockstep import group_key

    by_backend = []
    for key in dict.fromkeys(backend_of(cfg) for _, cfg, _ in ready):
        same = [entry for entry in ready if backend_of(entry[1]) == key]
        shapes = {id(entry): group_key(entry[1]) for entry in same}
        order = list(dict.fromkeys(shapes.values()))
        same.sort(key=lambda entry: order.index(shapes[id(entry)]))  # stable: sweep order kept
        size = min(agents, math.ceil(len(same) / processes))
        by_backend.append([same[i : i + size] for i in range(0, len(same), size)])
    return [pack for turn in zip_longest(*by_backend) for pack in turn if pack is not None]


def settle(returns: list[JobReturn], pack: list, values: Sequence[Any]) -> None:
    """Each job's value (its objective, or the error that fails it) into its JobReturn."""
    for (i, _, _), value in zip(pack, values, strict=True):
        returns[i].return_value = value
        failed = isinstance(value, BaseException)
        returns[i].status = JobStatus.FAILED if failed else JobStatus.COMPLETED


def run_apart(packs: list[list], processes: int, cpus: int, logging_cfg: tuple,
              returns: list[JobReturn], mps: bool = False) -> int | None:  # fmt: skip
    """Run `packs`, `processes` at a time, each in a spawned process of its own (its helpers on
    `cpus` CPUs; `mps`: each checks that its GPU context is an MPS client), settling each job's
    return as its pack ends. A stop signal here is passed on to every pack's process and no pack
    starts after it; once all have ended, the exit status of the stop (130, 143) is returned
    (None: no stop)."""
    spawn = multiprocessing.get_context("spawn")
    waiting, running = list(packs), {}  # Connection -> (process, pack)
    exits: list[int] = []
    stops = Stops(lambda: [process for process, _ in running.values()])
    with stops:
        while waiting or running:
            while waiting and len(running) < processes and not stops.signums:
                pack = waiting.pop(0)
                here, there = spawn.Pipe(duplex=False)
                process = spawn.Process(target=pack_apart, name=f"pack-{len(packs) - len(waiting)}",
                                        args=([(cfg, job) for _, cfg, job in pack], cpus,
                                              logging_cfg, os.getpid(), there, mps))  # fmt: skip
                with stops.held():  # the process starts with them blocked: its runs take them
                    process.start()
                    running[here] = (process, pack)
                there.close()
                log.info("%s started (pid %d)", process.name, process.pid)
            if not running:
                break  # a stop: the packs not started stay so
            for conn in wait(list(running)):
                process, pack = running.pop(conn)  # type: ignore[index]
                values, exit_code = received(conn, process, len(pack))
                process.join()
                settle(returns, pack, values)
                if exit_code is not None:
                    exits.append(exit_code)
    for _, _, job in (entry for pack in waiting for entry in pack):
        log.warning("not started (the sweep was stopped): %s", job.output_dir)
    if exits:
        return exits[0]
    return 128 + stops.signums[0] if stops.signums else None


def received(conn: Connection, process: Any, jobs: int) -> tuple[list, int | None]:
    """What a pack's process sent: its jobs' values and the exit status a stop asked for; a
    process that died before sending fails each of its jobs, naming its exit code."""
    try:
        values, exit_code = conn.recv()
    except (EOFError, OSError):
        process.join()
        died = RuntimeError(f"the pack's process ({process.name}, pid {process.pid}) ended with "
                            f"exit code {process.exitcode} before reporting its runs")  # fmt: skip
        log.error("%s", died)
        return [died] * jobs, None
    finally:
        conn.close()
    return values, exit_code


class Stops:
    """While inside, SIGINT and SIGTERM sent to this process are recorded and passed on to each
    live pack's process (they run in process groups of their own: a terminal's Ctrl-C reaches
    only this one), which stops as a run does: its step, its checkpoint, then its exit status."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, processes: Callable[[], list]) -> None:
        self.processes = processes
        self.signums: list[int] = []  # those received, in order
        self._kept: dict[int, Any] = {}

    def __enter__(self) -> Stops:
        self._kept = {signum: signal.signal(signum, self._forward) for signum in self.SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._kept.items():
            signal.signal(signum, handler)

    @contextmanager
    def held(self) -> Iterator[None]:
        """Inside, the signals wait (blocked), so that a process started here inherits them
        blocked, and one that comes meanwhile is passed on to it too once it is running."""
        signal.pthread_sigmask(signal.SIG_BLOCK, self.SIGNALS)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, self.SIGNALS)

    def _forward(self, signum: int, _frame: Any) -> None:
        self.signums.append(signum)
        log.warning("%s: passed on to every pack's process; no other pack starts",
                    signal.Signals(signum).name)  # fmt: skip
        for process in self.processes():
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signum)


def pack_apart(jobs: list, cpus: int, logging_cfg: tuple, launcher: int,
               conn: Connection, mps: bool = False) -> None:  # fmt: skip
    """A pack's process: its jobs run as one pack (alpha_rl.task.run_pack), their values sent
    back (an error that cannot be pickled as its type, name and message) with the exit status a
    stop signal asked for (None: none did); with `mps`, only once its GPU context is known to be
    an MPS client (require_mps). SIGINT and SIGTERM come blocked from the launcher
    (Stops.held) until the pack's runs take them (pipeline/life/stop.py, StopSignals)."""
    os.setpgrp()  # a terminal's Ctrl-C goes to the launcher, which passes it on once
    stop_with(launcher)
    configure_log(*logging_cfg)
    exit_code = None
    try:
        from alpha_rl.task import run_pack

        if mps:
            require_mps(jobs)
        values = run_pack(jobs, cpus)
    except SystemExit as stop:  # a stop signal: the runs are checkpointed and ended
        exit_code = stop.code if isinstance(stop.code, int) else 1
        values = [RuntimeError(f"stopped (exit status {exit_code})")] * len(jobs)
    except BaseException as exc:  # the pack's own error (its runs' are values): each job's
        log.exception("the pack of %s failed", ", ".join(str(job.output_dir) for _, job in jobs))
        values = [exc] * len(jobs)
    try:
        conn.send(([sendable(v) for v in values], exit_code))
    except OSError as exc:  # the launcher is gone
        log.error("could not report the pack's runs to the launcher: %s", exc)
    conn.close()


def stop_with(launcher: int) -> None:
    """Have this process's runs stopped (one SIGTERM: their step, their checkpoint) when
    `launcher`, its parent, dies (a kill -9, a closed terminal's SIGHUP), rather than train on
    with nobody to report to. Linux sends the parent-death signal (PR_SET_PDEATHSIG) once per
    thread of the dying parent as it reparents the child to the next, so SIGHUP is asked for
    and its first arrival becomes the one SIGTERM. Elsewhere the runs train on."""
    if sys.platform.startswith("linux"):
        import ctypes

        signal.signal(signal.SIGHUP, _launcher_gone)
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGHUP))  # PR_SET_PDEATHSIG
    if os.getppid() != launcher:  # it died before that
        _launcher_gone(int(signal.SIGHUP), None)


_gone: list[bool] = []  # the launcher died (its first parent-death signal came)


def _launcher_gone(_signum: int, _frame: Any) -> None:
    if not _gone:
        _gone.append(True)
        log.warning("the launcher is gone: this pack's runs stop")
        os.kill(os.getpid(), signal.SIGTERM)


def sendable(value: Any) -> Any:
    """`value`, or an error that cannot cross a pipe as a RuntimeError naming it."""
    if not isinstance(value, BaseException):
        return value
    try:
        pickle.loads(pickle.dumps(value))
    except Exception:
        return RuntimeError(f"{type(value).__name__}: {value}")
    return value
