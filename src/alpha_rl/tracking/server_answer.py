"""When the tracking server answers, and where its UI is then.

`mlflow server` listens long before it answers: its workers import MLflow first, about a minute
with 4 workers on 2 cores. While it starts, a thread beside the watched server (StartWatch) asks
`GET /health` every POLL_S until any HTTP answer comes back (an error status counts: the server
answered), and prints `waiting for the server to answer (N s)...` every PROGRESS_S. Then it says
that the server answers and prints the UI's links: the runs of each experiment that holds
alpha_rl's runs view (alpha_rl.tracking.view), the most recently updated first, and the list of
experiments. A server that exits unasked, before it answered or while it served, is an error
naming the file its output went to, with that output's last lines.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.request
from base64 import b64encode
from collections.abc import Callable
from pathlib import Path

from alpha_rl.tracking.links import experiments_link, runs_link
from alpha_rl.tracking.view import VIEW_TAG

POLL_S = 0.5  # how often the server is asked while it starts
PROGRESS_S = 10.0  # how often the wait is reported
ASK_TIMEOUT_S = 5.0  # one request's limit (a server starting accepts, then answers late)
MAX_LINKS = 10  # experiments linked at most, the most recently updated
TAIL_LINES = 15  # of a dead server's output, shown


def answers(url: str, timeout_s: float = ASK_TIMEOUT_S) -> bool:
    """Whether `GET <url>/health` gets an HTTP answer, whatever its status."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s):
            return True
    except urllib.error.HTTPError:  # 401 from the basic-auth app, 403 from the host check
        return True
    except (OSError, ValueError):  # refused, reset, timed out
        return False


def ui_links(url: str, ui: str, credentials: tuple[str, str] | None = None) -> list[str]:
    """`<name>: <link>` for each experiment (at most MAX_LINKS) of the server at `url` that holds
    the runs view, then every experiment's; links on `ui`. Only the last when the server does not
    list them (another's host check, an account it refuses)."""
    request = urllib.request.Request(f"{url}/api/2.0/mlflow/experiments/search?max_results=1000"
                                     "&order_by=last_update_time%20DESC")  # fmt: skip
    if credentials is not None:
        token = b64encode(":".join(credentials).encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=ASK_TIMEOUT_S * 6) as answer:
            found = json.load(answer).get("experiments", [])
    except (OSError, ValueError):
        found = []
    viewed = [e for e in found if any(t.get("key") == VIEW_TAG for t in e.get("tags", []))]
    lines = [f"{e['name']}: {runs_link(ui, e['experiment_id'])}" for e in viewed[:MAX_LINKS]]
    if len(viewed) > MAX_LINKS:
        lines.append(f"... and {len(viewed) - MAX_LINKS} more experiments")
    return [*lines, f"every experiment: {experiments_link(ui)}"]


def tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last `lines` lines of a text file ([] when it cannot be read)."""
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


class StartWatch:
    """Waits in a thread for the server at `url` to answer; then calls `then(seconds)`. `output`:
    the file the server writes to (None: this terminal), named if it dies first."""

    def __init__(self, url: str, then: Callable[[float], None], output: Path | None = None) -> None:
        self.url, self.then, self.output = url, then, output
        self.answered = threading.Event()
        self._done = threading.Event()  # answered, stopped or dead: nothing more to say
        self._thread = threading.Thread(target=self._wait, name="server-answer", daemon=True)
        self._start = time.monotonic()

    def begin(self) -> None:
        """Start waiting (the server has just been started)."""
        self._start = time.monotonic()
        self._thread.start()

    def silence(self) -> None:
        """Say nothing more (the server is being stopped); returns at once."""
        self._done.set()

    def stop(self) -> None:
        """Say nothing more, and let the thread end."""
        self._done.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2 * ASK_TIMEOUT_S)

    def ended(self, code: int) -> None:
        """The server exited with `code` unasked: an error on stderr, unless silenced or
        stopped (the server was being stopped)."""
        if self._done.is_set():
            return
        self.stop()
        when = "while it served" if self.answered.is_set() else "before it answered"
        where = f"its output: {self.output}" if self.output else "its output is above"
        print(f"error: the MLflow server exited with status {code} after "
              f"{time.monotonic() - self._start:.0f} s, {when}; {where}",
              file=sys.stderr, flush=True)  # fmt: skip
        if self.output:
            for line in tail(self.output):
                print(f"  {line}", file=sys.stderr)
            sys.stderr.flush()

    def _wait(self) -> None:
        report = self._start + PROGRESS_S
        while not self._done.is_set():
            if answers(self.url):
                if not self._done.is_set():
                    self.answered.set()
                    self.then(time.monotonic() - self._start)
                return
            if time.monotonic() >= report:
                print(f"waiting for the server to answer ({report - self._start:.0f} s)...",
                      flush=True)  # fmt: skip
                report += PROGRESS_S
            self._done.wait(POLL_S)
