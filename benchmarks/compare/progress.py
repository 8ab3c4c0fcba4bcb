"""Progress display for the comparison: one bar for the whole run.

`make_bar` gives tqdm on a terminal, `SimpleBar` (a line every 5 s) in a log, `QuietBar`
for --no-progress. The harness's per-second line reaches the bar's postfix through
`BarStream`; bulk loads report through `LoadProgress`. Every bar has update,
set_description, set_postfix_str, write and close, which is all the runner uses.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class SimpleBar:
    """One-line progress bar for when tqdm is not installed."""

    def __init__(self, total: int, stream: TextIO = sys.stderr) -> None:
        self.total, self.n, self.desc, self.postfix = total, 0, "", ""
        self.stream = stream
        self.tty = stream.isatty()
        self._last = 0.0

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and not self.tty and now - self._last < 5.0:
            return  # a log file gets a line every 5 s, not one per tick
        self._last = now
        width = 24
        filled = int(width * self.n / max(self.total, 1))
        line = f"[{'#' * filled}{'.' * (width - filled)}] {self.n}/{self.total} {self.desc}"
        if self.postfix:
            line += f" | {self.postfix}"
        self.stream.write(f"\r\x1b[K{line}" if self.tty else line + "\n")
        self.stream.flush()

    def update(self, n: int = 1) -> None:
        self.n += n
        self._draw(force=True)

    def set_description(self, desc: str) -> None:
        self.desc = desc
        self._draw(force=True)

    def set_postfix_str(self, s: str) -> None:
        self.postfix = s
        self._draw()

    def write(self, msg: str) -> None:
        self.stream.write(("\r\x1b[K" if self.tty else "") + msg + "\n")
        self.stream.flush()
        if self.tty:
            self._draw(force=True)

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


class QuietBar(SimpleBar):
    """--no-progress: messages only."""

    def _draw(self, force: bool = False) -> None:
        pass

    def write(self, msg: str) -> None:
        self.stream.write(msg + "\n")
        self.stream.flush()

    def close(self) -> None:
        pass


def make_bar(total: int, enabled: bool) -> Any:
    if not enabled:
        return QuietBar(total)
    if not sys.stderr.isatty():
        return SimpleBar(total)  # tqdm's carriage returns make one endless line in a log
    try:
        from tqdm import tqdm
    except ImportError:
        return SimpleBar(total)
    return tqdm(total=total, unit="step", dynamic_ncols=True, file=sys.stderr)


class BarStream:
    """A text stream for run_load(progress=...): its per-second line becomes the bar's postfix."""

    def __init__(self, bar: Any) -> None:
        self.bar = bar

    def isatty(self) -> bool:
        return False

    def write(self, s: str) -> int:
        text = s.replace("\r\x1b[K", "").strip()
        if text:
            self.bar.set_postfix_str(text)
        return len(s)

    def flush(self) -> None:
        pass


class LoadProgress:
    """progress(n) callback for bulk loads: keys written so far and the rate, on the bar."""

    def __init__(self, bar: Any, total: int, label: str) -> None:
        self.bar, self.total, self.label = bar, total, label
        self.done = 0
        self.start = time.monotonic()
        self._shown = 0.0

    def __call__(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._shown >= 0.5 or self.done >= self.total:
            self._shown = now
            rate = self.done / max(now - self.start, 1e-9)
            self.bar.set_postfix_str(
                f"{self.label}: {self.done:,}/{self.total:,} keys, {rate:,.0f} keys/s"
            )
