"""Fixtures of the pipeline tests: the unbroken run that the resume and stop tests compare with."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from tests.pipeline.test_run import ANNEAL, history, job, theta


@dataclass(frozen=True)
class Unbroken:
    """What the tests read of an unbroken run: its loss/l_q history, (step, value) by step, its
    final learner.theta (read-only) and its summary lines (but the curves' path)."""

    l_q: list[tuple[int, float]]
    theta: np.ndarray
    summary: tuple[str, ...]


@pytest.fixture(scope="session")
def unbroken(tmp_path_factory: pytest.TempPathFactory) -> Unbroken:
    """The 40-step run (debug=tiny, numpy, PER's beta annealed over its own 29 updates) that a
    stopped, resumed or damaged run must equal, made once a process instead of once a test."""
    where = tmp_path_factory.mktemp("unbroken")
    whole = job(where, [ANNEAL], "whole")
    assert whole.status == "FINISHED" and whole.steps == 40
    final = theta(whole.run_dir)
    final.flags.writeable = False
    return Unbroken(history(where, whole.run_id, "loss/l_q"), final, summary_of(whole))


def summary_of(outcome) -> tuple[str, ...]:
    """An outcome's summary lines but the one naming its curves' file (a path of its own)."""
    return tuple(line for line in outcome.summary if not line.startswith("curves: "))
