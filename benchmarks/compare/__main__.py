"""`python -m statekeeper.benchmarks.compare`: see benchmarks/compare/cli.py."""

import sys

from statekeeper.benchmarks.compare.cli import main

sys.exit(main())
