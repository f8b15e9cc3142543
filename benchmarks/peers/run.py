"""Ours and every peer of the training step on one GPU, one after the other, in one table.

    python3 -m benchmarks.peers.run [--envs 4096 65536] [--json peers.json]

Each runs in a process of its own (PyCUDA, PyTorch and JAX each hold a CUDA context; JAX is told
not to preallocate the GPU's memory): ours (benchmarks/train_step.py, the step as a CUDA graph,
at agent.precision fp32 and tf32), torch_eager, torch_graph, torch_compile and jax, each at FP32
and TF32. The table gives µs/step and peer/ours (how many times slower the peer is than our step
at the same precision). A peer that fails is in the table with its error.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PEERS = ("torch_eager", "torch_graph", "torch_compile", "jax_step")
ROOT = Path(__file__).resolve().parents[2]


# a peer's precision -> ours at the same (agent.precision)
PRECISION = {"float32": "fp32", "tf32": "tf32"}


def ours(envs: list[int], out: Path, precision: str) -> list[dict]:
    """Our step at agent.precision `precision`: benchmarks/train_step.py's row at each B (the
    CUDA graph's µs in `graph_us`, the per-kernel breakdown)."""
    path = out / f"ours_{precision}.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "train_step.py"), "--envs",
                    *map(str, envs), "--json", str(path), "--set", f"agent.precision={precision}"],
                   check=True, cwd=ROOT)  # fmt: skip
    return json.loads(path.read_text())


def peer(name: str, envs: list[int], out: Path) -> list[dict]:
    """One peer's rows; a failed peer is one row saying how it failed."""
    path = out / f"{name}.json"
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    proc = subprocess.run([sys.executable, "-m", f"benchmarks.peers.{name}", "--envs",
                           *map(str, envs), "--json", str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True)  # fmt: skip
    print(proc.stdout, end="", flush=True)
    if proc.returncode != 0 or not path.is_file():
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1][:160]
        return [{"peer": name, "envs": B, "precision": "-", "us": f"failed: {tail}"} for B in envs]
    return json.loads(path.read_text())


def table(mine: dict[str, dict[int, float]], rows: list[dict]) -> str:
    lines = ["| peer | B | precision | µs/step | peer / ours (same precision) |",
             "|---|---|---|---|---|"]  # fmt: skip
    lines += [f"| ours (CUDA graph) | {B} | {p} | {us:.1f} | 1.00 |"
              for p in PRECISION.values() for B, us in mine[p].items()]  # fmt: skip
    for r in rows:
        if isinstance(r["us"], str):
            lines.append(f"| {r['peer']} | {r['envs']} | {r['precision']} | {r['us']} | - |")
            continue
        same = mine.get(PRECISION.get(r["precision"], ""), {})
        ratio = r["us"] / same[r["envs"]] if r["envs"] in same else float("nan")
        lines.append(f"| {r['peer']} | {r['envs']} | {r['precision']} | {r['us']:.1f} | "
                     f"{ratio:.2f} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, nargs="+", default=[4096, 65536])
    parser.add_argument("--peers", nargs="+", default=list(PEERS))
    parser.add_argument("--json", help="write every row here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        steps = {p: ours(args.envs, out, p) for p in PRECISION.values()}
        mine = {p: {r["envs"]: r["graph_us"] for r in rows} for p, rows in steps.items()}
        rows = [row for name in args.peers for row in peer(name, args.envs, out)]
    print("\n" + table(mine, rows))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"ours": mine, "peers": rows, "steps": steps}, indent=1)
        )


if __name__ == "__main__":
    main()
