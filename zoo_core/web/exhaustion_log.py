"""Running out of descriptors or memory is logged once per interval, not per event.

When the process runs out of file descriptors, asyncio's accept loop reports
every failed ``accept()`` with a traceback (through the ``asyncio`` logger) and so
does uvicorn for every request that fails to open a file (``uvicorn.error``); under
a flood of connections that is megabytes of identical tracebacks a minute. This
filter lets the first such record of each kind through, drops the rest for
``interval`` seconds, and says how many it dropped on the next one it lets through.
Other records pass untouched.
"""

from __future__ import annotations

import errno
import logging
import threading
import time

EXHAUSTION = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
LOGGERS = ("asyncio", "uvicorn.error")


class ExhaustionFilter(logging.Filter):
    def __init__(self, interval: float = 10.0):
        super().__init__()
        self.interval = interval
        self.lock = threading.Lock()
        self.last: dict[tuple, float] = {}
        self.dropped: dict[tuple, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, OSError) or error.errno not in EXHAUSTION:
            return True
        kind = (record.name, error.errno)
        now = time.monotonic()
        with self.lock:
            if now - self.last.get(kind, -self.interval) < self.interval:
                self.dropped[kind] = self.dropped.get(kind, 0) + 1
                return False
            self.last[kind] = now
            dropped = self.dropped.pop(kind, 0)
        if dropped:
            record.msg = f"{record.msg} ({dropped} more like it in the last {self.interval:g} s not logged)"
        return True


def log_exhaustion_once_per(interval: float = 60.0) -> ExhaustionFilter:
    """Install the filter on the loggers that report these errors (after uvicorn set up its logging)."""
    exhaustion = ExhaustionFilter(interval)
    for name in LOGGERS:
        logging.getLogger(name).addFilter(exhaustion)
    return exhaustion
