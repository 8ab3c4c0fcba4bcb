"""Which node of cluster.toml this process is, from its hostname (Kubernetes StatefulSets).

A StatefulSet names its pods `<set name>-<ordinal>` (node-0, node-1, ...) and keeps the
name when a pod is rescheduled, so the hostname is a stable identity: deploy/k8s runs
every pod with the same command, `statekeeper node --id-from-hostname`, and each finds
its own [[nodes]] entry:

1. the entry whose id is the hostname's first label (a set named "node" gives node-0,
   matching the ids `statekeeper cluster up` writes);
2. otherwise the one entry whose id ends in "-<ordinal>" (a set named "statekeeper"
   gives statekeeper-1 -> node-1).

Anything else (no ordinal, no entry, two entries ending alike) is a ConfigError that
names the hostname and the ids it tried: a pod that guessed would join as another node,
and two pods claiming one raft identity break every guarantee.
"""

from __future__ import annotations

import re
import socket

from statekeeper.node.config import ClusterConfig, ConfigError

# A StatefulSet pod's hostname: a DNS label ending in -<ordinal>.
_ORDINAL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?-(?P<ordinal>\d+)$")


def ordinal(hostname: str) -> int | None:
    """The StatefulSet ordinal of `hostname` ("node-2" or "node-2.statekeeper.ns.svc..."),
    or None when its first label does not end in -<digits>."""
    m = _ORDINAL.match(hostname.split(".", 1)[0].lower())
    return int(m["ordinal"]) if m else None


def node_id_from_hostname(cfg: ClusterConfig, hostname: str | None = None) -> str:
    """This pod's node id in `cfg` (see the module docstring for the rule)."""
    host = hostname if hostname is not None else socket.gethostname()
    label = host.split(".", 1)[0]
    ids = [n.id for n in cfg.nodes]
    if label in ids:
        return label
    n = ordinal(label)
    if n is None:
        raise ConfigError(
            f"hostname {host!r} is not a StatefulSet pod name (<name>-<ordinal>) and no "
            f"node has that id; nodes: {', '.join(ids)}; pass --id instead"
        )
    matches = [i for i in ids if i.endswith(f"-{n}")]
    if len(matches) != 1:
        what = "no node id ends" if not matches else f"{len(matches)} node ids end"
        raise ConfigError(
            f"hostname {host!r} has ordinal {n}, but {what} in '-{n}'; nodes: {', '.join(ids)}"
        )
    return matches[0]
