"""A request's unknown field is a 400 `unknown_field` naming it and the known ones, never
silently dropped (issue 30 item 4: `{"key": "k", "value": "x", "ttl": 30}` was a 200 and the
key had no TTL). Every op, nested objects (txn compares and branch ops, batch entries,
append events, an archive segment) and the watch body; committed entries (apply,
internal=True) still drop what they do not know. The HTTP side, both wires:
tests/integration/test_bad_input.py; the document: test_openapi_closed_objects below."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from statekeeper.node.config import Limits
from statekeeper.node.errors import OpError
from statekeeper.node.openapi import document as openapi
from statekeeper.node.ops.core import OPS, validate_op, validate_ops
from statekeeper.node.ops.watch import validate_watch

LIM = Limits()


def _refused(op, **kw) -> OpError:
    with pytest.raises(OpError) as ei:
        validate_op(op, LIM, **kw)
    assert ei.value.code == "unknown_field", ei.value
    assert ei.value.status == 400
    return ei.value


def test_the_python_keyword_ttl_is_refused_naming_ttl_ms():
    e = _refused({"op": "put", "key": "k", "value": b"x", "ttl": 30})
    assert "'ttl'" in e.message and "ttl_ms" in e.message
    assert e.extra["unknown"] == ["ttl"]
    assert e.extra["known"] == list(OPS["put"].field_names)


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_refuses_an_unknown_field(name):
    e = _refused({"op": name, "no_such_field": 1})
    assert "no_such_field" in e.message
    assert e.extra["known"] == list(OPS[name].field_names)
    assert all(f in e.message for f in OPS[name].field_names)


def test_a_txn_compare_and_a_branch_op_refuse_unknown_fields():
    compare = {"key": "k", "target": "version", "op": "==", "value": 0}
    e = _refused({"op": "txn", "compare": [{**compare, "vlaue": 1}]})
    assert e.message.startswith("compare[0] has unknown field 'vlaue' (did you mean 'value'?)")
    put = {"op": "put", "key": "k", "value": b"x"}
    e = _refused({"op": "txn", "compare": [], "failure": [put, {**put, "key": "j", "ttl": 5}]})
    assert e.message.startswith("failure[1] (put) has unknown field 'ttl'")


def test_a_batch_entry_refuses_an_unknown_field():
    ops = [{"op": "put", "key": "k", "value": b"x"}, {"op": "get", "key": "k", "consistency": 1}]
    with pytest.raises(OpError) as ei:
        validate_ops(ops, LIM)
    assert ei.value.code == "unknown_field"
    assert ei.value.message.startswith("ops[1]: ") and "'consistency'" in ei.value.message


def test_an_append_event_and_a_segment_refuse_unknown_fields():
    e = _refused({"op": "append", "stream": "s", "events": [{"data": b"x", "metadata": {}}]})
    assert "events[0]" in e.message and "'metadata'" in e.message and "meta" in e.message
    segment = {"id": "s1", "url": "file:///a/b", "sha256": "0" * 64, "bytes": 1, "size": 1}
    e = _refused({"op": "archive_seal", "segment": segment})
    assert "segment" in e.message and "'size'" in e.message


def test_the_watch_body_refuses_an_unknown_field():
    with pytest.raises(OpError) as ei:
        validate_watch({"key": "k", "start_revision": 1, "from_revision": 1}, LIM)
    assert ei.value.code == "unknown_field" and "'from_revision'" in ei.value.message


def test_the_node_set_parent_of_auth_token_create_is_not_a_request_field():
    e = _refused({"op": "auth_token_create", "grants": [], "parent": "0" * 16})
    assert e.extra["unknown"] == ["parent"]


def test_committed_entries_still_drop_unknown_fields():
    """apply validates with internal=True: an entry of another version is not refused."""
    put = {"op": "put", "key": "k", "value": b"x", "~v": 99}
    assert "~v" not in validate_op(put, LIM, internal=True)
    txn = {"op": "txn", "success": [{"op": "put", "key": "k", "value": b"x", "later": 1}]}
    assert "later" not in validate_op(txn, LIM, internal=True)["success"][0]


def _validator(name: str) -> Draft202012Validator:
    doc = openapi.document(LIM)
    uri = "urn:statekeeper:openapi"
    registry = Registry().with_resource(uri, DRAFT202012.create_resource(doc))
    return Draft202012Validator({"$ref": f"{uri}#/components/schemas/{name}"}, registry=registry)


def test_openapi_closed_objects():
    """The document says additionalProperties: false for each op's body and nested items."""
    schemas = openapi.document(LIM)["components"]["schemas"]
    for spec in OPS.values():
        for wire in ("", "Msgpack") if spec.wired else ("",):
            body = schemas[f"{spec.title}Request{wire}"]
            assert body["additionalProperties"] is False, spec.name
    assert schemas["Compare"]["additionalProperties"] is False
    put = _validator("PutRequest")
    assert put.is_valid({"key": "k", "value": "x", "ttl_ms": 30000})
    assert not put.is_valid({"key": "k", "value": "x", "ttl": 30})
    txn = _validator("TxnRequest")
    assert txn.is_valid({"success": [{"op": "put", "key": "k", "value": "x"}]})
    assert not txn.is_valid({"success": [{"op": "put", "key": "k", "value": "x", "ttl": 1}]})
    batch = _validator("BatchRequest")
    assert batch.is_valid({"ops": [{"op": "put", "key": "k", "value": "x"}]})
    assert batch.is_valid({"ops": [{"op": "get", "key": "k"}], "consistency": "serializable"})
    assert not batch.is_valid({"ops": [{"op": "get", "key": "k", "ttl": 1}]})
    assert not batch.is_valid({"ops": [], "opts": 1})
    append = _validator("AppendRequest")
    assert not append.is_valid({"stream": "s", "events": [{"data": "x", "metadata": {}}]})
    seal = _validator("ArchiveSealRequest")
    segment = {"id": "s1", "url": "file:///a/b", "sha256": "0" * 64, "bytes": 1}
    assert seal.is_valid({"segment": segment})
    assert not seal.is_valid({"segment": {**segment, "size": 1}})
    watch = _validator("WatchRequest")
    assert watch.is_valid({"key": "k", "start_revision": 1})
    assert not watch.is_valid({"key": "k", "start_revision": 1, "from_revision": 1})


def test_many_unknown_fields_are_counted_not_all_listed():
    e = _refused({"op": "get", "key": "k", **{f"x{i}": i for i in range(100)}})
    assert "'x7' and 92 more" in e.message and "'x8'" not in e.message
    assert len(e.extra["unknown"]) == 8


def test_the_document_lists_unknown_field_for_every_op():
    doc = openapi.document(LIM)
    for path, item in doc["paths"].items():
        post = item.get("post")
        if post is None or "requestBody" not in post or path.startswith("/v1/cluster"):
            continue
        assert "unknown_field" in post["responses"]["400"]["description"], path
