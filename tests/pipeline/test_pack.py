"""Packs (pipeline/pack.py): several runs' trainers in one process on one backend. Agent s of a
pack is its run alone, bit for bit: every device array a resume needs, after the same steps."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from alpha_rl.errors import ConfigError
from alpha_rl.pipeline.pack import open_pack
from alpha_rl.session import open_sessions
from tests.helpers import compose_train
from tests.pipeline.test_trainer import trainer_for

TINY = ["backend=numpy", "debug=tiny"]
# three agents: two seeds of one variant, and a third with another HER variant and ISV values
AGENTS = [["seed=0"], ["seed=1"], ["seed=2", "her='off'", "agent.lr=0.0005"]]


def state(trainer) -> dict[str, np.ndarray]:
    be = trainer.backend
    return {k: be.download(v).copy() for k, v in trainer.state_arrays(with_replay=True).items()}


def check_pack_equals_lone(base: list[str], steps: int) -> None:
    """A pack of AGENTS stepped `steps` times: each agent's state equals its lone run's, array
    for array, and the agents differ from each other."""
    with open_pack([compose_train([*base, *agent]) for agent in AGENTS]) as pack:
        for _ in range(steps):
            pack.step()
        packed = [state(t) for t in pack.trainers]
        graphs = [t.graph is not None for t in pack.trainers]
    for i, agent in enumerate(AGENTS):
        with trainer_for(agent, tuple(base)) as (lone, _):
            for _ in range(steps):
                lone.step()
            alone = state(lone)
            assert (lone.graph is not None) == graphs[i]
            lone.close()
        assert alone.keys() == packed[i].keys()
        for key, value in alone.items():
            np.testing.assert_array_equal(packed[i][key], value, err_msg=f"agent {i}: {key}")
    theta = [p["learner.theta"] for p in packed[:2]]
    assert not np.array_equal(*theta), "two seeds that train the same weights test nothing"


def test_each_agent_of_a_pack_is_its_run_alone_bit_for_bit() -> None:
    check_pack_equals_lone(TINY, steps=30)


def test_jobs_on_different_backends_are_refused_naming_the_key() -> None:
    jobs = [compose_train(TINY), compose_train(["backend=auto", "debug=tiny"])]
    refused = r"backend\.name: job 1 has 'auto' and job 0 'numpy'"
    with pytest.raises(ConfigError, match=refused), open_sessions(jobs):
        pass


@pytest.mark.gpu
def test_each_agent_of_a_pack_is_its_run_alone_on_the_gpu(built_cubins: Path) -> None:
    """The same on the cuda backend, past learn_start (each agent replays its own CUDA graph on
    its own stream), in a subprocess: it opens its own backend."""
    base = ["backend=cuda", "debug=tiny", "env.num_envs=256", f"backend.cubin_dir={built_cubins}"]
    code = (
        "from tests.pipeline.test_pack import check_pack_equals_lone as check\n"
        f"check({base!r}, steps=40)\n"
    )
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
