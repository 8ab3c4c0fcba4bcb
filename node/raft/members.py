"""Cluster membership as the raft log says it is (no pysyncobj import, no I/O).

A member is described by a `Member` (id, host, raft_port, http_port); its raft address
"host:raft_port" is its identity in pysyncobj. A change is one journal entry of pysyncobj's
MEMBERSHIP type: the byte 0x02, then the msgpack of [kind, raft address, member dict] with
kind "add" or "rem" (pysyncobj's own list shape, the dict in the place of its node object,
so its code paths accept the decoded list; pysyncobj itself would pickle it, and its one
decoding call is replaced by decode_request, so no membership entry is ever unpickled). The dict carries id and ports so every node learns a new
member's node id (raft TLS names it) and client port (leader_url) from the log alone.

Invariant (restarts and snapshots): the member set is a function of the log.
    members_at(i) = replay(base, membership entries of the journal at or below index i)
    members       = members_at(the log's last index)
where base is the member set recorded in the newest snapshot (its header's "members"), or,
without a snapshot, cluster.toml's [[nodes]]. A snapshot whose last entry is S records
members_at(S), the configuration at S, never a change after S: S is at most the commit
index, so a snapshot holds a committed configuration only (membership.py snapshot_members;
recording the log's end instead brought a truncated, never-committed change back at every
restart: issue 26). Raft's single-server rule: a change takes effect on every node when
the entry is APPENDED to its journal (not when committed), and is undone when a
conflicting leader truncates it. One change at a time: the leader refuses a change while
the last membership entry is not committed. Whom a node TALKS to is wider than whom it
counts: the members of its log's end and of its committed configuration, and any
authenticated peer that connects (peer_set.py), so a leader of a configuration the node's
log has not caught up with can still correct that log. cluster.toml is only the
bootstrap set; `statekeeper cluster add-node / remove-node` keep it in step (a node is
written to it before it is added, and deleted after its removal committed) so that a node
started from it later begins with the current members as partners.

Replay is idempotent in the way that matters: a member's presence is decided by the last
entry naming it, so replaying entries the base already reflects changes nothing.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import msgpack

MEMBERSHIP_COMMAND = b"\x02"  # pysyncobj's _COMMAND_TYPE.MEMBERSHIP
ADD, REMOVE = "add", "rem"
NODE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:_-]{0,252}$")
# One DNS label: the resolver refuses a longer or empty one with UnicodeError (idna), which
# is no OSError, so the add route's reachability probe answered 500 (issue 27).
HOST_LABEL = re.compile(r"^[A-Za-z0-9_-]{1,63}$")


def is_host(host: object) -> bool:
    """A DNS name of labels of 1-63 characters (253 in all), or an IP address."""
    if not isinstance(host, str) or not HOST.fullmatch(host):
        return False
    if ":" in host:  # only an IPv6 address has one
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return False
        return True
    return all(HOST_LABEL.fullmatch(label) for label in host.removesuffix(".").split("."))


class MemberError(ValueError):
    """A member description or a change that is not acceptable; `code` is its error code."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Member:
    id: str
    host: str
    raft_port: int
    http_port: int

    @property
    def raft_address(self) -> str:
        return f"{self.host}:{self.raft_port}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: object) -> Member:
        """Validate a member description (from a request or a journal entry)."""
        if not isinstance(d, dict):
            raise MemberError("invalid_argument", "a member is an object")
        unknown = set(d) - {"id", "host", "raft_port", "http_port"}
        if unknown:
            raise MemberError("invalid_argument", f"unknown member fields: {sorted(unknown)}")
        node_id, host = d.get("id"), d.get("host")
        if not isinstance(node_id, str) or not NODE_ID.fullmatch(node_id):
            raise MemberError(
                "invalid_argument", "id must be 1-63 letters, digits, '.', '_' or '-'"
            )
        if not is_host(host):
            raise MemberError(
                "invalid_argument",
                "host must be an IP address or a host name of 1-63 character labels",
            )
        ports = []
        for name in ("raft_port", "http_port"):
            v = d.get(name)
            if type(v) is float and v.is_integer():  # JSON's 7100.0 is the integer 7100
                v = int(v)
            if type(v) is not int or not 1 <= v <= 65535:
                raise MemberError("invalid_argument", f"{name} must be an integer 1..65535")
            ports.append(v)
        return cls(node_id, host, ports[0], ports[1])


def encode_change(kind: str, member: Member) -> bytes:
    """The journal command of one change (pysyncobj's MEMBERSHIP shape, in msgpack)."""
    if kind not in (ADD, REMOVE):
        raise ValueError(kind)
    return MEMBERSHIP_COMMAND + msgpack.packb(
        [kind, member.raft_address, member.to_dict()], use_bin_type=True
    )


def decode_request(command: bytes) -> list | None:
    """[kind, raft address, member dict] of a membership command (what pysyncobj's
    change-cluster code takes), checked; None for any other command. Malformed: MemberError."""
    if command[:1] != MEMBERSHIP_COMMAND:
        return None
    try:
        request = msgpack.unpackb(command[1:], raw=False)
    except Exception as e:  # msgpack raises assorted errors on garbage
        raise MemberError("invalid_argument", f"not a membership entry: {e}") from e
    if (
        not isinstance(request, list)
        or len(request) != 3
        or request[0] not in (ADD, REMOVE)
        or not isinstance(request[2], dict)
    ):
        raise MemberError("invalid_argument", "not a membership entry of this cluster")
    return request


def decode_change(command: bytes) -> tuple[str, Member] | None:
    """(kind, Member) of a membership command; None for any other command."""
    request = decode_request(command)
    if request is None:
        return None
    return request[0], Member.from_dict(request[2])


def replay(base: dict[str, Member], commands: Iterable[bytes]) -> dict[str, Member]:
    """The member set (raft address -> Member) after applying, in order, the membership
    entries among `commands` to `base`."""
    members = dict(base)
    for command in commands:
        change = decode_change(command)
        if change is None:
            continue
        kind, who = change
        if kind == ADD:
            members[who.raft_address] = who
        else:
            members.pop(who.raft_address, None)
    return members


def check_change(
    members: dict[str, Member], kind: str, member: Member, *, self_address: str
) -> None:
    """Raise MemberError unless `kind` of `member` is a change of `members` (the leader's
    check before it appends; `self_address`: the leader's own raft address)."""
    addr = member.raft_address
    if kind == ADD:
        if addr in members:
            raise MemberError("member_exists", f"{addr} is already a member")
        if any(m.id == member.id for m in members.values()):
            raise MemberError("member_exists", f"a member named {member.id} exists")
        return
    if addr not in members:
        raise MemberError("member_not_found", f"{member.id} ({addr}) is not a member")
    if addr == self_address:
        raise MemberError(
            "member_is_leader",
            f"{member.id} leads: the leader cannot remove itself; transfer leadership first",
        )
