"""One truth for the HER variant: alpha_rl.her_variant alone decodes the her group's flags, from a
composed config and from a run's recorded params; a flag or a combination it does not declare is
an error, in training and in the kill check, never a run with HER off."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import alpha_rl
from alpha_rl import paths
from alpha_rl.her_variant import FLAGS, HerVariant, HerVariantError, from_params
from alpha_rl.hindsight import HerConfig
from alpha_rl.killcheck.axes import axis_for
from alpha_rl.killcheck.cli import main
from alpha_rl.tracking import RunRecord
from tests.helpers import compose_train
from tests.killcheck.store import Store

PACKAGE = Path(alpha_rl.__file__).parent
FLAG_KEY = re.compile(rf"\bher\.({'|'.join(FLAGS)})\b")  # her.enabled, her.backward, ...
HER_KEY_PREFIX = re.compile(r"(^|[^.\w])her\.$")  # f"her.{name}", not f"isv.slots.her.{name}"


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}  # fmt: skip


def _on_her(node: ast.AST, flag: str) -> bool:
    """Whether `node` is a config's her group (`cfg.her`, `self.cfg.her`; her.enabled anywhere):
    a HerConfig's own `forward` (`plan.her.forward`) is the decoded variant's direction."""
    if not (isinstance(node, ast.Attribute) and node.attr == "her"):
        return False
    root = node.value
    name = root.id if isinstance(root, ast.Name) else getattr(root, "attr", "")
    return flag == "enabled" or name.endswith("cfg") or name in ("config", "node")


def flag_reads(source: str) -> list[str]:
    """Where Python source reads a HER flag: a string naming her.<flag> (docstrings aside), a
    her.<name> key built in an f-string, or a config's her.<flag> by attribute or subscript."""
    tree = ast.parse(source)
    docs, found = _docstrings(tree), []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docs and FLAG_KEY.search(node.value):
                found.append(f"line {line}: {node.value!r}")
        elif isinstance(node, ast.JoinedStr):
            parts = [v.value for v in node.values if isinstance(v, ast.Constant)]
            if any(HER_KEY_PREFIX.search(str(p)) for p in parts):
                found.append(f"line {line}: an f-string her.<name> key")
        elif isinstance(node, ast.Attribute) and node.attr in FLAGS:
            if _on_her(node.value, node.attr):
                found.append(f"line {line}: .her.{node.attr}")
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
            if key in FLAGS and _on_her(node.value, key):
                found.append(f"line {line}: .her[{key!r}]")
    return found


def test_the_scan_sees_each_way_of_reading_a_flag() -> None:
    """The kill check's and the calibration's own decoders, as they were, and a config read."""
    reads = {
        'run.params.get("her.enabled") == "True"': 1,
        'flag(run, f"her.{name}")': 1,
        "cfg.her.backward": 1,
        'self.cfg.her["forward"]': 1,
        "run.her.enabled": 1,
        "plan.her.forward": 0,  # a HerConfig's direction, decoded already
        '"""her.enabled / her.backward in a docstring"""\ncfg.her.threshold': 0,
        'f"isv.slots.her.{slot}"': 0,
    }
    assert {src: len(flag_reads(src)) for src in reads} == reads


def test_nothing_outside_her_variant_reads_the_her_flags() -> None:
    """The kill check's axes and calibration, HerConfig, the trainer: every one asks
    alpha_rl.her_variant; conf/ files do not interpolate a flag either."""
    found = {
        f"{path.relative_to(PACKAGE)} {where}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "her_variant.py"
        for where in flag_reads(path.read_text(encoding="utf-8"))
    }
    interpolation = re.compile(rf"\$\{{\s*her\.({'|'.join(FLAGS)})\s*\}}")
    found |= {
        f"conf/{path.relative_to(paths.conf_dir())}"
        for path in sorted(paths.conf_dir().rglob("*.yaml"))
        if interpolation.search(path.read_text(encoding="utf-8"))
    }
    assert not found, f"the HER flags are read outside alpha_rl/her_variant.py: {sorted(found)}"


def test_conf_her_has_one_option_per_declared_variant() -> None:
    options = {p.stem for p in (paths.conf_dir() / "her").glob("*.yaml")}
    assert options == {v.value for v in HerVariant}


@pytest.mark.parametrize("variant", list(HerVariant), ids=lambda v: v.value)
def test_each_option_and_its_recorded_params_decode_to_the_variant(variant: HerVariant) -> None:
    cfg, _ = compose_train([f"her='{variant.value}'"])
    her = HerConfig.from_cfg(cfg)
    assert (her.variant if her is not None else HerVariant.OFF) is variant
    assert {k: cfg.her[k] for k in FLAGS} == variant.flags()
    assert from_params(variant.params(), "a run") is variant
    assert from_params({"seed": "0"}, "a run") is None  # a run that records no HER variant


SIDEWAYS = {"her.enabled": "True", "her.backward": "False", "her.forward": "False",
            "her.sideways": "True", "her.threshold": "1.5"}  # fmt: skip
UNKNOWN = {  # each a HER variant that alpha_rl/her_variant.py does not declare
    "a flag of its own": (SIDEWAYS, r"her\.sideways=True: a HER flag that no variant"),
    "its flag beside backward": (SIDEWAYS | {"her.backward": "True"}, r"her\.sideways=True"),
    "enabled, no direction": (SIDEWAYS | {"her.sideways": "1"}, r"her\.enabled=true needs"),
    "a direction while disabled": ({"her.enabled": "False", "her.backward": "True"},
                                   r"her\.enabled=false with her\.backward=True"),
    "a flag not true or false": (SIDEWAYS | {"her.forward": "yes"}, r"her\.forward='yes'"),
}  # fmt: skip


@pytest.mark.parametrize(("params", "error"), list(UNKNOWN.values()), ids=list(UNKNOWN))
def test_the_her_axis_refuses_a_run_of_an_undeclared_variant(params: dict, error: str) -> None:
    """Never off (the baseline) nor the declared variant beside it: the check cannot judge it."""
    run = RunRecord("r9", "her-sideways s0", "FINISHED", params, {}, {})
    with pytest.raises(HerVariantError, match=error) as refused:
        axis_for("her").value(run)
    assert "run 'her-sideways s0', r9" in str(refused.value)


def test_off_the_her_axis_a_runs_her_flags_are_not_judged() -> None:
    run = RunRecord("r9", "her-sideways s0", "FINISHED", SIDEWAYS | {"beta.mode": "active"}, {},
                    {})  # fmt: skip
    assert axis_for("beta").value(run) == "active"


def test_a_config_with_an_undeclared_flag_is_refused() -> None:
    cfg, _ = compose_train(["her=backward", "+her.sideways=true"])
    with pytest.raises(HerVariantError, match=r"her\.sideways=True: a HER flag .*conf/her/"):
        HerConfig.from_cfg(cfg)


def test_the_kill_check_cannot_judge_a_sweep_with_an_undeclared_variant(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """One line naming the run and its flag, exit 2, no report; the run is not counted as the
    her=off baseline of its seed."""
    store = Store(tmp_path)
    store.ablation(("on",))
    rid = store.her_run("off", 0, run_tags={"mlflow.runName": "her-sideways s0"},
                        **{k: v for k, v in SIDEWAYS.items() if k != "her.threshold"})  # fmt: skip
    out = tmp_path / "report"
    with pytest.raises(SystemExit) as stop:
        main(["--tracking-uri", store.uri, "--parent", store.parent, "--out", str(out)])
    err = [line for line in capsys.readouterr().err.splitlines() if " INFO " not in line]
    assert stop.value.code == 2 and len(err) == 2, err
    assert err[0].startswith("alpha-rl-kill-check: her.sideways=True: a HER flag")
    assert f"run 'her-sideways s0', {rid}" in err[0] and err[1] == "verdict: CANNOT-JUDGE"
    assert not (out / "kill_check.json").exists()
