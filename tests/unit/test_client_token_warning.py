"""A client configured with a token and a plain http:// URL to another machine warns once:
the token would cross the network in the clear (issue 27 item 14). Loopback is exempt
(a dev cluster), and so is https://."""

from __future__ import annotations

import warnings

import pytest

from statekeeper.client import Client


def _warnings_of(**kw) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Client(**kw).close()
    return [w for w in caught if "in the clear" in str(w.message)]


def test_a_token_over_plain_http_to_another_host_warns_once() -> None:
    token = "sk-not-a-real-token"
    caught = _warnings_of(endpoints=["http://10.0.0.5:7000", "http://10.0.0.6:7000"], token=token)
    assert len(caught) == 1, caught
    assert caught[0].category.__name__ == "InsecureTokenWarning"
    message = str(caught[0].message)
    assert "10.0.0.5" in message and "https" in message and token not in message


@pytest.mark.parametrize(
    "kw",
    [
        {"endpoints": "http://127.0.0.1:7000", "token": "t"},
        {"endpoints": "http://localhost:7000", "token": "t"},
        {"endpoints": "http://[::1]:7000", "token": "t"},
        {"endpoints": "http://10.0.0.5:7000"},  # no token
    ],
)
def test_loopback_or_no_token_does_not_warn(kw, monkeypatch) -> None:
    monkeypatch.delenv("STATEKEEPER_TOKEN", raising=False)
    monkeypatch.delenv("STATEKEEPER_TOKEN_FILE", raising=False)
    assert _warnings_of(**kw) == []
