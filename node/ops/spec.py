"""`OpSpec`: the declaration of one protocol op (its fields and cross-field rules).

node/ops/core.py declares the kv ops and node/ops/streams.py the stream ops with it; `validate_op`
runs the declarations and node/openapi/requests.py turns them into request schemas.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from statekeeper.node.config import Limits
from statekeeper.node.ops.fields import CHECK_ABSENT, Field, Namespace

Checks = tuple[tuple[str, Callable[[Any, Limits, bool, dict], Any]], ...]
# (name, bound check, what an absent field is without calling check or CHECK_ABSENT)
PlanChecks = tuple[tuple[str, Callable[[Any, Limits, bool, dict], Any], Any], ...]


def bound_checks(fields: tuple[Field, ...]) -> Checks:
    """(name, bound check) per field: the validation loop then looks nothing up."""
    return tuple((f.name, f.check) for f in fields)


def _defined_in(cls: type, attr: str) -> type:
    return next(c for c in cls.__mro__ if attr in c.__dict__)


def absent_value(f: Field) -> Any:
    """f.absent(), or CHECK_ABSENT when a subclass overrides check() without absent()."""
    cls = type(f)
    return f.absent() if _defined_in(cls, "absent") is _defined_in(cls, "check") else CHECK_ABSENT


def plan_checks(fields: tuple[Field, ...]) -> PlanChecks:
    """bound_checks with each field's absent_value, for validate_op."""
    return tuple((f.name, f.check, absent_value(f)) for f in fields)


@dataclass(frozen=True, slots=True)
class OpSpec:
    """One op: its fields (in normalized order) and the rules that span fields."""

    name: str
    fields: tuple[Field, ...]
    doc: str  # description of its request schema
    write: bool  # goes through raft
    in_txn: bool = False  # allowed in a txn branch
    # A write that can add data: refused with 507 while the storage alarm is raised
    # (node/quota/alarm.py). None = True for a write (a write forgotten here stays refused: the
    # safe side), False for a read. Declare False for a write that removes data or rewrites
    # a fixed-size record (delete, compact, lease_keepalive), so it passes under the alarm
    # and frees space; a txn declares False: its branches decide (quota.grows).
    grows: bool | None = None
    # (a, (b, c)): `a` excludes `b` and `c` (checked after the fields; also in the schema).
    exclusive: tuple[str, tuple[str, ...]] | None = None
    # Extra checks: `pre(raw, limits)` before the fields, `post(out, limits)` after them.
    pre: Callable[[dict, Limits], None] | None = None
    post: Callable[[dict, Limits], None] | None = None
    # Checks of a request only (after `post`), never of a committed entry that apply
    # validates: bounds tightened after entries were written, so a journal from before
    # replays to the state it produced then.
    admit: Callable[[dict, Limits], None] | None = None
    # HTTP route of the op alone (POST); the kv ops share /v1/kv/{op}.
    path: str = ""
    # What a token needs for it (node/api/authz.py): "read", "write", "admin", or "none" (any
    # authenticated caller); "" = "write" for a write op, else "read".
    access: str = ""
    # The first field is `ns` (defaulted from the caller: "default", or the txn's ns);
    # `rest` are the fields after it, checked after `pre`.
    has_ns: bool = field(init=False)
    rest: Checks = field(init=False)
    # Fields a batch refuses when set (Field.batch_error), e.g. a long poll's wait_ms.
    batch_refused: tuple[Field, ...] = field(init=False)
    # What a request may carry (node/ops/known_fields.py): the fields a request sends, in
    # order (for the message), those plus `op` (the check), and the fields holding objects
    # of their own to check (Field.refuse_unknown).
    field_names: tuple[str, ...] = field(init=False)
    known: frozenset[str] = field(init=False)
    nested: tuple[Field, ...] = field(init=False)

    def __post_init__(self) -> None:
        has_ns = bool(self.fields) and isinstance(self.fields[0], Namespace)
        object.__setattr__(self, "has_ns", has_ns)
        object.__setattr__(self, "rest", bound_checks(self.fields[1:] if has_ns else self.fields))
        object.__setattr__(self, "batch_refused", tuple(f for f in self.fields if f.batch_error))
        names = tuple(f.name for f in self.fields if f.requested)
        object.__setattr__(self, "field_names", names)
        object.__setattr__(self, "known", frozenset(("op", *names)))
        nested = tuple(
            f for f in self.fields if _defined_in(type(f), "refuse_unknown") is not Field
        )
        object.__setattr__(self, "nested", nested)
        if not self.path:
            object.__setattr__(self, "path", f"/v1/kv/{self.name}")
        if self.grows is None:
            object.__setattr__(self, "grows", self.write)
        elif self.grows and not self.write:
            raise ValueError(f"op {self.name}: a read cannot grow the store")
        if not self.access:
            object.__setattr__(self, "access", "write" if self.write else "read")
        if self.access not in ("read", "write", "admin", "none"):
            raise ValueError(f"op {self.name}: access must be read, write, admin or none")

    @property
    def wired(self) -> bool:
        """Its schema differs between JSON and msgpack (it carries values)."""
        return any(f.wired for f in self.fields)

    @property
    def title(self) -> str:
        """CamelCase name for schema components: read_stream -> ReadStream."""
        return "".join(part.capitalize() for part in self.name.split("_"))


@dataclass(frozen=True)
class OpenApiFamily:
    """An op family's part of GET /v1/openapi.json, declared in its node/openapi/FAMILY.py and
    listed once in node/openapi/schemas.py's FAMILIES."""

    tag: str  # the routes' tag: /v1/<tag>/... (OpSpec.path)
    about: str  # the tag's description
    # op -> (summary, description, 200 description, error codes), given the error codes
    # every write / read answers.
    op_docs: Callable[[tuple[str, ...], tuple[str, ...]], dict]
    schemas: Callable[[], dict[str, dict]]  # components, the same on both wires
    results: tuple[str, ...]  # the ops' result components (a batch answers any of them)
    # components that differ between JSON and msgpack: name -> build(wire)
    wire_schemas: dict[str, Callable[[str], dict]] = field(default_factory=dict)
    examples: Callable[[], dict[str, dict]] | None = None  # op -> request examples
