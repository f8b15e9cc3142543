"""The links the platform prints to an experiment's runs in MLflow's UI (alpha_rl.tracking.view
says what they open, and what a link cannot set)."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from alpha_rl.commands import script_command, ui_command
from alpha_rl.tracking.store import SQLITE_PREFIX
from alpha_rl.tracking.view import VIEW_KEY

LOCAL_UI = "http://127.0.0.1:5000"  # where `make ui` (and `mlflow ui`) serve by default


def runs_link(ui: str, experiment_id: str, view: bool = True) -> str:
    """The link to an experiment's runs table in the model-training pages of the UI at `ui`,
    in the view (view=False: for an experiment without it, MLflow's own columns)."""
    link = f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"
    return link + "&compareRunsMode=TABLE" + (f"&viewStateShareKey={VIEW_KEY}" if view else "")


def experiments_link(ui: str) -> str:
    """The link to the UI's list of experiments, in its model-training pages."""
    return f"{ui.rstrip('/')}/#/experiments?workflowType=machine_learning"


def ui_of(uri: str) -> str | None:
    """Where the UI of a tracking store is: the server of an http(s) URI (without credentials),
    `make ui`'s address for an SQLite file; None for another store (a database a server of the
    lab's serves, under a name this process does not know)."""
    if uri.startswith(SQLITE_PREFIX):
        return LOCAL_UI
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def run_link(ui: str, experiment_id: str, run_id: str) -> str:
    """The link to one run's page in the UI at `ui`."""
    return f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


def open_line(uri: str, experiment_id: str, view: bool = True,
              run_id: str | None = None) -> str | None:  # fmt: skip
    """How to open an experiment's runs (view: in the runs view, see runs_link), or one run's
    page (run_id): for an SQLite store `make ui STORE=<file> (or mlflow ui --backend-store-uri
    <uri>), then <link>`, each command as the user runs it (alpha_rl.commands); the link for a
    server; None for another store."""
    ui = ui_of(uri)
    if ui is None:
        return None
    link = run_link(ui, experiment_id, run_id) if run_id else runs_link(ui, experiment_id, view)
    if not uri.startswith(SQLITE_PREFIX):
        return link
    mlflow = script_command("mlflow", ["ui", "--backend-store-uri", uri])
    make = ui_command(uri[len(SQLITE_PREFIX) :].split("?", 1)[0])
    return f"{make} (or {mlflow}), then {link}" if make else f"{mlflow}, then {link}"
