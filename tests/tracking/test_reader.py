"""What the run reader writes back: a run's tags in as few requests as MLflow takes them."""

from __future__ import annotations

from pathlib import Path

from mlflow.tracking import MlflowClient

from alpha_rl.tracking.reader import RunReader
from alpha_rl.tracking.records import PARAMS_TAGS_PER_REQUEST
from tests.helpers import seeded_store


def test_tags_go_in_batches_and_each_arrives(tmp_path: Path, monkeypatch) -> None:
    uri = seeded_store(tmp_path / "mlflow.db")
    client = MlflowClient(tracking_uri=uri)
    run_id = client.create_run(client.create_experiment("alpha_rl")).info.run_id
    reader = RunReader(uri)
    requests = []
    for name in ("log_batch", "set_tag"):
        real = getattr(reader.client, name)

        def counted(*args, _name=name, _real=real, **kwargs):
            requests.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(reader.client, name, counted)
    tags = {f"kill_check.{i}": f"v{i}" for i in range(PARAMS_TAGS_PER_REQUEST + 30)}
    tags["mlflow.note.content"] = "**Kill check** | a | b |\n" * 40
    reader.set_tags(run_id, tags)
    assert requests == ["log_batch", "log_batch"]
    held = client.get_run(run_id).data.tags
    assert {k: held[k] for k in tags} == tags
