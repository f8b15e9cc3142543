"""alpha_rl.commands: a printed command is a make target from the project's .venv in the project
directory, else the console script's full path, else `<python> -m <module>`; quoted for a shell.
(tests/test_printed_commands.py pastes the real ones into a fresh shell.)"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from alpha_rl import commands, paths
from alpha_rl.commands import SCRIPTS, make_command, module_command, script_command, ui_command
from tests.helpers import as_project_venv

ROOT = paths.project_root()


@pytest.fixture
def project_venv(monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process as if it ran from <project>/.venv, in the project directory; its bin/."""
    as_project_venv(monkeypatch)
    return Path(sysconfig.get_path("scripts"))


@pytest.fixture
def no_scripts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A Python of no virtualenv of the project, with no console script of ours beside it."""
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "elsewhere"))
    monkeypatch.setattr(commands.sysconfig, "get_path", lambda name: str(tmp_path / "bin"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_from_the_project_venv_in_its_directory_a_make_target_runs_it(project_venv) -> None:
    assert script_command("alpha-rl-kill-check", ["--sweep", "multirun/a b", "--axis", "beta"]) \
        == """make kill-check ARGS="--sweep 'multirun/a b' --axis beta\""""  # fmt: skip
    assert script_command("alpha-rl-kill-check") == "make kill-check"
    assert script_command("alpha-rl-train", ["seed=1", "resume=/r/un"]) == (
        'make train ARGS="seed=1 resume=/r/un"')  # fmt: skip
    assert ui_command("mlflow.db") == "make ui"
    assert ui_command("/d/a.db") == "make ui STORE=/d/a.db"
    # what make or a double-quoted word would read: the script itself, or shlex's quotes
    assert script_command("alpha-rl-train", ["agent.lr=${oc.env:LR}"]) == shlex.join(
        [str(project_venv / "alpha-rl-train"), "agent.lr=${oc.env:LR}"])  # fmt: skip
    assert make_command("kill-check", {"ARGS": "--filter \"x = 'y'\""}) == (
        """make kill-check ARGS='--filter "x = '"'"'y'"'"'"'""")  # fmt: skip
    # no make target: the script beside this Python
    assert script_command("alpha-rl-confirm", ["--parent", "abc"]) == shlex.join(
        [str(project_venv / "alpha-rl-confirm"), "--parent", "abc"])  # fmt: skip


def test_from_another_directory_the_script_or_make_dash_c(project_venv, tmp_path: Path,
                                                           monkeypatch) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert script_command("alpha-rl-kill-check", ["--sweep", "multirun/x"]) == shlex.join(
        [str(project_venv / "alpha-rl-kill-check"), "--sweep", "multirun/x"])  # fmt: skip
    assert ui_command("mlflow.db") == f"make -C {ROOT} ui STORE={tmp_path}/mlflow.db"
    assert ui_command("a b.db") is None  # the Makefile takes no blank in STORE


def test_outside_the_project_venv_the_module_of_this_python(no_scripts) -> None:
    assert make_command("ui") is None and ui_command("mlflow.db") is None
    assert script_command("alpha-rl-kill-check", ["--sweep", "s"]) == shlex.join(
        [sys.executable, "-m", "alpha_rl.killcheck", "--sweep", "s"])  # fmt: skip
    assert module_command("alpha_rl.tracking", ["sync", "a b"]) == shlex.join(
        [sys.executable, "-m", "alpha_rl.tracking", "sync", "a b"])  # fmt: skip


@pytest.mark.slow
def test_every_console_script_is_known_and_its_module_runs() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) <= set(SCRIPTS)
    for script, (module, target) in SCRIPTS.items():
        env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/")}
        done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                              text=True, timeout=300, env=env)  # fmt: skip
        assert done.returncode == 0 and done.stdout, (script, done.stderr)
        if target is not None:  # the target runs the module with ARGS last (the study puts
            # EXPERIMENT before them, unless ARGS resume a study)
            makefile = (ROOT / "Makefile").read_text()
            recipe = makefile.split(f"\n{target}: ", 1)[1].split("\n")[1]
            assert f"-m {module} " in recipe and recipe.endswith(" $(ARGS)"), target
