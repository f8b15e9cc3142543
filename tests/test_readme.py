"""README's "What you should see" is what the default configuration prints: the test runs it
(python -m alpha_rl.train, no overrides, as `make train` does) and compares its last progress line
and its summary with the block `make readme` wrote, in README.md and in docs/getting-started.md,
and what it computed (its l_q history in full precision, every figure it logged, its last
checkpoint) with tests/fixtures/default_run.json. It does so under every BLAS kernel this machine
can run and with NumPy's SIMD code turned off (tests/blas_settings.py), each in a process of its
own: the figures do not depend on the CPU. Only what differs by nature from run to run is masked:
the output directory's time stamp, steps/s and the eta."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from alpha_rl import paths
from alpha_rl.docsite.readme import (
    FINGERPRINT,
    block,
    default_run,
    fingerprint,
    masked,
    pages,
    readme_lines,
    shown,
    write,
)
from tests.blas_settings import SETTINGS, environment


@pytest.mark.slow
@pytest.mark.parametrize("setting", SETTINGS)
def test_the_default_run_ends_as_the_readme_says(setting: str, tmp_path: Path) -> None:
    env, what = environment(setting)
    if env is None:
        pytest.skip(what)
    lines, _, run_dir = default_run(tmp_path, env)
    assert (run_dir / "curves.png").is_file()
    for page in pages():
        assert masked(readme_lines(page)) == masked(lines), (
            f"{page.name} differs from the default run under {what}: run `make readme`"
        )
    want = json.loads((paths.project_root() / FINGERPRINT).read_text())
    got = fingerprint(run_dir)
    assert got["l_q"] == want["l_q"], f"l_q history differs under {what}: run `make readme`"
    assert got == want, f"the run's figures differ under {what}: run `make readme`"


def test_a_fingerprint_tells_runs_apart(tmp_path: Path) -> None:
    """The fingerprint reads the l_q history, every logged figure but the timings, and the last
    checkpoint's arrays: a change to any of them shows."""
    import numpy as np

    run = tmp_path / "run"
    (run / "checkpoint" / "0000000002").mkdir(parents=True)
    points = [{"step": s, "time": s, "metrics": {"loss/l_q": 1.0 / s, "perf/sps": 9.0, "a": s},
               "hindsight": {"inject_total": s}} for s in (1, 2)]  # fmt: skip

    def record(points, weight) -> dict:
        (run / "diag.jsonl").write_text("".join(json.dumps(p) + "\n" for p in points))
        np.savez(run / "checkpoint" / "0000000002" / "state.npz", w=np.float32([weight]))
        return fingerprint(run)

    first = record(points, 1.0)
    assert first["l_q"] == [[1, 1.0], [2, 0.5]]
    timed = [{**p, "time": 0, "metrics": {**p["metrics"], "perf/sps": 1.0}} for p in points]
    assert record(timed, 1.0) == first  # timings are the machine's, not the run's
    moved = [points[0], {**points[1], "hindsight": {"inject_total": 3}}]
    assert record(moved, 1.0)["logged"] != first["logged"]
    assert (
        record(points, np.nextafter(np.float32(1), np.float32(2)))["checkpoint"]
        != first["checkpoint"]
    )


def test_the_block_masks_only_what_changes_between_runs(tmp_path: Path) -> None:
    """Two runs' lines that differ only in the directory, steps/s and eta compare equal; a figure
    that moved does not."""
    log = [
        "[2026-12-03 04:10:17,456][alpha_rl][INFO] - starting",
        "step 1900/2000 [######################..]  36.0 steps/s  l_q 0.9666  eta 3s",
        "run FINISHED after 2000 steps: outputs/2026-12-01/12-30-05",
        "held-out, the last evaluation (step 2000): pnl +444 USD in all",
        "curves: outputs/2026-12-01/12-30-05/curves.png",
        "mlflow: run abc",
    ]
    first = shown(log)
    assert first == log[1:5]
    other = [line.replace("36.0", "3.1").replace("3s", "290s")
             .replace("outputs/2026-12-01/12-30-05", "/tmp/x/outputs/2026-12-03/04-11-59")
             for line in first]  # fmt: skip
    assert masked(other) == masked(first)
    assert masked([first[0].replace("0.9666", "0.9667")]) != masked(first[:1])
    page = tmp_path / "README.md"
    page.write_text(f"# x\n\n{block([], 1.0)}\n\nafter\n")
    write(page, first, 75.0)
    assert readme_lines(page) == first and page.read_text().endswith("\n\nafter\n")
    assert "(it took 1 min 15 s on" in " ".join(page.read_text().split())
