"""The chaos watchers: one or two ``client.watch`` iterators on the kv workload's key
prefix, running through the whole run (every fault included), checked afterwards by
``chaos.checker.watch`` against the prefix's change history read back from the cluster
(``chaos.watch_reads``) and the history's acknowledged writes.

Each watcher is an ``AsyncClient`` over every endpoint the workload uses (through the
proxies under the proxy topology, so proxy faults hit it too), starting on a different
node each (``prefer_leader=False``): w0 on the node the run's fault will hit, when it has
one (:func:`watcher_nodes`), so that the fault makes it resume, with a patient RetryPolicy (:data:`PATIENT`): on a
lost connection, a node killed, paused, partitioned away or shutting down, it resumes on
the next node from the last revision it delivered + 1, the way any application would.
All watchers start from the revision of a linearizable read of the prefix taken right
before the workload starts, + 1, with progress frames every ``watch_progress`` seconds.

What each one records (a :class:`chaos.checker.watch.WatcherLog`, dumped to
``watch.jsonl`` in the report dir): every event delivered (revision, key, type, value)
and progress frame, and, through a hook on the client's sans-IO ``WatchSession`` (the
transport is untouched), every connection attempt (node, the revision it resumed from,
the error that ended the previous one) and every frame as the node sent it, before the
client drops a frame it already delivered: so a node that re-sends a revision is seen
even though the application never would be.

``watch_drop`` (a MUTATION, ``--debug-watch-drop``): watcher ``w0`` does not record its
Nth delivered event, as a client that lost one would: the check must then fail.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeeper.chaos.background import BackgroundLoop
from statekeeper.chaos.checker.watch import WatcherLog, WatchTruth
from statekeeper.chaos.report import RunResult
from statekeeper.chaos.watch_reads import final_watch_reads
from statekeeper.chaos.workload_config import WorkloadConfig
from statekeeper.client import AsyncClient, RetryPolicy, StatekeeperError
from statekeeper.client.retry import normalize_endpoint
from statekeeper.client.watch.core import WatchProgress, WatchSession

__all__ = [
    "PATIENT",
    "WatchRun",
    "Watchers",
    "finish_watchers",
    "load_logs",
    "start_watchers",
    "watcher_nodes",
]

Say = Callable[[str], None]

# Consecutive failures before a watcher gives up: enough to ride through any fault of
# the suite (kill-all, a 15 s soak fault); "deadline" counts from the last frame.
PATIENT = RetryPolicy(max_attempts=10_000, deadline=120.0, backoff_max=0.5)


@dataclass
class WatchRun:
    """The watch half of a run, for the checks: the logs and the truth."""

    prefix: str
    logs: list[WatcherLog]
    truth: WatchTruth | None


def _value(ev: Any) -> Any:
    if ev.type != "put":
        return None
    try:
        return ev.kv.value.decode("utf-8")
    except UnicodeDecodeError:
        return repr(ev.kv.value)


def _frame_kind(frame: dict[str, Any]) -> str:
    if "error" in frame:
        return "error"
    return "events" if "events" in frame else "progress" if frame.get("progress") else "other"


def instrument(
    session: WatchSession,
    log: WatcherLog,
    node_of: dict[str, str],
    clock: Callable[[], int],
    on_connect: Callable[[], None] = lambda: None,
) -> None:
    """Record ``session``'s connection attempts and raw frames into ``log`` (see the module
    docstring). Wraps three methods of this one session object; the client is unchanged."""
    attempt, retry_after, frame = session.attempt, session.retry_after, session._frame
    last_error: list[str | None] = [None]

    def attempt_() -> Any:
        url, request, timeout = attempt()
        node = node_of.get(url, url)
        log.records.append(("connect", clock(), node, session.next_revision, last_error[0]))
        on_connect()
        return url, request, timeout

    def retry_after_(err: StatekeeperError) -> float:
        last_error[0] = err.code
        return retry_after(err)

    def frame_(f: dict[str, Any]) -> Any:
        rev = f.get("revision")
        if "error" in f and isinstance(f["error"], dict):
            rev = f["error"].get("revision", rev)
        log.records.append(("frame", clock(), _frame_kind(f), rev))
        yield from frame(f)

    session.attempt, session.retry_after, session._frame = attempt_, retry_after_, frame_


def watcher_nodes(node_ids: Sequence[str], target: str | None, count: int) -> list[str]:
    """The node each of ``count`` watchers starts on. With a ``target`` (the node the
    run's fault will hit, ``Fault.watch_target`` through ``FaultContext.plan``): w0 on it,
    so that the fault makes a watcher resume, w1 on the next node after it, then around the
    ring. Without one (a fault on every node, or none): w_i on node i, as before."""
    ids = list(node_ids)
    if not ids:
        raise ValueError("no nodes")
    k = ids.index(target) if target is not None else 0
    order = ids[k:] + ids[:k]
    return [order[i % len(order)] for i in range(count)]


class Watchers(BackgroundLoop):
    """Runs the watchers in a background thread with its own event loop.

    ``start()`` takes the start revision (a linearizable read of the prefix) and starts
    them; ``wait_reach(r)`` waits until every watcher delivered revision r (or a progress
    frame at or above it); ``stop()`` closes them. ``logs`` are what they saw.
    """

    name = "chaos-watchers"
    stop_timeout = 15.0

    def __init__(
        self,
        endpoints: Sequence[str],
        node_ids: Sequence[str],
        config: WorkloadConfig,
        *,
        clock: Callable[[], int] = time.monotonic_ns,
        policy: RetryPolicy = PATIENT,
        target: str | None = None,
    ) -> None:
        if config.watchers < 1:
            raise ValueError("no watchers configured")
        self.target = target
        # Where each watcher connects first (then the next endpoints in ring order).
        self.first = watcher_nodes(node_ids, target, config.watchers)
        self._start_at = [list(node_ids).index(n) for n in self.first]
        self.endpoints, self.config, self.clock, self.policy = (
            list(endpoints),
            config,
            clock,
            policy,
        )
        urls = [normalize_endpoint(e) for e in self.endpoints]  # as the session names them
        self.node_of = dict(zip(urls, node_ids, strict=True))
        super().__init__()
        self.logs: list[WatcherLog] = []
        self.reach: list[int] = []  # per watcher, updated live (the logs are scanned later)
        self.progressed: list[int] = []  # per watcher: the highest progress frame
        self.delivered: list[int] = []  # per watcher: events recorded
        self.connects: list[int] = []  # per watcher: connection attempts
        self.ended: list[str | None] = []

    # ------------------------------------------------------------------ lifecycle

    def wait_reach(self, revision: int, timeout: float) -> float:
        """Seconds until every watcher that is still running delivered a progress frame at
        or above ``revision`` (at most ``timeout``): caught up by the node's own promise
        (and the progress rule gets frames to check on every run)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if all(
                p >= revision or e is not None
                for p, e in zip(self.progressed, self.ended, strict=True)
            ):
                break
            time.sleep(0.1)
        return time.monotonic() - t0

    def counts(self) -> tuple[int, int]:
        """(events delivered, resumes) so far, over all watchers (for progress lines)."""
        return sum(self.delivered), max(0, sum(self.connects) - len(self.connects))

    async def _main(self) -> None:
        self._begin()
        cfg = self.config
        read = RetryPolicy(max_attempts=1000, deadline=30.0)
        async with AsyncClient(self.endpoints, ns=cfg.ns, timeout=3.0, retry=read) as c:
            self.start_revision = (await c.range(cfg.watch_prefix, limit=1)).revision + 1
        self.logs = [WatcherLog(f"w{i}", self.start_revision) for i in range(cfg.watchers)]
        self.reach = [self.start_revision - 1] * cfg.watchers
        self.progressed = [0] * cfg.watchers
        self.delivered, self.connects = [0] * cfg.watchers, [0] * cfg.watchers
        self.ended = [None] * cfg.watchers
        clients = [
            _WatchClient(
                self.endpoints[self._start_at[i] :] + self.endpoints[: self._start_at[i]],
                ns=cfg.ns,
                timeout=3.0,
                retry=self.policy,
                prefer_leader=False,
                record=lambda s, i=i, log=log: instrument(
                    s, log, self.node_of, self.clock, lambda: self._connected(i)
                ),
            )
            for i, log in enumerate(self.logs)
        ]
        tasks = [asyncio.create_task(self._watch(i, c)) for i, c in enumerate(clients)]
        self._started.set()
        await self._stopping.wait()
        for c in clients:
            await c.close()  # ends each watch: the iterators return
        _, pending = await asyncio.wait(tasks, timeout=5.0)
        for t in pending:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _connected(self, i: int) -> None:
        self.connects[i] += 1

    async def _watch(self, i: int, client: Any) -> None:
        """One watcher: record what it delivers until it is stopped or its watch ends."""
        cfg, log, clock = self.config, self.logs[i], self.clock
        drop = cfg.watch_drop if i == 0 else 0
        delivered = 0
        assert self._stopping is not None
        try:
            async for item in client.watch(
                cfg.watch_prefix,
                start_revision=self.start_revision,
                progress=cfg.watch_progress,
                progress_events=True,
            ):
                if isinstance(item, WatchProgress):
                    log.records.append(("progress", clock(), item.revision))
                    self.progressed[i] = max(self.progressed[i], item.revision)
                else:
                    delivered += 1
                    if delivered == drop:
                        continue  # MUTATION: this event is lost
                    log.records.append(
                        ("event", clock(), item.revision, item.key, item.type, _value(item))
                    )
                    self.delivered[i] += 1
                self.reach[i] = max(self.reach[i], item.revision)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the watch ended by itself: a finding
            if not self._stopping.is_set():
                code = e.code if isinstance(e, StatekeeperError) else repr(e)
                log.records.append(("end", clock(), code))
                self.ended[i] = code

    # ------------------------------------------------------------------ files

    def dump(self, path: Path) -> None:
        """The logs as JSON lines: a header per watcher, then its records."""
        with open(path, "w", encoding="utf-8") as f:
            for log in self.logs:
                head = {"watcher": log.name, "start_revision": log.start_revision}
                f.write(json.dumps(head) + "\n")
                for r in log.records:
                    f.write(json.dumps([log.name, *r]) + "\n")


def load_logs(path: Path) -> list[WatcherLog]:
    """The logs ``Watchers.dump`` wrote (to check a run again offline)."""
    logs: dict[str, WatcherLog] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        if isinstance(row, dict):
            logs[row["watcher"]] = WatcherLog(row["watcher"], row["start_revision"])
        else:
            logs[row[0]].records.append(tuple(row[1:]))
    return list(logs.values())


class _WatchClient(AsyncClient):
    """An AsyncClient whose watches call ``record(session)`` before they connect."""

    def __init__(self, *args: Any, record: Callable[[WatchSession], None], **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._record = record

    def _watch(self, session: WatchSession) -> Any:
        self._record(session)
        return super()._watch(session)


def start_watchers(
    endpoints: Sequence[str],
    node_ids: Sequence[str],
    config: WorkloadConfig,
    say: Say,
    target: str | None = None,
) -> Watchers | None:
    """Start the run's watchers (None: ``config.watchers`` is 0); w0 on ``target`` (the
    node the fault will hit), if any: see :func:`watcher_nodes`."""
    if config.watchers < 1:
        return None
    watchers = Watchers(endpoints, node_ids, config, target=target)
    rev = watchers.start()
    on = ", ".join(f"w{i} on {n}" for i, n in enumerate(watchers.first))
    say(
        f"   {config.watchers} watchers on prefix {config.watch_prefix!r} from revision {rev}"
        f" ({on}{'; ' + target + ' is the fault' + chr(39) + 's target' if target else ''})"
        + (f" (MUTATION: w0 drops its event #{config.watch_drop})" if config.watch_drop else "")
    )
    return watchers


def finish_watchers(
    watchers: Watchers | None,
    urls: Sequence[str],
    config: WorkloadConfig,
    report_dir: Path,
    result: RunResult,
    event: Say,
) -> WatchRun | None:
    """After the run (cluster healed and converged): read the truth, let the watchers
    catch up with its final revision (a progress frame at or above it; 30 s at most),
    stop them, keep their logs in ``watch.jsonl``."""
    if watchers is None:
        return None
    truth = final_watch_reads(
        urls, config.watch_prefix, watchers.start_revision, ns=config.ns, seed=config.seed
    )
    waited = watchers.wait_reach(truth.final_revision, 30.0)
    watchers.stop()
    watchers.dump(report_dir / "watch.jsonl")
    result.files["watch"] = "watch.jsonl"
    events, resumes = watchers.counts()
    read = (
        f"{len(truth.changes)} revisions of the prefix up to {truth.final_revision}"
        if truth.changes is not None
        else f"NOT READ ({truth.error})"
    )
    event(
        f"watch: {events} events delivered, {resumes} resumes; the cluster's history: {read}; "
        f"watchers caught up to {min(watchers.progressed, default=0)} after {waited:.1f} s"
    )
    return WatchRun(config.watch_prefix, watchers.logs, truth)
