"""`make dashboard` (`python -m alpha_rl.search.dashboard [STORAGE]`): optuna-dashboard on a
search's study storage, served on 127.0.0.1 until Ctrl-C.

STORAGE is a journal file (the default: optuna.journal, where a search beside ./mlflow.db keeps
its studies), `journal://<path>` or an RDB's URL, as the search's parent run records it in its
`search.storage` tag. The dashboard reads while searches write: each trial's intermediate values
(a seed and fold each), its state (a pruned trial is PRUNED), the history and the importances.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from alpha_rl.errors import AlphaRlError
from alpha_rl.masking import hide_password
from alpha_rl.search.storage import JOURNAL, JOURNAL_FILE, existing_storage
from alpha_rl.tracking.stores import first_line


class ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a page's requests side by side (its plots ask several at once)


class Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:
        pass  # not a line per request


def recorded(storage: str) -> str:
    """A storage as a search records it: an RDB's URL as it is, an SQLite file (.db, .sqlite)
    as its URL, another file as `journal://<path>`."""
    if "://" in storage:
        return storage
    path = Path(storage).resolve()
    if path.suffix in (".db", ".sqlite", ".sqlite3"):
        return f"sqlite:///{path}"
    return JOURNAL + str(path)


def studies(storage: str) -> tuple[object, list[str]]:
    """The opened storage and its studies' names; AlphaRlError naming a storage that is absent
    (nothing is created) or cannot be read."""
    import optuna

    remedy = ": run a search first (hparams_search=...) or give the storage its parent run's "
    opened = existing_storage(storage, remedy + "search.storage tag names")
    try:
        return opened, [s.study_name for s in optuna.get_all_study_summaries(opened)]
    except Exception as exc:  # the storage boundary: whatever Optuna or SQLAlchemy raises
        shown = hide_password(storage)
        raise AlphaRlError(f"study storage {shown} cannot be read ({first_line(exc)})") from exc


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="make dashboard", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument(
        "storage",
        nargs="?",
        default=JOURNAL_FILE,
        help=f"a journal file, journal://<path> or an RDB URL (default {JOURNAL_FILE})",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    args = p.parse_args(argv)
    try:
        storage = recorded(args.storage)
        opened, names = studies(storage)
        from optuna_dashboard import wsgi

        server = make_server(args.host, args.port, wsgi(opened), ThreadingServer, Quiet)
    except AlphaRlError as exc:
        print(f"make dashboard: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except OSError as exc:  # the port taken, say
        print(f"make dashboard: cannot listen on {args.host}:{args.port} ({exc.strerror}): give "
              "another PORT=", file=sys.stderr)  # fmt: skip
        raise SystemExit(2) from None
    print(f"studies in {hide_password(storage)}: {', '.join(names) or 'none yet'}")
    print(f"  dashboard: http://{args.host}:{server.server_port}/dashboard/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
