"""Credentials stay out of runs: they come from the environment, and whatever the platform writes
has their values replaced by `***`. `mask` is the one rule; it is applied where lines leave the
process: every log line (MaskSecrets, on conf/train.yaml's handlers), every error of ours
(alpha_rl.errors.AlphaRlError masks its message), the config a run records (checkpoints'
meta.json, the config.yaml artifact, params), tags, run names, identity.json's seed and
outcome.json's reason. A secret is the value of a variable of SECRET_ENV, and the number it
decodes to (`${oc.decode:${oc.env:PGPASSWORD}}` of "1_234_567" is 1234567): a number of the config
equal to it is masked, and so is its text. Where a masked value would become a name that runs are
filed under (tracking.experiment, tracking.uri), the config is refused instead (tracking/config.py).

A tracking URI that carries a password (`postgresql://user:secret@host/db`, `http://u:p@host`)
is refused by the tracking config (it would be logged with the resolved config): a server's
account goes in MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD, a database's password in
PGPASSWORD or ~/.pgpass.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import re
from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from omegaconf.resolvers import oc

MASK = "***"
KEY_MASK = "_masked_"  # in a param or tag key, where MLflow refuses '*'
# environment variables whose values are secrets wherever they would turn up in a run
SECRET_ENV = (
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_TOKEN",
    "MLFLOW_AUTH_ADMIN_PASSWORD",
    "PGPASSWORD",
    "DATABRICKS_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
)
MIN_SECRET_LEN = 4  # shorter values would mask unrelated text (and are no secret anyway)
# scheme://user:password@host: the password runs to the last @ of the token, whatever it holds
# (SQLAlchemy takes '/', '#', '?' in one; a part of it must never be shown)
_USERINFO = re.compile(r"(?P<head>\b[a-zA-Z][\w+.-]*://[^\s/:@]*:)(?P<password>\S+)@")


def uri_has_password(uri: str) -> bool:
    """True when `uri` carries a password in its user info (scheme://user:password@host)."""
    return _USERINFO.match(uri.strip()) is not None


def hide_password(text: str) -> str:
    """`text` with the password of every scheme://user:password@ in it shown as ***."""
    return _USERINFO.sub(lambda m: f"{m['head']}{MASK}@", text)


def _secret_values(env: Mapping[str, str] | None) -> dict[str, str]:
    """{variable: value} of the secrets set in `env` (default: the process's environment)."""
    env = os.environ if env is None else env
    return {name: env[name] for name in SECRET_ENV if len(env.get(name, "")) >= MIN_SECRET_LEN}


@functools.lru_cache(maxsize=64)
def _numbers(value: str) -> frozenset[float]:
    """The numbers `value` reads as: what ${oc.decode:...} makes of it, and int() / float()."""
    found: set[float] = set()
    try:
        decoded = oc.decode(value, _parent_=OmegaConf.create({}), _node_=None)  # type: ignore[arg-type]
    except (OmegaConfBaseException, TypeError, ValueError):
        decoded = None
    if isinstance(decoded, int | float) and not isinstance(decoded, bool):
        found.add(decoded)
    for read in (int, float):
        with contextlib.suppress(ValueError, OverflowError):
            found.add(read(value))
    return frozenset(x for x in found if not (isinstance(x, float) and math.isnan(x)))


def _texts(number: float) -> set[str]:
    """How `number` is written: 1234567, 12000.0 and 12000."""
    texts = {str(number), repr(number)}
    if isinstance(number, float) and math.isfinite(number) and number.is_integer():
        texts.add(str(int(number)))
    return texts


def secrets(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The texts to mask, longest first: the secret values set in the environment (see
    SECRET_ENV) and how the numbers they decode to are written ("1_234_567" -> "1234567")."""
    values = set()
    for value in _secret_values(env).values():
        values |= {value} | {t for x in _numbers(value) for t in _texts(x)}
    return tuple(sorted((v for v in values if len(v) >= MIN_SECRET_LEN), key=len, reverse=True))


def secret_numbers(env: Mapping[str, str] | None = None) -> frozenset[float]:
    """The numbers the secret values of the environment decode to (masked where a config holds
    one), those written in fewer than MIN_SECRET_LEN characters (0, 100) aside, as in text."""
    found = {x for value in _secret_values(env).values() for x in _numbers(value)}
    return frozenset(x for x in found if min(map(len, _texts(x))) >= MIN_SECRET_LEN)


def secret_in(text: str, env: Mapping[str, str] | None = None) -> str | None:
    """The name of the variable whose secret `text` holds (as `secrets` finds it), else None."""
    for name, value in _secret_values(env).items():
        if any(t in text for t in secrets({name: value})):
            return name
    return None


def mask(data: Any, env: Mapping[str, str] | None = None) -> Any:
    """`data` with the environment's secrets masked, at any depth: in text (keys included) as
    `redact` does, and a number equal to a secret's decoded value as ***. Whatever else passes."""
    return _masked(data, secrets(env), secret_numbers(env))


def _masked(data: Any, values: tuple[str, ...], numbers: frozenset[float]) -> Any:
    if isinstance(data, str):
        return redact(data, values)
    if isinstance(data, int | float) and not isinstance(data, bool):
        return MASK if data in numbers else data
    if isinstance(data, Mapping):
        return {_masked(k, values, numbers): _masked(v, values, numbers) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_masked(v, values, numbers) for v in data]
    return data


class MaskSecrets(logging.Filter):
    """A logging filter that masks the environment's secrets in every record it passes (message,
    arguments, traceback): on a handler, nothing it writes holds one (conf/train.yaml)."""

    def filter(self, record: logging.LogRecord) -> bool:
        values = secrets()
        record.msg, record.args = redact(record.getMessage(), values), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, values)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, values)
        return True


def redact(text: str, values: tuple[str, ...]) -> str:
    """`text` with every secret value in `values` and every URI password replaced by ***."""
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return hide_password(text)


def redact_key(key: str, values: tuple[str, ...]) -> str:
    """A param or tag key with every secret value in `values` replaced by _masked_."""
    for value in values:
        if value in key:
            key = key.replace(value, KEY_MASK)
    return key
