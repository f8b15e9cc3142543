"""Bytes each kernel of one training step moves to and from device memory (Nsight Compute).

    ncu --profile-from-start off --cache-control none --csv --metrics \\
        gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum \\
        python3 benchmarks/step_profile.py [--envs 4096] > ncu.csv
    python3 benchmarks/step_profile.py --summarise ncu.csv [--bandwidth-gbs 4800]

The first command runs the reference config (scale=gpu) for 300 warm-up steps and profiles the
launches of one eager step only (cuProfilerStart / Stop around it); caches are left warm, as in
training. The second prints per kernel its time under the profiler (kernels serialised, clocks
locked to base by ncu: longer than in training), DRAM bytes and L2 bytes, and the step's
bandwidth floor: DRAM bytes / the GPU's peak bandwidth (H200: 4.8 TB/s).
"""

from __future__ import annotations

import argparse
import csv
import io
from collections import defaultdict

WARM = 300


def run(envs: int) -> None:
    from cuda.bindings import driver as cu
    from cudagraph import reference_trainer

    with reference_trainer(envs, WARM) as trainer:
        trainer.stream.synchronize()
        cu.cuProfilerStart()
        trainer.launch_step()
        trainer.stream.synchronize()
        cu.cuProfilerStop()


def summarise(path: str, bandwidth_gbs: float) -> None:
    with open(path) as fh:
        text = fh.read()
    start = text.find('"ID"')
    if start < 0:
        raise SystemExit(f"{path}: no Nsight Compute CSV in it (did ncu run and profile?)")
    per = defaultdict(lambda: defaultdict(float))
    launches: dict[str, set] = defaultdict(set)
    for row in csv.DictReader(io.StringIO(text[start:])):
        name, value = row["Kernel Name"].split("(")[0], row["Metric Value"].replace(",", "")
        unit = row["Metric Unit"]
        scales = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "ns": 1e-3,
                  "nsecond": 1e-3, "us": 1, "usecond": 1, "ms": 1e3, "msecond": 1e3}  # fmt: skip
        if unit not in scales:
            raise SystemExit(f"{path}: unknown unit {unit!r} of {row['Metric Name']}")
        scale = scales[unit]
        per[name][row["Metric Name"]] += float(value) * scale
        launches[name].add(row["ID"])
    print(f"{'kernel':28} {'x':>3} {'µs (ncu)':>9} {'DRAM MB':>8} {'L2 MB':>8}")
    total = defaultdict(float)
    for name, m in sorted(per.items(), key=lambda kv: -kv[1]["gpu__time_duration.sum"]):
        dram = m["dram__bytes_read.sum"] + m["dram__bytes_write.sum"]
        print(f"{name:28} {len(launches[name]):>3} {m['gpu__time_duration.sum']:>9.1f} "
              f"{dram / 1e6:>8.2f} {m['lts__t_bytes.sum'] / 1e6:>8.2f}")  # fmt: skip
        total["us"] += m["gpu__time_duration.sum"]
        total["dram"] += dram
        total["l2"] += m["lts__t_bytes.sum"]
        total["n"] += len(launches[name])
    print(f"{'step':28} {int(total['n']):>3} {total['us']:>9.1f} {total['dram'] / 1e6:>8.2f} "
          f"{total['l2'] / 1e6:>8.2f}")  # fmt: skip
    print(
        f"bandwidth floor: {total['dram'] / 1e6:.2f} MB DRAM / {bandwidth_gbs:.0f} GB/s = "
        f"{total['dram'] / (bandwidth_gbs * 1e3):.2f} µs (L2: {total['l2'] / 1e6:.1f} MB)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=4096)
    parser.add_argument("--summarise", metavar="CSV", help="print the table of an ncu CSV")
    parser.add_argument("--bandwidth-gbs", type=float, default=4800.0)
    args = parser.parse_args()
    if args.summarise:
        summarise(args.summarise, args.bandwidth_gbs)
    else:
        run(args.envs)


if __name__ == "__main__":
    main()
