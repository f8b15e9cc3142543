"""The documentation site builds strictly (a broken link, a missing page or a page left out of
the nav fails), and its configuration reference is what conf/ and the config readers say now."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from alpha_rl import paths
from alpha_rl.docsite import config_reference
from alpha_rl.docsite.config_reference import description, entries


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` as `make docs` runs it (never --quiet: it hides the warnings
    that strict mode turns into a failure)."""
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config),
                           "-d", str(site)], env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
                          capture_output=True, text=True, timeout=600)  # fmt: skip


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    done = build(paths.project_root() / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stderr[-5000:]
    assert (tmp_path / "site" / "reference" / "configuration" / "index.html").is_file()


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    """The strict build is a check that can fail: a page linking to a page that does not exist."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# x\n\nsee [there](missing.md)\n")
    ours = (paths.project_root() / "mkdocs.yml").read_text().split("\nnav:")[0]
    (tmp_path / "mkdocs.yml").write_text(f"{ours}\nnav:\n  - Home: index.md\n")
    done = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert done.returncode != 0 and "missing.md" in done.stderr


@pytest.mark.slow
def test_the_configuration_reference_is_current() -> None:
    assert config_reference.main(["--check"]) == 0  # stale: `make docs` writes it again


def test_a_key_takes_the_comment_on_its_line_or_above_it(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(
        "# @package _global_\n"
        "# the file's head\n"
        "\n"
        "defaults:\n"
        "  - other\n"
        "# the section\n"
        "env:\n"
        "  lot: 1.0       # lots per position\n"
        "                 # (a second line)\n"
        "  # fees are per fill\n"
        "  fee: '#1'\n"
        "hydra:\n"
        "  job: {name: x}\n"
    )
    found = [(e.key, e.value, e.comment) for e in entries(path, "")]
    assert description(path) == "the file's head"
    assert found == [("env", "", "the section"),
                     ("env.lot", "1.0", "lots per position (a second line)"),
                     ("env.fee", "'#1'", "fees are per fill")]  # fmt: skip
    assert [e.key for e in entries(path, "grp")][:2] == ["grp.env", "grp.env.lot"]
