"""``python -m statekeeper.chaos run|list|suite ...``: the same as ``statekeeper chaos ...``."""

from __future__ import annotations

import sys

from statekeeper.chaos.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m statekeeper.chaos"))
