"""LazyFS's crash model (chaos/lazyfs/core.py) without FUSE: LazyCore on a plain directory.

The same model through the real FUSE mount: tests/loopback/test_lazyfs.py.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper.chaos.lazyfs.core import PAGE, STAGING_NAME, LazyCore, Node


def backing_listing(backing: Path) -> set[str]:
    """Every path under a backing directory but LazyFS's own staging area."""
    return {
        str(p.relative_to(backing))
        for p in backing.rglob("*")
        if STAGING_NAME not in p.relative_to(backing).parts
    }


@pytest.fixture
def core(tmp_path: Path) -> Iterator[LazyCore]:
    c = LazyCore(str(tmp_path), sync_backing=False)
    yield c
    assert c.errors == []
    c.close()


def test_core_staging_and_commit_order(core: LazyCore, tmp_path: Path) -> None:
    root = core.root
    d = core.mkdir(root, "d", 0o755, 0, 0)
    f = core.create(d, "f", 0o644, 0, 0)
    fh = core.open(f, os.O_RDWR)
    core.write(f, 0, b"hello")
    core.fsync(f)  # no durable name yet: the data waits in staging
    assert (tmp_path / STAGING_NAME / str(f.ino)).read_bytes() == b"hello"
    core.fsyncdir(d)  # d's entry in root is still pending: d itself is staged
    assert not (tmp_path / "d").exists()
    core.fsyncdir(root)
    assert (tmp_path / "d" / "f").read_bytes() == b"hello"
    assert os.listdir(tmp_path / STAGING_NAME) == []
    core.release(fh)


def test_core_journal_mode_commits_on_any_fsync(tmp_path: Path) -> None:
    c = LazyCore(str(tmp_path), sync_backing=False, namespace="journal")
    f = c.create(c.root, "f", 0o644, 0, 0)
    c.write(f, 0, b"x")
    c.fsync(f)
    assert (tmp_path / "f").read_bytes() == b"x"
    c.crash()
    assert c.read(c.lookup(c.root, "f"), 0, 10) == b"x"
    c.close()


def test_core_crash_restores_the_durable_tree(core: LazyCore, tmp_path: Path) -> None:
    (tmp_path / "keep").write_bytes(b"k" * 5000)
    root = core.root
    keep = core.lookup(root, "keep")
    core.write(keep, 4090, b"ZZZZZZZZZZ")  # straddles a page boundary
    assert core.read(keep, 4088, 14) == b"kkZZZZZZZZZZkk"
    core.rename(root, "keep", root, "moved")
    core.create(root, "new", 0o644, 0, 0)
    core.crash()
    assert sorted(core.children(core.root)) == ["keep"]
    assert (tmp_path / "keep").read_bytes() == b"k" * 5000
    assert backing_listing(tmp_path) == {"keep"}


@pytest.mark.parametrize("seed", range(30))
def test_core_file_data_matches_a_reference(tmp_path: Path, seed: int) -> None:
    # Random writes/truncates/fsyncs/crashes on one file, against two bytearrays: what
    # a program sees and what the disk holds.
    rng = random.Random(seed)
    (tmp_path / "f").write_bytes(b"")
    c = LazyCore(str(tmp_path), sync_backing=False)
    volatile, durable = bytearray(), bytearray()
    node = c.lookup(c.root, "f")
    for _ in range(60):
        op = rng.random()
        if op < 0.5:
            off = rng.randrange(0, 3 * PAGE)
            data = rng.randbytes(rng.choice([1, 7, PAGE - 1, PAGE, PAGE + 3, 2 * PAGE]))
            c.write(node, off, data)
            if off > len(volatile):
                volatile += bytes(off - len(volatile))
            volatile[off : off + len(data)] = data
        elif op < 0.7:
            size = rng.randrange(0, 4 * PAGE)
            c.truncate(node, size)
            volatile = volatile[:size] + bytes(max(0, size - len(volatile)))
        elif op < 0.85:
            c.fsync(node, datasync=rng.random() < 0.5)
            durable = bytearray(volatile)
        else:
            c.crash()
            node = c.lookup(c.root, "f")
            volatile = bytearray(durable)
        assert c.read(node, 0, 1 << 20) == bytes(volatile)
        off = rng.randrange(0, 4 * PAGE)
        assert c.read(node, off, 100) == bytes(volatile[off : off + 100])
    c.crash()
    assert (tmp_path / "f").read_bytes() == bytes(durable)
    assert c.errors == []
    c.close()


def _tree(c: LazyCore, d: Node | None = None) -> dict[str, object]:
    d = d or c.root
    out: dict[str, object] = {}
    for name, n in sorted(c.children(d).items()):
        out[name] = _tree(c, n) if n.is_dir else c.read(n, 0, 1 << 20)
    return out


def _random_namespace_ops(c: LazyCore, rng: random.Random, steps: int) -> None:
    def dirs(d: Node) -> list[Node]:
        return [d] + [x for n in c.children(d).values() if n.is_dir for x in dirs(n)]

    def files(d: Node) -> list[tuple[Node, str, Node]]:
        return [(p, name, n) for p in dirs(d) for name, n in c.children(p).items()]

    open_fhs: list[int] = []
    for _ in range(steps):
        ds = dirs(c.root)
        entries = files(c.root)
        op = rng.random()
        name = rng.choice("abcde")
        try:
            if op < 0.2:
                n = c.create(rng.choice(ds), name, 0o644, 0, 0)
                c.write(n, 0, rng.randbytes(rng.randrange(1, 3 * PAGE)))
            elif op < 0.3:
                c.mkdir(rng.choice(ds), name, 0o755, 0, 0)
            elif op < 0.4 and entries:
                p, nm, n = rng.choice(entries)
                (c.rmdir if n.is_dir else c.unlink)(p, nm)
            elif op < 0.55 and entries:
                p, nm, n = rng.choice(entries)
                c.rename(p, nm, rng.choice(ds), name)
            elif op < 0.65 and entries:
                p, nm, n = rng.choice(entries)
                if not n.is_dir:
                    c.write(n, rng.randrange(0, 2 * PAGE), rng.randbytes(100))
                    if rng.random() < 0.5:
                        c.fsync(n)
            elif op < 0.75 and entries:
                p, nm, n = rng.choice(entries)
                open_fhs.append(c.open(n, os.O_RDONLY))
            elif op < 0.8 and open_fhs:
                c.release(open_fhs.pop(rng.randrange(len(open_fhs))))
            elif op < 0.9:
                c.fsyncdir(rng.choice(ds))
            elif op < 0.95:
                c.crash()
                open_fhs.clear()
        except OSError:
            pass  # EEXIST, ENOTEMPTY, renaming a dir into itself, ...


@pytest.mark.parametrize("namespace", ["strict", "journal"])
@pytest.mark.parametrize("seed", range(25))
def test_core_sync_then_crash_keeps_everything(tmp_path: Path, seed: int, namespace: str) -> None:
    # Whatever happened before, sync(2) + power cut must give back the exact tree, and
    # committing any mix of pending operations must never find the backing tree
    # inconsistent with the model (c.errors).
    rng = random.Random(seed)
    c = LazyCore(str(tmp_path), sync_backing=False, namespace=namespace)
    for _ in range(3):
        _random_namespace_ops(c, rng, 40)
        before = _tree(c)
        c.sync_all()
        c.crash()
        assert _tree(c) == before
        assert c.errors == []
    c.close()


def test_core_dir_fsync_commits_exactly_that_directory(tmp_path: Path) -> None:
    c = LazyCore(str(tmp_path), sync_backing=False)
    a = c.mkdir(c.root, "a", 0o755, 0, 0)
    b = c.mkdir(c.root, "b", 0o755, 0, 0)
    c.fsyncdir(c.root)
    c.create(a, "x", 0o644, 0, 0)
    c.create(b, "y", 0o644, 0, 0)
    c.fsyncdir(a)
    c.crash()
    assert _tree(c) == {"a": {"x": b""}, "b": {}}
    c.close()
