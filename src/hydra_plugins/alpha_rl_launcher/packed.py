"""`hydra/launcher=packed`: a multirun's jobs as packs of runs in one process (one CUDA context).

Each job is prepared as Hydra's basic launcher prepares it (its config, its output directory,
the .hydra/ files beside it), then the jobs that open the same backend (`backend.name` and
`backend.device`) are run `agents` at a time as one pack
(alpha_rl.task.run_pack, alpha_rl.pipeline.run.run_jobs): every run keeps its own directory,
MLflow run, checkpoints and outcome, and is bit for bit the run it is alone. Packs run one after
another, in this process, on the configured `backend.device`.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus, configure_log, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

log = logging.getLogger("alpha_rl")


def backend_of(cfg: DictConfig) -> tuple[Any, Any]:
    """The backend a job opens (`backend.name`, `backend.device`, as configured; each job checks
    them itself): what its pack must share."""
    return cfg.backend.get("name"), cfg.backend.get("device")


class PackedLauncher(Launcher):
    """Runs a multirun's jobs `agents` at a time, each group as one process's pack."""

    def __init__(self, agents: int = 20) -> None:
        if isinstance(agents, bool) or not isinstance(agents, int) or agents < 1:
            from alpha_rl.errors import ConfigError

            raise ConfigError(
                f"hydra.launcher.agents={agents!r}: the most runs one pack holds; a whole "
                "number >= 1"
            )
        self.agents = agents
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:  # fmt: skip
        self.config, self.hydra_context = config, hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:  # fmt: skip
        from alpha_rl.task import job_of, run_pack

        assert self.config is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        returns: list[JobReturn] = []
        ready: list[tuple[int, DictConfig, Any]] = []  # (index in returns, cfg, Job)

        def prepare(cfg: DictConfig) -> None:
            ready.append((len(returns), copy.deepcopy(cfg), job_of(HydraConfig.get())))

        for offset, overrides in enumerate(job_overrides):
            idx = initial_job_idx + offset
            sweep_config = self.hydra_context.config_loader.load_sweep_config(
                self.config, list(overrides)
            )
            with open_dict(sweep_config):
                sweep_config.hydra.job.id = sweep_config.hydra.job.num = idx
            returns.append(run_job(hydra_context=self.hydra_context, task_function=prepare,
                                   config=sweep_config, job_dir_key="hydra.sweep.dir",
                                   job_subdir_key="hydra.sweep.subdir"))  # fmt: skip
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        packs = []  # jobs that share a process share its backend: packs never mix backends
        for key in dict.fromkeys(backend_of(cfg) for _, cfg, _ in ready):
            same = [entry for entry in ready if backend_of(entry[1]) == key]
            packs += [same[i : i + self.agents] for i in range(0, len(same), self.agents)]
        log.info("%d jobs in %d pack(s) of at most %d runs", len(ready), len(packs), self.agents)
        for number, pack in enumerate(packs, 1):
            log.info("pack %d of %d: %s", number, len(packs),
                     ", ".join(str(job.output_dir) for _, _, job in pack))  # fmt: skip
            values = run_pack([(cfg, job) for _, cfg, job in pack])
            for (i, _, _), value in zip(pack, values, strict=True):
                returns[i].return_value = value
                failed = isinstance(value, BaseException)
                returns[i].status = JobStatus.FAILED if failed else JobStatus.COMPLETED
        return returns
