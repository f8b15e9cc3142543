"""Pairing treatment runs with their baselines along one axis: two runs pair when every param
outside the axis (and outside `pair_ignore`) is equal, the seed included (and, with walk-forward
validation, the fold). One baseline run serves every treatment of its config: the her=off run of
seed 3 is the baseline of her=backward, her=forward and her=on of seed 3."""

from __future__ import annotations

from dataclasses import dataclass

from alpha_rl.killcheck.axes import Axis
from alpha_rl.pipeline.configure.parts import recorded_init
from alpha_rl.tracking import RunRecord

Pair = tuple[RunRecord, RunRecord]  # (treatment, baseline)


@dataclass(frozen=True)
class Pairing:
    """Per treatment value its pairs, and whatever could not be paired (with why)."""

    axis: Axis
    arms: dict[str, list[Pair]]
    unpaired: list[tuple[RunRecord, str]]

    @property
    def pairs(self) -> list[Pair]:
        """Every pair of every treatment."""
        return [pair for pairs in self.arms.values() for pair in pairs]


def pairing_key(run: RunRecord, axis: Axis, ignore: tuple[str, ...]) -> tuple:
    """The params that must agree between a treatment run and its baseline (an owned ISV slot's
    init, which runs recorded before the parts set those slots carry, is its part's setting,
    compared in its place)."""
    return tuple(sorted((k, v) for k, v in run.params.items()
                        if not axis.owns(k) and not k.startswith(ignore)
                        and not recorded_init(k)))  # fmt: skip


def pair_runs(runs: list[RunRecord], axis: Axis, ignore: tuple[str, ...]) -> Pairing:
    """Each treatment run with the baseline run of its config (in start order within a config:
    a config run twice pairs first with first)."""
    unpaired: list[tuple[RunRecord, str]] = []
    groups: dict[tuple, dict[str, list[RunRecord]]] = {}
    for run in sorted(runs, key=lambda r: (r.start_time, r.run_id)):
        value = axis.value(run)
        if value is None:
            unpaired.append((run, f"no {axis.name} param: not a run that varies {axis.name}"))
            continue
        arm = axis.baseline if axis.is_baseline(value) else value
        groups.setdefault(pairing_key(run, axis, ignore), {}).setdefault(arm, []).append(run)
    base_label = axis.label(axis.baseline)
    arms: dict[str, list[Pair]] = {}
    for group in groups.values():
        bases = group.pop(axis.baseline, [])
        for value, treated in group.items():
            label = axis.label(value)
            arms.setdefault(value, []).extend(zip(treated, bases, strict=False))
            unpaired += [(r, f"{label} run without a {base_label} run of the same config and seed")
                         for r in treated[len(bases) :]]  # fmt: skip
        used = max((len(t) for t in group.values()), default=0)
        unpaired += [(r, f"{base_label} run without a treatment run of the same config and seed")
                     for r in bases[used:]]  # fmt: skip
    ordered = {v: arms[v] for v in axis.order(set(arms)) if arms[v]}
    return Pairing(axis, ordered, unpaired)
