"""The import structure of the packages: dependencies point one way, and no module takes
another's private name.

A cycle is counted whichever way it is written: an import inside a function (the usual way
to hide a circle from Python's loader) is an edge like a top-level one; only imports under
``if TYPE_CHECKING:`` are left out, as they never run. Issue 29 found six such runtime
circles (the archive tombstone checks in node/store, client/cache/sync.py and client/sync.py,
cluster/cli.py's config helpers, the stream and watch checkers and their rules files).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The folders setup.py installs as statekeeper.<folder> (what their imports name them).
INSTALLED = ("node", "client", "cluster", "chaos", "benchmarks", "console")
GRAPH_PACKAGES = ("node", "client", "cluster", "chaos", "console")
PRIVATE_NAME_PACKAGES = ("node", "client", "cluster", "chaos", "benchmarks", "console")


def _module_files(packages: tuple[str, ...]) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if parts[0] in INSTALLED:
                parts.insert(0, "statekeeper")
            files[".".join(parts)] = path
    return files


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    type_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            type_only.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in type_only
    ]


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _imports(module: str, path: Path) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for each runtime import."""
    found: list[tuple[str, str | None, int]] = []
    for node in _runtime_imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, None, node.lineno) for alias in node.names)
        else:
            source = _absolute(module, path.name == "__init__.py", node)
            found.extend((source, alias.name, node.lineno) for alias in node.names)
    return found


def _known(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(packages: tuple[str, ...] = GRAPH_PACKAGES) -> dict[str, set[str]]:
    modules = _module_files(packages)
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for module, path in modules.items():
        for source, name, _line in _imports(module, path):
            submodule = f"{source}.{name}" if name else source
            target = _known(submodule if submodule in modules else source, modules)
            if target and target != module:
                graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative so that a deep chain of imports cannot hit the recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            child = next(successors, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_sees_a_circle_made_by_an_import_inside_a_function() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_the_imports_as_they_are_written() -> None:
    # A graph without edges finds no cycle: the module names must be the imported ones.
    graph = import_graph()
    assert "statekeeper.node.store" in graph["statekeeper.node.main"]
    assert "statekeeper.client.errors" in graph["statekeeper.client.sync"]


def test_layers_keep_their_boundaries() -> None:
    """node/store/ (the FSM) never sees raft or HTTP; node/raft/ never sees the store, the
    HTTP face or the op declarations (docs/architecture.md, "The layout"); the web console
    reaches the cluster only through the client (no private path into the store)."""
    graph = import_graph()
    rules = {
        "statekeeper.node.store": ("statekeeper.node.raft", "statekeeper.node.api"),
        "statekeeper.node.raft": (
            "statekeeper.node.store",
            "statekeeper.node.api",
            "statekeeper.node.ops",
        ),
        "statekeeper.console": (
            "statekeeper.node.store",
            "statekeeper.node.raft",
            "statekeeper.node.proposer",
        ),
    }
    crossings = [
        f"{module} -> {target}"
        for layer, forbidden in rules.items()
        for module, targets in graph.items()
        if module == layer or module.startswith(layer + ".")
        for target in sorted(targets)
        if any(target == f or target.startswith(f + ".") for f in forbidden)
    ]
    assert crossings == []


def test_packages_have_no_import_cycles() -> None:
    graph = import_graph()
    described = [
        " <-> ".join(component)
        + ": "
        + "; ".join(f"{m} -> {sorted(graph[m] & set(component))}" for m in component)
        for component in cycles(graph)
    ]
    assert described == [], "import cycles:\n" + "\n".join(described)


def private_imports(packages: tuple[str, ...] = PRIVATE_NAME_PACKAGES) -> list[str]:
    """Each `from module import _name` where module is one of this repository's and not
    the importing module itself."""
    ours = _module_files(INSTALLED)
    found = []
    for module, path in _module_files(packages).items():
        for source, name, line in _imports(module, path):
            if name is None or not name.startswith("_") or name.startswith("__"):
                continue
            if f"{source}.{name}" in ours or _known(source, ours) is None or source == module:
                continue
            found.append(f"{path.relative_to(ROOT)}:{line}: {name} from {source}")
    return found


def test_no_module_imports_a_private_name_of_another() -> None:
    found = private_imports()
    assert found == [], f"{len(found)} private names imported across modules:\n" + "\n".join(found)


def test_no_test_imports_a_private_name_of_the_code_it_tests() -> None:
    """Tests go through the public names (a helper a test needs is shared, so public);
    helpers shared between test files are not counted."""
    found = private_imports(("tests",))
    assert found == [], "\n".join(found)


def test_no_installed_module_imports_the_tests() -> None:
    """The installed packages (benchmarks included: `python -m statekeeper.benchmarks...`
    runs from an installed wheel, which has no tests/) never import from tests/; the
    console benchmarks share benchmarks/console_cluster.py instead of the tests' fixture."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {source}"
        for module, path in _module_files(INSTALLED).items()
        for source, _name, line in _imports(module, path)
        if source == "tests" or source.startswith("tests.")
    ]
    assert found == [], "\n".join(found)
