"""The aux-direction signal as whole runs on the numpy backend (α, the w_aux_align controller,
eval/aux_accuracy), its equivalence with today's stride-7 run, and its settings."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from alpha_rl.errors import ConfigError, IsvLayoutError
from alpha_rl.killcheck.axes import axis_for, beta_value
from alpha_rl.pipeline.life import checkpoint
from alpha_rl.tracking import RunRecord
from tests.pipeline.test_run import history, job, theta

ALPHA_NOOP = ["alpha='on'", "alpha.lr=0", "alpha.init=0"]


def test_alpha_on_at_lr_zero_and_w_zero_trains_bit_for_bit_as_alpha_off(tmp_path: Path) -> None:
    off = job(tmp_path, [], "off")
    on = job(tmp_path, ALPHA_NOOP, "on")
    assert off.status == on.status == "FINISHED"
    assert history(tmp_path, on.run_id, "loss/l_q") == history(tmp_path, off.run_id, "loss/l_q")
    for key in ("eval/l_q_probe", "eval/pnl", "eval/aux_accuracy"):
        assert history(tmp_path, on.run_id, key) == history(tmp_path, off.run_id, key), key
    np.testing.assert_array_equal(theta(on.run_dir), theta(off.run_dir))
    assert {v for _, v in history(tmp_path, on.run_id, "aux/w_alpha_long")} == {0.0}


@pytest.mark.slow
def test_alpha_learns_and_resumes_bit_exact(tmp_path: Path) -> None:
    over = ["alpha='on'", "alpha.lr=0.01", "replay.beta_anneal_updates=29"]
    whole = job(tmp_path, over, "whole")
    half = job(tmp_path, [*over, "steps=20"], "half")
    resumed = job(tmp_path, [*over, f"resume={half.run_dir}"], "ignored")
    assert whole.status == resumed.status == "FINISHED"
    for key in ("loss/l_q", "aux/w_alpha_long", "aux/w_alpha_short"):
        assert history(tmp_path, half.run_id, key) == history(tmp_path, whole.run_id, key), key
    w = [v for _, v in history(tmp_path, whole.run_id, "aux/w_alpha_long")]
    assert w[-1] != 0.0 and all(abs(v) <= 1.0 for v in w)
    with np.load(checkpoint.latest(whole.run_dir) / "state.npz", allow_pickle=False) as npz:
        assert npz["alpha.w"][0] == 0.0 and npz["alpha.w"][1] == np.float32(w[-1])
    for key in ("eval/aux_accuracy", "aux/accuracy"):
        accuracy = [v for _, v in history(tmp_path, whole.run_id, key)]
        assert accuracy and all(0.0 <= v <= 1.0 for v in accuracy), key


def test_the_controller_steers_w_aux_align(tmp_path: Path) -> None:
    done = job(tmp_path, ["beta=active_controller", "beta.gain=0.05", "beta.target_share=0.5"])
    assert done.status == "FINISHED"
    share = [v for _, v in history(tmp_path, done.run_id, "reward/aux_share")]
    w = [v for _, v in history(tmp_path, done.run_id, "reward/w_aux_align")]
    assert share and all(0.0 <= s < 0.5 for s in share)  # below the target: w rises
    assert w[0] > 1.0 and all(b >= a for a, b in itertools.pairwise(w)) and w[-1] <= 5.0
    # a hand-set controller without its slot is refused naming the preset that has it
    with pytest.raises(IsvLayoutError, match=r"'aux_share'.*beta=active_controller"):
        job(tmp_path, ["beta=active", "beta.controller=share", "+beta.gain=0.1",
                       "+beta.target_share=0.1", "+beta.w_max=2"], "bare")  # fmt: skip
    fixed = job(tmp_path, ["beta=active"], "fixed")
    assert {v for _, v in history(tmp_path, fixed.run_id, "reward/w_aux_align")} == {1.0}


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["alpha='on'", "alpha.init=2"], r"alpha\.init=2 must be a number in \[-alpha\.bound"),
        (["alpha='on'", "alpha.bound=0"], r"alpha\.bound=0 must be a number > 0"),
        (["beta.controller=share"], r"beta\.controller=share .* needs beta=active"),
        (["beta=active_controller", "beta.target_share=1"], r"beta\.target_share=1 must be"),
        (["alpha='on'", "agent.distributional=true"], r"alpha='on' biases the Q-values"),
    ],
)
def test_aux_settings_are_checked(tmp_path: Path, overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        job(tmp_path, overrides)


def test_the_beta_axis_tells_the_controller_apart_and_alpha_is_an_axis() -> None:
    def run(params: dict) -> RunRecord:
        return RunRecord(run_id="r", name="r", status="FINISHED", params=params, tags={},
                         metrics={})  # fmt: skip

    assert beta_value(run({"beta.mode": "active", "beta.controller": "share"})) == (
        "active_controller"
    )
    assert beta_value(run({"beta.mode": "active", "beta.controller": "none"})) == "active"
    assert beta_value(run({})) is None
    alpha = axis_for("alpha")
    assert alpha.baseline == "off" and alpha.owns("alpha.lr") and alpha.owns("isv.slots.alpha.x")
