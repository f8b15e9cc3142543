"""The cubin manifest: what each cubin was built from and with, and whether it is still fresh.

`build/cubins/manifest.json` maps `sm_<arch>/<stem>[.<variant>].cubin` to the sha256 of its
source and every local header it includes, the nvcc flags and version, and the cubin's own sha256.
A cubin is fresh when all of these still hold; the loader refuses anything else.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from alpha_rl import paths
from alpha_rl.build import nvcc, sources
from alpha_rl.errors import BuildError, CubinError
from alpha_rl.kernels.decl import Stem
from alpha_rl.kernels.registry import stems

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1


def cubin_relpath(stem: str, variant: str, arch: str) -> str:
    """`sm_<arch>/<stem>[.<variant>].cubin`, relative to the cubin directory."""
    suffix = f".{variant}" if variant else ""
    return f"sm_{arch}/{stem}{suffix}.cubin"


@dataclass(frozen=True)
class Target:
    """One cubin to build: a stem's source, one variant's defines, one arch."""

    stem: str
    source: Path
    arch: str
    defines: tuple[tuple[str, int], ...]
    relpath: str

    def flags(self) -> list[str]:
        return nvcc.flags_for(self.arch, dict(self.defines))


def plan(cuda_dir: Path, archs: Sequence[str], stems: Mapping[str, Stem]) -> list[Target]:
    """Every cubin `make cubins` builds: each `.cu` x each arch x each variant of its stem."""
    targets = []
    for source in sources.kernel_sources(cuda_dir):
        stem = stems.get(source.stem) or Stem(source.stem)
        for arch in archs:
            for defines in stem.variants():
                rel = cubin_relpath(stem.name, stem.variant_name(defines), arch)
                targets.append(Target(stem.name, source, arch, tuple(sorted(defines.items())), rel))
    return targets


@dataclass
class Manifest:
    """The manifest file of one cubin directory."""

    path: Path
    cubins: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def load(cls, cubin_dir: Path) -> Manifest:
        path = cubin_dir / MANIFEST_NAME
        if not path.is_file():
            return cls(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise CubinError(
                f"{path} is not valid JSON ({exc}); delete it and run `make cubins`"
            ) from exc
        if data.get("format") != MANIFEST_FORMAT:
            return cls(path)  # an older layout: everything counts as stale and is rebuilt
        return cls(path, dict(data.get("cubins", {})))

    def save(self) -> None:
        """Write atomically, so an interrupted build never leaves a torn manifest."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        payload = {"format": MANIFEST_FORMAT, "cubins": dict(sorted(self.cubins.items()))}
        tmp.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)

    def record(self, target: Target, digests: dict[str, str], nvcc_version: str) -> None:
        cubin = self.path.parent / target.relpath
        self.cubins[target.relpath] = {
            "stem": target.stem,
            "source": target.source.name,
            "arch": target.arch,
            "defines": dict(target.defines),
            "flags": target.flags(),
            "nvcc_version": nvcc_version,
            "inputs": digests,
            "input_hash": sources.combined_hash(digests),
            "cubin_sha256": sources.file_sha256(cubin),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }


def staleness(
    target: Target,
    manifest: Manifest,
    include_dirs: Sequence[Path],
    nvcc_version: str | None = None,
) -> str | None:
    """Why `target` must be rebuilt, or None when its cubin is fresh.

    `nvcc_version` is compared only when given (the builder knows it; a loader may not have nvcc).
    """
    cubin = manifest.path.parent / target.relpath
    if not cubin.is_file():
        return "missing"
    entry = manifest.cubins.get(target.relpath)
    if entry is None:
        return "not recorded in the manifest"
    try:
        digests = sources.input_digests(target.source, include_dirs)
    except BuildError as exc:
        return f"its sources cannot be read ({exc})"
    if sources.combined_hash(digests) != entry.get("input_hash"):
        old = entry.get("inputs", {})
        changed = sorted(n for n in set(digests) | set(old) if digests.get(n) != old.get(n))
        return "sources changed since it was built: " + ", ".join(changed)
    if entry.get("flags") != target.flags():
        return f"built with flags {entry.get('flags')}, expected {target.flags()}"
    if nvcc_version is not None and entry.get("nvcc_version") != nvcc_version:
        return f"built by nvcc {entry.get('nvcc_version')}, this is nvcc {nvcc_version}"
    if sources.file_sha256(cubin) != entry.get("cubin_sha256"):
        return "the cubin file was modified after it was built"
    return None


def stale_cubins(cubin_dir: Path, defines: Mapping[str, int], arch: str) -> list[str]:
    """Why the declared kernels' cubins for `arch` and `defines` cannot be loaded ([] = ready)."""
    problems = []
    for stem in stems().values():
        try:
            require_fresh(cubin_dir, paths.cuda_dir(), stem, defines, arch)
        except CubinError as exc:
            problems.append(str(exc))
    return problems


def require_fresh(
    cubin_dir: Path, cuda_dir: Path, stem: Stem, defines: Mapping[str, int], arch: str
) -> Path:
    """The fresh cubin of this stem, variant and arch, or a CubinError saying what to run."""
    chosen = stem.select(defines)
    source = cuda_dir / f"{stem.name}.cu"
    rel = cubin_relpath(stem.name, stem.variant_name(chosen), arch)
    target = Target(stem.name, source, arch, tuple(sorted(chosen.items())), rel)
    reason = staleness(target, Manifest.load(cubin_dir), [cuda_dir])
    if reason is not None:
        archs = "" if (arch,) == nvcc.DEFAULT_ARCHS else f" ARCHS={arch}"
        raise CubinError(f"{cubin_dir / rel}: {reason}; run `make cubins{archs}` to rebuild it")
    return cubin_dir / rel
