"""`python -m benchmarks.compare`: see benchmarks/compare/cli.py."""

import sys

from benchmarks.compare.cli import main

sys.exit(main())
