"""What `python -m alpha_rl.tracking server` lets through to `mlflow server`, and how it keeps
the accounts' state private.

The launcher decides where the server listens (--host, --port), its app (basic-auth with
--auth), its store and its artifacts, after its checks. Two channels could undo them:

- Options after `--`. Only an allow-list is passed on (ACCEPTED), each parsed as click parses
  a value option: `--opt value` or `--opt=value`. Everything else is refused whatever its
  spelling: `-h X`, `-hX`, `-h=X`, `--host=X`, an abbreviation such as `--ho`, combined short
  options, `--gunicorn-opts` / `--uvicorn-opts` / `--waitress-opts` with any contents, `--dev`,
  `--disable-security-middleware`, a stray word. A CORS origin with a `*` or `null`, and an
  allowed host pattern that admits hosts nobody named (`*`, `*.com`, `10.*`, a `?` or `[...]`:
  the only glob taken is one leading `*.` before two fixed labels), are refused too.
- The environment. click reads MLFLOW_HOST, MLFLOW_PORT, MLFLOW_UVICORN_OPTS, ... for options
  missing from the command line; the workers read MLFLOW_SERVER_* (the security middleware),
  MLFLOW_BASIC_AUTH_FAIL_CLOSED and MLFLOW_SERVER_ENABLE_GRAPHQL_AUTH (what basic-auth lets
  through) and MLFLOW_AUTH_CONFIG_PATH; uvicorn reads every UVICORN_* (UVICORN_FD and
  UVICORN_UDS bind elsewhere, UVICORN_ENV_FILE loads more variables into the workers); uvicorn
  and gunicorn read FORWARDED_ALLOW_IPS (the peers whose X-Forwarded-For is taken for the
  client's address, which MLflow's same-host checks read); gunicorn reads GUNICORN_CMD_ARGS;
  and every variable click reads for any `mlflow server` option
  (MLFLOW_STATIC_PREFIX would move every route under a prefix that basic-auth takes for a
  public path; mlflow_server_envvars lists them from the installed MLflow), and MLflow's internal
  _MLFLOW_* switches. Such a variable is refused (exit 2, naming it), not dropped from the
  server's environment: whoever exported it expects it to act, and a server that ignores it
  behaves otherwise than its environment says, with at most a warning line lost in a job log.
  Some have no effect today because the launcher passes the option on the command line
  (MLFLOW_HOST, MLFLOW_PORT); they are refused all the same, so that whether the environment
  speaks for the bind address never depends on an MLflow release.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path

from alpha_rl.errors import AlphaRlError
from alpha_rl.masking import hide_password

log = logging.getLogger(__name__)


class ServerError(AlphaRlError):
    """The server cannot be started as asked (the message names the flag and what to do)."""


GLOB = frozenset("*?[]")  # the characters fnmatch reads as patterns


def too_wide(value: str) -> str | None:
    """The first comma-separated Host pattern of `value` (--allowed-hosts) that admits hosts
    nobody named, None when each names hosts. MLflow matches a pattern holding a `*` with
    fnmatch, where `*` takes any text (dots included: `10.*` lets in 10.rebind.example) and `?`,
    `[...]` any character: the only glob taken is one leading `*.` before at least two fixed
    labels (`*.lab.example.org`, `*.lab.example.org:5000`); `[` and `]` only around an IPv6
    address (`[::1]:5000`), which MLflow compares as written."""
    for pattern in (p.strip() for p in value.split(",")):
        if not _named(pattern):
            return pattern
    return None


def _named(pattern: str) -> bool:
    if pattern.startswith("["):  # an IPv6 address, with a port or not
        address, _, port = pattern[1:].partition("]")
        return _ipv6(address) and (not port or (port[0] == ":" and port[1:].isdigit()))
    host, port = pattern.split(":") if pattern.count(":") == 1 else (pattern, "")
    wildcard = host.startswith("*.")
    fixed = host[2:] if wildcard else host
    if GLOB & set(fixed + port):
        return False
    return not wildcard or len([label for label in fixed.split(".") if label]) >= 2


def _ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def bind_host(host: str) -> str:
    """--host as uvicorn binds it: an IPv6 address written as in a URL (`[::1]`) without its
    brackets; brackets around anything else refused (ServerError naming it)."""
    if not (host.startswith("[") or host.endswith("]")):
        return host
    if not (host.startswith("[") and host.endswith("]") and _ipv6(host[1:-1])):
        raise ServerError(f"--host {host}: brackets hold an IPv6 address ([::1]); give the "
                          "address or the name without them")  # fmt: skip
    return host[1:-1]


def _origins(value: str) -> str | None:
    """Origins are named one by one: a `*` would admit websites nobody named, and `null` every
    sandboxed page (its requests carry Origin: null)."""
    for origin in (o.strip() for o in value.split(",")):
        if "*" in origin:
            return f"{origin!r} lets websites nobody named send requests; name the origins"
        if origin.lower() == "null":
            return "'null' lets any sandboxed page send requests; name the origins"
    return None


def _frame_options(value: str) -> str | None:
    ok = value.upper() in ("SAMEORIGIN", "DENY")
    return None if ok else "only SAMEORIGIN or DENY (NONE would drop the clickjacking header)"


def _integer(value: str) -> str | None:
    return None if value.isascii() and value.isdigit() else "expected a whole number"


# `mlflow server` options passed on from after `--`, each with the check of its value (the
# reason a value is refused, None when it is accepted); none of them reaches the bind address,
# the port, the app, the store or the security middleware beyond what the check allows.
# Left out, among others: --static-prefix (the basic-auth app matches its public routes on
# paths with the prefix taken off), --expose-prometheus (a /metrics endpoint), store options.
ACCEPTED: dict[str, Callable[[str], str | None]] = {
    "--cors-allowed-origins": _origins,
    "--x-frame-options": _frame_options,
    "--secrets-cache-ttl": _integer,  # seconds, mlflow checks 10..300
    "--secrets-cache-max-size": _integer,  # entries, mlflow checks 1..10000
}
# refused options that have a flag of the launcher's own
OWN_FLAG = {"-h": "--host", "--host": "--host", "-p": "--port", "--port": "--port",
            "-w": "--workers", "--workers": "--workers", "--allowed-hosts": "--allowed-hosts",
            "--app-name": "--auth", "--backend-store-uri": "--db",
            "--artifacts-destination": "--artifacts"}  # fmt: skip


def _refused(token: str, why: str) -> ServerError:
    return ServerError(f"after --: {hide_password(token)}: {why}")


def _not_passed_on(token: str, own: str | None) -> ServerError:
    accepted = ", ".join(sorted(ACCEPTED))
    why = (f"this command sets it itself, use its own {own}" if own else
           "not passed on to mlflow server")  # fmt: skip
    return _refused(token, f"{why}; accepted after -- are only {accepted} (--opt VALUE or "
                    "--opt=VALUE)")  # fmt: skip


def check_mlflow_args(args: list[str]) -> None:
    """Refuse any option after `--` but those of ACCEPTED, parsed exactly, with values their
    check accepts (the message names the option as given)."""
    i = 0
    while i < len(args):
        token = args[i]
        name, eq, value = token.partition("=") if token.startswith("--") else (token, "", "")
        check = ACCEPTED.get(name)
        if check is None:
            raise _not_passed_on(token, OWN_FLAG.get(name if token.startswith("--") else token[:2]))
        if not eq:
            if i + 1 == len(args):
                raise _refused(token, "needs a value")
            i += 1
            value = args[i]
        if value.startswith("-") or value == "":
            raise _refused(f"{name} {value}".strip(), "needs a value (one not starting with -)")
        reason = check(value)
        if reason:
            raise _refused(f"{name} {value}", reason)
        i += 1


# variables that could move the server's address or port, or loosen its auth or its security
# middleware (the module docstring says where each is read), with what to use instead
REFUSED_ENV = {"MLFLOW_HOST": "--host", "MLFLOW_PORT": "--port", "MLFLOW_GUNICORN_OPTS": "",
               "MLFLOW_UVICORN_OPTS": "", "MLFLOW_SERVER_ALLOWED_HOSTS": "--allowed-hosts",
               "MLFLOW_SERVER_CORS_ALLOWED_ORIGINS": "-- --cors-allowed-origins",
               "MLFLOW_SERVER_DISABLE_SECURITY_MIDDLEWARE": "",
               "MLFLOW_SERVER_X_FRAME_OPTIONS": "-- --x-frame-options",
               "MLFLOW_BASIC_AUTH_FAIL_CLOSED": "", "MLFLOW_SERVER_ENABLE_GRAPHQL_AUTH": "",
               "MLFLOW_AUTH_CONFIG_PATH": "--auth", "GUNICORN_CMD_ARGS": ""}  # fmt: skip
REFUSED_ENV_PREFIX = "UVICORN_"
# variables that would widen whose X-Forwarded-For the server believes, which makes a request's
# client address what the request says (uvicorn's and gunicorn's FORWARDED_ALLOW_IPS; uvicorn's
# click options, refused as UVICORN_* anyway); the launcher passes uvicorn --proxy-headers
# --forwarded-allow-ips=127.0.0.1,::1 itself (UVICORN_OPTS in alpha_rl.tracking.server)
PROXY_TRUST_ENV = frozenset({"FORWARDED_ALLOW_IPS", "UVICORN_FORWARDED_ALLOW_IPS",
                             "UVICORN_PROXY_HEADERS"})  # fmt: skip


INTERNAL_ENV_PREFIX = "_MLFLOW_"  # MLflow's internal switches (the server's boot id, ...)
# what MLflow's own telemetry writes into the environment of a process that imported it (a
# session id): inherited by a server started from there, and no switch of the server's
INTERNAL_HARMLESS = frozenset({"_MLFLOW_TELEMETRY_SESSION_ID"})


def mlflow_server_envvars() -> frozenset[str]:
    """Every variable click reads for an option of `mlflow server` (MLFLOW_STATIC_PREFIX,
    MLFLOW_EXPOSE_PROMETHEUS, MLFLOW_ARTIFACTS_ONLY, ...), from the installed MLflow itself, so a
    release that adds one is covered: the launcher sets the options it needs on the command
    line, and none of the others may reach the server from the environment either."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.cli import server

    names: set[str] = set()
    for param in server.params:
        envvar = getattr(param, "envvar", None)
        names |= {envvar} if isinstance(envvar, str) else set(envvar or ())
    return frozenset(names)


def check_environment(env: dict[str, str]) -> None:
    """Refuse an environment holding a variable of REFUSED_ENV, PROXY_TRUST_ENV, UVICORN_* or
    _MLFLOW_*, or one that `mlflow server` reads for an option (set, even empty)."""
    click = mlflow_server_envvars()
    names = sorted(n for n in env if n not in INTERNAL_HARMLESS and (
        n in REFUSED_ENV or n in click or n in PROXY_TRUST_ENV
        or n.startswith((REFUSED_ENV_PREFIX, INTERNAL_ENV_PREFIX))))  # fmt: skip
    if not names:
        return
    what = []
    if any(n not in PROXY_TRUST_ENV for n in names):
        what.append("where the server listens, its auth or its security middleware")
    if any(n in PROXY_TRUST_ENV for n in names):
        what.append("whose X-Forwarded-For it believes (the client address MLflow's same-host "
                    "checks read: it believes this machine's loopback only, a reverse proxy "
                    "here)")  # fmt: skip
    instead = sorted({REFUSED_ENV.get(n, "") for n in names} - {""})
    use = f" (this command's {', '.join(instead)} instead)" if instead else ""
    them = "it" if len(names) == 1 else "them"
    raise ServerError(f"{', '.join(names)} set in the environment: could change "
                      f"{' and '.join(what)}, which this command decides itself; "
                      f"unset {them}{use}")  # fmt: skip


def private_directory(path: Path, flag: str) -> None:
    """Make the directory `path` with mode 700, or refuse an existing one that others can enter
    (it may be a directory shared on purpose: it is not chmod-ed behind its owner's back)."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError as exc:
        raise ServerError(f"{flag} {path}: cannot make it ({exc.strerror})") from exc
    if mode & 0o077:
        raise ServerError(f"{flag} {path}: others can enter it (mode {mode:o}), and it holds the "
                          f"accounts' password hashes; chmod 700 {path}, or name a directory "
                          "of its own")  # fmt: skip


def private_file(path: Path, flag: str) -> None:
    """Create `path` empty with mode 600 before anything opens it (SQLite takes an empty file for
    a new database, and gives its journal the file's mode), or tighten an existing one of this
    user's to 600 with a warning: the launcher made it, an older one with the umask's 644."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    except OSError as exc:
        raise ServerError(f"{flag} {path}: cannot create it ({exc.strerror})") from exc
    else:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.close(fd)
        return
    info = path.stat()
    mode = stat.S_IMODE(info.st_mode)
    if not mode & 0o077:
        return
    if info.st_uid != os.geteuid():
        raise ServerError(f"{flag} {path}: others can read it (mode {mode:o}) and it belongs to "
                          f"uid {info.st_uid}; its owner should chmod 600 {path}")  # fmt: skip
    os.chmod(path, mode & 0o700)
    log.warning("%s %s: others could read it (mode %o); now %o", flag, path, mode, mode & 0o700)
