"""Laws of the pure CRDT model (client/crdt/model.py), no network.

Each type is driven by a hypothesis program: operations at three replicas (adds, removes,
concurrent sets, full-state syncs). A reference model tracks which operations (events) each
replica knows and what each one observed; after every step the replica's value must equal
the reference's (counter: the sum of its increments; orset: add-wins observed-remove;
lwwreg: the write with the largest (t, rid); mvreg: the writes no known write observed;
ormap: present keys with their nested values). Then the laws: merge commutative,
associative, idempotent (compared by encode() bytes), deltas folded in any order and
duplicated equal the merge of the full states, encode/decode round trip, and decode turns
any junk into CrdtError and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statekeeper.client.crdt import model as m
from statekeeper.client.crdt.model import CrdtError

RIDS = ("alice", "bob", "carol")
ELEMS = ("x", "y", 7, b"z")
VALUES = (0, 1, "a", None, [1, "x"], {"k": 1, "a": [2]})
SUBTYPES = {"c": "pncounter", "s": "orset", "r": "lwwreg"}
LAWS = settings(max_examples=120, deadline=None)


def enc(t: str, s: Any) -> bytes:
    return m.encode(t, s)


def elem_order(xs: Any) -> list:
    rank = {int: 0, str: 1, bytes: 2}
    return sorted(set(xs), key=lambda e: (rank[type(e)], e))


def packed_order(xs: Any) -> list:
    return [v for _, v in sorted({msgpack.packb(v): v for v in xs}.items())]


# ---- the reference: events, what each replica knows ---------------------------------


def alive_tags(evs: list[dict]) -> dict:
    """tag -> element of the adds no known event killed (add-wins observed-remove)."""
    tags = {ev["tag"]: ev["elem"] for ev in evs if ev["op"] == "add"}
    for ev in evs:
        for tag in ev["kills"]:
            tags.pop(tag, None)
    return tags


def ref_value(t: str, evs: list[dict]) -> Any:
    if t in ("gcounter", "pncounter"):
        return sum(ev["n"] for ev in evs)
    if t == "orset":
        return elem_order(alive_tags(evs).values())
    if t == "lwwreg":
        return max(evs, key=lambda ev: (ev["t"], ev["r"]))["v"] if evs else None
    if t == "mvreg":
        seen = set().union(*(ev["hist"] for ev in evs)) if evs else set()
        return packed_order(ev["v"] for ev in evs if ev["id"] not in seen)
    present = {ev["key"] for ev in evs if ev["op"] == "update"} & set(
        alive_tags([{**ev, "op": "add", "elem": ev["key"]} if ev["op"] == "update" else ev
                    for ev in evs]).values()
    )  # fmt: skip
    return {
        k: ref_value(SUBTYPES[k], [ev["nested"] for ev in evs if ev.get("key") == k and
                                   ev["op"] == "update"])
        for k in sorted(present)
    }  # fmt: skip


def make_event(t: str, state: Any, rid: str, known: list[dict], kind: str, a: int, b: int,
               eid: int) -> tuple[Any, dict]:  # fmt: skip
    """Apply one operation of type ``t`` at replica ``rid``: (delta, reference event)."""
    if t == "gcounter":
        return m.gcounter_inc(state, rid, abs(b) + 1), {"n": abs(b) + 1}
    if t == "pncounter":
        n = b or 5
        return m.pncounter_add(state, rid, n), {"n": n}
    if t == "orset":
        x = ELEMS[a % len(ELEMS)]
        kills = {tag for tag, e in alive_tags(known).items() if e == x}
        if kind == "remove":
            return m.orset_remove(state, x), {"op": "remove", "kills": kills}
        return m.orset_add(state, rid, x), {"op": "add", "tag": eid, "elem": x, "kills": kills}
    if t == "lwwreg":
        v = VALUES[b % len(VALUES)]
        delta = m.lwwreg_set(state, rid, v, a)
        top = max((ev["t"] for ev in known), default=None)
        assert delta["t"] == (a if top is None or a > top else top + 1)
        return delta, {"t": delta["t"], "r": rid, "v": v}
    if t == "mvreg":
        v = VALUES[b % len(VALUES)]
        return m.mvreg_set(state, rid, v), {"v": v, "hist": {ev["id"] for ev in known}}
    key = "csr"[a % 3]
    key_evs = [{**ev, "op": "add", "elem": ev["key"]} if ev["op"] == "update" else ev
               for ev in known]  # fmt: skip
    kills = {tag for tag, k in alive_tags(key_evs).items() if k == key}
    if kind == "remove":
        return m.ormap_remove(state, key), {"op": "remove", "key": key, "kills": kills}
    sub = SUBTYPES[key]
    nested_known = [ev["nested"] for ev in known if ev.get("key") == key and ev["op"] == "update"]
    nkind = "remove" if kind == "update-" else "add"
    inner, nested = make_event(sub, m.ormap_get(state, key, sub), rid, nested_known, nkind,
                               abs(b), a, eid)  # fmt: skip
    nested["id"] = eid
    delta = m.ormap_update(state, rid, key, sub, inner)
    return delta, {"op": "update", "key": key, "tag": eid, "kills": kills, "nested": nested}


KINDS = {
    "gcounter": ("add",), "pncounter": ("add",), "orset": ("add", "add", "remove"),
    "lwwreg": ("set",), "mvreg": ("set",), "ormap": ("update", "update-", "remove"),
}  # fmt: skip


@dataclass
class Sim:
    t: str
    states: list = field(default_factory=list)
    know: list = field(default_factory=list)
    events: list = field(default_factory=list)
    deltas: list = field(default_factory=list)


def programs(t: str) -> st.SearchStrategy:
    step = st.tuples(
        st.integers(0, len(RIDS) - 1), st.integers(0, len(RIDS) - 1),
        st.sampled_from((*KINDS[t], "sync")), st.integers(0, 5), st.integers(-3, 5),
    )  # fmt: skip
    return st.lists(step, max_size=24)


def run(t: str, program: list) -> Sim:
    sim = Sim(t, [m.empty(t) for _ in RIDS], [set() for _ in RIDS])
    for i, j, kind, a, b in program:
        if kind == "sync":
            sim.states[i] = m.merge(t, sim.states[i], sim.states[j])
            sim.know[i] |= sim.know[j]
        else:
            eid = len(sim.events)
            known = [sim.events[k] for k in sorted(sim.know[i])]
            delta, ev = make_event(t, sim.states[i], RIDS[i], known, kind, a, b, eid)
            ev["id"] = eid
            sim.events.append(ev)
            sim.deltas.append(delta)
            sim.know[i].add(eid)
            sim.states[i] = m.merge(t, sim.states[i], delta)
        expected = ref_value(t, [sim.events[k] for k in sorted(sim.know[i])])
        assert m.value(t, sim.states[i]) == expected
    return sim


def fold(t: str, states: list) -> Any:
    out = m.empty(t)
    for s in states:
        out = m.merge(t, out, s)
    return out


# ---- the laws ------------------------------------------------------------------------


@pytest.mark.parametrize("t", m.TYPES)
@LAWS
@given(data=st.data())
def test_laws(t: str, data: st.DataObject) -> None:
    sim = run(t, data.draw(programs(t)))
    pool = sim.states + sim.deltas
    a, b, c = (data.draw(st.sampled_from(pool)) for _ in range(3))
    assert enc(t, m.merge(t, a, b)) == enc(t, m.merge(t, b, a))
    assert enc(t, m.merge(t, m.merge(t, a, b), c)) == enc(t, m.merge(t, a, m.merge(t, b, c)))
    assert enc(t, m.merge(t, a, a)) == enc(t, a)
    assert enc(t, m.merge(t, a, m.empty(t))) == enc(t, a)
    ab = m.merge(t, a, b)
    assert enc(t, m.merge(t, ab, b)) == enc(t, ab)  # a repeated merge changes nothing
    for s in (a, b, c, ab):
        m.check(t, s)
        raw = enc(t, s)
        back = m.decode(t, raw)
        assert back == s and enc(t, back) == raw


@pytest.mark.parametrize("t", m.TYPES)
@LAWS
@given(data=st.data())
def test_deltas_in_any_order_equal_the_full_states(t: str, data: st.DataObject) -> None:
    sim = run(t, data.draw(programs(t)))
    full = fold(t, sim.states)
    if sim.deltas:
        extra = data.draw(st.lists(st.sampled_from(sim.deltas), max_size=6))
        shuffled = data.draw(st.permutations(sim.deltas + extra))
    else:
        shuffled = []
    assert enc(t, fold(t, shuffled)) == enc(t, full)
    assert m.value(t, full) == ref_value(t, sim.events)
    # any merge order of the replicas' states converges to the same bytes
    order = data.draw(st.permutations(sim.states))
    assert enc(t, fold(t, order)) == enc(t, full)


# ---- semantics by hand ---------------------------------------------------------------


def test_orset_add_wins_and_remove_removes_only_observed() -> None:
    a = m.merge("orset", m.empty("orset"), m.orset_add(m.empty("orset"), "a", "x"))
    b = a  # b observed a's add
    b = m.merge("orset", b, m.orset_remove(b, "x"))
    a = m.merge("orset", a, m.orset_add(a, "a", "x"))  # concurrent re-add
    assert m.value("orset", m.merge("orset", a, b)) == ["x"]
    assert m.value("orset", b) == []
    c = m.merge("orset", m.empty("orset"), m.orset_remove(m.empty("orset"), "x"))
    assert enc("orset", c) == enc("orset", m.empty("orset"))  # unobserved: no-op
    both = m.merge("orset", a, b)
    gone = m.merge("orset", both, m.orset_remove(both, "x"))
    assert gone["e"] == {} and gone["d"] == [] and gone["c"] == {"a": 2}  # no tombstones


def test_lww_ties_break_by_replica_id_and_set_beats_what_it_saw() -> None:
    e = m.empty("lwwreg")
    x, y = m.lwwreg_set(e, "a", "from-a", 5), m.lwwreg_set(e, "b", "from-b", 5)
    assert m.value("lwwreg", m.merge("lwwreg", x, y)) == "from-b"
    later = m.lwwreg_set(y, "a", "again", 3)  # a clock behind: bumped past what it saw
    assert later["t"] == 6 and m.value("lwwreg", m.merge("lwwreg", y, later)) == "again"
    one, true = dict(x, v=1), dict(x, v=True)  # same (t, r): the value's encoding decides
    assert enc("lwwreg", m.merge("lwwreg", one, true)) == enc(
        "lwwreg", m.merge("lwwreg", true, one)
    )


def test_mvreg_keeps_concurrent_values_until_a_write_observes_them() -> None:
    e = m.empty("mvreg")
    both = m.merge("mvreg", m.mvreg_set(e, "a", "A"), m.mvreg_set(e, "b", "B"))
    assert m.value("mvreg", both) == ["A", "B"]
    resolved = m.merge("mvreg", both, m.mvreg_set(both, "a", "C"))
    assert m.value("mvreg", resolved) == ["C"]


def test_ormap_remove_hides_the_key_and_an_update_resumes() -> None:
    s = m.empty("ormap")
    for _ in range(3):
        inner = m.pncounter_add(m.ormap_get(s, "k", "pncounter"), "a", 2)
        s = m.merge("ormap", s, m.ormap_update(s, "a", "k", "pncounter", inner))
    concurrent = m.merge(
        "ormap", s, m.ormap_update(s, "b", "k", "pncounter", m.pncounter_add(
            m.ormap_get(s, "k", "pncounter"), "b", 1)))  # fmt: skip
    removed = m.merge("ormap", s, m.ormap_remove(s, "k"))
    assert m.value("ormap", removed) == {}
    assert m.value("ormap", m.merge("ormap", removed, concurrent)) == {"k": 7}  # add wins
    again = m.ormap_update(
        removed,
        "a",
        "k",
        "pncounter",
        m.pncounter_add(m.ormap_get(removed, "k", "pncounter"), "a", 1),
    )
    assert m.value("ormap", m.merge("ormap", removed, again)) == {"k": 7}  # no reset
    with pytest.raises(CrdtError, match="holds a pncounter"):
        m.ormap_update(s, "a", "k", "gcounter", m.gcounter_inc({}, "a"))


def test_ormap_concurrent_types_resolve_to_the_first_name() -> None:
    e = m.empty("ormap")
    x = m.ormap_update(e, "a", "k", "pncounter", m.pncounter_add(m.empty("pncounter"), "a", 1))
    y = m.ormap_update(e, "b", "k", "gcounter", m.gcounter_inc({}, "b", 4))
    assert m.value("ormap", m.merge("ormap", x, y)) == {"k": 4}
    assert enc("ormap", m.merge("ormap", x, y)) == enc("ormap", m.merge("ormap", y, x))


def nested_map(depth: int) -> Any:
    s: Any = {"a": 1}
    t = "gcounter"
    for _ in range(depth):
        s = m.merge("ormap", m.empty("ormap"), m.ormap_update(m.empty("ormap"), "a", "k", t, s))
        t = "ormap"
    return s


def test_ormap_depth_limit() -> None:
    m.decode("ormap", m.encode("ormap", nested_map(m.MAX_DEPTH)))
    with pytest.raises(CrdtError, match="deeper"):
        m.decode("ormap", m.encode("ormap", nested_map(m.MAX_DEPTH + 1)))


def test_pncounter_merge_of_1000_replicas() -> None:
    """The value over many replicas (the merge's speed is measured, not asserted here:
    about 0.05-0.1 ms for 1,000 replicas, see the model's docstring)."""
    a, b = m.empty("pncounter"), m.empty("pncounter")
    for i in range(1000):
        rid = f"replica-{i:04d}-{'x' * 20}"
        a = m.merge("pncounter", a, m.pncounter_add(a, rid, 5))
        b = m.merge("pncounter", b, m.pncounter_add(b, rid, -3 if i % 2 else 7))
    merged = m.merge("pncounter", a, b)
    assert m.value("pncounter", merged) == 500 * 7 + 500 * 5 - 500 * 3


# ---- bad input -----------------------------------------------------------------------

BIG = "x" * (m.MAX_REPLICA_ID_CHARS + 1)
DEEP: Any = 1
for _ in range(m.MAX_VALUE_DEPTH + 2):
    DEEP = [DEEP]
JUNK = [
    ("gcounter", []), ("gcounter", {"a": 0}), ("gcounter", {"a": -1}), ("gcounter", {"a": True}),
    ("gcounter", {1: 1}), ("gcounter", {"": 1}), ("gcounter", {BIG: 1}), ("gcounter", {"a": 1.5}),
    ("gcounter", {"a": m.MAX_COUNT + 1}), ("gcounter", {f"r{i}": 1 for i in range(4097)}),
    ("pncounter", {"p": {}}), ("pncounter", {"p": {}, "n": {}, "x": {}}),
    ("pncounter", {"p": {"a": 0}, "n": {}}), ("pncounter", {"p": [], "n": {}}),
    ("orset", {"e": {"x": []}, "c": {"a": 1}, "d": []}),
    ("orset", {"e": {"x": [["a", 2]]}, "c": {"a": 1}, "d": []}),
    ("orset", {"e": {"x": [["b", 1], ["a", 1]]}, "c": {"a": 1, "b": 1}, "d": []}),
    ("orset", {"e": {"x": [["a", 1], ["a", 1]]}, "c": {"a": 1}, "d": []}),
    ("orset", {"e": {}, "c": {"a": 1}, "d": [["a", 2]]}),
    ("orset", {"e": {}, "c": {}, "d": [["a", 5], ["a", 3]]}),
    ("orset", {"e": {True: [["a", 1]]}, "c": {"a": 1}, "d": []}),
    ("orset", {"e": {1.5: [["a", 1]]}, "c": {"a": 1}, "d": []}),
    ("orset", {"e": {"x" * 5000: [["a", 1]]}, "c": {"a": 1}, "d": []}),
    ("orset", {"e": {"x": [["a", 1, 2]]}, "c": {"a": 1}, "d": []}),
    ("orset", {"e": {"x": [["a", 0]]}, "c": {"a": 1}, "d": []}),
    ("orset", {"e": {}, "c": {}}),
    ("lwwreg", {"v": 1, "t": -1, "r": "a"}), ("lwwreg", {"v": 1, "t": 0, "r": ""}),
    ("lwwreg", {"v": float("nan"), "t": 1, "r": "a"}), ("lwwreg", {"v": 1, "t": 1, "r": 5}),
    ("lwwreg", {"v": 1, "t": 1}), ("lwwreg", {"v": {1: 2}, "t": 1, "r": "a"}),
    ("lwwreg", {"v": DEEP, "t": 1, "r": "a"}),
    ("mvreg", {"vals": [[1, {}]]}), ("mvreg", {"vals": [[1, {"a": 1}, 3]]}),
    ("mvreg", {"vals": [[2, {"b": 1}], [1, {"a": 1}]]}),
    ("mvreg", {"vals": [[1, {"a": 1}], [1, {"a": 1}]]}),
    ("mvreg", {"vals": [[1, {"a": 1}], [2, {"a": 2}]]}), ("mvreg", {"vals": {}}),
    ("ormap", {"keys": {"e": {7: [["a", 1]]}, "c": {"a": 1}, "d": []}, "vals": {}}),
    ("ormap", {"keys": {"e": {"k": [["a", 1]]}, "c": {"a": 1}, "d": []}, "vals": {}}),
    ("ormap", {"keys": {"e": {}, "c": {}, "d": []}, "vals": {"k": ["nope", {}]}}),
    ("ormap", {"keys": {"e": {}, "c": {}, "d": []}, "vals": {"k": ["gcounter", {"a": 0}]}}),
    ("ormap", {"keys": {"e": {}, "c": {}, "d": []}, "vals": {"k": {"gcounter": {}}}}),
]  # fmt: skip


@pytest.mark.parametrize(("t", "obj"), JUNK)
def test_decode_rejects_junk(t: str, obj: Any) -> None:
    with pytest.raises(CrdtError) as info:
        m.decode(t, msgpack.packb(obj, use_bin_type=True))
    assert info.value.code == "invalid_argument" and info.value.message


@pytest.mark.parametrize(
    "raw", [b"", b"\xc1", b"\x80\x80", b"\xd4\x01\x00", msgpack.packb(msgpack.ExtType(3, b"x"))]
)
def test_decode_rejects_bad_bytes(raw: bytes) -> None:
    for t in m.TYPES:
        with pytest.raises(CrdtError):
            m.decode(t, raw)


def test_bad_arguments() -> None:
    e = m.empty
    cases = [
        lambda: m.decode("nope", b"\x80"), lambda: m.decode("gcounter", "text"),
        lambda: m.empty("nope"), lambda: m.gcounter_inc({}, "a", 0),
        lambda: m.pncounter_add(e("pncounter"), "a", 0), lambda: m.gcounter_inc({}, "", 1),
        lambda: m.gcounter_inc({}, BIG, 1), lambda: m.gcounter_inc({}, 5, 1),
        lambda: m.gcounter_inc({"a": m.MAX_COUNT}, "a", 1),
        lambda: m.orset_add(e("orset"), "a", 1.5), lambda: m.orset_add(e("orset"), "a", True),
        lambda: m.lwwreg_set(e("lwwreg"), "a", 1, -1),
        lambda: m.lwwreg_set(e("lwwreg"), "a", float("nan"), 1),
        lambda: m.mvreg_set(e("mvreg"), "a", object()),
        lambda: m.ormap_get(e("ormap"), 7, "gcounter"),
        lambda: m.ormap_update(e("ormap"), "a", "k", "gcounter", {"a": 0}),
        lambda: m.encode("gcounter", {"a": object()}),
    ]  # fmt: skip
    for case in cases:
        with pytest.raises(CrdtError):
            case()


keys = st.sampled_from(["e", "c", "d", "p", "n", "v", "t", "r", "vals", "keys", "k", "a"])
junk = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats()
    | st.text(max_size=4) | st.binary(max_size=4) | st.sampled_from(m.TYPES),
    lambda ch: st.lists(ch, max_size=4)
    | st.dictionaries(keys | st.text(max_size=3) | st.integers(-2, 9), ch, max_size=4),
    max_leaves=24,
)  # fmt: skip


def accepted(t: str, raw: bytes) -> None:
    """decode either raises CrdtError or returns a valid, round-tripping state."""
    try:
        s = m.decode(t, raw)
    except CrdtError as exc:
        assert exc.code == "invalid_argument"
        return
    assert m.decode(t, m.encode(t, s)) == s
    m.value(t, s)
    m.merge(t, s, s)


@settings(max_examples=200, deadline=None)
@given(t=st.sampled_from(m.TYPES), obj=junk)
def test_decode_of_random_msgpack_raises_only_crdt_error(t: str, obj: Any) -> None:
    accepted(t, msgpack.packb(obj, use_bin_type=True))


@settings(max_examples=100, deadline=None)
@given(t=st.sampled_from(m.TYPES), raw=st.binary(max_size=48))
def test_decode_of_random_bytes_raises_only_crdt_error(t: str, raw: bytes) -> None:
    accepted(t, raw)


@pytest.mark.parametrize("t", m.TYPES)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_decode_of_corrupted_states_raises_only_crdt_error(t: str, data: st.DataObject) -> None:
    sim = run(t, data.draw(programs(t)))
    raw = bytearray(m.encode(t, fold(t, sim.states)))
    at = data.draw(st.integers(0, len(raw) - 1))
    raw[at] = data.draw(st.integers(0, 255))
    accepted(t, bytes(raw))
