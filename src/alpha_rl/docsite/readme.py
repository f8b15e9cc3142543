"""README's "What you should see": the default run's last lines, its curves and its wall time,
written from a real run of the default configuration, never typed by hand.

`python -m alpha_rl.docsite.readme` (`make readme`) runs `python -m alpha_rl.train` with no
overrides in a scratch directory, as `make train` does, times it, and rewrites the block between
the markers of README.md and docs/getting-started.md, docs/img/default_run_curves.png and the
run's fingerprint (tests/fixtures/default_run.json: its l_q history in full precision and digests
of every other figure it logged and of its last checkpoint). tests/test_readme.py runs the same
default configuration, under each BLAS kernel the machine can run and with NumPy's SIMD code
turned off, and compares its lines with the pages' and its fingerprint with the file's, so a
change that moves the figures fails until `make readme` writes them again.

The lines compared are the run's last progress line and its summary; what differs from run to run
by nature (the output directory's time stamp, steps/s, the eta) is masked on both sides.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

from alpha_rl import paths
from alpha_rl.vocabulary import L_Q

BEGIN = "<!-- what-you-should-see: written by `make readme`, checked by tests/test_readme.py -->"
END = "<!-- end of what-you-should-see -->"
IMAGE = Path("docs/img/default_run_curves.png")
FINGERPRINT = Path("tests/fixtures/default_run.json")
# logged figures that measure the machine, not the run (left out of the fingerprint)
TIMINGS = ("perf/", "sys/")
_PREFIX = re.compile(r"^\[[^]]*\]\[[^]]*\]\[[A-Z]+\] - ")  # the log's [time][logger][LEVEL] -
_MASKS = (
    (re.compile(r"\S*outputs/\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d"), "outputs/<date>/<time>"),
    (re.compile(r"\s+[\d.]+ steps/s"), " <n> steps/s"),
    (re.compile(r"eta \S+"), "eta <s>"),
)
SUMMARY_START = "run FINISHED after "


def default_run(workdir: Path, env: dict[str, str] | None = None) -> tuple[list[str], float, Path]:
    """Run the default configuration in `workdir` as `make train` does on a machine without a
    GPU (CUDA_VISIBLE_DEVICES empty: backend=auto takes numpy, whose figures README shows), with
    `env` added to the environment: (its last progress line and its summary lines, wall
    seconds, its run directory)."""
    path = [str(paths.project_root() / "src"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "CUDA_VISIBLE_DEVICES": "",
           **(env or {}), "PYTHONPATH": os.pathsep.join(p for p in path if p)}  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "alpha_rl.train"], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=3600)  # fmt: skip
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"the default run failed ({done.returncode}):\n{done.stdout[-3000:]}"
                           f"\n{done.stderr[-3000:]}")  # fmt: skip
    lines = [_PREFIX.sub("", line) for line in done.stdout.splitlines()]
    run_dir = workdir / _run_dir(lines)  # the log names it absolute (then `/` keeps it so)
    # as the user sees it from where they typed `make train`: outputs/<date>/<time>
    return [x.replace(f"{workdir}/", "") for x in shown(lines)], seconds, run_dir


def shown(lines: list[str]) -> list[str]:
    """The lines README shows: the last progress line, then the summary up to the curves."""
    end = next(i for i, line in enumerate(lines) if line.startswith(SUMMARY_START))
    progress = [line for line in lines[:end] if line.startswith("step ")]
    summary = []
    for line in lines[end:]:
        summary.append(line)
        if line.startswith("curves: "):
            break
    return progress[-1:] + summary


def _run_dir(lines: list[str]) -> str:
    line = next(x for x in lines if x.startswith(SUMMARY_START))
    return line.split(": ", 1)[1]


def masked(lines: list[str]) -> list[str]:
    """`lines` with what changes from run to run by nature replaced by placeholders."""
    out = []
    for line in lines:
        for pattern, placeholder in _MASKS:
            line = pattern.sub(placeholder, line)
        out.append(line.rstrip())
    return out


def fingerprint(run_dir: Path) -> dict:
    """What a run computed, for comparing runs bit for bit: its l_q history (step, value in
    full precision), a digest of every other figure it logged at its log points (but the
    timings) and a digest of its last checkpoint's arrays."""
    points = [json.loads(line) for line in (run_dir / "diag.jsonl").read_text().splitlines()]
    logged = hashlib.sha256()
    for point in points:
        figures = {k: v for k, v in point["metrics"].items() if not k.startswith(TIMINGS)}
        rest = {k: v for k, v in point.items() if k not in ("time", "metrics")}
        logged.update(json.dumps([point["step"], figures, rest], sort_keys=True).encode())
    last = sorted((run_dir / "checkpoint").iterdir())[-1] / "state.npz"
    arrays = hashlib.sha256()
    with np.load(last) as state:
        for name in sorted(state.files):
            value = state[name]
            arrays.update(f"{name} {value.dtype} {value.shape}".encode() + value.tobytes())
    l_q = [[p["step"], p["metrics"][L_Q]] for p in points if L_Q in p["metrics"]]
    return {"l_q": l_q, "logged": logged.hexdigest(), "checkpoint": arrays.hexdigest()}


def as_json(record: dict) -> str:
    """A fingerprint as JSON, one l_q point a line."""
    points = ",\n".join(f"  {json.dumps(point)}" for point in record["l_q"])
    rest = "".join(f',\n "{key}": {json.dumps(record[key])}' for key in record if key != "l_q")
    return f'{{\n "l_q": [\n{points}\n ]{rest}\n}}\n'


def readme_lines(readme: Path) -> list[str]:
    """The run's lines as README shows them (the indented block between the markers)."""
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{readme}: the markers of the what-you-should-see block are missing")
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    return [line[4:] for line in block.splitlines() if line.startswith("    ")]


def _minutes(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s} s" if m else f"{s} s"


def block(lines: list[str], seconds: float) -> str:
    """The README text between the markers."""
    cpu = platform.processor() or platform.machine()
    text = (
        f"`make train` trains on the synthetic market with the numpy backend and ends like this "
        f"(it took {_minutes(seconds)} on {os.cpu_count()} cores, {cpu}, the install apart; "
        f"measured by `make readme` on {time.strftime('%Y-%m-%d')}). The seed is fixed: every "
        "run of this code prints these figures, on any CPU and with any BLAS NumPy uses (a test "
        "checks it under each), but for the output directory, steps/s and eta:"
    )
    return "\n".join([
        BEGIN,
        *textwrap.wrap(text, 100, break_on_hyphens=False),
        "",
        *(f"    {line}" for line in lines),
        "",
        END,
    ])  # fmt: skip


def write(readme: Path, lines: list[str], seconds: float) -> None:
    """Replace the block between README's markers."""
    text = readme.read_text()
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    readme.write_text(head + block(lines, seconds) + tail)


def pages() -> list[Path]:
    """The pages that show the block: README and the site's getting-started page."""
    root = paths.project_root()
    return [root / "README.md", root / "docs" / "getting-started.md"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m alpha_rl.docsite.readme",
                                description=__doc__.split("\n\n")[0])  # fmt: skip
    p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="alpha_rl_readme_") as tmp:
        print("running the default configuration (python -m alpha_rl.train) ...", flush=True)
        lines, seconds, run_dir = default_run(Path(tmp))
        for page in pages():
            write(page, lines, seconds)
        shutil.copyfile(run_dir / "curves.png", paths.project_root() / IMAGE)
        (paths.project_root() / FINGERPRINT).write_text(as_json(fingerprint(run_dir)))
    print("\n".join(lines))
    written = ", ".join(str(p.relative_to(paths.project_root())) for p in pages())
    print(f"{written}, {IMAGE} and {FINGERPRINT} written ({_minutes(seconds)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
