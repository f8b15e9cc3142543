"""The probe set: the same real held-out transitions for every variant of one seed, and the TD
loss of a run's own nets on it."""

from __future__ import annotations

import numpy as np
import pytest

from alpha_rl.agent import ACTIONS
from alpha_rl.errors import ConfigError
from alpha_rl.pipeline.configure.config import plan_run, with_market
from alpha_rl.pipeline.configure.parts import layout_from_plan
from alpha_rl.pipeline.configure.scale import market_and_config
from alpha_rl.pipeline.evaluation.probe import FIELDS, ProbeLoss, collect_probe, probe_actions
from alpha_rl.pipeline.step.trainer import Trainer
from alpha_rl.session import open_session
from tests.helpers import compose_train

TINY = ["backend=numpy", "debug=tiny"]
VARIANTS = (["her='on'"], ["her='off'"], ["her=backward"], ["her=forward"],
            ["reward_variant=stride6"], ["reward_variant=stride7_active"])  # fmt: skip


def probe_of(overrides: list[str]):
    cfg, choices = compose_train([*TINY, *overrides])
    plan = plan_run(cfg)
    market, cfg = market_and_config(cfg, plan.run.seed, plan.validation)
    plan = with_market(plan, cfg)  # reward.scale from the market
    with open_session(cfg, layout_from_plan(cfg, choices, plan)) as session:
        return collect_probe(session, market.heldout, plan)


def test_the_probe_is_the_same_bytes_for_every_variant_of_a_seed() -> None:
    probes = [probe_of(v) for v in VARIANTS]
    first = probes[0]
    assert first.size == 64 and first.h_t.shape == first.h_tp1.shape == (64, 8)
    for variant, probe in zip(VARIANTS, probes, strict=True):
        for name in FIELDS:
            a, b = getattr(first, name), getattr(probe, name)
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (variant, name)
        assert probe.digest == first.digest
    other = probe_of(["seed=1"])
    assert other.digest != first.digest and other.h_t.tobytes() != first.h_t.tobytes()


def test_the_probe_is_real_data_from_uniform_actions() -> None:
    probe = probe_of(["eval.probe.size=4000", "eval.probe.envs=40"])
    counts = np.bincount(probe.action, minlength=ACTIONS)
    assert counts.min() > 0.3 * probe.size  # uniform over FLAT, LONG, SHORT (1/3 each)
    assert 0 < probe.done.sum() < probe.size and np.isfinite(probe.reward).all()
    assert probe_actions(0, 3, 40).tolist() == probe_actions(0, 3, 40).tolist()
    assert probe_actions(0, 3, 40).tolist() != probe_actions(0, 4, 40).tolist()


def test_probe_loss_is_the_unweighted_double_dqn_huber_loss_of_the_runs_nets() -> None:
    cfg, choices = compose_train(TINY)
    plan = plan_run(cfg)
    market, cfg = market_and_config(cfg, plan.run.seed, plan.validation)
    plan = with_market(plan, cfg)  # reward.scale from the market
    with open_session(cfg, layout_from_plan(cfg, choices, plan)) as session:
        trainer = Trainer(session, market.train, plan)
        for _ in range(30):
            trainer.step()
        probe = collect_probe(session, market.heldout, plan)
        got = ProbeLoss(trainer.learner, probe).run()
        lr = trainer.learner

        def q(which: str, h: np.ndarray) -> np.ndarray:
            bufs = lr.net.buffers(probe.size)
            return lr.net.forward(lr.views[which], h.ravel().copy(), bufs).reshape(-1, 3).copy()

        q_t, q_tp1, q_tgt = q("theta", probe.h_t), q("theta", probe.h_tp1), q("target", probe.h_tp1)
    c, n = plan.agent, probe.size
    best = q_tp1.argmax(1)
    y = probe.reward + c.gamma * (1 - probe.done) * q_tgt[np.arange(n), best]
    d = (y - q_t[np.arange(n), probe.action]).astype(np.float64)
    k = c.huber_kappa
    huber = np.where(np.abs(d) <= k, 0.5 * d * d, k * (np.abs(d) - 0.5 * k))
    assert got["eval/l_q_probe"] == pytest.approx(huber.mean(), rel=1e-5)
    assert got["eval/q_probe_mean"] == pytest.approx(q_t.max(1).mean(), rel=1e-6)


def test_probe_settings_are_checked() -> None:
    for bad, match in (
        ("eval.probe.size=5000", "eval.probe.size=5000 must be a whole number in 1..4096"),
        ("eval.probe.envs=0", "eval.probe.envs=0 must be a whole number in 1..eval.probe.size"),
        ("eval.first=[500,250]", "must be ascending"),
        ("eval.first=5", "must be a list"),
    ):
        cfg, _ = compose_train([*TINY, bad])
        with pytest.raises(ConfigError, match=match):
            plan_run(cfg)
