"""Ours and every peer of the training step on one GPU, one after the other, in one table.

    python3 -m benchmarks.peers.run [--envs 4096 65536] [--json peers.json]

Each runs in a process of its own (PyCUDA, PyTorch and JAX each hold a CUDA context; JAX is told
not to preallocate the GPU's memory): ours (benchmarks/train_step.py, the step as a CUDA graph,
FP32), torch_eager, torch_graph, torch_compile and jax, each at FP32 and TF32. The table gives
µs/step and peer/ours (how many times slower the peer is than our FP32 step). A peer that fails
is in the table with its error.
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


def ours(envs: list[int], out: Path) -> dict[int, float]:
    """Our step as a CUDA graph, µs at each B (benchmarks/train_step.py)."""
    path = out / "ours.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "train_step.py"), "--envs",
                    *map(str, envs), "--json", str(path)], check=True, cwd=ROOT)  # fmt: skip
    return {r["envs"]: r["graph_us"] for r in json.loads(path.read_text())}


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


def table(mine: dict[int, float], rows: list[dict]) -> str:
    lines = ["| peer | B | precision | µs/step | peer / ours (FP32 graph) |",
             "|---|---|---|---|---|"]  # fmt: skip
    lines += [f"| ours (CUDA graph) | {B} | float32 | {us:.1f} | 1.00 |" for B, us in mine.items()]
    for r in rows:
        if isinstance(r["us"], str):
            lines.append(f"| {r['peer']} | {r['envs']} | {r['precision']} | {r['us']} | - |")
            continue
        ratio = r["us"] / mine[r["envs"]] if r["envs"] in mine else float("nan")
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
        mine = ours(args.envs, out)
        rows = [row for name in args.peers for row in peer(name, args.envs, out)]
    print("\n" + table(mine, rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"ours": mine, "peers": rows}, indent=1))


if __name__ == "__main__":
    main()
