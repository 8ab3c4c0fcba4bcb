"""Stopping the node at once when it cannot go on with a state it trusts.

A node whose journal cannot be written (status 71, node/raft/journal.py), or whose state
machine cannot apply an entry or be restored from a snapshot (status 70), must neither
acknowledge nor serve anything more: it exits without unwinding (no atexit handlers, no
`finally` that could write), and its supervisor restarts it from what is on disk.

A full disk (ENOSPC, from the journal's OSError or in RocksDB's error text) is named as
such: the log line says the disk is full, where, how much is free and what to do, and the
same words go, best effort, into `<data dir>/last_stop.json`. A write that hit ENOSPC may
have taken the last free byte, and the node's log usually lives on the same disk: so
`report_to` sets aside RESERVE_BYTES in `<data dir>/fatal.reserve` at start, and a
disk-full stop deletes that file first, which leaves room for its last words. The next start logs that file and shows it in
GET /v1/status (`storage.last_stop`), then removes it. Format: {"time" (unix seconds),
"message", "exit_code", "disk_full" (bool), "free_bytes" (int or null)}.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import time
from pathlib import Path
from typing import NoReturn

log = logging.getLogger("statekeeper.node")

STATE_MACHINE_EXIT_CODE = 70  # EX_SOFTWARE: apply or restore failed
JOURNAL_EXIT_CODE = 71  # EX_OSERR: the raft journal cannot be trusted
REPORT_NAME = "last_stop.json"
RESERVE_NAME = "fatal.reserve"
RESERVE_BYTES = 256 * 1024
_ENOSPC_TEXT = os.strerror(errno.ENOSPC)  # "No space left on device"

_data_dir: Path | None = None


def report_to(data_dir: Path | None) -> None:
    """Where stop_now writes its report (the node's data dir); set once at start, with the
    space a disk-full stop frees for its log line and report."""
    global _data_dir
    _data_dir = data_dir
    if data_dir is None:
        return
    try:
        with open(data_dir / RESERVE_NAME, "ab") as f:
            os.posix_fallocate(f.fileno(), 0, RESERVE_BYTES)
    except OSError as e:  # a full disk at start: the quota refuses writes anyway
        log.warning("could not set aside %s: %s", data_dir / RESERVE_NAME, e)


def is_disk_full(exc: BaseException | None) -> bool:
    """True when `exc` or an exception it was raised from is ENOSPC (an OSError, or a
    RocksDB error whose text carries the OS message)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if _ENOSPC_TEXT in str(exc) or "Disk quota exceeded" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _free_bytes() -> int | None:
    try:
        st = os.statvfs(_data_dir) if _data_dir is not None else None
    except OSError:
        return None
    return None if st is None else st.f_bavail * st.f_frsize


def stop_now(msg: str, exc: BaseException | None, code: int) -> NoReturn:
    """Log `msg` (with the traceback of `exc`) as critical and exit with `code`."""
    disk_full = is_disk_full(exc)
    free = _free_bytes() if disk_full else None  # before the reserve is given back
    if disk_full and _data_dir is not None:
        with contextlib.suppress(OSError):
            os.unlink(_data_dir / RESERVE_NAME)  # room for the log line and the report
    if disk_full:
        msg = (
            f"{msg}: the disk holding {_data_dir or 'the data dir'} is full (No space left "
            f"on device; {free if free is not None else '?'} bytes free). Free "
            "space there, then restart this node: it replays its journal and catches up "
            "from the leader"
        )
    log.critical("%s; exiting with status %d", msg, code, exc_info=exc)
    _write_report(msg, code, disk_full, free)
    logging.shutdown()
    os._exit(code)


def _write_report(msg: str, code: int, disk_full: bool, free: int | None) -> None:
    if _data_dir is None:
        return
    report = {
        "time": time.time(),
        "message": msg,
        "exit_code": code,
        "disk_full": disk_full,
        "free_bytes": free,
    }
    try:
        fd = os.open(_data_dir / REPORT_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, json.dumps(report).encode())
        finally:
            os.close(fd)
    except OSError as e:  # the disk may be too full even for this: the log line says it
        log.critical("could not write %s: %s", _data_dir / REPORT_NAME, e)


def take_report(data_dir: Path) -> dict | None:
    """The report a previous run left in `data_dir` (logged, then removed), or None."""
    path = data_dir / REPORT_NAME
    try:
        report = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        log.warning("ignoring unreadable %s: %s", path, e)
        report = None
    else:
        log.warning("the previous run of this node stopped: %s", report.get("message"))
    path.unlink(missing_ok=True)
    return report if isinstance(report, dict) else None
