"""The other nodes' NOSPACE alarms, polled: the alarm holds for the whole cluster.

Each node judges the writes it receives (node/quota/alarm.py), but every entry lands on every
node: a write accepted by a node with room still fills the disk of a peer that has none
(a follower on a smaller disk, or the leader when the write came in through a follower),
and that peer would stop on ENOSPC. So, like etcd's cluster-wide alarms, a node also
refuses writes that add data while any peer it can reach reports its alarm raised.

Every `interval` seconds this task asks each peer's GET /v1/status (open, no token; over
HTTPS with the node's own certificate when [tls] is on), in worker threads, each with a
1 s timeout, and hands the raised alarms to the quota (`peer_alarms`). A peer that does
not answer counts as not raised: a node that is down cannot be filled, and a refusal
must not hang on an unreachable node. So a peer's alarm is seen within about
`interval` + 1 s; writes in that window are what the reserve is for.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.request
from typing import Any

from statekeeper.node.config import ClusterConfig
from statekeeper.node.quota.alarm import StorageQuota
from statekeeper.node.tls import operator_tls_context

log = logging.getLogger("statekeeper.storage")


class PeerStorage:
    """Polls the peers' storage alarms into `quota.peer_alarms`."""

    def __init__(
        self, quota: StorageQuota, cfg: ClusterConfig, node_id: str, interval: float
    ) -> None:
        self.quota = quota
        self.interval = interval
        self.urls = {n.id: cfg.url(n.id) for n in cfg.nodes if n.id != node_id}
        handlers: list[Any] = [urllib.request.ProxyHandler({})]
        ctx = operator_tls_context(cfg, node_id)
        if ctx is not None:
            handlers.append(urllib.request.HTTPSHandler(context=ctx))
        self._opener = urllib.request.build_opener(*handlers)

    def alarm_of(self, url: str) -> str | None:
        """The reason of the peer's raised alarm, or None (cleared, or no answer)."""
        req = urllib.request.Request(url + "/v1/status", headers={"Accept": "application/json"})
        try:
            with self._opener.open(req, timeout=1.0) as resp:
                storage = json.loads(resp.read()).get("storage") or {}
        except (OSError, ValueError, AttributeError):
            return None
        return (storage.get("reason") or "no space") if storage.get("alarm") else None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.interval)
            ids = list(self.urls)
            found = await asyncio.gather(
                *(loop.run_in_executor(None, self.alarm_of, self.urls[i]) for i in ids)
            )
            alarms = {i: r for i, r in zip(ids, found, strict=True) if r}
            if set(alarms) != set(self.quota.peer_alarms):
                if alarms:
                    log.warning(
                        "NOSPACE alarm raised on %s: writes that add data get 507 here too",
                        ", ".join(f"{i} ({r})" for i, r in alarms.items()),
                    )
                else:
                    log.info("no peer has the NOSPACE alarm raised any more")
            self.quota.peer_alarms = alarms
