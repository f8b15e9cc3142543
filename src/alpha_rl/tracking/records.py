"""What the tracker keeps in memory and on disk: the run's identity, the queue of data not yet
in the store, the diag JSONL, and the unsent.jsonl file that carries the queue to a later sync.

unsent.jsonl: line 1 is the run record (`{"kind": "run", ...}`: RunSpec's fields), then one line
per pending item, in sending order: `param`, `tag`, `metric` (key, value, timestamp ms, step;
non-finite values as the strings "nan", "inf", "-inf"), `artifact` (a local path) and `text`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
from collections import deque
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from alpha_rl.errors import WriteError

log = logging.getLogger("alpha_rl.tracking")

# MLflow's per-request and per-value limits (mlflow.utils.validation)
PARAMS_TAGS_PER_REQUEST = 100
MAX_PARAM_LEN = 6000
MAX_TAG_LEN = 8000
TRUNCATED = "...[truncated]"

Point = tuple[str, float, int, int]  # metric key, value, timestamp (ms), step


@dataclass
class RunSpec:
    """The run that data goes to: created on first contact unless run_id names an existing one."""

    uri: str
    experiment: str
    run_name: str
    run_dir: str
    parent_run_id: str | None = None
    run_id: str | None = None
    resume: bool = False  # run_id was given to continue: skip steps the store already holds
    start_time: int = 0  # ms since the epoch
    status: str | None = None  # terminal status to set once everything else is sent
    end_time: int | None = None  # ms since the epoch


@dataclass
class Outbox:
    """Data not yet accepted by the store, in sending order (params and tags keyed, latest wins)."""

    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    metrics: deque[Point] = field(default_factory=deque)
    files: deque[dict[str, Any]] = field(default_factory=deque)  # artifact or text items

    def add_params(self, params: dict[str, Any]) -> None:
        """Queue params as strings, values clipped to MLflow's length limit."""
        for key, value in params.items():
            self.params[str(key)] = clip(str(value), MAX_PARAM_LEN)

    def add_tags(self, tags: dict[str, Any]) -> None:
        """Queue tags as strings, values clipped to MLflow's length limit."""
        for key, value in tags.items():
            self.tags[str(key)] = clip(str(value), MAX_TAG_LEN)

    def __len__(self) -> int:
        return len(self.params) + len(self.tags) + len(self.metrics) + len(self.files)


def clip(value: str, limit: int) -> str:
    """`value`, or its head plus a truncation marker when it is longer than `limit`."""
    return value if len(value) <= limit else value[: limit - len(TRUNCATED)] + TRUNCATED


def json_safe(obj: Any) -> Any:
    """obj with non-finite floats as "nan"/"inf"/"-inf" and numpy values as plain Python ones."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if obj is None or isinstance(obj, str | int | bool):
        return obj
    if isinstance(obj, dict):
        return {str(k): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset | deque):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy scalars and arrays
        return json_safe(obj.tolist())
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    return str(obj)


def dumps(obj: Any) -> str:
    """One strict-JSON line (no NaN literals) for obj."""
    return json.dumps(json_safe(obj), allow_nan=False, separators=(",", ":"))


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write data to path atomically (readers never see a partial file)."""
    replace_text(path, json.dumps(data, indent=2) + "\n")


def replace_text(path: Path, text: str) -> None:
    """Replace `path` with `text` whole: written to a temporary file beside it and renamed into
    place, so a failure (OSError, raised) leaves the old file as it was and no temporary one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


class DiagWriter:
    """Appends one complete JSON line per call to a file (kept open between calls).

    A write that fails (a full disk, a read-only file system) is undone, so the file keeps only
    whole lines, and raised as WriteError: the run stops rather than train on unrecorded."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def write(self, record: dict[str, Any]) -> None:
        """Append record as one line; WriteError (the file as it was before) when it fails."""
        data = (dumps(record) + "\n").encode("utf-8")
        end = None
        try:
            if self._fd is None:
                self._fd = self._open()
            end = os.lseek(self._fd, 0, os.SEEK_END)
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            if end is not None:
                _truncate(self._fd, end)
            raise WriteError(f"cannot write {self.path} ({why(exc)}); the run's metrics are "
                             "recorded there first, so it stops here") from exc  # fmt: skip

    def close(self) -> None:
        """Close the file (a later write reopens it in append mode); never raises."""
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _open(self) -> int:
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:  # a line cut short by a crash of an earlier attempt must not swallow the next one
            end = os.lseek(fd, 0, os.SEEK_END)
            if end > 0 and os.pread(fd, 1, end - 1) != b"\n":
                os.write(fd, b"\n")
        except OSError:
            os.close(fd)
            raise
        return fd


def _truncate(fd: int | None, size: int) -> None:
    """Cut the file of `fd` back to `size` bytes (a failed append undone), if it can be."""
    if fd is None:
        return
    try:
        os.ftruncate(fd, size)
    except OSError as exc:
        log.warning("could not undo a partial write (%s)", exc)


def why(exc: OSError) -> str:
    """An OSError in a few words: 'No space left on device [errno 28]'."""
    if exc.errno is None:
        return str(exc)
    return f"{exc.strerror or os.strerror(exc.errno)} [errno {exc.errno}]"


def read_diag(path: Path) -> list[dict[str, Any]]:
    """The records of a diag.jsonl, in order. A line that is not a whole JSON record with a step
    (the torn last line a crash or a full disk leaves, a line damaged by hand) is dropped with a
    warning naming the file and the line; a file that cannot be read raises OSError."""
    records, dropped = [], []
    lines = Path(path).read_bytes().split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            dropped.append(number)
            continue
        records.append(record)
    if dropped:
        last = len(lines) - (1 if lines[-1] == b"" else 0)
        torn = "its torn last line" if dropped == [last] else f"{len(dropped)} damaged line(s)"
        shown = ", ".join(map(str, dropped[:5])) + ("..." if len(dropped) > 5 else "")
        log.warning("%s: dropped %s (line %s): not a whole record", path, torn, shown)
    return records


def write_unsent(path: Path, spec: RunSpec, box: Outbox) -> None:
    """Write spec and every pending item of box to path (atomically)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(dumps({"kind": "run", **asdict(spec)}) + "\n")
        for key, value in box.params.items():
            f.write(dumps({"kind": "param", "key": key, "value": value}) + "\n")
        for key, value in box.tags.items():
            f.write(dumps({"kind": "tag", "key": key, "value": value}) + "\n")
        for key, value, ts, step in box.metrics:
            f.write(dumps({"kind": "metric", "key": key, "value": value, "ts": ts, "step": step}))
            f.write("\n")
        for item in box.files:
            f.write(dumps(item) + "\n")
    os.replace(tmp, path)


def read_unsent(path: Path) -> tuple[RunSpec, Outbox]:
    """The RunSpec and Outbox that write_unsent wrote to path."""
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    if not lines or lines[0].get("kind") != "run":
        raise ValueError(f"{path}: the first line is not the run record")
    names = {f.name for f in fields(RunSpec)}
    spec = RunSpec(**{k: v for k, v in lines[0].items() if k in names})
    box = Outbox()
    try:
        _fill(box, lines[1:])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path}: a damaged item ({exc!r}); fix or remove that line") from exc
    return spec, box


def _fill(box: Outbox, lines: list[dict[str, Any]]) -> None:
    for item in lines:
        kind = item.get("kind")
        if kind == "param":
            box.params[item["key"]] = item["value"]
        elif kind == "tag":
            box.tags[item["key"]] = item["value"]
        elif kind == "metric":
            box.metrics.append((item["key"], float(item["value"]), item["ts"], item["step"]))
        elif kind in ("artifact", "text"):
            box.files.append(item)
        else:
            raise ValueError(f"unknown item kind {kind!r}")
