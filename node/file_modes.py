"""Who may read a node's files: its own user only.

A node's data dir holds every tenant's values (RocksDB's SST files, the raft journal and
snapshots) and the auth tokens' hashes, so a data dir or file readable by group or others
lets any local user copy the database (issue 27, item 8: dirs came out 0755, files 0644).
Like etcd, a node creates directories 0700 and files 0600 and warns about a data dir that
is open to others:

- the process umask is PRIVATE_UMASK from the start of run_node, so every file the node
  creates (RocksDB's SST, MANIFEST and LOG files, pysyncobj's snapshots, temporaries)
  comes out 0600 and every directory 0700, whatever mode the code creating it asks for;
- code that passes an explicit mode passes 0600 (node/raft/journal.py, node/fatal.py);
- an existing data dir with group or other bits (one an older version made) is logged at
  WARNING with its path and mode, then chmodded to 0700: files inside it made before keep
  their mode, but nobody else can reach them through the directory any more;
- node.log is opened by the supervisor (cluster/supervisor.py), which is not a node
  process: it opens it with open_private_log().
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("statekeeper.node")

PRIVATE_UMASK = 0o077
DIR_MODE = 0o700
FILE_MODE = 0o600


def use_private_umask() -> None:
    """Make everything this process creates from now on private to its user."""
    os.umask(PRIVATE_UMASK)


def private_data_dir(path: Path) -> None:
    """Create `path` (mode 0700) or, when it exists open to group or others, say so and
    make it 0700."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & ~DIR_MODE:
        log.warning(
            "data dir %s has mode %04o: readable by other local users; changing it to %04o",
            path,
            mode,
            DIR_MODE,
        )
        path.chmod(DIR_MODE)


def open_private_log(path: Path) -> int:
    """An fd appending to `path`, created 0600; an existing file is made 0600 too (an
    older version created node.log 0644)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    os.fchmod(fd, FILE_MODE)
    return fd
