"""Online membership change of a local cluster: what `statekeeper cluster add-node` and
`remove-node` do (cluster/members_cli.py), also used by the chaos fault `membership`.

The rules live in node/raft/members.py. cluster.toml follows the log: a node is written to
it before the leader is asked to add it (the node starts from it, with the current members
as partners), and deleted from it only after its removal committed. A failed add that the
cluster never applied is rolled back (process stopped, node taken out of cluster.toml).

Every request goes to the leader (POST /v1/cluster/members/{add,remove}), found through
the nodes' /v1/status and followed on `not_leader`, with the token from
$STATEKEEPER_TOKEN or else the root token derived from the cluster secret.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from statekeeper.client.auth.tokens import root_token
from statekeeper.cluster.certs import init_cluster_tls
from statekeeper.cluster.ports import free_ports
from statekeeper.cluster.supervisor import LocalCluster, http_get_json, url_opener
from statekeeper.node import config as node_config
from statekeeper.node.config import ClusterConfig, NodeConfig

Say = Callable[[str], None]
# Codes worth another try (elsewhere or a moment later); anything else is final.
RETRY_CODES = {
    "not_leader",
    "unavailable",
    "member_change_pending",
    "member_is_leader",
    "transfer_refused",
    0,
}


# Seconds to wait for a new leader after the leader was asked to remove itself.
HANDOVER_WAIT = 2.0


class MemberChangeError(RuntimeError):
    """A change was refused or did not finish; the message says what to do."""


def post_json(url: str, body: dict, tls, token: str, timeout: float) -> tuple[int, dict]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Authorization": f"Bearer {token}",
        },
    )
    try:
        with url_opener(tls).open(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read() if e.fp is not None else b""
    except (urllib.error.URLError, OSError) as e:
        return 0, {"error": {"code": 0, "message": f"no answer: {e}"}}
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = {}
    return status, doc if isinstance(doc, dict) else {}


class Membership:
    """Changes the member set of the cluster described by `config_path`."""

    def __init__(
        self,
        config_path: str | os.PathLike[str],
        *,
        say: Say = print,
        node_command: Sequence[str] | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 60.0,
        token: str | None = None,
    ) -> None:
        self.path = Path(config_path)
        self._token = token
        self.say = say
        self.node_command = node_command
        self.env = env
        self.timeout = timeout
        self.reload()

    def reload(self) -> ClusterConfig:
        self.cfg = node_config.load(self.path)
        self.lc = LocalCluster(
            self.cfg, self.path, node_command=self.node_command, env=self.env, progress=None
        )
        return self.cfg

    def _write_nodes(self, nodes: tuple[NodeConfig, ...]) -> None:
        """cluster.toml with these [[nodes]], the rest as the file holds it (the secret
        stays where it is: file, environment or inline)."""
        on_disk = node_config.parse(tomllib.loads(self.path.read_text()), self.cfg.base_dir)
        node_config.write(dataclasses.replace(on_disk, nodes=nodes), self.path)
        self.reload()

    @property
    def token(self) -> str:
        return self._token or os.environ.get("STATEKEEPER_TOKEN") or root_token(self.cfg.secret)

    # -- looking at the cluster -------------------------------------------------------------

    def statuses(self) -> dict[str, dict[str, Any]]:
        out = {}
        for n in self.cfg.nodes:
            code, doc = http_get_json(f"{self.cfg.url(n.id)}/v1/status", tls=self.lc.tls)
            if code == 200 and doc:
                out[n.id] = doc
        return out

    def leader(self, deadline: float, exclude: str | None = None) -> dict[str, Any]:
        """The leader's /v1/status (waits for one, not `exclude`, until `deadline`)."""
        while True:
            for doc in self.statuses().values():
                if doc.get("role") == "leader" and doc.get("node_id") != exclude:
                    return doc
            if time.monotonic() > deadline:
                raise MemberChangeError("no leader answered; is the cluster up (status)?")
            time.sleep(0.2)

    def _leader_for(self, deadline: float, exclude: str | None) -> dict[str, Any]:
        """The leader to ask: after member_is_leader, one other than `exclude` if one
        appears within HANDOVER_WAIT; else `exclude` again (its hand-over was refused, e.g.
        no follower had the whole log under load: asking again retries it)."""
        if exclude is not None:
            try:
                return self.leader(min(deadline, time.monotonic() + HANDOVER_WAIT), exclude)
            except MemberChangeError:
                pass
        return self.leader(deadline)

    def _leader_url(self, doc: dict[str, Any]) -> str:
        for m in doc.get("members") or ():
            if m["id"] == doc["node_id"]:
                return m["url"]
        return self.cfg.url(doc["node_id"])

    def change(self, path: str, body: dict, deadline: float) -> dict[str, Any]:
        """POST a change to the leader; follow not_leader, wait out transient refusals."""
        last = "no attempt"
        exclude = None
        while time.monotonic() < deadline:
            leader = self._leader_for(deadline, exclude)
            url = self._leader_url(leader) + path
            status, doc = post_json(url, body, self.lc.tls, self.token, self.timeout)
            if status == 200:
                return doc
            err = doc.get("error") or {}
            code, last = err.get("code"), f"{err.get('code')}: {err.get('message')}"
            if code not in RETRY_CODES:
                raise MemberChangeError(last)
            self.say(f"  {leader['node_id']}: {last}; retrying")
            # The leader removing itself hands leadership over: ask the next one.
            exclude = leader["node_id"] if code == "member_is_leader" else None
            time.sleep(0.3)
        raise MemberChangeError(f"gave up after {self.timeout:g} s; last answer {last}")

    def ask(self, node_id: str, path: str, body: dict, timeout: float) -> tuple[int, dict]:
        """POST to `node_id` itself (no leader following, no retry): (status, answer)."""
        return post_json(self.cfg.url(node_id) + path, body, self.lc.tls, self.token, timeout)

    # -- add ------------------------------------------------------------------------------

    def new_node(
        self,
        node_id: str | None = None,
        host: str = "127.0.0.1",
        http_port: int | None = None,
        raft_port: int | None = None,
    ) -> NodeConfig:
        ids = {n.id for n in self.cfg.nodes}
        if node_id is None:
            node_id = next(f"node-{i}" for i in range(len(ids) + 1) if f"node-{i}" not in ids)
        if node_id in ids:
            raise MemberChangeError(f"{node_id} is in {self.path} already")
        if http_port is None or raft_port is None:
            a, b = free_ports(2, host)
            http_port, raft_port = http_port or a, raft_port or b
        return NodeConfig(id=node_id, host=host, raft_port=raft_port, http_port=http_port)

    def add_node(self, node: NodeConfig) -> dict[str, Any]:
        """Write `node` to cluster.toml, start it, add it, wait until it caught up."""
        started = time.monotonic()
        deadline = started + self.timeout
        before = self.cfg.nodes
        added = False
        try:
            self.start_new_member(node)
            self.say(f"{node.id}: running; asking the leader to add it")
            body = {"id": node.id, "host": node.host, "raft_port": node.raft_port}
            doc = self.change(
                "/v1/cluster/members/add", {**body, "http_port": node.http_port}, deadline
            )
            added = True
            self.say(
                f"{node.id}: added (committed) in {time.monotonic() - started:.1f} s; catching up"
            )
            self._wait_caught_up(node.id, deadline)
        except BaseException:
            if not added:
                self._undo_start(node, before)
            raise
        self.say(f"{node.id}: caught up and voting, {time.monotonic() - started:.1f} s in all")
        return doc

    def start_new_member(self, node: NodeConfig) -> None:
        """Write `node` to cluster.toml and start it with --join, before the leader adds it:
        the change takes effect at its append (Raft's single-server rule), so from then
        on the new configuration's quorum counts it, and a leader restarted before the
        add committed needs its vote (a one-member cluster: the only other vote). A start
        without --join would be a non-voter until caught up, and no leader would ever
        come to catch it up (node/raft/catchup.py; found by the simulator, seed 810258)."""
        self._issue_certificate(node)
        node_config.validate(dataclasses.replace(self.cfg, nodes=(*self.cfg.nodes, node)))
        self._write_nodes((*self.cfg.nodes, node))
        self.say(
            f"{node.id}: written to {self.path} (http {node.http_port}, raft {node.raft_port})"
        )
        self.lc.start_node(node.id, join=True)
        self.lc.wait_live(node.id, timeout=self.timeout)

    def _undo_start(self, node: NodeConfig, before: tuple[NodeConfig, ...]) -> None:
        """An add that failed: stop the node only if a leader says it is no member. With
        no leader to ask, the add may sit uncommitted in a log and count the node in its
        quorum: stopping it could leave that configuration without a majority for good."""
        member = self._is_member(node.id)
        if member is None:
            self.say(
                f"{node.id}: no leader to say whether it was added; left running and in "
                f"{self.path}. Once a leader is back, its /v1/status lists the members; if "
                f"{node.id} is not one, stop it and delete it from {self.path}"
            )
        elif not member:
            self.say(f"{node.id}: not added; stopping it and taking it out of {self.path}")
            self.lc.stop_node(node.id)
            self._write_nodes(before)

    def _issue_certificate(self, node: NodeConfig) -> None:
        t = self.cfg.tls
        if not t.enabled:
            return
        base = Path(self.cfg.base_dir)
        cert = base / t.cert_file.replace("{id}", node.id)
        if cert.is_file():
            return
        tls_dir = (base / t.ca_file).parent
        if not (tls_dir / "ca-key.pem").is_file():
            raise MemberChangeError(
                f"TLS is on and {cert} does not exist; no CA key in {tls_dir} to issue it: "
                f"issue a certificate naming {node.id} with your CA first"
            )
        init_cluster_tls(tls_dir, [(node.id, node.host)])
        self.say(f"{node.id}: certificate issued by the cluster CA ({cert})")

    def _is_member(self, node_id: str) -> bool | None:
        """What the leader's configuration says; None with no leader to ask."""
        for doc in self.statuses().values():
            if doc.get("role") == "leader":
                return any(m["id"] == node_id for m in doc.get("members") or ())
        return None

    def _wait_caught_up(self, node_id: str, deadline: float) -> None:
        """The node counts itself a member and is ready (applied up to the leader's commit)."""
        while True:
            code, doc = http_get_json(f"{self.cfg.url(node_id)}/v1/status", tls=self.lc.tls)
            if code == 200 and doc and doc.get("ready"):
                if any(m["id"] == node_id for m in doc.get("members") or ()):
                    return
            if time.monotonic() > deadline:
                raise MemberChangeError(
                    f"{node_id} was added but has not caught up within {self.timeout:g} s "
                    f"(its log: {self.lc.log_file(node_id)})"
                )
            time.sleep(0.2)

    # -- remove ---------------------------------------------------------------------------

    def remove_node(self, node_id: str) -> dict[str, Any]:
        """Remove `node_id` through the log, stop it, take it out of cluster.toml."""
        started = time.monotonic()
        if node_id not in {n.id for n in self.cfg.nodes}:
            raise MemberChangeError(f"no node {node_id} in {self.path}")
        if len(self.cfg.nodes) <= 1:
            raise MemberChangeError("the last member cannot be removed")
        self.say(f"{node_id}: asking the leader to remove it")
        doc = self.change("/v1/cluster/members/remove", {"id": node_id}, started + self.timeout)
        self.say(
            f"{node_id}: removed (committed) in {time.monotonic() - started:.1f} s; stopping it"
        )
        self.lc.stop_node(node_id)
        self._write_nodes(tuple(n for n in self.cfg.nodes if n.id != node_id))
        members = ", ".join(m["id"] for m in doc.get("members", ()))
        self.say(f"{node_id}: gone from {self.path}; members: {members}")
        return doc

    # -- leadership -----------------------------------------------------------------------

    def transfer_leader(self, to: str) -> float:
        """Hand leadership to member `to`; wait until it leads. Returns the seconds taken."""
        started = time.monotonic()
        deadline = started + self.timeout
        while True:
            if self.leader(deadline).get("node_id") == to:
                took = time.monotonic() - started
                self.say(f"{to}: leads ({took:.1f} s)")
                return took
            self.change("/v1/cluster/leader/transfer", {"to": to}, deadline)
            time.sleep(0.3)
