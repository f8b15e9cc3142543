"""`hydra/launcher=local_gpus`: Hydra's joblib launcher, one worker per visible GPU.

The jobs take their GPUs themselves (alpha_rl.launch.gpu_slot); see alpha_rl.launch.
"""

from __future__ import annotations

from typing import Any

from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher

from alpha_rl.launch import visible_gpus


class LocalGpusLauncher(JoblibLauncher):
    """Hydra's joblib launcher with `n_jobs` defaulting to the number of visible GPUs (1 when
    there is none); every other setting but `slots_dir` is joblib's."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.pop("slots_dir", None)  # read by each job (alpha_rl.launch.gpu_slot), not joblib
        if kwargs.get("n_jobs") is None:
            kwargs["n_jobs"] = max(1, len(visible_gpus()))
        super().__init__(**kwargs)
