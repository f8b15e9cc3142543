"""`hydra/sweeper=alpha_rl_optuna`: a hyper-parameter search as an Optuna study (alpha_rl.search).

Optuna is imported when a search starts, not when Hydra scans its plugins.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

log = logging.getLogger("alpha_rl.search")


class OptunaSearchSweeper(Sweeper):
    """Asks an Optuna study for trials, runs them through the configured launcher, tells it
    their objectives (see alpha_rl.search.study)."""

    def __init__(self, **settings: Any) -> None:
        self.settings = settings
        self.config: DictConfig | None = None
        self.launcher: Any = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> Any:
        from alpha_rl.errors import ConfigError
        from alpha_rl.search.study import Search, SearchConfig
        from alpha_rl.tracking.config import TrackingConfig
        from alpha_rl.tracking.parent import stop_parent

        assert self.config is not None
        try:
            search = Search(
                SearchConfig.build(self.settings, self.config), self.config, self.launcher
            )
            return search.run(arguments)
        except ConfigError as exc:
            log.error("%s", exc)
            stop_parent(
                Path(str(self.config.hydra.sweep.dir)),
                TrackingConfig.from_cfg(self.config.tracking),
                f"the search did not start: {exc}",
                status="FAILED",
            )
            raise SystemExit(2) from None
