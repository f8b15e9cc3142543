"""A bad value on the command line is refused before any work: `alpha-rl-train` exits 2 with one
line naming the key, the value and what is accepted, and never prints a traceback. So is a key
or group that conf/ does not have, with the nearest one it has (never Hydra's advice to add it
with +). A group option that does not exist is Hydra's to refuse (it lists the options and exits
1), unless one is close to it: then it is refused as ours, naming that one. A key that only
another option of its group has is refused naming that option."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from alpha_rl import paths
from alpha_rl.errors import ConfigError
from alpha_rl.pipeline.configure.keys import (
    check_command_line,
    command_line_overrides,
    config_groups,
    declared_keys,
)
from alpha_rl.pipeline.configure.options import check_chosen_options
from alpha_rl.tracking import TrackingConfig
from tests.helpers import compose_train, train_in_process

USER_ERROR = 2  # task.py: an AlphaRlError (ConfigError among them) ends the run with this
HYDRA_ERROR = 1  # Hydra's own: an unknown group option, reported without a traceback

# (overrides, exit status, a piece of the one line that must say what is wrong)
CASES = {
    "unknown_uri_scheme": (["tracking.uri=bogus://x"], USER_ERROR,
                           "tracking.uri='bogus://x' is not a tracking URI MLflow can store"),
    "num_envs_not_a_number": (["env.num_envs=abc"], USER_ERROR,
                              "env.num_envs='abc' must be a whole number >= 1"),
    "num_envs_zero": (["env.num_envs=0"], USER_ERROR, "env.num_envs=0 must be a whole number"),
    "steps_not_a_number": (["steps=abc"], USER_ERROR, "steps='abc' must be a whole number >= 1"),
    "steps_negative": (["steps=-5"], USER_ERROR, "steps=-5 must be a whole number >= 1"),
    "seed_fractional": (["seed=1.5"], USER_ERROR, "seed=1.5 must be a whole number in 0..2^63-1"),
    "batch_size_zero": (["replay.batch_size=0"], USER_ERROR,
                        "replay.batch_size=0 must be a whole number in 1..4096"),
    "lr_negative": (["agent.lr=-1"], USER_ERROR, "agent.lr=-1 must be a number > 0"),
    "hidden_width_zero": (["agent.hidden=[0]"], USER_ERROR,
                          "agent.hidden=[0] must be a list of whole numbers >= 1"),
    "ticks_not_a_number": (["market.ticks=abc"], USER_ERROR,
                           "market.ticks='abc': expected an integer"),
    # debug=tiny leaves a file market alone: the missing file is what is reported
    "file_missing": (["market=file", "market.path=/nonexistent.csv"], USER_ERROR,
                     "market data file not found: /nonexistent.csv (market.path"),
    "walk_forward_without_fold": (["validation=walk_forward"], USER_ERROR,
                                  "market.fold=None: validation=walk_forward runs one fold"),
    "interpolation_unresolved": (["env.num_envs=${nope}"], USER_ERROR,
                                 "the config cannot be resolved: Interpolation key 'nope'"),
    # settings that cannot run, refused before any work (or once the market shows it)
    "lr_inf": (["agent.lr=inf"], USER_ERROR,
               "agent.lr=inf must be a finite number > 0 (Adam's learning rate); the kernels "
               "compute in float32"),
    "multiplier_inf": (["env.multiplier=inf"], USER_ERROR,
                       "env.multiplier=inf must be a finite number > 0"),
    "fee_inf": (["env.fee_per_lot=inf"], USER_ERROR,
                "env.fee_per_lot=inf must be a finite number >= 0"),
    "lot_beyond_float32": (["env.lot=1e39"], USER_ERROR,
                           "env.lot=1e+39 must be a finite number > 0 (lots per position); the "
                           "kernels compute in float32, whose largest magnitude is 3.403e+38"),
    "pnl_beyond_float32": (["market.tick_size=1.0", "env.lot=1e19", "env.multiplier=1e19"],
                           USER_ERROR, "a trade's PnL can reach 78 USD (the market's largest ask "
                           "less its smallest bid) x env.multiplier x env.lot 1e+38 = 7.8e+39, "
                           "beyond float32's largest 3.403e+38"),
    "added_key_typo": (["+agent.gama=0.5"], USER_ERROR,
                       "+agent.gama=0.5: no file of conf/ declares agent.gama, so nothing would "
                       "read it; did you mean agent.gamma=0.5"),
    "sqlite_dir_missing": (["tracking.uri=sqlite:///nonexistent/dir/x.db"], USER_ERROR,
                           "the SQLite store's directory "),  # its path: the case's (below)
    "learn_start_not_below_steps": (["agent.learn_start=40"], USER_ERROR,
                                    "agent.learn_start=40 is not below steps=40: the learner "
                                    "would never update"),
    "batch_beyond_capacity": (["replay.batch_size=2048"], USER_ERROR,
                              "replay.batch_size=2048 is more than the replay holds: "
                              "2^replay.capacity_log2 = 2^10 = 1024 transitions"),
    "eval_beyond_heldout": (["eval.steps=100000"], USER_ERROR,
                            "eval.steps=100000 is more than the held-out part's 800 ticks"),
    "replay_beyond_memory": (["replay.capacity_log2=30"], USER_ERROR,
                             "of host memory (numpy backend) (replay 81 GiB"),
    "network_beyond_memory": (["agent.hidden=[100000,100000]"], USER_ERROR,
                              "is available; lower agent.hidden=[100000, 100000]"),
    "backend_unknown": (["backend=tpu"], HYDRA_ERROR, "Could not find 'backend/tpu'"),
    # a key or group conf/ does not have: the nearest it has, not Hydra's "use +key=..."
    "group_typo": (["expriment=her_ablation"], USER_ERROR,
                   "unknown key or group 'expriment' in the override expriment=her_ablation: did "
                   "you mean experiment=her_ablation? (config groups: agent, alpha, "),
    "nested_key_typo": (["reward.ema_alpa=0.1"], USER_ERROR,
                        "unknown key 'reward.ema_alpa' in the override reward.ema_alpa=0.1: did "
                        "you mean reward.ema_alpha=0.1? (keys of reward: aux_align_weight, "),
    "key_near_nothing": (["zzzz=1"], USER_ERROR,
                         "unknown key or group 'zzzz' in the override zzzz=1: no key or group of "
                         "conf/ is close to it (config groups: "),
    "option_typo": (["her=forwad"], USER_ERROR,
                    "unknown option 'forwad' of config group her in the override her=forwad: did "
                    "you mean her=forward? (options of her: backward, forward, off, on)"),
    "her_unknown": (["her=sideways"], HYDRA_ERROR, "Could not find 'her/sideways'"),
    # a key of another option of its group: that option named, not Hydra's "+key" advice
    "key_of_another_option": (["her='off'", "her.threshold=2"], USER_ERROR,
                              "her.threshold=2: her.threshold exists in her=backward, forward, "
                              "'on', not in this config's her='off': choose one of them "
                              "(her=backward her.threshold=2), or drop the override"),
    "owned_slot_init": (["isv.slots.her.her_threshold.init=-5"], USER_ERROR,
                        "the HER part sets the slot her_threshold's initial value from "
                        "her.threshold (range-checked there), never from an init; set "
                        "her.threshold=-5 instead"),
    "isv_slot_nothing_reads": (["+isv.slots.foo.bar={index: 600, doc: x}"], USER_ERROR,
                               "isv.slots.foo.bar: no part of the code reads an ISV slot named "
                               "'bar', so it would do nothing; remove it"),
    # a quotes file that parses but that the float32 kernels cannot hold: refused at its row
    "file_price_beyond_float32": (
        ["market=file", f"market.path={Path(__file__).parent}/market/data/float32_overflow.csv"],
        USER_ERROR, "float32_overflow.csv: malformed quotes, the first offending row of each "
        "problem: row 3 (line 4), column ask_px_0: 1e+300 is too large: the kernels compute in "
        "float32"),
}  # fmt: skip


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, Path]]:
    """Every case's command line, run in this process one after the other (each is refused at
    start: a process of its own would cost seconds of imports): name -> (exit status, what it
    printed, its directory)."""
    done = {}
    for name, (overrides, _, _) in CASES.items():
        where = tmp_path_factory.mktemp(name)
        code, out = train_in_process(where, "backend=numpy", "debug=tiny",
                                     f"tracking.uri=sqlite:///{where}/m.db",
                                     f"hydra.run.dir={where}/run", *overrides)  # fmt: skip
        done[name] = (code, out, where)
    return done


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_bad_override_is_refused_in_one_line_without_a_traceback(
    refusals: dict[str, tuple[int, str, Path]], name: str
) -> None:
    _, status, says = CASES[name]
    returncode, out, where = refusals[name]
    assert returncode == status, out[-3000:]
    assert any(says in line for line in out.splitlines()), out[-3000:]
    assert "Traceback" not in out
    assert "To append to your config use +" not in out
    assert not (where / "run" / "diag.jsonl").exists()  # refused before any step


@pytest.mark.slow
def test_a_missing_sqlite_directory_is_named_and_not_made(
    refusals: dict[str, tuple[int, str, Path]],
) -> None:
    _, out, where = refusals["sqlite_dir_missing"]
    assert f"the SQLite store's directory {where}/nonexistent/dir does not exist" in out
    assert not (where / "nonexistent").exists()


@pytest.mark.slow
@pytest.mark.parametrize("multirun", [False, True], ids=["run", "multirun"])
@pytest.mark.parametrize("entry", ["alpha-rl-train", "python -m alpha_rl.train"])
def test_an_unknown_group_is_refused_by_either_entry_point(
    tmp_path: Path, entry: str, multirun: bool
) -> None:
    script = Path(sys.executable).with_name("alpha-rl-train")
    command = (
        [str(script)] if entry == "alpha-rl-train" else [sys.executable, "-m", "alpha_rl.train"]
    )
    command += ["-m"] * multirun + ["debug=tiny", "backend=numpy", "expriment=her_ablation"]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == USER_ERROR, out
    assert out.splitlines() == [
        "alpha-rl-train: unknown key or group 'expriment' in the override expriment=her_ablation: "
        "did you mean experiment=her_ablation? (config groups: "
        + ", ".join(config_groups())
        + "; top-level keys: log_every, resume, search, seed, steps)"
    ]
    assert list(tmp_path.iterdir()) == []  # no run or sweep directory, no store


@pytest.mark.parametrize(
    ("overrides", "says"),
    [(["seed=1", "sed=1"], r"^unknown key or group 'sed' in the override sed=1: did you mean "
      r"seed=1\? \(config groups: .*; top-level keys: log_every, resume, search, seed, steps\)$"),
     (["agnt.lr=0.1"],
      r"^unknown key 'agnt\.lr' .*: did you mean agent\.lr=0\.1\? \(config groups"),
     (["reward.ema_alpa=0.1,0.2"], r"did you mean reward\.ema_alpha=0\.1,0\.2\? "),
     (["agent.replay.lr=1"], r"^unknown key 'agent\.replay\.lr' .*\(config groups: "),
     (["her=on,forwad"], r"^unknown option 'forwad' of config group her in the override "
      r"her=on,forwad: did you mean her=on,forward\? \(options of her: backward, "),
     (["+experiment=her_ablaton"], r"did you mean \+experiment=her_ablation\? \(options of "
      r"experiment: aux_variants, her_ablation, "),
     (["her/common=injct"], r"did you mean her/common=inject\? \(options of her/common: inject\)")],
)  # fmt: skip
def test_an_unknown_key_or_option_gets_the_nearest(overrides: list[str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        check_command_line(overrides)


def test_no_legitimate_override_is_refused_before_hydra() -> None:
    options = [f"{g}={p.stem}" for g in config_groups()
               for p in (paths.conf_dir() / g).glob("*.yaml")]  # fmt: skip
    assert "experiment=her_ablation" in options and "her/common=inject" in options
    legitimate = [f"{key}=1" for key in sorted(declared_keys())] + options + [
        "agent=null", "her='off'", "her=on,'off'", "seed=1,2", "seed=range(0,3)", "her=glob(*)",
        "agent=[dqn,rainbow]", "+agent.gama=1", "++zzzz=1", "~agent.lr", "db@agent=x",
        "hydra.job.chdir=true", "hydra/launcher=submitit_local", "kill_criteria=default",
        "isv.slots.probe.x={index:900,doc:x}", "market.columns.Bid=x",
    ]  # fmt: skip
    for override in legitimate:
        check_command_line([override])
    # Hydra's to refuse: no option close to it (it lists them), a malformed override
    check_command_line(["her=sideways"])
    check_command_line(["backend=tpu"])
    check_command_line(["seed=[1", "expriment=x"])


@pytest.mark.parametrize(
    ("overrides", "says"),
    [(["market.session_gap=1h"], "market.session_gap=1h: market.session_gap exists in "
      "market=file, sp500_daily, not in this config's market=synthetic_waves: choose one of them "
      "(market=file market.session_gap=1h), or drop the override"),
     (["alpha.lr=0.1"], "alpha.lr=0.1: alpha.lr exists in alpha='on', not in this config's "
      "alpha='off': choose it (alpha='on' alpha.lr=0.1), or drop the override"),
     (["beta.gain=1"], "beta.gain exists in beta=active_controller, not in this config's "
      "beta=sentinel"),
     (["market=file", "market.ticks=100"], "market.ticks exists in market=synthetic_waves, not "
      "in this config's market=file"),
     (["her=backward", "her.lookahead=7"], "her.lookahead exists in her=forward, 'on', not in "
      "this config's her=backward: choose one of them (her=forward her.lookahead=7)"),
     (["her=on,'off'", "her.threshold=2"], "not in this config's her='off'"),  # each swept
     (["debug.market_ticks=10"], "debug.market_ticks exists in debug=tiny, not in this config "
      "(no debug): choose it (debug=tiny debug.market_ticks=10)"),
     (["her=backward", "isv.slots.her.her_forward_lookahead.index=900"],
      "isv.slots.her.her_forward_lookahead.index exists in her=forward, 'on', not in this "
      "config's her=backward"),
     (["isv.slots.her.her_threshold.init=-5"], "set her.threshold=-5 instead")],
)  # fmt: skip
def test_a_key_of_another_option_of_its_group_names_the_options(
    overrides: list[str], says: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        check_chosen_options(overrides)
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_a_key_the_chosen_options_have_is_left_alone() -> None:
    for overrides in (["her.threshold=2"], ["beta=active_controller", "beta.gain=1"],
                      ["+experiment=her_walk_forward", "validation.folds=3"],
                      ["market=file", "market.session_gap=1h"], ["agent=dqn,rainbow", "seed=1,2"],
                      ["alpha='on'", "alpha.lr=0.1"], ["her='off'", "~her.enabled"],
                      ["+her.extra=1"], ["+hydra/launcher=basic", "her.threshold=2"],
                      ["market=file", "market.path=quotes.csv"],
                      ["alpha=null", "seed=1"]):  # fmt: skip
        check_chosen_options(overrides)
    with pytest.raises(ConfigError, match=r"^alpha\.lr=1: alpha\.lr exists in alpha='on', not "
                       r"in this config \(no alpha\)"):  # fmt: skip
        check_chosen_options(["~alpha", "alpha.lr=1"])
    # Hydra's to judge: a key no option has (Hydra's advice to add it is then right), a glob,
    # a group set to null (Hydra takes ~group)
    check_chosen_options(["alpha=null", "alpha.lr=1"])
    check_chosen_options(["isv.slots.her.her_threshold.kind=diag"])
    check_chosen_options(["her=glob(*)", "her.threshold=2"])


def test_the_overrides_come_from_a_command_line_that_uses_conf_alone() -> None:
    line = ["-m", "--cfg", "job", "seed=1,2", "her='off'"]
    assert command_line_overrides(line) == ["seed=1,2", "her='off'"]
    other_conf = [["-cn", "other"], ["--config-dir", "/tmp"], ["hydra.searchpath=[file:///x]"],
                  ["+hydra.searchpath=[file:///x]"], ["--shell-completion"]]  # fmt: skip
    for other in [*other_conf, ["seed=1", "--cfg", "job"]]:  # the last: Hydra's parser refuses it
        assert command_line_overrides([*other, "expriment=x"]) == []


def test_debug_tiny_shortens_the_synthetic_market_and_leaves_a_file_market_alone() -> None:
    tiny, _ = compose_train(["debug=tiny"])
    full, _ = compose_train([])
    assert 0 < tiny.market.ticks < full.market.ticks
    assert compose_train(["debug=tiny", "market.ticks=777"])[0].market.ticks == 777
    file, _ = compose_train(["debug=tiny", "market=file", "market.path=quotes.csv"])
    assert "ticks" not in file.market


def _tracking(uri: str) -> TrackingConfig:
    shipped = OmegaConf.load(paths.conf_dir() / "tracking" / "local.yaml")
    return TrackingConfig.from_cfg({**OmegaConf.to_container(shipped), "uri": uri})


@pytest.mark.parametrize(
    "uri",
    ["sqlite:///mlflow.db", "sqlite:////tmp/m.db", "postgresql://u@host:5432/db",
     "postgresql+psycopg2://u@host/db", "mysql://u@host/db", "mysql+pymysql://u@host/db",
     "mssql://u@host/db", "mssql+pyodbc://u@host/db", "http://127.0.0.1:5000",
     "https://mlflow.example.org", "databricks", "databricks://profile"],
)  # fmt: skip
def test_every_tracking_uri_mlflow_stores_runs_at_is_taken(uri: str) -> None:
    assert _tracking(uri).uri == uri


@pytest.mark.parametrize(
    ("uri", "says"),
    [("bogus://x", "is not a tracking URI"), ("s3://bucket/runs", "is not a tracking URI"),
     ("sqlite:mlflow.db", "is not a tracking URI"), ("postgresql+a+b://h/db", "is not a"),
     ("file:///tmp/mlruns", "file stores are not supported"),
     ("/tmp/mlruns", "file stores are not supported"),
     ("mlruns", "file stores are not supported"),
     ("postgresql://u:pw@host:5432/db", "holds a password"),
     ("https://u:pw@mlflow.example.org", "holds a password")],
)  # fmt: skip
def test_a_tracking_uri_mlflow_cannot_track_into_is_refused(uri: str, says: str) -> None:
    shown = re.escape(uri.replace(":pw@", ":***@"))  # a password is never shown
    what = "MLFLOW_TRACKING_PASSWORD" if "password" in says else "sqlite:///"  # what to do
    with pytest.raises(ConfigError, match=rf"tracking\.uri='{shown}'.*{says}.*{what}"):
        _tracking(uri)


def test_an_sqlite_store_whose_directory_does_not_exist_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative path is taken from the working directory
    says = rf"^tracking\.uri='sqlite:///runs/m\.db': the SQLite store's directory {tmp_path}/runs "
    with pytest.raises(ConfigError, match=says + "does not exist"):
        _tracking("sqlite:///runs/m.db")
    assert not (tmp_path / "runs").exists()
    (tmp_path / "runs").mkdir()
    assert _tracking("sqlite:///runs/m.db").uri == "sqlite:///runs/m.db"
