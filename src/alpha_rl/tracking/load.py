"""`python -m alpha_rl.tracking load`: many jobs logging into one store at once, every value
checked afterwards. For sizing a tracking server before a cluster's jobs are pointed at it.

Each writer is its own process with its own Tracker (the jobs' own code path: diag.jsonl, batches
of `tracking.batch_size`, retries, unsent.jsonl), nested under one parent run, logging
`--keys` metrics at each of `--steps` steps. While they write, a reader reads the parent's runs
with every metric history the way the kill check does (`RunReader.runs`), again and again.
Afterwards every run must be FINISHED with each step of each key exactly once and the values
written, and no writer may have left an unsent.jsonl.

Reported: values/s over the writing (from the moment every writer holds its run to the last
finish), the latency of a batch as a job sees it (the log_point call that sends it: p50, p99,
max), and the reader's passes. Writers are forked from a server process that imported MLflow
once, so 64 of them start in seconds on a small machine.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from alpha_rl import paths
from alpha_rl.errors import ConfigError
from alpha_rl.tracking.config import TrackingConfig, store_of
from alpha_rl.tracking.reader import RunReader, TrackingReadError
from alpha_rl.tracking.store import (
    Store,
    StoreDown,
    mlflow_client_class,
    resolve_uri,
    set_http_limits,
)
from alpha_rl.tracking.stores import failure
from alpha_rl.vocabulary import CAPTURE, L_Q, PNL

# the metrics a writer logs at each step, named as a training run names its own
KEYS = (L_Q, "loss/td_abs", "her/inject_count_step", "trade/position_abs",
        "trade/pnl_step", "audit/ratio", PNL, CAPTURE)  # fmt: skip
EXPERIMENT = "alpha_rl_load"
UNSENT_GLOB = "unsent*.jsonl"
VERIFY_THREADS = 8  # requests at once while reading every history back


def value(writer: int, key: int, step: int) -> float:
    """The value writer `writer` logs for key `key` at `step` (each distinct, exact in float64)."""
    return writer * 16.0 + key + 1.0 / (step + 1)


@dataclass(frozen=True)
class LoadSpec:
    """What to run: `writers` processes x `steps` steps x `keys` metrics into `uri`."""

    uri: str
    root: Path  # the writers' run directories go here
    writers: int = 64
    steps: int = 5000
    keys: int = 4
    experiment: str = EXPERIMENT
    read: bool = True  # the kill check's read, over and over while they write
    timeout_s: float = 1800.0

    @property
    def values(self) -> int:
        return self.writers * self.steps * self.keys


@dataclass
class LoadReport:
    """What a load run measured (seconds; latencies of single-batch sends)."""

    uri: str
    writers: int
    steps: int
    keys: int
    batch_size: int
    parent: str
    run_ids: list[str]
    seconds: float  # from every writer holding its run to the last finish()
    values: int
    values_per_s: float
    batch_p50_s: float
    batch_p99_s: float
    batch_max_s: float
    batches: int
    resend_calls: int  # log_point or finish() calls that sent a backlog (after an outage)
    longest_call_s: float
    reads: int
    read_p99_s: float
    read_errors: list[str] = field(default_factory=list)
    read_regressions: list[str] = field(default_factory=list)  # a count that went down
    problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """A short human summary."""
        out = [
            f"{self.writers} writers x {self.steps} steps x {self.keys} metrics = "
            f"{self.values:,} values into {self.uri} in {self.seconds:.1f} s: "
            f"{self.values_per_s:,.0f} values/s",
            f"a batch of {self.batch_size} (the log_point that sends it): p50 "
            f"{self.batch_p50_s * 1e3:.0f} ms, p99 {self.batch_p99_s * 1e3:.0f} ms, max "
            f"{self.batch_max_s * 1e3:.0f} ms over {self.batches} batches",
        ]
        if self.resend_calls:
            out.append(f"{self.resend_calls} log_point / finish calls sent a backlog of more "
                       f"than one batch (after an outage); the longest took "
                       f"{self.longest_call_s:.1f} s")  # fmt: skip
        if self.reads:
            out.append(f"the kill check's read ran {self.reads} times while they wrote (p99 "
                       f"{self.read_p99_s:.2f} s), {len(self.read_errors)} failed")  # fmt: skip
        out += [f"PROBLEM: {p}" for p in self.problems]
        out.append(f"{len(self.problems)} problem(s)" if self.problems else "every value arrived")
        return out


def tracking_config(uri: str, experiment: str = EXPERIMENT) -> TrackingConfig:
    """The jobs' own tracking config for `uri`: conf/tracking/server.yaml for a server, else
    local.yaml; retries every second, waiting up to 5 minutes at the end."""
    conf = paths.conf_dir() / "tracking"
    node = OmegaConf.load(conf / "local.yaml")
    if store_of(uri) == "server":
        server = OmegaConf.load(conf / "server.yaml")
        server.pop("defaults", None)
        server.pop("uri", None)
        node = OmegaConf.merge(node, server)
    node.uri, node.experiment, node.retry_s, node.final_retry_s = uri, experiment, 1.0, 300.0
    node.system_metrics = False
    return TrackingConfig.from_cfg(node)


def _writer(spec: LoadSpec, j: int, parent: str, gate: tuple[Any, Any], sent: Any,
            results: Any) -> None:  # fmt: skip
    from alpha_rl.tracking.tracker import open_tracker

    ready, go = gate
    cfg = tracking_config(spec.uri, spec.experiment)
    tracker = open_tracker(cfg, spec.root / f"writer{j:03d}", run_name=f"load-{j:03d}",
                           parent_run_id=parent)  # fmt: skip
    keys = KEYS[: spec.keys]
    with ready.get_lock():
        ready.value += 1
    go.wait()
    began, calls, counted = time.perf_counter(), [], 0
    for step in range(spec.steps):
        before, t = tracker.sent_metrics, time.perf_counter()
        tracker.log_point(step, {k: value(j, i, step) for i, k in enumerate(keys)})
        if tracker.sent_metrics != before:
            calls.append((time.perf_counter() - t, tracker.sent_metrics - before))
            with sent.get_lock():
                sent.value += tracker.sent_metrics - counted
            counted = tracker.sent_metrics
    t = time.perf_counter()
    tracker.finish()
    with sent.get_lock():
        sent.value += tracker.sent_metrics - counted
    run_id = tracker.run_id or ""
    results.put({"writer": j, "run_id": run_id, "calls": calls,
                 "finish": (time.perf_counter() - t, tracker.sent_metrics - counted),
                 "seconds": time.perf_counter() - began})  # fmt: skip


class _Reader(threading.Thread):
    """Reads the parent's runs with every history, pass after pass, until stopped (between two
    passes); a point count must never drop from one pass to the next."""

    def __init__(self, spec: LoadSpec, parent: str) -> None:
        super().__init__(daemon=True)
        self.spec, self.parent = spec, parent
        self.stop = threading.Event()
        self.durations: list[float] = []
        self.errors: list[str] = []
        self.regressions: list[str] = []
        self._seen: dict[tuple[str, str], int] = {}

    def run(self) -> None:
        reader = RunReader(self.spec.uri)
        while not self.stop.is_set():
            t = time.perf_counter()
            try:
                self._pass(reader)
            except TrackingReadError as exc:
                self.errors.append(f"{time.strftime('%H:%M:%S')} {str(exc)[:300]}")
                self.stop.wait(1.0)
                continue
            self.durations.append(time.perf_counter() - t)

    def _pass(self, reader: RunReader) -> None:
        """One kill check's read: the parent's runs with every history (a pass under way when
        the writers finish is completed)."""
        for run in reader.runs(self.spec.experiment, lambda k: True, parent_run_id=self.parent):
            for key, points in run.metrics.items():
                before = self._seen.get((run.run_id, key), 0)
                if len(points) < before:
                    self.regressions.append(f"{run.name} {key}: {before} -> {len(points)}")
                self._seen[(run.run_id, key)] = max(before, len(points))


def run_load(spec: LoadSpec, during: Callable[[Callable[[], float]], None] | None = None,
             progress: Callable[[str], None] = print) -> LoadReport:  # fmt: skip
    """Run the load; `during(fraction_sent)` runs in this process while the writers write (a
    test restarts the server there). The report's `problems` say what did not arrive."""
    if not 1 <= spec.keys <= len(KEYS):
        raise ValueError(f"keys={spec.keys}: must be in 1..{len(KEYS)}")
    uri = resolve_uri(spec.uri)
    spec = LoadSpec(**{**asdict(spec), "uri": uri, "root": Path(spec.root).resolve()})
    spec.root.mkdir(parents=True, exist_ok=True)
    cfg = tracking_config(uri, spec.experiment)
    set_http_limits(cfg.http_timeout_s, cfg.http_retries)  # the reader's requests, as the jobs'
    parent = _create_parent(spec)
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["mlflow.tracking", "mlflow.entities", "alpha_rl.tracking.tracker"])
    gate, sent, results = (ctx.Value("i", 0), ctx.Event()), ctx.Value("q", 0), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(spec, j, parent, gate, sent, results))
             for j in range(spec.writers)]  # fmt: skip
    reader = _Reader(spec, parent)
    try:
        for proc in procs:
            proc.start()
        progress(f"{spec.writers} writers starting (parent run {parent})")
        _wait_ready(spec, procs, gate[0])
        gate[1].set()
        began = time.perf_counter()
        if spec.read:
            reader.start()
        if during is not None:
            during(lambda: sent.value / spec.values)
        done = _collect(spec, procs, results, sent, progress)
        seconds = time.perf_counter() - began
    finally:
        reader.stop.set()
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    if spec.read and reader.is_alive():
        reader.join(timeout=spec.timeout_s)  # it stops after the pass under way
    return _report(spec, cfg, parent, done, procs, seconds, reader)


def _dead(procs: list) -> list[int]:
    return [j for j, p in enumerate(procs) if p.exitcode not in (None, 0)]


def _wait_ready(spec: LoadSpec, procs: list, ready: Any) -> None:
    """Until every writer holds its run; RuntimeError when one died first or time ran out."""
    deadline = time.monotonic() + spec.timeout_s
    while ready.value < spec.writers:
        if _dead(procs) or time.monotonic() > deadline:
            dead = _dead(procs) or "none"
            raise RuntimeError(f"{ready.value} of {spec.writers} writers started; writer(s) "
                               f"{dead} exited first (their output above)")  # fmt: skip
        time.sleep(0.1)


def _collect(spec: LoadSpec, procs: list, results: Any, sent: Any,
             progress: Callable[[str], None]) -> list[dict]:  # fmt: skip
    """Every writer's result (those of writers that died are missing), with progress."""
    done, deadline = [], time.monotonic() + spec.timeout_s
    while len(done) < spec.writers and time.monotonic() < deadline:
        try:
            done.append(results.get(timeout=5.0))
        except queue.Empty:
            if len(done) + len(_dead(procs)) >= spec.writers:
                break
            progress(f"{sent.value:,} of {spec.values:,} values sent, {len(done)} writers done")
    return done


def _create_parent(spec: LoadSpec) -> str:
    store = Store(spec.uri, retry_s=0)
    try:
        eid = store.experiment_id(spec.experiment)
        name = f"load_{spec.writers}x{spec.steps}__{time.strftime('%Y-%m-%d_%H-%M-%S')}"
        return store.call("create the parent run",
                          lambda c: c.create_run(eid, run_name=name).info.run_id)  # fmt: skip
    except StoreDown as exc:  # one line: what the store is and what to do
        cause = exc.__cause__ or exc
        raise RuntimeError(str(failure(spec.uri, "create the parent run", cause, "give --uri "
                                       "of a store the load may write to"))) from exc  # fmt: skip


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def _report(spec: LoadSpec, cfg: TrackingConfig, parent: str, done: list[dict], procs: list,
            seconds: float, reader: _Reader) -> LoadReport:  # fmt: skip
    calls = [c for d in done for c in d["calls"]]
    single = [t for t, n in calls if n <= cfg.batch_size]
    calls += [tuple(d["finish"]) for d in done]
    report = LoadReport(
        uri=spec.uri, writers=spec.writers, steps=spec.steps, keys=spec.keys,
        batch_size=cfg.batch_size, parent=parent,
        run_ids=[d["run_id"] for d in sorted(done, key=lambda d: d["writer"])],
        seconds=seconds, values=spec.values, values_per_s=spec.values / seconds,
        batch_p50_s=_quantile(single, 0.5), batch_p99_s=_quantile(single, 0.99),
        batch_max_s=max(single, default=math.nan), batches=len(single),
        resend_calls=sum(1 for _, n in calls if n > cfg.batch_size),
        longest_call_s=max((t for t, _ in calls), default=0.0),
        reads=len(reader.durations), read_p99_s=_quantile(reader.durations, 0.99),
        read_errors=reader.errors, read_regressions=reader.regressions,
    )  # fmt: skip
    finished = {d["writer"] for d in done}
    report.problems += [f"writer {j} did not finish (exit code {p.exitcode})"
                        for j, p in enumerate(procs) if j not in finished]  # fmt: skip
    report.problems += [f"the reader saw a count drop: {r}" for r in reader.regressions]
    report.problems += verify(spec, parent, done)
    return report


def verify(spec: LoadSpec, parent: str, done: list[dict]) -> list[str]:
    """What did not arrive: per writer its run FINISHED under the parent, each key's steps
    0..steps-1 exactly once with the values written, no unsent file left."""
    client = mlflow_client_class()(tracking_uri=spec.uri)

    def check(d: dict) -> list[str]:
        j, run_id = d["writer"], d["run_id"]
        if not run_id:
            return [f"writer {j}: no run"]
        run, problems = client.get_run(run_id), []
        if run.info.status != "FINISHED":
            problems.append(f"writer {j}: run {run_id} is {run.info.status}")
        if run.data.tags.get("mlflow.parentRunId") != parent:
            problems.append(f"writer {j}: run {run_id} is not nested under {parent}")
        for i, key in enumerate(KEYS[: spec.keys]):
            points = sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))
            want = [(s, value(j, i, s)) for s in range(spec.steps)]
            if points != want:
                distinct = len({s for s, _ in points})
                values = "as written" if set(points) <= set(want) else "differ"
                problems.append(f"writer {j} {key}: {len(points)} points for {spec.steps} steps "
                                f"({distinct} distinct), values {values}")  # fmt: skip
        return problems

    with ThreadPoolExecutor(VERIFY_THREADS) as pool:
        found = list(pool.map(check, sorted(done, key=lambda d: d["writer"])))
    problems = [p for batch in found for p in batch]
    left = sorted(spec.root.glob(f"writer*/{UNSENT_GLOB}"))
    return problems + [f"{path} was left unsent" for path in left]


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The `load` subcommand of `python -m alpha_rl.tracking`."""
    p = commands.add_parser("load", help="many writer processes into one store at once; every "
                            "value checked (sizing a tracking server)", description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument(
        "--uri",
        required=True,
        help="the store: http://host:5000 (a server; its "
        "account in MLFLOW_TRACKING_USERNAME / _PASSWORD) or a database URI",
    )
    p.add_argument("--writers", type=int, default=64, help="writer processes (default 64)")
    p.add_argument("--steps", type=int, default=5000, help="log points per writer (default 5000)")
    p.add_argument("--keys", type=int, default=4, help=f"metrics per step, 1..{len(KEYS)} (4)")
    p.add_argument(
        "--dir",
        type=Path,
        default=Path("tracking_load"),
        help="the writers' run directories (default ./tracking_load)",
    )
    p.add_argument("--experiment", default=EXPERIMENT, help=f"experiment ({EXPERIMENT})")
    p.add_argument("--no-read", action="store_true", help="no reader while they write")
    p.add_argument("--json", type=Path, help="write the report here as JSON too")


def main(args: argparse.Namespace) -> int:
    """Run the load, print the report; exit 0 when every value arrived, 1 otherwise."""
    if args.writers < 1 or args.steps < 1:
        print("error: --writers and --steps must be >= 1")
        return 2
    spec = LoadSpec(uri=args.uri, root=args.dir / time.strftime("%Y-%m-%d_%H-%M-%S"),
                    writers=args.writers, steps=args.steps, keys=args.keys,
                    experiment=args.experiment, read=not args.no_read)  # fmt: skip
    try:
        report = run_load(spec)
    except (ValueError, RuntimeError, ConfigError) as exc:
        print(f"error: {exc}")
        return 2
    for line in report.lines():
        print(line)
    if args.json:
        args.json.write_text(json.dumps(asdict(report), indent=1))
    return 0 if not report.problems else 1
