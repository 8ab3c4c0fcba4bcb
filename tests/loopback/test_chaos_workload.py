"""How the workload turns answers into outcomes (ok / fail / unknown), against a fake
node on loopback; the run options and the CLI parser."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import threading
import zlib
from collections import Counter
from collections.abc import Callable, Iterator

import msgpack
import pytest
from aiohttp import web

from statekeeper.chaos.history import HistoryWriter, parse_events
from statekeeper.chaos.workload import Workload, classify_error
from statekeeper.chaos.workload_config import OpMix, WorkloadConfig
from statekeeper.client import Conflict, Timeout, Unavailable
from statekeeper.client.responses import connection_error


def test_classify_error_only_trusts_proofs_of_not_sent() -> None:
    assert classify_error(connection_error("connect", "http://x")) == ("connection_failed", True)
    assert classify_error(connection_error("lost", "http://x")) == ("connection_lost", False)
    assert classify_error(connection_error("timeout", "http://x")) == ("client_timeout", False)
    assert classify_error(Unavailable("no leader", code="unavailable", status=503)) == (
        "unavailable",
        True,
    )
    # "unavailable" without the node's 503 (e.g. a client-side guess) proves nothing.
    assert classify_error(Unavailable("?", code="unavailable", status=None)) == (
        "unavailable",
        False,
    )
    assert classify_error(Timeout("t", code="timeout", status=504)) == ("timeout", False)
    assert classify_error(Conflict("c")) == ("compare_failed", False)
    assert classify_error(TimeoutError()) == ("client_timeout", False)
    assert classify_error(RuntimeError("x")) == ("RuntimeError", False)


def test_workload_config_rejects_odd_key_counts() -> None:
    with pytest.raises(ValueError, match="even"):
        Workload(["http://127.0.0.1:1"], HistoryWriter(io.StringIO()), WorkloadConfig(keys=3))


# -- a fake node answering every request the same way ------------------------------


class FakeNode:
    """Answers every request with ``status`` / ``body``, or with what ``handler(path,
    request body)`` returns."""

    def __init__(
        self, status: int, body: dict, handler: Callable[[str, dict], tuple[int, dict]] | None = None
    ) -> None:
        self.status, self.body, self.handler = status, body, handler
        self.requests = 0
        self.url = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        raw = await request.read()
        if self.handler is not None:
            status, body = self.handler(request.path, msgpack.unpackb(raw) if raw else {})
            return web.json_response(body, status=status)
        return web.json_response(self.body, status=self.status)

    async def _main(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def __enter__(self) -> FakeNode:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


PUT_ONLY = OpMix(get=0, put=1, cas=0, txn=0, delete=0)
KV_ONLY = 0.0  # stream_share: these tests are about the kv ops (streams: further down)


def run_workload(
    endpoints: list[str],
    seconds: float = 0.6,
    config: WorkloadConfig | None = None,
    node_ids: list[str] | None = None,
    **kw,
) -> list:
    """The ops a Workload on ``endpoints`` recorded in ``seconds``; its config is ``config``,
    or else 3 clients on 4 keys with short deadlines, and ``kw``."""
    buf = io.StringIO()
    h = HistoryWriter(buf)
    cfg = config or WorkloadConfig(clients=3, keys=4, op_deadline=0.3, attempt_timeout=0.2, **kw)
    w = Workload(endpoints, h, cfg, run_id="test", node_ids=node_ids)
    w.start()
    threading.Event().wait(seconds)
    w.stop()
    h.flush()
    return parse_events(json.loads(line) for line in buf.getvalue().splitlines())


@pytest.fixture
def unavailable_node() -> Iterator[FakeNode]:
    body = {"error": {"code": "unavailable", "message": "no leader"}}
    with FakeNode(503, body) as node:
        yield node


def test_unavailable_answers_are_fail_and_retried(unavailable_node: FakeNode) -> None:
    ops = run_workload([unavailable_node.url])
    assert ops and {o.outcome for o in ops} == {"fail"}
    assert unavailable_node.requests > len(ops)  # each op retried until its deadline
    writes = [o for o in ops if o.f in ("put", "cas", "txn", "delete")]
    assert writes and all(o.input["idempotency_key"].startswith("test-") for o in writes)
    # Unique values per write: "<process>-<counter>" (txn second key: + "b"); an
    # idempotency probe's re-send repeats its probe's value on purpose.
    values = [o.input["value"] for o in ops if o.f in ("put", "cas") and "resend_of" not in o.input]
    assert len(values) == len(set(values))


def test_timeouts_are_unknown_never_fail() -> None:
    body = {"error": {"code": "timeout", "message": "no commit in time"}}
    with FakeNode(504, body) as node:
        ops = run_workload([node.url])
    writes = [o for o in ops if o.f != "get"]
    assert writes and {o.outcome for o in writes} == {"info"}
    assert all(o.output.get("error") == "timeout" for o in writes)


def test_one_unknown_attempt_makes_the_op_unknown(unavailable_node: FakeNode) -> None:
    # Attempts alternate between a node that says "unavailable" (nothing submitted) and
    # one that times out (maybe submitted): the outcome must be unknown, not fail.
    body = {"error": {"code": "timeout", "message": "x"}}
    with FakeNode(504, body) as slow:
        ops = run_workload(
            [unavailable_node.url, slow.url],
            seconds=1.0,
            mix=PUT_ONLY,
            stream_share=KV_ONLY,
        )
    retried = [o for o in ops if o.outcome == "info"]
    assert retried and all(o.f == "put" for o in ops)
    assert not [o for o in ops if o.outcome == "fail" and o.output.get("error") == "timeout"]


def test_refused_connections_are_fail() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    ops = run_workload([f"http://127.0.0.1:{port}"], seconds=0.4)
    assert ops and {o.outcome for o in ops} == {"fail"}
    assert {o.output.get("error") for o in ops} == {"connection_failed"}


def test_pinned_readers_only_read() -> None:
    body = {"error": {"code": "unavailable", "message": "x"}}
    with FakeNode(503, body) as node:
        cfg = WorkloadConfig(clients=4, keys=2, op_deadline=0.2, pinned_reader_share=0.5)
        ops = run_workload([node.url], 0.5, cfg)
    assert {o.f for o in ops if o.process in (2, 3)} <= {"get", "read_stream"}
    assert "get" in {o.f for o in ops if o.process in (2, 3)}


# -- options and CLI ------------------------------------------------------------------


def test_run_options_phases() -> None:
    from statekeeper.chaos.runner import RunOptions

    assert RunOptions(duration=30).phases() == pytest.approx((6.0, 10.5, 13.5))
    assert RunOptions(duration=10).phases() == pytest.approx((2.0, 3.5, 4.5))
    assert RunOptions(duration=20, warmup=1, fault_window=4).phases() == (1, 4, 15)
    with pytest.raises(ValueError, match="leaves"):
        RunOptions(duration=6).validate()
    with pytest.raises(ValueError, match="even"):
        RunOptions(keys=5).validate()


def test_cli_parses_the_documented_commands() -> None:
    from statekeeper.chaos.cli import build_parser

    p = build_parser()
    a = p.parse_args("run --fault kill-leader --duration 30 --clients 16 --seed 7".split())
    assert (a.action, a.fault, a.duration, a.clients, a.seed, a.fsync) == (
        "run",
        "kill-leader",
        30,
        16,
        7,
        "always",
    )
    a = p.parse_args("suite --smoke --only a,b --fsync never --debug-unsafe-reads".split())
    assert (a.action, a.smoke, a.only, a.fsync, a.debug_unsafe_reads) == (
        "suite",
        True,
        "a,b",
        "never",
        True,
    )


def test_statekeeper_chaos_is_registered(capsys) -> None:
    from statekeeper.chaos.cli import EXIT_USAGE
    from statekeeper.cluster import cli

    assert cli.main(["chaos", "run", "--fault", "no-such-fault"]) == EXIT_USAGE
    assert "unknown fault 'no-such-fault'" in capsys.readouterr().err
    node = cli.build_parser().parse_args(["node", "--id", "node-0", "--unsafe-reads"])
    assert node.unsafe_reads is True


# -- which node serves each op -------------------------------------------------------


def test_op_node_spreads_every_client_over_every_node() -> None:
    from statekeeper.chaos.workload_config import op_node

    for n_nodes in (3, 5):
        for p in range(7):
            firsts = [op_node(p, n, 0, n_nodes) for n in range(1, 1 + 10 * n_nodes)]
            assert sorted(set(firsts)) == list(range(n_nodes))
            assert all(firsts.count(i) == 10 for i in range(n_nodes))  # evenly
            # a retry goes to the next node, and the attempts of one op visit them all
            assert sorted(op_node(p, 4, a, n_nodes) for a in range(n_nodes)) == list(range(n_nodes))
        # at any moment (same op number), the clients cover the nodes evenly too
        at_once = [op_node(p, 9, 0, n_nodes) for p in range(3 * n_nodes)]
        assert all(at_once.count(i) == 3 for i in range(n_nodes))


def test_pinned_readers_cover_every_node_when_there_are_enough_clients() -> None:
    from statekeeper.chaos.workload_config import pinned_nodes

    assert pinned_nodes(16, 0.25, 3) == [0, 1, 2, 0]  # unchanged for the default cluster
    assert sorted(pinned_nodes(16, 0.25, 5)) == [0, 1, 2, 3, 4]  # one per node
    assert pinned_nodes(4, 0.25, 3) == [0]  # too few clients to cover every node
    assert pinned_nodes(16, 0.0, 3) == []


def test_ops_go_to_every_node_and_the_answering_node_is_recorded() -> None:
    with FakeNode(200, {"revision": 5}) as a, FakeNode(200, {"revision": 5}) as b:
        cfg = WorkloadConfig(
            clients=2, keys=2, op_deadline=0.3, pinned_reader_share=0, mix=PUT_ONLY, resend_share=0,
            stream_share=KV_ONLY,
        )  # fmt: skip
        ops = run_workload([a.url, b.url], 0.5, cfg, node_ids=["na", "nb"])
    assert ops and {o.outcome for o in ops} == {"ok"}
    assert a.requests > 3 and b.requests > 3
    for o in ops:  # op n of client p starts at node (p + n) % 2 and succeeds there
        n = int(o.input["value"].split("-")[1])
        assert o.output["node"] == ["na", "nb"][(o.process + n) % 2], o


def test_a_refusing_node_is_skipped_and_the_op_recorded_where_it_succeeded(
    unavailable_node: FakeNode,
) -> None:
    with FakeNode(200, {"revision": 5}) as good:
        cfg = WorkloadConfig(
            clients=2, keys=2, op_deadline=2.0, pinned_reader_share=0, mix=PUT_ONLY, resend_share=0,
            stream_share=KV_ONLY,
        )  # fmt: skip
        ops = run_workload([unavailable_node.url, good.url], 0.5, cfg, node_ids=["bad", "good"])
    ok = [o for o in ops if o.outcome == "ok"]
    assert ok and {o.output["node"] for o in ok} == {"good"}
    # An op can fail only when the workload stopped between its refusal and its retry:
    # then it is its client's last op (seen once in five runs on a loaded machine).
    last = {max(o.id for o in ops if o.process == p) for p in {o.process for o in ops}}
    assert all(o.id in last for o in ops if o.outcome != "ok"), [o for o in ops if o.outcome != "ok"]
    assert unavailable_node.requests >= len(ops) // 2  # half the ops tried it first


def test_idempotency_probes_are_resent_with_the_same_key_and_value() -> None:
    with FakeNode(200, {"revision": 5}) as node:
        cfg = WorkloadConfig(
            clients=2, keys=2, op_deadline=0.3, pinned_reader_share=0,
            resend_share=0.5, resend_delay=(0.01, 0.02), mix=PUT_ONLY, stream_share=KV_ONLY,
        )  # fmt: skip
        ops = run_workload([node.url], 0.6, cfg)
    by_id = {o.id: o for o in ops}
    resends = [o for o in ops if "resend_of" in o.input]
    assert resends
    for r in resends:
        first = by_id[r.input["resend_of"]]
        assert first.key == r.key and first.key.startswith("idem-")
        assert (first.input["value"], first.input["idempotency_key"]) == (
            r.input["value"], r.input["idempotency_key"])  # fmt: skip
        assert first.invoke_time < r.invoke_time
    # A probe key is written by its probe (and its re-sends) only.
    writers: dict[str, set[str]] = {}
    for o in ops:
        if o.key and o.key.startswith("idem-"):
            writers.setdefault(o.key, set()).add(o.input["idempotency_key"])
    assert all(len(iks) == 1 for iks in writers.values())
    # Other writes keep unique values.
    values = [o.input["value"] for o in ops if o.f == "put" and "resend_of" not in o.input]
    assert len(values) == len(set(values))


def test_pinned_readers_mix_serializable_reads_and_give_up_quickly(
    unavailable_node: FakeNode,
) -> None:
    cfg = WorkloadConfig(
        clients=2, keys=2, op_deadline=5.0, pinned_reader_share=1.0, serializable_share=0.5,
        pinned_op_deadline=0.2, stream_share=KV_ONLY,
    )  # fmt: skip
    ops = run_workload([unavailable_node.url], 1.0, cfg, node_ids=["n0"])
    assert {o.f for o in ops} == {"get"}
    kinds = {o.input.get("consistency", "linearizable") for o in ops}
    assert kinds == {"linearizable", "serializable"}
    # each read gave up after ~0.2 s (not op_deadline): many reads per client per second
    assert len(ops) >= 6 and all(o.output.get("node") == "n0" for o in ops)


def test_workload_rejects_bad_spread_and_node_ids() -> None:
    with pytest.raises(ValueError, match="spread"):
        Workload(["http://127.0.0.1:1"], HistoryWriter(io.StringIO()), WorkloadConfig(spread="x"))
    with pytest.raises(ValueError, match="node_ids"):
        Workload(["http://127.0.0.1:1"], HistoryWriter(io.StringIO()), node_ids=["a", "b"])


# -- event streams (chaos.stream_workload) --------------------------------------------


STREAMS_ONLY = {"stream_share": 1.0, "resend_share": 0.0, "pinned_reader_share": 0.0}


def stream_node(append: Callable[[dict], tuple[int, dict]], last_seq: int = 7) -> FakeNode:
    """A fake node whose streams all hold ``last_seq`` events (reads page through them,
    two per page) and whose appends answer ``append(request)``."""

    def handler(path: str, body: dict) -> tuple[int, dict]:
        if path.endswith("/streams/append"):
            return append(body)
        if not path.endswith("/streams/read"):
            return 200, {"revision": 5}  # a kv write
        if body.get("direction") == "backward":
            events = [{"seq": last_seq, "data": "x", "type": "", "time": 1, "revision": 3}]
            return 200, {"revision": 5, "stream": body["stream"], "events": events,
                         "last_seq": last_seq, "more": False}  # fmt: skip
        start = int(body.get("continuation") or body.get("start") or 1)
        seqs = list(range(start, min(start + 2, last_seq + 1)))
        page = {"revision": 5, "stream": body["stream"], "last_seq": last_seq,
                "events": [{"seq": n, "data": f"d{n}", "type": "", "time": 1, "revision": 3,
                            "id": f"e{n}"} for n in seqs],
                "more": seqs[-1] < last_seq if seqs else False}  # fmt: skip
        if page["more"]:
            page["continuation"] = str(seqs[-1] + 1)
        return 200, page

    return FakeNode(200, {}, handler)


def appended_at(first: int) -> Callable[[dict], tuple[int, dict]]:
    def answer(body: dict) -> tuple[int, dict]:
        n = len(body["events"])
        events = [{"seq": first + i, "duplicate": False} for i in range(n)]
        return 200, {"revision": 6, "stream": body["stream"], "first_seq": first,
                     "last_seq": first + n - 1, "events": events}  # fmt: skip

    return answer


def test_stream_appends_expect_the_known_last_seq_and_record_their_answers() -> None:
    with stream_node(appended_at(8)) as node:
        ops = run_workload(
            [node.url], 0.8, stream_any_share=0.3, stream_resend_share=0.0, **STREAMS_ONLY
        )
    appends = [o for o in ops if o.f == "append"]
    assert appends and {o.outcome for o in appends} == {"ok"}
    # expect: "any", the tail read's 7, or the last answer's last_seq (8 + events - 1)
    assert {o.input["expect"] for o in appends} >= {"any", 7}
    assert {o.input["expect"] for o in appends} <= {"any", 7, 8, 9, 10}
    ids = [e["id"] for o in appends for e in o.input["events"]]
    assert len(ids) == len(set(ids)) and all(1 <= len(o.input["events"]) <= 3 for o in appends)
    for o in appends:
        assert all(e["data"].startswith(f"event {e['id']} ") for e in o.input["events"])
        assert o.input["stream"] in ("s0", "s1")
        assert o.output["seqs"] == list(range(8, 8 + len(o.input["events"])))
        assert o.output["duplicates"] == [False] * len(o.input["events"])
    assert len({o.input["idempotency_key"] for o in appends}) == len(appends)
    tails = [o for o in ops if o.f == "read_stream" and o.input["direction"] == "backward"]
    assert tails and all(o.output["last_seq"] == 7 and o.input["limit"] == 1 for o in tails)


def test_whole_stream_reads_page_to_the_end() -> None:
    with stream_node(appended_at(8), last_seq=5) as node:
        ops = run_workload([node.url], 0.5, stream_read_share=1.0, **STREAMS_ONLY)
    reads = [o for o in ops if o.f == "read_stream"]
    assert reads and {o.outcome for o in reads} == {"ok"}
    for o in reads:
        assert o.input == {"stream": o.input["stream"], "start": 1, "direction": "forward"}
        assert o.output["events"] == [[n, f"e{n}", f"d{n}"] for n in range(1, 6)]
        assert (o.output["pages"], o.output["last_seq"]) == (3, 5)


def test_an_expectation_failure_is_a_failure_with_the_servers_last_seq() -> None:
    err = {"error": {"code": "expectation_failed", "message": "x", "last_seq": 9, "exists": True}}
    with stream_node(lambda body: (409, err)) as node:
        ops = run_workload([node.url], 0.8, stream_any_share=0.0, **STREAMS_ONLY)
    appends = [o for o in ops if o.f == "append"]
    assert appends and {o.outcome for o in appends} == {"fail"}
    assert all(o.output["error"] == "expectation_failed" for o in appends)
    assert all((o.output["last_seq"], o.output["exists"]) == (9, True) for o in appends)
    # the 409's last_seq is what the client expects next time; a 409 is never re-sent
    assert {o.input["expect"] for o in appends} == {7, 9}
    assert not [o for o in appends if "retry_of" in o.input]


def test_unknown_appends_are_resent_with_the_same_events_and_a_new_op_key() -> None:
    err = {"error": {"code": "timeout", "message": "no commit in time"}}
    with stream_node(lambda body: (504, err)) as node:
        ops = run_workload(
            [node.url], 1.5, stream_resend_delay=(0.01, 0.05), stream_read_share=0.0,
            **STREAMS_ONLY,
        )  # fmt: skip
    appends = [o for o in ops if o.f == "append"]
    assert appends and {o.outcome for o in appends} == {"info"}
    by_id = {o.id: o for o in appends}
    resends = [o for o in appends if "retry_of" in o.input]
    assert resends
    for r in resends:
        first = by_id[r.input["retry_of"]]
        assert "retry_of" not in first.input
        assert (r.input["stream"], r.input["events"]) == (first.input["stream"], first.input["events"])
        assert r.input["idempotency_key"] != first.input["idempotency_key"]
        assert r.input["expect"] in (first.input["expect"], "any")
    per_first = [sum(r.input["retry_of"] == f.id for r in resends) for f in appends]
    assert max(per_first) <= WorkloadConfig().stream_resends


def unknown_for_a_quarter(
    answer: Callable[[dict], tuple[int, dict]],
) -> Callable[[dict], tuple[int, dict]]:
    """``answer``, except that every attempt of a quarter of the op keys times out (504),
    so those ops end unknown, as an overloaded node's do."""
    err = {"error": {"code": "timeout", "message": "no commit in time"}}

    def maybe_late(body: dict) -> tuple[int, dict]:
        if zlib.crc32(body["idempotency_key"].encode()) % 4 == 0:
            return 504, err
        return answer(body)

    return maybe_late


def test_a_share_of_acknowledged_appends_is_resent_once() -> None:
    # Some first attempts end unknown (under CI's load a 0.3 s deadline runs out); those are
    # re-sent as unknown appends (the test above), which must not blur the acknowledged ones.
    with stream_node(unknown_for_a_quarter(appended_at(8))) as node:
        ops = run_workload(
            [node.url], 1.0, stream_resend_share=0.5, stream_resend_delay=(0.01, 0.05),
            stream_read_share=0.0, **STREAMS_ONLY,
        )  # fmt: skip
    appends = {o.id: o for o in ops if o.f == "append"}
    resends = [o for o in appends.values() if "retry_of" in o.input]
    acked = {i for i, o in appends.items() if o.outcome == "ok" and "retry_of" not in o.input}
    assert any(o.outcome == "info" for o in appends.values() if "retry_of" not in o.input)
    resent_acked = [r for r in resends if r.input["retry_of"] in acked]
    assert resent_acked and len(resent_acked) < len(acked)
    for r in resent_acked:
        assert r.input["events"] == appends[r.input["retry_of"]].input["events"]
    assert max(Counter(r.input["retry_of"] for r in resent_acked).values()) == 1
    # every other re-send is of an unknown first attempt
    assert {appends[r.input["retry_of"]].outcome for r in resends} <= {"ok", "info"}


def test_the_stream_share_is_a_run_option_and_a_flag() -> None:
    from statekeeper.chaos.cli import build_parser, run_options
    from statekeeper.chaos.runner import RunOptions

    args = build_parser().parse_args("run --fault none --stream-share 0".split())
    assert run_options(args, "none").stream_share == 0.0
    assert build_parser().parse_args(["run", "--fault", "none"]).stream_share == 0.15
    with pytest.raises(ValueError, match="stream-share"):
        RunOptions(stream_share=1.5).validate()


def test_stream_share_zero_turns_streams_off() -> None:
    with stream_node(appended_at(8)) as node:
        ops = run_workload(
            [node.url], 0.4, stream_share=0.0, mix=PUT_ONLY, resend_share=0.0, pinned_reader_share=0
        )
    assert ops and {o.f for o in ops} == {"put"}
    assert WorkloadConfig(stream_share=0).stream_names() == []
