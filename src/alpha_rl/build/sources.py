"""Kernel sources: which `.cu` files exist, which local headers they include, their hash."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

from alpha_rl.errors import BuildError

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def kernel_sources(cuda_dir: Path) -> list[Path]:
    """Every `<stem>.cu` directly under `cuda_dir`, sorted by name."""
    if not cuda_dir.is_dir():
        raise BuildError(f"kernel source directory {cuda_dir} does not exist")
    return sorted(cuda_dir.glob("*.cu"))


def _resolve(name: str, including: Path, include_dirs: Sequence[Path]) -> Path:
    for directory in (including.parent, *include_dirs):
        candidate = directory / name
        if candidate.is_file():
            return candidate.resolve()
    searched = ", ".join(str(d) for d in (including.parent, *include_dirs))
    raise BuildError(f'{including}: #include "{name}" not found (searched {searched})')


def include_closure(source: Path, include_dirs: Sequence[Path]) -> list[Path]:
    """`source` and every local header it includes, transitively (quoted includes only).

    System headers (`#include <...>`) belong to the toolkit; its version is recorded separately.
    """
    seen: dict[Path, None] = {}
    stack = [source.resolve()]
    while stack:
        path = stack.pop()
        if path in seen:
            continue
        seen[path] = None
        text = path.read_text(encoding="utf-8")
        stack.extend(_resolve(name, path, include_dirs) for name in _INCLUDE.findall(text))
    return list(seen)


def input_digests(source: Path, include_dirs: Sequence[Path]) -> dict[str, str]:
    """File name -> sha256 of the source and each header it includes, in a stable order."""
    files = include_closure(source, include_dirs)
    digests = {}
    for path in sorted(files, key=lambda p: (p != source.resolve(), p.name, str(p))):
        key = path.name if path.name not in digests else str(path)
        digests[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def combined_hash(digests: dict[str, str]) -> str:
    """One sha256 over the per-file digests (names included, so a renamed header counts)."""
    h = hashlib.sha256()
    for name, digest in digests.items():
        h.update(f"{name}\0{digest}\n".encode())
    return h.hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
