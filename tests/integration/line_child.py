"""A child process driven line by line (the SIGSTOP scenarios of test_locks.py and
test_agent_fence.py): commands go to its stdin, a thread queues the lines it prints."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
from pathlib import Path


class LineChild:
    """``argv`` run in ``cwd`` with pipes; :meth:`expect` the next line's first word."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=cwd
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def expect(self, word: str, timeout: float) -> str:
        """The next line's second word, after checking its first is ``word``."""
        line = self.lines.get(timeout=timeout)
        assert line.split()[0] == word, line
        return line.split()[1] if " " in line else ""

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        """Kill it if it still runs (resumed first, in case it was SIGSTOPped)."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(10)
