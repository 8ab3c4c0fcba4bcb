"""The web console in a real browser: Debian's chromium driven by Selenium.

- `browser`: headless chromium (/usr/bin/chromium, /usr/bin/chromedriver) for a module,
  with a fresh profile; skipped, with the reason, when either is missing (`apt-get install
  chromium chromium-driver`; .ci/run installs them and fails without them, so CI never
  skips). It accepts the test cluster's self-signed CA (acceptInsecureCerts): the test CA
  lives in a temporary directory the browser's certificate store does not know.
- `console_cluster`: a real 3-node cluster with TLS, auth and [ui] enabled (a LocalCluster).
- `console_url(lc, i)`: node i's console URL (https://127.0.0.1:PORT/ui).
- `login(browser, token, url)`: log in at `url`'s login page, wait for the first page.
- `screenshot(browser, name)`: docs/console/<name>.png (the docs and README show them).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper.cluster.supervisor import LocalCluster
from tests.integration.cluster_fixture import running_cluster

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,900",
)
# Every browser test writes its pages' screenshots here: a run must not dirty the checkout,
# so docs/console/ (the README's pictures) is written only when asked, by
# `make console-screenshots` (STATEKEEPER_SCREENSHOTS=docs/console).
SCREENSHOTS = Path(
    os.environ.get("STATEKEEPER_SCREENSHOTS")
    or Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
)
WAIT_SECONDS = 15


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not Path(path).exists():
            return f"{path} is missing (apt-get install {package})"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = browser_missing()
    if missing:
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="sk-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.accept_insecure_certs = True
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def console_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A 3-node cluster with TLS, auth and the console at /ui on every node."""
    with running_cluster(tmp_path_factory.mktemp("console"), tls=True, auth=True, ui=True) as lc:
        yield lc


def console_url(lc: LocalCluster, node: int = 0) -> str:
    return lc.config.http_urls()[node] + "/ui"


def open_page(browser: Any, url: str) -> None:
    """Load `url` and wait until its document is there. Right after get() returns,
    chromedriver now and then reads an empty document (page_source '' while the title is
    already the new page's: seen in about 1 load in 40 under make test's load), so a test
    that looks at once saw nothing."""
    browser.get(url)
    wait_for(browser, lambda b: b.execute_script(
        "return document.readyState === 'complete' && !!document.body"
        " && document.body.children.length > 0"))  # fmt: skip


def wait_for(browser: Any, condition: Any, timeout: float = WAIT_SECONDS) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout).until(condition)


def login(browser: Any, token: str, url: str) -> None:
    """Log in on `url`'s login page and wait until the page after it has loaded."""
    from selenium.webdriver.common.by import By

    open_page(browser, url + "/login")
    field = browser.find_element(By.ID, "token")
    field.clear()
    field.send_keys(token)
    browser.find_element(By.ID, "login").click()
    wait_for(browser, lambda b: not b.current_url.endswith("/login") or _login_error(b))


def _login_error(browser: Any) -> bool:
    from selenium.webdriver.common.by import By

    return bool(browser.find_elements(By.ID, "login-error"))


def screenshot(browser: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    browser.save_screenshot(str(path))
    return path
