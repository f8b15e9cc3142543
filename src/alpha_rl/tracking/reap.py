"""Dead runs: RUNNING in the store although their process died (OOM, SIGKILL, a lost node).

A job killed before it could finish leaves its run RUNNING for ever. Each training run tags where
it runs (`alpha_rl.host`, `alpha_rl.pid`, `alpha_rl.run_dir`) and how to resume it
(`alpha_rl.resume_command`), and logs the metric `sys/heartbeat` (unix time in seconds) at every
log point. `find_dead` lists the RUNNING runs whose last heartbeat is older
than a threshold; `mark_dead` ends them FAILED, the reason in the `alpha_rl.failure_reason` tag.

The last heartbeat is the value MLflow keeps as the latest of `sys/heartbeat` (the one at its
largest step), read with the run itself, no request per run. A run of an older version, without
that metric, counts from its start time. Parent runs of sweeps (tagged `alpha_rl.sweep_dir`) log
no heartbeat of their own and end with their sweep: they are skipped, whatever their age.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from alpha_rl.tracking.delivery import RUN_DIR_TAG
from alpha_rl.tracking.parent import SWEEP_TAG
from alpha_rl.tracking.reader import PAGE, RunReader
from alpha_rl.tracking.tracker import REASON_TAG

HEARTBEAT = "sys/heartbeat"  # metric: unix time in seconds, at every log point
HOST_TAG = "alpha_rl.host"  # socket.gethostname() of the training process
PID_TAG = "alpha_rl.pid"  # its process id
RESUME_TAG = "alpha_rl.resume_command"  # the shell command that resumes the run
FROM_HEARTBEAT, FROM_START = "heartbeat", "start time"  # DeadRun.source
RUNNING = "attributes.status = 'RUNNING'"
REMEDY = "give --uri (or MLFLOW_TRACKING_URI) of an existing MLflow store"
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([smhd])")


@dataclass(frozen=True)
class DeadRun:
    """A RUNNING run whose process stopped sending heartbeats (tags it lacks are None)."""

    run_id: str
    run_name: str
    experiment: str
    host: str | None
    pid: str | None
    run_dir: str | None
    last_heartbeat: float  # unix seconds
    source: str  # FROM_HEARTBEAT, or FROM_START for a run that never logged one
    resume_command: str | None

    @property
    def reason(self) -> str:
        """The failure reason mark_dead tags the run with."""
        since = datetime.fromtimestamp(self.last_heartbeat, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        text = f"no heartbeat since {since} (host {self.host or '?'}, pid {self.pid or '?'})"
        return text if self.source == FROM_HEARTBEAT else text + "; none logged: its start time"


def parse_duration(text: str) -> float:
    """Seconds of a duration such as 90s, 10m, 2h, 1d (ValueError saying what is accepted)."""
    match = _DURATION.fullmatch(text.strip())
    seconds = float(match[1]) * UNITS[match[2]] if match else 0.0
    if seconds <= 0:
        raise ValueError(
            f"{text!r} is not a duration: give a positive number with a unit s, m, h or d "
            "(90s, 10m, 2h, 1d)"
        )
    return seconds


def format_duration(seconds: float) -> str:
    """A duration in its two largest units, a zero second one left out: 45s, 9m30s, 1h, 3d02h."""
    whole = max(int(seconds), 0)
    for unit, smaller in (("d", "h"), ("h", "m"), ("m", "s")):
        if whole >= UNITS[unit]:
            count, rest = divmod(whole, UNITS[unit])
            rest //= UNITS[smaller]
            return f"{count}{unit}" + (f"{rest:02d}{smaller}" if rest else "")
    return f"{whole}s"


def describe(run: DeadRun, now: float) -> str:
    """One line about a dead run: id, name, experiment, host, pid, silence, run dir, resume."""
    silence = format_duration(now - run.last_heartbeat)
    if run.source == FROM_HEARTBEAT:
        since = f"no heartbeat for {silence}"
    else:
        since = f"no heartbeat logged, started {silence} ago"
    return (
        f"{run.run_id} {run.run_name!r} (experiment {run.experiment!r}) on host "
        f"{run.host or '?'} pid {run.pid or '?'}: {since}; run dir {run.run_dir or '?'}; "
        f"resume: {run.resume_command or '?'}"
    )


def find_dead(
    uri: str, older_than_s: float, experiment: str | None = None, now: float | None = None
) -> list[DeadRun]:
    """The RUNNING runs of the store (or of one experiment) silent for over older_than_s seconds,
    the longest silent first; sweep parent runs are skipped. TrackingReadError if unreadable."""
    now = time.time() if now is None else now
    store = _Store(uri)
    names = store.experiment_names(experiment)
    dead = []
    for run in store.running(list(names)):
        last, source = last_heartbeat(run)
        if SWEEP_TAG not in run.data.tags and now - last > older_than_s:
            dead.append(_dead_run(run, names[run.info.experiment_id], last, source))
    return sorted(dead, key=lambda d: d.last_heartbeat)


def mark_dead(uri: str, runs: list[DeadRun]) -> None:
    """End each run FAILED, at its last heartbeat (the UI's duration is then how long it was
    alive), tagged with the reason and, when known, the command that resumes it."""
    store = _Store(uri)
    for run in runs:
        tags = {REASON_TAG: run.reason}
        if run.resume_command:
            tags[RESUME_TAG] = run.resume_command
        store.set_tags(run.run_id, tags)
        store.end_failed(run.run_id, int(run.last_heartbeat * 1000))


def last_heartbeat(run: Any) -> tuple[float, str]:
    """(unix seconds, FROM_HEARTBEAT or FROM_START) of an MLflow run's last sign of life."""
    beat = run.data.metrics.get(HEARTBEAT)
    if beat is not None and math.isfinite(beat):
        return float(beat), FROM_HEARTBEAT
    return (run.info.start_time or 0) / 1000, FROM_START


def _dead_run(run: Any, experiment: str, last: float, source: str) -> DeadRun:
    tags = run.data.tags
    return DeadRun(
        run_id=run.info.run_id,
        run_name=run.info.run_name or run.info.run_id,
        experiment=experiment,
        host=tags.get(HOST_TAG),
        pid=tags.get(PID_TAG),
        run_dir=tags.get(RUN_DIR_TAG),
        last_heartbeat=last,
        source=source,
        resume_command=tags.get(RESUME_TAG),
    )


class _Store(RunReader):
    """A RunReader that also lists experiments and RUNNING runs, and ends runs; a store it
    cannot read is refused (never created) in one line."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri, REMEDY)

    def experiment_names(self, experiment: str | None) -> dict[str, str]:
        """{id: name} of the named experiment, or of every active one."""
        if experiment is not None:
            return {self.experiment_id(experiment): experiment}
        names, token = {}, None
        while True:
            page = self._call(
                "list experiments",
                lambda t=token: self.client.search_experiments(max_results=PAGE, page_token=t),
            )
            names |= {e.experiment_id: e.name for e in page}
            token = page.token
            if not token:
                return names

    def running(self, experiment_ids: list[str]) -> list[Any]:
        """The RUNNING runs (mlflow Run objects) of these experiments."""
        found, token = [], None
        while experiment_ids:
            page = self._call(
                "search runs",
                lambda t=token: self.client.search_runs(
                    experiment_ids, filter_string=RUNNING, max_results=PAGE, page_token=t
                ),
            )
            found.extend(page)
            token = page.token
            if not token:
                break
        return found

    def end_failed(self, run_id: str, end_ms: int) -> None:
        """Set a run FAILED, ended at end_ms."""
        end = self.client.set_terminated
        self._call(f"end run {run_id}", lambda: end(run_id, "FAILED", end_time=end_ms))
