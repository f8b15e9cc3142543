"""Imports point down the layers: the backends and the oracles know nothing of what uses them."""

import ast
from pathlib import Path

import pytest

import alpha_rl

PACKAGE = Path(alpha_rl.__file__).parent

# package -> the alpha_rl packages and modules its modules may import (besides itself)
ALLOWED = {
    "backend": {"errors", "paths"},
    "reference": set(),
}


def alpha_rl_imports(path: Path) -> set[str]:
    """The first component below alpha_rl of every alpha_rl import in a module (lazy ones too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        found |= {n.split(".")[1] for n in names if n.startswith("alpha_rl.")}
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_lower_layers_import_nothing_above_them(package: str) -> None:
    wrong = {
        f"{path.name} imports alpha_rl.{name}"
        for path in sorted((PACKAGE / package).glob("*.py"))
        for name in alpha_rl_imports(path) - ALLOWED[package] - {package}
    }
    assert not wrong, f"alpha_rl.{package} may import only {sorted(ALLOWED[package])}: {wrong}"


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from alpha_rl.kernels.registry import stems\n")
    assert alpha_rl_imports(module) == {"kernels"}
