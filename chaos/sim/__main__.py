"""python -m statekeeper.chaos.sim: the `statekeeper sim` command (cli.py)."""

import sys

from statekeeper.chaos.sim.cli import main

sys.exit(main())
