"""What the archived reads return: a KeyValue or a StreamPage read from an archive segment
instead of the store (``get(..., archived="fetch")``, ``read_stream(..., archived="fetch")``).
Both say so: ``archived`` is True (False on every KeyValue / StreamPage read from the
store) and ``segment`` names the segment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..results import KeyValue, StreamPage

__all__ = ["ArchivedKeyValue", "ArchivedStreamPage"]


@dataclass(frozen=True, slots=True)
class ArchivedKeyValue(KeyValue):
    """A key as it was when archived: its value, version, create_revision and
    mod_revision then (``revision``: the store revision the 410 answer was served at)."""

    segment: str = ""
    archived: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class ArchivedStreamPage(StreamPage):
    """Archived events of a stream, read from a segment: the events from the asked seq to
    the end of the archived range (at most ``limit``); ``continuation`` is None: go on with
    ``read_stream(start=page.events[-1].seq + 1, archived="fetch")``. ``revision``,
    ``last_seq`` and ``first_seq`` are the live stream's (stream_info)."""

    segment: str = ""
    archived: ClassVar[bool] = True
