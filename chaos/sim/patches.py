"""The seams the simulator replaces while a world runs, and nothing else.

Production code has no simulation branch: the world swaps, for its own duration, the
few names through which a node reaches time, sockets, threads and process exit, and puts
every one back afterwards (Seams.installed()). The list is the whole contract between
the simulator and the node; docs/architecture.md names it too:

- time: `time.monotonic`, `time.time` (and their _ns forms) read the virtual clock of
  the process that is running (loop.CURRENT), with that process's skew; pysyncobj's
  modules bound `monotonic` at import (`monotonicTime`), and node/raft/syncobj.py hands it
  to its classes as `_read_clock`, `_seal_clock` and `raft_clock`: those are swapped too.
- sockets: pysyncobj's tcp_connection and tcp_server modules call their `socket` module;
  they get network.SimSocketModule (raft TLS stays off in a simulated world).
- threads: node/raft/raft_node.py, install.py and compaction.py start helper threads
  with `threading.Thread` (snapshot packing, the install's sync, the pre-flush): they get
  loop.SimThread, which runs the target on the loop a seeded moment later; the journal's
  ThreadPoolExecutor (its fsync behind) is loop.InlineExecutor.
- process exit: `os._exit` (failpoints' exit, node/fatal.stop_now) raises
  loop.NodeCrashed in the process that called it, which the loop turns into a crash.
- RocksDB's background compactions: node/store/backend.py's `Options` makes them off
  (set_disable_auto_compactions). When a compaction finishes depends on the wall clock
  and the machine, and it changes the files a snapshot packs, hence its size and the
  virtual time its transfer takes: seed 100004 ran two ways until they were off.
- randomness: the global `random` (pysyncobj's election timeouts) is seeded from the
  world's seed, failpoints' own generator too.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
import types
from collections.abc import Iterator

from statekeeper.chaos.sim.loop import CURRENT, InlineExecutor, NodeCrashed, SimThread, VirtualClock

WALL_EPOCH = 1_800_000_000.0  # what time.time() reads at virtual time 0 (2027-01-15)


class Seams:
    def __init__(self, clock: VirtualClock, socket_module, seed: int):
        self.clock = clock
        self.socket_module = socket_module
        self.seed = seed
        self._saved: list[tuple[object, str, object]] = []

    def monotonic(self) -> float:
        p = CURRENT.get()
        return self.clock.now + (p.clock_skew if p is not None else 0.0)

    def wall(self) -> float:
        p = CURRENT.get()
        skew = (p.clock_skew + p.wall_skew) if p is not None else 0.0
        return WALL_EPOCH + self.clock.now + skew

    def _set(self, obj: object, name: str, value: object) -> None:
        # A class's own attribute is saved as stored (a staticmethod stays one: restored
        # through getattr it came back a plain function, and every later PeerConnection in
        # the process called its clock with self: 33 tests failed after a world ran).
        old = vars(obj)[name] if isinstance(obj, type) and name in vars(obj) else getattr(obj, name)
        self._saved.append((obj, name, old))
        setattr(obj, name, value)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:

        from statekeeper.node import failpoints
        from statekeeper.node.raft import compaction, install, journal, raft_node
        from statekeeper.node.raft import syncobj as patched
        from statekeeper.node.store import backend

        mono, wall = self.monotonic, self.wall
        self._set(time, "monotonic", mono)
        self._set(time, "time", wall)
        self._set(time, "monotonic_ns", lambda: int(mono() * 1e9))
        self._set(time, "time_ns", lambda: int(wall() * 1e9))
        for mod in patched.CLOCK_MODULES:
            self._set(mod, "monotonicTime", mono)
        self._set(patched, "_pysyncobj_monotonic", mono)
        for cls in vars(patched).values():
            if isinstance(cls, type):
                for attr in ("_read_clock", "_seal_clock", "raft_clock"):
                    if attr in vars(cls):
                        self._set(cls, attr, staticmethod(mono))
        for mod in patched.SOCKET_MODULES:
            self._set(mod, "socket", self.socket_module)
        sim_threading = types.SimpleNamespace(**vars(threading))
        sim_threading.Thread = SimThread
        for mod in (raft_node, install, compaction):
            self._set(mod, "threading", sim_threading)
        self._set(journal, "ThreadPoolExecutor", lambda *a, **k: InlineExecutor())
        self._set(backend, "Options", _options_without_compactions(backend.Options))
        real_exit = os._exit

        def sim_exit(code: int) -> None:
            p = CURRENT.get()
            if p is None:
                real_exit(code)
            p.exit_code = code
            raise NodeCrashed(code)

        self._set(os, "_exit", sim_exit)
        random_state = random.getstate()
        random.seed(self.seed)
        failpoints.configure(None, seed=str(self.seed))  # $STATEKEEPER_FAILPOINTS, seeded
        try:
            yield
        finally:
            random.setstate(random_state)
            while self._saved:
                obj, name, old = self._saved.pop()
                setattr(obj, name, old)


def _options_without_compactions(options_class):
    """RocksDB's Options with automatic compactions off (the module docstring says why)."""

    def make(*args, **kwargs):
        opts = options_class(*args, **kwargs)
        opts.set_disable_auto_compactions(True)
        return opts

    return make
