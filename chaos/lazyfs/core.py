"""The crash model of LazyFS, independent of FUSE (see README.md beside this file).

Two namespaces exist side by side:

* the *volatile* one (``Node.parent``/``Node.name``/``Node.children``): what programs
  on the mount see, i.e. the state of a running kernel's caches;
* the *durable* one (``Node.dparent``/``Node.dname``): what a disk would hold after a
  power cut. It is kept, at all times, as the real tree of the backing directory.

Unsynced file data lives only in memory (``Node.pages``); namespace operations live in
``LazyCore.pending`` until an fsync of a directory they touch commits them. A crash
throws both away: the backing directory is already the post-crash disk.

Every method here runs to completion without yielding (the FUSE adapter calls them
from a single trio thread), so no locking is needed.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

PAGE = 4096
CONTROL_NAME = ".lazyfs-control"
STAGING_NAME = ".lazyfs-staging"
# Names at the mount root that programs can neither see in listings nor create.
RESERVED_NAMES = frozenset({CONTROL_NAME, STAGING_NAME})
ROOT_INO = 1
CONTROL_INO = 2
NAMESPACE_MODELS = ("strict", "journal")
_IOV_MAX = 512  # pages per pwritev call (Linux IOV_MAX is 1024)


def _err(code: int, what: str = "") -> OSError:
    return OSError(code, os.strerror(code) + (f": {what}" if what else ""))


class Node:
    """One inode. Its identity (``ino``) is never reused, not even after a crash."""

    __slots__ = (
        "ino", "gen", "mode", "uid", "gid", "atime_ns", "mtime_ns", "ctime_ns",
        "parent", "name", "children", "dparent", "dname", "staged",
        "size", "base_size", "dsize", "pages", "fd", "opens", "meta_dirty", "nlink_hint",
    )  # fmt: skip

    def __init__(self, ino: int, gen: int, mode: int, uid: int, gid: int) -> None:
        self.ino = ino
        self.gen = gen  # LazyCore.gen when created; a crash makes every older node stale
        self.mode = mode
        self.uid = uid
        self.gid = gid
        now = time.time_ns()
        self.atime_ns = self.mtime_ns = self.ctime_ns = now
        # volatile namespace (None/None: unlinked; the root has parent None, name "")
        self.parent: Node | None = None
        self.name: str | None = None
        self.children: dict[str, Node] | None = {} if stat.S_ISDIR(mode) else None
        # durable namespace: the entry that a disk holds for this inode, if any
        self.dparent: Node | None = None
        self.dname: str | None = None
        self.staged = False  # exists as STAGING_NAME/<ino> (durable but unreachable)
        # file data: [0, base_size) of the durable file is still valid; dirty pages
        # override it; everything else below `size` reads as zeros
        self.size = 0
        self.base_size = 0
        self.dsize = 0  # size of the durable (backing) file
        self.pages: dict[int, bytearray] = {}
        self.fd: int | None = None  # O_RDWR on the durable file, opened on demand
        self.opens = 0
        self.meta_dirty = False  # mode/times changed since the last fsync
        self.nlink_hint = 1

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    @property
    def dirty(self) -> bool:
        return bool(self.pages) or self.size != self.dsize or self.base_size != self.dsize

    def dirty_bytes(self) -> int:
        return len(self.pages) * PAGE


@dataclass
class Op:
    """A namespace operation that is visible but not yet durable."""

    seq: int
    kind: str  # create | mkdir | unlink | rmdir | rename
    dirs: frozenset[int]  # the directories whose fsync commits it
    node: Node
    parent: Node | None = None  # create/mkdir: where; rename: destination
    name: str | None = None
    replaced: Node | None = None  # rename: the inode that was at the destination


@dataclass
class Handle:
    node: Node
    flags: int
    entries: list[tuple[str, Node]] = field(default_factory=list)  # opendir snapshot


class LazyCore:
    """A volatile view over `backing`, whose durable state is the backing tree itself."""

    def __init__(
        self, backing: str, *, sync_backing: bool = True, namespace: str = "strict"
    ) -> None:
        if namespace not in NAMESPACE_MODELS:
            raise ValueError(f"namespace must be one of {NAMESPACE_MODELS}")
        self.backing = os.path.abspath(backing)
        # "strict": only an fsync of a directory makes its entries durable (POSIX).
        # "journal": any fsync also commits every earlier namespace op, as ext4/xfs do
        # in practice (one ordered metadata journal).
        self.namespace = namespace
        # fsync the backing files too. Not needed to model a crash (the host does not
        # crash), but it keeps the cost of an fsync honest.
        self.sync_backing = sync_backing
        self.staging = os.path.join(self.backing, STAGING_NAME)
        self.gen = 0
        self.crashes = 0
        self.errors: list[str] = []  # model inconsistencies; tests assert there are none
        self._next_ino = CONTROL_INO + 1
        self._seq = 0
        self._next_fh = 1
        self.handles: dict[int, Handle] = {}
        self.pending: list[Op] = []
        self.nodes: dict[int, Node] = {}
        self._reset()

    # ------------------------------------------------------------------ lifecycle

    def _reset(self) -> None:
        for n in self.nodes.values():
            self._close_fd(n)
        self.gen += 1
        self.handles.clear()
        self.pending.clear()
        # Orphans: inodes that were durable but had no durable name (like fsck's
        # orphan list, they are freed at "boot").
        shutil.rmtree(self.staging, ignore_errors=True)
        os.makedirs(self.staging, exist_ok=True)
        st = os.stat(self.backing)
        root = Node(ROOT_INO, self.gen, st.st_mode, st.st_uid, st.st_gid)
        root.children = None  # load lazily from the backing dir
        root.name = ""
        self.root = root
        self.nodes = {ROOT_INO: root}

    def crash(self) -> None:
        """Power cut: forget everything that was not fsynced."""
        self.crashes += 1
        self._reset()

    def close(self) -> None:
        """Daemon exit: the same as a crash (unmount is a power cut; see README)."""
        for n in self.nodes.values():
            self._close_fd(n)
        shutil.rmtree(self.staging, ignore_errors=True)

    def sync_all(self) -> None:
        """sync(2): every file's data, then every pending namespace operation."""
        for n in list(self.nodes.values()):
            if not n.is_dir and (n.dirty or n.meta_dirty) and self._has_name_or_open(n):
                self._sync_data(n)
        self._commit(self.pending[:])

    def status(self) -> dict[str, int | list[str]]:
        files = [n for n in self.nodes.values() if not n.is_dir and n.dirty]
        return {
            "crashes": self.crashes,
            "dirty_files": len(files),
            "dirty_bytes": sum(n.dirty_bytes() for n in files),
            "pending_ops": len(self.pending),
            "open_handles": len(self.handles),
            "errors": self.errors[-20:],
        }

    def status_bytes(self) -> bytes:
        return (json.dumps(self.status(), sort_keys=True) + "\n").encode()

    # ------------------------------------------------------------------ lookups

    def node(self, ino: int) -> Node:
        n = self.nodes.get(ino)
        if n is None:
            # An inode from before the last crash, or one that was freed.
            raise _err(errno.ESTALE)
        return n

    def handle(self, fh: int) -> Handle:
        h = self.handles.get(fh)
        if h is None or h.node.gen != self.gen:
            raise _err(errno.ESTALE)
        return h

    def children(self, d: Node) -> dict[str, Node]:
        if not d.is_dir:
            raise _err(errno.ENOTDIR)
        if d.children is None:
            self._load_dir(d)
        assert d.children is not None
        return d.children

    def _load_dir(self, d: Node) -> None:
        # A directory is loaded before any operation inside it, so at this point its
        # volatile contents are exactly its durable ones.
        path = self._dpath(d)
        kids: dict[str, Node] = {}
        if path is not None:
            with os.scandir(path) as it:
                for e in it:
                    if d is self.root and e.name in RESERVED_NAMES:
                        continue
                    st = e.stat(follow_symlinks=False)
                    n = self._new_node(st.st_mode, st.st_uid, st.st_gid)
                    n.atime_ns, n.mtime_ns, n.ctime_ns = (
                        st.st_atime_ns,
                        st.st_mtime_ns,
                        st.st_ctime_ns,
                    )
                    n.parent = n.dparent = d
                    n.name = n.dname = e.name
                    if n.is_dir:
                        n.children = None
                        n.nlink_hint = st.st_nlink
                    else:
                        n.size = n.base_size = n.dsize = st.st_size
                    kids[e.name] = n
        d.children = kids

    def lookup(self, parent: Node, name: str) -> Node:
        if name == ".":
            return parent
        if name == "..":
            return parent.parent or parent
        n = self.children(parent).get(name)
        if n is None:
            raise _err(errno.ENOENT)
        return n

    def _new_node(self, mode: int, uid: int, gid: int) -> Node:
        n = Node(self._next_ino, self.gen, mode, uid, gid)
        self._next_ino += 1
        self.nodes[n.ino] = n
        return n

    def _check_new_name(self, parent: Node, name: str) -> None:
        if parent is self.root and name in RESERVED_NAMES:
            raise _err(errno.EPERM, name)
        if "/" in name or name in ("", ".", ".."):
            raise _err(errno.EINVAL, name)

    # ------------------------------------------------------------------ durable paths

    def _dpath(self, n: Node) -> str | None:
        """Where the inode is on the backing disk, or None if it never got there."""
        if n is self.root:
            return self.backing
        if n.dparent is not None:
            pp = self._dpath(n.dparent)
            assert pp is not None, "a durable entry inside a directory with no durable place"
            return os.path.join(pp, n.dname or "")
        if n.staged:
            return os.path.join(self.staging, str(n.ino))
        return None

    def _ensure_durable(self, n: Node) -> str:
        """Give an inode a durable place (staging) so fsynced data has somewhere to go."""
        p = self._dpath(n)
        if p is not None:
            return p
        p = os.path.join(self.staging, str(n.ino))
        if n.is_dir:
            os.mkdir(p, stat.S_IMODE(n.mode))
        else:
            os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, stat.S_IMODE(n.mode)))
        self._apply_owner(p, n)
        n.staged = True
        n.dsize = 0
        return p

    def _apply_owner(self, path: str, n: Node) -> None:
        if os.geteuid() == 0 and (n.uid, n.gid) != (os.geteuid(), os.getegid()):
            os.lchown(path, n.uid, n.gid)

    def _get_fd(self, n: Node) -> int:
        if n.fd is None:
            p = self._ensure_durable(n)
            n.fd = os.open(p, os.O_RDWR)
        return n.fd

    def _close_fd(self, n: Node) -> None:
        if n.fd is not None:
            os.close(n.fd)
            n.fd = None

    def _has_name_or_open(self, n: Node) -> bool:
        return n.parent is not None or n.opens > 0

    # ------------------------------------------------------------------ attributes

    def nlink(self, n: Node) -> int:
        if n is self.root or n.parent is not None:
            if n.is_dir:
                if n.children is None:
                    return n.nlink_hint
                return 2 + sum(1 for c in n.children.values() if c.is_dir)
            return 1
        return 0

    def setattr(
        self,
        n: Node,
        *,
        size: int | None = None,
        mode: int | None = None,
        uid: int | None = None,
        gid: int | None = None,
        atime_ns: int | None = None,
        mtime_ns: int | None = None,
    ) -> None:
        now = time.time_ns()
        if size is not None:
            if n.is_dir:
                raise _err(errno.EISDIR)
            self.truncate(n, size)
        if mode is not None:
            n.mode = stat.S_IFMT(n.mode) | stat.S_IMODE(mode)
        if uid is not None:
            n.uid = uid
        if gid is not None:
            n.gid = gid
        if atime_ns is not None:
            n.atime_ns = atime_ns
        if mtime_ns is not None:
            n.mtime_ns = mtime_ns
        n.ctime_ns = now
        if any(v is not None for v in (mode, uid, gid, atime_ns, mtime_ns)):
            n.meta_dirty = True

    # ------------------------------------------------------------------ file data

    def _base_read(self, n: Node, off: int, length: int) -> bytes:
        """Bytes [off, off+length) of the durable content still valid (zeros past it)."""
        valid = min(off + length, n.base_size) - off
        if valid <= 0:
            return bytes(length)
        data = os.pread(self._get_fd(n), valid, off)
        if len(data) < length:
            data += bytes(length - len(data))
        return data

    def read(self, n: Node, off: int, size: int) -> bytes:
        end = min(off + size, n.size)
        if off >= end:
            return b""
        pages = n.pages
        if not pages:
            return self._base_read(n, off, end - off)
        out = bytearray()
        pos = off
        while pos < end:
            pi, po = divmod(pos, PAGE)
            page = pages.get(pi)
            if page is not None:
                take = min(PAGE - po, end - pos)
                out += page[po : po + take]
                pos += take
                continue
            j = pi + 1
            while j * PAGE < end and j not in pages:
                j += 1
            run_end = min(j * PAGE, end)
            out += self._base_read(n, pos, run_end - pos)
            pos = run_end
        return bytes(out)

    def write(self, n: Node, off: int, data: bytes) -> int:
        if n.is_dir:
            raise _err(errno.EISDIR)
        mv = memoryview(data)
        pages = n.pages
        i, pos, total = 0, off, len(data)
        while i < total:
            pi, po = divmod(pos, PAGE)
            take = min(PAGE - po, total - i)
            page = pages.get(pi)
            if page is None:
                if take == PAGE:
                    pages[pi] = bytearray(mv[i : i + take])
                    i += take
                    pos += take
                    continue
                page = bytearray(PAGE)
                start = pi * PAGE
                if start < n.base_size:
                    base = self._base_read(n, start, min(PAGE, n.base_size - start))
                    page[: len(base)] = base
                pages[pi] = page
            page[po : po + take] = mv[i : i + take]
            i += take
            pos += take
        if off + total > n.size:
            n.size = off + total
        n.mtime_ns = n.ctime_ns = time.time_ns()
        return total

    def truncate(self, n: Node, size: int) -> None:
        if size < n.size:
            cut = -(-size // PAGE)  # first page entirely past the new end
            for pi in [p for p in n.pages if p >= cut]:
                del n.pages[pi]
            pi, po = divmod(size, PAGE)
            if po and pi in n.pages:
                n.pages[pi][po:] = bytes(PAGE - po)  # a later extension must read zeros
            n.base_size = min(n.base_size, size)
        n.size = size
        n.mtime_ns = n.ctime_ns = time.time_ns()

    def _sync_data(self, n: Node, datasync: bool = False) -> None:
        fd = self._get_fd(n)
        dsize = n.dsize
        if n.base_size < dsize:
            os.ftruncate(fd, n.base_size)  # drop durable bytes that a truncate removed
            dsize = n.base_size
        if n.pages:
            for start, bufs in self._runs(n):
                dsize = max(dsize, start + os.pwritev(fd, bufs, start))
        if n.size != dsize:
            os.ftruncate(fd, n.size)
        if n.meta_dirty:
            os.fchmod(fd, stat.S_IMODE(n.mode))
            os.utime(fd, ns=(n.atime_ns, n.mtime_ns))
            n.meta_dirty = False
        if self.sync_backing:
            (os.fdatasync if datasync else os.fsync)(fd)
        n.pages.clear()
        n.base_size = n.dsize = n.size

    def _runs(self, n: Node) -> Iterator[tuple[int, list[bytes | bytearray | memoryview]]]:
        """Consecutive dirty pages, clipped to the file size, as pwritev batches."""
        keys = sorted(k for k in n.pages if k * PAGE < n.size)
        i = 0
        while i < len(keys):
            j = i
            while j + 1 < len(keys) and keys[j + 1] == keys[j] + 1 and j + 1 - i < _IOV_MAX:
                j += 1
            bufs: list[bytes | bytearray | memoryview] = [n.pages[k] for k in keys[i : j + 1]]
            last_end = (keys[j] + 1) * PAGE
            if last_end > n.size:
                bufs[-1] = memoryview(bufs[-1])[: n.size - keys[j] * PAGE]
            yield keys[i] * PAGE, bufs
            i = j + 1

    def fsync(self, n: Node, datasync: bool = False) -> None:
        if n.is_dir:
            self.fsyncdir(n)
            return
        self._sync_data(n, datasync)
        if self.namespace == "journal":
            self._commit(self.pending[:])

    # ------------------------------------------------------------------ open/close

    def open(self, n: Node, flags: int) -> int:
        if n.is_dir and flags & (os.O_WRONLY | os.O_RDWR):
            raise _err(errno.EISDIR)
        if flags & os.O_TRUNC and not n.is_dir and flags & (os.O_WRONLY | os.O_RDWR):
            self.truncate(n, 0)
        return self._new_handle(n, flags)

    def _new_handle(self, n: Node, flags: int) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self.handles[fh] = Handle(n, flags)
        n.opens += 1
        return fh

    def release(self, fh: int) -> None:
        h = self.handles.pop(fh, None)
        if h is None or h.node.gen != self.gen:
            return  # a handle from before the crash
        n = h.node
        n.opens -= 1
        if n.opens == 0:
            self._close_fd(n)
            if n.parent is None and n is not self.root:
                self._free(n)

    def _free(self, n: Node) -> None:
        """An inode without names or handles: its unsynced data can never be read."""
        if n.is_dir:
            return  # a staged directory may still hold entries that pending ops remove
        n.pages.clear()
        n.size = n.base_size = n.dsize
        if n.dparent is None:
            # No durable name either: nothing would survive a crash (staging is wiped),
            # and no pending op refers to it.
            if n.staged:
                p = os.path.join(self.staging, str(n.ino))
                os.unlink(p)
                n.staged = False
            if not any(op.node is n or op.replaced is n for op in self.pending):
                self.nodes.pop(n.ino, None)

    def opendir(self, n: Node) -> int:
        fh = self._new_handle(n, os.O_RDONLY)
        dots = [(".", n), ("..", n.parent or n)]
        self.handles[fh].entries = dots + list(self.children(n).items())
        return fh

    # ------------------------------------------------------------------ namespace

    def _record(
        self,
        kind: str,
        dirs: set[Node],
        node: Node,
        parent: Node | None = None,
        name: str | None = None,
        replaced: Node | None = None,
    ) -> None:
        self._seq += 1
        dino = frozenset(d.ino for d in dirs)
        self.pending.append(Op(self._seq, kind, dino, node, parent, name, replaced))

    def create(self, parent: Node, name: str, mode: int, uid: int, gid: int) -> Node:
        return self._new_entry("create", stat.S_IFREG, parent, name, mode, uid, gid)

    def mkdir(self, parent: Node, name: str, mode: int, uid: int, gid: int) -> Node:
        return self._new_entry("mkdir", stat.S_IFDIR, parent, name, mode, uid, gid)

    def _new_entry(
        self, kind: str, file_type: int, parent: Node, name: str, mode: int, uid: int, gid: int
    ) -> Node:
        """A new file or directory (``file_type``) ``name`` in ``parent``, recorded as ``kind``."""
        self._check_new_name(parent, name)
        kids = self.children(parent)
        if name in kids:
            raise _err(errno.EEXIST, name)
        n = self._new_node(file_type | stat.S_IMODE(mode), uid, gid)
        n.parent, n.name = parent, name
        kids[name] = n
        parent.mtime_ns = parent.ctime_ns = n.ctime_ns
        self._record(kind, {parent}, n, parent=parent, name=name)
        return n

    def unlink(self, parent: Node, name: str) -> None:
        n = self.lookup(parent, name)
        if n.is_dir:
            raise _err(errno.EISDIR, name)
        self._detach(n)
        self._record("unlink", {parent}, n)
        if n.opens == 0:
            self._free(n)

    def rmdir(self, parent: Node, name: str) -> None:
        n = self.lookup(parent, name)
        if not n.is_dir:
            raise _err(errno.ENOTDIR, name)
        if self.children(n):
            raise _err(errno.ENOTEMPTY, name)
        self._detach(n)
        # Committing the rmdir commits the unlinks that emptied the directory.
        self._record("rmdir", {parent, n}, n)

    def _detach(self, n: Node) -> None:
        p = n.parent
        assert p is not None and p.children is not None and n.name is not None
        del p.children[n.name]
        p.mtime_ns = p.ctime_ns = time.time_ns()
        n.parent = n.name = None

    def rename(
        self, p_old: Node, old: str, p_new: Node, new: str, *, noreplace: bool = False
    ) -> None:
        n = self.lookup(p_old, old)
        self._check_new_name(p_new, new)
        kids_new = self.children(p_new)
        victim = kids_new.get(new)
        if victim is n:
            return
        if victim is not None:
            if noreplace:
                raise _err(errno.EEXIST, new)
            if victim.is_dir and not n.is_dir:
                raise _err(errno.EISDIR, new)
            if n.is_dir and not victim.is_dir:
                raise _err(errno.ENOTDIR, new)
            if victim.is_dir and self.children(victim):
                raise _err(errno.ENOTEMPTY, new)
        if n.is_dir:
            a: Node | None = p_new
            while a is not None:  # the kernel checks this too; the core stays safe alone
                if a is n:
                    raise _err(errno.EINVAL, "a directory cannot move into itself")
                a = a.parent
        if victim is not None:
            self._detach(victim)
        self._detach(n)
        n.parent, n.name = p_new, new
        kids_new[new] = n
        dirs = {p_old, p_new}
        if victim is not None and victim.is_dir:
            dirs.add(victim)
        self._record("rename", dirs, n, parent=p_new, name=new, replaced=victim)
        if victim is not None and victim.opens == 0:
            self._free(victim)

    # ------------------------------------------------------------------ commit

    def fsyncdir(self, d: Node) -> None:
        """Make every pending operation in `d`, and what it depends on, durable.

        Walking the log backwards from the newest op, an op is committed if it touches
        a directory already in the set; its other directories then join the set. So a
        directory's committed ops are always a prefix of its own history, and a
        cross-directory rename drags in the earlier ops of both directories (which is
        what its source entry and its replaced target depend on). Directory renames
        are also ordered among themselves.
        """
        if self.namespace == "journal":
            self._commit(self.pending[:])
            return
        want = {d.ino}
        chosen: list[Op] = []
        dir_moves = False
        for op in reversed(self.pending):
            moves_dir = op.kind == "rename" and op.node.is_dir
            if op.dirs & want or (dir_moves and moves_dir):
                chosen.append(op)
                want |= op.dirs
                # Where a directory may go durably depends on where every other
                # directory durably is (no cycles): directory moves commit in order.
                dir_moves = dir_moves or moves_dir
        chosen.reverse()
        self._commit(chosen)

    def _commit(self, ops: list[Op]) -> None:
        if not ops:
            return
        done = {id(op) for op in ops}
        self.pending = [op for op in self.pending if id(op) not in done]
        touched: set[str] = set()
        for op in ops:
            try:
                touched.update(self._apply(op))
            except OSError as e:
                self.errors.append(f"applying {op.kind} of inode {op.node.ino}: {e}")
        if self.sync_backing:
            for p in touched:
                try:
                    fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY)
                except OSError:
                    continue  # renamed or removed by a later op of this batch
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def _apply(self, op: Op) -> list[str]:
        """Carry out one op on the backing tree; returns the directories it changed."""
        n = op.node
        if op.kind in ("create", "mkdir"):
            assert op.parent is not None and op.name is not None
            ppath = self._ensure_durable(op.parent)
            target = os.path.join(ppath, op.name)
            if n.staged:
                os.rename(os.path.join(self.staging, str(n.ino)), target)
                n.staged = False
            elif n.is_dir:
                os.mkdir(target, stat.S_IMODE(n.mode))
                self._apply_owner(target, n)
            else:
                os.close(
                    os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, stat.S_IMODE(n.mode))
                )
                self._apply_owner(target, n)
                n.dsize = 0
            n.dparent, n.dname = op.parent, op.name
            return [ppath, self.staging]
        if op.kind in ("unlink", "rmdir"):
            path = self._dpath(n)
            if path is None or n.dparent is None:
                self.errors.append(f"{op.kind} of inode {n.ino} that has no durable entry")
                return []
            ppath = os.path.dirname(path)
            self._drop_durable_entry(n, path)
            return [ppath, self.staging]
        if op.kind == "rename":
            assert op.parent is not None and op.name is not None
            src = self._dpath(n)
            if src is None or n.dparent is None:
                self.errors.append(f"rename of inode {n.ino} that has no durable entry")
                return []
            dst_dir = self._ensure_durable(op.parent)
            dst = os.path.join(dst_dir, op.name)
            v = op.replaced
            if v is not None:
                vpath = self._dpath(v)
                if v.dparent is None or vpath != dst:
                    self.errors.append(f"rename over inode {v.ino} not durably at {dst}")
                elif v.is_dir or v.opens == 0:
                    # os.rename below replaces it (atomically, as on a real disk)
                    self._close_fd(v)
                    v.dparent = v.dname = None
                else:
                    self._drop_durable_entry(v, dst)
            os.rename(src, dst)
            n.dparent, n.dname = op.parent, op.name
            return [os.path.dirname(src), dst_dir, self.staging]
        raise AssertionError(op.kind)

    def _drop_durable_entry(self, n: Node, path: str) -> None:
        if n.opens > 0 and not n.is_dir:
            # Still open: the inode lives on, unreachable, until it is closed (and a
            # crash frees it, as fsck frees orphans).
            os.rename(path, os.path.join(self.staging, str(n.ino)))
            n.staged = True
        else:
            if n.is_dir:
                try:
                    os.rmdir(path)
                except OSError as e:
                    self.errors.append(f"rmdir of {path}: {e}")
                    shutil.rmtree(path, ignore_errors=True)
            else:
                self._close_fd(n)
                os.unlink(path)
        n.dparent = n.dname = None
