"""The step of DESIGN §9 on the numpy backend: kernel order, no host copies, log points."""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest

from alpha_rl.agent import aux_calls
from alpha_rl.errors import ReplayError
from alpha_rl.kernels.per import HEAD
from alpha_rl.nstep import OneStep
from alpha_rl.pipeline.configure.config import plan_run, with_market
from alpha_rl.pipeline.configure.parts import layout_from_plan
from alpha_rl.pipeline.configure.scale import market_and_config
from alpha_rl.pipeline.evaluation.evaluate import Evaluator, direction, ledger_metrics, sharpe
from alpha_rl.pipeline.evaluation.ledger import UNITS, matched_random, settle
from alpha_rl.pipeline.step.stages import STAGES, stage_table
from alpha_rl.pipeline.step.trainer import Trainer
from alpha_rl.reference.per import STATUS, STATUS_EMPTY_SAMPLE
from alpha_rl.session import open_session
from alpha_rl.vocabulary import BASELINES, baseline_key, eval_key
from tests.helpers import FX_LIKE, compose_train, write_fx_like

TINY = ["backend=numpy", "debug=tiny"]


@contextmanager
def trainer_for(overrides: list[str], base: tuple[str, ...] = TINY):
    """(trainer, market) of the composed config, its session open for the block."""
    cfg, choices = compose_train([*base, *overrides])
    plan = plan_run(cfg)
    market, cfg = market_and_config(cfg, plan.run.seed, plan.validation)
    plan = with_market(plan, cfg)  # reward.scale from the market
    with open_session(cfg, layout_from_plan(cfg, choices, plan)) as session:
        yield Trainer(session, market.train, plan), market


def record_launches(runtime) -> list[str]:
    """Every launch through `runtime`'s kernels from now on, by kernel name, in order."""
    order: list[str] = []
    for kernel in runtime.bound:
        launch = kernel._launch

        def recording(grid, values, stream, axis, _launch=launch, _name=kernel.decl.name):
            order.append(_name)
            _launch(grid, values, stream, axis)

        kernel._launch = recording
    return order


def first_positions(order: list[str], names: list[str]) -> list[int]:
    return [order.index(name) for name in names]


def test_step_launches_in_the_contract_order() -> None:
    with trainer_for(["agent.learn_start=0"]) as (trainer, _):
        order = record_launches(trainer.session.runtime)
        trainer.step()
    contract = [
        "perception_observe", "dqn_act", "experience_env_step", "reward_diagnostics",
        "her_track", "per_push", "her_inject", "her_forward", "per_tree_reduce",
        "dqn_aux_train", "per_sample", "dqn_gather", "dqn_td", "dqn_grad_norm", "dqn_adam",
        "per_update",
    ]  # fmt: skip
    positions = first_positions(order, contract)
    assert positions == sorted(positions), list(zip(contract, positions, strict=True))
    assert order.count("perception_observe") == 2  # h_t (1) and h_tp1 (4)
    second = order.index("perception_observe", 1)
    assert order.index("experience_env_step") < second < order.index("reward_diagnostics")


def test_n_step_pushes_the_accumulated_transitions_instead_of_the_one_step_ones() -> None:
    with trainer_for(["agent.learn_start=2", "agent.n_step=3"]) as (trainer, _):
        order = record_launches(trainer.session.runtime)
        trainer.step()
        B = trainer.env.num_envs
        staged = trainer.backend.download(trainer.transitions.staged["flags"])
        head = int(trainer.replay.read_state()[0])
    pos = {name: order.index(name) for name in ("perception_observe", "nstep_accumulate",
                                                "per_push", "her_inject")}  # fmt: skip
    assert pos["perception_observe"] < pos["nstep_accumulate"] < pos["per_push"]
    assert pos["per_push"] < pos["her_inject"] and order.count("per_push") == 1
    # the first step emits only where a trade closed or an episode began: fewer than B rows
    assert staged.size == 3 * B and head - trainer.hindsight.totals()["backward"] < B
    with trainer_for(["agent.learn_start=0"]) as (one_step, _):
        assert isinstance(one_step.transitions, OneStep)
        assert "s_discount" not in one_step.replay.arrays


def test_later_steps_take_h_t_from_the_last_h_tp1_and_a_restore_observes_afresh() -> None:
    """After its first step a step copies the last h_tp1 into h_t instead of observing again:
    bit for bit what perception gives; once the env's state is written from outside (a
    checkpoint's restore), the next step observes it."""
    with trainer_for(["agent.learn_start=0"]) as (trainer, _):
        trainer.step()
        order = record_launches(trainer.session.runtime)
        before = trainer.backend.download(trainer.h_tp1)
        trainer.step()
        assert order.count("perception_observe") == 1  # h_tp1 only
        np.testing.assert_array_equal(trainer.backend.download(trainer.h_t), before)
        fresh = trainer.backend.zeros(trainer.h_t.size, np.float32)
        trainer.env.perceive(fresh)  # what step 3 would observe
        np.testing.assert_array_equal(trainer.backend.download(trainer.h_tp1),
                                      trainer.backend.download(fresh))  # fmt: skip
        state = {"t": trainer.t, "her_seen": {"backward": 0, "forward": 0}}
        trainer.restore_host_state(state, with_replay=False)
        order.clear()
        trainer.step()
        assert order.count("perception_observe") == 2


def test_no_learner_update_before_learn_start() -> None:
    with trainer_for(["agent.learn_start=3"]) as (trainer, _):
        order = record_launches(trainer.session.runtime)
        for _ in range(3):
            trainer.step()
        assert "dqn_td" not in order
        trainer.step()
        assert order.count("dqn_td") == 1


def test_her_off_launches_no_her_kernel() -> None:
    with trainer_for(["her='off'"]) as (trainer, _):
        order = record_launches(trainer.session.runtime)
        trainer.step()
    assert trainer.hindsight is None and not [k for k in order if k.startswith("her_")]


def test_step_copies_nothing_to_the_host(monkeypatch) -> None:
    with trainer_for(["agent.learn_start=0"]) as (trainer, _):
        be = type(trainer.backend)
        copies: list[str] = []
        for name in ("download", "write", "upload"):
            real = getattr(be, name)
            monkeypatch.setattr(be, name, lambda self, *a, _n=name, _r=real: (
                copies.append(_n), _r(self, *a))[1])  # fmt: skip
        for _ in range(3):
            trainer.step()
        assert copies == []
        trainer.read_log_point()
        assert "download" in copies  # the log point is where the host reads


def test_long_her_run_stays_finite() -> None:
    """Synthetic rows are pushed at boost^alpha * max priority; the max must not compound."""
    with trainer_for(["agent.learn_start=1000", "steps=1001"]) as (trainer, _):
        for _ in range(400):
            trainer.step()
        _, diag = trainer.read_log_point()
        be = trainer.backend
        assert diag["hindsight"]["inject_total"] > 0
        assert float(be.download(trainer.replay.max_leaf)[0]) == 0.0  # no update ran
        assert np.isfinite(be.download(trainer.replay.arrays["leaves"])).all()
        assert np.isfinite(trainer.replay.total())


def test_log_point_metrics_and_hindsight_block() -> None:
    with trainer_for([]) as (trainer, _):
        for _ in range(30):
            trainer.step()
        metrics, diag = trainer.read_log_point()
    for key in ("loss/l_q", "loss/l_aux", "her/inject_count_step", "her/forward_inject_count_step",
                "her/inject_total", "her/threshold", "her/priority_boost", "trade/capture_ratio",
                "trade/pnl", "reward/ema_c0", "reward/ema_c5", "reward/aux_align_ema",
                "replay/synthetic_frac"):  # fmt: skip
        assert key in metrics, key
    block = diag["hindsight"]
    assert block["threshold"] == pytest.approx(1.5) and block["priority_boost"] == pytest.approx(3)
    assert block["inject_total"] == block["backward_total"] + block["forward_total"] > 0
    assert 0 < metrics["replay/synthetic_frac"] < 1


def test_her_off_l_q_real_is_l_q_bit_for_bit_at_every_log_point() -> None:
    with trainer_for(["her='off'"]) as (trainer, _):
        for t in range(1, 41):
            trainer.step()
            if t > 10 and t % 5 == 0:
                m, _ = trainer.read_log_point()
                assert m["loss/l_q_real"] == m["loss/l_q"], (t, m["loss/l_q_real"], m["loss/l_q"])
                assert "loss/l_q_synthetic" not in m and m["replay/batch_synthetic_frac"] == 0.0


def test_her_batches_report_l_q_by_source() -> None:
    with trainer_for(["steps=200"]) as (trainer, _):
        for _ in range(200):
            trainer.step()
            m, _ = trainer.read_log_point()
            if m.get("replay/batch_synthetic_frac", 0) > 0:
                break
    assert "loss/l_q_synthetic" in m and "loss/l_q_real" in m, m
    low, high = sorted([m["loss/l_q_real"], m["loss/l_q_synthetic"]])
    assert low <= m["loss/l_q"] <= high  # the weight-sum average of the two
    assert 0 < m["replay/batch_synthetic_frac"] < 1


def test_nan_parameters_stop_the_run() -> None:
    from alpha_rl.errors import DivergenceError

    with trainer_for([]) as (trainer, _):
        trainer.step()
        metrics, _ = trainer.read_log_point()
        assert trainer.finite(metrics)
        trainer.check_finite(metrics)
        trainer.learner.state.theta[3] = np.nan
        assert not trainer.finite(metrics)
        with pytest.raises(DivergenceError, match=r"1 of \d+ Q-network parameters are NaN"):
            trainer.check_finite(metrics)


def test_evaluation_is_greedy_repeatable_and_leaves_training_untouched() -> None:
    with trainer_for([]) as (trainer, market):
        for _ in range(15):
            trainer.step()
        be = trainer.backend
        before = {k: be.download(v).copy() for k, v in trainer.state_arrays(True).items()}
        evaluator = Evaluator(trainer.session, market.heldout, trainer.plan, trainer.learner)
        first, second = evaluator.run(), evaluator.run()
        after = {k: be.download(v) for k, v in trainer.state_arrays(True).items()}
    np.testing.assert_equal(first, second)  # NaN-aware
    ledger = {eval_key(n) for n in (*UNITS, "sharpe", "pnl_skew", "pnl_kurtosis")}
    baselines = {k for k in first if k.startswith("eval/baseline/")}
    assert set(first) - baselines == ledger | {
        "eval/sharpe_intervals", "eval/capture_ratio", "eval/trades", "eval/aux_accuracy",
        "eval/l_q_probe", "eval/q_probe_mean"}  # fmt: skip
    assert {baseline_key(n, f) for n in BASELINES for f in ("pnl", "turnover")} <= baselines
    assert first["eval/baseline/flat/pnl"] == 0.0
    for key, value in before.items():
        np.testing.assert_array_equal(value, after[key], err_msg=key)


def step_by_step(evaluator: Evaluator) -> dict[str, float]:
    """An evaluation as a loop of its env's steps read one by one (the reference the device
    records of Evaluator.launch must equal): effective actions and the aux head's calls read
    every step, the trade accumulators harvested every `sharpe_window` steps."""
    env, c, be, policy = evaluator.env, evaluator.cfg, evaluator.backend, evaluator.policy
    a = env.arrays
    env.reset()
    targets = np.zeros((c.steps, env.num_envs), np.int64)
    trades, realised, available, right, labeled = 0, 0.0, 0.0, 0, 0
    for s in range(c.steps):
        env.perceive(evaluator.h)
        env.step(policy.act(evaluator.h), policy.p_up)
        targets[s] = direction(be.download(a["eff_action"]))
        r, n = aux_calls(be, policy.p_up, a["fill_mid"], a["post_mid"])
        right, labeled = right + r, labeled + n
        if (s + 1) % c.sharpe_window == 0 or s + 1 == c.steps:
            stats = env.harvest_trade_stats()
            trades, realised = trades + stats.trades, realised + stats.realised
            available += stats.available
    agent = settle(evaluator.book, evaluator.costs, evaluator.path, targets, c.sharpe_window)
    rand = matched_random(evaluator.book, evaluator.costs, evaluator.path, c.sharpe_window,
                          evaluator.seed, agent.turnover)  # fmt: skip
    out = ledger_metrics(agent, eval_key) | {"eval/sharpe_intervals": agent.intervals.size}
    for name, stats in (evaluator.holds | {"random": rand}).items():
        figures = ledger_metrics(stats, lambda f, n=name: baseline_key(n, f))
        out |= {k: v for k, v in figures.items() if np.isfinite(v)}
    return (
        out
        | {
            "eval/capture_ratio": realised / available if available > 0 else float("nan"),
            "eval/trades": float(trades),
            "eval/aux_accuracy": right / labeled if labeled else float("nan"),
        }
        | evaluator.probe.run()
    )


@pytest.mark.parametrize("overrides", [[], ["alpha='on'", "eval.steps=23", "eval.sharpe_window=5"]])
def test_an_evaluation_equals_its_steps_read_one_by_one(overrides: list[str]) -> None:
    """The evaluation's device records (read once at its end) give every figure of the same
    evaluation read step by step, a last window shorter than `sharpe_window` included."""
    with trainer_for(overrides) as (trainer, market):
        for _ in range(15):
            trainer.step()
        evaluator = Evaluator(trainer.session, market.heldout, trainer.plan, trainer.learner)
        got = evaluator.run()
        want = step_by_step(evaluator)
    assert sorted(got) == sorted(want)
    assert {k: str(v) for k, v in got.items()} == {k: str(float(v)) for k, v in want.items()}


def test_evaluations_are_early_dense_then_every_eval_every() -> None:
    cfg, _ = compose_train(["scale=gpu", "steps=5500"])
    ev = plan_run(cfg).eval
    due = [t for t in range(1, 5501) if ev.due(t, 5500)]
    assert due == [250, 500, 1000, 2000, 3000, 4000, 5000, 5500]


def test_sharpe_of_interval_pnl() -> None:
    assert sharpe(np.array([1.0, 3.0])) == pytest.approx(2.0 / np.sqrt(2.0))
    assert np.isnan(sharpe(np.array([1.0]))) and np.isnan(sharpe(np.array([2.0, 2.0])))


def test_forward_her_fires_at_the_default_config() -> None:
    """The forward ring must outlive the lookahead at the default B (256 slots did not)."""
    no_update = ["agent.learn_start=100000", "steps=100001"]  # (a run's steps pass learn_start)
    with trainer_for(no_update, base=("backend=numpy",)) as (trainer, _):
        for _ in range(2 * int(trainer.session.cfg.her.lookahead) + 20):
            trainer.step()
        _, diag = trainer.read_log_point()
    assert diag["hindsight"]["forward_total"] > 0 and diag["hindsight"]["backward_total"] > 0


def test_a_log_point_refuses_a_batch_sampled_from_an_empty_replay() -> None:
    with trainer_for([]) as (trainer, _):
        for _ in range(12):
            trainer.step()
        trainer.read_log_point()  # healthy: the flag is clear
        state = trainer.replay.read_state()
        state[STATUS] |= STATUS_EMPTY_SAMPLE  # what per_sample sets on an empty buffer
        trainer.backend.write(trainer.replay.arrays["state"], state)
        with pytest.raises(ReplayError, match="sampled while the replay buffer was empty"):
            trainer.read_log_point()


def test_a_file_run_with_sessions_bootstraps_no_row_from_another_episode(tmp_path) -> None:
    """An hourly FX-like file (a session a week, the market shut at the weekend), 32 envs, 300
    steps: each step's stored one-step rows are the envs with `stored`, in env order, each with
    its done and the next state just observed; every row that bootstraps (done 0) has its next
    state in its own episode, and an episode's last step that closes nothing (flat at a
    session's end) is not stored."""
    path = write_fx_like(tmp_path / "fx.csv", hours=2000)
    over = [*FX_LIKE, f"market.path={path}", "env.num_envs=32", "her='off'"]
    with trainer_for(over) as (trainer, _):
        be, env, replay = trainer.backend, trainer.env, trainer.replay
        H, N = env.obs_dim, replay.cfg.capacity
        truncated = 0
        for _ in range(300):
            before = be.download(env.arrays["episode"]).copy()
            head = int(replay.read_state()[HEAD])
            trainer.step()
            got = {k: be.download(env.arrays[k]) for k in ("stored", "done", "episode")}
            envs = np.flatnonzero(got["stored"])
            slots = (head + np.arange(envs.size)) % N
            assert int(replay.read_state()[HEAD]) == head + envs.size
            done = be.download(replay.arrays["s_done"])[slots]
            np.testing.assert_array_equal(done, got["done"][envs])
            stored_next = be.download(replay.arrays["s_h_tp1"]).reshape(N, H)[slots]
            np.testing.assert_array_equal(
                stored_next, be.download(trainer.h_tp1).reshape(-1, H)[envs]
            )
            bootstraps = envs[done == 0]
            assert (got["episode"][bootstraps] == before[bootstraps]).all(), "another episode's"
            ended = got["episode"] != before
            assert (got["stored"][ended] == got["done"][ended]).all()  # a close at the end stays
            truncated += int((ended & (got["done"] == 0)).sum())
        assert truncated > 10, truncated


def test_a_restore_keeps_the_her_variants_flags_of_the_config() -> None:
    """A checkpoint written while the HER variant was a launch argument holds 0 in the flags'
    slots: a resume writes the config's variant back over them (it cannot change the variant)."""
    with trainer_for(["her=backward"]) as (trainer, _):
        isv = trainer.session.isv
        assert isv.values("her_backward").tolist() == [1.0]
        assert "her_forward" not in isv.layout.names()  # backward only: no forward flag
        zeroed = isv.read()
        zeroed[isv.layout.slot("her_backward").index] = 0.0
        trainer.backend.write(isv.array, zeroed)  # as such a checkpoint's ISV is written back
        trainer.restore_host_state(trainer.host_state(), with_replay=False)
        assert isv.values("her_backward").tolist() == [1.0]


def test_the_steps_stages_say_what_they_launch_read_and_write() -> None:
    """The step as data (pipeline/step/stages.py): each stage's kernels and the arrays they read and
    write, read off a recorded step, in the contract's order."""
    with trainer_for([]) as (trainer, _):
        for _ in range(trainer.plan.agent.learn_start + 1):
            trainer.step()
        launched = sum(kernel.launches for kernel in trainer.session.runtime.bound)
        table = {row["stage"]: row for row in stage_table(trainer)}
        assert sum(k.launches for k in trainer.session.runtime.bound) - launched == sum(
            len([n for n in row["kernels"] if n not in ("copy", "fill")]) for row in table.values()
        )  # recorded, counted, never run: the table holds every launch of the step
    assert list(table) == [stage.number for stage in STAGES]
    assert table["1"]["kernels"] == ["copy"] and table["5b"]["kernels"] == []  # no controller
    assert table["3"]["kernels"] == ["experience_env_step"]
    assert {"action", "isv", "run_seed"} <= set(table["3"]["reads"])
    assert {"cursor", "reward", "done"} <= set(table["3"]["writes"])
    assert table["7"]["kernels"] == ["per_push"] and "s_h_t" in table["7"]["writes"]
    assert table["8"]["kernels"] == ["her_inject"] and table["9"]["kernels"] == ["her_forward"]
    assert "dqn_adam" in table["11"]["kernels"]
    assert {"param", "m", "v"} <= set(table["11"]["writes"])
