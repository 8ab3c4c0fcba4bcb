"""The Coordination page in headless chromium against a real 3-node cluster with TLS, auth
and [ui] (tests/integration/console_fixture.py): a lock changing holder shown live (held
by one client, released, taken by another: the new holder and fence appear without a
reload), a lease counting down with its keys, an effect that maybe happened, a CRDT's
value and replicas; what the page shows equals what the API returns."""

from __future__ import annotations

import time

import pytest

from statekeeper.client import Client
from statekeeper.client.auth.tokens import root_token
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.console_fixture import (
    console_url,
    login,
    open_page,
    screenshot,
    wait_for,
)

pytestmark = pytest.mark.integration

NS = "coord-ui"


def _client(lc: LocalCluster) -> Client:
    return Client(lc.config.http_urls(), token=root_token(lc.config.secret), tls=lc.tls, ns=NS)


def _cell(browser, row: str, cls: str) -> str:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:  # the fragment is swapped every second: an element may go stale under us
        return browser.find_element(By.CSS_SELECTOR, f"{row} td.{cls}").text
    except (NoSuchElementException, StaleElementReferenceException):
        return ""


def _ttl_left_ms(browser, lease_id: int) -> int | None:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        cell = browser.find_element(By.CSS_SELECTOR, f'tr[data-lease="{lease_id}"] td.ttl-left')
        return int(cell.get_attribute("data-ms"))
    except (NoSuchElementException, StaleElementReferenceException, ValueError, TypeError):
        return None


def test_locks_live_leases_counting_effects_and_crdts(
    browser, console_cluster: LocalCluster
) -> None:
    lc = console_cluster
    url = console_url(lc)
    with _client(lc) as a, _client(lc) as b:
        held = a.lock("job", ttl=30, owner="pod-a")
        lease = a.lease_grant(60)
        a.put("session/a", b"1", lease=lease)
        a.put("session/b", b"2", lease=lease)

        def boom(ctx):
            raise RuntimeError("bank timed out")

        with pytest.raises(RuntimeError):
            a.effects.run("pay/2", boom)
        ra = a.crdt.counter("visits", replica_id="r-a", autosave=False)
        rb = b.crdt.counter("visits", replica_id="r-b", autosave=False)
        ra.increment(5)
        rb.decrement(2)
        ra.sync()
        rb.sync()

        login(browser, root_token(lc.config.secret), url)
        open_page(browser, f"{url}/coordination?ns={NS}")
        row = 'tr[data-lock="job"]'
        assert _cell(browser, row, "fence") == str(held.fence)
        assert _cell(browser, row, "owner") == "pod-a"
        (info,) = a.lock_list().locks
        assert (info.name, info.holder_fence) == ("job", held.fence)  # the page == the API

        # The lease's TTL counts down on the page (polled every second).
        first = wait_for(browser, lambda br: _ttl_left_ms(br, lease.id))
        wait_for(browser, lambda br: (_ttl_left_ms(br, lease.id) or first) <= first - 1500)
        keys = _cell(browser, f'tr[data-lease="{lease.id}"]', "keys")
        assert "session/a" in keys and "session/b" in keys

        effect = 'tr[data-effect="pay/2"]'
        assert _cell(browser, effect, "maybe-happened") == "yes"
        assert _cell(browser, effect, "attempt") == "1"
        assert _cell(browser, effect, "state").startswith("claimed")
        crdt = 'tr[data-crdt="visits"]'
        assert _cell(browser, crdt, "value") == "3" == str(a.crdt_get("visits").value)
        assert _cell(browser, crdt, "replicas") == "r-a (5), r-b (-2)"
        screenshot(browser, "coordination")

        # Another client takes the lock: the page shows it without a reload.
        held.release()
        taken = b.lock("job", ttl=30, owner="pod-b")
        assert taken.fence > held.fence
        marker = browser.find_element("id", "ns")  # the page itself is not reloaded
        wait_for(browser, lambda br: _cell(br, row, "fence") == str(taken.fence))
        assert _cell(browser, row, "owner") == "pod-b"
        assert browser.find_element("id", "ns") == marker
        taken.release()
        deadline = time.monotonic() + 10
        while browser.find_elements("css selector", row) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not browser.find_elements("css selector", row)
        a.lease_revoke(lease)
