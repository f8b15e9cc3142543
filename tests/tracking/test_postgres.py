"""Tracking into a real PostgreSQL (a throw-away cluster, tests/postgres.py): directly, and through
a tracking server with basic-auth, where only accounts get in and no credential reaches a run."""

from __future__ import annotations

import secrets
import urllib.error
import urllib.request
from base64 import b64encode
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from alpha_rl.pipeline.life.run import Job, run_job
from alpha_rl.tracking.tracker import open_tracker
from tests.helpers import compose_train
from tests.mlflow_server import started_server
from tests.pipeline.test_run import TINY
from tests.tracking.conftest import history, make_cfg

pytestmark = pytest.mark.slow


def test_a_tracker_writes_into_postgresql_directly(tmp_path: Path, postgres) -> None:
    uri = postgres.new_database("direct")
    tracker = open_tracker(make_cfg(uri, retry_s=0.0, final_retry_s=0.0), tmp_path / "run",
                           run_name="direct")  # fmt: skip
    tracker.log_params({"agent.lr": 0.0003})
    for step in range(1500):  # two batches and a rest
        tracker.log_point(step, {"loss/l_q": 1.0 / (step + 1)})
    tracker.finish()
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(tracker.run_id)
    assert run.info.status == "FINISHED" and run.data.params == {"agent.lr": "0.0003"}
    assert history(client, tracker.run_id, "loss/l_q") == [(s, 1.0 / (s + 1)) for s in range(1500)]


def _status(url: str, user: str | None = None, password: str | None = None) -> int:
    request = urllib.request.Request(f"{url}/api/2.0/mlflow/experiments/search?max_results=1")
    if user is not None:
        token = b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_basic_auth_keeps_strangers_out_and_credentials_out_of_the_run(
    tmp_path: Path, postgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server with --auth on PostgreSQL: anonymous and wrong-password requests are refused; a
    lab account created by the admin trains a run with its credentials in the environment only;
    then every param, tag and artifact of the run is searched for both credentials."""
    admin, admin_pw = "lab-admin", secrets.token_urlsafe(16)
    user, user_pw = f"writer-{secrets.token_hex(4)}", secrets.token_urlsafe(16)
    creds = tmp_path / "admin.txt"
    creds.write_text(f"{admin}:{admin_pw}\n")
    creds.chmod(0o600)
    db = postgres.new_database("auth")
    with started_server(db, tmp_path, credentials=creds, workers=2) as server:
        assert _status(server.url) == 401
        assert _status(server.url, admin, "not-the-password") == 401
        assert _status(server.url, admin, admin_pw) == 200
        from mlflow.server.auth.client import AuthServiceClient

        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", admin)
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", admin_pw)
        AuthServiceClient(server.url).create_user(user, user_pw)
        assert _status(server.url, user, user_pw) == 200

        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", user)  # the job's account, as on a node
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", user_pw)
        monkeypatch.setenv("MLFLOW_TRACKING_URI", server.url)
        # the config itself carries the password: what the run logs must not
        in_config = "search.study=${oc.env:MLFLOW_TRACKING_PASSWORD}"
        cfg, choices = compose_train([*TINY, "tracking=server", in_config])
        assert cfg.tracking.uri == server.url
        out = run_job(cfg, Job(tmp_path / "job", choices))
        assert out.status == "FINISHED" and out.run_id

        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", admin)
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", admin_pw)
        client = MlflowClient(tracking_uri=server.url)
        run = client.get_run(out.run_id)
        assert len(run.data.params) > 100 and "tracking.uri" in run.data.params
        assert run.data.params["search.study"] == "***"
        logged = [f"{k}={v}" for k, v in run.data.params.items()]
        logged += [f"{k}={v}" for k, v in run.data.tags.items()]
        files = Path(client.download_artifacts(out.run_id, "", str(tmp_path / "artifacts")))
        texts = [p.read_bytes() for p in files.rglob("*") if p.is_file()]
        names = {p.name for p in files.rglob("*") if p.is_file()}
        assert {"config.yaml", "diag.jsonl"} <= names
    for secret in (user, user_pw, admin_pw):
        assert not [line for line in logged if secret in line], secret
        assert not [t for t in texts if secret.encode() in t], secret
