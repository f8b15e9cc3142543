"""Typed market configs: the composed `market` node checked and turned into frozen dataclasses.

Every error names the key (`market.wave_len`), the value found and what would be accepted.
Defaults live in conf/market/*.yaml, never here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from alpha_rl.convert import to_float, to_int, to_str
from alpha_rl.errors import MarketDataError
from alpha_rl.market.files import check_columns, check_default_size
from alpha_rl.market.times import check_format, parse_gap, parse_zone

SOURCES = ("synthetic_waves", "file")
SPREADS = 3  # spread_probs[i] is the probability of a spread of i + 1 ticks


@dataclass(frozen=True)
class SyntheticWavesConfig:
    """Parameters of the synthetic wave market (units in conf/market/synthetic_waves.yaml)."""

    levels: int
    ticks: int
    tick_size: float
    start_price: float
    wave_len: tuple[int, int]
    wave_amp: tuple[float, float]
    p_flat: float
    revert_ticks: float
    noise_ticks: float
    spread_probs: tuple[float, ...]
    depth_size: tuple[float, float]
    imbalance_signal: float
    imbalance_noise: float
    imbalance_clip: float
    currency: str
    seed: int | None = None
    fold: int | None = None

    def __post_init__(self) -> None:
        _check_common(self)
        _check(self.levels >= 1, "levels", self.levels, "must be >= 1")
        _check(self.ticks >= 2, "ticks", self.ticks, "must be >= 2")
        _check(self.tick_size > 0, "tick_size", self.tick_size, "must be > 0 (USD)")
        _check(self.start_price > 0, "start_price", self.start_price, "must be > 0 (USD)")
        lo, hi = self.wave_len
        _check(1 <= lo <= hi, "wave_len", list(self.wave_len), "needs 1 <= lo <= hi (ticks)")
        lo, hi = self.wave_amp
        _check(0 <= lo <= hi, "wave_amp", list(self.wave_amp), "needs 0 <= lo <= hi (ticks)")
        _check(0 <= self.p_flat <= 1, "p_flat", self.p_flat, "must be a probability in [0, 1]")
        _check(self.revert_ticks > 0, "revert_ticks", self.revert_ticks, "must be > 0 (ticks)")
        _check(self.noise_ticks >= 0, "noise_ticks", self.noise_ticks, "must be >= 0 (ticks)")
        probs = list(self.spread_probs)
        _check(
            len(probs) == SPREADS and min(probs) >= 0 and abs(math.fsum(probs) - 1) < 1e-6,
            "spread_probs",
            probs,
            f"needs {SPREADS} probabilities >= 0 (spreads of 1, 2, 3 ticks) that sum to 1",
        )
        lo, hi = self.depth_size
        _check(1 <= lo <= hi, "depth_size", list(self.depth_size), "needs 1 <= lo <= hi (lots)")
        clip = self.imbalance_clip
        _check(0 <= clip < 1, "imbalance_clip", clip, "must be in [0, 1)")
        sig = self.imbalance_signal
        _check(0 <= sig <= clip, "imbalance_signal", sig, f"must be in [0, imbalance_clip={clip}]")
        _check(self.imbalance_noise >= 0, "imbalance_noise", self.imbalance_noise, "must be >= 0")


@dataclass(frozen=True)
class FileMarketConfig:
    """A quotes file (CSV or Parquet); `path` as given, relative to the working directory."""

    path: str
    tick_size: float | None
    min_rows: int
    currency: str
    timestamp_format: str | None  # strptime format of text timestamps; None: numbers or ISO-8601
    timezone: str | None  # IANA zone of naive times; None: UTC
    columns: tuple[tuple[str, str], ...]  # (file column, our column) renames
    default_size: float | None  # lots for absent size columns; None: sizes required
    session_gap: str | float | None  # a duration ("1h") or a number in the file's units
    spread: float | None = None  # a file of one price per row: the spread quoted around it
    fold: int | None = None

    def __post_init__(self) -> None:
        _check_common(self)
        _check(bool(self.path.strip()), "path", self.path, "must name a CSV or Parquet file")
        if self.tick_size is not None:
            _check(self.tick_size > 0, "tick_size", self.tick_size, "must be > 0 or null")
        _check(self.min_rows >= 1, "min_rows", self.min_rows, "must be >= 1")
        check_format(self.timestamp_format)  # the file's own checks, before the file is read
        parse_zone(self.timezone)
        check_columns(dict(self.columns))
        check_default_size(self.default_size)
        parse_gap(self.session_gap)
        if self.spread is not None:
            what = "must be > 0 (in market.currency) or null (a file of bid/ask columns)"
            _check(self.spread > 0, "spread", self.spread, what)


MarketConfig = SyntheticWavesConfig | FileMarketConfig


def market_config(node: DictConfig | Mapping[str, Any]) -> MarketConfig:
    """The typed config of a composed `market` node, dispatched on `market.name`."""
    if isinstance(node, DictConfig) and OmegaConf.is_missing(node, "path"):
        raise MarketDataError(
            "market.path is not set: pass the quotes file, e.g. market.path=data/quotes.csv "
            "(CSV or Parquet; relative paths resolve against the working directory)"
        )
    try:
        data = (
            OmegaConf.to_container(node, resolve=True, throw_on_missing=True)
            if isinstance(node, DictConfig)
            else node
        )
    except OmegaConfBaseException as exc:
        raise MarketDataError(f"the market config cannot be resolved: {exc}") from exc
    data = dict(data)
    name = data.pop("name", None)
    if name == "synthetic_waves":
        return _build(name, SyntheticWavesConfig, data, _SYNTHETIC_KINDS)
    if name == "file":
        return _build(name, FileMarketConfig, data, _FILE_KINDS)
    raise MarketDataError(
        f"market.name={name!r} is not a market source; choose one of {', '.join(SOURCES)} "
        "(market=synthetic_waves or market=file, conf/market/*.yaml)"
    )


# --- value converters: (key, raw value) -> typed value, or MarketDataError ---


def _fail(key: str, value: object, what: str) -> MarketDataError:
    return MarketDataError(
        f"market.{key}={value!r}: {what}; fix it in conf/market/ or override market.{key}=..."
    )


def _check(ok: bool, key: str, value: object, what: str) -> None:
    if not ok:
        raise _fail(key, value, what)


def _check_common(cfg: SyntheticWavesConfig | FileMarketConfig) -> None:
    """The keys every source has: the fold (checked against its validation by the loader)
    and the currency prices are quoted in."""
    _check(cfg.fold is None or cfg.fold >= 0, "fold", cfg.fold,
           "must be null (validation=single) or a fold index 0..validation.folds-1")  # fmt: skip
    _check(bool(cfg.currency.strip()), "currency", cfg.currency,
           "must name the currency prices are quoted in (e.g. USD, EUR, JPY)")  # fmt: skip


def _expected(key: str, value: object, what: str) -> MarketDataError:
    return _fail(key, value, f"expected {what}")


def _int(key: str, value: object) -> int:
    return to_int(key, value, _expected)


def _float(key: str, value: object) -> float:
    return to_float(key, value, _expected)


def _str(key: str, value: object) -> str:
    return to_str(key, value, _expected)


def _optional(convert: Callable[[str, object], Any]) -> Callable[[str, object], Any]:
    return lambda key, value: None if value is None else convert(key, value)


def _renames(key: str, value: object) -> tuple[tuple[str, str], ...]:
    """A mapping {file column: our column} of strings (null: none) as pairs."""
    if value is None:
        return ()
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _fail(
            key, value, "expected a mapping of the file's column names to ours, e.g. "
            "{Bid: bid_px_0, 'Local time': timestamp} (quote names that YAML reads as numbers)"
        )  # fmt: skip
    return tuple(value.items())


def _gap(key: str, value: object) -> str | float:
    """A duration string such as '1h', or a number (the timestamps' own units)."""
    return value if isinstance(value, str) else _float(key, value)


def _seq(convert: Callable[[str, object], Any], n: int | None) -> Callable[[str, object], tuple]:
    def parse(key: str, value: object) -> tuple:
        if not isinstance(value, list | tuple) or (n is not None and len(value) != n):
            raise _fail(key, value, f"expected a list of {n or 'some'} numbers")
        return tuple(convert(key, v) for v in value)

    return parse


_SYNTHETIC_KINDS: dict[str, Callable[[str, object], Any]] = {
    "levels": _int,
    "ticks": _int,
    "tick_size": _float,
    "start_price": _float,
    "wave_len": _seq(_int, 2),
    "wave_amp": _seq(_float, 2),
    "p_flat": _float,
    "revert_ticks": _float,
    "noise_ticks": _float,
    "spread_probs": _seq(_float, None),
    "depth_size": _seq(_float, 2),
    "imbalance_signal": _float,
    "imbalance_noise": _float,
    "imbalance_clip": _float,
    "currency": _str,
    "seed": _optional(_int),
    "fold": _optional(_int),
}
_FILE_KINDS: dict[str, Callable[[str, object], Any]] = {
    "path": _str,
    "tick_size": _optional(_float),
    "min_rows": _int,
    "currency": _str,
    "timestamp_format": _optional(_str),
    "timezone": _optional(_str),
    "columns": _renames,
    "default_size": _optional(_float),
    "session_gap": _optional(_gap),
    "spread": _optional(_float),
    "fold": _optional(_int),
}


def _build(
    name: str, cls: type, data: dict[str, Any], kinds: Mapping[str, Callable[[str, object], Any]]
) -> Any:
    """cls(**converted data); unknown and missing keys are errors that list the accepted ones."""
    unknown = sorted(set(data) - set(kinds))
    if unknown:
        raise MarketDataError(
            f"unknown key(s) market.{', market.'.join(unknown)} for market={name}; "
            f"accepted: name, {', '.join(kinds)}"
        )
    required = [f.name for f in fields(cls) if f.default is MISSING]
    missing = [key for key in required if key not in data]
    if missing:
        raise MarketDataError(
            f"market={name} lacks market.{', market.'.join(missing)}; "
            f"add the key(s) to conf/market/{name}.yaml or pass +market.<key>=..."
        )
    return cls(**{key: kinds[key](key, value) for key, value in data.items()})


def cls_name(cls: type) -> str:
    """The market source name of a config class (`synthetic_waves` or `file`)."""
    return "synthetic_waves" if cls is SyntheticWavesConfig else "file"
