"""Retries, backoff and endpoint rotation (sans-IO, shared by Client and AsyncClient).

A call is driven by an :class:`Exchange`::

    ex = Exchange(request, endpoints, policy, timeout)
    while True:
        url, attempt_timeout = ex.next_attempt()
        try:
            status, content_type, body = send(url, request, attempt_timeout)
        except <transport error> as exc:
            outcome = ex.failed(connection_error(kind, url, exc))   # raises when giving up
        else:
            outcome = ex.received(status, content_type, body)     # result, or raises
            if not isinstance(outcome, Backoff):
                return outcome
        sleep(outcome.delay)

The request body (with its idempotency key) is built once, before the loop, so every
retry resends the same bytes and a retried write takes effect once.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import (
    Compacted,
    Conflict,
    InvalidRequest,
    NotFound,
    StatekeeperError,
    Timeout,
    Unavailable,
)
from .wire import Request

__all__ = ["DEFAULT_RETRY", "Backoff", "Endpoints", "Exchange", "RetryPolicy", "normalize_endpoint"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When and how long to retry a call.

    Retried: connection refused/reset/lost, client-side timeouts, ``unavailable`` (503)
    and ``timeout`` (504). Everything else (not found, conflict, invalid request, ...)
    is raised at once; for a write that had an attempt of unknown outcome before, a
    refusal (507, 401, 403, 5xx) is raised as ``Timeout`` ``outcome_unknown`` (see
    ``Exchange._giving_up``). Writes are safe to retry because every attempt carries the
    same idempotency key.

    Attributes:
        max_attempts: requests per call, the first one included (1 disables retries).
        deadline: seconds from the start of the call after which no new attempt starts
            (also caps each attempt's timeout); ``None`` for no overall limit.
        backoff_base: delay before the first retry, in seconds (before jitter).
        backoff_multiplier: growth factor of the delay per retry.
        backoff_max: upper bound of any delay.
        jitter: fraction of the delay that is randomized: the delay is uniform in
            ``[d * (1 - jitter), d]``; spreads out clients that failed together.
        retry_timeouts: also retry ``Timeout`` (outcome unknown). Safe for writes thanks
            to idempotency keys; turn off to get control back sooner.
    """

    max_attempts: int = 10
    deadline: float | None = 30.0
    backoff_base: float = 0.05
    backoff_multiplier: float = 2.0
    backoff_max: float = 2.0
    jitter: float = 0.5
    retry_timeouts: bool = True

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError("jitter must be within [0, 1]")
        if self.backoff_base < 0 or self.backoff_max < 0 or self.backoff_multiplier < 1:
            raise ValueError("backoff_base/backoff_max must be >= 0 and backoff_multiplier >= 1")
        if self.deadline is not None and self.deadline <= 0:
            raise ValueError("deadline must be > 0 or None")

    @classmethod
    def disabled(cls) -> RetryPolicy:
        """A policy that never retries (one attempt per call)."""
        return cls(max_attempts=1)

    def is_retryable(self, err: StatekeeperError) -> bool:
        """True if ``err`` is worth another attempt (on the next endpoint)."""
        if isinstance(err, Timeout):
            return self.retry_timeouts
        return isinstance(err, Unavailable)

    def backoff(self, retry: int, rand: Callable[[], float] = random.random) -> float:
        """Delay in seconds before retry number ``retry`` (1 = the first retry)."""
        exp = min(max(retry - 1, 0), 64)  # cap the exponent: no float overflow
        delay = min(self.backoff_max, self.backoff_base * self.backoff_multiplier**exp)
        return delay * (1.0 - self.jitter * rand())


DEFAULT_RETRY = RetryPolicy()


def normalize_endpoint(url: str) -> str:
    """``host:port`` or ``http://Host:port/`` -> ``http://host:port`` (a path prefix, if
    any, is kept without its trailing slash)."""
    url = url.strip()
    if not url:
        raise ValueError("empty endpoint")
    if "://" not in url:
        url = "http://" + url
    scheme, _, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    path = path.rstrip("/")
    return f"{scheme.lower()}://{host.lower()}{slash if path else ''}{path}"


class Endpoints:
    """The node URLs a client may use, and which one it currently uses.

    The client sticks to the endpoint that last answered and moves to the next one when
    it fails. Only the failing endpoint advances the pointer, so many concurrent calls
    failing on the same node move it once, not once per call.
    """

    __slots__ = ("_i", "_index", "urls")

    def __init__(self, endpoints: str | Sequence[str]) -> None:
        if isinstance(endpoints, str):
            endpoints = [e for e in endpoints.split(",") if e.strip()]
        urls: list[str] = []
        for e in endpoints:
            u = normalize_endpoint(e)
            if u not in urls:
                urls.append(u)
        if not urls:
            raise ValueError("at least one endpoint is needed")
        self.urls: tuple[str, ...] = tuple(urls)
        self._index = {u: i for i, u in enumerate(self.urls)}
        self._i = 0

    def __len__(self) -> int:
        return len(self.urls)

    @property
    def current(self) -> str:
        """The endpoint the next request goes to."""
        return self.urls[self._i]

    def failed(self, url: str) -> None:
        """``url`` failed: rotate to the next endpoint (if it was the current one)."""
        i = self._index.get(url)
        if i is not None and i == self._i:
            self._i = (i + 1) % len(self.urls)

    def succeeded(self, url: str) -> None:
        """``url`` answered: keep using it."""
        i = self._index.get(url)
        if i is not None:
            self._i = i

    def prefer(self, url: str) -> bool:
        """Make ``url`` current if it is one of ours (e.g. the leader a node reported);
        returns False, changing nothing, for an unknown URL."""
        try:
            i = self._index.get(normalize_endpoint(url))
        except ValueError:
            return False
        if i is None:
            return False
        self._i = i
        return True

    def rotation(self) -> list[str]:
        """Every endpoint, starting with the current one."""
        return list(self.urls[self._i :] + self.urls[: self._i])


class Backoff:
    """Outcome of an attempt that will be retried after ``delay`` seconds."""

    __slots__ = ("delay",)

    def __init__(self, delay: float) -> None:
        self.delay = delay

    def __repr__(self) -> str:
        return f"Backoff({self.delay:.3f})"


class Exchange:
    """Drives one call through its attempts (see the module docstring)."""

    __slots__ = (
        "_clock",
        "_deadline",
        "_endpoints",
        "_policy",
        "_rand",
        "_seen",
        "_timeout",
        "_unknown",
        "attempts",
        "endpoint",
        "request",
    )

    def __init__(
        self,
        request: Request,
        endpoints: Endpoints,
        policy: RetryPolicy,
        timeout: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.request = request
        self._endpoints = endpoints
        self._policy = policy
        self._timeout = timeout
        self._clock = clock
        self._rand = rand
        # A long poll (request.wait) may be held that much longer by the server.
        self._deadline = (
            None if policy.deadline is None else clock() + policy.deadline + request.wait
        )
        self.attempts = 0
        self.endpoint = endpoints.current
        # The first attempt of a write whose outcome is unknown: (its number, its error).
        self._unknown: tuple[int, StatekeeperError] | None = None
        # What each node came to in this call, last first: an attempt's failure, or what
        # a node said when asked who leads (observed); a failed call names them all
        # (_reachability).
        self._seen: dict[str, StatekeeperError | str] = {}

    def next_attempt(self) -> tuple[str, float]:
        """The endpoint and the timeout (seconds) for the next attempt."""
        self.attempts += 1
        self.endpoint = self._endpoints.current
        timeout = self._timeout + self.request.wait
        if self._deadline is not None:
            remaining = self._deadline - self._clock()
            if remaining < timeout:
                timeout = max(remaining, 0.001)
        return self.endpoint, timeout

    def received(self, status: int, content_type: str | None, body: bytes) -> Any:
        """Feed the HTTP answer: returns the call's result, or a :class:`Backoff` if the
        call should be retried; raises the typed exception otherwise."""
        try:
            result = self.request.parse(status, content_type, body)
        except StatekeeperError as err:
            if err.endpoint is None:
                err.endpoint = self.endpoint
            return self.failed(err)
        self._endpoints.succeeded(self.endpoint)
        return result

    def failed(self, err: StatekeeperError) -> Backoff:
        """Feed a failure: returns a :class:`Backoff` or raises the call's error (final)."""
        err.attempts = self.attempts
        self._seen[self.endpoint] = err
        if self.request.idempotency_key is not None:
            err.idempotency_key = self.request.idempotency_key
            if self._unknown is None and _outcome_unknown(err):
                self._unknown = (self.attempts, err)
        if not self._policy.is_retryable(err):
            if err.status is not None:
                self._endpoints.succeeded(self.endpoint)  # the node answered properly
            raise self._giving_up(err)
        self._endpoints.failed(self.endpoint)
        if self.attempts >= self._policy.max_attempts:
            raise self._giving_up(self._reachability(err))
        delay = self._policy.backoff(self.attempts, self._rand)
        if self._deadline is not None and self._clock() + delay >= self._deadline:
            raise self._giving_up(self._reachability(err))
        return Backoff(delay)

    def observed(self, url: str, outcome: StatekeeperError | str) -> None:
        """What ``url`` came to outside the call's attempts (asked which node leads): its
        failure, or a description of its answer. An attempt's HTTP answer is kept over a
        description: it says why the node did not serve the call."""
        url = _normalized(url)
        known = self._seen.get(url)
        if isinstance(outcome, str) and isinstance(known, StatekeeperError) and known.status:
            return
        self._seen[url] = outcome

    def refused(self, url: str) -> bool:
        """True if a connection to ``url`` was refused in this call: a node may still
        name it the leader for an election timeout, but it is not the place to go."""
        known = self._seen.get(_normalized(url))
        return isinstance(known, StatekeeperError) and known.code == "connection_failed"

    def _codes(self) -> dict[str, str]:
        """Each node seen in this call: its last error code, or "answered"."""
        return {u: _code(e) for u, e in self._seen.items()}

    def _reachability(self, last: StatekeeperError) -> StatekeeperError:
        """The error a call that ran out of retries over several nodes gives up with: what
        every node it tried came to, not only the last one. With two of three nodes down
        the last attempt named whichever node it happened to be ("cannot connect to
        :8001", or node-0's "knows no raft leader") while the question was why no node
        could serve; etcd answers it as "no leader: 1 of 3 nodes reachable" (issue 30 item
        16). The class, code and status stay the last attempt's (callers and the chaos
        classifier read them); a Timeout stays as it is (its outcome is unknown)."""
        if not isinstance(last, Unavailable) or len(self._seen) < 2:
            return last
        silent = {
            u: e for u, e in self._seen.items() if isinstance(e, StatekeeperError) and not e.status
        }
        answered = {u: e for u, e in self._seen.items() if u not in silent}
        if not silent:
            return last  # every node answered: its own words are the reason
        parts = [f'{u} answered "{e if isinstance(e, str) else e.message or e.code}"'
                 for u, e in answered.items()]  # fmt: skip
        for code, what in _SILENCE.items():
            urls = [u for u, e in silent.items() if e.code == code]
            if urls:
                parts.append(f"{what} {', '.join(urls)}")
        parts += [f'{u}: "{e}"' for u, e in silent.items() if e.code not in _SILENCE]
        total = len(self._endpoints)
        untried = total - len(self._seen)
        head = "no leader: " if answered else ""
        summary = Unavailable(
            f"{head}{len(answered)} of {total} nodes reachable ("
            + "; ".join(parts)
            + (f"; {untried} not tried" if untried else "")
            + ")",
            code=last.code,
            status=last.status,
            details={**last.details, "nodes": self._codes()},
            endpoint=last.endpoint,
        )
        summary.attempts, summary.idempotency_key = last.attempts, last.idempotency_key
        summary.__cause__ = last
        return summary

    def _giving_up(self, last: StatekeeperError) -> StatekeeperError:
        """The error a write gives up with. A refusal (503 "no leader; nothing was
        applied", 507 "this attempt was not proposed", 401, 403, 500, ...) is true of its
        own attempt only: after an attempt whose outcome is unknown the write may have been
        applied (a mixed-version cluster answered 503 after 8 s to a put that was in the
        store; a node under the NOSPACE alarm answered 507 to the retry of an applied put,
        issue 26), so the call's outcome is unknown, never "not applied". A verdict on the
        request itself (_verdict) is kept: every attempt would have got it."""
        if self._unknown is None or _outcome_unknown(last) or _verdict(last):
            return last
        n, first = self._unknown
        err = Timeout(
            f"the outcome is unknown: attempt {n} of {self.attempts} ended without an answer "
            f"({first.code}: {first.message}) and may have been applied; the last attempt "
            f"failed with {last}. Retry with the same idempotency_key",
            code="outcome_unknown",
            status=last.status,
            endpoint=last.endpoint,
        )
        err.attempts, err.idempotency_key = last.attempts, last.idempotency_key
        err.__cause__ = last
        return err


def _code(outcome: StatekeeperError | str) -> str:
    return "answered" if isinstance(outcome, str) else outcome.code


def _normalized(url: str) -> str:
    try:
        return normalize_endpoint(url)
    except ValueError:
        return url


# How a node that gave no HTTP answer is named in a give-up summary, by its error code.
_SILENCE = {
    "connection_failed": "cannot connect to",
    "connection_lost": "connection lost to",
    "client_timeout": "no answer in time from",
}


def _verdict(err: StatekeeperError) -> bool:
    """An answer about the request itself, true of every attempt that carried the same
    bytes: invalid or too large (400/405/413/415/422, ``idempotency_key_reused`` included:
    the key is bound to another request), or apply's answer for the key (not found, a
    failed compare, compacted). Anything else a node answers without proposing (its
    storage alarm, a token revoked meanwhile, an internal error) says nothing of an
    earlier attempt."""
    return isinstance(err, InvalidRequest | NotFound | Conflict | Compacted)


def _outcome_unknown(err: StatekeeperError) -> bool:
    """The attempt may have been applied: it timed out, or its connection broke after the
    request was sent (connection_error's ``lost``)."""
    return isinstance(err, Timeout) or err.code == "connection_lost"
