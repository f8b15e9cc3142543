"""The run's log file (<run dir>/train.log, Hydra's job log) when its disk fails.

logging's FileHandler prints a "--- Logging error ---" traceback for every line it cannot write,
so a full disk would bury the run's own one-line reason under hundreds of them. This handler says
once, in one line on stderr, that the file cannot be written and stops writing to it; every line
still goes to the console (Hydra's other handler).
"""

from __future__ import annotations

import logging
import sys


class RunLogFile(logging.FileHandler):
    """A FileHandler that gives up its file, saying so once, at the first write that fails."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.failed = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.failed:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        if self.failed:
            return
        self.failed = True
        error = sys.exc_info()[1]
        sys.stderr.write(f"cannot write the log file {self.baseFilename} ({error}); the run's "
                         "log goes on on the console only\n")  # fmt: skip
        sys.stderr.flush()

    def flush(self) -> None:
        try:
            super().flush()
        except OSError:  # at shutdown on a full disk: already said, or nothing left to say
            self.failed = True
