"""The Keys page in headless chromium against a real 3-node cluster with TLS, auth and [ui]
(tests/integration/console_fixture.py): browse a prefix across two pages, open a key and
see its decoded JSON equal to what the API returns, pick two revisions and see their diff,
see a new put appear in the live tail without a reload; a token of another namespace sees
nothing of this one."""

from __future__ import annotations

import json

import pytest

from statekeeper.client import Client
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.cluster_fixture import mint_token
from tests.integration.console_fixture import (
    console_url,
    login,
    open_page,
    screenshot,
    wait_for,
)

pytestmark = pytest.mark.integration

NS = "keys-ui"
STATES = [{"step": i, "plan": ["look", "act"][: i + 1], "done": i == 2} for i in range(3)]


@pytest.fixture(scope="module")
def writer(console_cluster: LocalCluster) -> tuple[str, Client]:
    """A writer token of NS, and a client with it holding 7 keys under cfg/ (one of them,
    cfg/agent, written three times)."""
    lc = console_cluster
    token = mint_token(lc, ns=NS, role="writer")
    client = Client(lc.config.http_urls(), token=token, tls=lc.tls, ns=NS)
    for i in range(6):
        client.put(f"cfg/{i}", json.dumps({"i": i}).encode())
    for state in STATES:
        client.put("cfg/agent", json.dumps(state).encode())
    client.put("other/x", b"outside the prefix")
    yield token, client
    client.close()


def _css(browser, selector: str) -> list:
    from selenium.webdriver.common.by import By

    return browser.find_elements(By.CSS_SELECTOR, selector)


def _data(browser, selector: str, name: str) -> list[str]:
    """The data-<name> of the elements matching ``selector``, read in one script: no stale
    element between a find and a read while a page loads or htmx swaps the tail."""
    return browser.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]))"
        ".map(e => e.getAttribute(arguments[1]))",
        selector,
        f"data-{name}",
    )


def _keys(browser) -> list[str]:
    return _data(browser, "tr.key-row", "key")


def test_browse_open_diff_and_tail(browser, console_cluster, writer) -> None:
    from selenium.webdriver.common.by import By

    token, client = writer
    url = console_url(console_cluster)
    login(browser, token, url)
    open_page(browser, f"{url}/keys?limit=4")  # the token names NS only: the page opens it
    assert browser.find_element(By.ID, "keys-ns").text == NS
    prefix = browser.find_element(By.ID, "prefix")
    prefix.send_keys("cfg/")
    browser.find_element(By.ID, "browse").click()
    wait_for(browser, lambda b: _keys(b) and all(k.startswith("cfg/") for k in _keys(b)))
    first = _keys(browser)
    browser.find_element(By.ID, "next-page").click()
    wait_for(browser, lambda b: _keys(b) != first)
    second = _keys(browser)
    assert not _css(browser, "#next-page")  # 7 keys at 4 a page: two pages
    assert first + second == [f"cfg/{i}" for i in range(6)] + ["cfg/agent"]

    browser.find_element(By.LINK_TEXT, "cfg/agent").click()
    wait_for(browser, lambda b: _css(b, "#value"))
    shown = json.loads(browser.find_element(By.ID, "value").text)
    assert shown == json.loads(client.get("cfg/agent").value) == STATES[-1]
    assert browser.find_element(By.ID, "value-format").text == "json"
    revisions = [int(r) for r in _data(browser, "tr.revision", "revision")]
    assert (
        len(revisions) == 3 and "took 3 reads" in browser.find_element(By.ID, "revisions-cost").text
    )
    screenshot(browser, "keys")

    oldest, newest = revisions[-1], revisions[0]
    browser.find_element(By.ID, f"left-{oldest}").click()
    browser.find_element(By.ID, f"right-{newest}").click()
    browser.find_element(By.ID, "diff").click()
    wait_for(browser, lambda b: _css(b, "#changes"))
    changes = {
        tuple(td.text for td in tr.find_elements(By.TAG_NAME, "td"))
        for tr in _css(browser, "tr.change")
    }
    assert ("replace", "/step", "0", "2") in changes and (
        "replace",
        "/done",
        "false",
        "true",
    ) in changes
    assert any(line.text == '+  "done": true,' for line in _css(browser, "#diff-lines .add"))

    open_page(browser, f"{url}/keys/watch?ns={NS}&prefix=cfg/")
    wait_for(browser, lambda b: _css(b, "#keys-tail"))
    browser.execute_script("window.skNoReload = 1")  # gone if the page were loaded again
    rev = client.put("cfg/new", json.dumps({"fresh": True}).encode()).revision
    client.put("other/y", b"not watched")
    wait_for(browser, lambda b: _data(b, "tr.tail-event", "key"))
    assert _data(browser, "tr.tail-event", "key") == ["cfg/new"]
    assert _data(browser, "tr.tail-event", "revision") == [str(rev)]
    assert browser.execute_script("return window.skNoReload") == 1


def test_a_token_of_another_namespace_sees_nothing_of_it(browser, console_cluster, writer) -> None:
    from selenium.webdriver.common.by import By

    url = console_url(console_cluster, 1)
    login(browser, mint_token(console_cluster, ns="keys-elsewhere", role="admin"), url)
    open_page(browser, f"{url}/keys")
    assert browser.find_element(By.ID, "keys-ns").text == "keys-elsewhere"
    assert _keys(browser) == []
    for path in (
        f"/keys?ns={NS}&prefix=cfg/",
        f"/keys?ns_other={NS}",
        f"/keys/key?ns={NS}&key=cfg/agent",
        f"/keys/diff?ns={NS}&key=cfg/agent&left=1&right=2",
        f"/keys/watch?ns={NS}&prefix=",
    ):
        open_page(browser, url + path)
        assert browser.find_element(By.TAG_NAME, "h1").text == "Not allowed", path
        source = browser.page_source
        assert "cfg/0" not in source and '"step"' not in source and not _keys(browser), path
