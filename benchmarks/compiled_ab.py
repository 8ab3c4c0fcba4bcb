"""Compiled hot paths, pure vs compiled, in one process: `python -m statekeeper.benchmarks.compiled_ab`
(needs `pip install cython`, or mypy for `--compiler mypyc`, and gcc with Python's headers).

Copies this tree's node/ and benchmarks/ twice into a temp dir, compiles MODULES in place
in the second copy (Cython 3 in pure-Python mode, or mypyc), and loads both copies into
one interpreter as two sets of modules (sys.modules is swapped to a set before each of its
blocks, so its lazy imports resolve within the set). Then, per shape of
benchmarks/apply_cost.py's SHAPES, blocks of entries are applied alternately (order
flipped each block) to a StateMachine of each set: thread CPU (time.thread_time: apply's
RocksDB writes run on this thread; the background flushes do not) per put. Blocks
alternating within one process share the machine's drift, so the paired ratio per block
(compiled / pure) is what to read. A second table does the same for the leader-side codecs
(an entry's encode and decode, a send pass of append_entries to two followers and one
reply through node/raft/peer_encoding.py, without the AES-GCM seal).

Issue 28 item 4: the result and the decision are in benchmarks/RESULTS.md, "Compiled hot
paths (issue 28 item 4)".
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
# What the profile names (apply and its store modules, the entry and peer codecs, the
# proposer). --compiler mypyc takes the type-clean subset MYPYC_MODULES by default.
MODULES = (
    "statekeeper.node.store.apply",
    "statekeeper.node.store.kv",
    "statekeeper.node.store.keys",
    "statekeeper.node.store.machine",
    "statekeeper.node.store.backend",
    "statekeeper.node.store.lease_state",
    "statekeeper.node.store.compaction",
    "statekeeper.node.store.txn",
    "statekeeper.node.store.reads",
    "statekeeper.node.store.changes",
    "statekeeper.node.entry",
    "statekeeper.node.api.codec",
    "statekeeper.node.raft.peer_encoding",
    "statekeeper.node.proposer",
)
MYPYC_MODULES = (
    "statekeeper.node.store.apply",
    "statekeeper.node.store.kv",
    "statekeeper.node.store.keys",
    "statekeeper.node.entry",
)
MYPYC_FLAGS = ("--ignore-missing-imports", "--follow-imports=silent")
# mypy's one complaint in MYPYC_MODULES (EntryTx.point returns a value typed object):
# mypyc compiles them unchanged with it off. The other store modules need more codes off
# (--disable-error-code), and then mypyc's runtime type checks can fail where mypy
# complained (txn.py assigns 0 to a variable typed bool): a measurement, not a build.
MYPYC_DISABLED = ("return-value",)

CYTHON_BUILD = """
import sys
from Cython.Build import cythonize
from setuptools import setup
files = [m.replace(".", "/") + ".py" for m in sys.argv[1].split(",")]
setup(
    ext_modules=cythonize(files, quiet=True, compiler_directives={"language_level": 3}),
    script_args=["build_ext", "--inplace", "-j", "2"],
)
"""


def copy_tree(dst: Path) -> None:
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.c", "build")
    # The copies import as statekeeper.node.* and statekeeper.benchmarks.*, like the
    # installed package (setup.py maps the folders the same way).
    shutil.copytree(ROOT / "src" / "statekeeper", dst / "statekeeper", ignore=skip)
    for package in ("node", "benchmarks"):
        shutil.copytree(ROOT / package, dst / "statekeeper" / package, ignore=skip)


def build(dst: Path, compiler: str, modules: list[str], disabled: list[str]) -> None:
    if compiler == "cython":
        cmd = [sys.executable, "-c", CYTHON_BUILD, ",".join(modules)]
    else:
        files = [m.replace(".", "/") + ".py" for m in modules]
        off = [flag for code in disabled for flag in ("--disable-error-code", code)]
        cmd = [sys.executable, "-m", "mypyc", *MYPYC_FLAGS, *off, *files]
    done = subprocess.run(cmd, cwd=dst, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{compiler} build failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")


def load(root: Path) -> dict[str, ModuleType]:
    """statekeeper.node.* and statekeeper.benchmarks.* imported from `root`, as a set."""

    def ours(name: str) -> bool:
        return name == "statekeeper" or name.split(".")[1] in ("node", "benchmarks")

    for name in [n for n in sys.modules if n.split(".")[0] == "statekeeper" and ours(n)]:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        for name in (
            "statekeeper.node.store",
            "statekeeper.node.entry",
            "statekeeper.node.raft.peer_encoding",
        ):
            __import__(name)
        __import__("statekeeper.benchmarks.apply_cost")
    finally:
        sys.path.remove(str(root))
    return {n: m for n, m in sys.modules.items() if n.split(".")[0] == "statekeeper" and ours(n)}


def paired(pure: list[float], comp: list[float]) -> str:
    ratios = [c / p for p, c in zip(pure, comp, strict=True)]
    return (
        f"{statistics.median(pure):7.1f} ({min(pure):.1f}-{max(pure):.1f})"
        f" {statistics.median(comp):7.1f} ({min(comp):.1f}-{max(comp):.1f})"
        f"  {statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
        f" {sum(r < 1 for r in ratios)}/{len(ratios)}"
    )


HEADER = "pure us (range)  compiled us (range)  compiled/pure per block (range), cheaper in"


def ab_apply(sets: dict, work: Path, blocks: int, puts: int) -> str:
    sms, gens, index = {}, {}, dict.fromkeys(sets, 0)
    for side, mods in sets.items():
        sys.modules.update(mods)
        bench = mods["statekeeper.benchmarks.apply_cost"]
        sms[side] = mods["statekeeper.node.store"].StateMachine(work / side)
        gens[side] = bench.Entries(64, 4096, 256)
        for _ in range(128):  # every key written twice: each put overwrites a live key
            index[side] += 1
            sms[side].apply(index[side], bench.shape_entry(gens[side], 64, 1, False))
    shapes = sets["pure"]["statekeeper.benchmarks.apply_cost"].SHAPES
    res: dict[tuple[str, str], list[float]] = {}
    for block in range(blocks):
        for name, (ops, inner, idem) in shapes.items():
            n = max(1, puts // (ops * inner))
            for side in ("pure", "compiled") if block % 2 else ("compiled", "pure"):
                sys.modules.update(sets[side])
                make = sets[side]["statekeeper.benchmarks.apply_cost"].shape_entry
                payloads = [make(gens[side], ops, inner, idem) for _ in range(n)]
                start = time.thread_time()
                for p in payloads:
                    index[side] += 1
                    sms[side].apply(index[side], p)
                spent = time.thread_time() - start
                res.setdefault((name, side), []).append(spent / (n * ops * inner) * 1e6)
    for sm in sms.values():
        sm.close()
    lines = [f"apply, us of thread CPU per put: {HEADER}"]
    for name in shapes:
        lines.append(f"  {name:<18} {paired(res[(name, 'pure')], res[(name, 'compiled')])}")
    return "\n".join(lines)


def codec_pass(mods: dict, ops: int) -> None:
    """An entry of `ops` puts encoded and decoded, a send pass of it to two followers
    (packed once, framed twice, each opened) and one reply framed and opened."""
    codec, entry = mods["statekeeper.node.raft.peer_encoding"], mods["statekeeper.node.entry"]
    value = b"v" * 256
    payload = entry.encode(
        1, [{"op": "put", "ns": "b", "key": f"k{i}", "value": value} for i in range(ops)]
    )
    entry.decode(payload)
    message = {"type": "append_entries", "term": 3, "commit_index": 99, "prevLogIdx": 99}
    message.update(prevLogTerm=3, entries=[[payload, 100, 3]], lastLogIdx=100)
    encoder, key = codec.PassEncoder(), b"k" * 32
    for _ in range(2):
        codec.unpack_plain(codec.plain_frame(key, encoder.packed(message).packed))
    reply = {"type": "next_node_idx", "next_node_idx": 101, "success": True}
    codec.unpack_plain(codec.plain_frame(key, codec.pack(reply)))


def ab_codecs(sets: dict, blocks: int) -> str:
    lines = [f"codecs, us of thread CPU per send pass: {HEADER}"]
    for ops in (1, 64):
        res: dict[str, list[float]] = {"pure": [], "compiled": []}
        reps = max(1, 2000 // ops)
        for block in range(blocks):
            for side in ("pure", "compiled") if block % 2 else ("compiled", "pure"):
                sys.modules.update(sets[side])
                start = time.thread_time()
                for _ in range(reps):
                    codec_pass(sets[side], ops)
                res[side].append((time.thread_time() - start) / reps * 1e6)
        lines.append(f"  entry of {ops:<2} puts     {paired(res['pure'], res['compiled'])}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(
        prog="python -m statekeeper.benchmarks.compiled_ab", description=__doc__
    )
    p.add_argument("--compiler", choices=("cython", "mypyc"), default="cython")
    p.add_argument("--modules", help="comma-separated (default: MODULES, or MYPYC_MODULES)")
    p.add_argument(
        "--disable-error-code",
        action="append",
        help="mypyc: a mypy error code to ignore (repeatable; default: MYPYC_DISABLED)",
    )
    p.add_argument("--blocks", type=int, default=40, help="blocks per side (default 40)")
    p.add_argument("--puts", type=int, default=1280, help="puts per shape per block")
    args = p.parse_args()
    default = MODULES if args.compiler == "cython" else MYPYC_MODULES
    modules = args.modules.split(",") if args.modules else list(default)
    with tempfile.TemporaryDirectory(prefix="compiled-ab-") as tmp:
        work = Path(tmp)
        for side in ("pure", "compiled"):
            copy_tree(work / side)
        disabled = args.disable_error_code or list(MYPYC_DISABLED)
        build(work / "compiled", args.compiler, modules, disabled)
        sets = {side: load(work / side) for side in ("pure", "compiled")}
        loaded = {side: s["statekeeper.node.store.apply"].__file__ for side, s in sets.items()}
        print(f"{args.compiler}: {len(modules)} modules; apply from {loaded}")
        print(ab_apply(sets, work, args.blocks, args.puts))
        print(ab_codecs(sets, max(10, args.blocks // 2)))
        print("(on a shared machine read the paired ratios: the ranges hold its drift)")


if __name__ == "__main__":
    main()
