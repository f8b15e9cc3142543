"""Sweeps beyond one process: local_gpus (joblib workers, a GPU each), submitit's local executor,
the SLURM preset, and the GPU slots the local_gpus jobs take."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from hydra_plugins.hydra_submitit_launcher import submitit_launcher
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from alpha_rl import paths
from alpha_rl.errors import BackendError, ConfigError
from alpha_rl.launch import LAUNCHER, NO_GPU, GpuSlot, gpu_slot, slots_dir_of, visible_gpus
from hydra_plugins.alpha_rl_launcher.local_gpus import LocalGpusLauncher
from hydra_plugins.alpha_rl_launcher.packed import (
    PackedLauncher,
    mps_daemon,
    received,
    require_mps,
    sendable,
    split,
)
from hydra_plugins.alpha_rl_launcher.slurm import SETUP_TRAP, guarded
from tests.pipeline.test_cli import nested_sweep_runs, train

SWEEP = ["-m", "experiment=her_ablation", "steps=60", "hydra.sweep.dir=multirun/sweep"]


@pytest.mark.slow
def test_local_gpus_sweep_without_a_gpu_runs_every_job_on_numpy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU, even on a GPU machine
    done = train(tmp_path, *SWEEP, "hydra/launcher=local_gpus", "hydra.launcher.n_jobs=2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Joblib.Parallel(n_jobs=2" in done.stdout + done.stderr
    children = nested_sweep_runs(tmp_path)
    assert {r.data.tags["gpu_slot"] for r in children} == {NO_GPU}
    assert {r.data.tags["backend"] for r in children} == {"numpy"}


@pytest.mark.slow
def test_submitit_local_sweep(tmp_path: Path) -> None:
    done = train(tmp_path, *SWEEP, "hydra/launcher=submitit_local")
    assert done.returncode == 0, done.stderr[-3000:]
    nested_sweep_runs(tmp_path)
    assert list((tmp_path / "multirun" / "sweep" / ".submitit").iterdir())  # submitit's job dirs


def test_slurm_preset_composes_for_submitit() -> None:
    with initialize_config_dir(config_dir=str(paths.conf_dir()), version_base="1.3"):
        cfg = compose("train", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_ == "hydra_plugins.alpha_rl_launcher.slurm.SlurmLauncher"
    assert (launcher.partition, launcher.gpus_per_node, launcher.timeout_min) == ("gpu", 1, 120)
    made = instantiate(launcher)  # submitit's launcher underneath (by name: Hydra's plugin scan
    # may have imported its module a second time, as another class object)
    bases = [(c.__module__, c.__name__) for c in type(made).__mro__[1:]]
    assert (submitit_launcher.__name__, "SlurmLauncher") in bases
    assert made.params["setup"] == [SETUP_TRAP, "source .venv/bin/activate", "trap - ERR"]


def test_the_first_setup_line_that_fails_ends_the_job_naming_it(tmp_path: Path) -> None:
    """The lines as submitit writes them into the sbatch script, run by bash."""
    lines = guarded(["echo ready", "source ./absent/bin/activate", "echo never"])
    script = tmp_path / "job.sh"
    script.write_text("\n".join(["#!/bin/bash", *lines, "echo the job ran"]) + "\n")
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 1 and done.stdout == "ready\n"
    assert done.stderr.splitlines()[-1] == (
        "alpha_rl: a setup line failed (exit 1): source ./absent/bin/activate"
    )
    # after the setup a failing command is the job's own business again
    script.write_text("\n".join(["#!/bin/bash", *guarded(["true"]), "false", "echo on"]) + "\n")
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (0, "on\n")


def test_local_gpus_launches_a_worker_per_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,7")
    assert visible_gpus() == [0, 1, 2]  # CUDA's ordinals inside this process
    assert LocalGpusLauncher(n_jobs=None).joblib["n_jobs"] == 3
    assert LocalGpusLauncher(n_jobs=5).joblib["n_jobs"] == 5
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert LocalGpusLauncher(n_jobs=None).joblib["n_jobs"] == 1


def test_gpu_slots_are_exclusive_and_queue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    slots = tmp_path / "slots"
    joblib = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
    with gpu_slot(joblib, tmp_path, slots) as s:
        assert s is None  # other launchers: no slot, no tag
    with gpu_slot(LAUNCHER, None, slots) as s:
        assert s is None  # not a sweep
    got: list[GpuSlot | None] = []

    def third() -> None:  # a job of another sweep on the same machine
        with gpu_slot(LAUNCHER, tmp_path / "other_sweep", slots, poll_s=0.05) as s:
            got.append(s)

    with gpu_slot(LAUNCHER, tmp_path, slots) as a, gpu_slot(LAUNCHER, tmp_path, slots) as b:
        assert {a.ordinal, b.ordinal} == {0, 1} and a.tag in ("0", "1")
        waiter = threading.Thread(target=third)
        waiter.start()
        time.sleep(0.3)
        assert got == [], "a third job must wait while both GPUs are held"
    waiter.join(timeout=10)
    assert got and got[0].ordinal in (0, 1)
    assert sorted(p.name for p in slots.iterdir()) == ["gpu-0.lock", "gpu-1.lock"]
    assert slots.stat().st_mode & 0o1777 == 0o1777  # every user's sweeps share it
    # the lock is the GPU's, not the ordinal's: GPU 1 seen as ordinal 0 by another sweep
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with gpu_slot(LAUNCHER, tmp_path, slots) as a:
        assert a.ordinal == 0
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
        with gpu_slot(LAUNCHER, tmp_path, slots) as b:
            assert b.ordinal == 0  # GPU 0: GPU 1 is held
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with gpu_slot(LAUNCHER, tmp_path, slots) as s:
        assert s == GpuSlot(None) and s.tag == NO_GPU
    monkeypatch.setenv("ALPHA_RL_GPU_SLOTS", str(tmp_path / "from_env"))
    assert slots_dir_of(None) == tmp_path / "from_env" and slots_dir_of(slots) == slots


@pytest.mark.slow
def test_two_sweeps_started_together_never_share_a_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two local_gpus sweeps on one machine with two (pretend) GPUs, two workers each: every run
    holds its GPU from its start to its end, so no two runs tagged with one GPU overlap."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")  # the runs use the numpy backend
    slots = tmp_path / "slots"
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    procs = []
    for k in (0, 1):  # each sweep its own store, both at once
        (tmp_path / f"m{k}").mkdir()
        cmd = [sys.executable, "-m", "alpha_rl.train", *SWEEP, "debug=tiny", "backend=numpy",
               f"tracking.uri=sqlite:///{tmp_path}/m{k}/mlflow.db", "hydra/launcher=local_gpus",
               "hydra.launcher.n_jobs=2", f"hydra.launcher.slots_dir={slots}"]  # fmt: skip
        procs.append(subprocess.Popen(cmd, cwd=tmp_path / f"m{k}", env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))  # fmt: skip
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
    runs = [r for k in (0, 1) for r in nested_sweep_runs(tmp_path / f"m{k}")]
    assert len(runs) == 8 and {r.data.tags["gpu_slot"] for r in runs} == {"0", "1"}
    for gpu in ("0", "1"):
        held = sorted((r.info.start_time, r.info.end_time) for r in runs
                      if r.data.tags["gpu_slot"] == gpu)  # fmt: skip
        for (_, end), (start, _) in itertools.pairwise(held):
            assert end <= start, f"two runs held GPU {gpu} at once"


def l_q_by_job(tmp_path: Path) -> dict[tuple[str, str], list]:
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    out = {}
    for run in nested_sweep_runs(tmp_path):
        points = client.get_metric_history(run.info.run_id, "loss/l_q")
        out[run.data.tags["her"], run.data.tags["seed"]] = sorted((p.step, p.value) for p in points)
    return out


@pytest.mark.slow
def test_a_packed_sweep_gives_each_job_its_own_run_as_the_basic_launcher_does(
    tmp_path: Path,
) -> None:
    """her_ablation's four jobs in packs of at most 3 (two packs: HER on and off share the
    first), and in two packs of two run at once in processes of their own: the same nested
    runs, each with the l_q history of the same job under the basic launcher."""
    packed, apart, basic = tmp_path / "packed", tmp_path / "apart", tmp_path / "basic"
    packed.mkdir(), apart.mkdir(), basic.mkdir()
    done = train(packed, *SWEEP, "hydra/launcher=packed", "hydra.launcher.agents=3")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "4 jobs in 2 pack(s) of at most 3 runs" in done.stdout + done.stderr
    done = train(apart, *SWEEP, "hydra/launcher=packed", "hydra.launcher.processes=2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "4 jobs in 2 pack(s) of at most 20 runs, 2 at a time" in done.stdout + done.stderr
    assert "4 jobs: 4 FINISHED" in done.stdout + done.stderr
    assert train(basic, *SWEEP).returncode == 0
    want = l_q_by_job(basic)
    assert all(len(v) == 10 for v in want.values())
    assert l_q_by_job(packed) == want and l_q_by_job(apart) == want


def test_a_pack_of_no_runs_or_no_processes_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"hydra\.launcher\.agents=0"):
        PackedLauncher(agents=0)
    with pytest.raises(ConfigError, match=r"hydra\.launcher\.processes=True"):
        PackedLauncher(processes=True)
    with pytest.raises(ConfigError, match=r"hydra\.launcher\.mps='yes': true or false"):
        PackedLauncher(processes=2, mps="yes")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"set hydra\.launcher\.processes >= 2"):
        PackedLauncher(mps=True)


def entries(*backends: str) -> list:
    """(index, cfg, job) as the launcher prepares them, one per backend name given."""
    return [(i, OmegaConf.create({"backend": {"name": b, "device": 0}}), f"job{i}")
            for i, b in enumerate(backends)]  # fmt: skip


@pytest.mark.parametrize(
    ("agents", "processes", "sizes"),
    [(20, 1, [5, 2]), (3, 1, [3, 2, 2]), (20, 2, [3, 1, 2, 1]), (2, 2, [2, 1, 2, 1, 1]),
     (20, 9, [1, 1, 1, 1, 1, 1, 1])],
)  # fmt: skip
def test_packs_split_each_backends_jobs_into_at_least_processes_packs_taking_turns(
    agents: int, processes: int, sizes: list[int]
) -> None:
    ready = entries(*["numpy"] * 5, *["cuda"] * 2)
    packs = split(ready, agents, processes)
    assert [len(p) for p in packs] == sizes
    assert sorted((e for p in packs for e in p), key=lambda e: e[0]) == ready  # each job once
    assert all(len({e[1].backend.name for e in p}) == 1 for p in packs)
    names = [p[0][1].backend.name for p in packs]
    assert names[:2] == ["numpy", "cuda"]  # the backends take turns


def test_jobs_of_one_shape_share_a_pack_and_differ_only_in_numbers_and_seed() -> None:
    """A sweep over a HER variant and seeds, its jobs interleaved: each pack holds jobs of one
    shape (agents of one launch); the seeds and numbers (her.threshold) do not split them."""
    ready = [(i, OmegaConf.create({"backend": {"name": "cuda", "device": 0}, "seed": i,
                                   "her": {"forward": i % 2 == 0, "threshold": 1.0 + i}}),
              f"job{i}") for i in range(6)]  # fmt: skip
    packs = split(ready, 20, 2)
    assert [[e[0] for e in p] for p in packs] == [[0, 2, 4], [1, 3, 5]]


def test_an_error_that_cannot_cross_a_pipe_is_sent_as_its_name_and_message() -> None:
    class UnpicklableError(Exception):
        def __init__(self, a: int, b: int) -> None:
            super().__init__(f"{a} {b}")

    assert sendable(1.5) == 1.5
    kept = sendable(ValueError("bad"))
    assert isinstance(kept, ValueError) and str(kept) == "bad"
    sent = sendable(UnpicklableError(1, 2))
    assert type(sent) is RuntimeError and str(sent) == "UnpicklableError: 1 2"


def test_a_pack_process_that_died_fails_each_of_its_jobs_naming_its_exit_code() -> None:
    spawn = multiprocessing.get_context("spawn")
    here, there = spawn.Pipe(duplex=False)
    process = spawn.Process(target=os._exit, args=(3,), name="pack-1")
    process.start()
    there.close()
    values, stop = received(here, process, 2)
    assert stop is None and len(values) == 2
    assert all(isinstance(v, RuntimeError) for v in values)
    assert "(pack-1, pid" in str(values[0]) and "exit code 3" in str(values[0])


@pytest.mark.slow
def test_a_packed_sweep_over_backends_packs_each_backend_apart(tmp_path: Path) -> None:
    """Jobs that open different backends never share a pack (one backend per process): a sweep
    over backend=numpy,auto runs as two packs and finishes."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, "-m", "alpha_rl.train", "-m", "hydra/launcher=packed",
           "backend=numpy,auto", "debug=tiny", "steps=12", "hydra.sweep.dir=multirun/sweep",
           f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"]  # fmt: skip
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 jobs in 2 pack(s) of at most 20 runs" in done.stdout + done.stderr


def fake_mps_control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: int = 0,
                     listen: bool = True) -> Path:  # fmt: skip
    """An nvidia-cuda-mps-control first on PATH that records what it is told in the returned
    file: `-d` (with its pipe and log directories; it then makes its control socket if
    `listen`, or exits `start` saying "no GPU"), and each line read on its stdin otherwise."""
    where, record = tmp_path / "bin", tmp_path / "mps.record"
    where.mkdir()
    script = where / "nvidia-cuda-mps-control"
    script.write_text(f"""#!/bin/sh
if [ "$1" = "-d" ]; then
  echo "start $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY" >> {record}
  if [ {start} != 0 ]; then echo "no GPU" >&2; exit {start}; fi
  if [ {int(listen)} = 1 ]; then touch "$CUDA_MPS_PIPE_DIRECTORY/control"; fi
else
  while read line; do echo "said $line" >> {record}; done
fi
""")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{where}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    return record


def test_an_mps_daemon_of_the_sweeps_own_serves_the_processes_started_inside_then_quits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record, logs = fake_mps_control(tmp_path, monkeypatch), tmp_path / "sweep" / "mps"
    with pytest.raises(SystemExit), mps_daemon(logs) as env:
        pipes = Path(env["CUDA_MPS_PIPE_DIRECTORY"])
        assert (pipes / "control").exists() and logs.is_dir()
        assert os.environ["CUDA_MPS_PIPE_DIRECTORY"] == str(pipes)  # what a pack inherits
        assert os.environ["CUDA_MPS_LOG_DIRECTORY"] == str(logs)
        assert record.read_text().splitlines() == [f"start {pipes} {logs}"]
        raise SystemExit(143)  # a stop ends the sweep: the daemon quits all the same
    assert record.read_text().splitlines()[1:] == ["said quit"]
    assert not pipes.exists() and "CUDA_MPS_PIPE_DIRECTORY" not in os.environ
    with mps_daemon(logs, wanted=False) as env:
        assert env == {} and "CUDA_MPS_PIPE_DIRECTORY" not in os.environ
    assert len(record.read_text().splitlines()) == 2  # not wanted: no daemon


def test_an_mps_daemon_that_cannot_start_is_an_error_naming_the_key_and_what_it_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_mps_control(tmp_path, monkeypatch, start=3)
    with pytest.raises(RuntimeError, match=r"mps=true: .* did not start \(exit 3, it said: no "
                       r"GPU\); its log is in"), mps_daemon(tmp_path / "mps"):  # fmt: skip
        pass
    assert "CUDA_MPS_PIPE_DIRECTORY" not in os.environ
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match=r"hydra\.launcher\.mps=true: nvidia-cuda-mps-control "
                       r".* is not on PATH"), mps_daemon(tmp_path / "mps"):  # fmt: skip
        pass


def test_a_pack_sent_to_run_under_mps_fails_before_its_runs_when_its_context_is_no_client() -> None:
    """The driver runs without MPS, saying nothing, where it cannot reach the daemon: a pack
    checks its device first. Numpy packs need no MPS; nor does `auto` where no GPU is usable."""
    pack = lambda name: [(OmegaConf.create({"backend": {"name": name, "device": 1}}), "job")]  # noqa: E731
    asked: list[int] = []

    def served(answer: bool) -> object:
        return lambda device: asked.append(device) or answer

    def no_gpu(device: int) -> bool:
        raise BackendError("the CUDA driver did not initialise")

    require_mps(pack("cuda"), served(True))
    no_client = r"device 1 is not an MPS client: .*its log is in .*mps=false"
    with pytest.raises(RuntimeError, match=no_client):
        require_mps(pack("cuda"), served(False))
    assert asked == [1, 1]
    require_mps(pack("numpy"), served(False))
    require_mps(pack("auto"), no_gpu)
    with pytest.raises(BackendError, match="did not initialise"):
        require_mps(pack("cuda"), no_gpu)
    assert asked == [1, 1]


def test_a_daemon_that_never_listens_is_told_to_quit_and_named_in_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its `-d` returned 0 but no control socket came within 10 s: rather than leave a daemon
    that may come up later with nobody to reach it, it is told to quit."""
    record = fake_mps_control(tmp_path, monkeypatch, listen=False)
    with pytest.raises(RuntimeError, match=r"did not open its control socket .* within 10 s .* "
                       r"hydra\.launcher\.mps=false"), mps_daemon(tmp_path / "mps"):  # fmt: skip
        pass
    assert record.read_text().splitlines()[1:] == ["said quit"]
    assert "CUDA_MPS_PIPE_DIRECTORY" not in os.environ


@pytest.mark.slow
def test_a_packed_sweep_under_mps_starts_its_daemon_checks_each_pack_and_quits_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hydra.launcher.mps=true with two packs at once (backend=auto, no GPU visible: its runs
    open numpy): the sweep's daemon is started before the packs and told to quit after them,
    and every job finishes."""
    record = fake_mps_control(tmp_path, monkeypatch)
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, "-m", "alpha_rl.train", "-m", "hydra/launcher=packed", "seed=0,1",
           "hydra.launcher.processes=2", "hydra.launcher.mps=true", "backend=auto",
           "debug=tiny", "steps=12", "hydra.sweep.dir=multirun/sweep",
           f"tracking.uri=sqlite:///{tmp_path}/mlflow.db"]  # fmt: skip
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "CUDA MPS: a control daemon of this sweep's own" in out
    assert "2 jobs: 2 FINISHED" in out and "its control daemon told to quit" in out
    assert out.count("backend=auto and no GPU usable here") == 2  # each pack checked itself
    said = record.read_text().splitlines()
    assert said[0].startswith("start ") and said[0].endswith(str(tmp_path / "multirun/sweep/mps"))
    assert said[1:] == ["said quit"]


@pytest.mark.gpu
def test_a_process_started_inside_the_sweeps_mps_daemon_is_its_client(tmp_path: Path) -> None:
    """On a GPU, with the driver's own nvidia-cuda-mps-control: a process started without the
    daemon is no MPS client; one started inside mps_daemon is (mps_enabled asks the driver)."""
    if shutil.which("nvidia-cuda-mps-control") is None:
        pytest.skip("no nvidia-cuda-mps-control on PATH (the NVIDIA driver's utilities)")
    if Path("/tmp/nvidia-mps/control").exists():
        pytest.skip("the machine runs an MPS daemon of its own: every process is its client")
    ask = [sys.executable, "-c", "from alpha_rl.backend.cuda import mps_enabled; "
           "print(mps_enabled(0))"]  # fmt: skip

    def answer() -> str:
        done = subprocess.run(ask, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.strip()

    with pytest.MonkeyPatch.context() as patch:
        for key in [key for key in os.environ if key.startswith("CUDA_MPS_")]:
            patch.delenv(key)
        assert answer() == "False"
        with mps_daemon(tmp_path / "mps"):
            assert answer() == "True"
        assert answer() == "False"  # the daemon has quit: a new process runs without it
    assert (tmp_path / "mps" / "control.log").exists()
