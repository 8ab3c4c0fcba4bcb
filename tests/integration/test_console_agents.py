"""The Agents page in headless chromium against a real 3-node cluster with TLS, auth and
[ui] enabled (tests/integration/console_fixture.py): a writer follows an agent from the
list to its timeline, to a diff of two checkpoints, to a rollback it confirms, and the new
head is the API's; a reader sees no rollback and a POST forged in its session is refused
with nothing changed; a token of another namespace sees nothing of this one. Writes
the screenshots agents.png and agent-timeline.png (docs/console/ with `make console-screenshots`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from statekeeper.client import Client
from statekeeper.client.agent import Agent
from statekeeper.client.auth.tokens import parse_token, root_token
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

NS = "agents-ui"


@pytest.fixture(scope="module")
def api(console_cluster: LocalCluster) -> Iterator[Client]:
    """The root token's client; it seeds NS: 8 small agents and "planner" with 24 steps
    and a checkpoint every 4th step."""
    lc = console_cluster
    with Client(lc.config.http_urls(), token=root_token(lc.config.secret), tls=lc.tls) as c:
        for i in range(8):
            a = Agent(c, f"worker-{i}", ns=NS)
            a.log("task", {"n": i}, step=1)
            a.checkpoint({"done": i}, step=1)
        planner = Agent(c, "planner", ns=NS)
        for step in range(1, 25):
            planner.log("plan", {"step": step, "note": f"thought {step}"}, step=step)
            if step % 4 == 0:
                plan = {"goal": "ship", "step": step, "tasks": [f"t{k}" for k in range(step // 4)]}
                planner.checkpoint(plan, step=step)
        yield c


def _css(browser, selector: str) -> list:
    from selenium.webdriver.common.by import By

    return browser.find_elements(By.CSS_SELECTOR, selector)


def _text(browser, element_id: str) -> str:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.ID, element_id).text


def _login(browser, lc: LocalCluster, token: str, node: int = 0) -> str:
    url = console_url(lc, node)
    browser.delete_all_cookies()
    login(browser, token, url)
    return url


def test_list_timeline_diff_rollback(browser, console_cluster: LocalCluster, api: Client) -> None:
    lc = console_cluster
    writer = mint_token(lc, ns=NS, role="writer")
    url = _login(browser, lc, writer, node=1)
    open_page(browser, f"{url}/agents")  # the namespace of the token's grant
    rows = {r.get_attribute("data-agent"): r for r in _css(browser, "tr.agent")}
    assert sorted(rows) == sorted(["planner", *(f"worker-{i}" for i in range(8))])
    head = Agent(api, "planner", ns=NS).latest()
    planner = rows["planner"]
    assert planner.find_element("css selector", "td.ckpt").text == f"#{head.n}"
    assert planner.find_element("css selector", "td.events").text == "24"
    screenshot(browser, "agents")
    # Search by prefix: htmx swaps the list as one types.
    box = browser.find_element("id", "prefix")
    box.send_keys("work")
    wait_for(browser, lambda b: len(_css(b, "tr.agent")) == 8)

    open_page(browser, f"{url}/agents?ns={NS}")
    browser.find_element("css selector", 'tr[data-agent="planner"] a.agent-link').click()
    wait_for(browser, lambda b: _css(b, "#agent-id"))
    assert _text(browser, "head") == f"#{head.n}" == "#6"
    ckpts = [int(r.get_attribute("data-ckpt")) for r in _css(browser, "tr.row.checkpoint")]
    assert ckpts == [6, 5, 4, 3, 2, 1]
    assert len(_css(browser, "tr.row.event")) == 24
    screenshot(browser, "agent-timeline")

    # A diff of two checkpoints from the timeline's form: #2 (step 8) -> #5 (step 20).
    browser.find_element("id", "diff-left").clear()
    browser.find_element("id", "diff-left").send_keys("2")
    browser.find_element("id", "diff-right").clear()
    browser.find_element("id", "diff-right").send_keys("5")
    browser.find_element("id", "diff-go").click()
    wait_for(browser, lambda b: _css(b, "#changes"))
    changes = [(r.get_attribute("data-op"), r.get_attribute("data-path"))
               for r in _css(browser, "tr.change")]  # fmt: skip
    assert changes == [("replace", "/step"), ("add", "/tasks/2"), ("add", "/tasks/3"),
                       ("add", "/tasks/4")]  # fmt: skip

    # Roll back to #2 from the diff: the confirmation names what will change.
    browser.find_element("id", "rollback-from").click()
    wait_for(browser, lambda b: _css(b, "#rollback-form"))
    assert "#6" in _text(browser, "rollback-what") and "#2" in _text(browser, "rollback-what")
    named = [(r.get_attribute("data-op"), r.get_attribute("data-path"))
             for r in _css(browser, "tr.change")]  # fmt: skip
    # #6 (step 24, tasks t0..t5) -> #2 (step 8, tasks t0, t1): the step and four tasks.
    assert named[0] == ("replace", "/step") and len(named) == 5
    assert all(op == "remove" and path.startswith("/tasks/") for op, path in named[1:])
    browser.find_element("id", "rollback-confirm").click()
    wait_for(browser, lambda b: _css(b, "#rolled"))
    now = Agent(api, "planner", ns=NS).latest()
    assert now.n == 7 and now.kind == "rollback" and now.state == {
        "goal": "ship", "step": 8, "tasks": ["t0", "t1"]
    }  # fmt: skip
    assert _text(browser, "head") == f"#{now.n}"
    assert "#7" in _text(browser, "rolled")
    assert _css(browser, 'tr.row.rollback[data-ckpt="7"]')
    # The node that served the console logged the action (console/audit.py), token by id.
    lines = (lc.data_dir("node-1") / "node.log").read_text().splitlines()
    done = [line for line in lines if "console_action:" in line and "/ui/agents/rollback" in line]
    assert len(done) == 1 and writer not in done[0], done
    assert f"token {parse_token(writer)[0]} (name " in done[0]
    assert f"POST /ui/agents/rollback, ns {NS}, object " in done[0]
    assert "agent=planner" in done[0] and "ckpt=2" in done[0] and done[0].endswith("done 303")


def test_a_reader_cannot_roll_back(browser, console_cluster: LocalCluster, api: Client) -> None:
    lc = console_cluster
    url = _login(browser, lc, mint_token(lc, ns=NS, role="reader"))
    worker = Agent(api, "worker-3", ns=NS)
    before = worker.latest()
    worker.checkpoint({"done": 30}, step=2)
    head = worker.latest()
    open_page(browser, f"{url}/agents/timeline?ns={NS}&agent=worker-3")
    assert _text(browser, "head") == f"#{head.n}"
    assert not _css(browser, "a.rollback-link")
    open_page(browser, f"{url}/agents/rollback?ns={NS}&agent=worker-3&ckpt={before.n}")
    assert _css(browser, "#rollback-readonly") and not _css(browser, "#rollback-form")
    # A form forged in the page, with the reader's own session and CSRF token: the API's
    # 403 comes back as a page that says so, and the agent is unchanged.
    browser.execute_script(
        """const f = document.createElement('form');
        f.method = 'post'; f.action = arguments[0];
        const fields = {csrf: document.querySelector('input[name=csrf]').value, ns: arguments[1],
                        agent: 'worker-3', ckpt: String(arguments[2]),
                        expect_head: String(arguments[3])};
        for (const [k, v] of Object.entries(fields)) {
          const i = document.createElement('input');
          i.type = 'hidden'; i.name = k; i.value = v; f.appendChild(i);
        }
        document.body.appendChild(f); f.submit();""",
        "/ui/agents/rollback", NS, before.n, head.n,
    )  # fmt: skip
    wait_for(browser, lambda b: "Nothing was rolled back" in b.page_source)
    assert "Not allowed" in browser.find_element("css selector", "p.error").text
    after = Agent(api, "worker-3", ns=NS).latest()
    assert after.n == head.n and after.state == {"done": 30}


def test_another_namespace_sees_nothing_of_this_one(
    browser, console_cluster: LocalCluster, api: Client
) -> None:
    lc = console_cluster
    url = _login(browser, lc, mint_token(lc, ns="elsewhere", role="admin"), node=2)
    open_page(browser, f"{url}/agents")
    assert _css(browser, "#no-agents") and "elsewhere" in _text(browser, "no-agents")
    for path in (f"agents?ns={NS}", f"agents/timeline?ns={NS}&agent=planner",
                 f"agents/diff?ns={NS}&agent=planner&left=1&right=2",
                 f"agents/state?ns={NS}&agent=planner&step=4"):  # fmt: skip
        open_page(browser, f"{url}/{path}")
        source = browser.page_source
        assert "Not allowed" in source, path
        assert not _css(browser, "tr.agent, tr.row, tr.change, #state-value"), path
        assert "thought" not in source and "worker-" not in source and "ship" not in source
