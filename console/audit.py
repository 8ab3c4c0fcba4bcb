"""The console's audit lines: one per action taken (issue 31, point 3).

The console acts through the API with the user's token, so the API already logs its
refusals (`permission_denied: ...`); what it cannot log is who did what through the
console: a rollback the API allowed, a backup download, a login, a logout. ConsoleApp
writes one line for each here, in the API's format (`event: token ID, ..., client ADDR:
outcome`), through the API's AuditLog (node/api/audit_log.py): served by a node, the
node's own instance, so the node's log gets the lines and one budget (20 lines per 10 s,
then one "suppressed K more" line) bounds the API's and the console's together;
`statekeeper console` has its own AuditLog on the same logger, in that process's log.

A line names the token by id and name (never the token), the action (the route: method
and path), the namespace, the object (the request's other fields: agent, checkpoint, ...,
the CSRF field left out; each field capped and escaped by `loggable`), the client address
and the outcome: "done" (logged at INFO) or "refused"/"conflict"/"failed" (WARNING) with
the console's HTTP status.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from statekeeper.client.auth.commands import TokenInfo
from statekeeper.node.api.audit_log import AuditLog, loggable, token_label
from statekeeper.node.api.server import Request

# The API's audit logger (node/api/routes.py's auth_log): the same lines in the same place.
AUDIT_LOGGER = "statekeeper.auth"
# Request fields that are not the object acted on: the CSRF token, the namespace (its own
# field in the line), a token typed into a form.
NOT_THE_OBJECT = frozenset({"csrf", "ns", "token"})


def outcome(status: int) -> str:
    """The outcome word of a console answer's status."""
    if status < 400:
        return "done"
    if status in (401, 403):
        return "refused"
    return "conflict" if status == 409 else "failed"


def _who(whoami: TokenInfo | None) -> str:
    if whoami is None:
        return "-"
    if whoami.id is None:
        return "- (auth off)"
    return f"{whoami.id} (name {loggable(whoami.name)})"


def _level(status: int) -> int:
    return logging.INFO if status < 400 else logging.WARNING


class ConsoleAudit:
    """Writes the console's audit lines through `audit` (see the module docstring)."""

    def __init__(self, audit: AuditLog | None = None) -> None:
        self.audit = audit or AuditLog(logging.getLogger(AUDIT_LOGGER))

    def login(self, request: Request, who: TokenInfo | str, status: int, why: str = "") -> bool:
        """A login: `who` is the session's TokenInfo, or the presented token's text when
        refused (only its id is written)."""
        name = _who(who) if isinstance(who, TokenInfo) else token_label(who)
        return self.audit.write(
            _level(status),
            "console_login: token %s, client %s: %s %d%s",
            name,
            loggable(request.peer or "?"),
            outcome(status),
            status,
            f" ({loggable(why)})" if why else "",
        )

    def logout(self, request: Request, whoami: TokenInfo) -> bool:
        return self.audit.write(
            logging.INFO,
            "console_logout: token %s, client %s: done",
            _who(whoami),
            loggable(request.peer or "?"),
        )

    def action(
        self,
        request: Request,
        whoami: TokenInfo | None,
        params: Mapping[str, str],
        status: int,
    ) -> bool:
        """An action (a POST, or a GET a page lists in AUDITED) and its answer's status."""
        fields = " ".join(f"{k}={v}" for k, v in params.items() if k not in NOT_THE_OBJECT)
        return self.audit.write(
            _level(status),
            "console_action: token %s, %s %s, ns %s, object %s, client %s: %s %d",
            _who(whoami),
            request.method,
            loggable(request.path),
            loggable(params.get("ns", "-") or "-"),
            loggable(fields or "-"),
            loggable(request.peer or "?"),
            outcome(status),
            status,
        )
