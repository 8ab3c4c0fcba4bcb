"""Where StatekeeperStore keeps its items inside its statekeeper namespace (default
``langgraph-store``): one key per item, readable with a plain ``statekeeper range item/``.

    item/{label_1}/{label_2}/.../{label_n}/{key}    -> the item's JSON record
                                                       (client/langgraph/store_records.py)

Every component is escaped with :func:`part` ("%" -> "%25", "/" -> "%2F", NUL -> "%00"),
so "/" only ever separates components: the last component is the key, the others are the
namespace labels, and ``item/{l_1}/.../{l_k}/`` selects exactly the items whose namespace
starts with (l_1, ..., l_k) (``item/a/`` never matches namespace ("ab",)). A namespace
prefix search is therefore one forward range scan, and results come in the byte order of
these keys.

``part`` / ``unpart`` are the saver's (client/langgraph/keys.py); NUL is escaped because a
statekeeper key may not hold it but a LangGraph key may.
"""

from __future__ import annotations

from collections.abc import Sequence

from .keys import part, prefix_end, unpart

__all__ = [
    "ITEM_PREFIX",
    "after",
    "item_key",
    "literal_labels",
    "namespace_prefix",
    "part",
    "prefix_end",
    "unpart",
]

ITEM_PREFIX = "item/"


def namespace_prefix(labels: Sequence[str]) -> str:
    """The key prefix of every item whose namespace starts with ``labels``
    (``item/`` for the empty prefix: every item)."""
    return ITEM_PREFIX + "".join(part(label) + "/" for label in labels)


def item_key(namespace: Sequence[str], key: str) -> str:
    """The key of item ``key`` of ``namespace``."""
    return namespace_prefix(namespace) + part(key)


def after(key: str) -> str:
    """The first possible key after ``key``: keys hold no NUL, so that is key + "\\x01"
    (the inclusive start of the next page of a scan)."""
    return key + "\x01"


def literal_labels(path: Sequence[str]) -> tuple[str, ...]:
    """The labels of a list_namespaces prefix path before its first "*" wildcard (what a
    range scan can narrow on)."""
    out: list[str] = []
    for label in path:
        if label == "*":
            break
        out.append(label)
    return tuple(out)
