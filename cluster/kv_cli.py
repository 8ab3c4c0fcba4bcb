"""`statekeeper get | put | del | range | txn | compact | member list | endpoint status |
endpoint health`: an etcdctl-like command line for the data itself (issue 16, item 7).

Like cluster/lease_cli.py: cluster/cli.py calls :func:`register`; the endpoints, TLS and the
bearer token come from cluster/client_cli.py (--endpoints, $STATEKEEPER_ENDPOINTS or
cluster.toml; $STATEKEEPER_CA_FILE or the config's [tls]; --token-file, $STATEKEEPER_TOKEN,
$STATEKEEPER_TOKEN_FILE or the config's root token).

Output (-w/--write-out): ``simple`` (the default of the key commands) is etcdctl's: a key
line then a value line per key; ``table`` (the default of member and endpoint) is columns;
``json`` is one document. A value that is not UTF-8 is shown as base64 with a marker: the
value line (and table cell) reads ``base64:<base64>``, and the JSON kv carries
``value_base64`` instead of ``value``. (A UTF-8 value that itself starts with ``base64:``
prints as it is: use -w json to tell them apart.)

Exit codes a script can rely on (also in every command's --help):

  0  ok (a txn whose compares failed and ran its failure branch is still 0: read
     SUCCESS/FAILURE, or "succeeded" in -w json)
  1  failure: the cluster or transport (unreachable, timeout, compacted revision, a
     missing or refused token, TLS setup such as an unreadable CA file, an unhealthy
     endpoint for `endpoint health`)
  2  usage or invalid input (bad flags, a malformed txn, a key the server refuses, no
     endpoints configured)
  3  not found: `get` found no key (etcdctl prints nothing and exits 0; we exit 3 so a
     script can tell "missing" from "empty"; stdout stays empty in simple and table, -w json
     prints count 0), or a lease that does not exist; 3 means "not found" in every
     command (cluster/client_cli.py's exit_code)
"""

from __future__ import annotations

import argparse
import base64
import re
import shlex
import sys
from collections.abc import Callable, Iterable
from typing import Any

from statekeeper.cluster.client_cli import (
    EXIT_FAILURE,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    client_args,
    cluster_config,
    dump,
    endpoints,
    guarded,
    open_client,
    output_args,
    size,
    table,
    tls_context,
)

BASE64_MARK = "base64:"

EXIT_CODES = (
    "exit codes: 0 ok; 1 cluster/transport failure (unreachable, timeout, compacted\n"
    "revision, refused token, TLS setup, unhealthy endpoint); 2 usage or invalid input;\n"
    "3 not found (get found no key: etcdctl exits 0 there; we use 3 so scripts can tell).\n"
    "Values that are not UTF-8 print as base64:<b64> (simple, table) or value_base64 (json)."
)

TXN_FORMAT = """\
txn input (stdin), etcdctl's format: three blocks separated by one empty line:
compares, then the success ops, then the failure ops (each empty line ends a block,
so a txn without compares starts with an empty line).
  compares, one a line (values in double quotes; a missing key has version 0):
    version("KEY") = "3"     mod("KEY") > "10"     create("KEY") = "0"
    value("KEY") != "old"    exists("KEY")         missing("KEY")
    operators: = (or ==), !=, <, >
  ops, one a line (shell-quoted words):
    put KEY VALUE [--lease ID]     del KEY [--prefix]     get KEY [--prefix]
prints SUCCESS or FAILURE, then each op's result (put: OK, del: the count, get: key and
value lines); -w json prints {"succeeded", "revision", "results"}."""

GROUPS_HELP = {
    "member": ("list the cluster's members", "Node ids, URLs, raft addresses and roles."),
    "endpoint": ("status and health of each endpoint", "One row per node."),
}

_CMP = re.compile(r"^(\w+)\((\"(?:[^\"\\]|\\.)*\"|'[^']*')\)\s*(?:(==|=|!=|<|>)\s*(.+))?$")
_TARGETS = {"version": "version", "mod": "mod_revision", "create": "create_revision",
            "value": "value", "exists": "exists", "missing": "exists"}


class BadInput(Exception):
    """Input the user got wrong (exit 2)."""


def register(command: Callable[..., Any], arg: Callable[..., Any], groups: dict[str, Any]) -> None:
    """Add the key-value, member and endpoint commands to cluster/cli.py's registry."""
    groups.update(GROUPS_HELP)
    base = client_args(arg, output=None)
    kv = [*base, *output_args(arg, "simple")]
    nodes = [*base, *output_args(arg, "table")]
    key = arg("key", metavar="KEY")
    prefix = arg("--prefix", action="store_true", help="KEY is a prefix")

    def cmd(*path: str, help: str, examples: str, args: list[Any],
            extra: str = "") -> Callable[..., Any]:
        epilog = examples + ("\n\n" + extra if extra else "") + "\n\n" + EXIT_CODES
        return command(*path, help=help, epilog=epilog, args=args)

    cmd("get", help="read a key (or every key with a prefix)",
        examples="  statekeeper get config/model\n  statekeeper get chat/ --prefix --keys-only\n"
        "  statekeeper get config/model --rev 42 -w json",
        args=[*kv, key, prefix,
              arg("--rev", type=int, metavar="N", help="read as of store revision N"),
              arg("--keys-only", action="store_true", help="print keys, no values")])(cmd_get)
    cmd("put", help="write a key (VALUE '-' reads it from stdin)",
        examples="  statekeeper put config/model gpt-5\n  statekeeper put blob - < file.bin\n"
        "  statekeeper put session/42 active --ttl 30",
        args=[*kv, key, arg("value", metavar="VALUE", help="the value; '-' reads stdin"),
              arg("--lease", type=int, metavar="ID", help="attach the key to lease ID"),
              arg("--ttl", type=float, metavar="S",
                  help="give the key a lease of its own: deleted S seconds from now"),
              arg("--idempotency-key", metavar="K",
                  help="retrying with the same K applies the put once")])(cmd_put)
    cmd("del", help="delete a key (or every key with a prefix); prints the count",
        examples="  statekeeper del config/model\n  statekeeper del chat/ --prefix",
        args=[*kv, key, prefix])(cmd_del)
    cmd("range", help="keys in [START, END) in byte order (END omitted: to the end)",
        examples="  statekeeper range a z\n  statekeeper range chat/ --limit 10 -w table",
        args=[*kv, arg("start", metavar="START"), arg("end", nargs="?", metavar="END"),
              arg("--limit", type=int, metavar="N", help="at most N keys"),
              arg("--keys-only", action="store_true", help="print keys, no values")])(cmd_range)
    cmd("txn", help="atomic compare-and-ops transaction read from stdin (etcdctl format)",
        examples="  printf 'version(\"lock\") = \"0\"\\n\\nput lock me\\n\\nget lock\\n' \\\n"
        "    | statekeeper txn",
        extra=TXN_FORMAT, args=kv)(cmd_txn)
    cmd("compact", help="drop history older than revision REV",
        examples="  statekeeper compact 1000",
        args=[*kv, arg("revision", type=int, metavar="REV")])(cmd_compact)
    cmd("member", "list", help="node ids, URLs, raft addresses and roles",
        examples="  statekeeper member list\n  statekeeper member list -w json",
        extra="raft addresses come from --config (cluster.toml) when it names the node.",
        args=nodes)(cmd_member_list)
    cmd("endpoint", "status", help="one row per endpoint: role, term, leader, revision...",
        examples="  statekeeper endpoint status --endpoints https://10.0.0.1:7000",
        args=nodes)(cmd_endpoint_status)
    cmd("endpoint", "health", help="live/ready per endpoint; exit 1 if any is unhealthy",
        examples="  statekeeper endpoint health || echo unhealthy",
        args=nodes)(cmd_endpoint_health)


# -- formatting -------------------------------------------------------------------------------


def shown(value: bytes) -> str:
    """The value as text (UTF-8), else ``base64:<b64>``."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return BASE64_MARK + base64.b64encode(value).decode("ascii")


def kv_json(kv: Any, keys_only: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"key": kv.key, "version": kv.version,
                           "create_revision": kv.create_revision, "mod_revision": kv.mod_revision}
    if not keys_only:
        try:
            out["value"] = kv.value.decode("utf-8")
        except UnicodeDecodeError:
            out["value_base64"] = base64.b64encode(kv.value).decode("ascii")
    return out


def print_kvs(fmt: str, kvs: list[Any], revision: int, keys_only: bool = False,
              **extra: Any) -> None:
    if fmt == "json":
        dump({"revision": revision, "count": len(kvs),
              "kvs": [kv_json(kv, keys_only) for kv in kvs], **extra})
    elif fmt == "table":
        if kvs:
            cols = ("KEY", "VERSION", "MOD_REVISION") + (() if keys_only else ("VALUE",))
            print(table(cols, [(kv.key, kv.version, kv.mod_revision)
                               + (() if keys_only else (_one_line(shown(kv.value)),))
                               for kv in kvs]))
    else:
        for kv in kvs:
            print(kv.key)
            if not keys_only:
                print(shown(kv.value))


def _one_line(text: str, width: int = 60) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 3] + "..."


def _say(fmt: str, doc: dict[str, Any], simple: str, rows: Iterable[tuple[str, Any]]) -> None:
    if fmt == "json":
        dump(doc)
    elif fmt == "table":
        print(table(("FIELD", "VALUE"), list(rows)))
    else:
        print(simple)


# -- key-value commands -----------------------------------------------------------------------


@guarded
def cmd_get(args: argparse.Namespace) -> int:
    """Read KEY (--prefix: every key starting with KEY, in byte order). Prints nothing and
    exits 3 when no key matches."""
    with open_client(args) as c:
        if args.prefix:
            kvs = list(c.scan(args.key, revision=args.rev, keys_only=args.keys_only))
            revision = kvs[0].revision if kvs else c.status().get("revision", 0)
        else:
            kv = c.get(args.key, revision=args.rev, default=None)
            kvs = [kv] if kv is not None else []
            revision = kv.revision if kv is not None else 0
    print_kvs(args.write_out, kvs, revision, args.keys_only)
    if not kvs:
        print(f"statekeeper: key not found: {args.key}", file=sys.stderr)
        return EXIT_NOT_FOUND
    return EXIT_OK


@guarded
def cmd_put(args: argparse.Namespace) -> int:
    """Write VALUE to KEY; VALUE '-' reads the value (bytes, as they are) from stdin."""
    if args.lease is not None and args.ttl is not None:
        print("statekeeper: error: give --lease or --ttl, not both", file=sys.stderr)
        return EXIT_USAGE
    value: bytes | str = sys.stdin.buffer.read() if args.value == "-" else args.value
    with open_client(args) as c:
        r = c.put(args.key, value, lease=args.lease, ttl=args.ttl,
                  idempotency_key=args.idempotency_key)
    doc = {"revision": r.revision, "lease": r.lease, "replayed": r.replayed}
    _say(args.write_out, doc, "OK",
         [("revision", r.revision), ("lease", r.lease), ("replayed", r.replayed)])
    return EXIT_OK


@guarded
def cmd_del(args: argparse.Namespace) -> int:
    """Delete KEY (--prefix: every key starting with KEY) and print how many were deleted
    (0 is not an error)."""
    with open_client(args) as c:
        r = c.delete(args.key, prefix=args.prefix)
    _say(args.write_out, {"revision": r.revision, "deleted": r.deleted}, str(r.deleted),
         [("deleted", r.deleted), ("revision", r.revision)])
    return EXIT_OK


@guarded
def cmd_range(args: argparse.Namespace) -> int:
    """Keys from START (inclusive) to END (exclusive; omitted: the end of the namespace),
    in byte order, all read at one revision. --limit N stops after N keys (-w json then
    says "more")."""
    if args.limit is not None and args.limit < 1:
        print("statekeeper: error: --limit must be at least 1", file=sys.stderr)
        return EXIT_USAGE
    with open_client(args) as c:
        if args.limit is None:
            kvs = list(c.scan(start=args.start, end=args.end, keys_only=args.keys_only))
            revision = kvs[0].revision if kvs else c.status().get("revision", 0)
            more = False
        else:
            page = c.range(start=args.start, end=args.end, limit=args.limit,
                           keys_only=args.keys_only)
            kvs, revision, more = page.kvs, page.revision, page.more
    print_kvs(args.write_out, kvs, revision, args.keys_only, more=more)
    return EXIT_OK


def parse_txn(text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                  list[dict[str, Any]]]:
    """etcdctl's txn input (see TXN_FORMAT) -> (compares, success ops, failure ops)."""
    blocks: list[list[str]] = [[]]
    for raw in text.splitlines():
        line = raw.strip()
        if not line:  # each empty line ends a block (etcdctl's prompts)
            blocks.append([])
            continue
        blocks[-1].append(line)
    while len(blocks) > 3 and not blocks[-1]:
        blocks.pop()
    if len(blocks) > 3:
        raise BadInput("txn input has more than three blocks (compares, success, failure)")
    blocks += [[]] * (3 - len(blocks))
    return ([_compare(x) for x in blocks[0]], [_op(x) for x in blocks[1]],
            [_op(x) for x in blocks[2]])


def _compare(line: str) -> dict[str, Any]:
    from statekeeper.client.ops import compare

    m = _CMP.match(line)
    if not m or m.group(1) not in _TARGETS:
        raise BadInput(f"bad compare {line!r}: use e.g. version(\"k\") = \"0\"")
    name, key, op, rhs = m.group(1), shlex.split(m.group(2))[0], m.group(3), m.group(4)
    if name in ("exists", "missing"):
        if op is not None:
            raise BadInput(f"bad compare {line!r}: {name}(\"KEY\") takes no operator")
        return compare.exists(key) if name == "exists" else compare.missing(key)
    if op is None:
        raise BadInput(f"bad compare {line!r}: missing operator and value")
    words = shlex.split(rhs)
    if len(words) != 1:
        raise BadInput(f"bad compare {line!r}: the value must be one (quoted) word")
    value: Any = words[0]
    if name != "value":
        try:
            value = int(value)
        except ValueError:
            raise BadInput(f"bad compare {line!r}: {name} compares an integer") from None
    target = getattr(compare, _TARGETS[name])(key)
    return {"=": target.__eq__, "==": target.__eq__, "!=": target.__ne__,
            "<": target.__lt__, ">": target.__gt__}[op](value)


def _op(line: str) -> dict[str, Any]:
    from statekeeper.client.ops import ops

    p = argparse.ArgumentParser(prog="txn op", add_help=False, exit_on_error=False)
    p.add_argument("op", choices=("put", "del", "get"))
    p.add_argument("key")
    p.add_argument("value", nargs="?")
    p.add_argument("--prefix", action="store_true")
    p.add_argument("--lease", type=int)
    try:
        a, rest = p.parse_known_args(shlex.split(line))
    except (argparse.ArgumentError, ValueError) as e:
        raise BadInput(f"bad txn op {line!r}: {e}") from None
    if rest or (a.op == "put") != (a.value is not None) or (a.prefix and a.op == "put") \
            or (a.lease is not None and a.op != "put"):
        raise BadInput(f"bad txn op {line!r}: use put KEY VALUE [--lease ID], "
                       "del KEY [--prefix], get KEY [--prefix]")
    if a.op == "put":
        return ops.put(a.key, a.value, lease=a.lease)
    if a.op == "del":
        return ops.delete(a.key, prefix=a.prefix)
    return ops.range(a.key) if a.prefix else ops.get(a.key)


def _result_json(r: Any) -> Any:
    if r is None:
        return None
    if hasattr(r, "kvs"):
        return {"kvs": [kv_json(kv) for kv in r.kvs], "more": r.more}
    if hasattr(r, "mod_revision"):
        return kv_json(r)
    if hasattr(r, "deleted"):
        return {"deleted": r.deleted, "revision": r.revision}
    return {"revision": r.revision}


def _result_lines(r: Any) -> list[str]:
    if r is None:
        return []
    if hasattr(r, "kvs") or hasattr(r, "mod_revision"):
        return [line for kv in getattr(r, "kvs", [r]) for line in (kv.key, shown(kv.value))]
    if hasattr(r, "deleted"):
        return [str(r.deleted)]
    return ["OK"]


@guarded
def cmd_txn(args: argparse.Namespace) -> int:
    """Read compares, success ops and failure ops from stdin and run them as one atomic
    transaction (the format is below)."""
    try:
        compares, success, failure = parse_txn(sys.stdin.read())
    except BadInput as e:
        print(f"statekeeper: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    with open_client(args) as c:
        r = c.txn(compares, success, failure)
    verdict = "SUCCESS" if r.succeeded else "FAILURE"
    if args.write_out == "json":
        dump({"succeeded": r.succeeded, "revision": r.revision,
              "results": [_result_json(x) for x in r.results]})
    elif args.write_out == "table":
        print(table(("RESULT", "REVISION"), [(verdict, r.revision)]))
        for x in r.results:
            for line in _result_lines(x):
                print(f"  {_one_line(line)}")
    else:
        print(verdict)
        for x in r.results:
            for line in _result_lines(x):
                print(line)
    return EXIT_OK


@guarded
def cmd_compact(args: argparse.Namespace) -> int:
    """Drop the history older than REV: reads of older revisions then fail (exit 1)."""
    with open_client(args) as c:
        r = c.compact(args.revision)
    _say(args.write_out, {"revision": r.revision, "compact_revision": r.compact_revision},
         f"compacted revision {r.compact_revision}",
         [("compact_revision", r.compact_revision), ("revision", r.revision)])
    return EXIT_OK


# -- members and endpoints --------------------------------------------------------------------


def _statuses(args: argparse.Namespace) -> list[tuple[str, dict[str, Any] | None, str]]:
    """(endpoint, its /v1/status or None, the error) for every endpoint, one attempt each."""
    from statekeeper.client.errors import StatekeeperError

    out: list[tuple[str, dict[str, Any] | None, str]] = []
    with open_client(args) as c:
        for url in endpoints(args):
            try:
                out.append((url, c.status(url), ""))
            except StatekeeperError as e:
                out.append((url, None, e.message or str(e)))
    return out


def _print_rows(fmt: str, rows: list[dict[str, Any]], cols: list[str]) -> int:
    """Rows as JSON, a table (the columns' names upper-cased) or comma-separated lines;
    exit 1 when a row has an error."""
    if fmt == "json":
        dump(rows)
    else:
        cells = [[size(r[k]) if k.endswith("_size") and r.get(k) is not None else r.get(k)
                  for k in cols] for r in rows]
        if fmt == "table":
            print(table([c.upper().replace("_", " ") for c in cols], cells))
        else:
            for row in cells:
                print(", ".join("-" if c is None else str(c) for c in row))
    return EXIT_FAILURE if any(r.get("error") for r in rows) else EXIT_OK


def cmd_member_list(args: argparse.Namespace) -> int:
    """Every node that answers: its id, URL, raft address (from --config, when it names the
    node) and role. A node that does not answer is listed with its error; exit 1."""
    cfg = cluster_config(args)
    raft = {n.id: n.raft_address for n in cfg.nodes} if cfg is not None else {}
    rows = []
    for url, st, err in _statuses(args):
        node = st.get("node_id") if st else None
        rows.append({"id": node, "url": url, "raft_address": raft.get(node or ""),
                     "role": st.get("role") if st else None, "error": err or None})
    return _print_rows(args.write_out, rows, ["id", "url", "raft_address", "role", "error"])


_SIZE_FIELDS = (("db_size", ("db_size_bytes", "db_size")),
                ("journal_size", ("journal_size_bytes", "journal_bytes", "journal_size")))
# The storage quota (node/quota/alarm.py): this node's data dir on disk, and the quota in force.
_DISK_FIELDS = (("data_size", "usage_bytes"), ("quota_size", "quota_bytes"))


def cmd_endpoint_status(args: argparse.Namespace) -> int:
    """GET /v1/status of each endpoint (one attempt each): node id, role, term, leader,
    revision, raft applied index, compaction point, storage alarm ("nospace" while writes
    that add data get 507; docs/protocol.md#storage-quota), and sizes when the node reports
    them. Exit 1 if an endpoint does not answer."""
    from statekeeper.cluster.supervisor import status_alarm, status_field

    rows = []
    for url, st, err in _statuses(args):
        st = st or {}
        row = {"endpoint": url, "id": st.get("node_id"), "role": st.get("role"),
               "term": st.get("term"), "leader": st.get("leader"),
               "revision": st.get("revision"), "applied": st.get("applied_index"),
               "compact_revision": st.get("compact_revision"),
               "alarm": status_alarm(st) if st else None}
        for name, fields in _SIZE_FIELDS:
            n = status_field(st, *fields)
            if n is not None:
                row[name] = n
        storage = st.get("storage") or {}
        row.update((name, storage[key]) for name, key in _DISK_FIELDS if key in storage)
        rows.append({**row, "error": err or None})
    cols = [k for k in rows[0] if k != "error"] if rows else []
    optional = [n for n, _ in (*_SIZE_FIELDS, *_DISK_FIELDS)]
    cols += [n for n in optional if n not in cols and any(n in r for r in rows)]
    return _print_rows(args.write_out, rows, [*cols, "error"])


@guarded
def cmd_endpoint_health(args: argparse.Namespace) -> int:
    """GET /v1/health/live and /v1/health/ready of each endpoint. Exit 1 if any endpoint
    is not both live and ready (down, stuck, or without a leader)."""
    import time

    from statekeeper.cluster.supervisor import http_get_json

    tls = tls_context(args)
    rows = []
    for url in endpoints(args):
        t0 = time.monotonic()
        live, _ = http_get_json(url.rstrip("/") + "/v1/health/live", 2.0, tls)
        ready, doc = http_get_json(url.rstrip("/") + "/v1/health/ready", 2.0, tls)
        took = f"{(time.monotonic() - t0) * 1000:.0f} ms"
        error = None if live == 200 and ready == 200 else (
            "no answer" if live == 0 else str((doc or {}).get("error") or f"HTTP {ready}"))
        rows.append({"endpoint": url, "live": live == 200, "ready": ready == 200,
                     "healthy": error is None, "took": took, "error": error})
    if args.write_out != "simple":
        return _print_rows(args.write_out, rows, ["endpoint", "live", "ready", "took", "error"])
    for r in rows:
        state = "is healthy" if r["healthy"] else f"is unhealthy: {r['error']}"
        print(f"{r['endpoint']} {state} (took {r['took']})")
    return EXIT_OK if all(r["healthy"] for r in rows) else EXIT_FAILURE
