"""`make help`: every target the Makefile documents (`## ` after its name), the sweep presets of
conf/experiment/, and one column for the descriptions whatever the longest target's name."""

from __future__ import annotations

import re
import subprocess

from alpha_rl import paths

TARGET_LINE = re.compile(r"  make (\S+)( +)(\S.*)")


def _help() -> dict[str, tuple[int, str]]:
    """`make help`'s targets in its order: name -> (the column its description starts at, it)."""
    done = subprocess.run(["make", "--no-print-directory", "help", "NOVENV=1"],
                          cwd=paths.project_root(), capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    found = {}
    for line in done.stdout.splitlines():
        if (m := TARGET_LINE.fullmatch(line)) is not None:
            found[m.group(1)] = (m.start(3), m.group(3))
    return found


def test_make_help_lists_every_documented_target_in_one_column() -> None:
    makefile = (paths.project_root() / "Makefile").read_text()
    documented = re.findall(r"^([a-z-]+):.*## ", makefile, re.MULTILINE)
    shown = _help()
    assert list(shown) == documented
    assert len({column for column, _ in shown.values()}) == 1, shown


def test_make_help_names_every_sweep_preset_and_the_kill_checks_axes() -> None:
    shown = _help()
    presets = sorted(p.stem for p in (paths.conf_dir() / "experiment").glob("*.yaml"))
    assert len(presets) >= 6
    sweep = shown["sweep"][1]
    assert f"EXPERIMENT={'|'.join(presets)}" in sweep, sweep
    kill_check = shown["kill-check"][1]
    assert "--axis her|beta|alpha|reward|agent|<key>" in kill_check, kill_check
