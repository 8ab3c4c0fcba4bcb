"""The membership routes in the OpenAPI document (node/api/members.py serves them): their
request and result schemas, error texts and path items. Admin only."""

from __future__ import annotations

from typing import Any

from statekeeper.node.ops.fields import Schema
from statekeeper.node.ops.schemas import bool_schema, obj, str_schema
from statekeeper.node.raft.members import NODE_ID

# What members.is_host accepts, as one pattern (IPv4 addresses match it too).
DOCUMENTED_HOST = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}(\.[A-Za-z0-9_-]{1,63})*\.?$"

_ERRORS = (
    "malformed_body",
    "unsupported_media_type",
    "invalid_argument",
    "request_too_large",
    "unauthenticated",
    "permission_denied",
    "unavailable",
    "not_leader",
    "internal",
)


def _port(description: str) -> Schema:
    return {"type": "integer", "minimum": 1, "maximum": 65535, "description": description}


def _node_id(description: str) -> Schema:
    return str_schema(description, pattern=NODE_ID.pattern, maxLength=63)


def _member_view() -> Schema:
    return obj(
        {
            "id": str_schema("Node id."),
            "raft_address": str_schema("host:raft_port, its identity in raft."),
            "url": str_schema("Its client-port base URL."),
        },
        ("id", "raft_address", "url"),
    )


def members_list_schema() -> Schema:
    return {
        "type": "array",
        "items": _member_view(),
        "description": "The members, as this node's raft log says (node/raft/members.py).",
    }


def member_schemas() -> dict[str, Schema]:
    closed = {"additionalProperties": False}
    return {
        "MemberAddRequest": {
            **obj(
                {
                    "id": _node_id("The new member's node id (its TLS certificate names it)."),
                    "host": str_schema(
                        "Its host: a name of 1-63 character labels (or an IPv6 or IPv4 "
                        "address; the pattern states names only).",
                        pattern=DOCUMENTED_HOST,
                        maxLength=253,
                    ),
                    "raft_port": _port("Its raft port."),
                    "http_port": _port("Its client port."),
                },
                ("id", "host", "raft_port", "http_port"),
            ),
            **closed,
        },
        "MemberRemoveRequest": {
            **obj({"id": _node_id("The member to remove.")}, ("id",)),
            **closed,
        },
        "LeaderTransferRequest": {
            **obj(
                {
                    "to": {
                        "type": ["string", "null"],
                        "pattern": NODE_ID.pattern,
                        "maxLength": 63,
                        "description": "Member id to hand leadership to; null or absent: "
                        "the most caught-up follower.",
                    }
                }
            ),
            **closed,
        },
        "MembersResult": obj(
            {
                "members": members_list_schema(),
                "leader": {"type": ["string", "null"], "description": "The leader's id."},
            },
            ("members", "leader"),
        ),
        "LeaderTransferResult": obj(
            {
                "leader": str_schema("The node that answered (the leader until it hands over)."),
                "sent": bool_schema("Whether the hand-over was asked for (false: `to` leads)."),
            },
            ("leader", "sent"),
        ),
    }


def member_paths(builder: Any) -> dict:
    """The path items; `builder` is node/openapi/document.py's _Builder."""
    admin = " Needs admin on `*`. Sent to a follower: `not_leader` with the leader's URL."
    return {
        "/v1/cluster/members/add": builder.post(
            "member_add",
            "Add a member (raft log, one change at a time)",
            "Answers once the change is committed; the new member counts towards the quorum "
            "from then on, so start it first (`statekeeper cluster add-node` does)." + admin,
            "MemberAddRequest",
            "MembersResult",
            "The members after the change.",
            (*_ERRORS, "member_exists", "member_change_pending", "member_unreachable", "timeout"),
            tag="cluster",
        ),
        "/v1/cluster/members/remove": builder.post(
            "member_remove",
            "Remove a member (raft log, one change at a time)",
            "Answers once the change is committed; stop the removed node then. The leader "
            "cannot remove itself: it hands leadership over and answers `member_is_leader`."
            + admin,
            "MemberRemoveRequest",
            "MembersResult",
            "The members after the change.",
            (*_ERRORS, "member_not_found", "member_change_pending", "member_is_leader", "timeout"),
            tag="cluster",
        ),
        "/v1/cluster/leader/transfer": builder.post(
            "leader_transfer",
            "Hand leadership to a member",
            "Sends the hand-over (Raft TimeoutNow) and answers; watch GET /v1/status for the "
            "new leader." + admin,
            "LeaderTransferRequest",
            "LeaderTransferResult",
            "Asked.",
            (*_ERRORS, "member_not_found", "transfer_refused", "timeout"),
            tag="cluster",
        ),
    }
