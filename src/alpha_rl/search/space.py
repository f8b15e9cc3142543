"""A search space in Hydra's override grammar, as Optuna distributions, and back to overrides.

Each key of `hydra.sweeper.params` (or a sweep on the command line) is one dimension:
- `choice(a, b, c)` or `a,b,c`: categorical;
- `range(lo, hi[, step])`: the integers lo, lo + step, ... below hi;
- `interval(lo, hi)`: a float in [lo, hi]; `tag(log, interval(lo, hi))` on a log scale;
  `tag(int, interval(lo, hi))` an integer in [lo, hi] (with `log` too: on a log scale).
Anything else on the command line is a fixed override, passed to every trial as written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, Override, RangeSweep
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from alpha_rl.errors import ConfigError

PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
# words Hydra would read as something other than a string (YAML's booleans and null, floats)
YAML_WORDS = {"on", "off", "yes", "no", "true", "false", "null", "y", "n", "~", "nan", "inf",
              "+inf", "-inf"}  # fmt: skip


def distribution(override: Override) -> BaseDistribution:
    """The Optuna distribution of one sweep override; ConfigError for one it cannot search."""
    key, value = override.get_key_element(), override.value()
    if isinstance(value, ChoiceSweep):
        choices = [v for v in override.sweep_iterator()]
        if not choices:
            raise ConfigError(f"search space {key}: choice() needs at least one value")
        return CategoricalDistribution(choices)
    if isinstance(value, RangeSweep):
        start, stop, step = value.start, value.stop, value.step
        if not all(float(x).is_integer() for x in (start, stop, step)) or step <= 0:
            raise ConfigError(
                f"search space {key}: range() of integers with a positive step "
                "(use interval() for floats)"
            )
        start, stop, step = int(start), int(stop), int(step)
        if stop - start < 1:
            raise ConfigError(
                f"search space {key}: range({start}, {stop}) is empty (the stop is excluded)"
            )
        return IntDistribution(start, start + (stop - 1 - start) // step * step, step=step)
    if isinstance(value, IntervalSweep):
        lo, hi, tags = float(value.start), float(value.end), set(value.tags)
        unknown = tags - {"log", "int"}
        if unknown:
            raise ConfigError(f"search space {key}: unknown tag(s) {sorted(unknown)} (log, int)")
        if not lo < hi or ("log" in tags and lo <= 0):
            raise ConfigError(
                f"search space {key}: interval({lo:g}, {hi:g}) needs low < high "
                "(and low > 0 on a log scale)"
            )
        if "int" in tags:
            return IntDistribution(int(lo), int(hi), log="log" in tags)
        return FloatDistribution(lo, hi, log="log" in tags)
    raise ConfigError(
        f"search space {key}: {override.input_line!r} is not choice(), range() or interval()"
    )


def parse(params: Mapping[str, Any], arguments: Sequence[str]) -> tuple[dict, list[str]]:
    """({key: distribution}, fixed overrides) from the configured space and the command line
    (a sweep there adds or replaces a dimension; anything else is fixed)."""
    parser = OverridesParser.create()
    lines = [f"{k}={v}" for k, v in (params or {}).items()]
    space: dict[str, BaseDistribution] = {}
    for override in parser.parse_overrides(lines):
        space[override.get_key_element()] = distribution(override)
    fixed: list[str] = []
    for override in parser.parse_overrides(list(arguments)):
        if override.is_sweep_override():
            space[override.get_key_element()] = distribution(override)
        else:
            fixed.append(override.input_line)
    if not space:
        raise ConfigError(
            "the search has no dimension: set hydra.sweeper.params (see "
            "conf/hparams_search/) or sweep a key on the command line"
        )
    return space, fixed


def as_override(key: str, value: Any) -> str:
    """`key=value` that Hydra parses back to `value` (strings quoted where YAML would not keep
    them strings)."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "null"
    elif isinstance(value, int | float):
        text = repr(value)
    else:
        text = str(value)
        if not PLAIN.fullmatch(text) or text.lower() in YAML_WORDS:
            text = "'" + text.replace("'", "\\'") + "'"
    return f"{key}={text}"


def describe(space: Mapping[str, BaseDistribution]) -> dict[str, str]:
    """Each dimension in words (for the study's record and the parent run's tags)."""
    out = {}
    for key, d in space.items():
        if isinstance(d, CategoricalDistribution):
            out[key] = f"choice{tuple(d.choices)}"
        elif isinstance(d, IntDistribution):
            out[key] = f"int [{d.low}, {d.high}]" + (" log" if d.log else f" step {d.step}")
        elif isinstance(d, FloatDistribution):
            out[key] = f"float [{d.low:g}, {d.high:g}]" + (" log" if d.log else "")
    return out
