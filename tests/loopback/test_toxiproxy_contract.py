"""Contract tests: the ``toxiproxy-python`` client (and raw HTTP) against our server.

Status codes, JSON shapes and error messages are Toxiproxy 2.x's, so the
chaos suite can point the same client at a real Toxiproxy via TOXIPROXY_URL.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
import requests
from toxiproxy import Toxiproxy
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from statekeeper.chaos.toxiproxy import ToxiproxyServer, split_url, start_server, toxiproxy_endpoint

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(addr: str) -> bool:
    host, port = addr.rsplit(":", 1)
    with socket.socket() as s:
        return s.connect_ex((host, int(port))) == 0


@pytest.fixture
def api(server: ToxiproxyServer) -> str:
    return server.url


UPSTREAM = "127.0.0.1:9"  # never dialled: these tests open no proxied connection


# -- server basics ---------------------------------------------------------


def test_version_and_running(tp: Toxiproxy) -> None:
    assert tp.running() is True
    body = json.loads(tp.version())
    assert body["version"].startswith("2.")


def test_browsers_are_refused(api: str) -> None:
    r = requests.get(f"{api}/proxies", headers={"User-Agent": "Mozilla/5.0"})
    assert r.status_code == 403


def test_unknown_route_is_404(api: str) -> None:
    assert requests.get(f"{api}/nope").status_code == 404


# -- proxies ---------------------------------------------------------------


def test_create_picks_port_and_reports_it(tp: Toxiproxy) -> None:
    proxy = tp.create(upstream=UPSTREAM, name="p1")  # client sends listen 127.0.0.1:0
    host, port = proxy.listen.rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    assert proxy.enabled is True and proxy.upstream == UPSTREAM
    assert _listening(proxy.listen)


def test_create_status_and_shape(tp: Toxiproxy, api: str) -> None:
    listen = f"127.0.0.1:{_free_port()}"
    r = requests.post(f"{api}/proxies", json={"name": "p2", "listen": listen, "upstream": UPSTREAM})
    assert r.status_code == 201
    assert r.json() == {
        "name": "p2",
        "listen": listen,
        "upstream": UPSTREAM,
        "enabled": True,
        "toxics": [],
    }
    assert requests.get(f"{api}/proxies/p2").json() == r.json()


def test_list_and_get(tp: Toxiproxy, api: str) -> None:
    tp.create(upstream=UPSTREAM, name="a")
    tp.create(upstream=UPSTREAM, name="b")
    proxies = tp.proxies()
    assert set(proxies) == {"a", "b"}
    assert tp.get_proxy("a").name == "a"
    assert tp.get_proxy("missing") is None
    raw = requests.get(f"{api}/proxies").json()
    assert set(raw) == {"a", "b"} and raw["a"]["toxics"] == []


def test_create_disabled_does_not_listen(tp: Toxiproxy, api: str) -> None:
    listen = f"127.0.0.1:{_free_port()}"
    proxy = tp.create(upstream=UPSTREAM, name="off", listen=listen, enabled=False)
    assert proxy.enabled is False
    assert not _listening(listen)
    proxy.enable()
    assert requests.get(f"{api}/proxies/off").json()["enabled"] is True
    assert _listening(listen)


def test_duplicate_name_is_409(tp: Toxiproxy, api: str) -> None:
    tp.create(upstream=UPSTREAM, name="dup")
    with pytest.raises(ProxyExists):  # the client checks before posting
        tp.create(upstream=UPSTREAM, name="dup")
    r = requests.post(f"{api}/proxies", json={"name": "dup", "upstream": UPSTREAM})
    assert r.status_code == 409
    assert r.json() == {"error": "proxy already exists", "status": 409}


def test_unknown_proxy_is_404(tp: Toxiproxy, api: str) -> None:
    for method, path in [
        ("GET", "/proxies/ghost"),
        ("POST", "/proxies/ghost"),
        ("DELETE", "/proxies/ghost"),
        ("GET", "/proxies/ghost/toxics"),
        ("POST", "/proxies/ghost/toxics"),
        ("GET", "/proxies/ghost/toxics/t"),
        ("DELETE", "/proxies/ghost/toxics/t"),
    ]:
        r = requests.request(method, api + path, json={"type": "latency", "enabled": True})
        assert r.status_code == 404, (method, path)
        assert r.json() == {"error": "proxy not found", "status": 404}


def test_bad_proxy_bodies_are_400(tp: Toxiproxy, api: str) -> None:
    cases = [
        ({"upstream": UPSTREAM}, "missing required field: name"),
        ({"name": "x"}, "missing required field: upstream"),
        ({"name": "x", "upstream": UPSTREAM, "enabled": "yes"}, None),
        ({"name": "x", "upstream": "no-port"}, None),
    ]
    for body, message in cases:
        r = requests.post(f"{api}/proxies", json=body)
        assert r.status_code == 400, body
        assert r.json()["status"] == 400
        if message:
            assert r.json()["error"] == message
    r = requests.post(f"{api}/proxies", data=b"{not json")
    assert r.status_code == 400 and r.json()["error"].startswith("bad request body")
    # toxiproxy-python maps every 400 to InvalidToxic, even for proxies.
    with pytest.raises(InvalidToxic):
        tp.create(upstream="", name="x")


def test_listen_in_use_fails(tp: Toxiproxy, api: str) -> None:
    proxy = tp.create(upstream=UPSTREAM, name="first")
    r = requests.post(
        f"{api}/proxies", json={"name": "second", "listen": proxy.listen, "upstream": UPSTREAM}
    )
    assert r.status_code == 500
    assert "second" not in tp.proxies()


def test_disable_enable_keeps_port(tp: Toxiproxy, api: str) -> None:
    proxy = tp.create(upstream=UPSTREAM, name="flip")
    proxy.disable()
    assert proxy.enabled is False
    assert requests.get(f"{api}/proxies/flip").json()["enabled"] is False
    assert not _listening(proxy.listen)
    proxy.enable()
    assert _listening(proxy.listen)  # same port as before
    with proxy.down():
        assert not _listening(proxy.listen)
    assert _listening(proxy.listen)


def test_update_fields(tp: Toxiproxy, api: str) -> None:
    proxy = tp.create(upstream=UPSTREAM, name="upd")
    new_listen = f"127.0.0.1:{_free_port()}"
    r = requests.post(f"{api}/proxies/upd", json={"listen": new_listen, "upstream": "127.0.0.1:10"})
    assert r.status_code == 200
    assert r.json()["listen"] == new_listen and r.json()["upstream"] == "127.0.0.1:10"
    assert r.json()["enabled"] is True
    assert _listening(new_listen) and not _listening(proxy.listen)
    r = requests.patch(f"{api}/proxies/upd", json={"enabled": False})
    assert r.status_code == 200 and r.json()["enabled"] is False
    r = requests.post(f"{api}/proxies/upd", json={"enabled": "no"})
    assert r.status_code == 400


def test_delete(tp: Toxiproxy, api: str) -> None:
    proxy = tp.create(upstream=UPSTREAM, name="gone")
    assert proxy.destroy() is True
    assert not _listening(proxy.listen)
    assert tp.proxies() == {}
    with pytest.raises(NotFound):
        proxy.destroy()
    assert requests.delete(f"{api}/proxies/gone").status_code == 404


# -- toxics ----------------------------------------------------------------


def test_toxics_add_list_remove(tp: Toxiproxy, api: str) -> None:
    proxy = tp.create(upstream=UPSTREAM, name="tx")
    assert proxy.toxics() == {}
    proxy.add_toxic(type="latency", attributes={"latency": 100, "jitter": 10})
    proxy.add_toxic(type="bandwidth", stream="upstream", name="bw", attributes={"rate": 5})
    toxics = proxy.toxics()
    assert set(toxics) == {"latency_downstream", "bw"}
    lat = proxy.get_toxic("latency_downstream")
    assert (lat.type, lat.stream, lat.toxicity) == ("latency", "downstream", 1.0)
    assert lat.attributes == {"latency": 100, "jitter": 10}
    assert toxics["bw"].stream == "upstream"
    # Upstream toxics are listed first, as Toxiproxy does.
    listed = requests.get(f"{api}/proxies/tx/toxics").json()
    assert [t["name"] for t in listed] == ["bw", "latency_downstream"]
    assert requests.get(f"{api}/proxies/tx").json()["toxics"] == listed
    assert proxy.destroy_toxic("bw") is True
    assert set(proxy.toxics()) == {"latency_downstream"}
    with pytest.raises(NotFound):
        proxy.destroy_toxic("bw")


def test_toxic_defaults_and_shape(tp: Toxiproxy, api: str) -> None:
    tp.create(upstream=UPSTREAM, name="shape")
    expected_attrs = {
        "latency": {"latency": 0, "jitter": 0},
        "bandwidth": {"rate": 0},
        "slow_close": {"delay": 0},
        "timeout": {"timeout": 0},
        "reset_peer": {"timeout": 0},
        "slicer": {"average_size": 0, "size_variation": 0, "delay": 0},
        "limit_data": {"bytes": 0},
    }
    for toxic_type, attrs in expected_attrs.items():
        r = requests.post(f"{api}/proxies/shape/toxics", json={"type": toxic_type})
        assert r.status_code == 200, toxic_type
        assert r.json() == {
            "name": f"{toxic_type}_downstream",
            "type": toxic_type,
            "stream": "downstream",
            "toxicity": 1.0,
            "attributes": attrs,
        }
    r = requests.get(f"{api}/proxies/shape/toxics/slicer_downstream")
    assert r.status_code == 200 and r.json()["type"] == "slicer"


def test_toxic_errors(tp: Toxiproxy, api: str) -> None:
    proxy = tp.create(upstream=UPSTREAM, name="err")
    url = f"{api}/proxies/err/toxics"
    bad = [
        ({"type": "nope"}, 400, "invalid toxic type"),
        ({}, 400, "invalid toxic type"),
        (
            {"type": "latency", "stream": "sideways"},
            400,
            "stream was invalid, can be either upstream or downstream",
        ),
        ({"type": "latency", "toxicity": 1.5}, 400, None),
        ({"type": "latency", "attributes": {"latency": -1}}, 400, None),
        ({"type": "latency", "attributes": {"latency": "slow"}}, 400, None),
    ]
    for body, status, message in bad:
        r = requests.post(url, json=body)
        assert r.status_code == status, body
        if message:
            assert r.json() == {"error": message, "status": status}
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="nope")
    proxy.add_toxic(type="timeout", name="t")
    r = requests.post(url, json={"type": "latency", "name": "t", "stream": "upstream"})
    assert r.status_code == 409
    assert r.json() == {"error": "toxic already exists", "status": 409}
    with pytest.raises(ProxyExists):  # the client maps every 409 to ProxyExists
        proxy.add_toxic(type="timeout", name="t")
    r = requests.get(f"{url}/missing")
    assert r.status_code == 404 and r.json() == {"error": "toxic not found", "status": 404}
    assert requests.post(f"{url}/missing", json={}).status_code == 404


def test_toxic_update(tp: Toxiproxy, api: str) -> None:
    proxy = tp.create(upstream=UPSTREAM, name="tu")
    proxy.add_toxic(type="slicer", name="s", attributes={"average_size": 10, "delay": 5})
    r = requests.post(f"{api}/proxies/tu/toxics/s", json={"attributes": {"delay": 50}})
    assert r.status_code == 200
    assert r.json()["attributes"] == {"average_size": 10, "size_variation": 0, "delay": 50}
    r = requests.patch(f"{api}/proxies/tu/toxics/s", json={"toxicity": 0.25, "type": "latency"})
    assert r.status_code == 200
    assert r.json()["toxicity"] == 0.25 and r.json()["type"] == "slicer"
    r = requests.post(f"{api}/proxies/tu/toxics/s", json={"attributes": {"delay": -5}})
    assert r.status_code == 400
    assert proxy.get_toxic("s").attributes["delay"] == 50  # unchanged by the bad update


def test_reset_enables_proxies_and_removes_toxics(tp: Toxiproxy, api: str) -> None:
    one = tp.create(upstream=UPSTREAM, name="r1")
    two = tp.create(upstream=UPSTREAM, name="r2")
    one.add_toxic(type="latency", attributes={"latency": 1000})
    two.add_toxic(type="timeout", stream="upstream")
    one.disable()
    assert tp.reset() is True
    assert requests.post(f"{api}/reset").status_code == 204
    for name, proxy in tp.proxies().items():
        assert proxy.enabled is True, name
        assert proxy.toxics() == {}, name
    assert _listening(one.listen)


def test_populate(tp: Toxiproxy, api: str) -> None:
    listen_a = f"127.0.0.1:{_free_port()}"
    body = [
        {"name": "pa", "listen": listen_a, "upstream": UPSTREAM},
        {"name": "pb", "listen": "127.0.0.1:0", "upstream": UPSTREAM, "enabled": False},
    ]
    r = requests.post(f"{api}/populate", json=body)
    assert r.status_code == 201
    got = {p["name"]: p for p in r.json()["proxies"]}
    assert got["pa"]["listen"] == listen_a and got["pa"]["enabled"] is True
    assert got["pb"]["enabled"] is False
    # Same listen/upstream: kept as is (toxics survive); changed upstream: replaced.
    tp.get_proxy("pa").add_toxic(type="latency")
    r = requests.post(f"{api}/populate", json=body[:1])
    assert r.status_code == 201 and r.json()["proxies"][0]["toxics"] != []
    body[0]["upstream"] = "127.0.0.1:10"
    r = requests.post(f"{api}/populate", json=body[:1])
    assert r.json()["proxies"][0]["upstream"] == "127.0.0.1:10"
    assert r.json()["proxies"][0]["toxics"] == []
    # Validation happens before anything changes.
    r = requests.post(f"{api}/populate", json=[{"name": "pc", "upstream": UPSTREAM}, {"name": "x"}])
    assert r.status_code == 400
    assert r.json()["error"] == "missing required field: upstream at proxy 2"
    assert "pc" not in tp.proxies()
    assert requests.post(f"{api}/populate", json={"name": "pc"}).status_code == 400


def test_client_side_populate(tp: Toxiproxy) -> None:
    listen = f"127.0.0.1:{_free_port()}"
    created = tp.populate([{"name": "cp", "listen": listen, "upstream": UPSTREAM}])
    assert [p.name for p in created] == ["cp"]
    assert tp.populate([{"name": "cp", "listen": listen, "upstream": UPSTREAM}]) == []


# -- runners ---------------------------------------------------------------


async def test_start_server_in_running_loop() -> None:
    handle = await start_server("127.0.0.1", 0)
    try:
        assert handle.port > 0 and handle.url == f"http://127.0.0.1:{handle.port}"
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{handle.url}/version") as r:
                assert r.status == 200 and "version" in await r.json()
            async with session.post(
                f"{handle.url}/proxies", json={"name": "x", "upstream": UPSTREAM}
            ) as r:
                assert r.status == 201
                listen = (await r.json())["listen"]
    finally:
        await handle.close()
    assert not _listening(listen)  # closing the server stops its proxies


def test_thread_server_stops_cleanly() -> None:
    srv = ToxiproxyServer().start()
    url = srv.url
    assert requests.get(f"{url}/version").status_code == 200
    srv.stop()
    srv.stop()  # idempotent
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{url}/version", timeout=2)


def test_endpoint_prefers_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOXIPROXY_URL", "http://10.1.2.3:8475/")
    with toxiproxy_endpoint() as url:
        assert url == "http://10.1.2.3:8475"
    assert split_url(url) == ("10.1.2.3", 8475)
    monkeypatch.delenv("TOXIPROXY_URL")
    with toxiproxy_endpoint() as url:
        assert requests.get(f"{url}/version").status_code == 200


def test_module_runner() -> None:
    port = _free_port()
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "statekeeper.chaos.toxiproxy",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.strip() == f"toxiproxy API on http://127.0.0.1:{port}", line
            assert requests.get(f"http://127.0.0.1:{port}/version").status_code == 200
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=10) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
