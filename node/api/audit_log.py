"""Bounded log lines for request data an attacker chooses (issue 27, item 1).

A 401 was logged at WARNING with the whole request path: `/v1/kv/<60 KB of x>` added about
60 KB to node.log per request, one connection wrote ~63 MB/s, and node.log counted against
the storage quota, so 650 unauthenticated requests (0.6 s) raised the NOSPACE alarm on a
32 MiB quota and every node refused every write. Two bounds here:

- `loggable`: a field taken from a request (path, method, namespace, a message that quotes
  keys) is cut to LOG_FIELD_CHARS characters and escaped, so one line stays short and a
  newline or ANSI escape in it cannot forge another audit line (item 13).
- `AuditLog`: at most AUDIT_LINES_PER_WINDOW audit lines per AUDIT_WINDOW_SECONDS; the
  rest are counted and reported as one "suppressed K more" line written with the first
  line of the next window (statekeeper_auth_denials_total still counts every denial).
  The API writes its 401/403 lines through it; the web console, served by the node, its
  line per action (console/audit.py), through the node's one AuditLog: one budget for both.

The same fixed-window budget (`WindowBudget`) limits the read barriers an unknown token id
may cost (node/api/routes.py, item 12).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from statekeeper.client.auth.tokens import ROOT_PREFIX, parse_token

# Characters of one request field in a log line (a path, a namespace, a message).
LOG_FIELD_CHARS = 200
# Audit lines (401/403, console actions) per window; one more reports what was suppressed.
AUDIT_LINES_PER_WINDOW = 20
AUDIT_WINDOW_SECONDS = 10.0


def _escape(c: str) -> str:
    if c == "\\":
        return "\\\\"
    if c.isprintable():  # not: C0/C1 controls, DEL, line/paragraph separators, bidi marks
        return c
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def loggable(value: object, limit: int = LOG_FIELD_CHARS) -> str:
    """`value` as one short, unambiguous log field: non-printable characters escaped
    (backslash too, so an escape in the input cannot pass for one of ours), cut to `limit`
    characters with the count of those left out. Reads only the first `limit` characters
    of a long string."""
    text = value if isinstance(value, str) else str(value)
    escaped = "".join(_escape(c) for c in text[:limit])
    cut = len(text) - limit
    if len(escaped) > limit:
        cut = max(cut, 0) + 1  # escapes made it longer: count from the escaped text
        escaped = escaped[:limit]
    return f"{escaped}...(+{cut} chars)" if cut > 0 else escaped


class WindowBudget:
    """At most `per_window` events per fixed window of `window` seconds of `clock`.

    `take()` answers (allowed, refused in the window that just ended): the second part is
    non-zero only on the first event of a new window after one that refused some."""

    def __init__(
        self, per_window: int, window: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.per_window = per_window
        self.window = window
        self.clock = clock
        self._ends = float("-inf")
        self._used = 0
        self._refused = 0

    def take(self) -> tuple[bool, int]:
        now = self.clock()
        ended = 0
        if now >= self._ends:
            ended, self._refused, self._used = self._refused, 0, 0
            self._ends = now + self.window
        if self._used < self.per_window:
            self._used += 1
            return True, ended
        self._refused += 1
        return False, ended


def token_label(token: str) -> str:
    """What an audit line names a presented token by: its id (never the token or a part of
    its secret), "root" for the root token, "-" for text that is no token."""
    parsed = parse_token(token)
    return parsed[0] if parsed else "root" if token.startswith(ROOT_PREFIX) else "-"


class AuditLog:
    """Audit lines, rate-limited (see the module docstring)."""

    def __init__(self, logger: logging.Logger, budget: WindowBudget | None = None) -> None:
        self.logger = logger
        self.budget = budget or WindowBudget(AUDIT_LINES_PER_WINDOW, AUDIT_WINDOW_SECONDS)

    def warning(self, fmt: str, *args: object) -> bool:
        """Log one audit line at WARNING if the budget allows; True if it was written."""
        return self.write(logging.WARNING, fmt, *args)

    def write(self, level: int, fmt: str, *args: object) -> bool:
        """Log one audit line at `level` if the budget allows; True if it was written."""
        allowed, suppressed = self.budget.take()
        if suppressed:
            b = self.budget
            self.logger.warning(
                "suppressed %d more audit lines (at most %d per %g s are logged; "
                "statekeeper_auth_denials_total counts every 401/403)",
                suppressed,
                b.per_window,
                b.window,
            )
        if allowed:
            self.logger.log(level, fmt, *args)
        return allowed
