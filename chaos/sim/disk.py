"""(placeholder until the LazyFS disks land) Plain data dirs: a power cut loses nothing
beyond what a kill loses."""

from __future__ import annotations

import shutil
from pathlib import Path


class SimDisks:
    def __init__(self, root: Path, node_ids: list[str], mode: str = "plain"):
        self.root = Path(root)
        self.mode = "plain"
        self.degraded_reason = "placeholder disks"
        self._dirs = {i: self.root / "data" / i for i in node_ids}

    def __enter__(self):
        for d in self._dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(self, *exc):
        return None

    def data_dir(self, node_id: str) -> Path:
        return self._dirs[node_id]

    def power_cut(self, node_id: str) -> dict:
        return {}

    def wipe(self, node_id: str) -> None:
        d = self._dirs[node_id]
        for child in d.iterdir():
            if child.is_dir():
                shutil.rmtree(child)
            else:
                child.unlink()
