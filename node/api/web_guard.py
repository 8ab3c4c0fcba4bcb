"""What a web page in a browser must not be able to do to a node (issue 27 item 10).

A page on any site can make the browser send a "simple" cross-origin request without asking
first (no CORS preflight): a POST whose Content-Type is absent, text/plain or a form type.
It cannot read the answer, but a write is done all the same (CSRF). And with DNS rebinding
(evil.example resolving first to the attacker, then to 127.0.0.1) a page can read a node on
the victim's loopback as if same-origin: the browser then sends `Host: evil.example:PORT`.
A dev cluster runs with auth off (the `make up` default), so either works there. With auth
on, a request needs `Authorization: Bearer`, which a browser never adds by itself.

The rules, checked before routing and authentication (docs/protocol.md "Security"):
- A POST must say `Content-Type: application/json` or msgpack (415 unsupported_media_type):
  such a request is not "simple", so a browser asks the node first, and the node never
  grants CORS. Other types were already refused; an absent one read as JSON.
- A request that carries `Origin` (browsers send it on cross-origin requests and on every
  POST) is refused unless that origin is in `[http] allowed_origins` (403
  origin_not_allowed). Our clients send no Origin.
- With auth off, a Host that is a DNS name must name this node: its configured host,
  `localhost`, or one of `[http] allowed_hosts` (421 host_not_allowed). The port is not
  compared and an IP literal is always accepted: rebinding needs a name the attacker
  controls, and our clients reach nodes by IP through proxies on other ports (the chaos
  toxiproxy setup) and through port-forwards.
"""

from __future__ import annotations

import ipaddress

from statekeeper.node.api.codec import pick_format
from statekeeper.node.errors import OpError

LOOPBACK_NAMES = ("localhost",)
# Host header values whose verdict is remembered. Clients send one or a few values (the
# node's address, a proxy's); a client sending endless made-up ones only finds the table
# full and gets each judged afresh, as before.
HOST_VERDICTS_KEPT = 256


class WebGuard:
    def __init__(
        self,
        node_hosts: tuple[str, ...],
        allowed_origins: tuple[str, ...],
        allowed_hosts: tuple[str, ...],
        auth_enabled: bool,
    ) -> None:
        self._origins = frozenset(o.rstrip("/").lower() for o in allowed_origins)
        self._check_host = not auth_enabled
        self._names = frozenset(
            h.lower().rstrip(".") for h in (*node_hosts, *LOOPBACK_NAMES, *allowed_hosts)
        )
        # Host header value -> whether it names this node. Parsing it (ipaddress) cost
        # 3.8 % of a leader's GIL time at 64 clients doing puts (py-spy --gil, issue 28);
        # the verdict depends on the value and the config only.
        self._host_verdicts: dict[str, bool] = {}

    def check(self, method: str, headers: dict[str, str]) -> None:
        """Raise OpError when a browser could have sent this request on a page's behalf."""
        origin = headers.get("origin")
        if origin is not None and origin.rstrip("/").lower() not in self._origins:
            raise OpError(
                "origin_not_allowed",
                "requests from web pages (with an Origin header) are refused unless their "
                "origin is in [http] allowed_origins",
            )
        if self._check_host and not self._host_names_node(headers.get("host", "")):
            raise OpError(
                "host_not_allowed",
                "with auth off, the Host header must name this node (its configured host, "
                "localhost, an IP address, or one of [http] allowed_hosts)",
            )
        if method == "POST":
            content_type = headers.get("content-type", "").strip()
            if not content_type:
                raise OpError(
                    "unsupported_media_type",
                    "a POST needs Content-Type: application/json or application/msgpack",
                )
            pick_format(content_type)  # any other type: unsupported_media_type

    def _host_names_node(self, host: str) -> bool:
        verdict = self._host_verdicts.get(host)
        if verdict is None:
            verdict = self._judge_host(host)
            if len(self._host_verdicts) < HOST_VERDICTS_KEPT:
                self._host_verdicts[host] = verdict
        return verdict

    def _judge_host(self, host: str) -> bool:
        name = _host_name(host)
        if not name:  # HTTP/1.1 requires Host; a name-less one cannot be rebound either
            return True
        try:
            ipaddress.ip_address(name)
            return True
        except ValueError:
            return name.lower().rstrip(".") in self._names


def _host_name(host: str) -> str:
    """The name of a Host header without its port ("[::1]:7000" -> "::1")."""
    host = host.strip()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rpartition(":")[0] if ":" in host else host
