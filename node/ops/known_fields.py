"""A request's fields must all be known: an unknown one is 400 `unknown_field`, naming it and
the fields its object knows (issue 30 item 4: `{"key": "k", "value": "x", "ttl": 30}`, the
Python keyword's name, was a 200 and the key had no TTL).

Requests only. A committed raft entry is validated again in apply with internal=True and
still drops what it does not know: an entry written by another version must apply the same
on every node (node/entry.py, "Validated ops"). The known fields are the op's declaration
(OpSpec.known), so the check and the OpenAPI document's `additionalProperties: false` follow
the same fields.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Any

from statekeeper.node.errors import OpError

UNKNOWN_FIELD = "unknown_field"
_MAX_NAME_CHARS = 64  # of an unknown name quoted back (it is the caller's own text)
_MAX_NAMES_SHOWN = 8  # unknown names listed (a body may hold thousands)


def _quoted(name: Any) -> str:
    text = repr(name)
    return text if len(text) <= _MAX_NAME_CHARS else text[: _MAX_NAME_CHARS - 3] + "..."


def unknown_field_error(unknown: list, known: Iterable[str], where: str) -> OpError:
    """400 unknown_field: `where` (the op or object, "put", "events[0]") has fields
    `unknown`; the message names them, a close known name, and every known field."""
    known = list(known)
    shown = unknown[:_MAX_NAMES_SHOWN]
    names = ", ".join(_quoted(k) for k in shown)
    if len(unknown) > len(shown):
        names += f" and {len(unknown) - len(shown)} more"
    hint = ""
    if len(unknown) == 1 and isinstance(unknown[0], str):
        close = difflib.get_close_matches(unknown[0], known, n=1, cutoff=0.6)
        if close:
            hint = f" (did you mean {close[0]!r}?)"
    plural = "s" if len(unknown) > 1 else ""
    return OpError(
        UNKNOWN_FIELD,
        f"{where} has unknown field{plural} {names}{hint}; known fields: {', '.join(known)}",
        unknown=[k if isinstance(k, str) else repr(k) for k in shown],
        known=known,
    )


def refuse_unknown(given: dict, known: frozenset[str], names: Sequence[str], where: str) -> None:
    """Raise unknown_field when `given` holds a key that `known` does not hold; `names`:
    the known fields in the order the message lists them."""
    if not known.issuperset(given):
        raise unknown_field_error([k for k in given if k not in known], names, where)


def refuse_unknown_fields(op: dict, spec: Any) -> None:
    """A request op (an OpSpec's `spec`) holds only the fields the op declares, and so do the
    objects inside them (Field.refuse_unknown: a txn's compares and ops, events...)."""
    refuse_unknown(op, spec.known, spec.field_names, spec.name)
    for f in spec.nested:
        f.refuse_unknown(op.get(f.name))
