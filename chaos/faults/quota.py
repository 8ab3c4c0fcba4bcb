"""A small storage quota filled while idempotent writers retry (issue 26, defect 3).

The cluster runs with a small ``[storage] quota_bytes`` (QUOTA_BYTES, on the real disk: no
root needed, unlike ``disk-full``). ``start`` starts WRITERS threads, each putting fresh
keys of its own (namespace ``quota507``, one idempotency key per key, spread over every
node, followers included) through the client library's retry loop with a short attempt
timeout, so that many first attempts end without an answer (outcome unknown) and are
retried with the same key; then it fills the quota with 1 MiB values until the first 507.
Writes whose first attempt was applied before the alarm rose are retried into the alarm:
the node must answer them from their idempotency record (node/quota/gate.py), and a 507
that follows an attempt of unknown outcome must reach the caller as ``outcome_unknown``
(client/retry.py). ``stop`` stops the writers, reads every key back, deletes what was
written, compacts, and waits until no node's alarm is raised.

Each writer records every write's outcome as the chaos workload classifies it
(chaos.workload.classify_error): "not applied" only when the answer proves nothing was
submitted. ``verify`` says: no write reported not applied is in the store (the defect: a
retry of an applied put was reported not applied), every acknowledged write is, the alarm
refused writes, retries did cross the alarm (a write replayed under it, or a 507 turned
into outcome_unknown), and the alarm cleared.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from typing import Any

from statekeeper.chaos.faults.base import Fault, FaultContext, FaultError
from statekeeper.chaos.faults.disk import wait_alarms_cleared
from statekeeper.chaos.report import FAIL, PASS, Verdict

__all__ = ["QuotaRetry"]

MIB = 1 << 20
# The workload's journal growth for a minute and three nodes' stores fit; 1 MiB values
# fill the rest within a few seconds.
QUOTA_BYTES = 96 * MIB
NS = "quota507"
WRITERS = 8
VALUE_BYTES = 32 * 1024
# Attempt timeouts, one per writer in turn: the shorter ones end most first attempts
# without an answer (a 32 KiB put takes a few ms on loopback, more under the workload).
ATTEMPT_TIMEOUTS = (0.005, 0.01, 0.02, 0.05)


@dataclasses.dataclass
class Outcomes:
    """What the writers were told, per key (shared by the writer threads)."""

    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    acked: dict[str, bytes] = dataclasses.field(default_factory=dict)
    not_applied: dict[str, str] = dataclasses.field(default_factory=dict)  # key -> code
    unknown: dict[str, str] = dataclasses.field(default_factory=dict)
    # Retries across the alarm: replayed under it, or a 507 turned into outcome_unknown.
    replayed_under_alarm: int = 0
    refused_after_unknown: int = 0
    alarm_seen: bool = False


class QuotaRetry(Fault):
    name = "quota-retry"
    kind = "disk"
    description = (
        f"a {QUOTA_BYTES // MIB} MiB storage quota filled while idempotent writers with "
        "short timeouts retry: no write reported not applied may be found applied"
    )

    def __init__(self) -> None:
        self.out = Outcomes()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.refused: str | None = None
        self.found_applied: list[str] = []
        self.missing: list[str] = []
        self.cleared_after: float | None = None

    def configure(self, cfg: Any) -> Any:
        cfg = super().configure(cfg)
        return dataclasses.replace(
            cfg, storage=dataclasses.replace(cfg.storage, quota_bytes=QUOTA_BYTES)
        )

    def _client(self, urls: list[str], timeout: float = 10.0):
        from statekeeper.client import Client, RetryPolicy

        policy = RetryPolicy(max_attempts=50, deadline=8.0, backoff_base=0.02, backoff_max=0.2)
        return Client(urls, ns=NS, timeout=timeout, retry=policy, prefer_leader=False)

    def _writer(self, w: int, urls: list[str]) -> None:
        from statekeeper.chaos.workload import classify_error
        from statekeeper.client import InsufficientStorage, StatekeeperError

        out, n = self.out, 0
        with self._client(urls, ATTEMPT_TIMEOUTS[w % len(ATTEMPT_TIMEOUTS)]) as c:
            while not self._stop.is_set():
                key, value = f"w{w}-{n:05d}", os.urandom(VALUE_BYTES)
                n += 1
                try:
                    result = c.put(key, value, idempotency_key=f"{NS}-{key}")
                except StatekeeperError as e:
                    code, proven = classify_error(e)
                    with out.lock:
                        (out.not_applied if proven else out.unknown)[key] = code
                        if isinstance(e.__cause__, InsufficientStorage):
                            out.refused_after_unknown += 1
                        out.alarm_seen |= e.status == 507
                    if e.status == 507:
                        time.sleep(0.05)  # refused at once while the alarm stays
                    continue
                with out.lock:
                    out.acked[key] = value
                    out.replayed_under_alarm += bool(result.replayed and out.alarm_seen)

    def start(self, ctx: FaultContext) -> str:
        from statekeeper.client import InsufficientStorage

        urls = [ctx.cluster.url(n) for n in ctx.node_ids]
        for w in range(WRITERS):
            mine = urls[w % len(urls) :] + urls[: w % len(urls)]  # each starts elsewhere
            t = threading.Thread(target=self._writer, args=(w, mine), daemon=True)
            t.start()
            self._threads.append(t)
        with self._client(urls) as c:
            for i in range(2 * QUOTA_BYTES // MIB):
                try:
                    c.put(f"fill{i:03d}", os.urandom(MIB))
                except InsufficientStorage as e:
                    self.refused = e.message
                    break
        ctx.mark()
        with self.out.lock:
            self.out.alarm_seen = True
        if self.refused is None:
            raise FaultError("the quota never refused a write")
        return f"{WRITERS} idempotent writers; the quota refused: {self.refused}"

    def stop(self, ctx: FaultContext) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)
        urls = [ctx.cluster.url(n) for n in ctx.node_ids]
        with self._client(urls) as c:
            with self.out.lock:
                acked, not_applied = dict(self.out.acked), list(self.out.not_applied)
            self.found_applied = [k for k in not_applied if c.get(k, default=None) is not None]
            self.missing = [
                k for k, v in acked.items() if getattr(c.get(k, default=None), "value", 0) != v
            ]
            for kv in list(c.scan(keys_only=True)):
                c.delete(kv.key)
            c.compact(c.status()["revision"])
        self.cleared_after = wait_alarms_cleared(ctx)

    def verify(self, ctx: FaultContext) -> list[Verdict]:
        out = self.out
        crossed = out.replayed_under_alarm + out.refused_after_unknown
        return [
            Verdict(
                "no write reported not applied is applied",
                FAIL if self.found_applied else PASS,
                f"{len(self.found_applied)}/{len(out.not_applied)}",
                ", ".join(self.found_applied[:10]),
            ),
            Verdict(
                "acknowledged writes intact",
                FAIL if self.missing else PASS,
                f"{len(out.acked) - len(self.missing)}/{len(out.acked)}",
                ", ".join(self.missing[:10]),
            ),
            Verdict("the quota refused writes (507)", PASS if self.refused else FAIL,
                    self.refused or "never"),
            Verdict(
                "retries crossed the alarm",
                PASS if crossed else FAIL,
                f"{out.replayed_under_alarm} replayed under it, "
                f"{out.refused_after_unknown} 507 after an unknown attempt -> outcome_unknown",
                f"outcomes: {len(out.acked)} ok, {len(out.not_applied)} not applied, "
                f"{len(out.unknown)} unknown",
            ),
            Verdict(
                "alarm cleared after delete + compact",
                PASS if self.cleared_after is not None else FAIL,
                "-" if self.cleared_after is None else f"{self.cleared_after:.1f} s",
            ),
        ]
