"""The ISV: a float32 device vector of named slots (kernel parameters and diagnostics).

Config groups contribute slots under `isv.slots.<group>.<name>: {index, count, init, doc, kind}`;
Hydra merges them. The slots a part owns (alpha_rl.pipeline.configure.parts) take their initial
values from that part's checked config, never from an `init` of their own. `build_layout` validates
the composed layout before any work: every name one that the code reads (a slot nothing reads is
refused, not listed), unique, no two slots sharing an index, every slot inside `isv.size`, the
slots each enabled part's kernels read present. Each error names the slots, the index and the
config groups that declared them.
"""

from __future__ import annotations

import difflib
import itertools
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from omegaconf import DictConfig, OmegaConf

from alpha_rl.backend.base import Backend, DeviceArray
from alpha_rl.errors import IsvLayoutError
from alpha_rl.settings import F32_MAX, representable

ABSENT = -1  # the slot index kernels read as "not in this layout"

KINDS = ("param", "diag")  # param: read by kernels; diag: written by kernels


@dataclass(frozen=True)
class Slot:
    """A named run of `count` consecutive floats starting at `index`."""

    name: str
    group: str
    index: int
    count: int
    init: tuple[float, ...]
    doc: str
    kind: str
    source: str  # the config option that declared it, e.g. "her=on"

    @property
    def stop(self) -> int:
        return self.index + self.count


def _origin(group: str, choices: Mapping[str, str]) -> str:
    if choices.get(group):
        return (
            f"config group {group!r} ({group}={choices[group]}, conf/{group}/{choices[group]}.yaml)"
        )
    return f"isv.slots.{group} (set outside the config groups: an override or an extra config)"


def _source(group: str, choices: Mapping[str, str]) -> str:
    return f"{group}={choices[group]}" if choices.get(group) else f"isv.slots.{group}"


def _parse_slot(group: str, name: str, node: object, where: str, source: str) -> Slot:
    if not isinstance(node, Mapping):
        raise IsvLayoutError(f"{where}: expected a mapping {{index, init, doc}}, got {node!r}")
    unknown = set(node) - {"index", "count", "init", "doc", "kind"}
    if unknown:
        raise IsvLayoutError(
            f"{where}: unknown keys {sorted(unknown)}; allowed: index, count, init, doc, kind"
        )
    index, count = node.get("index"), node.get("count", 1)
    for key, value in (("index", index), ("count", count)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise IsvLayoutError(f"{where}.{key}: expected an integer, got {value!r}")
    if index < 0 or count < 1:
        raise IsvLayoutError(f"{where}: index must be >= 0 and count >= 1 (got {index}, {count})")
    init = node.get("init", 0.0)
    values = tuple(init) if isinstance(init, list | tuple) else (init,) * count
    if len(values) != count or not all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) and representable(v) for v in values
    ):
        hint = ("; a value resolved from the data (reward.scale=auto) is set by the run once "
                "the market is built: alpha_rl.pipeline.configure.scale, or pass a number"
                if init == "auto" else "")  # fmt: skip
        raise IsvLayoutError(
            f"{where}.init: expected a finite number or {count} of them, each within float32's "
            f"±{F32_MAX:.4g} (the ISV is float32), got {init!r}{hint}"
        )
    kind = node.get("kind", "param")
    if kind not in KINDS:
        raise IsvLayoutError(f"{where}.kind: expected one of {KINDS}, got {kind!r}")
    doc = node.get("doc")
    if not isinstance(doc, str) or not doc.strip():
        raise IsvLayoutError(f"{where}.doc: every slot needs a one-line description")
    init_values = tuple(float(v) for v in values)
    return Slot(name, group, int(index), int(count), init_values, doc, kind, source)


@dataclass(frozen=True)
class IsvLayout:
    """A validated slot layout."""

    size: int
    slots: tuple[Slot, ...]  # sorted by index

    def slot(self, name: str) -> Slot:
        for s in self.slots:
            if s.name == name:
                return s
        raise IsvLayoutError(f"no ISV slot named {name!r}; known: {', '.join(self.names())}")

    def names(self) -> list[str]:
        return [s.name for s in self.slots]

    def index(self, name: str) -> np.int32:
        """Slot index as the np.int32 kernels take."""
        return np.int32(self.slot(name).index)

    def index_or_absent(self, name: str) -> int:
        """The slot's index, or ABSENT (-1: the kernels' "no such slot") when the layout has none
        (a variant that does not declare it)."""
        return next((s.index for s in self.slots if s.name == name), ABSENT)

    def initial_values(self) -> np.ndarray:
        """The [size] float32 vector with every slot's initial values (zeros elsewhere)."""
        vec = np.zeros(self.size, dtype=np.float32)
        for s in self.slots:
            vec[s.index : s.stop] = s.init
        return vec

    def table(self) -> str:
        """A printable table: index, count, name, kind, init, declaring option, doc."""
        rows = [("index", "n", "name", "kind", "init", "declared by", "doc")]
        for s in self.slots:
            init = f"{s.init[0]:g}" if len(set(s.init)) == 1 else " ".join(f"{v:g}" for v in s.init)
            span = str(s.index) if s.count == 1 else f"{s.index}-{s.stop - 1}"
            rows.append((span, str(s.count), s.name, s.kind, init, s.source, s.doc))
        widths = [max(len(r[i]) for r in rows) for i in range(6)]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(r[:6], widths, strict=True)) + "  " + r[6]
            for r in rows
        ]
        used = sum(s.count for s in self.slots)
        return f"ISV layout: {len(self.slots)} slots, {used} of {self.size} floats\n" + "\n".join(
            lines
        )


@dataclass(frozen=True)
class Owned:
    """A slot whose initial values a part computes from its checked config: the part, the
    setting they come from, and the values (None while the part is off in this config)."""

    part: str
    setting: str
    init: tuple[float, ...] | None


def _collect(cfg: DictConfig, choices: Mapping[str, str], owned: Mapping[str, Owned],
             read: frozenset[str]) -> tuple[int, list[Slot]]:  # fmt: skip
    isv = cfg.get("isv")
    if isv is None or "slots" not in isv or "size" not in isv:
        raise IsvLayoutError(
            "the config has no isv.size / isv.slots; is conf/isv/base.yaml in the defaults?"
        )
    size = isv.size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise IsvLayoutError(f"isv.size: expected a positive integer, got {size!r}")
    container = OmegaConf.to_container(isv.slots, resolve=True)
    slots, seen = [], {}
    for group, members in (container or {}).items():
        if not isinstance(members, Mapping):
            raise IsvLayoutError(f"isv.slots.{group}: expected a mapping of slot name -> slot")
        for name, node in members.items():
            where = f"isv.slots.{group}.{name}"
            _check_read(name, where, read)
            node = _owned_init(name, node, where, owned.get(name))
            slot = _parse_slot(group, name, node, where, _source(group, choices))
            if name in seen:
                raise IsvLayoutError(
                    f"ISV slot name {name!r} is declared twice: by "
                    f"{_origin(seen[name].group, choices)} and by {_origin(group, choices)}; "
                    "rename one of them"
                )
            if slot.stop > size:
                raise IsvLayoutError(
                    f"ISV slot {name!r} ({_origin(group, choices)}) occupies "
                    f"{slot.index}..{slot.stop - 1}, beyond isv.size={size}; "
                    "move it or raise isv.size"
                )
            seen[name] = slot
            slots.append(slot)
    return size, slots


def _check_read(name: str, where: str, read: frozenset[str]) -> None:
    """Refuse a slot whose name is none of those the code reads (`read`): nothing would read
    or write it, so it would only fill the table."""
    if name in read:
        return
    near = difflib.get_close_matches(name, sorted(read), n=1, cutoff=0.6)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    raise IsvLayoutError(
        f"{where}: no part of the code reads an ISV slot named {name!r}{hint}, so it would do "
        "nothing; remove it, or, for a new slot, name it in alpha_rl/vocabulary.py (SLOT_*) "
        "and read it where its kernel takes its index"
    )


def _owned_init(name: str, node: object, where: str, owner: Owned | None) -> object:
    """The slot's declaration with its owner's initial values: an `init` of its own is refused
    (the number would go round the setting's range check), as is an owned slot whose part is
    off in this config."""
    if owner is None or not isinstance(node, Mapping):
        return node
    if "init" in node:
        raise IsvLayoutError(
            f"{where}.init: the slot {name!r} belongs to the {owner.part} part, which sets its "
            f"initial value from {owner.setting} (range-checked there); set {owner.setting} "
            "instead, and leave the slot's init out"
        )
    count = node.get("count", 1)
    if owner.init is not None and isinstance(count, int) and count != len(owner.init):
        raise IsvLayoutError(
            f"{where}.count={count}: the {owner.part} part sets {len(owner.init)} value(s) from "
            f"{owner.setting}; the slot needs count {len(owner.init)}"
        )
    if owner.init is None:
        raise IsvLayoutError(
            f"{where}: the slot {name!r} belongs to the {owner.part} part, which this config "
            f"does not enable, so nothing sets {owner.setting}; remove the slot or enable the part"
        )
    return {**node, "init": list(owner.init)}


def build_layout(cfg: DictConfig, choices: Mapping[str, str], owned: Mapping[str, Owned],
                 need: list[tuple[str, str]], read: frozenset[str]) -> IsvLayout:  # fmt: skip
    """Validate the composed config's ISV slots, owned ones filled by their parts (`owned`),
    every (slot, part) of `need` present, every slot's name one of `read` (the names the code
    reads). Callers: alpha_rl.pipeline.configure.parts.layout_from_plan."""
    size, slots = _collect(cfg, choices, owned, read)
    slots.sort(key=lambda s: (s.index, s.name))
    for a, b in itertools.pairwise(slots):
        if b.index < a.stop:
            raise IsvLayoutError(
                f"ISV slot clash at index {b.index}: {a.name!r} (index {a.index}, count {a.count}, "
                f"declared by {_origin(a.group, choices)}) and {b.name!r} (index {b.index}, "
                f"declared by {_origin(b.group, choices)}); give one of them a free index"
            )
    names = {s.name for s in slots}
    missing = {n: why for n, why in need if n not in names}
    if missing:
        listed = ", ".join(f"{n!r} (needed by {why})" for n, why in missing.items())
        raise IsvLayoutError(f"ISV slots missing from the composed config: {listed}")
    return IsvLayout(size, tuple(slots))


class DeviceIsv:
    """The ISV on a backend: a float32 [size] device array holding the layout's initial values."""

    def __init__(self, layout: IsvLayout, backend: Backend) -> None:
        self.layout = layout
        self.backend = backend
        self.array: DeviceArray = backend.upload(layout.initial_values())

    def read(self) -> np.ndarray:
        """Copy the whole vector to the host (a device->host sync: call only at log points)."""
        return self.backend.download(self.array)

    def values(self, name: str) -> np.ndarray:
        """One slot's current values, read from the device."""
        slot = self.layout.slot(name)
        return self.read()[slot.index : slot.stop]

    def reset(self, names: Iterable[str]) -> None:
        """Set the named slots the layout has back to their initial values (a read-modify-write
        of the whole vector: not in a step)."""
        present = [self.layout.slot(n) for n in names if n in self.layout.names()]
        if present:
            vector, initial = self.read(), self.layout.initial_values()
            for slot in present:
                vector[slot.index : slot.stop] = initial[slot.index : slot.stop]
            self.backend.write(self.array, vector)


def numbers_isv(values: Mapping[str, tuple[float, ...]], backend: Backend) -> DeviceIsv:
    """A DeviceIsv holding only the named slots' `values` (a part's numbers: learner_numbers,
    replay_numbers of alpha_rl.pipeline.configure.parts), one after another from index 0: what
    a part's objects read when they are built apart from a run (a benchmark of one part, its
    tests)."""
    slots, index = [], 0
    for name, init in values.items():
        slots.append(Slot(name, "numbers", index, len(init), tuple(map(float, init)), name,
                          "param", "numbers_isv"))  # fmt: skip
        index += len(init)
    return DeviceIsv(IsvLayout(index, tuple(slots)), backend)
