"""Packs (pipeline/step/pack.py): several runs' trainers in one process on one backend. Agent s of a
pack is its run alone, bit for bit: every device array a resume needs, after the same steps."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from alpha_rl.backend.base import RunBackend
from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.errors import ConfigError
from alpha_rl.kernels.decl import Role
from alpha_rl.kernels.tape import AgentCall
from alpha_rl.market import load_market
from alpha_rl.pipeline.configure.config import layout_from_config, plan_run
from alpha_rl.pipeline.configure.scale import Markets
from alpha_rl.pipeline.life.run import Job, _drive, _step, run_jobs
from alpha_rl.pipeline.report.sweep_report import OUTCOME_FILE, groups_line
from alpha_rl.pipeline.step.lockstep import group_key, seats
from alpha_rl.pipeline.step.pack import open_pack
from alpha_rl.pipeline.step.workers import outcome, submitted, worker_count
from alpha_rl.session import open_sessions
from tests.helpers import compose_train, seeded_store
from tests.pipeline.test_run import ANNEAL, TINY, history, job, theta
from tests.pipeline.test_trainer import trainer_for

# three agents: two seeds of one variant, and a third with another HER variant and ISV values
AGENTS = [["seed=0"], ["seed=1"], ["seed=2", "her='off'", "agent.lr=0.0005"]]
VARIANTS = ("'on'", "backward", "forward", "'off'")


def agents(count: int) -> list[list[str]]:
    """`count` agents: the first two seeds of the default variant (their weights must differ),
    then each a seed of its own, a HER variant in turn and numbers (a learning rate, a HER
    threshold, a discount) of its own."""
    out = [["seed=0"], ["seed=1"]][:count]
    for i in range(len(out), count):
        numbers = [f"agent.lr={0.0001 * (1 + i % 5):g}", f"agent.gamma={0.95 + 0.01 * (i % 4):g}"]
        if i % 4 != 3:  # a HER variant that has a threshold
            numbers.append(f"her.threshold={1 + 0.25 * (i % 3):g}")
        out.append([f"seed={i}", f"her={VARIANTS[i % 4]}", *numbers])
    return out


def state(trainer) -> dict[str, np.ndarray]:
    be = trainer.backend
    return {k: be.download(v).copy() for k, v in trainer.state_arrays(with_replay=True).items()}


def check_pack_equals_lone(base: list[str], steps: int, team: list[list[str]] = AGENTS) -> None:
    """A pack of `team` stepped `steps` times: each agent's state equals its lone run's, array
    for array, and the agents differ from each other."""
    with open_pack([compose_train([*base, *agent]) for agent in team]) as pack:
        for _ in range(steps):
            pack.step()
        packed = [state(t) for t in pack.trainers]
        group = {id(t): lockstep for lockstep in pack.locksteps for t in lockstep.trainers}
        graphs = [group[id(t)].graph is not None for t in pack.trainers]
        # one group per HER variant (the agents' numbers and seeds are not shapes), and each
        # group's steps launched as one: every kernel once for all its agents
        variants = {next((o for o in agent if o.startswith("her=")), "her='on'") for agent in team}
        assert len(pack.locksteps) == len(variants)
        assert all(lockstep.apart is None for lockstep in pack.locksteps)
    for i, agent in enumerate(team):
        with trainer_for(agent, tuple(base)) as (lone, _):
            for _ in range(steps):
                lone.step()
            alone = state(lone)
            assert (lone.graph is not None) == graphs[i]
            lone.close()
        assert alone.keys() == packed[i].keys()
        for key, value in alone.items():
            np.testing.assert_array_equal(packed[i][key], value, err_msg=f"agent {i}: {key}")
    if len(packed) > 1:
        theta = [p["learner.theta"] for p in packed[:2]]
        assert not np.array_equal(*theta), "two seeds that train the same weights test nothing"


def test_each_agent_of_a_pack_is_its_run_alone_bit_for_bit() -> None:
    check_pack_equals_lone(TINY, steps=30)


@pytest.mark.parametrize("count", [1, 2, 7, 20])
def test_agents_that_differ_in_seed_her_variant_and_numbers_are_each_their_run_alone(
    count: int,
) -> None:
    check_pack_equals_lone(TINY, steps=25, team=agents(count))


def test_jobs_on_different_backends_are_refused_naming_the_key() -> None:
    jobs = [(c[0], layout_from_config(*c)) for c in (
        compose_train([*TINY, "reward.scale=1.0"]),
        compose_train(["backend=auto", "debug=tiny", "reward.scale=1.0"]))]  # fmt: skip
    refused = r"backend\.name: job 1 has 'auto' and job 0 'numpy'"
    with pytest.raises(ConfigError, match=refused), open_sessions(jobs):
        pass


@pytest.mark.gpu
def test_each_agent_of_a_pack_is_its_run_alone_on_the_gpu(built_cubins: Path) -> None:
    """The same on the cuda backend, past learn_start (each agent replays its own CUDA graph on
    its own stream), in a subprocess: it opens its own backend."""
    base = ["backend=cuda", "debug=tiny", "env.num_envs=256", f"backend.cubin_dir={built_cubins}"]
    in_a_process_of_its_own(f"check_pack_equals_lone({base!r}, steps=40)")


@pytest.mark.gpu
@pytest.mark.parametrize("count", [1, 2, 7, 20])
def test_agents_that_differ_are_each_their_run_alone_on_the_gpu(built_cubins: Path,
                                                               count: int) -> None:  # fmt: skip
    """agents(count) on the cuda backend, past learn_start: each group's kernels launched once
    for all its agents (the agent axis), as one CUDA graph."""
    base = ["backend=cuda", "debug=tiny", "env.num_envs=256", f"backend.cubin_dir={built_cubins}"]
    in_a_process_of_its_own(f"check_pack_equals_lone({base!r}, steps=40, team=agents({count}))")


def sabotage(runtime, kernel: str) -> None:
    """`runtime`'s oracle of `kernel` made wrong (its first float output + 1) for its audits
    only: the launches (numpy's too) keep the oracle bound when the kernel was."""
    real = runtime.oracle

    def oracle(decl):
        fn = real(decl)
        if decl.name != kernel:
            return fn
        out = next(i for i, a in enumerate(decl.args) if a.role == Role.OUT and a.dtype.kind == "f")

        def wrong(*values):
            fn(*values)
            values[out][...] += 1

        return wrong

    runtime.oracle = oracle


def fault(kernel: str, backend):
    """AgentCall.launch that, after `kernel`'s merged launch, makes the device's output wrong for
    the agent of `backend` alone (its first float output's element 0, + 1): a fault in that
    agent's slice."""
    real = AgentCall.launch

    def launch(self, stream):
        real(self, stream)
        for call in self.calls:
            if call.kernel.decl.name != kernel or call.kernel.backend is not backend:
                continue
            decl, be = call.kernel.decl, call.kernel.backend
            out = next(i for i, a in enumerate(decl.args)
                       if a.role == Role.OUT and a.dtype.kind == "f")  # fmt: skip
            host = be.download(call.args[out])
            host.reshape(-1)[0] += 1
            be.write(call.args[out], host)

    return launch


def check_audited_together(base: list[str], steps: int, team: list[list[str]], wrong: int,
                           faulty: int) -> None:  # fmt: skip
    """`team` stepped `steps` times as a pack, then one audited step of all (each group's
    audited kernels read once and launched once for its agents), agent `wrong`'s oracle of
    per_push made wrong and agent `faulty`'s env step written wrong on the device (both of one
    group): every agent's audit checks the kernels its run alone checks, the same number of
    times; only agent `wrong` finds mismatches in per_push and only agent `faulty` in the env
    step; every other agent's state after it is its run alone's after the same audited step."""
    with open_pack([compose_train([*base, *agent]) for agent in team]) as pack:
        for _ in range(steps):
            pack.step()
        sabotage(pack.trainers[wrong].session.runtime, "per_push")
        real = AgentCall.launch
        AgentCall.launch = fault("experience_env_step", pack.trainers[faulty].backend)
        try:
            with ThreadPoolExecutor(2) as judges:
                audits = pack.audited_step(judges)
                found = [(dict(a.mismatches), dict(a.launches), list(a.first)) for a in audits]
        finally:
            AgentCall.launch = real
        packed = [state(t) for t in pack.trainers]
        group = next(lockstep for lockstep in pack.locksteps
                     if pack.trainers[wrong] in lockstep.trainers)  # fmt: skip
        assert pack.trainers[faulty] in group.trainers
        assert all(lockstep.apart is None for lockstep in pack.locksteps)
    expect = {wrong: "per_push", faulty: "experience_env_step"}
    for i, agent in enumerate(team):
        with trainer_for(agent, tuple(base)) as (lone, _):
            for _ in range(steps):
                lone.step()
            audit = lone.audited_step()
            alone = state(lone), dict(audit.launches), dict(audit.mismatches)
            lone.close()
        mismatches, launches, first = found[i]
        assert launches == alone[1] and set(launches) >= {"per_push", "experience_env_step"}
        assert mismatches.keys() == alone[2].keys() and not any(alone[2].values())
        bad = {k for k, v in mismatches.items() if v}
        assert bad == ({expect[i]} if i in expect else set()), f"agent {i}: {mismatches}"
        assert all(f.startswith(f"{expect.get(i)}.") for f in first)
        if i != faulty:
            for key, value in alone[0].items():
                np.testing.assert_array_equal(packed[i][key], value, err_msg=f"agent {i}: {key}")


def test_agents_audited_together_are_each_judged_on_their_own_arrays() -> None:
    check_audited_together(TINY, steps=25, team=agents(5), wrong=1, faulty=4)


@pytest.mark.gpu
def test_agents_audited_together_on_the_gpu(built_cubins: Path) -> None:
    """The same on the cuda backend, past learn_start and after the group's CUDA graph: each
    array of an audited kernel read once for the group (its pool's stretch), the kernel
    launched once with the agent axis, every agent judged on its own slices."""
    base = ["backend=cuda", "debug=tiny", "env.num_envs=256", f"backend.cubin_dir={built_cubins}"]
    in_a_process_of_its_own(f"check_audited_together({base!r}, steps=40, team=agents(7), "
                            "wrong=4, faulty=0)")  # fmt: skip


def in_a_process_of_its_own(call: str) -> None:
    """`call` (of a function of this module) in a fresh Python: it opens its own backend (one
    CUDA context per process)."""
    code = f"from tests.pipeline.test_pack import *\n{call}\n"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]


class Reads(NumpyBackend):
    """The numpy backend, noting the stream of every download and fill."""

    def __init__(self) -> None:
        self.streams: list = []

    def download(self, arr, stream=None):
        self.streams.append(("download", stream))
        return super().download(arr, stream)

    def fill(self, arr, value, stream=None):
        self.streams.append(("fill", stream))
        super().fill(arr, value, stream)


def test_a_runs_reads_and_fills_go_to_its_own_stream_unless_told_another() -> None:
    shared = Reads()
    own = RunBackend(shared, stream="run 0")
    x = own.upload(np.arange(4, dtype=np.float32))
    np.testing.assert_array_equal(own.download(x), np.arange(4))
    own.download(x, stream="another")
    own.fill(x, 2.0)
    np.testing.assert_array_equal(x, 2.0)
    own.fill(x, 0.0, stream="another")
    assert shared.streams == [("download", "run 0"), ("download", "another"), ("fill", "run 0"),
                              ("fill", "another")]  # fmt: skip
    assert own.name == "numpy" and own.is_array(x) and own.describe() == shared.describe()


class Streams(Reads):
    """`Reads` whose every new stream is a new object, as on cuda."""

    def new_stream(self):
        return object()


def test_each_session_of_a_pack_has_its_own_stream_and_reads_after_it(monkeypatch) -> None:
    shared = Streams()
    monkeypatch.setattr("alpha_rl.session.open_backend", lambda *a, **k: (shared, "test"))
    tiny = compose_train([*TINY, "reward.scale=1.0"])
    tiny = (tiny[0], layout_from_config(*tiny))
    with open_sessions([tiny, tiny]) as sessions:
        assert sessions[0].stream is not sessions[1].stream
        for session in sessions:
            assert session.backend.stream is session.stream
            assert session.runtime.backend is session.backend
            assert session.isv.backend is session.backend
            session.isv.read()
            assert shared.streams[-1] == ("download", session.stream)


def test_a_pack_builds_each_market_once_and_shares_it_read_only() -> None:
    cfg, _ = compose_train(TINY)
    validation = plan_run(cfg).validation
    markets = Markets()
    first, again = (markets.load(cfg.market, 0, validation) for _ in range(2))
    other = markets.load(cfg.market, 1, validation)
    assert first is again and other is not first
    alone = load_market(cfg.market, 0, validation)
    np.testing.assert_array_equal(first.train.bid_px, alone.train.bid_px)
    with pytest.raises(ValueError, match="read-only"):
        first.heldout.ask_px[0, 0] = 1.0


@pytest.mark.gpu
def test_a_runs_read_does_not_wait_for_another_runs_queued_work(built_cubins: Path) -> None:
    """Two runs of one pack on cuda: with ~200 steps of run 1 queued on its stream, run 0's
    log-point read returns while run 1 still has work queued (a read on the legacy default
    stream waits for it: every read of a run would drain the whole pack)."""
    base = ["backend=cuda", "debug=tiny", f"backend.cubin_dir={built_cubins}"]
    in_a_process_of_its_own(f"check_reads_after_own_stream({base!r})")


def check_reads_after_own_stream(base: list[str]) -> None:
    jobs = [compose_train([*base, f"seed={s}"]) for s in (0, 1)]
    with open_pack(jobs, agent_axis=False) as pack:  # each run alone, on its own stream
        first, second = pack.trainers
        for _ in range(60):  # both past learn_start, their graphs captured
            pack.step()
        pack.synchronize()
        for _ in range(200):
            second.step()
        first.step()
        first.read_log_point()
        assert not second.stream.is_done(), "run 0's read waited for run 1's queued steps"
        pack.synchronize()
        assert second.stream.is_done()


def packed_jobs(tmp_path: Path, agents: list[list[str]], base: list[str] = TINY) -> list:
    """run_jobs over one pack of `agents` (numpy, debug=tiny, tracked into tmp_path/mlflow.db),
    each in tmp_path/pack<i>."""
    uri = seeded_store(tmp_path / "mlflow.db")
    jobs = []
    for i, agent in enumerate(agents):
        cfg, choices = compose_train([*base, f"tracking.uri={uri}", *agent])
        jobs.append((cfg, Job(tmp_path / f"pack{i}", choices)))
    return run_jobs(jobs)


# evaluation figures of each kind: the agent's ledger (computed by the pack's worker processes),
# the random baseline matched to its turnover, the aux head's calls, the trades and the probe
EVAL_KEYS = ["eval/pnl", "eval/sharpe", "eval/baseline/random/pnl", "eval/aux_accuracy",
             "eval/trades", "eval/capture_ratio", "eval/l_q_probe"]  # fmt: skip


def test_a_packed_run_is_its_run_alone_history_and_parameters(tmp_path: Path, caplog) -> None:
    """Three jobs run as one pack: each its own FINISHED MLflow run and directory, with the l_q
    history, the evaluations' figures and the final parameters of the same job run alone. The
    two of one HER variant are agents of one lockstep, whose steps launch as one."""
    with caplog.at_level(logging.INFO, logger="alpha_rl"):
        packed = packed_jobs(tmp_path, AGENTS)
    assert "3 runs in 2 groups of agents whose shapes agree (2, 1)" in caplog.text
    assert "one agent at a time" not in caplog.text
    groups = [json.loads((o.run_dir / OUTCOME_FILE).read_text())["group"] for o in packed]
    assert [g["agents"] for g in groups] == [2, 2, 1] and not any(g["apart"] for g in groups)
    assert groups[0]["id"] == groups[1]["id"] != groups[2]["id"]
    sweep = tmp_path / "sweep"
    for i, o in enumerate(packed):  # as a sweep's jobs: its last lines say how they stepped
        (sweep / str(i)).mkdir(parents=True)
        shutil.copy(o.run_dir / OUTCOME_FILE, sweep / str(i))
    assert groups_line(sweep) == (
        "launched as 2 groups of agents, each kernel once a step for all of a group (2, 1 agents)"
    )
    assert [o.status for o in packed] == ["FINISHED"] * 3
    assert len({o.run_id for o in packed}) == 3
    for i, agent in enumerate(AGENTS):
        alone = job(tmp_path, agent, f"alone{i}")
        for key in ["loss/l_q", *EVAL_KEYS]:
            got, want = (history(tmp_path, o.run_id, key) for o in (packed[i], alone))
            assert len(got) >= 3 and str(got) == str(want), key  # str: NaN equals NaN
        np.testing.assert_array_equal(theta(packed[i].run_dir), theta(alone.run_dir))
    assert history(tmp_path, packed[0].run_id, "loss/l_q") != history(
        tmp_path, packed[1].run_id, "loss/l_q"
    )


def test_one_diverging_agent_fails_alone_and_the_pack_finishes(tmp_path: Path) -> None:
    """A pack of a run that diverges, one with a bad config and a good one: the first ends FAILED
    with its reason, the second is refused with its ConfigError, the third finishes as it does
    alone."""
    diverging = ["seed=1", "agent.lr=1e30", "agent.grad_clip=0"]
    out = packed_jobs(tmp_path, [diverging, ["eval.num_envs=0"], ["seed=0"]])
    assert out[0].status == "FAILED" and "NaN or infinite" in (out[0].reason or "")
    assert isinstance(out[1], ConfigError) and "eval.num_envs" in str(out[1])
    assert out[2].status == "FINISHED" and out[2].steps == 40
    alone = job(tmp_path, ["seed=0"], "alone")
    np.testing.assert_array_equal(theta(out[2].run_dir), theta(alone.run_dir))


def test_an_agent_of_a_pack_resumes_alone(tmp_path: Path) -> None:
    """A pack stopped at step 20 (steps=20 for both agents); agent 1 resumed alone to 40 equals
    agent 1 run whole alone: a packed run's checkpoint is its own."""
    half = packed_jobs(tmp_path, [["seed=0", "steps=20", ANNEAL], ["seed=1", "steps=20", ANNEAL]])
    assert [o.status for o in half] == ["FINISHED", "FINISHED"]
    resumed = job(tmp_path, ["seed=1", ANNEAL, f"resume={half[1].run_dir}"], "ignored")
    whole = job(tmp_path, ["seed=1", ANNEAL], "whole")
    assert resumed.status == "FINISHED" and resumed.run_id == half[1].run_id
    np.testing.assert_array_equal(theta(resumed.run_dir), theta(whole.run_dir))
    assert history(tmp_path, resumed.run_id, "loss/l_q") == history(
        tmp_path, whole.run_id, "loss/l_q"
    )


def test_a_pack_gets_a_worker_per_run_up_to_its_cpus_but_one() -> None:
    assert [worker_count(runs, cpus=16) for runs in (1, 2, 5, 20)] == [0, 2, 5, 15]
    assert worker_count(3, cpus=2) == 1 and worker_count(3, cpus=1) == 1


def test_a_pack_whose_runs_all_wait_on_helpers_sleeps_until_one_is_done() -> None:
    """Two runs each waiting on a helper's work (0.2 s, one after the other): the pack waits
    for the work instead of advancing the runs in a spin (thousands of advances)."""
    advances: list[int] = []

    def run(i: int, pool: ThreadPoolExecutor):
        yield  # its config; then it is sent its session
        done = pool.submit(time.sleep, 0.2)
        while not done.done():
            advances.append(i)
            yield done
        return i

    with ThreadPoolExecutor(1) as pool:
        live = {i: run(i, pool) for i in (0, 1)}
        for job in live.values():
            next(job)
        results: list = [None, None]
        _drive(live, dict.fromkeys(live), results)
    assert results == [0, 1] and not live
    assert len(advances) <= 10, len(advances)


def test_an_audited_step_judged_in_threads_yields_until_judged() -> None:
    """A pack's audited step (`_step` with judges): the run yields the judgement's Future while
    it runs, then reports every audited kernel, here the oracles against themselves (numpy)."""
    with trainer_for([]) as (trainer, _), ThreadPoolExecutor(1) as judges:
        for _ in range(3):
            trainer.step()
        judges.submit(time.sleep, 0.3)  # busy: the judgements queue behind it
        step = _step(trainer, 4, True, judges)
        waited = []
        while True:
            try:
                waited.append(next(step))
            except StopIteration as done:
                metrics, diag = done.value
                break
    assert waited and all(isinstance(w, Future) for w in waited)
    assert metrics["audit/mismatch"] == 0.0 and metrics["audit/experience_env_step"] == 0.0
    assert diag["audit"]["mismatches"] == {k[len("audit/"):]: 0 for k in metrics
                                           if k != "audit/mismatch"}  # fmt: skip


def test_runs_of_a_group_audited_at_one_step_each_report_their_own_audit() -> None:
    """`_step` audited with a seat: each run yields until the last of its group arrives and its
    judgement is done; the step is launched once for the group, and each run's metrics are its
    own audit's, naming every audited kernel."""
    with open_pack([compose_train([*TINY, *a]) for a in agents(3)[:2]]) as pack:
        for _ in range(3):
            pack.step()
        (lockstep,) = pack.locksteps
        with ThreadPoolExecutor(2) as judges:
            runs = [_step(t, 4, True, judges, SimpleNamespace(arrive=partial(lockstep.arrive, i)))
                    for i, t in enumerate(pack.trainers)]  # fmt: skip
            done: dict[int, tuple] = {}
            while len(done) < len(runs):
                for i, run in enumerate(runs):
                    if i not in done:
                        try:
                            next(run)
                        except StopIteration as end:
                            done[i] = end.value
        assert [t.t for t in pack.trainers] == [4, 4]
    for metrics, diag in done.values():
        assert metrics["audit/mismatch"] == 0.0 and metrics["audit/per_push"] == 0.0
        assert diag["audit"]["mismatches"].keys() >= {"experience_env_step", "her_inject"}


def test_a_broken_helper_pool_leaves_the_work_to_the_pack() -> None:
    """A pool that cannot take work (shut down) or a worker that died (BrokenProcessPool): the
    work is done in the pack's thread, and the run goes on with its result."""
    pool = ThreadPoolExecutor(1)
    pool.shutdown()
    assert submitted(pool, pow, 2, 5).result() == 32
    died: Future = Future()
    died.set_exception(BrokenProcessPool("a worker process was killed"))
    assert outcome(died, pow, 2, 6) == 64
    failed: Future = Future()
    failed.set_exception(ValueError("its own error"))
    with pytest.raises(ValueError, match="its own error"):  # a real error stays the run's
        outcome(failed, pow, 2, 6)


class FakeTrainer:
    """What a Lockstep steps of a trainer: its step recorded (here nothing) and counted."""

    def __init__(self, agent: int, fails_at: int | None = None) -> None:
        self.stream, self.backend = "group", SimpleNamespace(agent=agent)
        self.graph_ready, self.t = False, 0  # numpy's: no graph
        self.fails_at = fails_at

    def record_step(self) -> list:
        if self.t == self.fails_at:
            raise RuntimeError("the step failed")
        return []


def test_a_step_that_fails_when_a_run_leaves_fails_its_group_alone() -> None:
    """Runs 0 and 1 step together, run 2 in a group of its own. Run 0 ends after 3 steps; its
    leaving launches the round run 1 waits in, whose step fails: run 1 fails with that error,
    run 0 and run 2 end as they would, and the pack returns every result."""
    trainers = {0: FakeTrainer(0), 1: FakeTrainer(1, fails_at=3)}

    def run(i: int, steps: int):
        _, seat = yield
        trainer = trainers.get(i) or FakeTrainer(0)
        seat.join(trainer)
        while trainer.t < steps:
            yield from seat.arrive()
            yield
        return i, trainer.t

    live = {0: run(0, 3), 1: run(1, 10), 2: run(2, 20)}
    for started in live.values():
        next(started)
    results: list = [None] * 3
    _drive(live, dict.fromkeys(live), results, seats([0, 1, 2], ["a", "a", "b"]))
    assert results[0] == (0, 3) and results[2] == (2, 20)
    assert isinstance(results[1], RuntimeError) and str(results[1]) == "the step failed"


def test_runs_that_differ_in_numbers_and_seed_share_a_group_and_a_shape_does_not() -> None:
    """group_key: seeds and numbers (a learning rate, a HER threshold) leave the key alone; a
    HER variant changes it, and so does a number that sets a shape through an interpolation
    (walk-forward validation's lookahead follows her.lookahead: the folds' lengths)."""
    base = [*TINY, "her=forward", "validation=walk_forward"]
    key = lambda *o: group_key(compose_train([*base, *o])[0])  # noqa: E731
    assert key("seed=1", "agent.lr=0.001") == key("seed=2", "her.threshold=2.0")
    assert key() != key("her=backward")
    assert key("her.lookahead=20") != key("her.lookahead=80")
