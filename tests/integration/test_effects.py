"""The effect ledger against a real 3-node cluster, with runner processes that die: a child
(tests/integration/effect_child.py) is SIGKILLed before fn's call, during it (after its
charge) and after it but before DONE, through both clients; another process then runs the
same effect. An external log of fn's calls and a "bank" that applies a charge once per
idempotency key check that the effect happened exactly once and DONE holds its receipt.
Also: two concurrent runners call fn once; wait=False while a live runner holds it; a
runner SIGSTOPped past its TTL inside fn cannot record over its successor (fenced); a
runner restarted with the same runner id takes over its dead claim at once while another
runner id waits, and says so in the log (issue 30 item 8)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from statekeeper.client import Client, EffectInProgress
from statekeeper.cluster.supervisor import LocalCluster

pytestmark = pytest.mark.integration

CHILD = Path(__file__).with_name("effect_child.py")
ROOT = Path(__file__).resolve().parents[2]
TTL = 2.0


def _urls(lc: LocalCluster) -> list[str]:
    return [lc.url(i) for i in lc.node_ids]


class Runner:
    """One effect_child.py process."""

    def __init__(self, lc: LocalCluster, ns: str, key: str, d: Path, *args: str) -> None:
        cmd = [
            sys.executable,
            str(CHILD),
            ",".join(_urls(lc)),
            ns,
            key,
            str(d),
            "--ttl",
            str(TTL),
            *args,
        ]
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def line(self, timeout: float = 30.0) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        os.set_blocking(self.proc.stdout.fileno(), False)
        while time.monotonic() < deadline:
            text = self.proc.stdout.readline()
            if text:
                return text.strip()
            if self.proc.poll() is not None:
                rest = self.proc.stdout.read() or ""
                if rest:
                    return rest.strip().splitlines()[0]
                raise AssertionError(f"runner exited {self.proc.returncode} without output")
            time.sleep(0.02)
        raise AssertionError("runner said nothing in time")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def outcome(self, timeout: float = 30.0) -> dict[str, Any]:
        text = self.line(timeout)
        self.proc.wait(10)
        assert text.startswith("RESULT "), text
        return json.loads(text[len("RESULT ") :])

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _charges(d: Path) -> list[list[str]]:
    return [line.split() for line in _lines(d / "charges.log")]


@pytest.fixture
def ns() -> str:
    return f"fx-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("client_kind", ["sync", "async"])
@pytest.mark.parametrize("stop_at", ["before", "during", "after"])
def test_a_runner_killed_at_each_step_leaves_the_effect_done_exactly_once(
    shared_cluster: LocalCluster, ns: str, tmp_path: Path, stop_at: str, client_kind: str
) -> None:
    key, extra = "trip-7/charge", ["--async"] if client_kind == "async" else []
    first = Runner(shared_cluster, ns, key, tmp_path, "--stop-at", stop_at, *extra)
    assert first.line() == f"AT {stop_at}"
    first.kill()
    with Client(_urls(shared_cluster), ns=ns) as c:
        claimed = c.effects.get(key)
        assert claimed is not None and claimed.state == "claimed" and claimed.attempt == 1

        started = time.monotonic()
        out = Runner(shared_cluster, ns, key, tmp_path, *extra).outcome()
        assert time.monotonic() - started < TTL + 10  # the dead claim's lease expired
        ctx = out["ctx"]
        assert ctx["attempt"] == 2 and ctx["maybe_happened"] is True
        assert ctx["idempotency_key"] == claimed.idempotency_key  # stable per effect
        assert ctx["fence"] > claimed.fence

        charges = _charges(tmp_path)
        assert len(charges) == 1, charges  # the effect happened exactly once
        assert charges[0][1] == claimed.idempotency_key and out["result"] == charges[0][2]
        calls = _lines(tmp_path / "calls.log")
        assert len(calls) == (1 if stop_at == "before" else 2), calls

        done = c.effects.get(key)
        assert done is not None and done.done and done.result == out["result"]
        assert done.attempt == 2 and done.fence == ctx["fence"]

        again = Runner(shared_cluster, ns, key, tmp_path, *extra).outcome()
        assert again == {"result": out["result"], "ctx": None}  # fn not called again
        assert len(_lines(tmp_path / "calls.log")) == len(calls)
        assert c.lock_list("effect:").locks == []  # no claim left behind
        assert c.range("__effects/").kvs[0].key == f"__effects/{key}"  # a plain range reads it


@pytest.mark.parametrize("client_kind", ["sync", "async"])
def test_two_concurrent_runners_call_fn_once(
    shared_cluster: LocalCluster, ns: str, tmp_path: Path, client_kind: str
) -> None:
    extra = ["--sleep", "1.0"] + (["--async"] if client_kind == "async" else [])
    runners = [Runner(shared_cluster, ns, "once", tmp_path, *extra) for _ in range(2)]
    outs = [r.outcome() for r in runners]
    assert outs[0]["result"] == outs[1]["result"]
    called = [o["ctx"] for o in outs if o["ctx"] is not None]
    assert len(called) == 1 and called[0]["attempt"] == 1 and not called[0]["maybe_happened"]
    assert len(_lines(tmp_path / "calls.log")) == 1 and len(_charges(tmp_path)) == 1


def test_wait_false_raises_while_a_live_runner_holds_it_then_takes_over(
    shared_cluster: LocalCluster, ns: str, tmp_path: Path
) -> None:
    holder = Runner(shared_cluster, ns, "mail", tmp_path, "--stop-at", "during")
    assert holder.line() == "AT during"
    calls: list[Any] = []
    try:
        with Client(_urls(shared_cluster), ns=ns) as c:
            with pytest.raises(EffectInProgress) as e:
                c.effects.run("mail", calls.append, ttl=TTL, wait=False)
            assert e.value.holder_fence is not None and calls == []
            holder.kill()

            def reconcile(ctx: Any) -> str:  # looks the effect up before redoing it
                calls.append(ctx)
                bank = tmp_path / "charges.log"
                found = [x for x in _lines(bank) if x.split()[1] == ctx.idempotency_key]
                return found[0].split()[2] if ctx.maybe_happened and found else "new"

            result = c.effects.run("mail", reconcile, ttl=TTL)
            assert calls[0].maybe_happened and result == _charges(tmp_path)[0][2]
            assert c.effects.run("mail", reconcile, ttl=TTL) == result and len(calls) == 1
            assert [r.key for r in c.effects.list()] == ["mail"]
            assert c.effects.forget("mail") and c.effects.get("mail") is None
    finally:
        if holder.proc.poll() is None:
            holder.kill()


def test_a_runner_paused_past_its_ttl_inside_fn_cannot_record_over_its_successor(
    shared_cluster: LocalCluster, ns: str, tmp_path: Path
) -> None:
    paused = Runner(shared_cluster, ns, "wire", tmp_path, "--stop-at", "during")
    assert paused.line() == "AT during"
    paused.proc.send_signal(signal.SIGSTOP)  # its lease keeper stops too
    try:
        successor = Runner(shared_cluster, ns, "wire", tmp_path).outcome()
        assert successor["ctx"]["maybe_happened"] is True
    finally:
        paused.proc.send_signal(signal.SIGCONT)
    paused.go()  # fn returns; its DONE txn carries a fence that is no longer the holder's
    text = paused.line()
    paused.proc.wait(10)
    assert text.startswith("ERROR EffectClaimLost "), text
    assert json.loads(text.split(" ", 2)[2])["fn_called"] is True
    with Client(_urls(shared_cluster), ns=ns) as c:
        done = c.effects.get("wire")
        assert done is not None and done.done and done.result == successor["result"]
    assert len(_charges(tmp_path)) == 1 and len(_lines(tmp_path / "calls.log")) == 2


@pytest.mark.parametrize("client_kind", ["sync", "async"])
def test_a_restarted_runner_takes_over_its_own_claim_at_once_and_another_runner_waits(
    shared_cluster: LocalCluster,
    ns: str,
    tmp_path: Path,
    client_kind: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    long_ttl, extra = "30", ["--async"] if client_kind == "async" else []
    key = "trip-9/charge"
    dead = Runner(
        shared_cluster, ns, key, tmp_path, "--ttl", long_ttl, "--runner", "pod-a",
        "--stop-at", "during", *extra,
    )  # fmt: skip
    assert dead.line() == "AT during"
    dead.kill()  # a pod killed mid-call: its claim's lease lives on for 30 s

    with Client(_urls(shared_cluster), ns=ns) as c:
        claimed = c.effects.get(key)
        assert claimed is not None and claimed.state == "claimed"
        assert claimed.runner == "pod-a"
        calls: list[Any] = []
        with caplog.at_level(logging.INFO, logger="statekeeper.client.effects"):
            with pytest.raises(EffectInProgress):  # another runner id waits for the claim
                c.effects.run(key, calls.append, ttl=2, runner="pod-b", timeout=1.0)
        assert calls == []
        waiting = [r for r in caplog.records if "waiting for it" in r.getMessage()]
        assert waiting and waiting[0].levelno == logging.WARNING, caplog.text
        assert "runner 'pod-a'" in waiting[0].getMessage()
        assert "its lease ends in" in waiting[0].getMessage()

        started = time.monotonic()
        out = Runner(
            shared_cluster, ns, key, tmp_path, "--ttl", long_ttl, "--runner", "pod-a", *extra
        ).outcome()
        assert time.monotonic() - started < 10  # at once, not after the dead claim's 30 s
        ctx = out["ctx"]
        assert ctx is not None and ctx["attempt"] == 2 and ctx["maybe_happened"] is True
        assert ctx["idempotency_key"] == claimed.idempotency_key
        assert len(_charges(tmp_path)) == 1 and out["result"] == _charges(tmp_path)[0][2]
        done = c.effects.get(key)
        assert done is not None and done.done and done.runner == "pod-a"
        assert c.lock_list("effect:").locks == []  # the dead claim's waiter key is gone too
