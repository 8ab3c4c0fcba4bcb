"""Cluster configuration: one TOML file describes every node of a cluster.

The same file is read by `statekeeper node --id ...` (one process) and by
`statekeeper cluster ...` (the local supervisor), so the two never disagree
about ports or data directories.

The dataclasses below are the file's schema: `parse` converts the decoded TOML into them
with msgspec (strict: no str where a number belongs, no bool for an int), rejects keys
they do not declare, and reports either as a ConfigError naming the key, e.g.
`raft.election_timeout_min: expected a number, got str '0.4'`. `dumps` writes them back
with tomli-w.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import tomllib
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import msgspec
import tomli_w

# The settings tables ([limits], [retention], [raft], [http], [tls], [auth], [storage], [ui]).
from statekeeper.node.config_tables import (
    CLIENT_AUTH_MODES,
    RAFT_ENTRY_LIMIT_BYTES,
    AuthSettings,
    HttpSettings,
    Limits,
    RaftSettings,
    Retention,
    StorageSettings,
    TlsSettings,
    UiSettings,
)

# The raft journal's fsync modes (node/raft/journal.py says what each means). Defined here, not
# there, so that reading a config never imports raft: the journal belongs to node/raft/,
# whose package imports this module.
FSYNC_MODES = ("always", "never")

__all__ = [
    "CLIENT_AUTH_MODES",
    "FSYNC_MODES",
    "RAFT_ENTRY_LIMIT_BYTES",
    "SECRET_ENV",
    "SECRET_FILE_ENV",
    "SECRET_ON_COMMAND_LINE",
    "AuthSettings",
    "ClusterConfig",
    "ClusterSection",
    "ConfigError",
    "HttpSettings",
    "StorageSettings",
    "Limits",
    "NodeConfig",
    "RaftSettings",
    "Retention",
    "TlsSettings",
    "UiSettings",
    "dumps",
    "load",
    "local_cluster",
    "parse",
    "read_secret_file",
    "secret_flag_error",
    "validate",
    "write",
    "write_secret_file",
]


class ConfigError(ValueError):
    """The configuration file is missing, malformed or inconsistent."""


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
    # Where the HTTP server listens ("host:port"); empty: host and http_port. A pod binds
    # the wildcard so kubelet probes and `kubectl port-forward` (which dials localhost
    # inside the pod) reach it, while peers and clients use `host`.
    http_bind: str = ""
    # Peer id -> "host:port" this node dials to reach that peer (a proxy, or a per-link
    # address that iptables can cut); peers not listed are dialled at their raft_address.
    raft_dial: tuple[tuple[str, str], ...] = ()

    @property
    def raft_address(self) -> str:
        return f"{self.host}:{self.raft_port}"

    @property
    def http_listen(self) -> tuple[str, int]:
        """(host, port) the HTTP server binds."""
        if not self.http_bind:
            return self.host, self.http_port
        host, sep, port = self.http_bind.rpartition(":")
        if not sep or not port.isdigit():
            raise ConfigError(
                f"node {self.id}: http_bind must be 'host:port', not {self.http_bind!r}"
            )
        return host, int(port)

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"


@dataclass(frozen=True)
class ClusterSection:
    """The file's [cluster] table."""

    name: str = "statekeeper"
    data_dir: str = "data"
    fsync: str = "always"
    # The cluster secret inline (discouraged: cluster.toml must then be 0600), or the path
    # of a file holding it (relative to this file). See `load` for the precedence.
    secret: str = ""
    secret_file: str = ""


@dataclass(frozen=True)
class ClusterConfig:
    nodes: tuple[NodeConfig, ...]
    name: str = ClusterSection.name
    data_dir: str = ClusterSection.data_dir
    fsync: str = ClusterSection.fsync
    # repr=False: a config printed in a log line or an error must not carry the secret.
    secret: str = field(default=ClusterSection.secret, repr=False)
    secret_file: str = ClusterSection.secret_file
    limits: Limits = field(default_factory=Limits)
    retention: Retention = field(default_factory=Retention)
    raft: RaftSettings = field(default_factory=RaftSettings)
    http: HttpSettings = field(default_factory=HttpSettings)
    tls: TlsSettings = field(default_factory=TlsSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    ui: UiSettings = field(default_factory=UiSettings)
    # Directory the relative paths above are resolved against.
    base_dir: str = "."
    # Set by `load`: where the secret came from (never the secret itself), and warnings
    # about how it is stored, for the node to log.
    secret_source: str = field(default="", compare=False)
    secret_warnings: tuple[str, ...] = field(default=(), compare=False)

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

    @property
    def scheme(self) -> str:
        """The client port's URL scheme: https when [tls] is enabled."""
        return "https" if self.tls.enabled else "http"

    def url(self, node_id: str) -> str:
        """The node's client-port URL."""
        n = self.node(node_id)
        return f"{self.scheme}://{n.host}:{n.http_port}"

    def http_urls(self) -> list[str]:
        return [self.url(n.id) for n in self.nodes]


@dataclass(frozen=True)
class _ConfigFile:
    """The whole TOML document."""

    nodes: tuple[NodeConfig, ...]
    cluster: ClusterSection = field(default_factory=ClusterSection)
    limits: Limits = field(default_factory=Limits)
    retention: Retention = field(default_factory=Retention)
    raft: RaftSettings = field(default_factory=RaftSettings)
    http: HttpSettings = field(default_factory=HttpSettings)
    tls: TlsSettings = field(default_factory=TlsSettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    ui: UiSettings = field(default_factory=UiSettings)


_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "a boolean",
    "array": "an array",
    "object": "a table",
}
_MSGSPEC_ERROR = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_EXPECTED = re.compile(r"^Expected `(?P<want>\w+)`")
_MISSING = re.compile(r"^Object missing required field `(?P<name>\w+)`$")


def _lookup(raw: Any, path: str) -> tuple[bool, Any]:
    """The raw value at a msgspec path like `.nodes[0].id` (found, value)."""
    for name, index in re.findall(r"\.(\w+)|\[(\d+)\]", path):
        try:
            raw = raw[name] if name else raw[int(index)]
        except (KeyError, IndexError, TypeError):
            return False, None
    return True, raw


def _config_error(e: msgspec.ValidationError, raw: dict) -> ConfigError:
    """msgspec's message, reworded to name the setting (and the value it got)."""
    m = _MSGSPEC_ERROR.match(str(e))
    what, path = m["what"], (m["path"] or "").replace("[...]", "")
    where = path.lstrip(".") or "the config"
    if missing := _MISSING.match(what):
        return ConfigError(f"{where}: missing required setting {missing['name']!r}")
    expected = _EXPECTED.match(what)
    found, value = _lookup(raw, path)
    if expected and found:
        if where == "cluster.secret":  # name the type only: the value may be the secret
            return ConfigError(f"{where}: expected a string, got {type(value).__name__}")
        return _expected(where, expected["want"], value)
    return ConfigError(f"{where}: {what[:1].lower()}{what[1:]}")


def _expected(where: str, want: str, value: Any) -> ConfigError:
    want = _TYPE_WORDS.get(want, want)
    return ConfigError(f"{where}: expected {want}, got {type(value).__name__} {value!r}")


def _reject_unknown(raw: Any, cls: type, path: str = "") -> None:
    """Every key of `raw` must be a field of the dataclass `cls` (recursively)."""
    if not isinstance(raw, dict):
        return  # the conversion reports the wrong type
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    for key, value in raw.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in known:
            raise ConfigError(f"{where}: unknown setting (known: {', '.join(known)})")
        sub = hints[key]
        if dataclasses.is_dataclass(sub):
            _reject_unknown(value, sub, where)
        elif typing.get_origin(sub) is tuple and dataclasses.is_dataclass(typing.get_args(sub)[0]):
            for i, item in enumerate(value if isinstance(value, list) else []):
                _reject_unknown(item, typing.get_args(sub)[0], f"{where}[{i}]")


def _file_shape(raw: dict) -> dict:
    """The TOML spellings that differ from the dataclasses: a node's host may be left out,
    its raft_dial is a table (peer id -> address)."""
    nodes = raw.get("nodes")
    if not isinstance(nodes, list):
        return raw
    shaped = []
    for i, n in enumerate(nodes):
        if isinstance(n, dict):
            n = {"host": "127.0.0.1", **n}
            if isinstance(n.get("raft_dial"), dict):
                for peer, addr in n["raft_dial"].items():
                    if type(addr) is not str:
                        raise _expected(f"nodes[{i}].raft_dial.{peer}", "str", addr)
                n["raft_dial"] = sorted(n["raft_dial"].items())
        shaped.append(n)
    return {**raw, "nodes": shaped}


def parse(raw: dict, base_dir: str = ".") -> ClusterConfig:
    """Build a ClusterConfig from a decoded TOML document and validate it."""
    if not isinstance(raw.get("nodes"), list) or not raw["nodes"]:
        raise ConfigError("the config needs at least one [[nodes]] entry")
    _reject_unknown(raw, _ConfigFile)
    shaped = _file_shape(raw)
    try:
        f = msgspec.convert(shaped, _ConfigFile, strict=True)
    except msgspec.ValidationError as e:
        raise _config_error(e, shaped) from None
    c = f.cluster
    if c.secret and c.secret_file:  # in the file; a loaded config holds both
        raise ConfigError("cluster: set either secret or secret_file, not both")
    cfg = ClusterConfig(
        nodes=f.nodes,
        name=c.name,
        data_dir=c.data_dir,
        fsync=c.fsync,
        secret=c.secret,
        secret_file=c.secret_file,
        limits=f.limits,
        retention=f.retention,
        raft=f.raft,
        http=f.http,
        tls=f.tls,
        auth=f.auth,
        storage=f.storage,
        ui=f.ui,
        base_dir=base_dir,
    )
    validate(cfg)
    return cfg


def validate(cfg: ClusterConfig) -> None:
    if not cfg.retention.gc_interval_seconds > 0:
        raise ConfigError("retention.gc_interval_seconds must be > 0")
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
        n.http_listen  # noqa: B018 (raises ConfigError for a malformed http_bind)
    if cfg.fsync not in FSYNC_MODES:
        raise ConfigError(f"fsync must be one of {FSYNC_MODES}, not {cfg.fsync!r}")
    r = cfg.raft
    if not 0 < r.election_timeout_min < r.election_timeout_max:
        raise ConfigError("raft: need 0 < election_timeout_min < election_timeout_max")
    if r.snapshot_max_journal_bytes < 1024 * 1024:
        raise ConfigError("raft: snapshot_max_journal_bytes must be at least 1 MiB")
    half = RAFT_ENTRY_LIMIT_BYTES // 2  # a batch: max_entry_bytes + one more request
    for key, value in (
        ("limits.max_request_bytes", cfg.limits.max_request_bytes),
        ("raft.max_entry_bytes", r.max_entry_bytes),
    ):
        if not 1 <= value <= half:
            raise ConfigError(
                f"{key} must be within 1..{half} ({half // 2**20} MiB, half of the "
                f"{RAFT_ENTRY_LIMIT_BYTES // 2**20} MiB one raft entry may hold), not {value}"
            )
    if r.live_stall_seconds < 1:  # below a second a busy but healthy node looks stuck
        raise ConfigError("raft: live_stall_seconds must be at least 1 (default 10)")
    h = cfg.http
    if h.max_connections < 1 or min(h.header_timeout, h.body_timeout, h.keepalive_timeout) <= 0:
        raise ConfigError("http: max_connections must be >= 1 and every timeout > 0")
    if not 1 <= h.max_connections_per_address:
        raise ConfigError("http: max_connections_per_address must be >= 1")
    if h.shutdown_grace_seconds <= 0:
        raise ConfigError("http: shutdown_grace_seconds must be > 0")
    if h.max_header_bytes < 1024:
        raise ConfigError("http: max_header_bytes must be at least 1024")
    t = cfg.tls
    if t.client_auth not in CLIENT_AUTH_MODES:
        raise ConfigError(
            f"tls.client_auth must be one of {CLIENT_AUTH_MODES}, not {t.client_auth!r}"
        )
    if t.enabled and not (t.ca_file and t.cert_file and t.key_file):
        raise ConfigError("tls: enabled needs ca_file, cert_file and key_file")
    st = cfg.storage
    if st.quota_bytes < 1024 * 1024 or st.reserve_bytes < 0 or st.check_interval_seconds <= 0:
        raise ConfigError(
            "storage: quota_bytes must be at least 1 MiB, reserve_bytes >= 0 and "
            "check_interval_seconds > 0"
        )
    if not 1 <= cfg.limits.min_lease_ttl_ms <= 86_400_000:
        raise ConfigError("limits: min_lease_ttl_ms must be within 1..86400000 (one day)")


def load(path: str | os.PathLike) -> ClusterConfig:
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text())
    except FileNotFoundError as e:
        raise ConfigError(f"config file not found: {p}") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from e
    try:
        cfg = parse(raw, base_dir=str(p.resolve().parent))
    except ConfigError as e:
        raise ConfigError(f"{p}: {e}") from None
    return _with_secret(cfg, p)


SECRET_ENV = "STATEKEEPER_SECRET"
SECRET_FILE_ENV = "STATEKEEPER_SECRET_FILE"


def _with_secret(cfg: ClusterConfig, config_path: Path) -> ClusterConfig:
    """The cluster secret, first found of: $STATEKEEPER_SECRET, the file named by
    $STATEKEEPER_SECRET_FILE, [cluster] secret_file, [cluster] secret. Never a command-line
    flag (other users can read a process's argv). Errors name the source, never the value."""
    warnings: list[str] = []
    if os.environ.get(SECRET_ENV):
        secret, source = os.environ[SECRET_ENV], f"${SECRET_ENV}"
    elif os.environ.get(SECRET_FILE_ENV):
        path = Path(os.environ[SECRET_FILE_ENV])
        secret, source = read_secret_file(path, f"${SECRET_FILE_ENV}"), f"file {path}"
        warnings += _exposed(path, "the secret file")
    elif cfg.secret_file:
        path = Path(cfg.base_dir) / cfg.secret_file
        secret = read_secret_file(path, f"{config_path}: cluster.secret_file")
        source = f"file {path}"
        warnings += _exposed(path, "the secret file")
    elif cfg.secret:
        secret, source = cfg.secret, f"inline in {config_path}"
        warnings += _exposed(config_path, f"{config_path}, which holds the cluster secret inline,")
    else:
        secret, source = "", ""
    return replace(cfg, secret=secret, secret_source=source, secret_warnings=tuple(warnings))


SECRET_ON_COMMAND_LINE = (
    "the cluster secret is never a command-line argument (any local user can read a "
    "process's arguments): put it in a file named by [cluster] secret_file or "
    f"${SECRET_FILE_ENV}, or in ${SECRET_ENV}"
)


def secret_flag_error(argv: Sequence[str]) -> str | None:
    """The error for an argv that tries to pass a secret as a flag (`--secret ...`,
    `--secret=...`); None otherwise. Checked before argparse, whose "unrecognized
    arguments" error would echo the value."""
    for a in argv:
        if a.startswith("--") and a[2:].split("=", 1)[0].lower().replace("_", "-") in (
            "secret",
            "cluster-secret",
        ):
            return SECRET_ON_COMMAND_LINE
    return None


def read_secret_file(path: Path, what: str) -> str:
    """The secret held by `path` (surrounding whitespace stripped)."""
    try:
        secret = path.read_text().strip()
    except OSError as e:  # the message names the path and the reason, not the content
        raise ConfigError(f"{what}: cannot read secret file {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{what}: secret file {path} is not UTF-8 text") from None
    if not secret:
        raise ConfigError(f"{what}: secret file {path} is empty")
    return secret


def _exposed(path: Path, what: str) -> list[str]:
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        return []
    if mode & 0o077:
        return [f"{what} is readable by group/others (mode {mode:03o}); run: chmod 600 {path}"]
    return []


def write_secret_file(path: str | os.PathLike, secret: str) -> None:
    """Create `path` holding `secret`, mode 0600 from the start; an existing file is an error."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")


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


_HEADER = """\
# statekeeper cluster configuration
# [cluster] fsync = "always": acknowledged writes survive power loss; "never": process crashes only
"""


def dumps(cfg: ClusterConfig) -> str:
    """Render a config as TOML (round-trips through `parse`)."""
    cluster = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(ClusterSection)}
    if cfg.secret_file or not cfg.secret:
        del cluster["secret"]  # from the file (or the environment): never copied inline
    if not cfg.secret_file:
        del cluster["secret_file"]
    doc: dict[str, Any] = {
        "cluster": cluster,
        "limits": dataclasses.asdict(cfg.limits),
        "retention": dataclasses.asdict(cfg.retention),
        "raft": dataclasses.asdict(cfg.raft),
        "http": dataclasses.asdict(cfg.http),
        "tls": dataclasses.asdict(cfg.tls),
        "auth": dataclasses.asdict(cfg.auth),
        "storage": dataclasses.asdict(cfg.storage),
        "ui": dataclasses.asdict(cfg.ui),
        "nodes": [_node_table(n) for n in cfg.nodes],
    }
    return _HEADER + tomli_w.dumps(doc)


def _node_table(n: NodeConfig) -> dict[str, Any]:
    table: dict[str, Any] = {
        "id": n.id,
        "host": n.host,
        "raft_port": n.raft_port,
        "http_port": n.http_port,
    }
    for name in ("data_dir", "raft_bind", "http_bind"):  # left out when empty (the default)
        if getattr(n, name):
            table[name] = getattr(n, name)
    if n.raft_dial:
        table["raft_dial"] = dict(n.raft_dial)
    return table


def write(cfg: ClusterConfig, path: str | os.PathLike) -> None:
    """Write the config atomically, mode 0600 from the start (it may hold the secret): a
    temporary file created with that mode replaces `path`."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(dumps(cfg))
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
