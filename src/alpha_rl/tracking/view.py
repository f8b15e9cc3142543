"""What MLflow's UI (3.17) shows of an experiment: its kind, and the runs view that the links of
alpha_rl.tracking.links open.

MLflow's experiment page keeps the state of its runs table (columns, their order and widths, the
sort) in the browser's localStorage, or takes it from a saved view: an experiment tag
`mlflow.sharedViewState.<key>` holding {name, createdAt, updatedAt, state}, which a link opens
with `viewStateShareKey=<key>` and the page's views menu lists. Every experiment the tracker logs
to gets one, `alpha_rl: runs` (VIEW_TAG): the deciding metrics as columns (DECIDING), the market
and the kill check's verdict, the newest run first. A link to it also says
`workflowType=machine_learning` (the model-training pages; the UI shows its GenAI pages
otherwise) and `compareRunsMode=TABLE` (the table, not the charts).

What a link cannot set:
- which parent runs are unfolded: MLflow keeps that in the browser only and leaves it out of a
  saved view. It folds child runs under their parent only while the table is sorted by its own
  "Created" key (`attributes.start_time`); the view sorts by the same start time written
  `attributes.`start_time``, so a sweep's runs are listed flat, each on its row beside its parent.
- the assistant panel: MLflow opens it on the first visit to a server on this machine, and the
  browser remembers once it is closed (its x).
A user who edits the view sees it as a shared view (MLflow saves nothing until "Override saved
view"); the tracker writes it back as defined here whenever it differs.
"""

from __future__ import annotations

import json
import time

from alpha_rl.vocabulary import DECIDING

# MLflow 3's experiment kind: model training, so the UI opens on the runs (not the GenAI page)
KIND_TAG, KIND = "mlflow.experimentKind", "custom_model_development"
VIEW_KEY = "alpha_rl_runs"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
VIEW_NAME = "alpha_rl: runs"
# what the kill check decides on (loss/l_q, its stability metric eval/l_q_probe, its benefit
# metric eval/pnl, its speed metric eval/capture_ratio) and the held-out Sharpe, in that order
TAG_COLUMNS = ("market", "kill_check.verdict")
# the UI's own column ids (attributes.`Run Name`, runDateAndNestInfo: the Created column)
_FIRST_COLUMNS = ("attributes.`Run Name`", "runDateAndNestInfo", "duration")


def columns() -> list[str]:
    """The view's columns beyond the run's name, start and duration, as the UI names them."""
    return [f"metrics.`{k}`" for k in DECIDING] + [f"tags.`{k}`" for k in TAG_COLUMNS]


def view_state() -> dict:
    """The view: MLflow's search facets and table state (a metric no run holds shows no column)."""
    return {
        "searchFilter": "",
        "orderByKey": "attributes.`start_time`",  # not "attributes.start_time": see the docstring
        "orderByAsc": False,
        "startTime": "ALL",
        "lifecycleFilter": "Active",
        "modelVersionFilter": "All Runs",
        "datasetsFilter": [],
        "selectedColumns": columns(),
        "columnOrder": [*_FIRST_COLUMNS, *columns()],
        "columnWidths": {  # wide enough for the names they show
            _FIRST_COLUMNS[0]: 260,
            "metrics.`eval/capture_ratio`": 140,
            "tags.`market`": 140,
        },
    }


def view_tag(existing: str | None, now_ms: int | None = None) -> str | None:
    """The VIEW_TAG value to write over `existing` (the tag's value, None when absent); None when
    `existing` already holds this view. A view written before keeps its createdAt."""
    state = json.dumps(view_state(), sort_keys=True)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    created = now
    if existing:
        try:
            old = json.loads(existing)
            if old.get("state") == state and old.get("name") == VIEW_NAME:
                return None
            created = int(old["createdAt"])
        except (ValueError, TypeError, KeyError, AttributeError):
            pass  # not a view this module wrote: replaced whole
    return json.dumps({"name": VIEW_NAME, "createdAt": created, "updatedAt": now, "state": state})


def experiment_tags(tags: dict[str, str]) -> dict[str, str]:
    """The tags to set on an experiment that holds `tags`: its kind where it has none (an
    experiment made elsewhere says what it holds), the view where it lacks it or holds another."""
    out = {} if KIND_TAG in tags else {KIND_TAG: KIND}
    value = view_tag(tags.get(VIEW_TAG))
    return out | ({VIEW_TAG: value} if value is not None else {})
