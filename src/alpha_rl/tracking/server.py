"""`python -m alpha_rl.tracking server`: an MLflow tracking server over a database, for many jobs.

SQLite is the embedded store of one machine. A lab whose jobs run on many nodes points them at
one server (`tracking=server`, `MLFLOW_TRACKING_URI=http://<host>:<port>`) whose store is a
database server: PostgreSQL (`--db postgresql://user@dbhost/mlflow`), which takes many writers at
once where SQLite takes one. Artifacts are proxied by the server into `--artifacts`.

Nobody gets in who does not belong: a server bound beyond loopback must run MLflow's basic-auth
app (`--auth`), refused otherwise. The admin account is created on the first start from
`--credentials FILE` (one line `username:password`, readable by its owner only) or from
MLFLOW_AUTH_ADMIN_USERNAME / MLFLOW_AUTH_ADMIN_PASSWORD, the accounts kept in `--state-dir`
(`./mlflow_server`, mode 700; the accounts' database basic_auth.db mode 600) with the app's
settings and signing key; jobs then authenticate with MLFLOW_TRACKING_USERNAME /
MLFLOW_TRACKING_PASSWORD in their environment. Credentials never go on the command line of
`mlflow server`, into the repository or into a run.

The command decides where the server listens: options after `--` pass only from an allow-list,
and environment variables that could move the address or loosen auth are refused
(alpha_rl.tracking.server_checks). It checks what it can before it starts `mlflow server` as a
child: the database is reachable, the flags agree. Then it watches that the server listens where
announced and nowhere else (alpha_rl.tracking.server_watch). uvicorn takes a client's address
from X-Forwarded-For only when a reverse proxy on this machine sent it. Exit 2 with one line
naming the flag, the option or the variable on bad input. Ctrl-C, SIGTERM or SIGHUP ends every
process of the server with one line, exit 128 + the signal's number (130, 143, 129); a server
that ends without being stopped (one that cannot bind, say) fails the command, exit 1. Once the
server answers an HTTP request, the command says so and prints the UI's links
(alpha_rl.tracking.server_answer); until then a line every 10 s says it is waiting. `--log FILE`
sends the server's own output to FILE.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import stat
import sys
from pathlib import Path

from alpha_rl.masking import hide_password, uri_has_password
from alpha_rl.tracking.config import is_loopback, store_of
from alpha_rl.tracking.mounts import network_filesystem
from alpha_rl.tracking.server_answer import StartWatch, ui_links
from alpha_rl.tracking.server_checks import (
    ServerError,
    bind_host,
    check_environment,
    check_mlflow_args,
    private_directory,
    private_file,
    too_wide,
)
from alpha_rl.tracking.server_watch import Announced, run_watched, stopped
from alpha_rl.tracking.store import sqlite_file

ADMIN_USER_ENV, ADMIN_PASSWORD_ENV = "MLFLOW_AUTH_ADMIN_USERNAME", "MLFLOW_AUTH_ADMIN_PASSWORD"
AUTH_CONFIG_ENV = "MLFLOW_AUTH_CONFIG_PATH"
JOBS_ENV = "MLFLOW_SERVER_ENABLE_JOB_EXECUTION"
SECRET_KEY_ENV, SECRET_KEY_FILE = "MLFLOW_FLASK_SERVER_SECRET_KEY", "server_secret_key"
PERMISSIONS = ("READ", "EDIT", "MANAGE", "NO_PERMISSIONS")
# uvicorn takes a request's client address from X-Forwarded-For when the request comes from a
# reverse proxy on this machine (its default, written out here), never from elsewhere: MLflow's
# same-host checks (its assistant's endpoints) read that address
UVICORN_OPTS = "--proxy-headers --forwarded-allow-ips=127.0.0.1,::1"
AUTH_FILE, AUTH_DB = "basic_auth.ini", "basic_auth.db"


def read_credentials(path: Path | None, env: dict[str, str]) -> tuple[str, str] | None:
    """The admin's (username, password): from `path` (one line username:password, no group or
    other access), else from MLFLOW_AUTH_ADMIN_USERNAME / _PASSWORD; None when neither is given."""
    if path is None:
        user, password = env.get(ADMIN_USER_ENV, ""), env.get(ADMIN_PASSWORD_ENV, "")
        if not user and not password:
            return None
        if not (user and password):
            raise ServerError(f"set both {ADMIN_USER_ENV} and {ADMIN_PASSWORD_ENV}, or neither")
        return user, password
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ServerError(f"--credentials {path}: cannot read it ({exc})") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ServerError(f"--credentials {path}: others can read it (mode "
                          f"{stat.S_IMODE(mode):o}); chmod 600 {path}")  # fmt: skip
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    user, sep, password = (lines[0] if lines else "").partition(":")
    if len(lines) != 1 or not sep or not user or not password:
        raise ServerError(f"--credentials {path}: expected one line username:password")
    return user, password


def check_database(db: str, flag: str = "--db") -> None:
    """Refuse a database URI that is not one, holds a password, is an SQLite file on a network
    file system, or cannot be connected to (messages hide the URI's password)."""
    shown = hide_password(db)
    if store_of(db) != "database":
        raise ServerError(f"{flag} {shown}: not a database URI; give postgresql://user@host/db "
                          "(or sqlite:///<file> for one machine)")  # fmt: skip
    if uri_has_password(db):
        raise ServerError(f"{flag} {shown}: holds a password, which `ps` would show to every "
                          "user of this machine; put it in PGPASSWORD or ~/.pgpass")  # fmt: skip
    path = sqlite_file(db)
    if path is not None:
        fs = network_filesystem(path.parent)
        if fs:
            raise ServerError(f"{flag} {shown}: an SQLite file on a network file system "
                              f"({fs}), whose file locks do not hold; use PostgreSQL or a "
                              "local disk")  # fmt: skip
        return
    import sqlalchemy  # MLflow's own dependency

    try:
        engine = sqlalchemy.create_engine(db, connect_args=_connect_timeout(db))
    except ModuleNotFoundError as exc:  # the dialect imports its driver here
        extra = " (pip install 'alpha_rl[server]')" if db.startswith("postgresql") else ""
        raise ServerError(f"{flag} {shown}: its driver {exc.name} is not installed{extra}") from exc
    except (sqlalchemy.exc.ArgumentError, sqlalchemy.exc.NoSuchModuleError) as exc:
        raise ServerError(f"{flag} {shown}: SQLAlchemy cannot read it ({exc})") from exc
    try:
        with engine.connect():
            pass
    except Exception as exc:  # any driver's connection error
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ServerError(f"{flag} {shown}: cannot connect ({hide_password(first)}); check the "
                          "host, the database (createdb) and the password (PGPASSWORD or "
                          "~/.pgpass)") from exc  # fmt: skip
    finally:
        engine.dispose()


def _connect_timeout(db: str) -> dict[str, int]:
    return {"connect_timeout": 10} if db.startswith("postgresql") else {}


def write_auth_config(directory: Path, auth_db: str, default_permission: str) -> Path:
    """basic_auth.ini for MLflow's basic-auth app in `directory` (no credential in it; mode 600
    all the same: it says how requests are authorised)."""
    path = directory / AUTH_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(
            "[mlflow]\n"
            f"default_permission = {default_permission}\n"
            f"database_uri = {auth_db.replace('%', '%%')}\n"  # configparser interpolates %
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        )
    return path


def server_secret_key(directory: Path) -> str:
    """The key the basic-auth app signs its CSRF tokens with: made once, kept (mode 600) in
    `directory` so that a restarted server accepts what the last one signed."""
    path = directory / SECRET_KEY_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # made by an earlier start (or one starting beside this one)
        pass
    else:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return path.read_text().strip()


def plan(args: argparse.Namespace, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """The `mlflow server` command line and its environment, after every check."""
    if not 1 <= args.port <= 65535:
        raise ServerError(f"--port {args.port}: must be in 1..65535")
    if args.workers < 1:
        raise ServerError(f"--workers {args.workers}: must be >= 1")
    host = bind_host(args.host)
    if not (args.auth or is_loopback(host)):
        raise ServerError(
            f"--host {args.host} reaches beyond this machine: add --auth (MLflow's basic-auth "
            "app) with --credentials FILE or MLFLOW_AUTH_ADMIN_USERNAME / _PASSWORD, or serve "
            "on 127.0.0.1"
        )
    if args.allowed_hosts and (wide := too_wide(args.allowed_hosts)):
        raise ServerError(f"--allowed-hosts {args.allowed_hosts}: {wide!r} lets in Host "
                          "headers nobody named (MLflow matches it as a glob); name each host, "
                          "a wildcard only as one leading '*.' before two fixed labels or more "
                          "(*.lab.example.org)")  # fmt: skip
    check_mlflow_args(args.mlflow_args)
    check_environment(env)
    check_database(args.db)
    artifacts = Path(args.artifacts).expanduser().resolve()
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", args.db,
               "--artifacts-destination", str(artifacts), "--host", host,
               "--port", str(args.port), "--workers", str(args.workers),
               "--uvicorn-opts", UVICORN_OPTS]  # fmt: skip
    # MLflow's GenAI job runner (a pool of worker processes for scorers and evaluation jobs):
    # nothing of alpha_rl uses it, and on a small machine it takes the CPU from the requests
    env = {"MLFLOW_DISABLE_TELEMETRY": "true", JOBS_ENV: "false", **env}
    if args.auth:
        env |= auth_state(args, env)
        command += ["--app-name", "basic-auth"]
    if args.allowed_hosts:
        command += ["--allowed-hosts", args.allowed_hosts]
    return command + list(args.mlflow_args), env


def auth_state(args: argparse.Namespace, env: dict[str, str]) -> dict[str, str]:
    """The basic-auth app's variables, after its state is made private: --state-dir mode 700
    (refused when others can enter it), an SQLite accounts' database created mode 600 before
    MLflow opens it (an existing one of this user's tightened to 600), in a directory only this
    user can enter (another could plant a journal that SQLite would replay into it)."""
    credentials = read_credentials(args.credentials, env)
    if credentials is None:
        raise ServerError("--auth needs the admin's credentials: --credentials FILE (one line "
                          f"username:password, chmod 600) or {ADMIN_USER_ENV} and "
                          f"{ADMIN_PASSWORD_ENV}")  # fmt: skip
    state = Path(args.state_dir).expanduser().resolve()
    private_directory(state, "--state-dir")
    auth_db = args.auth_db or f"sqlite:///{state / AUTH_DB}"
    check_database(auth_db, "--auth-db")
    if (path := sqlite_file(auth_db)) is not None:
        flag = "--auth-db" if args.auth_db else "--state-dir"
        private_directory(path.parent, flag)  # SQLite's journal beside it: nobody else's to plant
        private_file(path, flag)
    config = write_auth_config(state, auth_db, args.default_permission)
    found = {AUTH_CONFIG_ENV: str(config), ADMIN_USER_ENV: credentials[0],
             ADMIN_PASSWORD_ENV: credentials[1]}  # fmt: skip
    if SECRET_KEY_ENV not in env:
        found[SECRET_KEY_ENV] = server_secret_key(state)
    return found


def add_parser(commands: argparse._SubParsersAction) -> None:
    """The `server` subcommand of `python -m alpha_rl.tracking`."""
    p = commands.add_parser(
        "server",
        help="start an MLflow tracking server over a database (PostgreSQL for many jobs)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--db", default=os.environ.get("ALPHA_RL_TRACKING_DB"),
                   help="the backend store: postgresql://user@host:5432/mlflow (its password in "
                   "PGPASSWORD or ~/.pgpass, not here) or sqlite:///<file> (default: "
                   "$ALPHA_RL_TRACKING_DB)")  # fmt: skip
    p.add_argument(
        "--artifacts",
        default="mlartifacts",
        help="where the server keeps run artifacts (default ./mlartifacts)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address to serve on (default 127.0.0.1; [::1] or ::1 for IPv6 loopback; "
        "beyond loopback needs --auth)",
    )
    p.add_argument("--port", type=int, default=5000, help="the port (default 5000)")
    p.add_argument("--workers", type=int, default=4, help="server processes (default 4)")
    p.add_argument("--auth", action="store_true", help="MLflow's basic-auth app: every request "
                   "needs an account (required beyond loopback)")  # fmt: skip
    p.add_argument(
        "--credentials",
        type=Path,
        metavar="FILE",
        help="the admin account created on the first start, one line "
        "username:password (chmod 600); else MLFLOW_AUTH_ADMIN_USERNAME / _PASSWORD",
    )
    p.add_argument("--state-dir", default="mlflow_server", metavar="DIR",
                   help="with --auth: the accounts' database, the auth app's settings and its "
                   "signing key (default ./mlflow_server, on a local disk)")  # fmt: skip
    p.add_argument(
        "--auth-db",
        metavar="URI",
        help="the accounts' database (default sqlite:///<state dir>/basic_auth.db)",
    )
    p.add_argument(
        "--default-permission",
        default="EDIT",
        choices=PERMISSIONS,
        help="what an account may do in experiments others created (default EDIT: "
        "every account of the lab can log runs into the shared experiment)",
    )
    p.add_argument("--log", type=Path, metavar="FILE", help="append the server's own output to "
                   "FILE instead of this terminal, which then shows only when it answers and "
                   "where (make ui: mlflow_server.log beside the store)")  # fmt: skip
    p.add_argument("--allowed-hosts", help="Host headers the server answers (MLflow's default: "
                   "localhost and private addresses); set it for a public name")  # fmt: skip
    p.add_argument(
        "mlflow_args",
        nargs=argparse.REMAINDER,
        help="after --: more `mlflow server` options, from an allow-list: --cors-allowed-origins, "
        "--x-frame-options, --secrets-cache-ttl, --secrets-cache-max-size",
    )


def serve(args: argparse.Namespace) -> int:
    """Check everything, then run `mlflow server` watched (alpha_rl.tracking.server_watch): 2 on
    a refused start or a listener where none was announced, 128 + the signal's number on a stop
    (130 for Ctrl-C, while it checks too), else the server's exit status (1 for 0: a server
    ends only when stopped)."""
    if args.mlflow_args[:1] == ["--"]:
        args.mlflow_args = args.mlflow_args[1:]
    if not args.db:
        print("error: --db is required (or set ALPHA_RL_TRACKING_DB)", file=sys.stderr)
        return 2
    try:
        command, env = plan(args, dict(os.environ))
        announced = _announced(bind_host(args.host), args.port)
        output = _output(args.log)
    except ServerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C while it checks (MLflow's imports, the database)
        return stopped(signal.SIGINT)
    auth = " with basic-auth" if args.auth else ""
    print(f"starting the MLflow tracking server{auth} on {announced} over "
          f"{hide_password(args.db)}; jobs: tracking=server "
          f"MLFLOW_TRACKING_URI=http://<this host>:{args.port}", flush=True)  # fmt: skip
    if output is not None:
        print(f"its output: {output}", flush=True)
    url, ui = _addresses(announced)
    credentials = (env[ADMIN_USER_ENV], env[ADMIN_PASSWORD_ENV]) if args.auth else None

    def answered(seconds: float) -> None:
        print(f"the server answers on {ui} after {seconds:.0f} s; in the UI:", flush=True)
        for line in ui_links(url, ui, credentials):
            print(f"  {line}")
        print("MLflow opens its assistant panel on a first visit to a server on this machine: "
              "close it (its x) once and the browser remembers. Ctrl-C stops the server.",
              flush=True)  # fmt: skip

    start = StartWatch(url, answered, output)
    return run_watched(command, env, announced, output=output, start=start)


def _output(path: Path | None) -> Path | None:
    """--log's file, made absolute, checked writable (ServerError naming it otherwise)."""
    if path is None:
        return None
    path = path.expanduser().resolve()
    try:
        with open(path, "ab"):
            pass
    except OSError as exc:
        raise ServerError(f"--log {path}: cannot write it ({exc.strerror or exc})") from exc
    return path


def _addresses(announced: Announced) -> tuple[str, str]:
    """(where this machine asks the server, where a browser finds its UI): an unspecified
    address (0.0.0.0, ::) is asked on loopback and named by this machine's name."""
    if not all(a.is_unspecified for a in announced.addresses):
        return str(announced), str(announced)
    loopback = "[::1]" if ":" in announced.host else "127.0.0.1"
    return f"http://{loopback}:{announced.port}", f"http://{socket.gethostname()}:{announced.port}"


def _announced(host: str, port: int) -> Announced:
    try:
        return Announced.resolve(host, port)
    except (socket.gaierror, UnicodeError) as exc:
        raise ServerError(f"--host {host}: cannot resolve it ({exc}); give an address or a "
                          "name this machine resolves") from exc  # fmt: skip
