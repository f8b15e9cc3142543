"""Imports point down the layers: the backends and the oracles know nothing of what uses them."""

import ast
from pathlib import Path

import pytest

import alpha_rl

PACKAGE = Path(alpha_rl.__file__).parent

# package -> the alpha_rl packages and modules its modules may import (besides itself)
ALLOWED = {
    "backend": {"errors", "paths"},
    # the oracles take the kernels' constants from the ABI table and their products and
    # transcendental functions from portable (the same on every CPU), no more
    "reference": {"abi", "portable"},
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


def test_production_code_does_not_import_the_oracles() -> None:
    """The oracles are independent re-statements of the kernels: what the run computes on the
    host (and the launchers' constants) comes from its own modules and the ABI table, so a bug in
    a helper is never shared by the kernel path and the oracle that checks it. The numpy backend
    runs the oracles by name (KernelRuntime), not by import."""
    wrong = {
        f"{path.relative_to(PACKAGE)} imports alpha_rl.reference"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.relative_to(PACKAGE).parts[0] != "reference"
        and "reference" in alpha_rl_imports(path)
    }
    assert not wrong, f"production code imports the oracles: {sorted(wrong)}"


def test_the_oracle_check_sees_an_import_of_an_oracle(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from alpha_rl.reference.rng import rng_uniform\n")
    assert "reference" in alpha_rl_imports(module)


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


# --- no import cycles ---

ROOTS = {"alpha_rl": PACKAGE, "hydra_plugins": PACKAGE.parent / "hydra_plugins",
         "benchmarks": PACKAGE.parent.parent / "benchmarks"}  # fmt: skip


def modules(roots: dict[str, Path]) -> dict[str, Path]:
    """Every module of the trees by its dotted name (a package by its own: its __init__.py)."""
    found = {}
    for top, root in roots.items():
        for path in sorted(root.rglob("*.py")):
            parts = (top, *path.relative_to(root).with_suffix("").parts)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """The import nodes under `if TYPE_CHECKING:`: for annotations only, never executed."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {n for child in node.body for n in ast.walk(child)}
    return skipped


def import_graph(roots: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of the trees it imports, at its top or in a function (an import of
    a package's name that is not a submodule is one of the package's __init__.py)."""
    known = modules(roots)
    graph = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skipped, edges = _type_checking_only(tree), set()
        for node in ast.walk(tree):
            if node in skipped:
                continue
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in known}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    edges |= {sub} if sub in known else {node.module} & known.keys()
        graph[name] = edges - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_round_a_circle() -> None:
    found = cycles(import_graph(ROOTS))
    assert not found, f"import cycles (move what both sides need below them): {found}"


def test_the_check_sees_a_circle_and_not_one_for_annotations_only(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from pkg import c\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from pkg.a import f\n")  # fmt: skip
    (pkg / "e.py").write_text("from pkg.d import x\n")
    graph = import_graph({"pkg": pkg})
    assert graph["pkg.b"] == {"pkg.c"} and graph["pkg.d"] == set()
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
