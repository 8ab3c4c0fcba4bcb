"""HTTP API under /v1. Thin: route, decode, validate, hand to the proposer or the state
machine, encode. The wire (keep-alive, parsing, limits) is node/api/server.py; the
contract is docs/protocol.md."""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import logging
import time
from typing import Any

from statekeeper.client.auth.tokens import parse_token, root_token
from statekeeper.node.api import codec, liveness
from statekeeper.node.api.audit_log import AuditLog, WindowBudget, loggable, token_label
from statekeeper.node.api.authz import Authorizer, Principal
from statekeeper.node.api.backup import CONTENT_TYPE as BACKUP_TYPE
from statekeeper.node.api.backup import PATH as BACKUP_PATH
from statekeeper.node.api.backup import Backups
from statekeeper.node.api.deadlines import Deadlines
from statekeeper.node.api.limits import fd_budget
from statekeeper.node.api.members import member_routes, member_url, status_fields
from statekeeper.node.api.server import (
    HttpServer,
    Request,
    Response,
    ServerLimits,
    StreamedResponse,
)
from statekeeper.node.api.stream_auth import StreamGuard, TokenChanges
from statekeeper.node.api.watch import Watches
from statekeeper.node.api.web_guard import WebGuard
from statekeeper.node.config import ClusterConfig
from statekeeper.node.entry import mark_validated
from statekeeper.node.errors import OpError, status_for
from statekeeper.node.metrics import NodeMetrics, StatusCollector, storage_gauges
from statekeeper.node.ops.core import BATCH_FIELDS, OPS, is_write, validate_op, validate_ops
from statekeeper.node.ops.known_fields import refuse_unknown
from statekeeper.node.ops.watch import WATCH_PATH, validate_watch
from statekeeper.node.proposer import Proposer
from statekeeper.node.quota.alarm import StorageQuota
from statekeeper.node.quota.gate import QuotaGate
from statekeeper.node.raft import RaftNode
from statekeeper.node.reads import ReadPolicy, read_options
from statekeeper.node.store import StateMachine

log = logging.getLogger("statekeeper.http")
auth_log = logging.getLogger("statekeeper.auth")

KV_OPS = ("put", "get", "delete", "range", "cas", "txn", "compact")
# Ops with a route of their own (POST path -> op): /v1/streams/*, /v1/leases/*,
# /v1/locks/*, /v1/crdt/*.
OWN_ROUTES = {spec.path: name for name, spec in OPS.items() if name not in KV_OPS}
# Bodies whose JSON may carry values as base64 (codec.decode): ops with byte fields, and a
# batch (its ops). Any other body's `value_b64` is an unknown field, not a value to decode.
_CARRY_VALUES = frozenset({"batch", *(name for name, spec in OPS.items() if spec.wired)})
_BATCH_KNOWN = frozenset(BATCH_FIELDS)
# Answered without a token even with [auth] enabled (docs/protocol.md).
# /metrics too: see handle_metrics.
OPEN_ROUTES = frozenset(
    {"/v1/health/live", "/v1/health/ready", "/v1/status", "/v1/openapi.json", "/metrics"}
)
# Where the web console answers when [ui] is enabled (console/app.py's PREFIX).
CONSOLE_PREFIX = "/ui"
# Read barriers per second that requests with an unknown token id may cost (the token may
# only be newer than this node's state). Each barrier on a follower is a replicated, fsynced
# raft entry: 547 unauthenticated requests/s made 2,759 entries in 10 s on every node, and
# the extra time told whether a token id exists (issue 27, item 12). Past the budget an
# unknown id is answered 401 at once.
UNKNOWN_TOKEN_BARRIERS_PER_SECOND = 5
# Requests refused by [auth], counted by code (statekeeper_auth_denials_total).
AUTH_DENIALS = frozenset({"unauthenticated", "permission_denied"})
# The request's authenticated caller (set by dispatch, read by the handlers it awaits).
_caller: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("caller", default=None)


class Api:
    def __init__(
        self,
        cluster: ClusterConfig,
        node_id: str,
        sm: StateMachine,
        raft: RaftNode,
        proposer: Proposer,
        metrics: NodeMetrics | None = None,
        quota: StorageQuota | None = None,
        disk_free: Any = None,
    ):
        self.cluster = cluster
        self.node_id = node_id
        self.sm = sm
        self.raft = raft
        self.proposer = proposer
        self.limits = cluster.limits
        self.timeout = cluster.raft.request_timeout
        self.deadlines = Deadlines(self.timeout)
        self._urls = {n.id: cluster.url(n.id) for n in cluster.nodes}
        self.shutting_down = False
        # The NOSPACE alarm (node/quota/alarm.py); disk_free: a fresh statvfs, or None.
        self.quota = quota or StorageQuota(cluster.storage.quota_bytes)
        self._disk_free = disk_free or (lambda: None)
        self.metrics = metrics or NodeMetrics()
        self.metrics.attach(
            StatusCollector(lambda: self.raft.status(), self._counters, self._sizes)
        )
        self.reads = ReadPolicy(
            raft,
            proposer,
            lambda: sm.revision,
            self._check_serving,
            self.timeout,
            stopping=lambda: self.shutting_down,
            metrics=self.metrics,
        )
        # The quota's refusal, after the idempotency lookup (node/quota/gate.py).
        self.gate = QuotaGate(node_id, self.quota, self._disk_free, sm, self.reads)
        self.watches = Watches(
            sm,
            self.reads,
            self.limits,
            stopping=lambda: self.shutting_down,
            leader_known=lambda: self.raft.leader_known(),
        )
        # Wakes open watches and long polls when a token is created or revoked; main.py
        # calls its `applied` after every apply (node/api/stream_auth.py).
        self.token_changes = TokenChanges(lambda: sm.tokens)
        self.authz: Authorizer | None = None
        # 401/403 lines: rate-limited, request fields capped and escaped (node/api/audit_log.py).
        self.audit = AuditLog(auth_log)
        self.unknown_token_barriers = WindowBudget(UNKNOWN_TOKEN_BARRIERS_PER_SECOND, 1.0)
        if cluster.auth.enabled:
            self.authz = Authorizer(
                lambda: sm.tokens,
                hashlib.sha256(root_token(cluster.secret).encode()).digest(),
                lambda: int(time.time() * 1000),
                sm.lease_ns,
            )
            self.auth_status: dict[str, Any] = {"enabled": True}
        else:
            url = cluster.url(node_id)
            warning = (
                f"auth is disabled: any client that reaches {url} can read and write every "
                "namespace; set [auth] enabled = true (docs/protocol.md#security)"
            )
            auth_log.warning(warning)
            self.auth_status = {"enabled": False, "warning": warning}
        self.backups = Backups(sm, cluster.name, node_id)
        self.web_guard = WebGuard(
            tuple(n.host for n in cluster.nodes),
            cluster.http.allowed_origins,
            cluster.http.allowed_hosts,
            cluster.auth.enabled,
        )
        # The web console at /ui ([ui] enabled = true): its requests skip the web guard and
        # the bearer check, for it has its own (sessions, CSRF, CSP: console/app.py).
        # Its audit lines go through self.audit: the same log, format and budget as the API's.
        self.console = _mount_console(cluster, self.audit) if cluster.ui.enabled else None
        # path template -> method -> handler
        self._methods: dict[str, dict[str, Any]] = {}
        # (method, path) -> handler and path -> metrics label, for paths that route:
        # _route and _route_label were ~2.5 % of a leader's GIL time at 64 clients doing
        # puts (py-spy --gil, issue 28); a made-up path is never kept.
        self._handlers: dict[tuple[str, str], Any] = {}
        self._labels: dict[str, str] = {}
        for (method, path), handler in self.routes().items():
            self._methods.setdefault(path, {})[method] = handler

    # -- plumbing -----------------------------------------------------------------------

    def server(self) -> HttpServer:
        """The HTTP server that answers every request through dispatch()."""
        http = self.cluster.http
        return HttpServer(
            self.dispatch,
            self.protocol_error,
            ServerLimits(
                max_body_bytes=self.limits.max_request_bytes,
                max_header_bytes=http.max_header_bytes,
                keepalive_timeout=http.keepalive_timeout,
                max_connections=fd_budget(http.max_connections),
                max_connections_per_address=http.max_connections_per_address,
                header_timeout=http.header_timeout,
                body_timeout=http.body_timeout,
            ),
            extra_headers=(("X-Statekeeper-Node", self.node_id),),
        )

    def routes(self) -> dict[tuple[str, str], Any]:
        """(method, path) -> handler; `/v1/kv/{op}` stands for every op in KV_OPS."""
        return {
            ("POST", "/v1/kv/{op}"): self.handle_kv,
            **{("POST", path): self.handle_own_route for path in OWN_ROUTES},
            ("POST", "/v1/batch"): self.handle_batch,
            ("POST", WATCH_PATH): self.handle_watch,
            ("GET", "/v1/status"): self.handle_status,
            ("GET", "/v1/health/live"): self.handle_live,
            ("GET", "/v1/health/ready"): self.handle_ready,
            ("GET", "/v1/openapi.json"): self.handle_openapi,
            ("GET", "/metrics"): self.handle_metrics,
            ("GET", BACKUP_PATH): self.handle_backup,
            **member_routes(self),  # /v1/cluster/members/{add,remove}
        }

    def _route(self, request: Request):
        """The handler, or not_found / unknown_op / method_not_allowed: before any token is
        looked at, so a made-up path is never authenticated (nor logged as a 401)."""
        known = self._handlers.get((request.method, request.path))
        if known is not None:
            return known
        handler = self._find_route(request)
        # Only real routes get here: bounded by the route table (methods x paths).
        self._handlers[(request.method, request.path)] = handler
        return handler

    def _find_route(self, request: Request):
        path = request.path
        template = self._template(path)
        allowed = self._methods.get(template)
        if allowed is None:
            raise OpError("not_found", f"no such endpoint: {loggable(path)}")
        method = "GET" if request.method == "HEAD" else request.method
        handler = allowed.get(method)
        if handler is None:
            raise OpError(
                "method_not_allowed",
                f"{loggable(request.method)} is not allowed on {loggable(path)}; "
                f"use {', '.join(sorted(allowed))}",
            )
        if template == "/v1/kv/{op}" and path[7:] not in KV_OPS:
            raise OpError(
                "unknown_op", f"unknown op {loggable(path[7:])!r}; known: {', '.join(KV_OPS)}"
            )
        return handler

    @staticmethod
    def _template(path: str) -> str:
        # /v1/kv/{op}: the op is checked by _route (unknown_op, not not_found).
        return "/v1/kv/{op}" if path.startswith("/v1/kv/") and "/" not in path[7:] else path

    def _route_label(self, path: str) -> str:
        """The route template a request is counted under: bounded, never the raw path
        (/v1/kv/put for a KV op, /v1/kv/{op} for an unknown op, "other" for no route)."""
        label = self._labels.get(path)
        if label is not None:
            return label
        if self.console is not None and (path + "/").startswith(CONSOLE_PREFIX + "/"):
            return CONSOLE_PREFIX  # every console page under one label
        template = self._template(path)
        if template == "/v1/kv/{op}":
            if path[7:] not in KV_OPS:
                return template
        elif template not in self._methods:
            return "other"
        self._labels[path] = path  # a real route's own path: bounded like _handlers
        return path

    async def dispatch(self, request: Request) -> Response | StreamedResponse:
        """The one entry point of the HTTP server: every answer, errors included
        (counted and timed in statekeeper_http_request*, node/metrics.py)."""
        m = self.metrics
        m.requests_in_flight += 1
        started = time.perf_counter()
        try:
            resp = await self._dispatch(request)
        finally:
            m.requests_in_flight -= 1
        m.observe_request(
            self._route_label(request.path), resp.status, time.perf_counter() - started
        )
        return resp

    async def _dispatch(self, request: Request) -> Response | StreamedResponse:
        if self.console is not None and (request.path + "/").startswith(CONSOLE_PREFIX + "/"):
            return await self.console.handle(request)
        fmt = codec.JSON
        try:
            fmt = codec.pick_format(
                request.headers.get("content-type"), request.headers.get("accept")
            )
        except OpError:
            pass
        try:
            self.web_guard.check(request.method, request.headers)  # CSRF, DNS rebinding
            handler = self._route(request)
            if self.authz is None:
                request.trusted = True  # no tokens: every client alike keeps its connection
            elif request.path not in OPEN_ROUTES:
                _caller.set(await self._authenticate(request))
                request.trusted = True
            return await handler(request)
        except OpError as e:
            resp = self._error(e, fmt)
            if e.code in AUTH_DENIALS:
                self.metrics.auth_denials.labels(e.code).inc()
            if e.code == "unauthenticated":
                resp.headers = (("WWW-Authenticate", "Bearer"),)
            elif e.code == "method_not_allowed":
                allowed = self._methods[self._template(request.path)]
                resp.headers = (("Allow", ", ".join(sorted(allowed))),)
            return resp
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "unhandled error serving %s %s", loggable(request.method), loggable(request.path)
            )
            return self._error(OpError("internal", "internal error; see the node's log"), fmt)

    async def _authenticate(self, request: Request) -> Principal:
        header = request.headers.get("authorization")
        try:
            return self.authz.authenticate(header)
        except OpError as first:
            token = (header or "").partition(" ")[2].strip()
            parsed = parse_token(token)  # the id only: never the token or its hash
            e = first
            if (
                parsed is not None
                and parsed[0] not in self.authz.tokens()
                and self.unknown_token_barriers.take()[0]
            ):
                # A token created a moment ago may not be applied here yet (this node
                # may lag by up to a heartbeat): after a read barrier it is, if it exists.
                try:
                    await self.reads.wait("linearizable", None)
                    return self.authz.authenticate(header)
                except OpError as again:
                    e = again if again.code == "unauthenticated" else first
            self.audit.warning(
                "unauthenticated: token %s, %s %s, client %s: %s",
                token_label(token),
                request.method,
                loggable(request.path),
                loggable(request.peer or "?"),
                loggable(e.message),
            )
            raise e from None

    async def _authorize_ops(self, request: Request, ops: list[dict]) -> None:
        """Authorize validated ops (all or nothing). An op naming a lease or token this node
        does not know waits for a read barrier first: the node may only lag behind."""
        if any(self.authz.unknown_ids(op["op"], op) for op in ops):
            await self.reads.wait("linearizable", None)
        for i, op in enumerate(ops):
            try:
                self._authorize(request, op["op"], op)
            except OpError as e:
                if len(ops) == 1:
                    raise
                raise OpError(e.code, f"ops[{i}]: {e.message}", **e.extra) from None

    def _authorize(self, request: Request, name: str, op: dict) -> None:
        """Raise permission_denied (logged) unless the caller may run the validated op."""
        principal = _caller.get()
        try:
            self.authz.authorize(principal, name, op)
        except OpError as e:
            if e.code != "permission_denied":  # an unknown lease / token: not a denial
                raise
            self.audit.warning(
                "permission_denied: token %s, op %s, ns %s, client %s: %s",
                principal.id,
                name,
                loggable(op.get("ns")),
                loggable(request.peer or "?"),
                loggable(e.message),
            )
            raise

    def _whoami(self) -> dict:
        principal = _caller.get()
        if principal is None:  # auth disabled: nobody is checked
            return {"id": None, "auth_enabled": False}
        return {**principal.info(), "auth_enabled": True}

    def protocol_error(self, status: int, code: str, message: str) -> Response:
        """An answer for a request the HTTP server could not parse or accept (JSON)."""
        return Response(
            status,
            codec.encode({"error": {"code": code, "message": message}}, codec.JSON),
            codec.JSON,
        )

    def _respond(self, obj: Any, fmt: str, status: int = 200) -> Response:
        # X-Statekeeper-Node is added by the server to every answer.
        return Response(status, codec.encode(obj, fmt), fmt)

    def _error(self, err: OpError, fmt: str) -> Response:
        return self._respond({"error": err.to_dict()}, fmt, err.status)

    @staticmethod
    def _body(request: Request, op: str) -> tuple[dict, str]:
        fmt = codec.pick_format(request.headers.get("content-type"), request.headers.get("accept"))
        return codec.decode(request.body, fmt, op, _CARRY_VALUES), fmt

    def _check_serving(self) -> None:
        if self.shutting_down:
            raise OpError("unavailable", f"{self.node_id} is shutting down; use another node")
        # Fail fast rather than queue behind an election: nothing was submitted.
        if not self.raft.leader_known():
            raise OpError(
                "unavailable",
                f"{self.node_id} knows no raft leader (election in progress or partitioned); retry",
            )

    async def _write_within_timeout(self, fut: asyncio.Future):
        # One timer for every write in flight, not one per request (node/api/deadlines.py).
        self.deadlines.watch(fut)
        try:
            return await fut
        except asyncio.CancelledError:
            if not self.deadlines.timed_out(fut):
                raise
            raise OpError(
                "timeout",
                f"no commit within {self.timeout:g} s; the write may still be applied: "
                "retry with the same idempotency_key",
            ) from None

    # -- handlers -----------------------------------------------------------------------

    async def handle_kv(self, request: Request) -> Response:
        return await self._handle_op(request.path[7:], request)  # /v1/kv/{op}, checked by _route

    async def handle_own_route(self, request: Request) -> Response:
        """POST /v1/streams/{append,read,info,list}, /v1/leases/{grant,keepalive,revoke,
        info,list}, /v1/locks/{acquire,release,list}, /v1/crdt/{merge,get}: the op its path
        names. (The node-internal lease_expire has no route.)"""
        return await self._handle_op(OWN_ROUTES[request.path], request)

    async def _handle_op(self, name: str, request: Request) -> Response:
        body, fmt = self._body(request, name)
        if body.setdefault("op", name) != name:  # the path names the op
            raise OpError("invalid_argument", f"op must be {name!r} on this route, or absent")
        if name == "auth_whoami":  # the caller's own token: nothing to read
            read_options(body)
            validate_op(body, self.limits)
            return self._respond(self._whoami(), fmt)
        if is_write(body):
            op = validate_op(body, self.limits)
            if self.authz is not None:
                await self._authorize_ops(request, [op])
            self._check_serving()
            admission = await self.gate.admit([op], request.content_length)
            if admission.replays is not None:  # refused, and applied before (quota_gate)
                return self._single_result(name, admission.replays[0], fmt)
            try:
                result = await self._write_within_timeout(
                    self.proposer.write_many([mark_validated(op)], request.content_length)[0]
                )
            finally:
                self.quota.release(admission.admitted)
        else:
            consistency, min_rev = read_options(body)
            op = validate_op(body, self.limits)
            if self.authz is not None:
                await self._authorize_ops(request, [op])
            await self.reads.wait(consistency, min_rev)
            if op.get("wait_ms"):
                result = await self.reads.long_poll(
                    lambda: self.sm.read(op), op["wait_ms"], self._stream_guard()
                )
            else:
                result = self.sm.read(op)
        return self._single_result(name, result, fmt)

    def _single_result(self, name: str, result: dict, fmt: str) -> Response:
        if "error" in result:
            return self._respond(result, fmt, status_for(result["error"].get("code", "internal")))
        if name == "get" and result.get("kv") is None:
            err = OpError("key_not_found", "no such key")
            return self._respond({"error": err.to_dict(), "revision": result["revision"]}, fmt, 404)
        if name == "cas" and not result.get("succeeded"):
            err = OpError("compare_failed", "the key does not match the expectation")
            return self._respond({"error": err.to_dict(), **result}, fmt, 409)
        return self._respond(result, fmt)

    async def handle_batch(self, request: Request) -> Response:
        body, fmt = self._body(request, "batch")
        refuse_unknown(body, _BATCH_KNOWN, BATCH_FIELDS, "batch")
        consistency, min_rev = read_options(body)
        ops = validate_ops(body.get("ops"), self.limits)
        if self.authz is not None:  # a denied op fails the whole batch
            await self._authorize_ops(request, ops)
        writes = [(i, op) for i, op in enumerate(ops) if is_write(op)]
        results: list[dict | None] = [None] * len(ops)
        if writes:
            self._check_serving()
            write_ops = [op for _, op in writes]
            admission = await self.gate.admit(write_ops, request.content_length)
            size = (request.content_length) // max(1, len(ops))
            if admission.replays is not None:  # refused, and all applied before (quota_gate)
                done: list = admission.replays
            else:
                try:
                    done = await self._write_runs(write_ops, size)
                finally:
                    self.quota.release(admission.admitted)
            for (i, _), r in zip(writes, done, strict=True):
                results[i] = r
        if len(writes) < len(ops):
            # Reads of a batch are served after its writes, so they see them.
            if not writes or consistency != "linearizable":
                await self.reads.wait(consistency, min_rev)
            for i, op in enumerate(ops):
                if results[i] is None:
                    try:
                        results[i] = self.sm.read(op)
                    except OpError as e:
                        results[i] = {"error": e.to_dict()}
        return self._respond({"results": results}, fmt)

    async def _write_runs(self, ops: list[dict], size: int) -> list:
        """Propose a batch's validated write `ops` and wait for them: one result dict per
        op, an OpError for each op of an entry that failed when another one applied (the
        error itself is raised when none applied: _raise_unless_partly_applied)."""
        for op in ops:
            mark_validated(op)
        runs = self.proposer.write_runs(ops, size)
        if len(runs) == 1:  # the whole batch in one entry: its outcome is the batch's
            return await self._write_within_timeout(runs[0][1])
        outcomes = await self._write_within_timeout(
            asyncio.gather(*(fut for _, fut in runs), return_exceptions=True)
        )
        _raise_unless_partly_applied(outcomes)
        done: list = []
        for (n, _), outcome in zip(runs, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                done.extend([{"error": outcome.to_dict()}] * n)
            else:
                done.extend(outcome)
        return done

    async def handle_watch(self, request: Request) -> StreamedResponse:
        """POST /v1/watch: a long-lived stream of frames (node/api/watch.py)."""
        body, fmt = self._body(request, "watch")
        if self.authz is not None:
            await self._authorize_ops(request, [validate_watch(body, self.limits)])
        return await self.watches.open(body, fmt, self._stream_guard())

    def _stream_guard(self) -> StreamGuard | None:
        """The caller's token, for a stream to check again while it lasts (auth on)."""
        principal = _caller.get()
        if self.authz is None or principal is None:
            return None
        return StreamGuard(self.authz, principal, self.token_changes)

    async def handle_status(self, request: Request) -> Response:
        st = self.raft.status()
        fmt = codec.pick_format(None, request.headers.get("accept"))
        return self._respond(
            {
                "node_id": self.node_id,
                "role": st.role,
                "term": st.term,
                "leader": st.leader_id,
                "leader_url": self._urls.get(st.leader_id) or member_url(self, st.leader_id),
                "commit_index": st.commit_index,
                "applied_index": st.applied_index,
                "leader_commit_index": st.leader_commit_index,
                "has_quorum": st.has_quorum,
                "voter": st.voter,
                "log_truncations": st.log_truncations,
                "log_truncated_entries": st.log_truncated_entries,
                "rejected_peer_messages": st.rejected_peer_messages,
                "ready": st.ready,
                "revision": self.sm.revision,
                "compact_revision": self.sm.compact_revision,
                "sm_applied_index": self.sm.applied_index,
                "fsync": self.cluster.fsync,
                "entries_proposed": self.proposer.entries_proposed,
                "ops_proposed": self.proposer.ops_proposed,
                "auth": self.auth_status,
                "storage": self.quota.status(),
                **status_fields(self),
            },
            fmt,
        )

    def _counters(self) -> dict[str, int]:
        return {
            **self.raft.counters(),
            "proposals": self.proposer.ops_proposed,
            "raft_entries_proposed": self.proposer.entries_proposed,
            "storage_refused_writes": self.quota.refused,
        }

    def _sizes(self) -> dict[str, int]:
        sst, memtables = self.sm.rocksdb_bytes()
        return {
            "rocksdb_sst_bytes": sst,
            "rocksdb_memtable_bytes": memtables,
            "journal_size_bytes": self.raft.journal_size_bytes(),
            "revision": self.sm.revision,
            **storage_gauges(self.quota),
        }

    async def handle_backup(self, request: Request) -> Response | StreamedResponse:
        """GET /v1/admin/backup: the backup file, after a read barrier (node/api/backup.py).
        Needs admin on every namespace: it holds all of them, auth tokens included."""
        if self.authz is not None:
            self._authorize(request, "backup", {})
        if request.method == "HEAD":  # the route is there and the caller may use it
            return Response(200, b"", BACKUP_TYPE)
        self._check_serving()
        await self.reads.wait("linearizable", None)
        meta, chunks = await self.backups.start()
        head = (("X-Statekeeper-Revision", str(meta["revision"])),)
        return StreamedResponse(200, BACKUP_TYPE, chunks, headers=head)

    async def handle_metrics(self, request: Request) -> Response:
        """GET /metrics: Prometheus exposition (text, or OpenMetrics when the Accept header
        asks for it), families listed in docs/protocol.md#metrics.

        Open (no token) even with [auth] enabled, like /v1/status: a Prometheus scraper
        usually has no token, and the metrics hold no keys or values, only counts, sizes,
        timings and raft positions (which /v1/status already shows to anyone). They do
        reveal activity (request rates per route, store size): keep the client port off
        untrusted networks, or filter /metrics in front of the node, if that matters."""
        body, content_type = self.metrics.exposition(request.headers.get("accept"))
        return Response(200, body, content_type)

    async def handle_live(self, request: Request) -> Response:
        status, body = liveness.check(self.raft, self.node_id, self.cluster.raft.live_stall_seconds)
        return self._respond(body, codec.JSON, status)

    async def handle_ready(self, request: Request) -> Response:
        st = self.raft.status()
        if st.ready and not self.shutting_down:
            return self._respond({"ready": True, "node_id": self.node_id}, codec.JSON)
        if self.shutting_down:
            # The same code as the drain's answer to a request read after the signal
            # (http_server.drain): one read just before it must not answer differently.
            err = OpError("unavailable", f"{self.node_id} is shutting down; retry on another node")
            return self._respond({"error": err.to_dict(), "ready": False}, codec.JSON, 503)
        reason = (
            f"restoring a snapshot (state machine at applied index {st.applied_index})"
            if st.restoring
            else "no leader known"
            if st.leader_id is None
            else f"catching up (applied {st.applied_index}, leader commit {st.leader_commit_index})"
        )
        err = OpError("not_ready", f"{self.node_id} is not ready: {reason}")
        return self._respond({"error": err.to_dict(), "ready": False}, codec.JSON, 503)

    async def handle_openapi(self, request: Request) -> Response:
        from statekeeper.node.openapi.document import document

        return self._respond(document(self.limits, auth=self.authz is not None), codec.JSON)


def _mount_console(cluster: ClusterConfig, audit: AuditLog) -> Any:
    """The console's app, imported only here: a node without [ui] never loads the console,
    its templates or the client it calls the API with (.ci/server_imports.py)."""
    from statekeeper.console.app import ConsoleApp

    return ConsoleApp(cluster, audit=audit)


def _raise_unless_partly_applied(outcomes: list) -> None:
    """A batch's writes may be split over several raft entries that fail separately. When
    none of them applied, answer with one error (the weakest claim: "timeout" if any entry's
    outcome is unknown, so "unavailable, nothing was applied" is only said when true for all).
    When some applied, return and let each op's result carry its own outcome."""
    errors = [r for r in outcomes if isinstance(r, BaseException)]
    for e in errors:
        if not isinstance(e, OpError):
            raise e
    if errors and len(errors) == len(outcomes):
        raise next((e for e in errors if e.code == "timeout"), errors[0])
