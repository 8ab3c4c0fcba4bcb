"""Entry point: ``python -m statekeeper.chaos.lazyfs --backing DIR --mount DIR``."""

import sys

from statekeeper.chaos.lazyfs.fs import main

sys.exit(main())
