"""Where a node's log goes, and how big it may grow (issue 27, item 1).

node.log lived in the node's data dir, was never rotated, and node/quota/disk_watch.py counted it
against `[storage] quota_bytes`: log lines alone could raise the NOSPACE alarm and stop
every write. Now:

- The supervisor (cluster/supervisor.py) starts each node with its stdout and stderr
  appended to `<data dir>/node.log` and `$STATEKEEPER_LOG_FILE` naming that file. The node
  then logs through a size-bounded RotatingFileHandler on it (stdlib logging.handlers):
  at LOG_MAX_BYTES the file becomes node.log.1 (node.log.1 -> .2 ...), and at most
  LOG_BACKUPS old files are kept, so the logs take at most
  LOG_MAX_BYTES * (LOG_BACKUPS + 1) (64 MiB) plus one record.
- What is written to fd 1 / 2 outside logging (a traceback at exit, a fault handler, a C
  library) goes to the same file: after each rollover the new node.log is dup2'ed onto
  fds 1 and 2, so the old file is never held open and written to after it was rotated.
- node.log and its rotations are not part of the data the quota counts (`is_log_file`,
  used by node/quota/disk_watch.py): the quota is the store's size; the logs' own bound is above.

Without `$STATEKEEPER_LOG_FILE` (a node under systemd, Kubernetes or a terminal) the node
logs to stderr and whatever collects it rotates it.
"""

from __future__ import annotations

import logging
import os
import sys
from logging.handlers import RotatingFileHandler

LOG_FILE = "node.log"
LOG_FILE_ENV = "STATEKEEPER_LOG_FILE"
LOG_MAX_BYTES = 16 * 2**20
LOG_BACKUPS = 3


def is_log_file(name: str) -> bool:
    """node.log or one of its rotations (node.log.1 ...)."""
    head, _, n = name.rpartition(".")
    return name == LOG_FILE or (head == LOG_FILE and n.isdigit())


class StdioRotatingHandler(RotatingFileHandler):
    """A RotatingFileHandler whose file is also the process's stdout and stderr."""

    def __init__(self, path: str, max_bytes: int, backups: int) -> None:
        super().__init__(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self._take_stdio()

    def doRollover(self) -> None:  # noqa: N802 (logging's name)
        super().doRollover()
        self._take_stdio()

    def _take_stdio(self) -> None:
        if self.stream is None:
            return
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        fd = self.stream.fileno()
        for target in (1, 2):
            os.dup2(fd, target)


def configure(
    node_id: str,
    level: str,
    log_file: str | None,
    max_bytes: int = LOG_MAX_BYTES,
    backups: int = LOG_BACKUPS,
) -> None:
    """The node's logging: to `log_file`, rotated, when given; else to stderr."""
    fmt = f"%(asctime)s {node_id} %(levelname)s %(name)s: %(message)s"
    if not log_file:
        logging.basicConfig(level=level, format=fmt, stream=sys.stderr)
        return
    handler = StdioRotatingHandler(log_file, max_bytes, backups)
    handler.setFormatter(logging.Formatter(fmt))
    logging.basicConfig(level=level, handlers=[handler])
