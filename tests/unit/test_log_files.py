"""node.log is bounded and not part of the storage quota (issue 27, item 1c): with a 32 MiB
quota, 650 unauthenticated requests had grown node.log enough to raise the NOSPACE alarm."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from statekeeper.node.log_files import LOG_FILE, is_log_file
from statekeeper.node.quota.disk_watch import dir_bytes

REPO = Path(__file__).resolve().parents[2]


def test_the_quota_does_not_count_the_logs(tmp_path: Path) -> None:
    (tmp_path / "journal.bin").write_bytes(b"j" * 8192)
    for name in (LOG_FILE, LOG_FILE + ".1", LOG_FILE + ".3"):
        (tmp_path / name).write_bytes(b"x" * 2**20)
    assert dir_bytes(tmp_path) < 2**17  # the journal only (allocated blocks)


def test_log_file_names() -> None:
    assert is_log_file("node.log") and is_log_file("node.log.2")
    assert not is_log_file("node.logs") and not is_log_file("node.log.tmp")
    assert not is_log_file("journal.bin") and not is_log_file("LOG")


def test_logs_rotate_and_stderr_follows_the_current_file(tmp_path: Path) -> None:
    """A node process as the supervisor starts it: stderr appended to node.log, and
    STATEKEEPER_LOG_FILE naming it. 4,000 lines of ~1 KB with a 64 KiB bound and 2 old files
    leave at most ~3 x 64 KiB; a write to fd 2 after rollovers lands in the current file."""
    log = tmp_path / LOG_FILE
    child = textwrap.dedent(
        f"""
        import logging, os
        from statekeeper.node import log_files
        log_files.configure("node-0", "INFO", {str(log)!r}, max_bytes=65536, backups=2)
        for i in range(4000):
            logging.getLogger("t").warning("line %d %s", i, "y" * 1000)
        os.write(2, b"raw stderr after rotation\\n")
        """
    )
    with open(log, "ab") as out:
        subprocess.run(
            [sys.executable, "-c", child], stdout=out, stderr=out, cwd=REPO, check=True, timeout=60
        )
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [LOG_FILE, LOG_FILE + ".1", LOG_FILE + ".2"], files
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 3 * (65536 + 2048)
    text = log.read_text()
    assert "line 3999" in text and "raw stderr after rotation" in text
