"""A tracking store opened for reading, or refused in one line.

Every command that reads a store (the kill check, alpha-rl-confirm, `reap`, `sync`, `relocate`)
looks at it before MLflow does: MLflow would create a missing SQLite file and its folders, write
its schema into any SQLite database, upgrade an older one, and end in a traceback on a damaged
file or a server that does not answer. `check_store` refuses such a store with a
TrackingReadError whose one line names it (its password masked) and says what to do; `failure`
turns whatever a client raised later into the same kind of line.

- An SQLite store must exist, be readable, begin with SQLite's header, open without SQLite
  finding it damaged, hold MLflow's tables, and be at the schema revision of the installed MLflow.
- A database server (postgresql, mysql, mssql) must answer one connection and hold the same.
- A tracking server (http, https) is asked nothing here: its first request says what it is.

A training run (and a sweep's parent run) writes into its store: `check_store_to_write` refuses
the same SQLite files before it does, but lets it make a store where there is none yet.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import re
import sqlite3
import stat
from pathlib import Path

from omegaconf import OmegaConf

from alpha_rl import paths
from alpha_rl.commands import script_command
from alpha_rl.errors import AlphaRlError
from alpha_rl.masking import hide_password
from alpha_rl.tracking.config import TrackingConfig
from alpha_rl.tracking.store import (
    mlflow_client_class,
    set_http_limits,
    sqlite_file,
    store_lock,
)

SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file
MLFLOW_TABLES = frozenset({"alembic_version", "experiments", "runs", "metrics"})
DATABASE_SERVERS = frozenset({"postgresql", "mysql", "mssql"})  # MLflow's other SQL dialects
CONNECT_TIMEOUT_ARG = {"postgresql": "connect_timeout", "mysql": "connect_timeout"}
REFUSED_CODES = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})
# what a run refused its store is told to do
WRITE_REMEDY = "give tracking.uri of an MLflow store, or of a file not there yet (the run makes it)"
_ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\"()\]]+)")


class TrackingReadError(AlphaRlError):
    """The tracking store, experiment or run asked for cannot be read."""


class NoStoreError(TrackingReadError):
    """There is no store at that address (and none was created there)."""


class StoreDownError(TrackingReadError):
    """The store does not answer now (a server down, a lock held): trying later may help."""


class NotInStoreError(TrackingReadError):
    """The store answered: it holds no such run or experiment."""


def store_name(uri: str) -> str:
    """How messages name a store: an SQLite store by its file, any other by its URI, masked."""
    path = sqlite_file(uri)
    return str(path) if path is not None else hide_password(uri)


def bound_requests() -> TrackingConfig:
    """Bound MLflow's HTTP requests as conf/tracking/local.yaml says (http_timeout_s,
    http_retries: a server that does not answer is told in seconds, not minutes); that config."""
    local = TrackingConfig.from_cfg(OmegaConf.load(paths.conf_dir() / "tracking" / "local.yaml"))
    set_http_limits(local.http_timeout_s, local.http_retries)
    return local


def check_store(uri: str, remedy: str) -> None:
    """Refuse a store that cannot be read (TrackingReadError, one line ending with `remedy`
    where another store is the way out), before any MLflow client touches it."""
    path = sqlite_file(uri)
    if path is not None:
        check_sqlite(path, remedy)
        return
    scheme = uri.strip().split(":", 1)[0].lower()
    if scheme.split("+", 1)[0] in DATABASE_SERVERS:
        _check_database(uri, remedy)


def check_sqlite(path: Path, remedy: str, schema: bool = True, new_ok: bool = False) -> None:
    """Refuse an SQLite file that is missing, unreadable, not SQLite, damaged or not MLflow's
    (and, with `schema`, at another MLflow schema revision; with `new_ok`, an empty file or a
    database without a table passes: a store to be made); reads only, creates nothing."""
    try:
        mode = path.stat().st_mode
        head = _read_head(path) if stat.S_ISREG(mode) else b""
    except (FileNotFoundError, NotADirectoryError):
        raise NoStoreError(f"no tracking store at {path}: no such file; {remedy}") from None
    except OSError as exc:  # permission denied (on the file or a folder above it), an I/O error
        raise _no_access(str(path), exc) from None
    if not stat.S_ISREG(mode):
        raise NoStoreError(f"no tracking store at {path}: it is not a file; {remedy}")
    if head and head != SQLITE_HEADER:
        raise TrackingReadError(
            f"tracking store {path} is not an SQLite database (it does not begin with SQLite's "
            f"header); {remedy}"
        )
    try:
        found = _sqlite_contents(path)
    except sqlite3.Error as exc:
        raise sqlite_failure(path, exc, remedy) from None
    check_schema(str(path), f"sqlite:///{path}", found, remedy, schema, new_ok)


def check_store_to_write(uri: str, remedy: str = WRITE_REMEDY) -> None:
    """Refuse, before a run writes into it, an SQLite store that check_sqlite refuses (damaged,
    not SQLite, another program's database, another MLflow schema revision: TrackingReadError
    ending with `remedy`). A file not there yet, or empty, passes (the run makes the store), and
    so does one only locked now (the tracker rides out an outage); other stores are not asked
    here (a server's outage is buffered, not a reason to stop a run)."""
    path = sqlite_file(uri)
    if path is None or not (path.exists() or path.is_symlink()):
        return
    with store_lock(path):  # a store that another run is making: looked at once it is made
        try:
            check_sqlite(path, remedy, new_ok=True)
        except StoreDownError:
            return


def _sqlite_contents(path: Path) -> tuple[set[str], str | None]:
    """(tables, alembic revision) of an SQLite file, opened read-only (never created)."""
    con = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT name FROM sqlite_master WHERE type='table'")
        tables = {row[0] for row in rows}
        if "alembic_version" not in tables:
            return tables, None
        version = con.execute("SELECT version_num FROM alembic_version").fetchone()
        return tables, version[0] if version else None
    finally:
        con.close()


def installed_mlflow() -> str:
    """The installed MLflow's version, whether the full package or mlflow-skinny provides it."""
    for name in ("mlflow", "mlflow-skinny"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "(version unknown)"


def check_schema(name: str, uri: str, found: tuple[set[str], str | None], remedy: str,
                 schema: bool = True, new_ok: bool = False) -> None:  # fmt: skip
    """Refuse a database whose (tables, alembic revision) `found` lack MLflow's tables or, with
    `schema`, are at another MLflow schema revision than the installed MLflow's (MLflow would
    create or upgrade them: write); `uri` is shown in the upgrade command. With `new_ok` a
    database without a table passes (MLflow makes its store there)."""
    tables, version = found
    if not tables and new_ok:
        return
    if not tables:
        raise TrackingReadError(
            f"tracking store {name} is an empty database, not an MLflow store; {remedy}"
        )
    missing = sorted(MLFLOW_TABLES - tables)
    if missing:
        raise TrackingReadError(
            f"tracking store {name} is a database but not an MLflow store (no "
            f"{', '.join(missing)} table); {remedy}"
        )
    if not schema:
        return
    head, known = schema_revisions()
    if version == head:
        return
    mlflow = f"MLflow {installed_mlflow()}"
    if version in known:
        upgrade = script_command("mlflow", ["db", "upgrade", uri])
        raise TrackingReadError(
            f"tracking store {name} has the older MLflow schema {version} ({mlflow} here reads "
            f"{head}): back it up, then run `{upgrade}`, or read it with the MLflow that wrote it"
        )
    raise TrackingReadError(
        f"tracking store {name} has MLflow schema {version}, unknown to {mlflow} here (a newer "
        "MLflow wrote it): read it with the MLflow version that wrote it"
    )


@functools.cache
def schema_revisions() -> tuple[str, frozenset[str]]:
    """(the head, every revision) of the installed MLflow's database migrations."""
    mlflow_client_class()  # mlflow first: its logging setup quiets alembic's INFO lines
    from alembic.script import ScriptDirectory
    from mlflow.store.db.utils import _get_alembic_config  # what MLflow's own check reads

    script = ScriptDirectory.from_config(_get_alembic_config(""))
    return script.get_current_head(), frozenset(r.revision for r in script.walk_revisions())


def _check_database(uri: str, remedy: str) -> None:
    """One connection to a database server (bounded by MLFLOW_HTTP_REQUEST_TIMEOUT where the
    driver takes a timeout): it must answer and hold MLflow's tables at the head revision."""
    import sqlalchemy

    dialect = uri.split(":", 1)[0].split("+", 1)[0].lower()
    timeout = os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT")
    args = {CONNECT_TIMEOUT_ARG[dialect]: int(timeout)} if timeout and dialect in (
        CONNECT_TIMEOUT_ARG) else {}  # fmt: skip
    try:
        engine = sqlalchemy.create_engine(uri, poolclass=sqlalchemy.pool.NullPool,
                                          connect_args=args)  # fmt: skip
        try:
            with engine.connect() as con:
                tables = set(sqlalchemy.inspect(con).get_table_names())
                version = None
                if "alembic_version" in tables:
                    query = sqlalchemy.text("SELECT version_num FROM alembic_version")
                    version = con.execute(query).scalar()
        finally:
            engine.dispose()
    except Exception as exc:  # the store boundary: whatever the driver raises
        raise failure(uri, "connect to it", exc, remedy) from None
    check_schema(store_name(uri), hide_password(uri), (tables, version), remedy)


def failure(uri: str, what: str, exc: BaseException, remedy: str) -> TrackingReadError:
    """The one-line error for a request to the store at `uri` that raised `exc` (`remedy`: what
    to do where another store is the way out)."""
    name = store_name(uri)
    chain = _chain(exc)
    found = next((e for e in chain if isinstance(e, sqlite3.Error)), None)
    if found is not None and sqlite_file(uri) is not None:
        return sqlite_failure(sqlite_file(uri), found, remedy)
    code = getattr(exc, "error_code", None)
    if code == "RESOURCE_DOES_NOT_EXIST":
        return NotInStoreError(f"tracking store {name}: cannot {what}: {first_line(exc)}; "
                               f"{remedy}")  # fmt: skip
    http = uri.lower().startswith("http")
    server = "tracking server" if http else "database server"
    gone = next((e for e in chain if _GONE.search(str(e))), None)
    if gone is not None and not http:  # the server answered: the database or role is not there
        return NoStoreError(f"{server} {name} has no such database or role "
                            f"({_GONE.search(str(gone))[0]}): create it (createdb, createuser) "
                            f"or fix the address; {remedy}")  # fmt: skip
    if code in REFUSED_CODES or "authentication failed" in str(exc):
        account = "MLFLOW_TRACKING_USERNAME and _PASSWORD" if http else "PGPASSWORD or ~/.pgpass"
        return TrackingReadError(
            f"{server} {name} refused the request to {what} ({code or first_line(exc)}): set "
            f"{account} to an account that may read it"
        )
    if code == "TEMPORARILY_UNAVAILABLE" or any(_no_answer(e) for e in chain):
        start = "start it (make tracking-server)" if http else "start it"
        return StoreDownError(
            f"{server} {name} does not answer ({_reason(chain)}): {start} or check the "
            "address; trying again later may help"
        )
    return TrackingReadError(f"tracking store {name}: cannot {what}: {first_line(exc)}; "
                             f"{remedy}")  # fmt: skip


# what a database server says when it answered and the database or the role does not exist, or
# no rule of its lets this client in: no retry helps
_GONE = re.compile(r'(database|role) "[^"]*" does not exist|no pg_hba\.conf entry[^,;]*')


def sqlite_failure(path: Path, exc: sqlite3.Error, remedy: str) -> TrackingReadError:
    """The one-line error for what SQLite raised about the store file at `path`."""
    text = first_line(exc)
    low = text.lower()
    if "not a database" in low:
        return TrackingReadError(f"tracking store {path} is not an SQLite database ({text}); "
                                 f"{remedy}")  # fmt: skip
    if "malformed" in low or "corrupt" in low:
        return TrackingReadError(
            f"tracking store {path} is damaged (SQLite: {text}): restore it from a backup or "
            f"copy it again (`sqlite3 {path} .recover` saves what is left)"
        )
    if "locked" in low or "busy" in low:
        return StoreDownError(f"tracking store {path} is locked by another process ({text}): "
                              "try again when its writer is done")  # fmt: skip
    if "readonly" in low or "unable to open" in low:
        return _no_access(str(path), exc)
    return TrackingReadError(f"tracking store {path} cannot be read (SQLite: {text}); {remedy}")


def _read_head(path: Path) -> bytes:
    with path.open("rb") as f:
        return f.read(len(SQLITE_HEADER))


def _no_access(name: str, exc: BaseException) -> TrackingReadError:
    return TrackingReadError(
        f"tracking store {name} cannot be opened ({first_line(exc)}): give yourself read and "
        "write access to the file and its folder (or work on a copy)"
    )


def _chain(exc: BaseException) -> list[BaseException]:
    """exc and every exception it was raised from or while handling, outermost first."""
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def _no_answer(exc: BaseException) -> bool:
    """True for a connection that failed or timed out (an HTTP server or a database server)."""
    names = {c.__name__ for c in type(exc).__mro__}
    if names & {"ConnectionError", "Timeout", "TimeoutError", "ConnectTimeout"}:
        return True
    text = str(exc)
    return ("OperationalError" in names and "connection" in text.lower()) or (
        "failed with exception" in text and "Max retries exceeded" in text
    )


def _reason(chain: list[BaseException]) -> str:
    """Why a connection failed, in a few words (`Connection refused`, `timed out`)."""
    for exc in chain:
        found = _ERRNO.search(str(exc))
        if found:
            return found[1].strip()
    text = " ".join(str(e) for e in chain).lower()
    for words in ("connection refused", "timed out", "name or service not known"):
        if words in text:
            return words
    return first_line(chain[-1])


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text, its passwords masked (SQLAlchemy puts the SQL
    and a link on the lines after it)."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return hide_password(re.sub(r"^\([\w.]+\) ", "", line))
