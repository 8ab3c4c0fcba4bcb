"""benchmarks/compiled_ab.py: the copies it compiles, the two module sets it loads side by
side, and the paired report (the build itself needs Cython or mypy: not run here)."""

from __future__ import annotations

import sys

import pytest

from statekeeper.benchmarks import compiled_ab


@pytest.fixture
def own_modules():
    """compiled_ab.load replaces statekeeper, statekeeper.node.* and statekeeper.benchmarks.*
    in sys.modules: put them back.
    Importing the copies also patches pysyncobj's module globals (node/raft/syncobj.py
    sets pysyncobj's TcpConnection to its own PeerConnection): those go back too, or a
    later test in the same process sees the copy's classes (test_conn_buffers.py did)."""

    def ours(name: str) -> bool:
        parts = name.split(".")
        return parts[0] == "statekeeper" and (len(parts) == 1 or parts[1] in ("node", "benchmarks"))

    saved = {n: m for n, m in sys.modules.items() if ours(n)}
    patched = {m: dict(vars(m)) for n, m in sys.modules.items() if n.split(".")[0] == "pysyncobj"}
    yield
    for name in [n for n in sys.modules if ours(n)]:
        del sys.modules[name]
    sys.modules.update(saved)
    for module, globals_before in patched.items():
        vars(module).clear()
        vars(module).update(globals_before)


def test_paired_gives_the_ratio_per_block():
    text = compiled_ab.paired([10.0, 20.0, 40.0], [5.0, 30.0, 40.0])
    # ratios 0.5, 1.5, 1.0: median 1.00, range 0.50-1.50, compiled cheaper in 1 of 3
    assert text.endswith("1.00 (0.50-1.50) 1/3")
    assert text.startswith("   20.0 (10.0-40.0)")


def test_copy_tree_leaves_builds_and_caches_out(tmp_path, monkeypatch):
    src = tmp_path / "src"
    (src / "src/statekeeper").mkdir(parents=True)
    (src / "src/statekeeper/__init__.py").write_text("")
    for rel in ("node/a.py", "node/a.cpython-311-x86_64-linux-gnu.so", "node/a.c"):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text("")
    (src / "node/__pycache__").mkdir()
    (src / "benchmarks").mkdir()
    (src / "benchmarks/b.py").write_text("")
    monkeypatch.setattr(compiled_ab, "ROOT", src)
    compiled_ab.copy_tree(tmp_path / "out")
    copied = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*"))
    assert copied == [
        "statekeeper",
        "statekeeper/__init__.py",
        "statekeeper/benchmarks",
        "statekeeper/benchmarks/b.py",
        "statekeeper/node",
        "statekeeper/node/a.py",
    ]


def test_two_copies_load_as_separate_sets_and_pair_up(tmp_path, own_modules):
    for side in ("pure", "compiled"):
        compiled_ab.copy_tree(tmp_path / side)
    sets = {side: compiled_ab.load(tmp_path / side) for side in ("pure", "compiled")}
    apply_mods = {side: s["statekeeper.node.store.apply"] for side, s in sets.items()}
    assert apply_mods["pure"] is not apply_mods["compiled"]
    for side, mod in apply_mods.items():
        assert mod.__file__.startswith(str(tmp_path / side))
    # each set's modules bound their imports within the set
    machine = sets["compiled"]["statekeeper.node.store.machine"]
    assert machine.EntryTx is apply_mods["compiled"].EntryTx
    assert machine.EntryTx is not apply_mods["pure"].EntryTx
    text = compiled_ab.ab_apply(sets, tmp_path / "db", blocks=2, puts=64)
    assert len(text.splitlines()) == 1 + len(
        sets["pure"]["statekeeper.benchmarks.apply_cost"].SHAPES
    )
    assert "batch of 64 +idem" in text and text.rstrip().endswith("/2")
