"""Stopping the node at once when it cannot go on with a state it trusts.

A node whose journal cannot be written (status 71, node/journal.py), or whose state
machine cannot apply an entry or be restored from a snapshot (status 70), must neither
acknowledge nor serve anything more: it exits without unwinding (no atexit handlers, no
`finally` that could write), and its supervisor restarts it from what is on disk.
"""

from __future__ import annotations

import logging
import os
from typing import NoReturn

log = logging.getLogger("statekeeper.node")

STATE_MACHINE_EXIT_CODE = 70  # EX_SOFTWARE: apply or restore failed
JOURNAL_EXIT_CODE = 71  # EX_OSERR: the raft journal cannot be trusted


def stop_now(msg: str, exc: BaseException | None, code: int) -> NoReturn:
    """Log `msg` (with the traceback of `exc`) as critical and exit with `code`."""
    log.critical("%s; exiting with status %d", msg, code, exc_info=exc)
    logging.shutdown()
    os._exit(code)
