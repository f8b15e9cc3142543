"""No dead config keys: every key of every option file of every group is read by the code.

Each composition below runs a whole tiny job (numpy backend) while every read of the config is
recorded: an attribute, item or `get` read of a DictConfig, an `OmegaConf.select`, and the keys an
interpolation that was read points at. Dumping the config (MLflow params, config.yaml) reads
through `to_container`, which is not recorded, so a key only ever logged counts as unread. A key
that an option file sets and no composition that takes the file reads is dead: a researcher who
changes it gets nothing. Every option of every group appears in at least one composition.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from alpha_rl import paths
from alpha_rl.errors import ConfigError
from alpha_rl.pipeline.configure.config import plan_run
from alpha_rl.pipeline.configure.keys import (
    SKIP_GROUPS,
    WHOLE,
    check_added_keys,
    declared_keys,
    file_keys,
    option_files,
)
from alpha_rl.pipeline.life.run import Job, run_job
from tests.helpers import compose_train, write_quotes

TINY = ["backend=numpy", "debug=tiny"]
_INTERPOLATION = re.compile(r"\$\{(?:oc\.select:)?([A-Za-z_][\w.]*)")


def compositions(quotes: Path) -> dict[str, list[str]]:
    """Name -> overrides: together they take every option of every group (besides hydra/)."""
    file_market = ["market=file", f"market.path={quotes}"]
    return {
        "default": [],
        "her_off_stride6": ["her='off'", "reward=stride6"],
        "her_backward_beta_active_walk_forward": ["her=backward", "beta=active",
                                                  "validation=walk_forward", "market.fold=1"],
        "her_forward_file_market_margin": ["her=forward", *file_market, "objective=margin"],
        "market_sp500_daily": ["market=sp500_daily"],  # real closes a package ships
        # the cuda backend's keys on numpy (CI has no GPU); a server's keys on a SQLite store
        "backend_cuda_keys": ["backend=cuda", "backend.name=numpy"],
        "tracking_server_keys": ["tracking=server"],
        "backend_auto_scale_gpu": ["backend=auto", "backend.name=numpy", "scale=gpu"],
        **{f"reward_variant_{v}": [f"reward_variant={v}"]
           for v in ("stride6", "stride7_active", "stride7_sentinel")},
        **{f"experiment_{e}": [f"experiment={e}"]
           for e in ("her_ablation", "her_components", "reward_variants", "learner_variants",
                     "aux_variants")},
        "experiment_her_walk_forward": ["experiment=her_walk_forward", "market.fold=0"],
        "alpha_on_beta_controller": ["alpha='on'", "beta=active_controller"],
        **{f"agent_{a}": [f"agent={a}"]
           for a in ("rainbow", "dqn_dueling", "dqn_nstep3", "dqn_noisy", "dqn_c51")},
        # the objectives; a search preset's keys are its sweeper's (hydra.), taken by a single run
        "objective_sharpe_search_her": ["objective=sharpe_iqm", "hparams_search=her_optuna"],
        "objective_capture_search_learner": ["objective=capture_iqm",
                                             "hparams_search=learner_optuna"],
    }  # fmt: skip


def files_composed(cfg: DictConfig) -> set[Path]:
    """The option files a composed config took: its choices and what their defaults include."""
    conf = paths.conf_dir()
    chosen = [conf / group / f"{option}.yaml"
              for group, option in cfg.hydra.runtime.choices.items()
              if option and not group.startswith(SKIP_GROUPS)]  # fmt: skip
    found: set[Path] = set()
    while chosen:
        path = chosen.pop()
        if path in found or not path.is_file():
            continue
        found.add(path)
        for entry in (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("defaults", []):
            if isinstance(entry, str) and entry != "_self_":
                chosen.append(path.parent / f"{entry}.yaml")
    return found


@dataclass
class Reads:
    """The config keys read while it was active (full dotted keys)."""

    keys: set[str]

    def covers(self, key: str) -> bool:
        """Whether `key` or a leaf below it was read, or a WHOLE subtree that holds it."""
        if any(key.startswith(w + ".") and w in self.keys for w in WHOLE):
            return True
        return key in self.keys or any(k.startswith(key + ".") for k in self.keys)


@contextmanager
def recording() -> Iterator[Reads]:
    """Record every read of any DictConfig, and every OmegaConf.select, inside the block."""
    reads = Reads(set())
    get_impl, select = DictConfig._get_impl, OmegaConf.select

    def recorded_get(self, key, default_value, validate_key=True):
        reads.keys.add(self._get_full_key(key))
        return get_impl(self, key, default_value, validate_key)

    def recorded_select(cfg, key, *args, **kwargs):
        base = cfg._get_full_key(None) if isinstance(cfg, DictConfig | ListConfig) else ""
        reads.keys.add(f"{base}.{key}" if base else key)
        return select(cfg, key, *args, **kwargs)

    DictConfig._get_impl, OmegaConf.select = recorded_get, staticmethod(recorded_select)
    try:
        yield reads
    finally:
        DictConfig._get_impl, OmegaConf.select = get_impl, select


def follow_interpolations(cfg: DictConfig, reads: Reads) -> None:
    """Add the keys that read interpolations (`${a.b}`, `${oc.select:a.b,...}`) point at."""
    raw = OmegaConf.to_container(cfg, resolve=False)
    raw.pop("hydra", None)
    values = {}

    def walk(tree: object, prefix: str) -> None:
        if isinstance(tree, dict):
            for k, v in tree.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k))
        else:
            values[prefix] = str(tree)

    walk(raw, "")
    pending = [k for k in values if reads.covers(k)]
    while pending:
        for target in _INTERPOLATION.findall(values[pending.pop()]):
            if not reads.covers(target):
                reads.keys.add(target)
                pending.extend(k for k in values if k == target or k.startswith(target + "."))


def run_recorded(tmp_path: Path, name: str, overrides: list[str],
                 extra: dict[str, object] | None = None) -> tuple[Reads, set[Path]]:  # fmt: skip
    """A tiny job of `overrides` (and `extra` keys set in the composed config, as a file would
    set them); the keys it read and the option files it took."""
    cfg, choices = compose_train([*TINY, f"tracking.uri=sqlite:///{tmp_path}/mlflow.db",
                                  *overrides])  # fmt: skip
    with open_dict(cfg):
        for key, value in (extra or {}).items():
            OmegaConf.update(cfg, key, value)
    with recording() as reads:
        outcome = run_job(cfg, Job(tmp_path / name, choices))
    assert outcome.status == "FINISHED", (name, outcome.reason)
    follow_interpolations(cfg, reads)
    return reads, files_composed(cfg)


# read with a default only when Hydra's choices lack the group, which a composed run never does
# (labels.tags: the her label), so a `+her.name` changes nothing and is rightly refused
FALLBACK_READS = {"her.name"}


def undeclared(reads: Reads) -> set[str]:
    """Keys a run read that no file of conf/ declares (Hydra's own, its defaults lists and the
    WHOLE subtrees aside): those a `+key` could add that keys.check_added_keys would refuse
    although read."""
    declared = declared_keys()
    return {k for k in reads.keys - FALLBACK_READS
            if k.split(".", 1)[0].split("[", 1)[0] not in ("hydra", "defaults")
            and not any(k == w or k.startswith(w + ".") for w in WHOLE)
            and k not in declared and not any(d.startswith(k + ".") for d in declared)}  # fmt: skip


def unread(runs: list[tuple[Reads, set[Path]]],
           files: list[Path] | None = None) -> dict[str, list[str]]:  # fmt: skip
    """Option file -> its keys that no run taking the file read (files: every option file)."""
    dead: dict[str, list[str]] = {}
    for path in option_files() if files is None else files:
        taking = [reads for reads, taken in runs if path in taken]
        for key in sorted(file_keys(path)):
            if taking and not any(reads.covers(key) for reads in taking):
                name = path.relative_to(paths.conf_dir()) if path.is_relative_to(
                    paths.conf_dir()) else path  # fmt: skip
                dead.setdefault(str(name), []).append(key)
    return dead


def quotes_file(tmp_path: Path, rows: int = 4000) -> Path:
    """A small L1 quotes file (a random walk of whole ticks) for market=file."""
    steps = np.random.default_rng(0).integers(-1, 2, rows)
    return write_quotes(tmp_path / "quotes.csv", 100 + np.cumsum(steps) / 100)


@pytest.mark.slow
def test_every_key_of_every_option_file_is_read(tmp_path: Path) -> None:
    runs = [run_recorded(tmp_path, name, overrides)
            for name, overrides in compositions(quotes_file(tmp_path)).items()]  # fmt: skip
    untaken = [str(p.relative_to(paths.conf_dir())) for p in option_files()
               if not any(p in files for _, files in runs)]  # fmt: skip
    assert not untaken, f"no composition takes {untaken}: add one to compositions()"
    assert unread(runs) == {}, "keys nothing reads (remove them, or read and test them)"
    read_undeclared = set().union(*(undeclared(reads) for reads, _ in runs))
    assert not read_undeclared, f"keys read but declared in no file of conf/: {read_undeclared}"


@pytest.mark.slow
def test_a_key_nothing_reads_is_found(tmp_path: Path) -> None:
    # her.ring_len: the kind of key this test exists for (the mid ring is the compiled HER_RING)
    # (set as a stale file would set it: a +her.ring_len=512 override is refused before the job)
    reads, files = run_recorded(tmp_path, "dead", [], {"her.ring_len": 512})
    assert not reads.covers("her.ring_len")
    assert reads.covers("her.threshold") and reads.covers("isv.slots.her.her_threshold")
    assert paths.conf_dir() / "her" / "common" / "inject.yaml" in files
    assert unread([(reads, files)]) == {}  # every key of the files it took is read
    stale = tmp_path / "backward_with_ring.yaml"  # an option file that still sets it
    stale.write_text("# @package _global_\nher:\n  threshold: 1.5\n  ring_len: 512\n")
    assert unread([(reads, files | {stale})], [stale]) == {str(stale): ["her.ring_len"]}


def test_an_added_key_nothing_reads_is_refused_with_the_nearest_declared_one() -> None:
    cfg, _ = compose_train([*TINY, "+agent.gama=0.5"])
    with pytest.raises(
        ConfigError,
        match=r"^\+agent\.gama=0\.5: no file of conf/ declares "
        r"agent\.gama, so nothing would read it; did you mean agent\.gamma=0\.5 ",
    ):
        plan_run(cfg)
    with pytest.raises(ConfigError, match=r"\+\+her\.closed_rings=8: .* her\.closed_ring=8 "):
        check_added_keys(["++her.closed_rings=8"])
    with pytest.raises(ConfigError, match=r"\+her\.ring_len=512: .* remove it, or declare it"):
        check_added_keys(["+her.ring_len=512"])


def test_no_legitimate_addition_is_refused() -> None:
    declared = sorted(declared_keys())
    assert "agent.gamma" in declared and "debug.market_ticks" in declared and "seed" in declared
    check_added_keys([f"+{key}=1" for key in declared] + [f"++{key}=1" for key in declared])
    check_added_keys(["+experiment=her_ablation", "+hydra/launcher=slurm", "+her/common=inject",
                      "+hydra.job.chdir=true", "+isv.slots.extra.x={index:900,doc:x}",
                      "+market.extra=1", "+tracking.extra=1", "agent.gama=1", "~agent.lr",
                      "+agent.epsilon=x", "+scale=gpu", "+db@agent=x"])  # fmt: skip
    # a key a file declares is taken where the composed options leave it out
    plan_run(compose_train(["backend=numpy", "+debug.market_ticks=1000"])[0])


def test_a_group_of_a_searchpath_beyond_conf_is_selected_with_a_plus(tmp_path: Path) -> None:
    # alpha-rl-confirm writes each candidate as an option of its own group and adds it with +
    (tmp_path / "candidate").mkdir()
    (tmp_path / "candidate" / "trial3.yaml").write_text("# @package _global_\nseed: 7\n")
    cfg, _ = compose_train(["backend=numpy", f"hydra.searchpath=[file://{tmp_path}]",
                            "+candidate=trial3"])  # fmt: skip
    assert plan_run(cfg).run.seed == 7
