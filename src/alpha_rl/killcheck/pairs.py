"""Pairing each HER run with its baseline: the HER-off run equal on every other config value."""

from __future__ import annotations

from dataclasses import dataclass

from alpha_rl.tracking import RunRecord


def her_enabled(run: RunRecord) -> bool | None:
    """True / False from the run's `her.enabled` param; None when the run does not say."""
    value = run.params.get("her.enabled")
    return None if value is None else value.strip().lower() == "true"


@dataclass(frozen=True)
class Pairing:
    """HER runs with their baselines, and whatever could not be paired (with why)."""

    pairs: list[tuple[RunRecord, RunRecord]]
    unpaired: list[tuple[RunRecord, str]]


def pairing_key(run: RunRecord, ignore: tuple[str, ...]) -> tuple:
    """The params that must agree between a HER run and its baseline."""
    return tuple(sorted((k, v) for k, v in run.params.items() if not k.startswith(ignore)))


def pair_runs(runs: list[RunRecord], ignore: tuple[str, ...]) -> Pairing:
    """Each HER run with one HER-off run of the same key (first come, first paired)."""
    her = [r for r in runs if her_enabled(r) is True]
    base = [r for r in runs if her_enabled(r) is False]
    unpaired = [(r, "no her.enabled param: not an alpha_rl training run")
                for r in runs if her_enabled(r) is None]  # fmt: skip
    free: dict[tuple, list[RunRecord]] = {}
    for run in base:
        free.setdefault(pairing_key(run, ignore), []).append(run)
    pairs = []
    for run in her:
        candidates = free.get(pairing_key(run, ignore), [])
        if candidates:
            pairs.append((run, candidates.pop(0)))
        else:
            unpaired.append((run, "HER run without a HER-off run of the same config and seed"))
    for leftovers in free.values():
        unpaired += [(r, "HER-off run without a HER run of the same config and seed")
                     for r in leftovers]  # fmt: skip
    return Pairing(pairs, unpaired)
