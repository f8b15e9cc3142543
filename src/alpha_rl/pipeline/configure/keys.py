"""The keys conf/ declares: the refusal of a `+key` that adds one nothing reads, and of a `key=`
that names none.

A `+key=value` (or `++key=value`) override adds a key the composed config does not have; Hydra
takes any, so a typo (`+agent.gama=0.5`) is logged as a param and silently does nothing. Which
added keys are read is only known by running the code (tests/test_config_keys.py records the
reads of whole runs); before any work, the safe test is the set of keys that the files of conf/
declare: every key the code reads is declared in an option file (that test fails otherwise), so
an added key that no file declares is read by nothing and is refused, with the nearest declared
key as a did-you-mean. The test cannot refuse a legitimate `+`:
- a key some option file declares is taken, even where the composed options do not declare it
  (`+debug.market_ticks=500`: the synthetic market reads it through `oc.select`);
- a group selection (`+experiment=her_ablation`, `+hydra/launcher=slurm`, a group of a
  searchpath beyond conf/ such as alpha-rl-confirm's `+candidate=...`) is Hydra's to check;
- Hydra's own keys (`hydra.`) are Hydra's, and the subtrees whose parsers take every key and
  judge it themselves (WHOLE: `isv.slots` declares slots, `market` and `tracking` refuse unknown
  keys naming them) are left to those parsers.

A plain `key=value` whose key no file declares, Hydra refuses with the advice to add it
(`+key=value`), which for a typo is the wrong fix: the command line is checked before Hydra
composes (check_command_line), and such an override is refused with the nearest declared key or
config group instead, as is a group option that is no file of its group when one is close to it
(Hydra lists a group's options but proposes none).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path

import yaml
from hydra._internal.utils import get_args_parser  # Hydra's own command-line parser
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, Override, QuotedString
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf

from alpha_rl import paths
from alpha_rl.errors import ConfigError

# Hydra's own (launchers), which Hydra reads; the kill check's settings, which
# alpha-rl-kill-check loads from conf/kill_criteria/ itself, and a staged study's, which
# alpha-rl-study loads from conf/study/ (neither a group of train.yaml)
SKIP_GROUPS = ("hydra", "kill_criteria", "study")
# subtrees a parser takes whole (to_container) and checks field by field, refusing unknown and
# missing ones: the ISV slots (isv._parse_slot), the market (market.config) and tracking
# (TrackingConfig.from_cfg)
WHOLE = ("isv.slots", "market", "tracking")


def option_files() -> list[Path]:
    """Every option file of every config group (conf/<group>[/<sub>]/<option>.yaml)."""
    conf = paths.conf_dir()
    grouped = [p for p in conf.rglob("*.yaml") if p.parent != conf]
    return sorted(p for p in grouped if p.relative_to(conf).parts[0] not in SKIP_GROUPS)


def _package(path: Path) -> str:
    """Where a file's keys land: the root with `# @package _global_`, else its group path."""
    head = path.read_text(encoding="utf-8").split("\n", 1)[0]
    if head.strip() == "# @package _global_":
        return ""
    return ".".join(path.parent.relative_to(paths.conf_dir()).parts)


def leaves(tree: object, prefix: str = "") -> Iterator[str]:
    """Dotted keys of the leaves of a nested dict (a list is one leaf)."""
    if isinstance(tree, dict) and tree:
        for key, value in tree.items():
            yield from leaves(value, f"{prefix}.{key}" if prefix else str(key))
    elif prefix:
        yield prefix


def file_keys(path: Path) -> set[str]:
    """The keys a config file sets, as full dotted keys of the composed config."""
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    data.pop("defaults", None)
    data.pop("hydra", None)
    package = _package(path)
    return {f"{package}.{k}" if package else k for k in leaves(data)}


@cache
def declared_keys() -> frozenset[str]:
    """The keys that conf/train.yaml and the option files of its groups declare."""
    keys = file_keys(paths.conf_dir() / "train.yaml")
    for path in option_files():
        keys |= file_keys(path)
    return frozenset(keys)


def task_overrides(cfg: DictConfig) -> list[str]:
    """The command line's overrides of the job `cfg` is: its `hydra` node's (a config composed
    with Hydra's), else the running Hydra job's; [] outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    task = OmegaConf.select(cfg, "hydra.overrides.task", default=None)
    if task is None and HydraConfig.initialized():
        task = HydraConfig.get().overrides.task
    return [] if task is None else [str(o) for o in task]


def task_groups(cfg: DictConfig) -> frozenset[str]:
    """The config groups the job `cfg` composed (Hydra's runtime choices), with those of a
    searchpath beyond conf/ (alpha-rl-confirm's `candidate`); empty outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    choices = OmegaConf.select(cfg, "hydra.runtime.choices", default=None)
    if choices is None and HydraConfig.initialized():
        choices = HydraConfig.get().runtime.choices
    return frozenset(str(k) for k in (choices or {}))


def _is_group(key: str, groups: frozenset[str]) -> bool:
    """Whether an override's key selects a config group (`experiment`, `hydra/launcher`)."""
    return "/" in key or key in groups or (paths.conf_dir() / key).is_dir()


def _left_to_others(key: str) -> bool:
    """Hydra's keys and those under a subtree whose own parser judges every key (WHOLE)."""
    return key.split(".", 1)[0] == "hydra" or any(
        key == w or key.startswith(w + ".") for w in WHOLE
    )


def check_added_keys(overrides: Iterable[str], groups: frozenset[str] = frozenset()) -> None:
    """Refuse (ConfigError) a `+key=...` or `++key=...` whose key no file of conf/ declares:
    nothing would read it (see the module docstring for what is never refused); `groups`: the
    config groups the job composed (task_groups), whose selections are Hydra's to check."""
    declared = declared_keys()
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        if not (override.is_add() or override.is_force_add()):
            continue
        key = override.key_or_group
        if override.package is not None or _is_group(key, groups) or _left_to_others(key):
            continue
        if key in declared or any(k.startswith(key + ".") for k in declared):
            continue
        near = _nearest(key, sorted(declared))
        value = override.input_line.split("=", 1)[1] if "=" in override.input_line else "..."
        fix = (
            f"did you mean {near}={value} (a declared key: set it without the +)?"
            if near
            else "remove it, or declare it in the option file of the code that reads it"
        )
        raise ConfigError(f"{override.input_line}: no file of conf/ declares {key}, so nothing "
                          f"would read it; {fix} (see conf/)")  # fmt: skip


def config_groups() -> list[str]:
    """The config groups of conf/ (`her`, `her/common`), Hydra's own and the kill check's aside."""
    conf = paths.conf_dir()
    found = (p.relative_to(conf) for p in conf.rglob("*") if p.is_dir())
    return sorted(str(p) for p in found if p.parts[0] not in SKIP_GROUPS)


def command_line_overrides(argv: list[str]) -> list[str]:
    """The overrides of a Hydra command line (its options left out); none where it names another
    config (--config-name, --config-path, --config-dir), asks for shell completion or extends the
    search path (hydra.searchpath=...): the keys and groups are then not conf/'s alone."""
    args, rest = get_args_parser().parse_known_args(argv)
    other = args.config_name or args.config_path or args.config_dir or args.shell_completion
    if rest or other or any(o.lstrip("+").startswith("hydra.searchpath") for o in args.overrides):
        return []
    return list(args.overrides)


def check_command_line(overrides: Iterable[str]) -> None:
    """Refuse (ConfigError) what Hydra would refuse with the advice to add it or with a list of
    options alone: a plain `key=...` whose key no file of conf/ declares, and a group option
    that is no file of its group while one is close to it; each with the nearest as a
    did-you-mean. Anything else is Hydra's to judge (see the module docstring)."""
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException:
        return  # a malformed override: Hydra says where
    for override in parsed:
        key = override.key_or_group
        if override.package is not None or override.is_delete() or re.match(r"hydra\b", key):
            continue
        if (paths.conf_dir() / key).is_dir():
            _check_option(override)
        elif not (override.is_add() or override.is_force_add() or "/" in key):
            _check_key(override)


@cache
def _known() -> frozenset[str]:
    """The declared keys and every key above one (`reward`, `isv.slots`)."""
    above = {k.rsplit(".", i)[0] for k in declared_keys() for i in range(1, k.count(".") + 1)}
    return frozenset(declared_keys() | above)


def _check_key(override: Override) -> None:
    """Refuse a plain override of a key no file declares, nor any key above it (a new ISV slot,
    `+isv.slots.<family>.<name>={...}`, is under `isv.slots`, which conf/isv/base.yaml declares
    empty)."""
    key = override.key_or_group
    parts = key.split(".")
    above = {".".join(parts[:i]) for i in range(1, len(parts))}
    if key in _known() or above & declared_keys():
        return  # under a key a file declares whole (`isv.slots: {}`, `market.columns`): Hydra's
    groups = config_groups()
    parent = key.rpartition(".")[0]
    names = sorted(_known() | set(groups))
    siblings = [n for n in names if parent and n.rpartition(".")[0] == parent]
    near = _nearest(key, siblings) or _nearest(key, names)
    value = override.input_line.split("=", 1)[1]
    fix = f"did you mean {near}={value}?" if near else "no key or group of conf/ is close to it"
    if parent in _known():
        children = sorted({n.rpartition(".")[2] for n in _known() if n.startswith(parent + ".")
                           and n.count(".") == key.count(".")})  # fmt: skip
        listed = f"keys of {parent}: {', '.join(children)}"
    else:
        top = sorted({k for k in _known() if "." not in k} - set(groups))
        listed = f"config groups: {', '.join(groups)}; top-level keys: {', '.join(top)}"
    what = "key" if parent else "key or group"
    raise ConfigError(f"unknown {what} {key!r} in the override {override.input_line}: {fix} "
                      f"({listed})")  # fmt: skip


def _check_option(override: Override) -> None:
    """Refuse a group option (or one of a sweep's) that is no file of its group, where one close
    to it is: Hydra would list the options, but not say which was meant."""
    group, value = override.key_or_group, override.value()
    folder = paths.conf_dir() / group
    chosen = value.list if isinstance(value, ChoiceSweep) else [value]
    options = sorted(p.stem for p in folder.glob("*.yaml"))
    for option in (c.text if isinstance(c, QuotedString) else c for c in chosen):
        if not isinstance(option, str) or (folder / f"{option}.yaml").is_file():
            continue
        near = _nearest(option, options)
        if near is None:
            continue  # Hydra's message lists the options
        typed = override.input_line.split("=", 1)[1]
        fixed = re.sub(rf"(?<![\w.-]){re.escape(option)}(?![\w.-])", near, typed, count=1)
        raise ConfigError(
            f"unknown option {option!r} of config group {group} in the override "
            f"{override.input_line}: did you mean {override.input_line.split('=', 1)[0]}={fixed}? "
            f"(options of {group}: {', '.join(options)})"
        )


def _nearest(name: str, names: list[str]) -> str | None:
    """The one of `names` closest to `name` (difflib), or None where none is close."""
    near = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return near[0] if near else None
