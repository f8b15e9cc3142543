"""The command lines the platform prints for the user to run next (the check that judges a sweep,
a search's confirmation, a stopped run's resume, the UI, a tracking tool), written so that each
runs when pasted into a fresh shell, with no virtualenv activated.

From the project's own .venv (sys.prefix is <project>/.venv), in the project directory, a
command that a make target runs is that target: `make kill-check ARGS="--sweep ..."` (make
creates or refreshes .venv first, as `make train` does). Any other command is the full path of
its console script beside this Python (`<project>/.venv/bin/alpha-rl-confirm ...`), or
`<this Python> -m <module> ...` where that Python has no such script. Arguments are quoted for a
POSIX shell (shlex); a relative path in them is relative to the directory the process ran in.
"""

from __future__ import annotations

import os
import shlex
import sys
import sysconfig
from collections.abc import Sequence
from pathlib import Path

from alpha_rl import paths
from alpha_rl.errors import ConfigError

# console script -> (the module `python -m` runs it as, the make target that runs it with ARGS)
SCRIPTS: dict[str, tuple[str, str | None]] = {
    "alpha-rl-train": ("alpha_rl.train", "train"),
    "alpha-rl-kill-check": ("alpha_rl.killcheck", "kill-check"),
    "alpha-rl-confirm": ("alpha_rl.search.confirm", None),
    "alpha-rl-study": ("alpha_rl.study.cli", "study"),
    "alpha-rl-cubins": ("alpha_rl.build.cli", None),  # `make cubins` takes ARCHS, not ARGS
    "mlflow": ("mlflow", None),
}
_DOUBLE_QUOTED = frozenset('"\\`$!')  # what a double-quoted shell word would read specially


def project_venv() -> Path | None:
    """The project's .venv when this process runs from it (sys.prefix), else None."""
    try:
        venv = paths.project_root() / ".venv"
    except ConfigError:  # an installed package without its project tree
        return None
    return venv if Path(sys.prefix).resolve() == venv.resolve() else None


def _in_project_dir() -> bool:
    try:
        return Path.cwd().resolve() == paths.project_root()
    except (ConfigError, OSError):  # no project tree, or the working directory is gone
        return False


def make_command(target: str, variables: dict[str, str] | None = None,
                 anywhere: bool = False) -> str | None:  # fmt: skip
    """`make <target> VAR=value ...` when this process runs from the project's .venv and in the
    project directory (anywhere: in another directory too, as `make -C <project> ...`, for
    values that hold no relative path); None otherwise, or when a value holds what make would
    expand (`$`) or a line break."""
    if project_venv() is None:
        return None
    words = ["make"]
    if not _in_project_dir():
        if not anywhere:
            return None
        words += ["-C", shlex.quote(str(paths.project_root()))]
    words.append(target)
    for name, value in (variables or {}).items():
        if "$" in value or "\n" in value:
            return None
        words.append(f"{name}={_make_value(value)}")
    return " ".join(words)


def _make_value(value: str) -> str:
    """`value` as one shell word: bare where it needs no quotes, else in double quotes where
    nothing in it is special there (`ARGS="--sweep multirun/..."`), else shlex's quotes."""
    if shlex.quote(value) == value:
        return value
    return f'"{value}"' if not _DOUBLE_QUOTED & set(value) else shlex.quote(value)


def script_command(script: str, args: Sequence[str] = ()) -> str:
    """`script args` as the user runs it: its make target (make_command), else the full path of
    the console script beside this Python, else `<this Python> -m <module> args`."""
    module, target = SCRIPTS[script]
    if target is not None:
        made = make_command(target, {"ARGS": shlex.join(args)} if args else None)
        if made is not None:
            return made
    beside = Path(sysconfig.get_path("scripts")) / script
    if beside.is_file() and os.access(beside, os.X_OK):
        return shlex.join([str(beside), *args])
    return module_command(module, args)


def module_command(module: str, args: Sequence[str] = ()) -> str:
    """`<this Python> -m module args`: a module of this Python's with no console script."""
    return shlex.join([sys.executable, "-m", module, *args])


def ui_command(store: str) -> str | None:
    """`make ui` over the SQLite file `store` (a path as this process reads it); None where no
    make target serves it (see make_command; the Makefile takes no blank in STORE)."""
    if any(c.isspace() for c in store):
        return None
    if _in_project_dir():
        return make_command("ui", None if store == "mlflow.db" else {"STORE": store})
    return make_command("ui", {"STORE": str(Path(store).absolute())}, anywhere=True)
