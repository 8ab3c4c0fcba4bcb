"""Consistency checks of a chaos history (see ``chaos.history`` for the format).

- ``check``: linearizability per key (txns join keys into one partition), exact: the
  verdict is True, False (with a minimal failing sub-history) or ``"unknown"`` when a
  time or memory bound was hit, never a guess;
- ``lost_writes`` / ``duplicate_applications``: acknowledged writes missing from the
  final state, logical writes applied more than once (:mod:`.writes`);
- ``check_streams``: event streams against their final content: no gaps, no duplicates,
  no lost acknowledged events, expectations honoured, readers see prefixes, commit
  order (:mod:`.streams`, the rules in :mod:`.stream_rules`).

``check`` runs, in order (each module's docstring argues why its step keeps the
verdict):

- :mod:`.model`: the register model, and each op compiled into model terms
  (preparation: what is dropped, ignored, optional);
- :mod:`.reductions`: promotion of observed and pruning of unobserved unknown writes;
- :mod:`.linearizability`: the partitions (P-compositionality) and the time budget;
- :mod:`.search`: Wing & Gong / Lowe search per partition, with the refinements whose
  precomputed facts live in :mod:`.rules`;
- :mod:`.minimize`: shrinking a violation to a sub-history that fails on its own;
- :mod:`.results`: the result types and the rendering of counterexamples.
"""

from statekeeper.chaos.checker.linearizability import check
from statekeeper.chaos.checker.results import PartitionResult, Result, render_history
from statekeeper.chaos.checker.streams import StreamsResult, StreamViolation, check_streams
from statekeeper.chaos.checker.values import UNKNOWN, Verdict
from statekeeper.chaos.checker.writes import (
    DuplicateApplication,
    LostWrite,
    duplicate_applications,
    lost_writes,
)

__all__ = [
    "UNKNOWN",
    "DuplicateApplication",
    "LostWrite",
    "PartitionResult",
    "Result",
    "StreamViolation",
    "StreamsResult",
    "Verdict",
    "check",
    "check_streams",
    "duplicate_applications",
    "lost_writes",
    "render_history",
]
