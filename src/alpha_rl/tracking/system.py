"""MLflow's system metrics for a run (`tracking.system_metrics`): CPU, RAM, disk, network and, where
nvidia-ml-py finds a GPU, each GPU's utilisation, memory and power, sampled every
`tracking.system_metrics_interval_s` seconds by MLflow's own monitor thread into the run as
`system/*`, keyed by sample (a resumed run continues the count). They show whether a run kept its
GPU busy; the step's µs timings stay the benchmarks' (a sample every few seconds cannot see them).
MLflow samples every GPU NVML sees (`system/gpu_<i>_...`, NVML's index), not only the run's.
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Any

from alpha_rl.tracking.config import TrackingConfig
from alpha_rl.tracking.store import resolve_uri

log = logging.getLogger("alpha_rl.tracking")


class SystemMetrics:
    """MLflow's SystemMetricsMonitor on one run, started and stopped by the job."""

    def __init__(self, cfg: TrackingConfig, run_id: str | None, backend: str,
                 resumed: bool = False) -> None:  # fmt: skip
        self.monitor: Any = None
        if not cfg.system_metrics_for(backend):
            return
        if run_id is None:
            log.warning("no system metrics: the run is not in the store yet (it was down)")
            return
        if importlib.util.find_spec("psutil") is None:
            log.warning("no system metrics: psutil is not installed (pip install psutil)")
            return
        if backend == "cuda" and importlib.util.find_spec("pynvml") is None:
            log.warning("system metrics without the GPU's: nvidia-ml-py is not installed "
                        "(pip install nvidia-ml-py, or the .[gpu] extra)")  # fmt: skip
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        self.monitor = SystemMetricsMonitor(run_id, sampling_interval=cfg.system_metrics_interval_s,
                                            resume_logging=resumed,
                                            tracking_uri=resolve_uri(cfg.uri))  # fmt: skip
        self.monitor.start()

    def stop(self) -> None:
        """Stop sampling and send what is left (before the run ends)."""
        if self.monitor is not None:
            self.monitor.finish()
            self.monitor = None
