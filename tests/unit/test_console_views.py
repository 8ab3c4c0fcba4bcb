"""The console's Keys and Agents views (console/views/) over the in-memory clients of
test_agent_fake.py: decoding, diffs, the agent list's paging (both id sources, prefix
search, ids that sort differently as keys and as streams), timeline windows, state at a
step, and the rollback preview against what rollback then does."""

from __future__ import annotations

import json

import msgpack
import pytest

from statekeeper.client.agent import Agent, encode
from statekeeper.client.agent.listing import agent_page_plan, key_of
from statekeeper.client.plan import run
from statekeeper.client.results import StreamList
from statekeeper.console.views import agents as av
from statekeeper.console.views import keys as kv
from statekeeper.console.views.values import decode_value, diff_data, diff_values

from .test_agent_fake import AsyncMemoryClient, FakeStreamInfo, MemoryClient


class PagedStreams(MemoryClient):
    """MemoryClient whose list_streams pages as the server's does (limit + continuation)."""

    def list_streams(
        self, prefix=None, *, ns=None, limit=None, continuation=None, consistency=None
    ):
        self._record("list_streams", (prefix,), {"continuation": continuation})
        ns = self._ns(ns)
        names = sorted(s for (n, s) in self.streams if n == ns and s.startswith(prefix or ""))
        names = [s for s in names if continuation is None or s >= continuation]
        page, more = names[: limit or 1000], len(names) > (limit or 1000)
        infos = [FakeStreamInfo(s, len(self.streams[(ns, s)])) for s in page]
        return StreamList(infos, self.rev, more, names[len(page)] if more else None)


# -- values --------------------------------------------------------------------------------


def test_decode_value_formats() -> None:
    assert decode_value(b"").format == "empty"
    j = decode_value(b'{"b": 1, "a": [1, 2]}')
    assert (j.format, j.data) == ("json", {"a": [1, 2], "b": 1})
    m = decode_value(msgpack.packb({"x": b"\x00\x01", "n": 3}))
    assert m.format == "msgpack" and m.data == {"x": {"$bytes": "AAE="}, "n": 3}
    e = decode_value(encode({"step": 4, "notes": ["a"]}))
    assert e.format == "envelope" and e.data == {"step": 4, "notes": ["a"]}
    assert e.header is not None and e.header["format"] == "msgpack"
    # One byte of text is a msgpack int too: only containers count as msgpack.
    assert decode_value(b"a").format == "text"
    assert decode_value("héllo".encode()).text == "héllo"
    b = decode_value(b"\xff\xfe\x00")
    assert (b.format, b.size, b.text) == ("binary", 3, "//4A")


def test_structural_diff_names_old_values_and_list_inserts() -> None:
    changes, cut = diff_data(
        {"a": [1, 2, 3], "b": {"c": 1}, "d": 0}, {"a": [0, 1, 2, 3], "b": {"c": 2}}
    )
    assert not cut
    by = {(c.op, c.path): c for c in changes}
    assert by[("add", "/a/0")].new == 0  # one insertion, not four replacements
    assert by[("replace", "/b/c")].old == 1 and by[("replace", "/b/c")].new == 2
    assert by[("remove", "/d")].old == 0
    d = diff_values(decode_value(b'{"x": 1}'), decode_value(b'{"x": 2}'))
    assert d.structural and not d.same and any(line.startswith("+") for line in d.lines)
    t = diff_values(decode_value(b"one\ntwo"), decode_value(b"one\nthree"))
    assert not t.structural and t.changes == () and "+three" in t.lines


# -- keys ----------------------------------------------------------------------------------


async def test_browse_keys_pages_with_a_start_key_cursor() -> None:
    c = MemoryClient()
    for i in range(7):
        c.put(f"p/{i}", b"v")
    c.put("q/0", b"v")
    ac = AsyncMemoryClient(c)
    seen, cursor = [], None
    while True:
        page = await kv.browse_keys(ac, "default", "p/", limit=3, cursor=cursor)
        seen += [r.key for r in page.keys]
        if page.cursor is None:
            break
        cursor = page.cursor
    assert seen == [f"p/{i}" for i in range(7)]


async def test_key_revisions_walk_back_and_diff() -> None:
    c = MemoryClient()
    revs = [c.put("k", json.dumps({"n": i}).encode()).revision for i in range(5)]
    ac = AsyncMemoryClient(c)
    page = await kv.key_revisions(ac, "default", "k", limit=3)
    assert [r.mod_revision for r in page.revisions] == revs[::-1][:3]
    assert page.versions == 5 and page.requests == 3 and page.cursor == revs[2] - 1
    rest = await kv.key_revisions(ac, "default", "k", limit=3, before=page.cursor)
    assert [r.mod_revision for r in rest.revisions] == revs[1::-1] and rest.cursor is None
    d = await kv.key_diff(ac, "default", "k", revs[0], revs[4])
    assert [(ch.op, ch.path, ch.old, ch.new) for ch in d.changes] == [("replace", "/n", 0, 4)]


# -- the agent list ------------------------------------------------------------------------

IDS = ["a", "ab", "ab-c", "ab.x", "b", "c-1", "c", "d"]


def _agents(c: MemoryClient) -> None:
    """Ids owning keys only, a stream only, or both; 'ab' sorts after 'ab-c' as keys."""
    for i, aid in enumerate(IDS):
        agent = Agent(c, aid, ns="default")
        if i % 3 != 1:
            agent.log("e", {"i": i})
        if i % 3 != 2:
            agent.checkpoint({"i": i}, step=1)
    c.put("agent/stray", b"not an agent's key")


@pytest.mark.parametrize("limit", [1, 2, 3, 50])
def test_agent_pages_list_every_agent_once_in_key_order(limit: int) -> None:
    c = PagedStreams()
    _agents(c)
    import statekeeper.client.agent.listing as listing

    listing_page = listing.STREAM_PAGE
    listing.STREAM_PAGE = 2  # several stream pages per agent page
    try:
        got, after, token, done = [], None, None, False
        while True:
            p = run(c, agent_page_plan("default", "", limit, after, token, done))
            assert len(p.ids) <= limit
            got += p.ids
            if p.after is None:
                break
            after, token, done = p.after, p.stream_token, p.streams_done
    finally:
        listing.STREAM_PAGE = listing_page
    assert got == sorted(IDS, key=key_of)


async def test_list_agents_rows_and_prefix_search() -> None:
    c = MemoryClient()
    _agents(c)
    page = await av.list_agents(AsyncMemoryClient(c), "default", prefix="ab", limit=2)
    assert [r.agent for r in page.agents] == ["ab-c", "ab.x"] and page.cursor
    more = await av.list_agents(AsyncMemoryClient(c), "default", prefix="ab", cursor=page.cursor)
    assert [r.agent for r in more.agents] == ["ab"] and more.cursor is None
    rows = {r.agent: r for r in page.agents + more.agents}
    assert rows["ab"].ckpt == 1 and rows["ab"].events == 0  # a checkpoint only
    assert rows["ab-c"].ckpt is None and rows["ab-c"].events == 1  # a stream only
    assert rows["ab.x"].last_activity_ms == max(
        rows["ab.x"].checkpointed_ms, rows["ab.x"].last_event_ms
    )


# -- one agent -----------------------------------------------------------------------------


def _busy(c: MemoryClient, rollback: bool = True) -> Agent:
    """30 events over steps 1..15, a checkpoint after every 3rd step, a rollback to 6."""
    a = Agent(c, "busy", ns="default")
    for step in range(1, 16):
        a.log("e", {"s": step, "n": 0}, step=step)
        a.log("e", {"s": step, "n": 1}, step=step)
        if step % 3 == 0:
            a.checkpoint({"upto": step}, step=step)
    if rollback:
        a.rollback(ckpt=2)
    return a


async def test_timeline_windows_cover_the_history() -> None:
    c = MemoryClient()
    full = _busy(c).history()
    ac = AsyncMemoryClient(c)
    rows, before, windows = [], None, 0
    while True:
        w = await av.agent_timeline(ac, "default", "busy", before=before, limit=7)
        rows = list(w.rows) + rows
        windows += 1
        if w.older is None:
            break
        before = w.older
    assert rows == full and windows == 5
    newest = await av.agent_timeline(ac, "default", "busy", limit=7)
    back = await av.agent_timeline(ac, "default", "busy", before=newest.older, limit=7)
    assert back.newer is not None
    again = await av.agent_timeline(ac, "default", "busy", before=back.newer, limit=7)
    assert again.rows == newest.rows


async def test_state_at_lists_the_events_after_the_checkpoint() -> None:
    c = MemoryClient()
    _busy(c, rollback=False)
    s = await av.state_at(AsyncMemoryClient(c), "default", "busy", 8)
    assert s.checkpoint.n == 2 and s.state.data == {"upto": 6}
    assert [(r.step, r.seq) for r in s.events] == [(7, 13), (7, 14), (8, 15), (8, 16)]


async def test_rollback_preview_is_what_rollback_does() -> None:
    c = MemoryClient()
    _busy(c, rollback=False)
    ac = AsyncMemoryClient(c)
    no = await av.rollback_preview(ac, "default", "busy", to=8)
    assert not no.possible and "reducer" in no.reason and no.target.n == 2 and no.diff is None
    p = await av.rollback_preview(ac, "default", "busy", ckpt=4)
    assert p.possible and p.current.n == 5 and p.target.n == 4
    assert [(ch.op, ch.path, ch.old, ch.new) for ch in p.diff.changes] == [
        ("replace", "/upto", 15, 12)
    ]
    done = await av.rollback_agent(ac, "default", "busy", ckpt=4, expect_head=p.current.n)
    head = await av.checkpoint_diff(ac, "default", "busy", p.target.n, done.n)
    assert head.diff.same and head.diff.right.data == p.diff.right.data
    with pytest.raises(av.CheckpointConflict):
        await av.rollback_agent(ac, "default", "busy", ckpt=1, expect_head=p.current.n)
