"""The settings tables of cluster.toml: [limits], [retention], [raft], [http], [tls], [auth],
[storage], [ui].

Each dataclass is one table's schema (node/config.py parses the file into them and
re-exports them); the comments say what each setting means and why its default, with the
measurement where there is one. Split from node/config.py (size).
"""

from __future__ import annotations

from dataclasses import dataclass

# The most bytes one raft entry may have (the command pysyncobj journals and ships: its type
# byte + the entry, node/raft/log.py). pysyncobj 0.3.17 pickles an entry of
# appendEntriesBatchSizeBytes or more and sends it in 'transmission' chunks that the
# follower unpickles: code execution for whoever can send raft messages. Our nodes never
# chunk nor accept chunks (node/raft/pickle_guard.py); this bound keeps every entry far
# below the 64 MiB at which pysyncobj chunked with our batch size, and one entry's stall of
# the raft loop short (~25-30 ms per MiB, see max_entry_bytes). A larger one is refused
# before it is journalled: 413 request_too_large, nothing applied. Fixed, not configurable:
# every node must accept what its leader sends. validate() (node/config.py) keeps
# [limits] max_request_bytes and [raft] max_entry_bytes at half of it or less, since a
# batch may hold max_entry_bytes of requests plus one more request.
RAFT_ENTRY_LIMIT_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class Limits:
    max_key_bytes: int = 4 * 1024
    max_value_bytes: int = 1024 * 1024
    max_request_bytes: int = 4 * 1024 * 1024
    max_ops_per_request: int = 1024
    max_range_limit: int = 10_000
    # Events one stream append may carry (node/store/streams.py); more: too_many_events.
    max_events_per_append: int = 1000
    # Shortest lease TTL lease_grant / put ttl_ms accept (node/store/leases.py); shorter:
    # invalid_argument. A floor keeps keepalive traffic per lease bounded.
    min_lease_ttl_ms: int = 2000


@dataclass(frozen=True)
class Retention:
    # Past revisions kept readable; older ones are compacted inside apply.
    history_revisions: int = 100_000
    # How long an idempotency key is remembered (leader-stamped time).
    idempotency_seconds: int = 24 * 3600
    # How often the leader enforces retention policies (node/tasks/retention.py); not read
    # by apply, so nodes may differ.
    gc_interval_seconds: float = 10.0


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
    # Leader gathers at most this many bytes of ops into one raft entry (one request larger
    # than this still gets an entry of its own). Every byte of an entry costs the leader's
    # raft thread ~25-30 ms/MiB (sent to each follower, journaled, applied) without
    # heartbeats; measured on 2 loaded cores, 3 writers of 4 MiB batches: with 8 MiB
    # entries a follower went up to 422 ms without a heartbeat (election timeout: 400 ms),
    # with 4 MiB (= max_request_bytes) at most 283 ms. Small ops never fill 4 MiB.
    max_entry_bytes: int = 4 * 1024 * 1024
    # Raft entries a node may have proposed and not yet seen applied (pipelining depth).
    max_inflight_entries: int = 1
    request_timeout: float = 5.0
    # GET /v1/health/live answers 503 not_live once the raft loop has neither ticked nor
    # applied an entry for this long (node/api/liveness.py): a stuck raft thread. The longest
    # gap measured under an 8-writer load with snapshots on 2 shared cores was well under
    # a second (docs/protocol.md "Health"); 10 s leaves room for a much worse stall.
    live_stall_seconds: float = 10.0


@dataclass(frozen=True)
class HttpSettings:
    """The [http] table: the client port's connection limits (node/api/limits.py)."""

    # Client connections served at once. One more closes the connection idle the longest,
    # or gets 503 too_many_connections when every one is serving a request.
    max_connections: int = 1024
    # Client connections from one IP address; one more: the same, among that address's.
    max_connections_per_address: int = 256
    # Seconds a request's head (request line + headers) may take to arrive, from the
    # connection's opening or the request's first byte; then 408 request_timeout / close.
    header_timeout: float = 10.0
    # Seconds a request's body may take to arrive once its head is in.
    body_timeout: float = 30.0
    # Seconds an idle keep-alive connection stays open.
    keepalive_timeout: float = 75.0
    # Bytes of request line + headers.
    max_header_bytes: int = 64 * 1024
    # Seconds a node given SIGTERM may spend stopping gracefully: finishing the requests
    # in progress and, if it leads, handing leadership over (node/shutdown.py). Then, or
    # at a second SIGTERM/SIGINT, it stops at once (acknowledged writes are safe either way).
    shutdown_grace_seconds: float = 10.0
    # Web origins ("https://ui.example:8443") whose pages may call the node from a browser;
    # a request with any other Origin header is 403 origin_not_allowed (CSRF: node/api/web_guard.py).
    allowed_origins: tuple[str, ...] = ()
    # With auth off, DNS names besides each node's host and localhost a Host header may
    # carry (a load balancer's name); others are 421 host_not_allowed (DNS rebinding).
    allowed_hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class TlsSettings:
    """The [tls] table: TLS on the client port and the raft port (node/tls.py says how)."""

    enabled: bool = False
    # PEM bundle of the CA(s) that signed the nodes' certificates (and client
    # certificates, with client_auth); paths are relative to this file.
    ca_file: str = ""
    # This node's certificate chain and key; "{id}" is replaced by the node id.
    cert_file: str = ""
    key_file: str = ""
    # Client certificates on the client port (mTLS): "none", "optional" or "required".
    client_auth: str = "none"
    # TLS on the raft port too (peer certificates from the same CA, always mutual).
    raft: bool = True


CLIENT_AUTH_MODES = ("none", "optional", "required")


@dataclass(frozen=True)
class AuthSettings:
    """The [auth] table: bearer tokens and per-namespace grants on the client port
    (node/api/authz.py). Off: every request is allowed, and each node says so at start."""

    enabled: bool = False


@dataclass(frozen=True)
class StorageSettings:
    """The [storage] table: the disk quota and its NOSPACE alarm (node/quota/alarm.py says how)."""

    # Bytes this node's data dir may take (RocksDB + raft journal + snapshots) before
    # writes that add data get 507 insufficient_storage; 2 GiB, etcd's default. Capped at
    # what the disk has: usage + free - reserve.
    quota_bytes: int = 2 * 1024**3
    # Free bytes the filesystem must keep; 0 = max(64 MiB, 5 % of the filesystem). It must
    # hold what lands between two measurements and a raft snapshot's copy of the DB.
    reserve_bytes: int = 0
    # Seconds between measurements of the data dir (a walk of a few dozen files and a
    # statvfs on the HTTP loop: 0.2 ms for a 14-file dir, see node/quota/disk_watch.py).
    check_interval_seconds: float = 1.0


@dataclass(frozen=True)
class UiSettings:
    """The [ui] table: the web console (console/, docs/console.md) served by this node at
    /ui. Off by default: a node then never imports the console (nor jinja2)."""

    enabled: bool = False
