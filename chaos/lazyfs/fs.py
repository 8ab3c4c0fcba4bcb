"""LazyFS daemon: a pyfuse3 passthrough filesystem that loses unsynced state on "crash".

Run as ``python -m statekeeper.chaos.lazyfs --backing DIR --mount DIR``. The model (what is kept in
memory, what an fsync makes durable) is in core.py; this module only adapts it to FUSE
and serves the control file. See README.md beside this file.
"""

from __future__ import annotations

import argparse
import errno
import functools
import logging
import os
import signal
import stat
import sys
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

import pyfuse3
import trio

from statekeeper.chaos.lazyfs.core import (
    CONTROL_INO,
    CONTROL_NAME,
    NAMESPACE_MODELS,
    ROOT_INO,
    LazyCore,
    Node,
)

log = logging.getLogger("lazyfs")

P = ParamSpec("P")
R = TypeVar("R")


def _op(fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """Make a synchronous handler async and turn its errors into FUSE errors.

    Handlers never await, so each one runs atomically on the trio thread. Any other
    exception must not reach pyfuse3 (it would end the main loop): it becomes EIO.
    """

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except pyfuse3.FUSEError:
            raise
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno or errno.EIO) from None
        except Exception:
            log.exception("%s failed", fn.__name__)
            raise pyfuse3.FUSEError(errno.EIO) from None

    return wrapper


class LazyOperations(pyfuse3.Operations):
    supports_dot_lookup = True
    enable_writeback_cache = False  # writes must reach us; the kernel must not cache them
    enable_acl = False

    def __init__(self, core: LazyCore) -> None:
        super().__init__()
        self.core = core
        self._control_fhs: dict[int, bytes] = {}  # fh -> status snapshot taken at open
        self._next_control_fh = 1 << 62  # never collides with LazyCore's handle numbers

    # ------------------------------------------------------------------ helpers

    def _attrs(self, n: Node) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = n.ino
        a.generation = 0
        # No kernel caching of names or attributes: after a crash every path must be
        # looked up again and get the post-crash inode (with a fresh number).
        a.entry_timeout = 0
        a.attr_timeout = 0
        a.st_mode = n.mode
        a.st_nlink = self.core.nlink(n)
        a.st_uid = n.uid
        a.st_gid = n.gid
        a.st_rdev = 0
        a.st_size = n.size if not n.is_dir else 4096
        a.st_blksize = 4096
        a.st_blocks = -(-a.st_size // 512)
        a.st_atime_ns = n.atime_ns
        a.st_mtime_ns = n.mtime_ns
        a.st_ctime_ns = n.ctime_ns
        return a

    def _control_attrs(self) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = CONTROL_INO
        a.entry_timeout = 0
        a.attr_timeout = 0
        a.st_mode = stat.S_IFREG | 0o600
        a.st_nlink = 1
        a.st_uid = os.geteuid()
        a.st_gid = os.getegid()
        a.st_size = len(self.core.status_bytes())
        a.st_blksize = 4096
        return a

    def _dir(self, ino: int) -> Node:
        n = self.core.node(ino)
        if not n.is_dir:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return n

    def _control(self, command: str) -> None:
        if command == "crash":
            log.info("crash: dropping %s", self.core.status())
            self.core.crash()
        elif command == "sync":
            self.core.sync_all()
        else:
            raise pyfuse3.FUSEError(errno.EINVAL)

    # ------------------------------------------------------------------ attributes

    @_op
    def lookup(self, parent_inode: int, name: bytes, ctx: Any = None) -> pyfuse3.EntryAttributes:
        s = os.fsdecode(name)
        if parent_inode == ROOT_INO and s == CONTROL_NAME:
            return self._control_attrs()
        return self._attrs(self.core.lookup(self._dir(parent_inode), s))

    @_op
    def forget(self, inode_list: Any) -> None:
        pass  # nodes are kept until the next crash; memory is not a concern in tests

    @_op
    def getattr(self, inode: int, ctx: Any = None) -> pyfuse3.EntryAttributes:
        if inode == CONTROL_INO:
            return self._control_attrs()
        return self._attrs(self.core.node(inode))

    @_op
    def setattr(
        self,
        inode: int,
        attr: pyfuse3.EntryAttributes,
        fields: pyfuse3.SetattrFields,
        fh: int | None,
        ctx: Any,
    ) -> pyfuse3.EntryAttributes:
        if inode == CONTROL_INO:
            return self._control_attrs()  # `echo crash > ctl` truncates first: ignore
        n = self.core.handle(fh).node if fh is not None else self.core.node(inode)
        self.core.setattr(
            n,
            size=attr.st_size if fields.update_size else None,
            mode=attr.st_mode if fields.update_mode else None,
            uid=attr.st_uid if fields.update_uid else None,
            gid=attr.st_gid if fields.update_gid else None,
            atime_ns=attr.st_atime_ns if fields.update_atime else None,
            mtime_ns=attr.st_mtime_ns if fields.update_mtime else None,
        )
        return self._attrs(n)

    @_op
    def readlink(self, inode: int, ctx: Any) -> bytes:
        # Only symlinks that were already in the backing dir (creating them is refused).
        n = self.core.node(inode)
        p = self.core._dpath(n)
        if p is None or not stat.S_ISLNK(n.mode):
            raise pyfuse3.FUSEError(errno.EINVAL)
        return os.fsencode(os.readlink(p))

    @_op
    def statfs(self, ctx: Any) -> pyfuse3.StatvfsData:
        st = os.statvfs(self.core.backing)
        s = pyfuse3.StatvfsData()
        for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files",
                  "f_ffree", "f_favail", "f_namemax"):  # fmt: skip
            setattr(s, k, getattr(st, k))
        return s

    # ------------------------------------------------------------------ namespace

    @_op
    def mknod(self, parent_inode: int, name: bytes, mode: int, rdev: int, ctx: Any) -> Any:
        if not stat.S_ISREG(mode):
            raise pyfuse3.FUSEError(errno.EPERM)  # no fifos/devices/sockets
        n = self.core.create(self._dir(parent_inode), os.fsdecode(name), mode, ctx.uid, ctx.gid)
        return self._attrs(n)

    @_op
    def mkdir(self, parent_inode: int, name: bytes, mode: int, ctx: Any) -> Any:
        n = self.core.mkdir(self._dir(parent_inode), os.fsdecode(name), mode, ctx.uid, ctx.gid)
        return self._attrs(n)

    @_op
    def unlink(self, parent_inode: int, name: bytes, ctx: Any) -> None:
        self.core.unlink(self._dir(parent_inode), os.fsdecode(name))

    @_op
    def rmdir(self, parent_inode: int, name: bytes, ctx: Any) -> None:
        self.core.rmdir(self._dir(parent_inode), os.fsdecode(name))

    @_op
    def symlink(self, parent_inode: int, name: bytes, target: bytes, ctx: Any) -> Any:
        raise pyfuse3.FUSEError(errno.EPERM)  # not modelled

    @_op
    def link(self, inode: int, new_parent_inode: int, new_name: bytes, ctx: Any) -> Any:
        # Not modelled. EOPNOTSUPP (not EPERM) makes RocksDB's Checkpoint fall back to
        # copying files instead of failing.
        raise pyfuse3.FUSEError(errno.EOPNOTSUPP)

    @_op
    def rename(
        self,
        parent_inode_old: int,
        name_old: bytes,
        parent_inode_new: int,
        name_new: bytes,
        flags: int,
        ctx: Any,
    ) -> None:
        if flags & pyfuse3.RENAME_EXCHANGE:
            raise pyfuse3.FUSEError(errno.EINVAL)  # not modelled
        self.core.rename(
            self._dir(parent_inode_old),
            os.fsdecode(name_old),
            self._dir(parent_inode_new),
            os.fsdecode(name_new),
            noreplace=bool(flags & pyfuse3.RENAME_NOREPLACE),
        )

    # ------------------------------------------------------------------ files

    def _file_info(self, fh: int) -> pyfuse3.FileInfo:
        # direct_io: no kernel page cache, so every read and write reaches us and a
        # crash cannot leave stale pages behind.
        return pyfuse3.FileInfo(fh=fh, direct_io=True, keep_cache=False)

    @_op
    def open(self, inode: int, flags: int, ctx: Any) -> pyfuse3.FileInfo:
        if inode == CONTROL_INO:
            fh = self._next_control_fh
            self._next_control_fh += 1
            self._control_fhs[fh] = self.core.status_bytes()
            return self._file_info(fh)
        return self._file_info(self.core.open(self.core.node(inode), flags))

    @_op
    def create(self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: Any) -> Any:
        parent = self._dir(parent_inode)
        s = os.fsdecode(name)
        try:
            n = self.core.lookup(parent, s)
        except FileNotFoundError:
            n = self.core.create(parent, s, mode, ctx.uid, ctx.gid)
        else:
            # The kernel normally opens existing files itself; this is the race path.
            if flags & os.O_EXCL:
                raise pyfuse3.FUSEError(errno.EEXIST) from None
        return self._file_info(self.core.open(n, flags & ~os.O_CREAT)), self._attrs(n)

    @_op
    def read(self, fh: int, off: int, size: int) -> bytes:
        if fh in self._control_fhs:
            return self._control_fhs[fh][off : off + size]
        h = self.core.handle(fh)
        return self.core.read(h.node, off, size)

    @_op
    def write(self, fh: int, off: int, buf: bytes) -> int:
        if fh in self._control_fhs:
            for line in buf.decode(errors="replace").split():
                self._control(line.strip())
            self._control_fhs[fh] = self.core.status_bytes()
            return len(buf)
        h = self.core.handle(fh)
        return self.core.write(h.node, off, buf)

    @_op
    def flush(self, fh: int) -> None:
        pass  # close(2) is not a sync point

    @_op
    def release(self, fh: int) -> None:
        if self._control_fhs.pop(fh, None) is None:
            self.core.release(fh)

    @_op
    def fsync(self, fh: int, datasync: bool) -> None:
        if fh in self._control_fhs:
            return
        self.core.fsync(self.core.handle(fh).node, datasync)

    # ------------------------------------------------------------------ directories

    @_op
    def opendir(self, inode: int, ctx: Any) -> int:
        return self.core.opendir(self._dir(inode))

    @_op
    def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        h = self.core.handle(fh)
        for i in range(start_id, len(h.entries)):
            name, n = h.entries[i]
            if n.gen != self.core.gen:
                continue
            if not pyfuse3.readdir_reply(token, os.fsencode(name), self._attrs(n), i + 1):
                break

    @_op
    def releasedir(self, fh: int) -> None:
        self.core.release(fh)

    @_op
    def fsyncdir(self, fh: int, datasync: bool) -> None:
        self.core.fsyncdir(self.core.handle(fh).node)

    @_op
    def access(self, inode: int, mode: int, ctx: Any) -> bool:
        return True  # default_permissions: the kernel checks modes itself


async def _serve() -> None:
    async with trio.open_nursery() as nursery:

        async def stop_on_signal() -> None:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    pyfuse3.terminate()
                    return

        nursery.start_soon(stop_on_signal)
        await pyfuse3.main()
        nursery.cancel_scope.cancel()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m statekeeper.chaos.lazyfs", description=__doc__)
    ap.add_argument("--backing", required=True, help="directory that holds the durable state")
    ap.add_argument("--mount", required=True, help="mountpoint")
    ap.add_argument(
        "--no-backing-sync",
        action="store_true",
        help="do not fsync the backing files on fsync (faster; the model is unchanged)",
    )
    ap.add_argument(
        "--namespace",
        choices=NAMESPACE_MODELS,
        default="strict",
        help="strict: only fsync of a directory makes its entries durable (POSIX); "
        "journal: any fsync commits all earlier namespace changes (ext4/xfs in practice)",
    )
    ap.add_argument("--debug", action="store_true")
    args = ap.parse_args(argv)
    backing, mnt = os.path.realpath(args.backing), os.path.realpath(args.mount)
    if os.path.commonpath([backing, mnt]) in (backing, mnt):
        # Scanning the backing dir would otherwise walk into our own mount (deadlock).
        ap.error("--backing and --mount must not contain each other")
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.INFO,
        format="lazyfs %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    core = LazyCore(args.backing, sync_backing=not args.no_backing_sync, namespace=args.namespace)
    ops = LazyOperations(core)
    options = set(pyfuse3.default_options)  # default_permissions
    options |= {"fsname=lazyfs", "subtype=lazyfs"}
    if os.geteuid() == 0:
        options.add("allow_other")  # nodes may run as another user
    pyfuse3.init(ops, args.mount, options)
    log.info("mounted %s on %s", args.backing, args.mount)
    try:
        trio.run(_serve)
    finally:
        # An unmount (or a signal) is a power cut: unsynced state is simply not written.
        pyfuse3.close(unmount=True)
        core.close()
        log.info("unmounted %s", args.mount)
    return 0
