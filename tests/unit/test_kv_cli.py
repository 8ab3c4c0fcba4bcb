"""The etcdctl-like CLI's pieces that need no cluster: the txn input format, how values
print, the documented exit codes, and input refused before any request is sent
(tests/integration/test_kv_cli.py drives the commands against a cluster)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from statekeeper.client.results import KeyValue
from statekeeper.cluster import cli, kv_cli
from statekeeper.cluster.kv_cli import BadInput, parse_txn


def test_txn_blocks_compares_and_ops() -> None:
    compares, success, failure = parse_txn(
        'version("k") = "0"\nmod("k") < "9"\ncreate("k") != "1"\n'
        'value("a b") == \'x y\'\nexists("e")\nmissing("m")\n\n'
        'put k "hello world" --lease 3\nget p/ --prefix\n\ndel k --prefix\nget k\n'
    )
    assert compares == [
        {"key": "k", "target": "version", "op": "==", "value": 0},
        {"key": "k", "target": "mod_revision", "op": "<", "value": 9},
        {"key": "k", "target": "create_revision", "op": "!=", "value": 1},
        {"key": "a b", "target": "value", "op": "==", "value": b"x y"},
        {"key": "e", "target": "exists", "op": "==", "value": True},
        {"key": "m", "target": "exists", "op": "==", "value": False},
    ]
    assert success == [
        {"op": "put", "key": "k", "value": b"hello world", "lease": 3},
        {"op": "range", "prefix": "p/"},
    ]
    assert failure == [{"op": "delete", "key": "k", "prefix": True}, {"op": "get", "key": "k"}]


@pytest.mark.parametrize(
    ("text", "blocks"),
    [
        ("", ([], [], [])),
        ("\nput k v\n", ([], [{"op": "put", "key": "k", "value": b"v"}], [])),
        ("\n\nget k", ([], [], [{"op": "get", "key": "k"}])),
        (
            'exists("k")\n\n\nget k\n\n\n',
            (
                [{"key": "k", "target": "exists", "op": "==", "value": True}],
                [],
                [{"op": "get", "key": "k"}],
            ),
        ),
    ],
)
def test_each_empty_line_ends_a_block(text: str, blocks: tuple) -> None:
    assert parse_txn(text) == blocks


@pytest.mark.parametrize(
    "text",
    [
        'version("k") = "x"',  # not an integer
        'frob("k") = "1"',
        'version(k) = "1"',  # the key must be quoted
        'version("k")',
        'exists("k") = "1"',
        'value("k") = "a" "b"',
        "\nput k",
        "\nput k v w",
        "\nget k v",
        "\nincr k",
        "\ndel k --lease 3",
        "\nput k 'unclosed",
        "a\n\nb\n\nc\n\nd",
    ],
)
def test_bad_txn_input_is_refused(text: str) -> None:
    with pytest.raises(BadInput):
        parse_txn(text)


def test_values_print_as_text_or_marked_base64() -> None:
    assert kv_cli.shown("héllo\n".encode()) == "héllo\n"
    blob = b"\xff\x00\xfe"
    assert kv_cli.shown(blob) == "base64:" + base64.b64encode(blob).decode()
    kv = KeyValue("k", blob, 1, 5, 5)
    assert kv_cli.kv_json(kv) == {
        "key": "k",
        "version": 1,
        "create_revision": 5,
        "mod_revision": 5,
        "value_base64": "/wD+",
    }
    assert "value_base64" not in kv_cli.kv_json(kv, keys_only=True)
    assert kv_cli.kv_json(KeyValue("k", b"v", 1, 5, 5))["value"] == "v"


@pytest.mark.parametrize(
    "path",
    [
        ("get",),
        ("put",),
        ("del",),
        ("range",),
        ("txn",),
        ("compact",),
        ("member", "list"),
        ("endpoint", "status"),
        ("endpoint", "health"),
    ],
)
def test_every_command_documents_the_exit_codes(path: tuple[str, ...]) -> None:
    cmd = next(c for c in cli.COMMANDS if c.path == path)
    assert "exit codes: 0 ok; 1" in cmd.epilog and "3 not found (get found no key" in cmd.epilog


def test_input_refused_before_any_request(capsys: pytest.CaptureFixture[str]) -> None:
    dead = ["--endpoints", "http://127.0.0.1:9"]
    assert cli.main(["put", "k", "v", "--lease", "1", "--ttl", "5", *dead]) == 2
    assert cli.main(["range", "a", "--limit", "0", *dead]) == 2
    with pytest.raises(SystemExit) as e:
        cli.main(["get", "k", "-w", "yaml", *dead])
    assert e.value.code == 2
    assert "--lease or --ttl" in capsys.readouterr().err


def test_an_unreadable_ca_file_is_one_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("STATEKEEPER_CA_FILE", str(tmp_path / "missing-ca.pem"))
    for argv in (["get", "k"], ["endpoint", "health"], ["lease", "list"]):
        assert cli.main([*argv, "--endpoints", "https://127.0.0.1:9"]) == 1
        err = capsys.readouterr().err
        assert err.startswith("statekeeper: error: TLS setup failed:") and err.count("\n") == 1
