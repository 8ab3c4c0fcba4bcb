"""``python -m chaos run|list|suite ...``: the same as ``statekeeper chaos ...``."""

from __future__ import annotations

import sys

from chaos.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m chaos"))
