"""The web console in headless chromium against a real 3-node cluster with TLS, auth and
[ui] enabled (tests/integration/console_fixture.py): log in, the Cluster page with its
three nodes and the leader, its live refresh, logout, a refused token, the CSP; and
`statekeeper console` serving the same page for a cluster without [ui]."""

from __future__ import annotations

import http.client
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from statekeeper.client import Client
from statekeeper.client.auth.tokens import root_token
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.cluster_fixture import running_cluster
from tests.integration.console_fixture import (
    console_url,
    login,
    open_page,
    screenshot,
    wait_for,
)

pytestmark = pytest.mark.integration
LOG = "console.log"  # `statekeeper console`'s stderr in plain_console


def _root(lc: LocalCluster) -> str:
    return root_token(lc.config.secret)


# The Cluster page's table is swapped by htmx every 2 s: an element found by one WebDriver
# call may be gone by the next (StaleElementReferenceException, 2 runs in 4 before). Each
# read below finds and reads in one script, inside the page, between two swaps.


def _by_id(browser, element_id: str) -> str:
    return browser.execute_script(
        "const e = document.getElementById(arguments[0]); return e ? e.textContent.trim() : ''",
        element_id,
    )


def _all(browser, selector: str, what: str) -> list[str]:
    """`what` ("text" or an attribute's name) of every element matching `selector`."""
    return browser.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]))"
        ".map(e => arguments[1] === 'text' ? e.textContent.trim() : e.getAttribute(arguments[1]))",
        selector,
        what,
    )


def _applied(browser) -> list[int]:
    return [int(text) for text in _all(browser, "tr.node td.applied", "text")]


def _chart_points(browser) -> int:
    lines = _all(browser, "tr.node svg.sparkline polyline", "points")
    return len(lines[0].split()) if lines else 0


def test_login_cluster_page_refresh_and_logout(browser, console_cluster: LocalCluster) -> None:
    from selenium.webdriver.common.by import By

    lc = console_cluster
    url = console_url(lc)
    login(browser, _root(lc), url)
    assert browser.current_url == url + "/cluster"
    assert sorted(_all(browser, "tr.node", "data-node")) == ["node-0", "node-1", "node-2"]
    with Client(lc.config.http_urls(), token=_root(lc), tls=lc.tls) as c:
        leader = c.status()["leader"]
        assert _by_id(browser, "leader") == leader
        before = _applied(browser)
        for i in range(20):
            c.put(f"console-refresh/{i}", b"x")
        # htmx polls /ui/cluster/live every 2 s: the applied indexes move without a reload.
        wait_for(browser, lambda b: min(_applied(b)) > max(before))
        # Under a little load for a few polls, the charts get points (a polyline each).
        deadline = time.monotonic() + 30
        while _chart_points(browser) < 5 and time.monotonic() < deadline:
            for i in range(10):
                c.put(f"console-load/{i}", b"x")
                c.get(f"console-load/{i}")
    assert _chart_points(browser) >= 2
    screenshot(browser, "cluster")
    browser.find_element(By.ID, "logout").click()
    wait_for(browser, lambda b: b.current_url.endswith("/ui/login"))
    open_page(browser, url + "/cluster")  # the session is gone: back to the login
    assert browser.current_url.endswith("/ui/login")


def test_a_wrong_token_is_refused(browser, console_cluster: LocalCluster) -> None:
    url = console_url(console_cluster)
    browser.delete_all_cookies()  # no session left by an earlier test
    login(browser, "sk_made-up_token", url)
    assert browser.current_url.endswith("/ui/login")
    assert "refused" in _by_id(browser, "login-error")
    open_page(browser, url + "/cluster")
    assert browser.current_url.endswith("/ui/login")


def test_csp_header_and_no_inline_script_runs(browser, console_cluster: LocalCluster) -> None:
    lc = console_cluster
    node = lc.config.nodes[1]
    conn = http.client.HTTPSConnection(node.host, node.http_port, context=lc.tls, timeout=10)
    conn.request("GET", "/ui/login")
    resp = conn.getresponse()
    resp.read()
    csp = resp.getheader("Content-Security-Policy")
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    assert resp.getheader("X-Content-Type-Options") == "nosniff"
    # An inline script put into the page is not run by the browser (the CSP forbids it).
    url = console_url(lc, 1)
    login(browser, _root(lc), url)
    browser.execute_script(
        "var s = document.createElement('script');"
        "s.textContent = 'document.title = \"inline ran\"';"
        "document.body.appendChild(s);"
    )
    time.sleep(0.2)
    assert browser.title != "inline ran"
    logs = browser.get_log("browser")
    assert any("Content Security Policy" in e["message"] for e in logs), logs
    # htmx and the stylesheet load under the same policy: no other violation.
    assert not [e for e in logs if "htmx" in e["message"] or "app.css" in e["message"]], logs


@pytest.fixture(scope="module")
def plain_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, str]]:
    """A TLS+auth cluster without [ui], and `statekeeper console` serving it."""
    directory = tmp_path_factory.mktemp("console-cli")
    with running_cluster(directory, tls=True, auth=True) as lc, open(directory / LOG, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "statekeeper.cluster.cli", "console", "--config",
             str(directory / "cluster.toml"), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        try:
            line = proc.stdout.readline()
            found = re.search(r"(http://\S+/ui)", line)
            assert found, line
            yield lc, found.group(1)
        finally:
            proc.terminate()
            proc.wait(10)


def test_statekeeper_console_serves_a_cluster_without_ui(browser, plain_console) -> None:
    from selenium.webdriver.common.by import By

    lc, url = plain_console
    node = lc.config.nodes[0]
    conn = http.client.HTTPSConnection(node.host, node.http_port, context=lc.tls, timeout=10)
    conn.request("GET", "/ui/login")
    assert conn.getresponse().status == 404  # the node itself does not serve it
    login(browser, _root(lc), url)
    assert browser.current_url == url + "/cluster"
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.node")) == 3
    assert _by_id(browser, "leader").startswith("node-")
    # Its log (stderr) has the audit line of the login (console/audit.py).
    logged = (lc.config_path.parent / LOG).read_text()
    pattern = r"INFO statekeeper\.auth: console_login: token root \(name root .*: done 303"
    assert re.search(pattern, logged), logged
