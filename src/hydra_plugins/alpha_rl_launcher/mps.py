"""CUDA MPS for the packed launcher (`hydra.launcher.mps=true`): a control daemon of the sweep's
own while its packs run, and each pack's check that its GPU context is the daemon's client."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

log = logging.getLogger("alpha_rl")


def backend_of(cfg: DictConfig) -> tuple[Any, Any]:
    """The backend a job opens (`backend.name`, `backend.device`, as configured; each job checks
    them itself): what its pack must share."""
    return cfg.backend.get("name"), cfg.backend.get("device")


def mps_control() -> str:
    """The path of nvidia-cuda-mps-control; ConfigError naming the key when it is not on PATH."""
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        from alpha_rl.errors import ConfigError

        raise ConfigError("hydra.launcher.mps=true: nvidia-cuda-mps-control (CUDA MPS's control "
                          "daemon, one of the NVIDIA driver's utilities) is not on PATH; install "
                          "it, or set hydra.launcher.mps=false")  # fmt: skip
    return control


@contextmanager
def mps_daemon(logs: Path, wanted: bool = True) -> Iterator[dict[str, str]]:
    """Inside, a CUDA MPS control daemon of this sweep's own serves the processes started here
    (`wanted`; otherwise nothing changes): its pipes in a fresh directory under the system's
    temporary one (their paths must stay short), named to them by CUDA_MPS_PIPE_DIRECTORY in
    this process's environment, which spawned processes inherit; its logs in `logs`. On the way
    out, however the sweep ends, the daemon is told to quit (it stops its server once the last
    client is gone) and the environment is restored. Yields the variables set."""
    if not wanted:
        yield {}
        return
    control = mps_control()
    logs = logs.resolve()  # the daemon runs elsewhere (a daemon's working directory is /)
    logs.mkdir(parents=True, exist_ok=True)
    pipes = Path(tempfile.mkdtemp(prefix="alpha_rl_mps_"))
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(pipes), "CUDA_MPS_LOG_DIRECTORY": str(logs)}

    def tell(*args: str, text: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([control, *args], input=text, env={**os.environ, **env},
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    def quit_daemon() -> str | None:
        """Tell the daemon to quit; None once it took it, else what went wrong."""
        try:
            done = tell(text="quit\n")
        except (subprocess.SubprocessError, OSError) as exc:
            return f"{type(exc).__name__}: {exc}"
        if done.returncode != 0:
            return f"exit {done.returncode}: {(done.stderr or done.stdout).strip()}"
        shutil.rmtree(pipes, ignore_errors=True)
        return None

    by_hand = f"echo quit | CUDA_MPS_PIPE_DIRECTORY={pipes} {control}"
    try:
        started = tell("-d")
    except (subprocess.SubprocessError, OSError) as exc:
        shutil.rmtree(pipes, ignore_errors=True)
        raise RuntimeError(f"hydra.launcher.mps=true: {control} -d failed ({exc}); set "
                           "hydra.launcher.mps=false to run without MPS") from exc  # fmt: skip
    deadline = time.monotonic() + 10  # its control socket, `control`, once it listens
    while started.returncode == 0 and not (pipes / "control").exists():
        if time.monotonic() > deadline:
            left = quit_daemon()  # it may come up later: never leave one nobody can reach
            hint = f"; if it runs, stop it by hand: {by_hand}" if left else ""
            raise RuntimeError(f"hydra.launcher.mps=true: the CUDA MPS control daemon did not "
                               f"open its control socket in {pipes} within 10 s (its log is in "
                               f"{logs}){hint}; set hydra.launcher.mps=false to run without "
                               "MPS")  # fmt: skip
        time.sleep(0.05)
    if started.returncode != 0:
        shutil.rmtree(pipes, ignore_errors=True)
        said = (started.stderr or started.stdout).strip() or "nothing"
        raise RuntimeError(f"hydra.launcher.mps=true: the CUDA MPS control daemon did not start "
                           f"(exit {started.returncode}, it said: {said}); its log is in "
                           f"{logs}; set hydra.launcher.mps=false to run without MPS")  # fmt: skip
    log.info("CUDA MPS: a control daemon of this sweep's own, its pipes in %s, its logs in %s "
             "(by hand, if it outlives the sweep: %s)", pipes, logs, by_hand)  # fmt: skip
    kept = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for key, value in kept.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        left = quit_daemon()
        if left:
            log.warning("the CUDA MPS control daemon did not take `quit` (%s); stop it by hand: "
                        "%s", left, by_hand)  # fmt: skip
        else:
            log.info("CUDA MPS: its control daemon told to quit")


def require_mps(jobs: list, enabled: Callable[[int], bool] | None = None) -> None:
    """A pack sent to run under MPS (hydra.launcher.mps=true) whose GPU contexts would not be MPS
    clients fails here, before its runs start: where the driver cannot reach the daemon it runs
    without MPS and says nothing. `enabled(device)` asks the driver (alpha_rl.backend.cuda's
    mps_enabled by default); a pack on numpy, or on `auto` where no GPU can be used, needs no MPS.
    """
    from alpha_rl.errors import BackendError

    if enabled is None:
        from alpha_rl.backend.cuda import mps_enabled as enabled
    for name, device in dict.fromkeys(backend_of(cfg) for cfg, _ in jobs):
        if name == "numpy":
            continue
        device = int(device or 0)
        try:
            served = enabled(device)
        except BackendError as exc:
            if name == "cuda":
                raise
            log.info("CUDA MPS: backend=auto and no GPU usable here (%s): no MPS check", exc)
            continue  # its runs open numpy
        if not served:
            raise RuntimeError(
                f"hydra.launcher.mps=true: this pack's CUDA context on device {device} is not an "
                "MPS client: the driver could not reach the control daemon at "
                f"CUDA_MPS_PIPE_DIRECTORY={os.environ.get('CUDA_MPS_PIPE_DIRECTORY')} (its log "
                f"is in CUDA_MPS_LOG_DIRECTORY={os.environ.get('CUDA_MPS_LOG_DIRECTORY')}); "
                "another MPS daemon of the machine's, or a GPU in EXCLUSIVE_PROCESS mode held by "
                "another process, can stand in its way; set hydra.launcher.mps=false to run "
                "without MPS"
            )
        log.info("CUDA MPS: this pack's context on device %d is an MPS client", device)
