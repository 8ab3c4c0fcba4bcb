"""What StatekeeperStore computes on the client after reading items: search filters, the
list_namespaces conditions, and the cosine ranking of semantic search. Pure functions, no
I/O. The semantics are LangGraph's (the InMemoryStore's), written here from its
documentation; where that store raises on a comparison it cannot make (``$gt`` on a missing
or non-numeric field), these say "no match", as PostgresStore's SQL does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from langgraph.store.base import ListNamespacesOp, MatchCondition

__all__ = ["cosine", "list_namespaces", "namespace_matches", "value_matches"]

_NUMERIC = {
    "$gt": lambda a, b: a > b,
    "$gte": lambda a, b: a >= b,
    "$lt": lambda a, b: a < b,
    "$lte": lambda a, b: a <= b,
}


def value_matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether an item's value passes a search ``filter``: every top-level field of the
    filter must match (see :func:`_matches`)."""
    if not filter:
        return True
    return all(_matches(value.get(field), want) for field, want in filter.items())


def _matches(actual: Any, want: Any) -> bool:
    """``want`` is an operator dict (``{"$gt": 3, "$ne": 5}``: all must hold), a nested
    dict (each of its fields must match the same field of ``actual``), a list (same length,
    element by element), or a plain value (equality)."""
    if isinstance(want, dict):
        if any(k.startswith("$") for k in want):
            return all(_operator(actual, op, operand) for op, operand in want.items())
        if not isinstance(actual, dict):
            return False
        return all(_matches(actual.get(k), v) for k, v in want.items())
    if isinstance(want, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(actual) == len(want)
            and all(_matches(a, w) for a, w in zip(actual, want, strict=True))
        )
    return bool(actual == want)


def _operator(actual: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(actual == operand)
    if op == "$ne":
        return bool(actual != operand)
    compare = _NUMERIC.get(op)
    if compare is None:
        raise ValueError(f"unsupported filter operator {op!r} (use $eq $ne $gt $gte $lt $lte)")
    try:
        return bool(compare(float(actual), float(operand)))
    except (TypeError, ValueError):  # missing or not a number: no match
        return False


def namespace_matches(condition: MatchCondition, namespace: Sequence[str]) -> bool:
    """Whether ``namespace`` starts ("prefix") or ends ("suffix") with the condition's
    path, "*" matching any one label."""
    path = condition.path
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValueError(f"unsupported match type {condition.match_type!r}")
    return all(want == "*" or label == want for label, want in pairs)


def list_namespaces(
    namespaces: Iterable[tuple[str, ...]], op: ListNamespacesOp
) -> list[tuple[str, ...]]:
    """The answer of ``op`` over these (distinct) namespaces: those matching every
    condition, cut to ``max_depth`` labels (then distinct), sorted, offset and limit."""
    conditions = op.match_conditions or ()
    kept = {ns for ns in namespaces if all(namespace_matches(c, ns) for c in conditions)}
    if op.max_depth is not None:
        kept = {ns[: op.max_depth] for ns in kept}
    return sorted(kept)[op.offset : op.offset + op.limit]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """Cosine similarity; 0.0 when either vector is all zeros."""
    na = math.sqrt(math.fsum(x * x for x in a))
    nb = math.sqrt(math.fsum(y * y for y in b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return math.fsum(x * y for x, y in zip(a, b, strict=True)) / (na * nb)
