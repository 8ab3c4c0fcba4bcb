"""The LangGraph page in headless chromium against a real 3-node cluster with TLS, auth
and [ui] (tests/integration/console_fixture.py): a real StateGraph run with the saver and
a time travel, then log in, find the thread in the saver's namespace, see the fork drawn
as a fork with its abandoned branch, and open a checkpoint whose channel values and
metadata are what saver.get_tuple returns. A token of another namespace is refused."""

from __future__ import annotations

import json
import uuid

import pytest

from statekeeper.client import Client
from statekeeper.client.auth.tokens import root_token
from statekeeper.client.langgraph.inspect import jsonable
from statekeeper.client.langgraph.saver import StatekeeperSaver
from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.console_fixture import (
    console_url,
    login,
    open_page,
    screenshot,
    wait_for,
)
from tests.integration.langgraph_helpers import think_act_graph

pytestmark = pytest.mark.integration


def _saver(lc: LocalCluster, ns: str) -> StatekeeperSaver:
    urls = lc.config.http_urls()
    return StatekeeperSaver.from_endpoints(urls, ns=ns, token=_root(lc), tls=lc.tls)


def _root(lc: LocalCluster) -> str:
    return root_token(lc.config.secret)


def _rows(browser) -> list[dict]:
    from selenium.webdriver.common.by import By

    return [
        {
            "id": r.get_attribute("data-checkpoint"),
            "depth": r.get_attribute("data-depth"),
            "classes": r.get_attribute("class").split(),
        }
        for r in browser.find_elements(By.CSS_SELECTOR, "#checkpoints tr.checkpoint")
    ]


def _channels(browser) -> dict:
    """The channel values the page shows, parsed from each channel's JSON block (folded
    blocks too: textContent, not the visible text)."""
    from selenium.webdriver.common.by import By

    shown = {}
    for row in browser.find_elements(By.CSS_SELECTOR, "#channel-values tr.channel"):
        pre = row.find_element(By.CSS_SELECTOR, "pre.json")
        shown[row.get_attribute("data-channel")] = json.loads(pre.get_attribute("textContent"))
    return shown


def _writes(browser) -> list[list]:
    from selenium.webdriver.common.by import By

    return [
        [
            *(
                td.get_attribute("textContent").strip()
                for td in w.find_elements(By.TAG_NAME, "td")[:2]
            ),
            json.loads(w.find_element(By.CSS_SELECTOR, "pre.json").get_attribute("textContent")),
        ]
        for w in browser.find_elements(By.CSS_SELECTOR, "#pending-writes tr.write")
    ]


def test_threads_fork_and_checkpoint_in_the_browser(browser, console_cluster) -> None:
    from selenium.webdriver.common.by import By

    lc = console_cluster
    ns, thread = f"lg-ui-{uuid.uuid4().hex[:6]}", "travel"
    config = {"configurable": {"thread_id": thread}}
    with _saver(lc, ns) as saver:
        graph = think_act_graph(saver)
        graph.invoke({"notes": [], "count": 0}, config)
        after_think = next(s for s in graph.get_state_history(config) if s.next == ("act",))
        # time travel: run "act" again from the checkpoint after "think", with a new count
        graph.invoke(None, graph.update_state(after_think.config, {"count": 100}))
        history = [s.config for s in graph.get_state_history(config)]
        fork = after_think.config["configurable"]["checkpoint_id"]

        url = console_url(lc)
        login(browser, _root(lc), url)
        browser.find_element(By.LINK_TEXT, "LangGraph").click()
        box = wait_for(browser, lambda b: b.find_element(By.ID, "ns"))
        assert box.get_attribute("value") == "langgraph"  # the saver's default namespace
        box.clear()
        box.send_keys(ns)
        browser.find_element(By.ID, "ns-go").click()
        row = wait_for(browser, lambda b: b.find_element(By.CSS_SELECTOR, "tr.thread"))
        assert row.get_attribute("data-thread") == thread
        assert row.find_element(By.CSS_SELECTOR, "td.count").text == "6"

        row.find_element(By.LINK_TEXT, thread).click()
        wait_for(browser, lambda b: b.find_elements(By.ID, "checkpoints"))
        rows = _rows(browser)
        ids = [c["configurable"]["checkpoint_id"] for c in history]
        assert [r["id"] for r in rows] == ids  # LangGraph's order: newest first
        by_id = {r["id"]: r for r in rows}
        assert "fork" in by_id[fork]["classes"]
        assert browser.find_element(By.ID, "fork-count").text == "1"
        abandoned = [r for r in rows if "abandoned" in r["classes"]]
        assert len(abandoned) == 1 and abandoned[0]["depth"] == "1"  # the first run's "act"
        assert all(r["depth"] == "0" for r in rows if r not in abandoned)
        screenshot(browser, "langgraph")

        old = abandoned[0]["id"]
        browser.find_element(By.CSS_SELECTOR, f'tr[data-checkpoint="{old}"] a.id').click()
        wait_for(browser, lambda b: b.find_elements(By.ID, "channel-values"))
        assert browser.find_element(By.ID, "checkpoint-id").text == old
        tup = saver.get_tuple(next(c for c in history if c["configurable"]["checkpoint_id"] == old))
        assert _channels(browser) == jsonable(tup.checkpoint["channel_values"])
        assert _channels(browser)["count"] == 11
        metadata = browser.find_element(By.CSS_SELECTOR, "#metadata pre.json")
        assert json.loads(metadata.get_attribute("textContent")) == jsonable(tup.metadata)
        screenshot(browser, "langgraph-checkpoint")
        parent = browser.find_element(By.ID, "parent-link")
        assert parent.text == fork
        parent.click()  # the fork point: its values are those before the time travel
        wait_for(browser, lambda b: b.find_element(By.ID, "checkpoint-id").text == fork)
        at_fork = saver.get_tuple(after_think.config)
        assert _channels(browser) == jsonable(at_fork.checkpoint["channel_values"])
        # its pending writes (the writes of the tasks run from it), as the saver reads them
        assert at_fork.pending_writes and _writes(browser) == [
            [task, channel, jsonable(value)] for task, channel, value in at_fork.pending_writes
        ]


def test_a_token_of_another_namespace_is_refused(browser, console_cluster) -> None:
    from selenium.webdriver.common.by import By

    lc = console_cluster
    with Client(lc.config.http_urls(), token=_root(lc), tls=lc.tls) as c:
        other = c.auth_token_create(name="lg-other", ns="elsewhere", role="reader").token
    url = console_url(lc)
    login(browser, other, url)
    open_page(browser, url + "/langgraph")
    assert "Not allowed" in browser.find_element(By.TAG_NAME, "h1").text
    assert browser.find_elements(By.CSS_SELECTOR, "tr.thread") == []
