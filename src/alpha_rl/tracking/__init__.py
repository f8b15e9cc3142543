"""MLflow tracking for alpha_rl: the only package that imports mlflow (DESIGN §10).

Design:
- One MLflow run per job, written through `MlflowClient(tracking_uri=...)` only (never the
  fluent active-run API): jobs run one after another in one process and in parallel processes.
  Runs of a multirun nest under one parent run (`ParentRunCallback`, `parent_run_for`).
- The job's output directory is the source of truth. `diag.jsonl` gets one line per log interval
  before anything is sent; `tracking.json` names the run once it exists.
- Metrics are buffered and sent with `log_batch` (chunks of at most `batch_size`, MLflow's limit is
  1000) when the buffer fills, every `flush_every_s`, at checkpoints and at finish: one request
  per value would cost ~11 ms each on SQLite.
- The store may fail at any time without stopping training: data leaves the buffer only once the
  store accepted it, one warning per outage, retries after `retry_s` at later flushes, lazy run
  creation if the store was down from the start. finish() waits up to `final_retry_s`, then leaves
  the rest in `unsent.jsonl`; `python -m alpha_rl.tracking sync <run_dir>` sends it later.
- On resume the run is reopened and steps it already holds are not sent again.

Importing this package does not import mlflow; the first store request does.
"""

from alpha_rl.tracking.config import TrackingConfig
from alpha_rl.tracking.parent import ParentRunCallback, parent_run_for
from alpha_rl.tracking.reader import RunReader, RunRecord, TrackingReadError
from alpha_rl.tracking.sync import StoreUnreachableError, sync_run
from alpha_rl.tracking.tracker import Tracker, open_tracker

__all__ = [
    "ParentRunCallback",
    "RunReader",
    "RunRecord",
    "StoreUnreachableError",
    "Tracker",
    "TrackingConfig",
    "TrackingReadError",
    "open_tracker",
    "parent_run_for",
    "sync_run",
]
