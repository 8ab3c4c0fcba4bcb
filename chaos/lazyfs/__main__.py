"""Entry point: ``python -m chaos.lazyfs --backing DIR --mount DIR``."""

import sys

from chaos.lazyfs.fs import main

sys.exit(main())
