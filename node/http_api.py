"""HTTP API under /v1 (aiohttp). Thin: decode, validate, hand to the proposer or the
state machine, encode. See docs/protocol.md for the contract."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web

from node import codec
from node.config import ClusterConfig
from node.errors import OpError, status_for
from node.ops import is_write, validate_op, validate_ops
from node.proposer import Proposer
from node.raft import RaftNode
from node.state_machine import StateMachine

log = logging.getLogger("statekeeper.http")

CONSISTENCY = ("linearizable", "serializable")
KV_OPS = ("put", "get", "delete", "range", "cas", "txn", "compact")


class Api:
    def __init__(
        self,
        cluster: ClusterConfig,
        node_id: str,
        sm: StateMachine,
        raft: RaftNode,
        proposer: Proposer,
        *,
        serve_reads_without_barrier: bool = False,
    ):
        self.cluster = cluster
        self.node_id = node_id
        self.sm = sm
        self.raft = raft
        self.proposer = proposer
        self.limits = cluster.limits
        self.timeout = cluster.raft.request_timeout
        # Debug only (chaos mutation test): linearizable reads skip the barrier.
        self._unsafe_reads = serve_reads_without_barrier
        self._urls = {n.id: n.http_url for n in cluster.nodes}
        self.shutting_down = False

    # -- plumbing -----------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(
            client_max_size=self.limits.max_request_bytes,
            middlewares=[self._errors_middleware],
        )
        app.router.add_post("/v1/kv/{op}", self.handle_kv)
        app.router.add_post("/v1/batch", self.handle_batch)
        app.router.add_get("/v1/status", self.handle_status)
        app.router.add_get("/v1/health/live", self.handle_live)
        app.router.add_get("/v1/health/ready", self.handle_ready)
        app.router.add_get("/v1/openapi.json", self.handle_openapi)
        return app

    def _respond(self, obj: Any, fmt: str, status: int = 200) -> web.Response:
        return web.Response(
            body=codec.encode(obj, fmt),
            status=status,
            content_type=fmt,
            headers={"X-Statekeeper-Node": self.node_id},
        )

    def _error(self, err: OpError, fmt: str) -> web.Response:
        return self._respond({"error": err.to_dict()}, fmt, err.status)

    @web.middleware
    async def _errors_middleware(self, request: web.Request, handler):
        fmt = codec.JSON
        try:
            fmt = codec.pick_format(request.headers.get("Content-Type"), request.headers.get("Accept"))
        except OpError:
            pass
        try:
            return await handler(request)
        except OpError as e:
            return self._error(e, fmt)
        except web.HTTPRequestEntityTooLarge:
            return self._error(
                OpError(
                    "request_too_large",
                    f"the request body exceeds {self.limits.max_request_bytes} bytes",
                ),
                fmt,
            )
        except web.HTTPNotFound:
            return self._error(OpError("not_found", f"no such endpoint: {request.path}"), fmt)
        except web.HTTPMethodNotAllowed as e:
            return self._error(
                OpError(
                    "method_not_allowed",
                    f"{request.method} is not allowed on {request.path}; use {', '.join(sorted(e.allowed_methods))}",
                ),
                fmt,
            )
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("unhandled error serving %s %s", request.method, request.path)
            return self._error(OpError("internal", "internal error; see the node's log"), fmt)

    async def _body(self, request: web.Request) -> tuple[dict, str]:
        fmt = codec.pick_format(request.headers.get("Content-Type"), request.headers.get("Accept"))
        body = await request.read()
        return codec.decode(body, fmt), fmt

    def _check_serving(self) -> None:
        if self.shutting_down:
            raise OpError("unavailable", f"{self.node_id} is shutting down; use another node")
        # Fail fast rather than queue behind an election: nothing was submitted.
        if not self.raft.leader_known():
            raise OpError("unavailable", f"{self.node_id} knows no raft leader (election in progress or partitioned); retry")

    async def _with_timeout(self, aw, what: str):
        try:
            # asyncio.timeout, unlike wait_for, does not wrap the awaitable in a new task.
            async with asyncio.timeout(self.timeout):
                return await aw
        except TimeoutError:
            if what == "write":
                raise OpError(
                    "timeout",
                    f"no commit within {self.timeout:g} s; the write may still be applied: "
                    "retry with the same idempotency_key",
                ) from None
            raise OpError(
                "unavailable", f"could not confirm a read within {self.timeout:g} s (no quorum?)"
            ) from None

    # -- reads --------------------------------------------------------------------------

    @staticmethod
    def _read_options(body: dict) -> tuple[str, int | None]:
        consistency = body.pop("consistency", None) or "linearizable"
        if consistency not in CONSISTENCY:
            raise OpError("invalid_argument", f"consistency must be one of {CONSISTENCY}")
        min_rev = body.pop("min_revision", None)
        if min_rev is not None and (type(min_rev) is not int or min_rev < 0):
            raise OpError("invalid_argument", "min_revision must be a non-negative integer")
        return consistency, min_rev

    async def _read_barrier(self, consistency: str, min_revision: int | None) -> None:
        if consistency == "linearizable" and not self._unsafe_reads:
            self._check_serving()
            await self._with_timeout(self.proposer.barrier(), "read")
        if min_revision is not None and self.sm.revision < min_revision:
            await self._with_timeout(self._wait_revision(min_revision), "read")

    async def _wait_revision(self, revision: int) -> None:
        delay = 0.001
        while self.sm.revision < revision:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.02)

    # -- handlers -----------------------------------------------------------------------

    async def handle_kv(self, request: web.Request) -> web.Response:
        name = request.match_info["op"]
        if name not in KV_OPS:
            raise OpError("unknown_op", f"unknown op {name!r}; known: {', '.join(KV_OPS)}")
        body, fmt = await self._body(request)
        body["op"] = name
        if is_write(body):
            op = validate_op(body, self.limits)
            self._check_serving()
            result = await self._with_timeout(self.proposer.write(op, request.content_length or 0), "write")
        else:
            consistency, min_rev = self._read_options(body)
            op = validate_op(body, self.limits)
            await self._read_barrier(consistency, min_rev)
            result = self.sm.read(op)
        return self._single_result(name, result, fmt)

    def _single_result(self, name: str, result: dict, fmt: str) -> web.Response:
        if "error" in result:
            return self._respond(result, fmt, status_for(result["error"].get("code", "internal")))
        if name == "get" and result.get("kv") is None:
            err = OpError("key_not_found", "no such key")
            return self._respond({"error": err.to_dict(), "revision": result["revision"]}, fmt, 404)
        if name == "cas" and not result.get("succeeded"):
            err = OpError("compare_failed", "the key does not match the expectation")
            return self._respond({"error": err.to_dict(), **result}, fmt, 409)
        return self._respond(result, fmt)

    async def handle_batch(self, request: web.Request) -> web.Response:
        body, fmt = await self._body(request)
        consistency, min_rev = self._read_options(body)
        ops = validate_ops(body.get("ops"), self.limits)
        writes = [(i, op) for i, op in enumerate(ops) if is_write(op)]
        results: list[dict | None] = [None] * len(ops)
        if writes:
            self._check_serving()
            size = (request.content_length or 0) // max(1, len(ops))
            done = await self._with_timeout(
                asyncio.gather(*(self.proposer.write(op, size) for _, op in writes)), "write"
            )
            for (i, _), r in zip(writes, done, strict=True):
                results[i] = r
        if len(writes) < len(ops):
            # Reads of a batch are served after its writes, so they see them.
            if not writes or consistency != "linearizable":
                await self._read_barrier(consistency, min_rev)
            for i, op in enumerate(ops):
                if results[i] is None:
                    try:
                        results[i] = self.sm.read(op)
                    except OpError as e:
                        results[i] = {"error": e.to_dict()}
        return self._respond({"results": results}, fmt)

    async def handle_status(self, request: web.Request) -> web.Response:
        st = self.raft.status()
        fmt = codec.pick_format(None, request.headers.get("Accept"))
        return self._respond(
            {
                "node_id": self.node_id,
                "role": "leader" if st.is_leader else ("follower" if st.leader_id else "candidate"),
                "term": st.term,
                "leader": st.leader_id,
                "leader_url": self._urls.get(st.leader_id) if st.leader_id else None,
                "commit_index": st.commit_index,
                "applied_index": st.applied_index,
                "leader_commit_index": st.leader_commit_index,
                "has_quorum": st.has_quorum,
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
            },
            fmt,
        )

    async def handle_live(self, request: web.Request) -> web.Response:
        return self._respond({"ok": True, "node_id": self.node_id}, codec.JSON)

    async def handle_ready(self, request: web.Request) -> web.Response:
        st = self.raft.status()
        if st.ready and not self.shutting_down:
            return self._respond({"ready": True, "node_id": self.node_id}, codec.JSON)
        reason = (
            "shutting down"
            if self.shutting_down
            else "no leader known"
            if st.leader_id is None
            else f"catching up (applied {st.applied_index}, leader commit {st.leader_commit_index})"
        )
        err = OpError("not_ready", f"{self.node_id} is not ready: {reason}")
        return self._respond({"error": err.to_dict(), "ready": False}, codec.JSON, 503)

    async def handle_openapi(self, request: web.Request) -> web.Response:
        from node.openapi import document

        return web.json_response(document())
