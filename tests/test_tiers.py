"""The fast tier stays fast by construction: a test not marked slow that starts a sweep, a
tracking server, a confirmation or a browser fails, naming what it started (tests/conftest.py)."""

from __future__ import annotations

import os
import sys

import pytest

from alpha_rl import paths
from tests.conftest import slow_command, words_of


@pytest.mark.parametrize(
    ("command", "what"),
    [
        ([sys.executable, "-m", "alpha_rl.train", "-m", "experiment=her_ablation"], "a sweep"),
        ("alpha-rl-train --multirun seed=0,1", "a sweep"),
        (
            [sys.executable, "-m", "alpha_rl.tracking", "server", "--port", "5001"],
            "a tracking server",
        ),
        ("mlflow server --backend-store-uri sqlite:///x.db", "a tracking server"),
        ("alpha-rl-confirm --parent abc", "a search's confirmation (a sweep)"),
        (["/usr/bin/chromium", "--headless"], "a browser"),
        # what the fast tier may start
        ([sys.executable, "-m", "alpha_rl.train", "debug=tiny", "steps=20"], None),
        ([sys.executable, "-m", "alpha_rl.killcheck", "--sweep", "multirun/x"], None),
        ("mlflow ui --port 5002", "a tracking server"),
        ("mlflow gc --help", None),
        ("git status", None),
    ],
)
def test_what_only_a_slow_test_may_start(command, what: str | None) -> None:
    assert slow_command(words_of(command)) == what


CHILD = """
import subprocess, sys
import pytest

SWEEP = [sys.executable, "-c", "pass", "alpha_rl.train", "-m"]  # looks like a sweep; runs nothing

def test_unmarked():
    subprocess.run(SWEEP, check=True)

@pytest.mark.slow
def test_marked():
    subprocess.run(SWEEP, check=True)
"""


def test_an_unmarked_test_that_starts_a_sweep_fails_and_a_slow_one_runs(
    pytester, monkeypatch
) -> None:
    # a pytest process of its own: in this one, this (unmarked) test's own guard would refuse both
    pytester.makeini("[pytest]\nmarkers =\n    slow: the slow tier\n")
    pytester.makeconftest("from tests.conftest import pytest_runtest_protocol  # noqa: F401\n")
    pytester.makepyfile(test_child=CHILD)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(paths.project_root()), *sys.path]))
    result = pytester.runpytest_subprocess("-p", "no:xdist", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_unmarked starts a sweep (`*`) but is not marked slow*"])
