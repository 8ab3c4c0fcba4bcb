"""Search (per partition): Wing & Gong's backtracking search with Lowe's memoization. The
ops' call and return events sit in one time-ordered doubly linked list (calls before
returns at equal times, i.e. ties count as concurrent). The calls before the first
remaining return are the candidates: no pending op completed before they were invoked.
Linearizing one (if the model accepts it) unlinks its call and return and goes deeper;
when no candidate works the last choice is undone. The history is linearizable as soon
as every ``ok`` op is linearized (unknown ops left over are taken as never applied).
Refinements, each keeping the search exact:

- memo with subsumption: configurations are (linearized acked ops, state, linearized
  unknown ops I); one is skipped if the same acked ops and state were reached before
  with a subset of I (having applied fewer unknown ops can only leave more options);
- canonical states (``symmetry``): values no op of the partition reads or compares
  with are all replaced by one placeholder - no step can tell them apart, so states
  differing only there have the same continuations and share a memo entry;
- interchangeable unknown ops (``symmetry``): unknown ops that are the same op up to
  unobserved written values, both available, can be swapped in any continuation, so
  only the first of each class is offered;
- forced moves: an acked read-only op that the current state satisfies is linearized
  with no alternatives tried (any success path stays valid with it moved first); so is
  an acked put / delete whose value no op left can see, over a value no op left can
  see (the common "overwritten unread" write: otherwise every order of such concurrent
  writes would be a separate configuration);
- stranded ops: a move that takes a key off a value that a pending acked op pins, when
  no op left may write that value again, is a dead end (that op can never come);
- dead unknown writes: once every op that may observe an unknown write is linearized
  (and no "!= e" observer can see e again), it is treated as never applied; so is an
  unknown cas (or txn whose failure branch writes nothing) once its expected value is
  gone for good (key off it, every write of it done): from then on it is a no-op;
- postponed unknown writes: an unknown write that only "!= e" observers still care about
  is only tried right before such an observer that needs it: an acked one that fails
  without it, or an unknown txn whose branch it flips (with one such write per key the
  observer compares, e.g. both keys of a txn).

Every distinct configuration is explored at most once; the search stops at its time
share or ``max_configurations`` and that partition's verdict is then ``"unknown"``,
never a guess. Rough costs (2 shared cores, measured, not promised): 16 clients, 5,000
ops over 10 keys, a few % unknown ops: well under a second; a workload-shaped 5,000-op
history over 4 txn key pairs with ~80 unknown writes per pair (a long soak): about a
second (it used to end "unknown"); all 16 clients on ONE key: seconds; the same without
failed-cas current values (many "!= e" facts): may end "unknown" - record them.
Proving a violation explores more than passing does, and shrinking it
(:mod:`chaos.checker.minimize`) takes
its own budget.
``Result.elapsed`` / ``PartitionResult.elapsed`` / ``Result.timing()`` say where the
time went.
"""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statekeeper.chaos.checker.model import INVALID, Prepared
from statekeeper.chaos.checker.reductions import reduce_unknown_writes
from statekeeper.chaos.checker.rules import DeadRule, symmetry, visibility_rules
from statekeeper.chaos.checker.values import UNKNOWN, Verdict


def bind_steps(ops: Sequence[Prepared], keys: Sequence[str]) -> list[Callable[[Any], Any]]:
    """The ops' model steps over a partition's state (its keys' values, in this order)."""
    idx = {k: i for i, k in enumerate(keys)}
    return [p.make_step(idx, len(keys) == 1) for p in ops]


def reduce_and_search(
    ops: list[Prepared],
    init: Any,
    initial: Mapping[str, Any],
    deadline: float,
    max_configurations: int,
    track: bool = False,
) -> tuple[_SearchOutcome, list[Prepared]]:
    """``reduce_unknown_writes`` then ``search_partition``; also returns the reduced ops (``best`` indexes them)."""
    reduced, _promoted, _pruned = reduce_unknown_writes(ops, initial)
    return search_partition(reduced, init, deadline, max_configurations, initial, track), reduced


@dataclass
class _SearchOutcome:
    verdict: Verdict
    configurations: int
    steps: int
    best: list[int] = field(default_factory=list)  # longest partial linearization (indices)
    reason: str = ""


def search_partition(
    ops: Sequence[Prepared],
    init: Any,
    deadline: float,
    max_configurations: int,
    initial: Mapping[str, Any],
    track: bool = False,
) -> _SearchOutcome:
    """Wing-Gong-Lowe search over ``ops`` (one partition, see the module docstring).

    ``init`` is the model's initial state, ``initial`` the same per key (frozen).
    """
    if not any(p.required for p in ops):
        return _SearchOutcome(True, 0, 0)
    return _Search(ops, init, initial).run(deadline, max_configurations, track)


def _links(
    ops: Sequence[Prepared],
) -> tuple[list[int], list[int], list[int], list[bool], list[int]]:
    """The ops' calls and returns as one time-ordered doubly linked list (entry 0 is
    the head): (next, previous, op of each entry, is a call, call -> its return)."""
    events = []
    for i, p in enumerate(ops):
        events.append((p.op.invoke_time, 0, i))  # 0: calls sort before returns on ties
        events.append((p.complete, 1, i))
    events.sort()
    size = 2 * len(ops) + 2
    nxt = list(range(1, size + 1))
    prv = list(range(-1, size - 1))
    ent_op = [0] * size
    ent_call = [False] * size
    match = [0] * size
    call_at = [0] * len(ops)
    for pos, (_t, kind, i) in enumerate(events, start=1):
        ent_op[pos] = i
        if kind == 0:
            ent_call[pos] = True
            call_at[i] = pos
        else:
            match[call_at[i]] = pos
    return nxt, prv, ent_op, ent_call, match


class _Search:
    """One partition's search state: the linked list, the current configuration
    (state, linearized acked ops ``rlin``, linearized or dead unknown ops ``ilin``, as
    bit masks over op indices) and the precomputed shortcuts."""

    def __init__(self, ops: Sequence[Prepared], init: Any, initial: Mapping[str, Any]):
        self.ops = ops
        self.required = [p.required for p in ops]
        self.required_left = sum(self.required)
        self.nxt, self.prv, self.ent_op, self.ent_call, self.match = _links(ops)
        keys = list(initial)  # the partition's keys, in state order
        self.single = single = len(keys) == 1
        kidx = {k: i for i, k in enumerate(keys)}
        self.steps = bind_steps(ops, keys)
        self.branch_of = [
            None if p.make_branch is None else p.make_branch(kidx, single) for p in ops
        ]
        self.canon, self.classes = symmetry(ops, keys)
        rules = visibility_rules(ops, initial, kidx)
        self.rules = rules
        self.has_rules = bool(rules.listeners or rules.leaving)
        # Postponing (below) moves an op later; a txn's branch depends on where it is.
        self.strong_mask = {x: m for x, m, _conds in rules.dead if ops[x].op.f != "txn"}
        self.key_at = [kidx[p.op.keys[0]] for p in ops]
        self.weak_keys = [set(p.weak) for p in ops]
        self.op_key = [p.op.keys[0] for p in ops]
        self.read_only = [p.read_only for p in ops]
        self.state, self.rlin, self.ilin = self.canon(init), 0, 0
        self.ilin = self.bury(0, 0, self.state, rules.dead + rules.stale)

    def invisible(self, rule: DeadRule, lin: int, st: Any) -> bool:
        """The value the rule's op writes can no longer be seen (see visibility_rules)."""
        _x, mask, conds = rule
        if mask & ~lin:
            return False
        single = self.single
        for om, wm, ki, e in conds:
            if om & ~lin and (wm & ~lin or (st if single else st[ki]) == e):
                return False
        return True

    def bury(self, rl: int, il: int, st: Any, to_check: Iterable[DeadRule]) -> int:
        """Mark unknown ops that can no longer matter as done (see visibility_rules)."""
        lin = rl | il
        pending = ~lin
        for rule in to_check:
            i, mask, conds = rule
            if mask & pending or (il >> i) & 1:
                continue  # cheap tests first: this runs for every rule, often
            if not conds or self.invisible(rule, lin, st):
                il |= 1 << i
                lin |= 1 << i
                pending = ~lin
        return il

    def stranded(self, left: list[tuple[int, Any]], st: Any, lin: int) -> bool:
        """A pending acked op needs a key to hold a value it no longer holds, and no op
        left may write that value again: it can never be linearized (dead end)."""
        pending = ~lin
        pinned, writers = self.rules.pinned, self.rules.writers
        for ki, b in left:
            if (st if self.single else st[ki]) == b:
                continue
            if pinned.get((ki, b), 0) & pending and not writers.get((ki, b), 0) & pending:
                return True
        return False

    def forced(self, i: int, lin: int) -> bool:
        """Acked op i may come now and nothing left can notice it (see candidates)."""
        state, steps = self.state, self.steps
        if self.read_only[i]:
            return steps[i](state) is not INVALID
        rule = self.rules.unseen.get(i)
        if rule is None or not self.invisible(rule, lin, state):
            return False
        # An acked put / delete nobody left can see, over a value nobody left can see:
        # linearizing it changes nothing observable (if it may come now: a counted
        # delete may not).
        ki = self.key_at[i]
        cur = state if self.single else state[ki]
        return not self.rules.observers.get((ki, cur), 0) & ~lin and (
            steps[i](state) is not INVALID
        )

    def candidates(self) -> list[tuple[int, ...]]:
        """The moves to try from the current configuration, in order.

        Calls before the first remaining return: no pending op completed before them.
        Required ops first, so configurations with fewer unknown ops applied get cached
        first and subsume the others (see the memo in ``run``). Dead unknown ops (bit
        set in ilin without being linearized) are never needed. An unknown write that
        only "!=" observers still care about ("weak-only": nothing left reads or
        compares with its value) is only worth applying right before such an observer
        that fails without it, or an unknown txn whose branch it may flip (anywhere else
        it could be moved up to that point or left out), so it is only offered in a move
        (x, observer), or (x, y, observer) when the observer needs a write of each of
        two keys (``chains``). A forced op (``forced``) is the only move: a success path that
        has it later stays valid with it moved first. Of the unknown ops of one class
        (``symmetry``) only the first is offered.
        """
        req: list[tuple[int, ...]] = []
        opt: list[tuple[int, ...]] = []
        postponed: list[int] = []
        offered: set[Any] = set()
        ilin, required, classes = self.ilin, self.required, self.classes
        ent_op, nxt = self.ent_op, self.nxt
        lin = self.rlin | ilin
        e = nxt[0]
        while self.ent_call[e]:
            i = ent_op[e]
            if required[i]:
                if self.forced(i, lin):
                    return [(e,)]
                req.append((e,))
            elif not (ilin >> i) & 1 and classes[i] not in offered:
                if classes[i] is not None:
                    offered.add(classes[i])
                mask = self.strong_mask.get(i)
                if mask is not None and not mask & ~lin:
                    postponed.append(e)
                else:
                    opt.append((e,))
            e = nxt[e]
        if not postponed:
            return req + opt
        return req + self.chains(req + opt, postponed) + opt

    def chains(
        self, observers: list[tuple[int, ...]], postponed: list[int]
    ) -> list[tuple[int, ...]]:
        """Moves (x.., o): postponed writes of distinct keys o has "!=" facts about, then
        o (an observer may need one write per key: a txn comparing two keys)."""
        weak_keys, op_key, ent_op = self.weak_keys, self.op_key, self.ent_op
        out: list[tuple[int, ...]] = []
        for (c,) in observers:
            wk = weak_keys[ent_op[c]]
            if not wk:
                continue
            by_key: dict[str, list[int]] = defaultdict(list)
            for x in postponed:
                if op_key[ent_op[x]] in wk:
                    by_key[op_key[ent_op[x]]].append(x)
            groups = list(by_key.values())
            for r in range(1, len(groups) + 1):
                for chosen in itertools.combinations(groups, r):
                    out += [(*xs, c) for xs in itertools.product(*chosen)]
        return out

    def pointless_chain(self, move: tuple[int, ...]) -> bool:
        """(x.., o) where o does not need all of the postponed writes x right now.

        An acked observer that is fine without one of them does not need it; an unknown
        one (a txn) needs them if together they flip its branch and no fewer of them
        do the same. A write not needed could as well wait for the next op that needs
        it (nothing reads its value), or never happen.
        """
        steps, ent_op = self.steps, self.ent_op
        o = ent_op[move[-1]]
        xs = [ent_op[e] for e in move[:-1]]

        def after(chosen: Sequence[int]) -> Any:
            st = self.state
            for i in chosen:
                st = steps[i](st)
                if st is INVALID:
                    break
            return st

        subsets = [c for r in range(len(xs)) for c in itertools.combinations(xs, r)]
        if self.required[o]:
            return any(
                (st := after(c)) is not INVALID and steps[o](st) is not INVALID
                for c in subsets
            )
        branch = self.branch_of[o]
        if branch is None:
            return False
        full = after(xs)
        if full is INVALID:
            return True
        flipped = branch(full)
        return any(
            (st := after(c)) is not INVALID and branch(st) == flipped for c in subsets
        )

    def apply(self, move: tuple[int, ...]) -> tuple[Any, int, int] | None:
        """(state, rlin, ilin) after the move, or None if the model rejects it or it
        leads nowhere (a stranded op)."""
        new, new_r, new_i = self.state, self.rlin, self.ilin
        single, rules = self.single, self.rules
        to_check: list[DeadRule] = []
        left: list[tuple[int, Any]] = []  # (key index, value) the move took a key off
        for entry in move:
            i = self.ent_op[entry]
            before = new
            new = self.steps[i](new)
            if new is INVALID:
                return None
            if not self.read_only[i]:
                new = self.canon(new)
                if new != before:
                    if single:
                        left.append((0, before))
                    else:
                        left += [(ki, b) for ki, b in enumerate(before) if b != new[ki]]
            if self.required[i]:
                new_r |= 1 << i
            else:
                new_i |= 1 << i
            if self.has_rules:
                to_check += rules.listeners.get(i, ())
        if left and self.stranded(left, new, new_r | new_i):
            return None
        if self.has_rules:
            for kb in left:  # a key left a value: "!= e" observers may stop caring
                to_check += rules.leaving.get(kb, ())
        if to_check:
            new_i = self.bury(new_r, new_i, new, to_check)
        return new, new_r, new_i

    def link(self, move: tuple[int, ...], unlink: bool) -> None:
        """Take the move's calls and returns out of the list, or put them back (dancing
        links: in reverse order)."""
        nxt, prv, match, required = self.nxt, self.prv, self.match, self.required
        for entry in move if unlink else reversed(move):
            i = self.ent_op[entry]
            r = match[entry]
            if unlink:
                p, q = prv[entry], nxt[entry]
                nxt[p], prv[q] = q, p
                p, q = prv[r], nxt[r]
                nxt[p], prv[q] = q, p
            else:
                nxt[prv[r]] = r
                prv[nxt[r]] = r
                nxt[prv[entry]] = entry
                prv[nxt[entry]] = entry
            if required[i]:
                self.required_left += -1 if unlink else 1

    def run(self, deadline: float, max_configurations: int, track: bool) -> _SearchOutcome:
        """Depth-first search with the memo; see the module docstring.

        Memo: (linearized required ops, state) -> the sets of linearized info ops seen
        with it. Config (R, s, I) is skipped when (R, s, I') was seen with I' a subset
        of I: every continuation from (R, s, I) is open to (R, s, I') too (it can leave
        the extra unknown ops out; they never block, returning at +inf), so I' is at
        least as good. With no info ops this is plain Lowe memoization.
        """
        cache: dict[tuple[int, Any], list[int]] = {}
        configurations = 0
        # (call entries linearized by the move, configuration before it)
        path: list[tuple[tuple[int, ...], Any, int, int]] = []
        best: list[int] = []
        frames: list[list[Any]] = [[self.candidates(), 0]]
        it = 0
        clock = time.monotonic
        while True:
            if (it & 0x3FF) == 0 and clock() > deadline:  # on the first step, every 1024
                return _SearchOutcome(UNKNOWN, configurations, it, best, "time limit")
            it += 1
            frame = frames[-1]
            cands, k = frame
            if k == len(cands):
                # Nothing more to try here (a pending op's return is next): undo a move.
                frames.pop()
                if not path:
                    return _SearchOutcome(False, configurations, it, best)
                move, self.state, self.rlin, self.ilin = path.pop()
                self.link(move, unlink=False)
                continue
            frame[1] = k + 1
            move = cands[k]
            if len(move) > 1 and self.pointless_chain(move):
                continue
            after = self.apply(move)
            if after is None:
                continue
            new, new_r, new_i = after
            seen = cache.get((new_r, new))
            if seen is None:
                cache[(new_r, new)] = [new_i]
            elif any(m | new_i == new_i for m in seen):
                continue
            else:
                seen.append(new_i)
            configurations += 1
            if configurations > max_configurations:
                return _SearchOutcome(UNKNOWN, configurations, it, best, "configuration limit")
            path.append((move, self.state, self.rlin, self.ilin))
            self.state, self.rlin, self.ilin = after
            self.link(move, unlink=True)
            if self.required_left == 0:
                return _SearchOutcome(True, configurations, it, best)
            if track and sum(len(step[0]) for step in path) > len(best):
                best = [self.ent_op[e] for step in path for e in step[0]]
            frames.append([self.candidates(), 0])
