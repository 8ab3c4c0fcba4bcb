"""The `statekeeper` command: run one node, or drive a local three-node cluster.

Subcommands are registered with @command: adding one (say `cluster chaos`) is one
decorated function taking the parsed arguments and returning an exit code.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import os
import shlex
import sys
import time
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.cluster import supervise_cli
from statekeeper.cluster.client_cli import output_args, table
from statekeeper.cluster.config_file import (
    DEFAULT_BASE_PORT,
    DEFAULT_DATA_DIR,
    UserError,
    base_port_arg,
    create_config_if_missing,
    say,
)
from statekeeper.cluster.supervisor import (
    LocalCluster,
    SupervisorError,
    http_get_json,
    status_alarm,
    status_field,
    status_leader,
    status_role,
)
from statekeeper.node import config as node_config
from statekeeper.node.config import FSYNC_MODES, ClusterConfig, ConfigError
from statekeeper.node.pod_identity import node_id_from_hostname
from statekeeper.node.raft.data_dir import JOIN_HELP, NEW_CLUSTER_HELP, EmptyStart

PROG = "statekeeper"
DEFAULT_CONFIG = "cluster.toml"

EXIT_OK = 0
EXIT_FAILURE = 1  # the cluster misbehaved (timeout, node crashed)
EXIT_USAGE = 2  # the user asked for something impossible (bad id, missing config)
EXIT_SIGPIPE = 141  # the output's reader closed it (128 + SIGPIPE, as `seq 9999999 | head -1`)


# -- subcommand registry ---------------------------------------------------------------


def arg(*flags: str, **kwargs: Any) -> tuple[tuple[str, ...], dict[str, Any]]:
    """One argparse argument, declared next to the command that takes it."""
    return flags, kwargs


@dataclass
class Command:
    path: tuple[str, ...]  # e.g. ("cluster", "up")
    func: Callable[[argparse.Namespace], int]
    help: str
    description: str
    epilog: str
    args: list[tuple[tuple[str, ...], dict[str, Any]]] = field(default_factory=list)
    # Takes no options of its own: everything after the command's words, --help included,
    # reaches func as args.argv (for a command that hands over to another program's parser).
    passthrough: bool = False


COMMANDS: list[Command] = []

# Help for command groups (the first word of a command path).
GROUPS: dict[str, tuple[str, str]] = {
    "cluster": (
        "run and inspect a local cluster (one process per node)",
        "Start, stop and inspect the nodes listed in a cluster config file, as\n"
        "background processes on this machine. Each node's pid and log live in\n"
        "its data directory (<data dir>/<node id>/node.pid, node.log).",
    ),
}


def command(
    *path: str,
    help: str,
    epilog: str = "",
    args: Sequence[tuple[tuple[str, ...], dict[str, Any]]] = (),
    passthrough: bool = False,
) -> Callable[[Callable[[argparse.Namespace], int]], Callable[[argparse.Namespace], int]]:
    """Register `func` as `statekeeper <path...>`; its docstring is the long help.

    With passthrough=True it declares no args: it gets the rest of the command line,
    unparsed, as args.argv (its --help included)."""

    def register(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        COMMANDS.append(
            Command(
                path,
                func,
                help,
                inspect.cleandoc(func.__doc__ or help),
                epilog.strip("\n").rstrip(),
                list(args),
                passthrough,
            )
        )
        return func

    return register


CONFIG_ARG = arg(
    "--config",
    "-c",
    default=DEFAULT_CONFIG,
    metavar="PATH",
    help=f"cluster config file (default: {DEFAULT_CONFIG})",
)
NODE_ARG = arg("node_id", metavar="NODE_ID", help="a node id from the config, e.g. node-1")
TIMEOUT_ARG = arg(
    "--timeout",
    type=float,
    default=60.0,
    metavar="SECONDS",
    help="how long to wait for nodes to become ready (default: 60)",
)
STOP_TIMEOUT_ARG = arg(
    "--stop-timeout",
    type=float,
    default=None,
    metavar="SECONDS",
    help="how long a node may take to exit after SIGTERM before it gets SIGKILL "
    "(default: the config's [http] shutdown_grace_seconds + 10, so 20 with the default grace)",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse's usage dump hides the message; one line and the hint is clearer.
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n(see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="statekeeper: a Raft-replicated, RocksDB-backed key-value store "
        "for AI agents' state.",
        epilog="examples:\n"
        "  statekeeper cluster up            # create cluster.toml and start 3 local nodes\n"
        "  statekeeper cluster status        # who leads, terms, indexes\n"
        "  statekeeper cluster kill node-1   # crash a node\n"
        "  statekeeper cluster start node-1  # bring it back\n"
        "  statekeeper cluster down          # stop everything\n"
        "  statekeeper node --config cluster.toml --id node-0   # run one node in the foreground",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    top.required = True
    groups: dict[str, argparse._SubParsersAction] = {}
    for cmd in COMMANDS:
        if len(cmd.path) == 1:
            owner = top
        else:
            group = cmd.path[0]
            if group not in groups:
                short, long = GROUPS.get(group, (f"{group} commands", ""))
                gp = top.add_parser(
                    group,
                    help=short,
                    description=long or short,
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                )
                sub = gp.add_subparsers(
                    dest=f"{group}_command", metavar="COMMAND", parser_class=_Parser
                )
                sub.required = True
                groups[group] = sub
            owner = groups[group]
        p = owner.add_parser(
            cmd.path[-1],
            help=cmd.help,
            description=cmd.description,
            epilog=("examples:\n" + cmd.epilog) if cmd.epilog else None,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        for flags, kwargs in cmd.args:
            p.add_argument(*flags, **kwargs)
        if cmd.passthrough:  # listed in the help; main() hands it the rest of the line
            p.add_argument("argv", nargs=argparse.REMAINDER, metavar="ARG ...")
        p.set_defaults(func=cmd.func)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    err = node_config.secret_flag_error(argv) or auth_cli.token_flag_error(argv)
    if err and not _passthrough_args(argv):
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    args = _passthrough_args(argv) or build_parser().parse_args(argv)
    try:
        return int(args.func(args) or EXIT_OK)
    except (UserError, ConfigError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except SupervisorError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`... | head -1`): stop quietly, as a process killed by
        # SIGPIPE does (status 141). stdout points at /dev/null so that the interpreter's
        # flush at exit does not raise the same error again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_SIGPIPE


def _passthrough_args(argv: list[str]) -> argparse.Namespace | None:
    """The arguments of a passthrough command named by argv, without argparse: an
    option-like first word (`bench compare --quick`) would not reach a REMAINDER."""
    for cmd in COMMANDS:
        if cmd.passthrough and tuple(argv[: len(cmd.path)]) == cmd.path:
            return argparse.Namespace(func=cmd.func, argv=argv[len(cmd.path) :])
    return None


# -- helpers (kept free of side effects where possible, for the unit tests) -------------


def enable_auth(path: Path) -> ClusterConfig:
    """Set [auth] enabled = true in the config at `path` (written back as the file holds it:
    the secret stays where it is)."""
    on_disk = node_config.parse(tomllib.loads(path.read_text()), str(path.resolve().parent))
    auth = dataclasses.replace(on_disk.auth, enabled=True)
    node_config.write(dataclasses.replace(on_disk, auth=auth), path)
    return node_config.load(path)


def load_cluster(args: argparse.Namespace) -> LocalCluster:
    path = Path(args.config)
    if not path.exists():
        raise UserError(
            f"no cluster config at {path} (run 'statekeeper cluster up' to create one, "
            "or pass --config)"
        )
    return LocalCluster(node_config.load(path), path, progress=say)


def check_node_id(cfg: ClusterConfig, node_id: str) -> str:
    try:
        cfg.node(node_id)
    except ConfigError as e:
        raise UserError(str(e)) from None
    return node_id


def load_node(args: argparse.Namespace) -> tuple[LocalCluster, str]:
    """The cluster of --config and the NODE_ID argument, checked against its config."""
    lc = load_cluster(args)
    return lc, check_node_id(lc.config, args.node_id)


def signal_node(
    args: argparse.Namespace, send: Callable[[LocalCluster, str], object], done: str
) -> int:
    """``send(cluster, NODE_ID)`` (a SIGSTOP or SIGCONT), then say ``NODE_ID <done>``."""
    lc, nid = load_node(args)
    try:
        send(lc, nid)
    except SupervisorError as e:
        raise UserError(str(e)) from None
    say(f"{nid} {done}")
    return EXIT_OK


def collect_status(lc: LocalCluster) -> list[dict[str, Any]]:
    """One row per node: id, url, pid, running, and its /v1/status answer (or None)."""
    rows = []
    for nid in lc.node_ids:
        pid = lc.pid(nid)
        code, doc = http_get_json(lc.url(nid) + "/v1/status", timeout=2.0, tls=lc.tls)
        rows.append(
            {
                "id": nid,
                "url": lc.url(nid),
                "pid": pid,
                "running": pid is not None,
                "status": doc if code == 200 else None,
            }
        )
    return rows


STATUS_COLUMNS = (
    "NODE", "PID", "ROLE", "TERM", "LEADER", "COMMIT", "APPLIED", "REVISION", "ALARM", "URL",
)  # fmt: skip


def status_role_and_vote(st: dict[str, Any]) -> str | None:
    """The role, and "non-voter" for a node that started without raft state and has not
    caught up yet (node/raft/catchup.py): an operator replacing a member waits for it to
    go away (docs/protocol.md, "A lost disk")."""
    role = status_role(st)
    return f"{role}, non-voter" if st.get("voter") is False else role


def format_status_table(rows: Sequence[dict[str, Any]], fmt: str = "table") -> str:
    """Render collect_status() rows as an aligned text table (``fmt`` "simple": no header,
    tab-separated; client_cli.table)."""
    cells_of_rows = []
    for row in rows:
        st = row.get("status")
        pid = row.get("pid")
        if st is None:
            # Running but not answering (starting, paused, wedged) differs from down.
            role = "no answer" if row.get("running") else "down"
            cells = [role, None, None, None, None, None, None]
        else:
            cells = [
                status_role_and_vote(st),
                status_field(st, "term"),
                status_leader(st),
                status_field(st, "commit_index"),
                status_field(st, "applied_index"),
                status_field(st, "revision"),
                status_alarm(st),
            ]
        cells_of_rows.append([row["id"], pid, *cells, row.get("url", "")])
    return table(STATUS_COLUMNS, cells_of_rows, fmt)


def how_to_connect(cfg: ClusterConfig, config: str = DEFAULT_CONFIG) -> str:
    """What `cluster up` prints last. The commands it suggests name ``config`` (--config)
    when it is not the default: a plain `statekeeper cluster down` after `cluster up
    --config other.toml` looked for ./cluster.toml."""
    with_config = "" if config == DEFAULT_CONFIG else f" --config {shlex.quote(str(config))}"
    urls = cfg.http_urls()
    first = urls[0]
    url_list = ",".join(f'"{u}"' for u in urls)
    curl, client_args, token_hint = "curl -s", "", ""
    if cfg.tls.enabled:
        ca = Path(cfg.base_dir) / cfg.tls.ca_file
        curl, client_args = f"curl -s --cacert {ca}", f", ca={str(ca)!r}"
    if cfg.auth.enabled:
        curl += ' -H "Authorization: Bearer $STATEKEEPER_TOKEN"'
        client_args += ", token=os.environ['STATEKEEPER_TOKEN']"
        token_hint = (
            "Auth is on: mint a token first, e.g.\n"
            f"  export STATEKEEPER_TOKEN=$(statekeeper auth token create{with_config} "
            "--ns default --role writer --ttl 7d)\n"
        )
    console = f"The web console: {first}/ui (log in with a token)\n" if cfg.ui.enabled else ""
    return (
        token_hint + console + "Talk to the cluster:\n"
        f"  {curl} -X POST {first}/v1/kv/put -H 'Content-Type: application/json' \\\n"
        '       -d \'{"key":"greeting","value":"hello"}\'\n'
        f"  {curl} -X POST {first}/v1/kv/get -H 'Content-Type: application/json' \\\n"
        '       -d \'{"key":"greeting"}\'\n'
        "From Python:\n"
        f"  from statekeeper import Client; c = Client([{url_list}]{client_args})\n"
        f"Stop it with: statekeeper cluster down{with_config}"
    )


# -- commands ---------------------------------------------------------------------------


@command(
    "node",
    help="run one node in the foreground (what 'cluster up' starts for each node)",
    epilog="  statekeeper node --config cluster.toml --id node-0\n"
    "  statekeeper node --config /etc/statekeeper/cluster.toml --id-from-hostname   # a pod",
    args=[
        CONFIG_ARG,
        arg("--id", dest="node_id", metavar="NODE_ID", help="this node's id"),
        arg(
            "--id-from-hostname",
            action="store_true",
            help="take the id from the hostname: a [[nodes]] id equal to it, or the one "
            "ending in its StatefulSet ordinal (node-2, statekeeper-2 -> node-2)",
        ),
        arg(
            "--unsafe-reads",
            action="store_true",
            help="DEBUG ONLY (chaos mutation test): serve linearizable reads from local "
            "state without the raft barrier, i.e. break linearizability on purpose",
        ),
        arg("--new-cluster", action="store_true", help=NEW_CLUSTER_HELP),
        arg("--join", action="store_true", help=JOIN_HELP),
    ],
)
def cmd_node(args: argparse.Namespace) -> int:
    """Run one statekeeper node until SIGTERM or SIGINT.

    The node reads its ports, data directory and peers from the cluster config.
    """
    cfg = node_config.load(args.config)  # a bad file or id is reported before importing
    if (args.node_id is None) == (not args.id_from_hostname):
        raise UserError("give exactly one of --id NODE_ID and --id-from-hostname")
    if args.id_from_hostname:
        try:
            args.node_id = node_id_from_hostname(cfg)
        except ConfigError as e:
            raise UserError(str(e)) from None
    check_node_id(cfg, args.node_id)
    try:
        empty_start = EmptyStart.from_flags(args.new_cluster, args.join)
    except ValueError as e:
        raise UserError(str(e)) from None
    # Imported here: `statekeeper cluster ...` must work without the node's dependencies loaded.
    try:
        from statekeeper.node.main import run_node
    except ModuleNotFoundError as e:
        if e.name not in ("statekeeper.node.main", "statekeeper.node"):
            raise  # a missing dependency of the node: the traceback is the useful part
        raise UserError(
            "this installation has no node implementation (statekeeper.node.main)"
        ) from None
    return run_node(
        str(Path(args.config).resolve()),
        args.node_id,
        unsafe_reads=args.unsafe_reads,
        empty_start=empty_start,
    )


@command(
    "cluster",
    "up",
    help="create cluster.toml if missing, start the nodes, wait until ready",
    epilog="  statekeeper cluster up\n"
    "  statekeeper cluster up --base-port 8000 --data-dir /tmp/sk --fsync never\n"
    "  statekeeper cluster up --config other.toml --timeout 120\n"
    "  statekeeper cluster up --supervise   # then restart nodes that die or get stuck",
    args=[
        CONFIG_ARG,
        arg(
            "--data-dir",
            metavar="DIR",
            help=f"where node data goes, relative to the config file (default: {DEFAULT_DATA_DIR}); "
            "only used when the config is created",
        ),
        base_port_arg(arg),
        arg(
            "--fsync",
            choices=FSYNC_MODES,
            help="'always': acknowledged writes survive power loss; 'never': faster, survives "
            "process crashes only (default: always); only used when the config is created",
        ),
        arg(
            "--tls",
            action="store_true",
            help="HTTPS and raft TLS with a local CA (what 'statekeeper tls init' does) if the "
            "config does not turn [tls] on yet",
        ),
        arg(
            "--auth",
            action="store_true",
            help="set [auth] enabled = true: every request needs a bearer token "
            "('statekeeper auth token create'; the CLI uses the root token from the secret)",
        ),
        TIMEOUT_ARG,
        arg(
            "--supervise",
            action="store_true",
            help="then stay in the foreground and keep the nodes running (what "
            "'statekeeper cluster supervise' does; its options apply; Ctrl-C stops it)",
        ),
        *supervise_cli.POLICY_ARGS,
    ],
)
def cmd_up(args: argparse.Namespace) -> int:
    """Start a local cluster.

    If the config file does not exist, a 3-node config (node-0..node-2, HTTP ports
    7000-7002, raft ports 7100-7102, a fresh secret) is written first. The nodes are
    started in order, each answering /v1/health/live before the next starts; then
    the command waits until every node is ready. Nodes already running are left
    alone, so running it again is harmless.
    """
    cfg, created = create_config_if_missing(
        args.config,
        data_dir=args.data_dir or DEFAULT_DATA_DIR,
        base_port=args.base_port if args.base_port is not None else DEFAULT_BASE_PORT,
        fsync=args.fsync or "always",
    )
    if created:
        say(
            f"wrote {args.config} ({len(cfg.nodes)} nodes, data in {cfg.data_dir}/, fsync={cfg.fsync}; "
            f"cluster secret in {cfg.secret_source.removeprefix('file ')}, mode 0600)"
        )
    elif args.data_dir or args.base_port is not None or args.fsync:
        say(
            f"note: {args.config} exists; --data-dir/--base-port/--fsync apply only when creating it"
        )
    if args.tls and not cfg.tls.enabled:
        from statekeeper.cluster.tls_cli import enable_tls

        cfg, written = enable_tls(Path(args.config))
        say(f"[tls] on: CA and node certificates in {written[0].parent if written else 'tls/'}")
    if args.auth and not cfg.auth.enabled:
        cfg = enable_auth(Path(args.config))
        say("[auth] on: requests need a bearer token (statekeeper auth token create --help)")
    lc = LocalCluster(cfg, args.config, progress=say)
    lc.up(timeout=args.timeout)
    say("")
    say(format_status_table(collect_status(lc)))
    say("")
    say(how_to_connect(cfg, args.config))
    if args.supervise:
        return supervise_cli.supervise(lc, args)
    return EXIT_OK


@command(
    "cluster",
    "status",
    help="show each node's role, term, leader and indexes",
    epilog="  statekeeper cluster status\n  statekeeper cluster status --json | jq .\n"
    "  statekeeper cluster status --watch --interval 0.5",
    args=[
        CONFIG_ARG,
        *output_args(arg),
        arg("--watch", action="store_true", help="refresh until Ctrl-C (which exits 0)"),
        arg(
            "--interval",
            type=float,
            default=2.0,
            metavar="S",
            help="seconds between refreshes with --watch (default 2)",
        ),
    ],
)
def cmd_status(args: argparse.Namespace) -> int:
    """Ask every node for GET /v1/status. Nodes that do not answer are shown as down
    (or 'no answer' when their process is alive but silent, e.g. paused). --watch
    asks again every --interval seconds, redrawing the screen on a terminal (one table
    after the other otherwise), until Ctrl-C."""
    lc = load_cluster(args)
    if not args.watch:
        _print_status(lc, args.write_out)
        return EXIT_OK
    if args.interval <= 0:
        raise UserError("--interval must be > 0")
    clear = sys.stdout.isatty()
    try:
        while True:
            if clear:
                print("\x1b[H\x1b[2J", end="")
            if not args.json:  # JSON: one document per refresh, nothing else
                stamp = time.strftime("%H:%M:%S")
                print(f"{stamp}  every {args.interval:g} s (Ctrl-C to stop)")
            _print_status(lc, args.write_out)
            if not clear:
                print()
            sys.stdout.flush()
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return EXIT_OK


def _print_status(lc: LocalCluster, fmt: str) -> None:
    rows = collect_status(lc)
    if fmt == "json":
        print(json.dumps(rows, indent=2, sort_keys=True))
    else:
        print(format_status_table(rows, fmt))


@command(
    "cluster",
    "down",
    help="stop every node (SIGTERM, then SIGKILL after a timeout)",
    epilog="  statekeeper cluster down\n  statekeeper cluster down --stop-timeout 30",
    args=[CONFIG_ARG, STOP_TIMEOUT_ARG],
)
def cmd_down(args: argparse.Namespace) -> int:
    """Stop every node: SIGTERM, wait, and SIGKILL (with a warning) any node that has
    not exited after --stop-timeout seconds. Data is kept."""
    lc = load_cluster(args)
    outcome = lc.down(timeout=args.stop_timeout)
    if all(o == "not running" for o in outcome.values()):
        say("no node was running")
    return EXIT_OK


@command(
    "cluster",
    "start",
    help="start one stopped node and wait until it is ready",
    epilog="  statekeeper cluster start node-1",
    args=[CONFIG_ARG, NODE_ARG, TIMEOUT_ARG],
)
def cmd_start(args: argparse.Namespace) -> int:
    """Start one node (e.g. after 'cluster kill') and wait until it is live and ready."""
    lc, nid = load_node(args)
    if lc.is_running(nid):
        say(f"{nid} is already running (pid {lc.pid(nid)})")
        return EXIT_OK
    lc.start_and_wait(nid, timeout=args.timeout)
    return EXIT_OK


@command(
    "cluster",
    "restart",
    help="stop one node gracefully, start it again, wait until ready",
    epilog="  statekeeper cluster restart node-1\n"
    "  for n in node-0 node-1 node-2; do statekeeper cluster restart $n; done  # rolling",
    args=[CONFIG_ARG, NODE_ARG, STOP_TIMEOUT_ARG, TIMEOUT_ARG],
)
def cmd_restart(args: argparse.Namespace) -> int:
    """Restart one node: SIGTERM, wait for it to exit, start it, wait until ready.

    On SIGTERM the node finishes its requests in progress, answers new ones 503 (clients
    retry on another node) and, if it leads, hands leadership over first (docs/protocol.md,
    "Graceful shutdown"), so restarting every node in turn fails no client call."""
    lc, nid = load_node(args)
    lc.restart_node(nid, stop_timeout=args.stop_timeout, ready_timeout=args.timeout)
    return EXIT_OK


@command(
    "cluster",
    "kill",
    help="SIGKILL one node (simulate a crash)",
    epilog="  statekeeper cluster kill node-1\n  statekeeper cluster start node-1",
    args=[CONFIG_ARG, NODE_ARG],
)
def cmd_kill(args: argparse.Namespace) -> int:
    """Kill one node with SIGKILL, as a crash would. Its data stays; bring it back
    with 'statekeeper cluster start NODE_ID'."""
    lc, nid = load_node(args)
    if not lc.kill_node(nid):
        say(f"{nid} was not running")
    return EXIT_OK


@command(
    "cluster",
    "pause",
    help="SIGSTOP one node (it freezes: alive but silent)",
    epilog="  statekeeper cluster pause node-0\n  statekeeper cluster resume node-0",
    args=[CONFIG_ARG, NODE_ARG],
)
def cmd_pause(args: argparse.Namespace) -> int:
    """Freeze one node with SIGSTOP, like a long GC pause or a hung VM. The others
    elect a new leader if it was leading. Undo with 'statekeeper cluster resume'."""
    return signal_node(args, LocalCluster.pause_node, "paused")


@command(
    "cluster",
    "resume",
    help="SIGCONT a paused node",
    epilog="  statekeeper cluster resume node-0",
    args=[CONFIG_ARG, NODE_ARG],
)
def cmd_resume(args: argparse.Namespace) -> int:
    """Let a node paused with 'statekeeper cluster pause' run again."""
    return signal_node(args, LocalCluster.resume_node, "resumed")


@command(
    "bench",
    "compare",
    help="benchmark statekeeper and etcd side by side (python -m statekeeper.benchmarks.compare)",
    passthrough=True,
)
def cmd_bench_compare(args: argparse.Namespace) -> int:
    """`python -m statekeeper.benchmarks.compare` with the same arguments: see 'statekeeper bench
    compare --help'. The benchmarks are imported only when this command runs."""
    from statekeeper.benchmarks.compare import main as compare_main

    return compare_main(args.argv, prog=f"{PROG} bench compare")


@command(
    "chaos",
    help="fault injection + linearizability checking: chaos run | list | suite | soak",
    epilog="  statekeeper chaos list\n"
    "  statekeeper chaos run --fault kill-leader --duration 30 --clients 16 --seed 7\n"
    "  statekeeper chaos suite --smoke\n"
    "  statekeeper chaos soak --minutes 30\n"
    "  statekeeper chaos run --help",
    args=[
        arg(
            "chaos_args",
            nargs=argparse.REMAINDER,
            metavar="ACTION ...",
            help="run, list, suite or soak, and their options",
        )
    ],
)
def cmd_chaos(args: argparse.Namespace) -> int:
    """Run fault-injection scenarios against a fresh local cluster and check the history
    of what the clients saw (linearizability, lost and duplicated writes, RTO); each run
    writes a Markdown + PNG report. Actions: run, list, suite, soak (see 'statekeeper chaos
    ACTION --help')."""
    from statekeeper.chaos.cli import main as chaos_main

    return chaos_main(args.chaos_args or ["--help"], prog=f"{PROG} chaos")


@command(
    "sim",
    help="deterministic simulation: sim run --seed S | sim explore --minutes M",
    epilog="  statekeeper sim run --seed 7\n"
    '  statekeeper sim run --seed 7 --steps 1500 --fault "@250 kill n1 hold=2.00s"\n'
    "  statekeeper sim explore --minutes 10\n"
    "  statekeeper sim run --help",
    args=[
        arg(
            "sim_args",
            nargs=argparse.REMAINDER,
            metavar="ACTION ...",
            help="run or explore, and their options",
        )
    ],
)
def cmd_sim(args: argparse.Namespace) -> int:
    """Run whole clusters in this process on virtual time, a simulated network and
    disks, from a seed: `run` replays one seed exactly, `explore` searches seeds for a
    failure and shrinks it (docs/simulation.md)."""
    from statekeeper.chaos.sim.cli import main as sim_main

    return sim_main(args.sim_args or ["--help"], prog=f"{PROG} sim")


from statekeeper.cluster import (  # noqa: E402 (their groups register here)
    agent_cli,
    archive_cli,
    auth_cli,
    backup_cli,
    console_cli,
    crdt_cli,
    gc_cli,
    idempotency_cli,
    kv_cli,
    langgraph_cli,
    lease_cli,
    lock_cli,
    members_cli,
    stream_cli,
    tls_cli,
    watch_cli,
)

agent_cli.register(command, arg, GROUPS)
stream_cli.register(command, arg, GROUPS)
lease_cli.register(command, arg, GROUPS)
lock_cli.register(command, arg, GROUPS)
watch_cli.register(command, arg, GROUPS)
crdt_cli.register(command, arg, GROUPS)
gc_cli.register(command, arg, GROUPS)
archive_cli.register(command, arg, GROUPS)
tls_cli.register(command, arg, GROUPS)
auth_cli.register(command, arg, GROUPS)
kv_cli.register(command, arg, GROUPS)
langgraph_cli.register(command, arg, GROUPS)
members_cli.register(command, arg, GROUPS)
supervise_cli.register(command, CONFIG_ARG)
backup_cli.register(command, arg, GROUPS)
idempotency_cli.register(command, arg, GROUPS)
console_cli.register(command, arg, GROUPS)


if __name__ == "__main__":
    sys.exit(main())
