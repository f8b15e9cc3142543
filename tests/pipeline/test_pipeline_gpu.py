"""The pipeline on the cuda backend. Each job runs in a subprocess of its own: the test session
holds its own CUDA context, and one process opens one cuda backend at a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from alpha_rl.pipeline.life import checkpoint

pytestmark = pytest.mark.gpu

SMALL = ["backend=cuda", "debug=tiny", "env.num_envs=256", "steps=60"]


def run(tmp_path: Path, cubins: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    cmd = [sys.executable, "-m", "alpha_rl.train", *args, f"backend.cubin_dir={cubins}",
           f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"]  # fmt: skip
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def diag(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "diag.jsonl").read_text().splitlines()]


def test_audited_cuda_run_matches_the_oracles(tmp_path: Path, built_cubins: Path) -> None:
    run(tmp_path, built_cubins, *SMALL, "audit.every=10", "hydra.run.dir=out")
    lines = [x for x in diag(tmp_path / "out") if "audit" in x]
    assert [x["step"] for x in lines] == [10, 20, 30, 40, 50, 60]
    for line in lines:
        assert line["metrics"]["audit/mismatch"] == 0, line["audit"]
        audited = set(line["audit"]["mismatches"])
        assert {"experience_env_step", "per_push", "her_track", "her_inject", "her_forward"} <= (
            audited
        )
    assert diag(tmp_path / "out")[-1]["hindsight"]["inject_total"] > 0


def test_a_tf32_run_is_audited_within_its_bound(tmp_path: Path, built_cubins: Path) -> None:
    """agent.precision=tf32: every TF32 product of the audited steps (acting forward, the
    paired online/target forward, the input gradients) within its bound of the oracle; the
    run's l_q is not fp32's bit for bit but close to it at the first update's log point."""
    run(tmp_path, built_cubins, *SMALL, "agent.precision=tf32", "audit.every=10",
        "hydra.run.dir=tf32")  # fmt: skip
    run(tmp_path, built_cubins, *SMALL, "hydra.run.dir=fp32")
    lines = [x for x in diag(tmp_path / "tf32") if "audit" in x]
    assert [x["step"] for x in lines] == [10, 20, 30, 40, 50, 60]
    for line in lines:  # the update's paired forward from step 11 (agent.learn_start=10)
        assert line["metrics"]["audit/mismatch"] == 0, line["audit"]
        tf32 = {"mlp_gemm_tf32_32", *(["mlp_gemm_tf32_pair"] if line["step"] > 10 else [])}
        assert tf32 <= set(line["audit"]["mismatches"]), line["audit"]
    l_q = lambda d: [x["metrics"]["loss/l_q"] for x in diag(tmp_path / d)  # noqa: E731
                     if "loss/l_q" in x["metrics"]]  # fmt: skip
    tf32, fp32 = l_q("tf32"), l_q("fp32")
    assert len(tf32) == len(fp32) >= 5 and np.isfinite(tf32).all() and tf32 != fp32
    assert tf32[0] == pytest.approx(fp32[0], rel=1e-2)


def test_cuda_resume_equals_an_unbroken_run(tmp_path: Path, built_cubins: Path) -> None:
    anneal = "replay.beta_anneal_updates=49"  # the 60-step run's own: the halves share it
    run(tmp_path, built_cubins, *SMALL, anneal, "hydra.run.dir=whole")
    run(tmp_path, built_cubins, *SMALL, anneal, "steps=30", "hydra.run.dir=half")
    run(tmp_path, built_cubins, *SMALL, anneal, f"resume={tmp_path / 'half'}",
        "hydra.run.dir=ignored")  # fmt: skip
    l_q = lambda d: [(x["step"], x["metrics"].get("loss/l_q")) for x in diag(tmp_path / d)]  # noqa: E731
    assert l_q("half") == l_q("whole")


def test_l_q_by_source_on_cuda(tmp_path: Path, built_cubins: Path) -> None:
    """her='off': l_q_real is l_q bit for bit at every log point; with HER the synthetic rows of
    a batch get their own loss. The probe is the same bytes in both runs."""
    run(tmp_path, built_cubins, *SMALL, "her='off'", "hydra.run.dir=off")
    run(tmp_path, built_cubins, *SMALL, "hydra.run.dir=on")
    points = [x["metrics"] for x in diag(tmp_path / "off") if "loss/l_q" in x["metrics"]]
    assert len(points) == 10
    for m in points:
        assert m["loss/l_q_real"] == m["loss/l_q"] and "loss/l_q_synthetic" not in m
        assert m["replay/batch_synthetic_frac"] == 0.0
    her = [x["metrics"] for x in diag(tmp_path / "on") if "loss/l_q_synthetic" in x["metrics"]]
    assert her and all(0 < m["replay/batch_synthetic_frac"] < 1 for m in her)
    assert all(min(m["loss/l_q_real"], m["loss/l_q_synthetic"]) <= m["loss/l_q"] for m in her)
    evals = [x["metrics"] for x in diag(tmp_path / "off") if "eval/l_q_probe" in x["metrics"]]
    assert evals and all(np.isfinite(m["eval/l_q_probe"]) for m in evals)
    from mlflow.tracking import MlflowClient

    store = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    runs = store.search_runs([store.get_experiment_by_name("alpha_rl").experiment_id])
    digests = {r.data.tags["her"]: r.data.tags["probe_digest"] for r in runs}
    assert len(digests) == 2 and digests["on"] == digests["off"]


@pytest.mark.parametrize(
    "variant",
    [[], ["agent=rainbow"], ["alpha='on'", "beta=active_controller"], ["agent.precision=tf32"]],
    ids=["dqn", "rainbow", "alpha_controller", "tf32"],
)
def test_graph_replay_equals_kernel_by_kernel_launches(
    tmp_path: Path, built_cubins: Path, variant: list[str]
) -> None:
    # rainbow: the noise of each act call and update is drawn from counters on the device;
    # alpha and the controller: w_α and w_aux_align live on the device too
    over = [*SMALL, *variant]
    run(tmp_path, built_cubins, *over, "backend.graph=false", "hydra.run.dir=eager")
    run(tmp_path, built_cubins, *over, "backend.graph=true", "hydra.run.dir=graph")
    l_q = lambda d: [(x["step"], x["metrics"].get("loss/l_q")) for x in diag(tmp_path / d)]  # noqa: E731
    assert len(l_q("graph")) == 12 and l_q("graph") == l_q("eager")
    # the evaluation: one CUDA graph of its every step against its kernels launched one by one
    evals = {d: [json.dumps({k: v for k, v in x["metrics"].items() if k.startswith("eval/")},
                            sort_keys=True) for x in diag(tmp_path / d)]
             for d in ("eager", "graph")}  # fmt: skip
    assert sum("eval/pnl" in e for e in evals["graph"]) >= 1 and evals["graph"] == evals["eager"]
    theta = [np.load(checkpoint.latest(tmp_path / d) / "state.npz")["learner.theta"]
             for d in ("eager", "graph")]  # fmt: skip
    np.testing.assert_array_equal(*theta)


def test_alpha_on_at_lr_zero_trains_bit_for_bit_as_alpha_off_on_cuda(
    tmp_path: Path, built_cubins: Path
) -> None:
    run(tmp_path, built_cubins, *SMALL, "hydra.run.dir=off")
    run(tmp_path, built_cubins, *SMALL, "alpha='on'", "alpha.lr=0", "alpha.init=0",
        "hydra.run.dir=on")  # fmt: skip
    l_q = lambda d: [(x["step"], x["metrics"].get("loss/l_q")) for x in diag(tmp_path / d)]  # noqa: E731
    assert len(l_q("on")) == 12 and l_q("on") == l_q("off")
    theta = [np.load(checkpoint.latest(tmp_path / d) / "state.npz")["learner.theta"]
             for d in ("off", "on")]  # fmt: skip
    np.testing.assert_array_equal(*theta)


def test_stride6_and_stride7_sentinel_train_identically_on_cuda(
    tmp_path: Path, built_cubins: Path
) -> None:
    """The seventh reward component at its β sentinel changes nothing on the GPU either."""
    dirs = {"stride6": "s6", "stride7_sentinel": "s7", "stride7_active": "s7a"}
    keep_all = "replay.capacity_log2=14"  # 256 envs x 60 steps: every transition stays stored
    for variant, d in dirs.items():
        run(tmp_path, built_cubins, *SMALL, keep_all, f"reward_variant={variant}",
            f"hydra.run.dir={d}")  # fmt: skip
    l_q = lambda d: [(x["step"], x["metrics"].get("loss/l_q")) for x in diag(tmp_path / d)]  # noqa: E731
    assert len(l_q("s6")) == 12 and l_q("s6") == l_q("s7")
    state = {d: np.load(checkpoint.latest(tmp_path / d) / "state.npz") for d in dirs.values()}
    for key in ("learner.theta", "replay.s_reward"):
        np.testing.assert_array_equal(state["s6"][key], state["s7"][key], err_msg=key)
    # active β pays c6 at some closes: the stored rewards differ (whether a batch happens to
    # sample one of those few rows within 60 steps is chance, so theta is not the check)
    differ = state["s6"]["replay.s_reward"] != state["s7a"]["replay.s_reward"]
    assert differ.any(), "active β should change the rewards the learner trains on"


SCRIPT = """
import sys
from hydra import compose, initialize_config_dir
import pycuda.driver as drv
from alpha_rl import paths
from alpha_rl.pipeline.life.run import Job, run_job
overrides = sys.argv[2:]
with initialize_config_dir(config_dir=str(paths.conf_dir()), version_base="1.3"):
    for n, her in enumerate(["on", "off"]):
        cfg = compose("train", overrides=[*overrides, f"her={her}"], return_hydra_config=True)
        out = run_job(cfg, Job(__import__("pathlib").Path(sys.argv[1]) / str(n),
                               dict(cfg.hydra.runtime.choices)))
        assert out.status == "FINISHED", out
        assert drv.Context.get_current() is None, "a CUDA context outlived its job"
print("two jobs, no context left behind")
"""


def test_jobs_in_one_process_leave_no_cuda_context(tmp_path: Path, built_cubins: Path) -> None:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    args = [*SMALL, f"backend.cubin_dir={built_cubins}",
            f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"]  # fmt: skip
    cmd = [sys.executable, "-c", textwrap.dedent(SCRIPT), str(tmp_path), *args]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "no context left behind" in done.stdout


OBSERVE = """
import sys
import numpy as np
from alpha_rl.pipeline.configure.config import plan_run, with_market
from alpha_rl.pipeline.configure.parts import layout_from_plan
from alpha_rl.pipeline.configure.scale import market_and_config
from alpha_rl.pipeline.step.trainer import Trainer
from alpha_rl.session import open_session
from tests.helpers import compose_train
cfg, choices = compose_train(sys.argv[1:])
plan = plan_run(cfg)
market, cfg = market_and_config(cfg, plan.run.seed, plan.validation)
plan = with_market(plan, cfg)  # reward.scale from the market
with open_session(cfg, layout_from_plan(cfg, choices, plan)) as session:
    trainer = Trainer(session, market.train, plan)
    be = trainer.backend
    fresh = be.zeros(trainer.h_t.size, np.float32)
    for _ in range(3):  # the first step observes; the second is captured, the third replayed
        trainer.step()
        be.synchronize()
        trainer.env.perceive(fresh)  # what the next step's h_t must be
        want = be.download(fresh)
        assert np.array_equal(be.download(trainer.h_tp1), want), "h_tp1 is not the observation"
    assert trainer.graph is not None, "no graph captured"
    trainer.step()  # replayed: its h_t is the copy of the last h_tp1
    be.synchronize()
    assert np.array_equal(be.download(trainer.h_t), want), "the graph's copy is not h_tp1"
    trainer.restore_host_state({"t": trainer.t, "her_seen": {"backward": 0, "forward": 0}}, False)
    assert trainer.graph is None and not trainer.observed, "a restore keeps the captured step"
    trainer.close()
print("h_t from the last h_tp1, in the graph too; a restore drops the graph")
"""


def test_the_graph_copies_h_tp1_into_h_t_and_a_restore_drops_it(
    tmp_path: Path, built_cubins: Path
) -> None:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    args = ["backend=cuda", "debug=tiny", "env.num_envs=256",
            "agent.learn_start=0", f"backend.cubin_dir={built_cubins}"]  # fmt: skip
    cmd = [sys.executable, "-c", textwrap.dedent(OBSERVE), *args]
    root = Path(__file__).resolve().parents[2]  # `tests.helpers` imports from the repository
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "a restore drops the graph" in done.stdout


def test_a_cuda_run_logs_the_gpus_system_metrics(tmp_path: Path, built_cubins: Path) -> None:
    """tracking.system_metrics defaults to on for cuda runs: each GPU's utilisation and memory
    (nvidia-ml-py) beside the CPU's, one step per sample."""
    from mlflow.tracking import MlflowClient

    run(tmp_path, built_cubins, *SMALL, "steps=600", "tracking.system_metrics_interval_s=0.2")
    store = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    (one,) = store.search_runs([store.get_experiment_by_name("alpha_rl").experiment_id])
    keys = set(one.data.metrics)
    assert {"system/gpu_0_utilization_percentage", "system/gpu_0_memory_usage_megabytes",
            "system/cpu_utilization_percentage"} <= keys, sorted(keys)  # fmt: skip
    assert one.data.metrics["system/gpu_0_memory_usage_megabytes"] > 0
