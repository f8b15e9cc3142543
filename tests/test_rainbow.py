"""agent=rainbow and its pieces as whole runs on the numpy backend: they train, resume bit for
bit, and keep the probe's l_q on the one scale every learner shares."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from alpha_rl.killcheck.axes import agent_value, axis_for
from alpha_rl.tracking import RunRecord
from tests.pipeline.test_run import history, job, theta


@pytest.mark.slow
def test_rainbow_trains_and_resumes_bit_exact(tmp_path: Path) -> None:
    over = ["agent=rainbow", "replay.beta_anneal_updates=29"]
    whole = job(tmp_path, over, "whole")
    half = job(tmp_path, [*over, "steps=20"], "half")
    resumed = job(tmp_path, [*over, f"resume={half.run_dir}"], "ignored")
    assert whole.status == resumed.status == "FINISHED"
    l_q = history(tmp_path, whole.run_id, "loss/l_q")
    assert history(tmp_path, half.run_id, "loss/l_q") == l_q
    np.testing.assert_array_equal(theta(half.run_dir), theta(whole.run_dir))
    # l_q is C51's cross-entropy (it starts near log 51); the probe's stays the Huber TD error
    assert 2.0 < l_q[0][1] < 4.5
    probe = history(tmp_path, whole.run_id, "eval/l_q_probe")
    assert probe and all(np.isfinite(v) and v < 2.0 for _, v in probe)
    assert all(v == 0.0 for _, v in history(tmp_path, whole.run_id, "agent/epsilon"))


@pytest.mark.parametrize(
    ("params", "value"),
    [
        ({"agent.n_step": "1", "agent.dueling": "False", "agent.noisy": "False",
          "agent.distributional": "False"}, "dqn"),
        ({"agent.n_step": "3", "agent.dueling": "True", "agent.noisy": "True",
          "agent.distributional": "True"}, "rainbow"),
        ({"agent.n_step": "3", "agent.dueling": "False", "agent.noisy": "False",
          "agent.distributional": "False"}, "dqn_nstep3"),
        ({"agent.n_step": "5", "agent.dueling": "True", "agent.noisy": "True",
          "agent.distributional": "True"}, "dqn_dueling_nstep5_noisy_c51"),
        ({"agent.n_step": "1", "agent.dueling": "False", "agent.noisy": "True",
          "agent.distributional": "True"}, "dqn_noisy_c51"),
        ({}, None),
    ],
)  # fmt: skip
def test_the_agent_axis_names_the_learner_as_conf_agent_does(params: dict, value) -> None:
    run = RunRecord(run_id="r", name="r", status="FINISHED", params=params, tags={}, metrics={})
    assert agent_value(run) == value


def test_the_agent_axis_owns_the_learners_pieces_only() -> None:
    axis = axis_for("agent")
    assert axis.baseline == "dqn"
    assert all(axis.owns(k) for k in ("agent.noisy", "agent.n_step", "isv.slots.agent.loss_q"))
    assert not axis.owns("agent.lr") and not axis.owns("agent.atoms")  # runs pair on these
