"""Credentials stay out of runs: they come from the environment, and whatever a run logs (params,
tags, text artifacts such as config.yaml) has their values replaced by `***`.

A tracking URI that carries a password (`postgresql://user:secret@host/db`, `http://u:p@host`)
is refused by the tracking config (it would be logged with the resolved config): a server's
account goes in MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD, a database's password in
PGPASSWORD or ~/.pgpass.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

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


def secrets(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The secret values set in the environment, longest first (see SECRET_ENV)."""
    env = os.environ if env is None else env
    values = {env[name] for name in SECRET_ENV if len(env.get(name, "")) >= MIN_SECRET_LEN}
    return tuple(sorted(values, key=len, reverse=True))


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
