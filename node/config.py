"""Cluster configuration: one TOML file describes every node of a cluster.

The same file is read by `statekeeper node --id ...` (one process) and by
`statekeeper cluster ...` (the local supervisor), so the two never disagree
about ports or data directories.
"""

from __future__ import annotations

import os
import secrets
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

FSYNC_MODES = ("always", "never")


class ConfigError(ValueError):
    """The configuration file is missing, malformed or inconsistent."""


@dataclass(frozen=True)
class Limits:
    max_key_bytes: int = 4 * 1024
    max_value_bytes: int = 1024 * 1024
    max_request_bytes: int = 4 * 1024 * 1024
    max_ops_per_request: int = 1024
    max_range_limit: int = 10_000


@dataclass(frozen=True)
class Retention:
    # Past revisions kept readable; older ones are compacted inside apply.
    history_revisions: int = 100_000
    # How long an idempotency key is remembered (leader-stamped time).
    idempotency_seconds: int = 24 * 3600


@dataclass(frozen=True)
class RaftSettings:
    # A follower calls an election 0.4-0.7 s after the last heartbeat (sent every 0.1 s):
    # with two followers the earlier of two draws decides, so a leader crash is healed in
    # well under a second, while one lost heartbeat (or a 0.3 s GIL/GC stall) is not enough.
    election_timeout_min: float = 0.4
    election_timeout_max: float = 0.7
    # Entries between snapshots (pysyncobj log compaction).
    snapshot_min_entries: int = 5000
    snapshot_min_seconds: int = 300
    # ...or as soon as the journal holds this many bytes: a restart reads the whole
    # journal back (and keeps it in memory), so this bounds cold-start time (~0.5 s per
    # 100 MiB) and memory. Lower costs steady writes: each snapshot copies the DB once
    # (4 KiB puts at 64 clients: 1,731 ops/s without snapshots, 1,496 with one every 64 MiB).
    snapshot_max_journal_bytes: int = 256 * 1024 * 1024
    # Leader gathers at most this many bytes of ops into one raft entry.
    max_entry_bytes: int = 8 * 1024 * 1024
    # Raft entries a node may have proposed and not yet seen applied (pipelining depth).
    max_inflight_entries: int = 1
    request_timeout: float = 5.0


@dataclass(frozen=True)
class NodeConfig:
    id: str
    host: str
    raft_port: int
    http_port: int
    data_dir: str = ""  # empty: <cluster data_dir>/<id>
    # Where the raft server listens ("host:port"); empty: raft_address. Fault-injection
    # setups bind a wildcard so each peer link can use its own loopback address.
    raft_bind: str = ""
    # Peer id -> "host:port" this node dials to reach that peer (a proxy, or a per-link
    # address that iptables can cut); peers not listed are dialled at their raft_address.
    raft_dial: tuple[tuple[str, str], ...] = ()

    @property
    def raft_address(self) -> str:
        return f"{self.host}:{self.raft_port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"


@dataclass(frozen=True)
class ClusterConfig:
    nodes: tuple[NodeConfig, ...]
    name: str = "statekeeper"
    data_dir: str = "data"
    fsync: str = "always"
    secret: str = ""
    limits: Limits = field(default_factory=Limits)
    retention: Retention = field(default_factory=Retention)
    raft: RaftSettings = field(default_factory=RaftSettings)
    # Directory the relative paths above are resolved against.
    base_dir: str = "."

    def node(self, node_id: str) -> NodeConfig:
        for n in self.nodes:
            if n.id == node_id:
                return n
        known = ", ".join(n.id for n in self.nodes)
        raise ConfigError(f"no node with id {node_id!r} in the config (known: {known})")

    def node_data_dir(self, node_id: str) -> Path:
        n = self.node(node_id)
        raw = n.data_dir or os.path.join(self.data_dir, n.id)
        return (Path(self.base_dir) / raw).resolve()

    def peers_of(self, node_id: str) -> list[NodeConfig]:
        return [n for n in self.nodes if n.id != node_id]

    def http_urls(self) -> list[str]:
        return [n.http_url for n in self.nodes]


def _section(raw: dict, name: str, cls):
    data = raw.get(name, {})
    if not isinstance(data, dict):
        raise ConfigError(f"[{name}] must be a table")
    known = set(cls.__dataclass_fields__)
    unknown = set(data) - known
    if unknown:
        raise ConfigError(f"unknown setting(s) in [{name}]: {', '.join(sorted(unknown))}")
    try:
        return cls(**data)
    except TypeError as e:  # pragma: no cover - guarded by the check above
        raise ConfigError(f"[{name}]: {e}") from e


def parse(raw: dict, base_dir: str = ".") -> ClusterConfig:
    """Build a ClusterConfig from a decoded TOML document and validate it."""
    cluster = raw.get("cluster", {})
    nodes_raw = raw.get("nodes")
    if not isinstance(nodes_raw, list) or not nodes_raw:
        raise ConfigError("the config needs at least one [[nodes]] entry")
    nodes = []
    for i, n in enumerate(nodes_raw):
        try:
            nodes.append(
                NodeConfig(
                    id=str(n["id"]),
                    host=str(n.get("host", "127.0.0.1")),
                    raft_port=int(n["raft_port"]),
                    http_port=int(n["http_port"]),
                    data_dir=str(n.get("data_dir", "")),
                    raft_bind=str(n.get("raft_bind", "")),
                    raft_dial=tuple(sorted((str(k), str(v)) for k, v in n.get("raft_dial", {}).items())),
                )
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"[[nodes]] entry {i}: needs id, raft_port, http_port ({e})") from e
    cfg = ClusterConfig(
        nodes=tuple(nodes),
        name=str(cluster.get("name", "statekeeper")),
        data_dir=str(cluster.get("data_dir", "data")),
        fsync=str(cluster.get("fsync", "always")),
        secret=str(cluster.get("secret", "")),
        limits=_section(raw, "limits", Limits),
        retention=_section(raw, "retention", Retention),
        raft=_section(raw, "raft", RaftSettings),
        base_dir=base_dir,
    )
    validate(cfg)
    return cfg


def validate(cfg: ClusterConfig) -> None:
    ids = [n.id for n in cfg.nodes]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"node ids must be unique: {ids}")
    ports = [p for n in cfg.nodes for p in ((n.host, n.raft_port), (n.host, n.http_port))]
    if len(set(ports)) != len(ports):
        raise ConfigError("every node needs its own raft_port and http_port")
    for n in cfg.nodes:
        for peer, _ in n.raft_dial:
            if peer not in ids or peer == n.id:
                raise ConfigError(f"{n.id}: raft_dial names {peer!r}, which is not another node")
    if cfg.fsync not in FSYNC_MODES:
        raise ConfigError(f"fsync must be one of {FSYNC_MODES}, not {cfg.fsync!r}")
    r = cfg.raft
    if not 0 < r.election_timeout_min < r.election_timeout_max:
        raise ConfigError("raft: need 0 < election_timeout_min < election_timeout_max")
    if r.snapshot_max_journal_bytes < 1024 * 1024:
        raise ConfigError("raft: snapshot_max_journal_bytes must be at least 1 MiB")


def load(path: str | os.PathLike) -> ClusterConfig:
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text())
    except FileNotFoundError as e:
        raise ConfigError(f"config file not found: {p}") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from e
    cfg = parse(raw, base_dir=str(p.resolve().parent))
    env_secret = os.environ.get("STATEKEEPER_SECRET")
    if env_secret:
        cfg = replace(cfg, secret=env_secret)
    return cfg


def local_cluster(
    size: int = 3,
    host: str = "127.0.0.1",
    http_base_port: int = 7000,
    raft_base_port: int = 7100,
    data_dir: str = "data",
    fsync: str = "always",
    secret: str | None = None,
) -> ClusterConfig:
    """The default local cluster: node-0..node-{size-1} on fixed ports."""
    nodes = tuple(
        NodeConfig(
            id=f"node-{i}",
            host=host,
            raft_port=raft_base_port + i,
            http_port=http_base_port + i,
        )
        for i in range(size)
    )
    cfg = ClusterConfig(
        nodes=nodes,
        data_dir=data_dir,
        fsync=fsync,
        secret=secrets.token_urlsafe(32) if secret is None else secret,
    )
    validate(cfg)
    return cfg


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    s = str(v).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{s}"'


def dumps(cfg: ClusterConfig) -> str:
    """Render a config as TOML (round-trips through `parse`)."""
    lines = [
        "# statekeeper cluster configuration",
        "[cluster]",
        f"name = {_toml_value(cfg.name)}",
        f"data_dir = {_toml_value(cfg.data_dir)}",
        "# fsync = \"always\": acknowledged writes survive power loss; \"never\": process crashes only",
        f"fsync = {_toml_value(cfg.fsync)}",
        f"secret = {_toml_value(cfg.secret)}",
        "",
    ]
    for name, section in (("limits", cfg.limits), ("retention", cfg.retention), ("raft", cfg.raft)):
        lines.append(f"[{name}]")
        for key in section.__dataclass_fields__:
            lines.append(f"{key} = {_toml_value(getattr(section, key))}")
        lines.append("")
    for n in cfg.nodes:
        lines += [
            "[[nodes]]",
            f"id = {_toml_value(n.id)}",
            f"host = {_toml_value(n.host)}",
            f"raft_port = {n.raft_port}",
            f"http_port = {n.http_port}",
        ]
        if n.data_dir:
            lines.append(f"data_dir = {_toml_value(n.data_dir)}")
        if n.raft_bind:
            lines.append(f"raft_bind = {_toml_value(n.raft_bind)}")
        if n.raft_dial:
            lines.append("[nodes.raft_dial]")
            lines += [f"{_toml_value(peer)} = {_toml_value(addr)}" for peer, addr in n.raft_dial]
        lines.append("")
    return "\n".join(lines)


def write(cfg: ClusterConfig, path: str | os.PathLike) -> None:
    p = Path(path)
    p.write_text(dumps(cfg))
    os.chmod(p, 0o600)  # it holds the cluster secret
