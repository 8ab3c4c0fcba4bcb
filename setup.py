"""Maps the repository's top-level folders into the one installed package, `statekeeper`.

pyproject.toml holds the project's metadata; only the package layout is computed here, so a
new subpackage (a folder with an __init__.py) is installed without editing a list:

    src/statekeeper/__init__.py  ->  statekeeper             (the client's names, lazily)
    node/, client/, cluster/,    ->  statekeeper.node, statekeeper.client, ...
    chaos/, benchmarks/
"""

from pathlib import Path

from setuptools import setup

LAYERS = ("node", "client", "cluster", "chaos", "benchmarks", "console")
HERE = Path(__file__).parent


def subpackages(top: str) -> list[str]:
    found = []
    for init in sorted((HERE / top).rglob("__init__.py")):
        rel = init.parent.relative_to(HERE)
        found.append("statekeeper." + ".".join(rel.parts))
    return found


setup(
    package_dir={"statekeeper": "src/statekeeper", **{f"statekeeper.{t}": t for t in LAYERS}},
    packages=["statekeeper", *(p for top in LAYERS for p in subpackages(top))],
)
