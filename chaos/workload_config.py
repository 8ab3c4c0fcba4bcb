"""What a chaos workload does (``chaos.workload``): its clients, keys, op mix, deadlines,
idempotency probes, event streams (``chaos.stream_workload``), the watchers on its keys
(``chaos.watch_workload``), the lockers (``chaos.lock_workload``), the CRDT clients
(``chaos.crdt_workload``), and which node serves each op (``op_node``, ``pinned_nodes``)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SPREAD_MODES", "OpMix", "WorkloadConfig", "op_node", "pinned_nodes"]

SPREAD_MODES = ("round-robin", "sticky")


@dataclass(frozen=True)
class OpMix:
    """Relative weights of the op kinds a (non-pinned) client picks from."""

    get: float = 0.35
    put: float = 0.20
    cas: float = 0.20
    txn: float = 0.20
    delete: float = 0.05

    def choices(self) -> tuple[list[str], list[float]]:
        names = ["get", "put", "cas", "txn", "delete"]
        return names, [getattr(self, n) for n in names]


@dataclass(frozen=True)
class WorkloadConfig:
    clients: int = 16
    keys: int = 8  # even: txns use fixed pairs (k0,k1), (k2,k3), ...
    seed: int = 7
    mix: OpMix = field(default_factory=OpMix)
    # Share of clients that only read, pinned to one node (rounded down).
    pinned_reader_share: float = 0.25
    # One HTTP attempt; above the cluster's request_timeout so the node's own
    # "timeout"/"unavailable" answer normally arrives first.
    attempt_timeout: float = 3.0
    # How long one op may keep retrying before it records its (unknown) outcome.
    op_deadline: float = 8.0
    # Pause between a client's ops (0: as fast as it can).
    think_time: float = 0.0
    ns: str = "chaos"
    # How a (non-pinned) client picks the node of each op: "round-robin" (op_node) or
    # "sticky" (one node until it fails).
    spread: str = "round-robin"
    # Share of the pinned readers' gets that are serializable.
    serializable_share: float = 0.3
    # How long a pinned reader's get may retry: short, so that a node that refuses
    # linearizable reads (cut off, no leader) is still asked every second, serializable
    # reads included, instead of one read retrying for op_deadline.
    pinned_op_deadline: float = 1.0
    # Share of a client's ops that are idempotency probes, and how long after a probe
    # completed its re-send goes out (seconds, uniform); a third of the probes get a
    # second re-send as long again after the first.
    resend_share: float = 0.05
    resend_delay: tuple[float, float] = (0.3, 3.0)
    # Event streams (chaos.stream_workload), on by default: the share of a client's ops
    # that are stream ops (0 turns them off; pinned readers use it for their stream
    # reads), how many streams, the share of (non-pinned) stream ops that read a stream
    # whole, the share of appends with expect="any" (the rest expect the last_seq the
    # client knows), a read's page size, and when an unknown append is re-sent (same
    # event ids; seconds after it gave up, uniform; up to ``stream_resends`` times);
    # ``stream_resend_share`` of the acknowledged appends are re-sent once too (the
    # store must answer every event as a duplicate, at its seq).
    stream_share: float = 0.15
    streams: int = 2
    stream_read_share: float = 0.25
    stream_any_share: float = 0.2
    stream_page: int = 100
    stream_resend_delay: tuple[float, float] = (0.2, 2.0)
    stream_resends: int = 2
    stream_resend_share: float = 0.1
    # Watchers (chaos.watch_workload), on by default: how many watch the kv keys (all
    # start with ``watch_prefix``) through the whole run (0 turns the watch check off),
    # their progress interval, and ``watch_drop`` (a MUTATION: watcher w0 loses its Nth
    # delivered event; 0: none).
    watchers: int = 2
    watch_prefix: str = "k"
    watch_progress: float = 1.0
    watch_drop: int = 0
    # Lockers (chaos.lock_workload), on by default: how many contend for ``lock_name``
    # (0 turns the lock check off), doing ``lock_writes`` (min, max) fenced writes to
    # ``lock_key`` per hold; the lock's lease TTL, how long one waits for it, how long one
    # op may retry; a ``lock_pause_share`` of the holds pause (no keepalive, no write) for
    # ttl + ``lock_pause_extra`` s; ``lock_unfenced`` (a MUTATION): writes carry no fence.
    lockers: int = 3
    lock_name: str = "chaos-lock"
    lock_key: str = "lockdata"
    lock_writes: tuple[int, int] = (2, 4)
    lock_ttl: float = 2.0
    lock_timeout: float = 8.0
    lock_op_deadline: float = 5.0
    lock_pause_share: float = 0.2
    lock_pause_extra: float = 1.5
    lock_unfenced: bool = False
    # CRDT clients (chaos.crdt_workload), on by default: how many share a counter through
    # replicas of ``crdt_key`` (0 turns the CRDT check off); each adds ``crdt_add`` (min,
    # max) per local increment, ``crdt_think`` s apart, and syncs after ``crdt_sync_every``
    # increments (a ``crdt_sync_full_share`` of the syncs ship the whole state); one call
    # may retry for ``crdt_op_deadline`` s; ``crdt_reuse_id`` (a MUTATION): a client's
    # replica restarts without its state under its old replica id.
    crdt_clients: int = 2
    crdt_key: str = "crdt/visits"
    crdt_add: tuple[int, int] = (1, 5)
    crdt_think: tuple[float, float] = (0.02, 0.15)
    crdt_sync_every: tuple[int, int] = (1, 4)
    crdt_sync_full_share: float = 0.1
    crdt_op_deadline: float = 1.0
    crdt_reuse_id: bool = False

    def key_names(self) -> list[str]:
        return [f"k{i}" for i in range(self.keys)]

    def stream_names(self) -> list[str]:
        """The streams of the run (none when ``stream_share`` is 0)."""
        return [f"s{i}" for i in range(self.streams)] if self.stream_share > 0 else []


def op_node(process: int, op_number: int, attempt: int, n_nodes: int) -> int:
    """Index of the node that serves attempt ``attempt`` (0 = the first) of op
    ``op_number`` of client ``process``: round-robin, so each client's consecutive ops
    (and the clients' ops at any moment) are spread evenly over the nodes, and a retry
    goes to the next node."""
    return (process + op_number + attempt) % n_nodes


def pinned_nodes(clients: int, share: float, n_nodes: int) -> list[int]:
    """Node index of each pinned reader (the last clients): a ``share`` of the clients,
    raised to one per node when there are at least two clients per node."""
    n = int(clients * share)
    if share > 0 and clients >= 2 * n_nodes:
        n = max(n, n_nodes)
    return [i % n_nodes for i in range(n)]
