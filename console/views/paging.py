"""Paging shared by the console's views: every list takes a ``limit`` (default 50, at most
500) and an opaque string ``cursor`` (the page's ``next_cursor``, None on the last page),
so no page loads a whole namespace."""

from __future__ import annotations

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "page_limit", "prefix_end"]

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


def page_limit(limit: int | None, default: int = DEFAULT_LIMIT, most: int = MAX_LIMIT) -> int:
    """``limit`` bounded to 1..``most`` (None: ``default``); a page never loads all. The
    one clamper of the console: the views' limits and PageContext.page_args use it."""
    if limit is None:
        return default
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ValueError(f"limit must be an integer, not {limit!r}")
    return max(1, min(limit, most))


def prefix_end(prefix: str) -> str | None:
    """The first key after every key starting with ``prefix`` (None: no end, for "")."""
    if not prefix:
        return None
    code = ord(prefix[-1]) + 1
    if code > 0x10FFFF:
        return prefix_end(prefix[:-1])
    if 0xD800 <= code <= 0xDFFF:  # surrogates are no characters: UTF-8 goes on at U+E000
        code = 0xE000
    return prefix[:-1] + chr(code)
