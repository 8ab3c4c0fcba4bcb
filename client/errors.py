"""Exceptions raised by the statekeeper client.

Every error the server reports is ``{"error": {"code", "message", ...}}`` plus an HTTP
status (see docs/protocol.md); the client turns it into one of the classes below, chosen
by ``code`` (falling back to the HTTP status for bodies that are not ours, e.g. a proxy's
502 page). Failures below HTTP (refused, reset, client-side timeout) use the same classes
with client-side codes:

=====================  =====================================================
code                   meaning
=====================  =====================================================
``connection_failed``  could not connect; the request was never sent
``connection_lost``    the connection broke after the request was sent
``client_timeout``     no answer within ``timeout``; the outcome is unknown
``no_endpoints``       (NoEndpoints) no endpoints were given and none are configured
                       ($STATEKEEPER_ENDPOINTS, ./cluster.toml): client/locate.py
``outcome_unknown``    (Timeout) a write ended with a refusal (503, 507, 401, 403,
                       500, ...) after an earlier attempt timed out or lost its
                       connection: it may have been applied; ``__cause__`` is the
                       refusal
=====================  =====================================================

Catch :class:`StatekeeperError` for everything. Errors raised for a write carry the
``idempotency_key`` that was used, so a caller that gives up on ``Timeout`` can retry
later with the same key and still have the write take effect at most once.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CLIENT_CODES",
    "ArchiveCorrupt",
    "ArchiveUrlRefused",
    "Archived",
    "CacheStale",
    "Compacted",
    "Conflict",
    "CrdtTypeMismatch",
    "EffectClaimLost",
    "EffectInProgress",
    "EffectResultLost",
    "ExpectationFailed",
    "FenceMismatch",
    "InvalidRequest",
    "LeaseNotFound",
    "LockHeld",
    "LockNotHeld",
    "LockTimeout",
    "NoEndpoints",
    "NotFound",
    "StatekeeperError",
    "StreamNotFound",
    "PermissionDenied",
    "Timeout",
    "TlsError",
    "Unauthenticated",
    "Unavailable",
    "WatchOverflow",
    "error_class",
]

CLIENT_CODES = (
    "connection_failed",
    "connection_lost",
    "client_timeout",
    "no_endpoints",
    "outcome_unknown",
    "tls_failed",
)


class StatekeeperError(Exception):
    """Base class of every client error.

    Attributes:
        code: machine-readable error code (server's ``error.code`` or a client code).
        status: HTTP status, or ``None`` when no HTTP answer was received.
        message: human-readable explanation.
        details: every other field the server sent with the error (e.g. ``revision``).
        idempotency_key: key of the failed write (``None`` for reads).
        endpoint: URL of the node that produced the last error, if known.
        attempts: how many requests the call sent before giving up.
    """

    def __init__(
        self,
        message: str = "",
        *,
        code: str = "error",
        status: int | None = None,
        details: dict[str, Any] | None = None,
        endpoint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.message = message
        self.details: dict[str, Any] = details if details is not None else {}
        self.endpoint = endpoint
        self.idempotency_key: str | None = None
        self.attempts = 0  # requests sent for the call, set by the retry loop

    @property
    def revision(self) -> int | None:
        """Store revision the server reported with the error, when it sent one."""
        rev = self.details.get("revision")
        return rev if isinstance(rev, int) else None

    @property
    def retryable(self) -> bool:
        """True for failures a retry may cure (the default RetryPolicy retries them)."""
        return False

    def __str__(self) -> str:
        where = f" (HTTP {self.status})" if self.status is not None else ""
        return f"{self.code}: {self.message}{where}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status!r}, message={self.message!r})"

    def __reduce__(self):  # keyword-only __init__ would otherwise break pickling
        state = dict(self.__dict__)
        return (_rebuild, (type(self), state))


def _rebuild(cls: type[StatekeeperError], state: dict[str, Any]) -> StatekeeperError:
    err = cls.__new__(cls)
    Exception.__init__(err, state.get("message", ""))
    err.__dict__.update(state)
    return err


class NotFound(StatekeeperError):
    """The key (``key_not_found``) or the path (``not_found``) does not exist."""


class Conflict(StatekeeperError):
    """A compare-and-swap expectation was not met (``compare_failed``).

    Attributes:
        current: the key's current :class:`~client.results.KeyValue`, or ``None`` if the
            key does not exist.
    """

    def __init__(self, message: str = "", *, current: Any = None, **kw: Any) -> None:
        kw.setdefault("code", "compare_failed")
        super().__init__(message, **kw)
        self.current = current


class ExpectationFailed(Conflict):
    """A stream append's ``expect`` did not hold (``expectation_failed``, 409); nothing was
    appended. ``current`` is None (streams have no KeyValue).

    Attributes:
        last_seq: the stream's last seq when the append was refused (0: no events).
        exists: whether the stream exists.
    """

    @property
    def last_seq(self) -> int:
        value = self.details.get("last_seq")
        return value if isinstance(value, int) else 0

    @property
    def exists(self) -> bool:
        return bool(self.details.get("exists", False))


class CrdtTypeMismatch(Conflict):
    """A CRDT merge or read found another kind of value at the key
    (``crdt_type_mismatch``, 409): a CRDT of another type, or a plain (non-CRDT) value;
    nothing was merged. ``current`` is None; the message says what is there.

    Attributes:
        found: the CRDT type the key holds (None: a plain value, or unreadable).
    """

    @property
    def found(self) -> str | None:
        value = self.details.get("found")
        return value if isinstance(value, str) else None


class StreamNotFound(NotFound):
    """``stream_info`` of a stream that does not exist (``stream_not_found``, 404)."""


class LeaseNotFound(NotFound):
    """The lease does not exist: never granted, revoked, or expired (``lease_not_found``,
    404); its keys are gone. Nothing was applied.

    Attributes:
        lease: the lease id the server named (None if it named none).
    """

    @property
    def lease(self) -> int | None:
        value = self.details.get("lease")
        return value if isinstance(value, int) else None


class LockNotHeld(NotFound):
    """The waiter is gone (``lock_not_held``, 404): released already, or its lease expired
    or was revoked (``lock_release``; a :class:`client.Lock` that lost its place while
    waiting). Nothing was applied.

    Attributes:
        name: the lock's name; fence: the waiter's fence (None if the server named none).
    """

    @property
    def name(self) -> str | None:
        value = self.details.get("name")
        return value if isinstance(value, str) else None

    @property
    def fence(self) -> int | None:
        value = self.details.get("fence")
        return value if isinstance(value, int) else None


class FenceMismatch(Conflict):
    """A fenced write was refused (``fence_mismatch``, 409): its token is not the fence of
    the lock's current holder (the lock moved on: the writer's lease expired or it
    released), so NOTHING was applied. ``current`` is None.

    Attributes:
        holder_fence: the current holder's fence, None when nobody holds the lock.
        token: the fence the write carried; name: the lock's name.
    """

    @property
    def holder_fence(self) -> int | None:
        value = self.details.get("holder_fence")
        return value if isinstance(value, int) else None

    @property
    def token(self) -> int | None:
        value = self.details.get("token")
        return value if isinstance(value, int) else None

    @property
    def name(self) -> str | None:
        value = self.details.get("name")
        return value if isinstance(value, str) else None


class LockHeld(Conflict):
    """Someone else holds the lock (``lock_held``, 409): ``client.lock(..., wait=False)``
    or ``lock_acquire(wait=False)``; nothing was written. ``current`` is None.

    Attributes:
        holder_fence: the holder's fence (None if unknown); name: the lock's name.
    """

    @property
    def holder_fence(self) -> int | None:
        value = self.details.get("holder_fence")
        return value if isinstance(value, int) else None

    @property
    def name(self) -> str | None:
        value = self.details.get("name")
        return value if isinstance(value, str) else None


class LockTimeout(LockHeld):
    """``client.lock(..., timeout=t)`` did not get the lock within ``t`` seconds (client
    code ``lock_timeout``): its waiter left the queue again. ``holder_fence``: the holder
    it last saw."""


class EffectInProgress(Conflict):
    """``client.effects.run(key, fn, wait=False)`` (or with a ``timeout``) found the effect
    claimed by another runner whose lease is alive (client code ``effect_in_progress``;
    client/effects/ledger.py). Nothing was written and fn was not called.

    Attributes:
        key: the effect key; holder_fence: the running claim's fence (None if unknown).
    """

    @property
    def key(self) -> str | None:
        value = self.details.get("key")
        return value if isinstance(value, str) else None

    @property
    def holder_fence(self) -> int | None:
        value = self.details.get("holder_fence")
        return value if isinstance(value, int) else None


class EffectClaimLost(Conflict):
    """This runner lost its claim on an effect (client code ``effect_claim_lost``): its
    lease expired (the process was paused or cut off past ``ttl``) and its fenced write was
    refused. ``fn_called`` False: fn was not called (retry freely). True: fn ran but its
    result was NOT recorded; the next claimant is told ``maybe_happened``.

    Attributes:
        key: the effect key; fence: this runner's fence; fn_called: see above.
    """

    @property
    def key(self) -> str | None:
        value = self.details.get("key")
        return value if isinstance(value, str) else None

    @property
    def fence(self) -> int | None:
        value = self.details.get("fence")
        return value if isinstance(value, int) else None

    @property
    def fn_called(self) -> bool:
        return bool(self.details.get("fn_called", False))


class EffectResultLost(StatekeeperError):
    """The effect is DONE (recorded once; fn is not called again) but its result could not
    be stored: not msgpack-able, or larger than the server's value limit (client code
    ``effect_result_lost``). Raised by the run that called fn and by every later run.

    Attributes:
        key: the effect key; reason: why the result was not stored.
    """

    @property
    def key(self) -> str | None:
        value = self.details.get("key")
        return value if isinstance(value, str) else None

    @property
    def reason(self) -> str:
        return str(self.details.get("reason", ""))


class Archived(NotFound):
    """The key, or the stream events asked for, were moved to the archive (``archived``,
    410): a ``get`` of a key sealed by ``statekeeper archive run``, or a ``read_stream``
    from a seq inside an archived range. A NotFound (the data is not live in the store),
    but a ``get(..., default=...)`` still raises it: pass ``archived="fetch"`` to read the
    value from the archive or ``archived="restore"`` to make it live again (docs/archive.md).

    Attributes:
        segment: the archive segment id holding the data; url: where its file is;
        sha256: the file's checksum; segment_bytes: its size.
        key (a get) / stream, from_seq, before_seq (a read_stream); archived_revision.
    """

    def _str(self, name: str) -> str | None:
        value = self.details.get(name)
        return value if isinstance(value, str) else None

    def _int(self, name: str) -> int | None:
        value = self.details.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def segment(self) -> str | None:
        return self._str("segment")

    @property
    def url(self) -> str | None:
        return self._str("url")

    @property
    def sha256(self) -> str | None:
        return self._str("sha256")

    @property
    def segment_bytes(self) -> int | None:
        """The segment file's size as sealed (None from a node before it was sent)."""
        return self._int("bytes")

    @property
    def key(self) -> str | None:
        return self._str("key")

    @property
    def stream(self) -> str | None:
        return self._str("stream")

    @property
    def from_seq(self) -> int | None:
        return self._int("from_seq")

    @property
    def before_seq(self) -> int | None:
        return self._int("before_seq")

    @property
    def archived_revision(self) -> int | None:
        return self._int("archived_revision")


class ArchiveCorrupt(StatekeeperError):
    """An archive segment file failed verification (client code ``archive_corrupt``):
    its sha256 is not the one the cluster (or the manifest) recorded, or it does not
    decode as a segment. Nothing was restored from it. ``segment``: its id."""

    @property
    def segment(self) -> str | None:
        value = self.details.get("segment")
        return value if isinstance(value, str) else None


class ArchiveUrlRefused(StatekeeperError):
    """The cluster named a segment URL this client will not read (client code
    ``archive_url_refused``): it is not under any archive root the client was configured
    with (``archive_roots=`` / $STATEKEEPER_ARCHIVE_ROOTS), or it has dot segments, a query
    or control characters. A segment's URL is whatever a writer of the namespace sealed, so
    following it anywhere would let that writer make readers fetch internal addresses or
    local files (docs/archive.md). Nothing was read. ``url``: the refused URL."""

    @property
    def url(self) -> str | None:
        value = self.details.get("url")
        return value if isinstance(value, str) else None


class Unavailable(StatekeeperError):
    """No node could serve the request: no leader, not ready, shutting down, or every
    connection attempt failed (after retries).

    When a call with several endpoints gives up, the message says what each node it tried
    came to, e.g. ``no leader: 1 of 3 nodes reachable (http://h:7000 answered: node-0
    knows no raft leader ...; cannot connect to http://h:7001, http://h:7002)``, and
    ``details["nodes"]`` maps each URL tried to its last error code (client/retry.py); the
    code and status stay those of the last attempt."""

    @property
    def retryable(self) -> bool:
        return True


class NoEndpoints(StatekeeperError, ValueError):
    """A client was made without endpoints and none are configured (``no_endpoints``):
    neither $STATEKEEPER_ENDPOINTS nor a cluster.toml (client/locate.py). Also a
    :class:`ValueError`: it is a missing argument, raised before any request."""


class WatchOverflow(Unavailable):
    """A watch's stream was ended because the client read too slowly (``watch_overflow``).
    Retryable: the watch iterator resumes by itself from the last revision it delivered
    + 1, so this is raised only once the RetryPolicy gives up."""


class CacheStale(Unavailable):
    """A cache's view could not serve a read as fresh as asked (``max_lag``) or reach
    this client's own write (read-your-writes) within the read's timeout: its watch is
    behind or down (client/cache/sync.py; client-side code ``cache_stale``; details:
    ``revision``, ``known_revision``, ``lag_seconds``, ``read_floor``). Retryable."""


class InsufficientStorage(StatekeeperError):
    """HTTP 507 ``insufficient_storage``: the node's NOSPACE alarm is raised (its storage
    quota is reached or its disk almost full), so it refused a write that adds data. This
    attempt was not proposed; raised only when no earlier attempt of the call may have
    been applied (after one that timed out or lost its connection the call raises
    :class:`Timeout` ``outcome_unknown`` with this as its cause). Not retried: it fails
    the same way until someone deletes or compacts data (reads, deletes and compaction
    still work; the alarm then clears)."""


class InvalidRequest(StatekeeperError, ValueError):
    """The request was rejected as invalid (HTTP 400/405/413/415/422); retrying will not help.

    Also a :class:`ValueError`, and raised client-side for bad arguments.
    """


class Compacted(StatekeeperError):
    """The requested revision is older than the compaction point (history dropped).

    A watch raises it when its start (or the revision it had reached) is at or below
    ``compact_revision``: read the current state, then watch from that read's revision + 1.
    """

    @property
    def compact_revision(self) -> int | None:
        """The compaction point the server reported, when it sent one."""
        value = self.details.get("compact_revision")
        return value if isinstance(value, int) else None


class Timeout(StatekeeperError):
    """The outcome is unknown: the server (``timeout``, 504) or the client
    (``client_timeout``) gave up waiting. A write may still commit; retry it with the
    same ``idempotency_key`` to make sure it takes effect exactly once."""

    @property
    def retryable(self) -> bool:
        return True


class TlsError(StatekeeperError):
    """The TLS handshake failed (client code ``tls_failed``): the node's certificate is
    not signed by the CA the client trusts (``ca=``), does not name the host in the URL,
    or the node refused the client's certificate (or its absence). The request was not
    delivered. Not retried: every node has a certificate from the same CA, so this is a
    configuration problem, not a passing fault."""


class Unauthenticated(StatekeeperError):
    """HTTP 401: no token, or a malformed, unknown (revoked), wrong or expired one (the
    message says which). Not retried: a new token is needed."""


class PermissionDenied(StatekeeperError):
    """HTTP 403: the token's grants do not cover the op (``details``: ``op``, ``ns``).
    Not retried."""


_BY_CODE: dict[str, type[StatekeeperError]] = {
    "unauthenticated": Unauthenticated,
    "permission_denied": PermissionDenied,
    "token_exists": Conflict,
    "key_not_found": NotFound,
    "not_found": NotFound,
    "compare_failed": Conflict,
    "expectation_failed": ExpectationFailed,
    "stream_not_found": StreamNotFound,
    "lease_not_found": LeaseNotFound,
    "lock_not_held": LockNotHeld,
    "fence_mismatch": FenceMismatch,
    "lock_held": LockHeld,
    "crdt_type_mismatch": CrdtTypeMismatch,
    "too_many_events": InvalidRequest,
    "too_many_watches": InvalidRequest,  # 429: the token has the most open watches it may
    "unavailable": Unavailable,
    "watch_overflow": WatchOverflow,
    "not_ready": Unavailable,
    "connection_failed": Unavailable,
    "connection_lost": Unavailable,
    "timeout": Timeout,
    "client_timeout": Timeout,
    "tls_failed": TlsError,
    "client_certificate_required": TlsError,
    "compacted": Compacted,
    "archived": Archived,
    "archive_corrupt": ArchiveCorrupt,
    "archive_url_refused": ArchiveUrlRefused,
    "malformed_body": InvalidRequest,
    "unsupported_media_type": InvalidRequest,
    "unknown_op": InvalidRequest,
    "invalid_argument": InvalidRequest,
    "unknown_field": InvalidRequest,
    "invalid_request": InvalidRequest,
    "key_too_large": InvalidRequest,
    "value_too_large": InvalidRequest,
    "request_too_large": InvalidRequest,
    "too_many_ops": InvalidRequest,
    "future_revision": InvalidRequest,
    "method_not_allowed": InvalidRequest,
    "idempotency_key_reused": InvalidRequest,
    "insufficient_storage": InsufficientStorage,
}

_BY_STATUS: dict[int, type[StatekeeperError]] = {
    400: InvalidRequest,
    401: Unauthenticated,
    403: PermissionDenied,
    404: NotFound,
    405: InvalidRequest,
    409: Conflict,
    410: Compacted,
    413: InvalidRequest,
    415: InvalidRequest,
    422: InvalidRequest,
    502: Unavailable,
    503: Unavailable,
    504: Timeout,
    507: InsufficientStorage,
}


def error_class(code: str | None, status: int | None = None) -> type[StatekeeperError]:
    """Exception class for a server error ``code`` (or, if unknown, the HTTP status)."""
    if code is not None:
        cls = _BY_CODE.get(code)
        if cls is not None:
            return cls
    if status is not None:
        return _BY_STATUS.get(status, StatekeeperError)
    return StatekeeperError
