"""The memory estimate matches what a run allocates, and a run that does not fit is refused."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from alpha_rl import portable
from alpha_rl.agent import NetLayout, init_params
from alpha_rl.backend.numpy import NumpyBackend
from alpha_rl.errors import ConfigError
from alpha_rl.pipeline.configure import memory
from alpha_rl.pipeline.configure.config import plan_run, with_market
from alpha_rl.pipeline.configure.parts import layout_from_plan
from alpha_rl.pipeline.configure.scale import market_and_config
from alpha_rl.pipeline.evaluation.evaluate import Evaluator
from alpha_rl.pipeline.step.trainer import Trainer
from alpha_rl.reference.dqn import dqn_adam
from alpha_rl.reference.experience import start_ticks
from alpha_rl.session import open_session
from tests.helpers import compose_train

TINY = ["backend=numpy", "debug=tiny"]


def _book_uploads(book, history: int) -> int:
    """What one Environment uploads of its book (not in the estimate: see
    pipeline/configure/memory.py)."""
    last = book.session_last()
    return (4 * book.T * book.L * 4 + book.session_first().nbytes + last.nbytes
            + start_ticks(last, history).nbytes)  # fmt: skip


@pytest.mark.parametrize(
    "overrides",
    [[], ["her=forward", "agent=rainbow", "alpha='off'"], ["alpha='on'", "agent.dueling=true"],
     ["her='off'", "agent=dqn_nstep3", "env.perception.projection=false"],
     ["agent=dqn_c51", "env.num_envs=300", "her.closed_ring=512", "replay.batch_size=300",
      "eval.probe.size=600"]],
)  # fmt: skip
def test_the_estimate_is_what_a_run_allocates(monkeypatch: pytest.MonkeyPatch,
                                              overrides: list[str]) -> None:  # fmt: skip
    allocated = []
    for name in ("zeros", "alloc", "upload"):
        method = getattr(NumpyBackend, name)
        monkeypatch.setattr(NumpyBackend, name, lambda self, *a, _m=method: allocated.append(
            _m(self, *a)) or allocated[-1])  # fmt: skip
    cfg, choices = compose_train([*TINY, *overrides])
    plan = plan_run(cfg)
    market, cfg = market_and_config(cfg, plan.run.seed, plan.validation)
    plan = with_market(plan, cfg)  # reward.scale from the market
    with open_session(cfg, layout_from_plan(cfg, choices, plan)) as session:
        trainer = Trainer(session, market.train, plan)
        Evaluator(session, market.heldout, plan, trainer.learner)
    history = max(plan.env.perception.horizons)
    books = _book_uploads(market.train, history) + 2 * _book_uploads(market.heldout, history)
    probe = plan.eval.probe
    actions = probe.steps * probe.envs * 4  # the probe's per-step action uploads, let go at once
    est = memory.estimate(plan, int(cfg.isv.size))
    assert sum(a.nbytes for a in allocated) - books - actions == est.device
    assert (est.arrays["HER"] > 0) == (plan.her is not None)
    assert (est.arrays["n-step rings"] > 0) == (plan.agent.n_step > 1)


def test_the_initialisation_and_adam_peaks_per_parameter_stay_below_the_estimates() -> None:
    layout = NetLayout.build(32, (300, 300), 3, False)
    tracemalloc.start()
    init_params(layout, 0)
    _, init_peak = tracemalloc.get_traced_memory()
    n = layout.size
    grad, m, v, param, target = (np.full(n, 0.5, np.float32) for _ in range(5))
    counters, stats = np.array([3, 0, 0, 0], np.uint64), np.array([5.0], np.float32)
    held = tracemalloc.get_traced_memory()[0]  # the arrays above: the run's own, not transient
    tracemalloc.reset_peak()
    numbers = np.float32([1e-3, 0.9, 0.999, 1e-8, 1.0, 0.0, 1000])  # ADAM_NUMBERS' order
    dqn_adam(grad, stats, counters, numbers, param, m, v, target, n, 0)
    adam_peak = tracemalloc.get_traced_memory()[1] - held
    tracemalloc.stop()
    assert 0.8 * memory.INIT_BYTES_PER_PARAM < init_peak / n <= memory.INIT_BYTES_PER_PARAM
    assert 0.7 * memory.ADAM_BYTES_PER_PARAM < adam_peak / n <= memory.ADAM_BYTES_PER_PARAM


def _peak_above(run) -> int:
    """Bytes `run()` held at its peak above what was held before it (tracemalloc running)."""
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    run()
    return tracemalloc.get_traced_memory()[1] - held


@pytest.mark.parametrize(
    ("overrides", "largest"),
    [([], "env step"),
     (["agent.hidden=[512,512]"], "weight gradient"),
     (["replay.capacity_log2=17"], "tree rebuild"),
     (["agent.hidden=[256]", "env.num_envs=1024", "her.closed_ring=1024",
       "replay.capacity_log2=12"], "env step"),
     (["agent=rainbow", "env.perception.hidden_dim=64"], "env step")],
)  # fmt: skip
def test_a_run_s_host_peak_on_numpy_stays_below_its_estimate(overrides: list[str],
                                                             largest: str) -> None:  # fmt: skip
    cfg, choices = compose_train([*TINY, "agent.learn_start=3", *overrides])
    plan = plan_run(cfg)
    market, cfg = market_and_config(cfg, plan.run.seed, plan.validation)
    plan = with_market(plan, cfg)  # reward.scale from the market
    with open_session(cfg, layout_from_plan(cfg, choices, plan)) as session:
        trainer = Trainer(session, market.train, plan)
        evaluator = Evaluator(session, market.heldout, plan, trainer.learner)
        portable.release()  # the products' scratch is made again inside the steps measured
        tracemalloc.start()
        measured = max([_peak_above(trainer.step) for _ in range(6)] + [_peak_above(evaluator.run)])
        tracemalloc.stop()
    oracles = {k: v for k, v in memory.estimate(plan, int(cfg.isv.size)).peaks.items()
               if k != "initialisation"}  # measured above  # fmt: skip
    assert max(oracles, key=lambda k: oracles[k]) == largest
    assert measured <= max(oracles.values()) <= 2 * measured


@pytest.mark.parametrize(
    ("overrides", "available", "says"),
    [(["replay.capacity_log2=30"], "2 GiB",
      r"\(replay [0-9.]+ GiB.*lower replay\.capacity_log2=30$"),
     (["agent.hidden=[100000,100000]"], "2 GiB",
      r"\(peak of the initialisation [0-9.]+ GiB, networks .*lower agent\.hidden=\[100000, "
      r"100000\]$"),
     (["her.lookahead=10000000"], "2 GiB",  # the auto ring: 8 envs x 10,000,001 -> 2^27
      r"\(HER [0-9.]+ GiB.*lower her\.lookahead=10000000 or env\.num_envs=8 "
      r"\(her\.closed_ring=auto: 134217728 slots\), or a fixed her\.closed_ring below it$"),
     (["eval.num_envs=20000"], "0.00098 GiB",  # a product over 20,000 rows, then the records
      r"\(peak of the env step [0-9.]+ GiB, evaluation .*lower env\.num_envs=\d+, "
      r"eval\.num_envs=20000 or agent\.hidden=\[16\]$")],
)  # fmt: skip
def test_a_run_the_host_cannot_hold_is_refused_naming_the_key(
    monkeypatch: pytest.MonkeyPatch, overrides: list[str], available: str, says: str
) -> None:
    free = int(float(available.split()[0]) * memory.GIB) + 1
    monkeypatch.setattr(memory, "host_available", lambda: free)
    cfg, _ = compose_train([*TINY, *overrides])
    with pytest.raises(ConfigError, match=r"^the run needs about [0-9.e-]+ GiB of host memory "
                                          r"\(numpy backend\) " + says) as caught:  # fmt: skip
        plan_run(cfg)
    assert f"but {available} is available" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_run_that_fits_passes_and_reports_its_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, _ = compose_train(TINY)
    est = memory.check_memory(plan_run(cfg), int(cfg.isv.size))
    monkeypatch.setattr(memory, "host_available", lambda: est.host_numpy - 1)
    with pytest.raises(ConfigError, match="of host memory"):
        plan_run(cfg)
    monkeypatch.setattr(memory, "host_available", lambda: est.host_numpy)
    plan_run(cfg)


def test_the_cuda_backend_is_checked_against_the_device_and_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from alpha_rl.backend import cuda

    cfg, _ = compose_train([*TINY, "backend=cuda"])
    asked = []
    monkeypatch.setattr(cuda, "free_device_memory", lambda device: asked.append(device) or 1024)
    with pytest.raises(ConfigError, match=r"of CUDA device 0's memory \(.*but 9\.54e-07 GiB"):
        plan_run(cfg)
    assert asked == [0]
    monkeypatch.setattr(cuda, "free_device_memory", lambda device: 2**40)
    monkeypatch.setattr(memory, "host_available", lambda: 1024)
    with pytest.raises(ConfigError, match=r"of host memory to initialise the parameters "
                                          r"\(initialisation "):  # fmt: skip
        plan_run(cfg)


def test_the_room_under_a_cgroup_limit_caps_the_host_memory_available(tmp_path: Path) -> None:
    # cgroup v2: a SLURM job's --mem at the job level, a looser limit above it
    root = tmp_path / "v2"
    job = root / "slurm" / "job_7"
    job.mkdir(parents=True)
    (root / "slurm" / "memory.max").write_text("68719476736\n")  # 64 GiB
    (root / "slurm" / "memory.current").write_text("1073741824\n")
    (job / "memory.max").write_text("8589934592\n")  # 8 GiB
    (job / "memory.current").write_text("2147483648\n")  # 2 GiB used
    proc = tmp_path / "cgroup"
    proc.write_text("0::/slurm/job_7\n")
    assert memory.cgroup_room(proc, root) == 6 * 2**30
    (job / "memory.max").write_text("max\n")  # no limit of its own: the one above counts
    assert memory.cgroup_room(proc, root) == 63 * 2**30
    # cgroup v1, no limit (what v1 writes for none): no room figure at all
    v1 = tmp_path / "v1" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (v1 / "memory.usage_in_bytes").write_text("3878297600\n")
    proc.write_text("4:memory:/process_api/e68a\n0::/\n")
    assert memory.cgroup_room(proc, tmp_path / "v1") is None
    (v1 / "memory.limit_in_bytes").write_text("5000000000\n")  # a container's limit
    assert memory.cgroup_room(proc, tmp_path / "v1") == 5_000_000_000 - 3_878_297_600
