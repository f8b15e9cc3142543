"""Damaged and failed checkpoints: a resume falls back to the older one, saying so; a failed write
keeps the earlier checkpoints valid; nothing valid is a clear error."""

from __future__ import annotations

import errno
import json
import logging
from pathlib import Path

import numpy as np
import pytest
import yaml

from alpha_rl.errors import CheckpointError, ConfigError
from alpha_rl.pipeline.life import checkpoint
from alpha_rl.pipeline.life.identity import keep_diag_until
from alpha_rl.pipeline.life.labels import check_resumable, config_yaml
from tests.helpers import compose_fixed
from tests.pipeline.conftest import summary_of
from tests.pipeline.test_run import ANNEAL, client, history, job, theta

EVERY_10 = [ANNEAL, "steps=30", "checkpoint.every=10", "checkpoint.keep=2"]


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def garble(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 4096] = bytes(4096)  # zeros over the middle: bad CRCs and headers
    path.write_bytes(bytes(data))


def step_mismatch(path: Path) -> None:
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["__step__"] = np.array([7], np.int64)
    checkpoint.write_state(path, arrays)


def test_keep_prunes_the_older_checkpoints(tmp_path: Path) -> None:
    out = job(tmp_path, EVERY_10, "run")
    assert [p.name for p in checkpoint.saved(out.run_dir)] == ["0000000030", "0000000020"]
    assert not list(checkpoint.checkpoint_dir(out.run_dir).glob("*.tmp"))


@pytest.mark.parametrize(
    ("damage", "file", "why"),
    [
        (truncate, "state.npz", "unreadable checkpoint"),
        (garble, "state.npz", "unreadable checkpoint"),
        (step_mismatch, "state.npz", "disagree on the step"),
        (lambda p: p.write_text("{not json"), "meta.json", "unreadable checkpoint metadata"),
    ],
)
def test_a_damaged_newest_checkpoint_falls_back_to_the_older_and_resumes_bit_exact(
    tmp_path: Path, caplog, damage, file: str, why: str, unbroken
) -> None:
    half = job(tmp_path, [*EVERY_10], "half")  # checkpoints at 20 and 30 kept
    newest = checkpoint.latest(half.run_dir)
    damage(newest / file)
    caplog.set_level(logging.WARNING, logger="alpha_rl")
    resumed = job(tmp_path, [ANNEAL, "checkpoint.every=10", "checkpoint.keep=2",
                             f"resume={half.run_dir}"], "ignored")  # fmt: skip
    assert resumed.status == "FINISHED" and resumed.steps == 40
    assert f"{newest / file}" in caplog.text and why in caplog.text
    assert "using the checkpoint at step 20" in caplog.text
    assert history(tmp_path, half.run_id, "loss/l_q") == unbroken.l_q
    np.testing.assert_array_equal(theta(half.run_dir), unbroken.theta)


def test_no_usable_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    half = job(tmp_path, EVERY_10, "half")
    for kept in checkpoint.saved(half.run_dir):
        truncate(kept / "state.npz")
    with pytest.raises(CheckpointError) as caught:
        job(tmp_path, [*EVERY_10, f"resume={half.run_dir}"], "ignored")
    message = str(caught.value)
    assert "no usable checkpoint" in message and "without resume=" in message
    for kept in checkpoint.saved(half.run_dir):
        assert str(kept / "state.npz") in message


def failing_write(monkeypatch, at_step: int) -> None:
    """The write of the checkpoint at `at_step` stops half-way with ENOSPC (a full disk)."""
    real = checkpoint.write_state

    def write(path: Path, arrays: dict) -> None:
        if int(arrays["__step__"][0]) != at_step:
            return real(path, arrays)
        path.write_bytes(b"PK\x03\x04 half a file")
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(checkpoint, "write_state", write)


def test_a_failed_write_with_on_error_continue_keeps_the_earlier_checkpoint_and_trains_on(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    failing_write(monkeypatch, at_step=30)
    caplog.set_level(logging.ERROR, logger="alpha_rl")
    out = job(tmp_path, [*EVERY_10, "checkpoint.on_error=continue"], "run")
    assert out.status == "FINISHED" and out.steps == 30
    assert "checkpoint at step 30 not written" in caplog.text and "No space left" in caplog.text
    assert [p.name for p in checkpoint.saved(out.run_dir)] == ["0000000020", "0000000010"]
    assert not list(checkpoint.checkpoint_dir(out.run_dir).glob("*.tmp"))
    missing = client(tmp_path).get_run(out.run_id).data.tags["alpha_rl.checkpoint_missing"]
    assert missing.startswith("no checkpoint at step 30; the newest is ")
    assert missing.endswith("0000000020")
    monkeypatch.undo()
    resumed = job(tmp_path, [*EVERY_10, f"resume={out.run_dir}"], "ignored")
    assert resumed.status == "FINISHED" and resumed.steps == 30  # from the kept step 20


def test_a_failed_write_ends_the_run_failed_by_default(tmp_path: Path, monkeypatch) -> None:
    failing_write(monkeypatch, at_step=20)
    out = job(tmp_path, EVERY_10, "run")  # checkpoint.on_error=stop
    assert out.status == "FAILED" and out.steps == 20
    assert "checkpoint at step 20 not written" in (out.reason or "")
    run = client(tmp_path).get_run(out.run_id)
    assert run.info.status == "FAILED"
    assert "checkpoint.on_error=stop" in run.data.tags["alpha_rl.failure_reason"]
    meta = json.loads((checkpoint.latest(out.run_dir) / "meta.json").read_text())
    assert meta["step"] == 10


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("checkpoint.keep=0", r"checkpoint\.keep=0 must be a whole number >= 1"),
        ("checkpoint.on_error=ignore", r"checkpoint\.on_error='ignore' must be one of continue"),
        ("checkpoint.requeue=yes", r"checkpoint\.requeue='yes' must be true or false"),
    ],
)
def test_checkpoint_settings_are_checked(tmp_path: Path, override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        job(tmp_path, [override])


def test_the_single_directory_layout_of_older_runs_still_resumes(tmp_path: Path, unbroken) -> None:
    half = job(tmp_path, [ANNEAL, "steps=20"], "half")
    root = checkpoint.checkpoint_dir(half.run_dir)
    newest = checkpoint.latest(half.run_dir)
    for name in (checkpoint.STATE, checkpoint.META):
        (newest / name).rename(root / name)
    newest.rmdir()
    assert checkpoint.saved(half.run_dir) == [root]
    resumed = job(tmp_path, [ANNEAL, f"resume={half.run_dir}"], "ignored")
    assert resumed.status == "FINISHED"
    np.testing.assert_array_equal(theta(half.run_dir), unbroken.theta)


def test_a_checkpoint_that_recorded_owned_slot_inits_still_resumes() -> None:
    cfg, _ = compose_fixed()
    saved = yaml.safe_load(config_yaml(cfg))
    saved["isv"]["slots"]["her"]["her_threshold"]["init"] = 1.5  # how older checkpoints recorded it
    check_resumable(yaml.safe_dump(saved), cfg)  # her.threshold is compared in its place
    saved["her"]["threshold"] = 2.0
    with pytest.raises(CheckpointError, match=r"her\.threshold: 2\.0 -> 1\.5"):
        check_resumable(yaml.safe_dump(saved), cfg)


@pytest.mark.slow
def test_a_resume_with_fewer_steps_than_its_checkpoint_is_refused(tmp_path: Path) -> None:
    done = job(tmp_path, ["steps=20"], "done")
    files = {p: p.read_bytes() for p in done.run_dir.rglob("*") if p.is_file()}
    with pytest.raises(CheckpointError) as caught:
        job(tmp_path, [f"resume={done.run_dir}", "steps=15"], "ignored")
    assert str(caught.value) == (
        f"resume={done.run_dir}: steps=15 is below the step of its newest checkpoint, 20 (steps "
        "is the run's total, not the steps to add); pass steps=20 or more"
    )
    owner = ("owner.json", ".owner.lock")  # the claim a run holds while it runs
    after = {p: p.read_bytes() for p in done.run_dir.rglob("*") if p.is_file()}
    assert {p: b for p, b in after.items() if p.name not in owner} == {
        p: b for p, b in files.items() if p.name not in owner
    }
    assert client(tmp_path).get_run(done.run_id).info.status == "FINISHED"  # never reopened


@pytest.mark.slow
def test_a_resumed_runs_summary_reads_its_whole_history(tmp_path: Path, unbroken) -> None:
    half = job(tmp_path, ["steps=20", ANNEAL], "half")  # evaluations at 15 and 20
    again = job(tmp_path, [f"resume={half.run_dir}", "steps=20", ANNEAL], "ignored")
    assert again.status == "FINISHED" and again.steps == 20
    assert summary_of(again) == summary_of(half)  # not "no evaluation ran", "no learner updates"
    assert summary_of(half)[0].startswith("held-out, the last evaluation (step 20, ")
    resumed = job(tmp_path, [f"resume={half.run_dir}", ANNEAL], "ignored")
    assert resumed.steps == 40
    assert summary_of(resumed) == unbroken.summary  # l_q over all 6 log points, not the last 4
    assert unbroken.summary[-1].endswith("of 6 log points)")


@pytest.mark.slow
def test_a_resume_without_diag_jsonl_says_what_is_lost(tmp_path: Path, caplog) -> None:
    half = job(tmp_path, ["steps=20"], "half")
    (half.run_dir / "diag.jsonl").unlink()
    caplog.set_level(logging.WARNING, logger="alpha_rl")
    resumed = job(tmp_path, [f"resume={half.run_dir}", "steps=40"], "ignored")
    assert resumed.status == "FINISHED"
    (warning,) = [r.getMessage() for r in caplog.records if "is missing" in r.getMessage()]
    assert warning.startswith(
        f"resume: {half.run_dir / 'diag.jsonl'} is missing: the run's record of its first 20 "
        "steps (metrics, evaluations) is gone, so its curves, summary, objective and diag.jsonl "
        "artifact cover only the steps from here on"
    )


def test_a_missing_diag_jsonl_is_warned_only_once_a_log_point_wrote_it(
    tmp_path: Path, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="alpha_rl")
    keep_diag_until(tmp_path / "diag.jsonl", 4, log_every=5)  # nothing was logged by step 4
    assert caplog.text == ""
    keep_diag_until(tmp_path / "diag.jsonl", 5, log_every=5)
    assert f"resume: {tmp_path / 'diag.jsonl'} is missing" in caplog.text
    assert not (tmp_path / "diag.jsonl").exists()
