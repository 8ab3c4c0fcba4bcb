"""The Operations page in headless chromium against a real 3-node cluster with TLS, auth
and [ui] (tests/integration/console_fixture.py): the members equal the API's, a retention
policy with what it holds and would free, the backup downloaded through the browser is a
file `statekeeper restore` accepts, and a reader token is not offered the backup (asking
anyway shows the API's 403)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statekeeper.client import AsyncClient, Client
from statekeeper.client.auth.tokens import root_token
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

NS = "ops-ui"
CLI = [sys.executable, "-m", "statekeeper.cluster.cli"]


def _texts(browser, css: str) -> list[str]:
    from selenium.webdriver.common.by import By

    return [e.text for e in browser.find_elements(By.CSS_SELECTOR, css)]


def _attrs(browser, css: str, name: str) -> list[str]:
    from selenium.webdriver.common.by import By

    return [e.get_attribute(name) for e in browser.find_elements(By.CSS_SELECTOR, css)]


def _inspect(path: Path) -> dict:
    out = subprocess.run(
        [*CLI, "backup", "--inspect", str(path), "--json"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


async def _api_backup(lc: LocalCluster, path: Path) -> None:
    urls = lc.config.http_urls()
    async with AsyncClient(urls, token=root_token(lc.config.secret), tls=lc.tls) as c:
        with path.open("wb") as f:
            async for piece in c.backup():
                f.write(piece)


def _downloaded(directory: Path) -> Path | None:
    done = [p for p in directory.glob("*.skb") if not p.name.endswith(".crdownload")]
    return done[0] if done and not list(directory.glob("*.crdownload")) else None


def test_members_retention_and_backup_download(
    browser, console_cluster: LocalCluster, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    lc = console_cluster
    url = console_url(lc)
    root = root_token(lc.config.secret)
    with Client(lc.config.http_urls(), token=root, tls=lc.tls, ns=NS) as c:
        for n in range(1, 6):
            c.put(f"agent/a1/ckpt/{n:012d}", b"x" * 100)
        c.retention_set("agent/", within="ckpt", keep_last=2)
        for n in range(1, 5):
            c.put(f"runs/r1/ckpt/{n:012d}", b"y" * 50)
        sealed = c.archive_run("runs/", within="ckpt", keep_last=1, to=str(tmp_path / "arch"))
        st = c.status()
    login(browser, root, url)
    open_page(browser, f"{url}/operations?ns={NS}")
    members = sorted(st["members"], key=lambda m: m["id"])
    assert _attrs(browser, "tr.member", "data-member") == [m["id"] for m in members]
    assert _texts(browser, "tr.member td.url") == [m["url"] for m in members]
    leader = browser.find_element(By.CSS_SELECTOR, f'tr[data-member="{st["leader"]}"]')
    assert "leader" in leader.text
    policy = 'tr[data-policy="keys:agent/"]'
    assert "keys 5" in _texts(browser, f"{policy} td.holds")[0]
    assert "keys 3" in _texts(browser, f"{policy} td.frees")[0]
    (segment,) = sealed["segments"]
    assert _attrs(browser, "tr.segment", "data-segment") == [segment["segment"]]
    screenshot(browser, "operations")

    # The download, as the browser gets it.
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    browser.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
    )
    browser.find_element(By.ID, "backup-download").click()
    got = wait_for(browser, lambda _: _downloaded(downloads), timeout=60)
    meta = _inspect(got)  # verified whole: header, every record, the trailer's digest
    direct = tmp_path / "direct.skb"
    asyncio.run(_api_backup(lc, direct))
    api_meta = _inspect(direct)
    assert meta["cluster"] == api_meta["cluster"] and meta["version"] == api_meta["version"]
    assert meta["revision"] <= api_meta["revision"]
    assert abs(meta["size"] - api_meta["size"]) < max(64 * 1024, api_meta["size"] // 4)
    (tmp_path / "new").mkdir()
    restored = subprocess.run(
        [*CLI, "restore", str(got), "--config", str(tmp_path / "new" / "cluster.toml")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert restored.returncode == 0, restored.stderr


def test_a_reader_is_not_offered_the_backup(browser, console_cluster: LocalCluster) -> None:
    from selenium.webdriver.common.by import By

    lc = console_cluster
    url = console_url(lc)
    reader = mint_token(lc, ns=NS, role="reader")
    browser.delete_all_cookies()
    login(browser, reader, url)
    open_page(browser, f"{url}/operations?ns={NS}")
    assert not browser.find_elements(By.ID, "backup-download")
    assert browser.find_elements(By.ID, "backup-refused")
    started = time.monotonic()
    open_page(browser, f"{url}/operations/backup")  # asking anyway: the API's refusal, as a page
    assert time.monotonic() - started < 30
    assert "Not allowed" in browser.title or "Not allowed" in browser.page_source
