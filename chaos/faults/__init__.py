"""The named faults of the chaos suite, one module per family.

- :mod:`.base`: the :class:`Fault` interface (its docstring says what a fault is and how
  it shapes its cluster), :class:`FaultContext`, the control run ``none``;
- :mod:`.process`: SIGKILL / SIGSTOP / restart / wipe of nodes, power loss (LazyFS);
- :mod:`.partitions`: iptables partitions on per-link loopback addresses;
- :mod:`.proxy`: :class:`ProxyNet` and the Toxiproxy link faults;
- :mod:`.failpoints` and :mod:`.crash`: nodes that exit at a failpoint, restarted by the
  :class:`CrashWatcher`;
- :mod:`.clock`: wall-clock jumps under libfaketime;
- :mod:`.deposed`: a 5-node deposed leader caught up by a snapshot;
- :mod:`.registry`: every fault by name (``FAULTS``), the CI subset (``SMOKE``).
"""

from statekeeper.chaos.faults.base import Fault, FaultContext, FaultError
from statekeeper.chaos.faults.clock import faketime_env, find_libfaketime
from statekeeper.chaos.faults.failpoints import (
    FAILPOINT_EXIT_CODE,
    TINY_SNAPSHOTS,
    CrashWatcher,
    exit_failpoints,
    failpoint_spec,
    last_failpoint,
    start_cluster,
)
from statekeeper.chaos.faults.proxy import ProxyNet
from statekeeper.chaos.faults.registry import FAULTS, SMOKE, fault_names, get_fault

__all__ = [
    "FAILPOINT_EXIT_CODE",
    "FAULTS",
    "CrashWatcher",
    "Fault",
    "FaultContext",
    "FaultError",
    "ProxyNet",
    "SMOKE",
    "TINY_SNAPSHOTS",
    "exit_failpoints",
    "failpoint_spec",
    "faketime_env",
    "fault_names",
    "find_libfaketime",
    "get_fault",
    "last_failpoint",
    "start_cluster",
]
