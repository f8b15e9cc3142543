"""docs/architecture.md's walk-throughs of a new HER variant and a new learner head list exactly
the files one touches. Each list is derived here from the code (the registries, the files of a
kernel stem, the modules that branch per direction or read a head's flag) and compared with the
page; then a copy of the tree gets a new one through the listed files only (all but its kernel),
and its config composes and every registry takes it."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

import alpha_rl
from alpha_rl import paths
from alpha_rl import vocabulary as vocab
from alpha_rl.agent.head import HEADS
from alpha_rl.her_variant import DIRECTIONS
from alpha_rl.hindsight import KERNELS, STEP_COUNTS
from alpha_rl.kernels import registry

ROOT = paths.project_root()
PACKAGE = Path(alpha_rl.__file__).parent
SRC = "src/alpha_rl/"
REFERENCE = "docs/reference/configuration.md"
HER_TITLE, HEAD_TITLE = "a new HER variant", "a new learner piece"
NEW_HER, NEW_HEAD = "sideways", "qr"  # the pages' examples


@dataclass(frozen=True)
class Walk:
    """One walk-through: the files every new one touches, those only where it needs them, and
    the tests it names."""

    required: set[str]
    optional: set[str]
    tests: set[str]


def walkthrough(title: str) -> Walk:
    text = (ROOT / "docs/architecture.md").read_text(encoding="utf-8")
    body = text.split(f"## Walk-through: {title}\n", 1)[1].split("\n## ", 1)[0]
    steps, tests = body.split("\nTests:", 1)
    return Walk(set(re.findall(r"^\d+\. `([^`]+)`", steps, re.M)),
                set(re.findall(r"^- `([^`]+)`", steps, re.M)),
                set(re.findall(r"`(tests/[^`]+\.py)`", tests)))  # fmt: skip


def modules() -> dict[str, ast.Module]:
    """Every module of the package by its path from the project root."""
    return {f"{SRC}{p.relative_to(PACKAGE)}": ast.parse(p.read_text(encoding="utf-8"))
            for p in sorted(PACKAGE.rglob("*.py"))}  # fmt: skip


def attribute_reads(tree: ast.AST, names: tuple[str, ...]) -> set[str]:
    """The `names` a module reads as attributes (x.forward; a call, x.forward(...), is not)."""
    called = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    return {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in names
            and id(node) not in called}  # fmt: skip


def stem_files(stem: str) -> set[str]:
    """What a kernel stem is made of: its source, declarations, oracles and constants."""
    return {f"cuda/{stem}.cu", f"{SRC}kernels/{stem}.py", f"{SRC}reference/{stem}.py",
            f"{SRC}abi.py"}  # fmt: skip


def sweeping_every(group: str) -> set[str]:
    """The presets whose sweep takes every option of conf/<group>/."""
    options = {p.stem for p in (ROOT / "conf" / group).glob("*.yaml")}
    found = set()
    for path in sorted((ROOT / "conf/experiment").glob("*.yaml")):
        params = (yaml.safe_load(path.read_text()) or {}).get("hydra", {}).get("sweeper", {})
        swept = str(params.get("params", {}).get(group, ""))
        if {v.strip().strip("'\"") for v in swept.split(",")} == options:
            found.add(f"conf/experiment/{path.name}")
    return found


def her_files() -> Walk:
    """A new direction's files: registering it (her_variant, its option, the presets that sweep
    every variant, the reference), its kernel's stem, the names of its slots, and the modules
    that branch on every direction by name; optional: those that branch on one."""
    reads = {path: attribute_reads(tree, DIRECTIONS) for path, tree in modules().items()}
    every = {path for path, names in reads.items() if names == set(DIRECTIONS)}
    one = {path for path, names in reads.items() if names and names != set(DIRECTIONS)}
    stems = {k.stem for k in registry.all_kernels() if k.name in KERNELS}
    assert set(STEP_COUNTS) == set(DIRECTIONS), "a direction without its slot and log name"
    slots = {v for k, v in vars(vocab).items() if k.startswith("SLOT_")}
    assert {slot for slot, _ in STEP_COUNTS.values()} <= slots, "STEP_COUNTS names vocabulary's"
    files = {f"{SRC}her_variant.py", f"conf/her/{NEW_HER}.yaml", *sweeping_every("her"),
             REFERENCE, f"{SRC}vocabulary.py", *every}  # fmt: skip
    return Walk(files | {f for s in stems for f in stem_files(s)}, one, set())


def head_files() -> Walk:
    """A new head's files: its stem, head.py (HEADS), every module that reads a head's flag
    (AgentConfig), the option files that declare one off by default, its own option, the presets
    that sweep every learner, the reference."""
    keys = tuple(h.key for h in HEADS if h.key is not None)
    readers = {path for path, tree in modules().items() if path != f"{SRC}agent/head.py" and (
        attribute_reads(tree, keys) or any(isinstance(n, ast.Constant) and n.value in keys
                                           for n in ast.walk(tree)))}  # fmt: skip
    declared = {f"conf/agent/{p.name}" for p in (ROOT / "conf/agent").glob("*.yaml")
                if any(yaml.safe_load(p.read_text()).get("agent", {}).get(k) is False
                       for k in keys)}  # fmt: skip
    files = {f"{SRC}agent/head.py", *readers, *declared, f"conf/agent/dqn_{NEW_HEAD}.yaml",
             *sweeping_every("agent"), REFERENCE, *stem_files(NEW_HEAD)}  # fmt: skip
    return Walk(files, set(), set())


def test_the_her_walkthrough_lists_the_files_the_code_requires() -> None:
    listed, derived = walkthrough(HER_TITLE), her_files()
    assert listed.required == derived.required
    assert listed.optional == derived.optional
    assert all((ROOT / t).is_file() for t in listed.tests), listed.tests


def test_the_head_walkthrough_lists_the_files_the_code_requires() -> None:
    listed, derived = walkthrough(HEAD_TITLE), head_files()
    assert listed.required == derived.required and not listed.optional
    new = {f"tests/kernels/test_{NEW_HEAD}.py", f"tests/reference/test_{NEW_HEAD}.py"}
    assert all((ROOT / t).is_file() for t in listed.tests - new), listed.tests


# --- a new one in a copy of the tree, by the listed files only ---


class Tree:
    """A copy of the package, conf/ and the configuration reference, edited file by file."""

    def __init__(self, where: Path) -> None:
        self.root, self.changed = where, set()
        shutil.copytree(PACKAGE, where / SRC, ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(ROOT / "conf", where / "conf")
        (where / "cuda").mkdir()
        (where / REFERENCE).parent.mkdir(parents=True)
        shutil.copy(ROOT / REFERENCE, where / REFERENCE)

    def edit(self, rel: str, old: str, new: str) -> None:
        """Replace the one `old` in `rel` by `new`."""
        path = self.root / rel
        text = path.read_text(encoding="utf-8")
        assert text.count(old) == 1, f"{rel} no longer has {old!r} once: update this test"
        path.write_text(text.replace(old, new), encoding="utf-8")
        self.changed.add(rel)

    def add(self, rel: str, after: str, text: str) -> None:
        """Insert `text` after the one `after` in `rel`."""
        self.edit(rel, after, after + text)

    def create(self, rel: str, text: str) -> None:
        (self.root / rel).write_text(text, encoding="utf-8")
        self.changed.add(rel)

    def python(self, *args: str) -> subprocess.CompletedProcess:
        env = os.environ | {"PYTHONPATH": str(self.root / "src"), "ALPHA_RL_ROOT": str(self.root)}
        done = subprocess.run([sys.executable, *args], cwd=self.root, env=env, text=True,
                              capture_output=True, timeout=600)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    def regenerate_reference(self) -> str:
        """The configuration reference written anew in the copy (item: docs/reference)."""
        self.python("-m", "alpha_rl.docsite.config_reference")
        self.changed.add(REFERENCE)
        return (self.root / REFERENCE).read_text(encoding="utf-8")


HER_CHECK = """
import json
from hydra import compose, initialize_config_dir
from alpha_rl import paths
from alpha_rl.her_variant import TREATMENTS, HerVariant
from alpha_rl.hindsight import HerConfig
from alpha_rl.killcheck.axes import axis_for
from alpha_rl.killcheck.calibrate import HER
from alpha_rl.killcheck.criteria import runs_with
from alpha_rl.pipeline.configure import memory
from alpha_rl.pipeline.configure.config import layout_from_config, plan_run
from alpha_rl.tracking import RunRecord

with initialize_config_dir(config_dir=str(paths.conf_dir()), version_base="1.3"):
    cfg = compose("train", overrides=["her=sideways", "reward.scale=1.0", "backend=numpy",
                                      "debug=tiny"])
plan = plan_run(cfg)
run = RunRecord("r1", "her-sideways s0", "FINISHED", HerVariant.SIDEWAYS.params(), {}, {})
print(json.dumps({
    "variant": HerConfig.from_cfg(cfg).variant.value,
    "slots": sorted(n for n in layout_from_config(cfg).names() if "sideways" in n),
    "her_bytes": memory.estimate(plan, int(cfg.isv.size)).arrays["HER"],
    "axis": axis_for("her").value(run),
    "order": axis_for("her").order({"sideways", "on", "backward"}),
    "audited": len(runs_with([run], TREATMENTS)),
    "calibrated": HER["sideways"] == HerVariant.SIDEWAYS.params(),
}))
"""


def test_a_her_variant_added_by_the_listed_files_is_taken_everywhere(tmp_path: Path) -> None:
    tree = Tree(tmp_path)
    variant = f"{SRC}her_variant.py"
    tree.edit(variant, 'DIRECTIONS = ("backward", "forward")',
              'DIRECTIONS = ("backward", "forward", "sideways")')  # fmt: skip
    tree.add(variant, '    ON = "on"\n', '    SIDEWAYS = "sideways"\n')
    tree.add(variant, '    HerVariant.ON: frozenset({"backward", "forward"}),\n',
             '    HerVariant.SIDEWAYS: frozenset({"sideways"}),\n')  # fmt: skip
    tree.edit(variant, "HerVariant.FORWARD, HerVariant.ON)",
              "HerVariant.FORWARD, HerVariant.ON, HerVariant.SIDEWAYS)")  # fmt: skip
    tree.create(f"conf/her/{NEW_HER}.yaml", (
        "# @package _global_\n# Sideways HER: judged at a trade's open.\ndefaults:\n"
        "  - common/inject\n  - _self_\n\nher:\n  enabled: true\n  sideways: true\n\n"
        "isv:\n  slots:\n    her:\n      her_sideways_inject_count: {index: 554, kind: diag, "
        'doc: "sideways injections this step"}\n'))  # fmt: skip
    tree.edit("conf/experiment/her_components.yaml", "her: off,backward,forward,on",
              "her: off,backward,forward,on,sideways")  # fmt: skip
    tree.add(f"{SRC}vocabulary.py", 'SLOT_HER_FORWARD_INJECT_COUNT = "her_forward_inject_count"\n',
             'SLOT_HER_SIDEWAYS_INJECT_COUNT = "her_sideways_inject_count"\n')  # fmt: skip
    count = '    "sideways": (vocab.SLOT_HER_SIDEWAYS_INJECT_COUNT, "sideways_count_step"),\n'
    tree.add(f"{SRC}hindsight.py", '"forward_inject_count_step"),\n', count)
    reference = tree.regenerate_reference()
    found = json.loads(tree.python("-c", HER_CHECK).stdout.strip().splitlines()[-1])
    assert found == {"variant": "sideways", "slots": ["her_sideways_inject_count"],
                     "her_bytes": found["her_bytes"], "axis": "sideways",
                     "order": ["backward", "on", "sideways"], "audited": 1,
                     "calibrated": True}  # fmt: skip
    assert found["her_bytes"] > 0 and f"### her={NEW_HER}" in reference
    listed = walkthrough(HER_TITLE).required
    assert tree.changed <= listed, tree.changed - listed
    # what is left is the kernel's own work: its stem's files and its audit
    assert listed - tree.changed == stem_files("her") | {f"{SRC}killcheck/criteria.py"}


HEAD_CHECK = """
import json
from hydra import compose, initialize_config_dir
from alpha_rl import paths
from alpha_rl.agent.config import AgentConfig
from alpha_rl.agent.head import head_class
from alpha_rl.errors import ConfigError
from alpha_rl.killcheck.axes import axis_for
from alpha_rl.pipeline.configure import memory
from alpha_rl.pipeline.configure.config import plan_run
from alpha_rl.tracking import RunRecord

def composed(*over):
    with initialize_config_dir(config_dir=str(paths.conf_dir()), version_base="1.3"):
        return compose("train", overrides=["agent=dqn_qr", "backend=numpy", "debug=tiny", *over])

cfg = composed()
try:
    head_class(AgentConfig.from_cfg(composed("agent.distributional=true").agent))
    both = "accepted"
except ConfigError as exc:
    both = str(exc)
params = {"agent.n_step": "1", "agent.dueling": "False", "agent.noisy": "False",
          "agent.distributional": "False", "agent.quantile": "True"}
print(json.dumps({
    "head": head_class(AgentConfig.from_cfg(cfg.agent)).__name__,
    "learner": memory.estimate(plan_run(cfg), int(cfg.isv.size)).arrays["learner buffers"],
    "owned": axis_for("agent").owns("agent.quantile"),
    "axis": axis_for("agent").value(RunRecord("r1", "qr", "FINISHED", params, {}, {})),
    "both": both,
}))
"""


def test_a_head_added_by_the_listed_files_is_taken_everywhere(tmp_path: Path) -> None:
    """The copy's QuantileHead computes as QHead (its kernels are the part a test cannot add)."""
    tree = Tree(tmp_path)
    head = f"{SRC}agent/head.py"
    tree.edit(head, "\nHead = QHead | C51Head\n", (
        '\nclass QuantileHead(QHead):\n    """The walk-through\'s head."""\n\n'
        '    key = "quantile"\n    piece = "qr"\n\n\nHead = QHead | C51Head\n'))  # fmt: skip
    tree.edit(head, "HEADS: tuple[type[Head], ...] = (C51Head, QHead)",
              "HEADS: tuple[type[Head], ...] = (C51Head, QuantileHead, QHead)")  # fmt: skip
    config = f"{SRC}agent/config.py"
    tree.add(config, '    precision: str = "fp32"  # one of PRECISIONS\n',
             "    quantile: bool = False\n")  # fmt: skip
    tree.add(config, '"agent.precision", PRECISIONS, WHERE),\n',
             '            quantile=agent.flag("quantile"),\n')  # fmt: skip
    tree.edit("conf/agent/dqn.yaml", "\n  atoms: 51",
              "\n  quantile: false         # the quantile head\n  atoms: 51")  # fmt: skip
    tree.create(f"conf/agent/dqn_{NEW_HEAD}.yaml", (
        "# @package _global_\n# agent=dqn with the quantile head.\ndefaults:\n  - dqn\n"
        "  - _self_\n\nagent:\n  quantile: true\n"))  # fmt: skip
    tree.edit("conf/experiment/learner_variants.yaml", "dqn_c51,rainbow", "dqn_c51,dqn_qr,rainbow")
    reference = tree.regenerate_reference()
    found = json.loads(tree.python("-c", HEAD_CHECK).stdout.strip().splitlines()[-1])
    assert (found["head"], found["owned"], found["axis"]) == ("QuantileHead", True, "dqn_qr")
    assert found["learner"] > 0 and "`agent.quantile`" in reference
    assert found["both"].startswith("agent.distributional=true and agent.quantile=true each")
    listed = walkthrough(HEAD_TITLE).required
    assert tree.changed <= listed, tree.changed - listed
    assert listed - tree.changed == stem_files(NEW_HEAD)  # the head's kernels
