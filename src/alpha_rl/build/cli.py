"""`alpha-rl-cubins` / `make cubins`: compile every cuda/*.cu into cubins, incrementally."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from alpha_rl import paths
from alpha_rl.build import manifest as mf
from alpha_rl.build import nvcc, sources
from alpha_rl.errors import AlphaRlError, BuildError
from alpha_rl.kernels.decl import Stem


@dataclass
class BuildReport:
    """What one build did: cubins compiled (with the reason), already fresh, failed."""

    built: list[tuple[str, str]]
    fresh: list[str]
    failed: list[tuple[str, str]]


def build(
    cuda_dir: Path,
    cubin_dir: Path,
    archs: Sequence[str],
    *,
    stems: Mapping[str, Stem] | None = None,
    include_dirs: Sequence[Path] = (),
    jobs: int = 2,
    force: bool = False,
    log=print,
) -> BuildReport:
    """Compile every stale or missing cubin; fresh ones are left alone. Never raises on nvcc errors
    of single cubins (they are reported); raises BuildError when nvcc itself is unusable."""
    if stems is None:
        from alpha_rl.kernels.registry import stems as registry_stems

        stems = registry_stems()
    incs = [cuda_dir, *include_dirs]
    version = nvcc.nvcc_version()
    manifest = mf.Manifest.load(cubin_dir)
    targets = mf.plan(cuda_dir, archs, stems)
    todo = []
    report = BuildReport([], [], [])
    for target in targets:
        reason = "forced" if force else mf.staleness(target, manifest, incs, version)
        if reason is None:
            report.fresh.append(target.relpath)
        else:
            todo.append((target, reason))
    lock = threading.Lock()

    def one(target: mf.Target) -> float:
        start = time.perf_counter()
        digests = sources.input_digests(target.source, incs)
        nvcc.compile_cubin(target.source, cubin_dir / target.relpath, target.flags(), incs)
        with lock:
            manifest.record(target, digests, version)
            manifest.save()
        return time.perf_counter() - start

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(one, t): (t, why) for t, why in todo}
        for done, future in enumerate(as_completed(futures), start=1):
            target, why = futures[future]
            try:
                seconds = future.result()
            except BuildError as exc:
                report.failed.append((target.relpath, str(exc)))
                log(f"[{done}/{len(todo)}] FAILED {target.relpath}\n{exc}")
            else:
                report.built.append((target.relpath, why))
                log(f"[{done}/{len(todo)}] built {target.relpath} in {seconds:.1f} s ({why})")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `alpha-rl-cubins`."""
    parser = argparse.ArgumentParser(prog="alpha-rl-cubins", description=__doc__)
    parser.add_argument("--arch", action="append", help="compute capability, e.g. 90 (repeatable)")
    parser.add_argument("--out", type=Path, default=None, help="cubin directory (build/cubins)")
    parser.add_argument("--jobs", type=int, default=2, help="parallel nvcc processes")
    parser.add_argument("--force", action="store_true", help="rebuild even fresh cubins")
    args = parser.parse_args(argv)
    archs = tuple(args.arch or nvcc.DEFAULT_ARCHS)
    try:
        cubin_dir = args.out or paths.default_cubin_dir()
        cuda_dir = paths.cuda_dir()
        start = time.perf_counter()
        report = build(cuda_dir, cubin_dir, archs, jobs=args.jobs, force=args.force)
    except AlphaRlError as exc:
        print(f"alpha-rl-cubins: {exc}", file=sys.stderr)
        return 2
    print(
        f"cubins in {cubin_dir}: {len(report.built)} built, {len(report.fresh)} up to date, "
        f"{len(report.failed)} failed ({time.perf_counter() - start:.1f} s, nvcc "
        f"{nvcc.nvcc_version()}, arch {' '.join('sm_' + a for a in archs)})"
    )
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
