"""Every fault by name: ``FAULTS`` (in the order ``chaos list`` and the suite use),
``SMOKE`` (the CI subset), ``get_fault``."""

from __future__ import annotations

from statekeeper.chaos.faults.base import Fault, NoFault
from statekeeper.chaos.faults.clock import ClockJump
from statekeeper.chaos.faults.crash import CrashFollowerFsync, CrashInstall, CrashSnapshot
from statekeeper.chaos.faults.deposed import DeposedLeaderSnapshot
from statekeeper.chaos.faults.disk import DiskFull
from statekeeper.chaos.faults.membership import MembershipChange, UncommittedMemberChange
from statekeeper.chaos.faults.partitions import (
    OneWayLoss,
    PacketLoss,
    PartitionBridge,
    PartitionFollower,
    PartitionLeader,
    PartitionMajorityMinority,
)
from statekeeper.chaos.faults.process import (
    KillAll,
    KillFollower,
    KillLeader,
    KillRandom,
    LostDisk,
    PauseLeader,
    PowerLoss,
    PowerLossInstall,
    RollingRestart,
    WipeFollower,
)
from statekeeper.chaos.faults.proxy import (
    ProxyBandwidth,
    ProxyBlackhole,
    ProxyDown,
    ProxyLatency,
    ProxyLimitData,
    ProxyResetPeer,
    ProxySlicer,
    ProxySlowClose,
)
from statekeeper.chaos.faults.quota import QuotaRetry

__all__ = ["FAULTS", "SMOKE", "fault_names", "get_fault"]

FAULTS: dict[str, type[Fault]] = {
    cls.name: cls
    for cls in (
        NoFault,
        KillLeader,
        KillFollower,
        KillRandom,
        PauseLeader,
        RollingRestart,
        KillAll,
        WipeFollower,
        LostDisk,
        PowerLoss,
        PowerLossInstall,
        MembershipChange,
        UncommittedMemberChange,
        PartitionLeader,
        PartitionFollower,
        PartitionMajorityMinority,
        PartitionBridge,
        OneWayLoss,
        PacketLoss,
        ProxyLatency,
        ProxyBandwidth,
        ProxyBlackhole,
        ProxyResetPeer,
        ProxySlowClose,
        ProxyLimitData,
        ProxySlicer,
        ProxyDown,
        CrashSnapshot,
        CrashInstall,
        CrashFollowerFsync,
        ClockJump,
        DeposedLeaderSnapshot,
        DiskFull,
        QuotaRetry,
    )
}

# The CI subset (`chaos suite --smoke`): one of each family, a few minutes in all.
SMOKE: tuple[str, ...] = ("kill-leader", "pause-leader", "partition-leader", "proxy-blackhole")


def fault_names(include_none: bool = False) -> list[str]:
    return [n for n in FAULTS if include_none or n != "none"]


def get_fault(name: str) -> Fault:
    try:
        return FAULTS[name]()
    except KeyError:
        raise KeyError(
            f"unknown fault {name!r}; known: {', '.join(fault_names(include_none=True))}"
        ) from None
