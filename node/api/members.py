"""The membership routes (admin only): add or remove one raft member through the log, on
the leader (node/raft/members.py has the rules; docs/protocol.md "Membership").

    POST /v1/cluster/members/add     {"id", "host", "raft_port", "http_port"}
    POST /v1/cluster/members/remove  {"id"}
    POST /v1/cluster/leader/transfer {"to": id or null}: hand leadership over (sent, not
                                     awaited: watch GET /v1/status)
    both answer {"members": [...], "leader": id} once the change is COMMITTED.

Refusals change nothing: not_leader (421, `error.leader_url`), member_exists,
member_not_found, member_change_pending (one change at a time), member_is_leader (the
leader removes itself only after handing leadership over: the answer says leadership is
moving; ask the new leader), transfer_refused (the target has not replicated the whole
log yet: retry), member_unreachable (nothing listens on the new member's raft
port: a member that never comes up would count towards the quorum). A change queued but
not committed within the request timeout answers `timeout`: its outcome is unknown (GET
/v1/status's `members` tells).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from statekeeper.node.errors import OpError
from statekeeper.node.raft.members import ADD, NODE_ID, REMOVE, Member, MemberError

if TYPE_CHECKING:
    from statekeeper.node.api.routes import Api
    from statekeeper.node.api.server import Request, Response

ADD_PATH = "/v1/cluster/members/add"
REMOVE_PATH = "/v1/cluster/members/remove"
TRANSFER_PATH = "/v1/cluster/leader/transfer"
# How long the leader waits for a TCP connection to the new member's raft port.
PROBE_TIMEOUT = 2.0


def member_routes(api: Api) -> dict[tuple[str, str], Callable[[Request], Awaitable[Response]]]:
    """The routes this module adds to Api.routes()."""
    routes = MemberRoutes(api)
    return {
        ("POST", ADD_PATH): routes.add,
        ("POST", REMOVE_PATH): routes.remove,
        ("POST", TRANSFER_PATH): routes.transfer,
    }


def members_view(api: Api) -> list[dict[str, Any]]:
    """The member set for /v1/status and the answers here: id, raft address, client URL."""
    scheme = api.cluster.scheme
    return [
        {
            "id": m.id,
            "raft_address": m.raft_address,
            "url": f"{scheme}://{m.host}:{m.http_port}",
        }
        for m in api.raft.members()
    ]


def member_url(api: Api, node_id: str | None) -> str | None:
    for m in members_view(api):
        if m["id"] == node_id:
            return m["url"]
    return None


class MemberRoutes:
    def __init__(self, api: Api):
        self.api = api

    async def add(self, request: Request) -> Response:
        body, fmt = self._admin_body(request, "member_add")
        member = _member(body)
        self._check_leader()
        await _probe(member)
        return await self._change(ADD, member, fmt)

    async def remove(self, request: Request) -> Response:
        body, fmt = self._admin_body(request, "member_remove")
        if set(body) - {"id"}:
            raise OpError("invalid_argument", f"unknown fields: {sorted(set(body) - {'id'})}")
        node_id = _node_id(body.get("id"), "id")
        self._check_leader()
        found = [m for m in self.api.raft.members() if m.id == node_id]
        if not found:
            raise OpError("member_not_found", f"{node_id} is not a member")
        if node_id == self.api.node_id:
            self.api.raft.request_transfer(None, lambda sent: None)
            raise OpError(
                "member_is_leader",
                f"{node_id} leads and cannot remove itself: leadership is being handed to "
                "another member; send the removal to the new leader (GET /v1/status)",
            )
        return await self._change(REMOVE, found[0], fmt)

    async def transfer(self, request: Request) -> Response:
        """Hand leadership to `to` (a member id; absent or null: the most caught-up one)."""
        body, fmt = self._admin_body(request, "leader_transfer")
        if set(body) - {"to"}:
            raise OpError("invalid_argument", f"unknown fields: {sorted(set(body) - {'to'})}")
        to = None if body.get("to") is None else _node_id(body["to"], "to")
        self._check_leader(pending_ok=True)
        if to is not None and not any(m.id == to for m in self.api.raft.members()):
            raise OpError("member_not_found", f"{to} is not a member")
        if to == self.api.node_id:
            return self.api._respond({"leader": to, "sent": False}, fmt)
        loop = asyncio.get_running_loop()
        sent: asyncio.Future[bool] = loop.create_future()
        self.api.raft.request_transfer(
            to, lambda ok: loop.call_soon_threadsafe(lambda: sent.done() or sent.set_result(ok))
        )
        try:
            async with asyncio.timeout(self.api.timeout):
                ok = await sent
        except TimeoutError:
            raise OpError("timeout", "the raft thread did not take the request in time") from None
        if not ok:
            raise OpError(
                "transfer_refused",
                f"{to or 'no follower'} has not replicated the whole log yet (or this node "
                "stopped leading); retry",
            )
        return self.api._respond({"leader": self.api.node_id, "sent": True}, fmt)

    # -- helpers ----------------------------------------------------------------------------

    def _admin_body(self, request: Request, name: str) -> tuple[dict, str]:
        body, fmt = self.api._body(request, name)
        if self.api.authz is not None:
            self.api._authorize(request, name, {})  # not an op of OPS: admin on '*'
        if not isinstance(body, dict):
            raise OpError("malformed_body", "the body must be an object")
        return body, fmt

    def _check_leader(self, pending_ok: bool = False) -> None:
        api = self.api
        api._check_serving()
        if not api.raft.is_leader():
            leader = api.raft.status().leader_id
            raise OpError(
                "not_leader",
                f"{api.node_id} is not the leader ({leader or 'unknown'}); send it there",
                leader=leader,
                leader_url=member_url(api, leader),
            )
        if not pending_ok and api.raft.member_change_pending():
            raise OpError(
                "member_change_pending",
                "the previous membership change is not committed yet; one change at a time",
            )

    async def _change(self, kind: str, member: Member, fmt: str) -> Response:
        api = self.api
        loop = asyncio.get_running_loop()
        done: asyncio.Future[MemberError | None] = loop.create_future()

        def on_done(err: MemberError | None) -> None:  # raft thread: hand over only
            loop.call_soon_threadsafe(lambda: done.done() or done.set_result(err))

        api.raft.change_member(kind, member, on_done)
        try:
            async with asyncio.timeout(api.timeout):
                err = await done
        except TimeoutError:
            raise OpError(
                "timeout",
                f"the change was not committed within {api.timeout:g} s; it may still be: "
                "see GET /v1/status members",
            ) from None
        if err is not None:
            code = "timeout" if err.code == "outcome_unknown" else err.code
            raise OpError(code, err.message)
        body = {"members": members_view(api), "leader": api.raft.status().leader_id}
        return api._respond(body, fmt)


def _node_id(v: object, name: str) -> str:
    """A node id, checked before anything else (a bad one is 400 on any node)."""
    if not isinstance(v, str) or not NODE_ID.fullmatch(v):
        raise OpError(
            "invalid_argument", f"{name} must be a node id: 1-63 letters, digits, '.', '_', '-'"
        )
    return v


def _member(body: dict) -> Member:
    try:
        return Member.from_dict(body)
    except MemberError as e:
        raise OpError(e.code, e.message) from None


async def _probe(member: Member) -> None:
    """Something must listen on the new member's raft port (see the module docstring)."""
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            _, writer = await asyncio.open_connection(member.host, member.raft_port)
    except (OSError, TimeoutError) as e:
        raise OpError(
            "member_unreachable",
            f"nothing answers on {member.raft_address} ({e or 'timeout'}): start the node "
            "first (statekeeper cluster add-node does)",
        ) from None
    writer.close()


def status_fields(api: Api) -> dict[str, Any]:
    """What GET /v1/status adds: the member set this node's log holds."""
    return {"members": members_view(api), "member_change_pending": api.raft.member_change_pending()}
