"""The node loads no client transport (nor, with the default config, the web console): `import node.store`, then the imports of
`python -m statekeeper.node` (node.__main__, node.main), must leave the client's transports, caches,
effects and agent layer unloaded.

Why: the node shares pure pieces with the client (client/crdt/model.py, the CRDT merge
rules; client/auth/tokens.py, the token format); before client/__init__.py went lazy, importing
them loaded the whole client (urllib3, the sync client, caches, the agent layer): 0.2 of
the 0.39 s of `python -X importtime -c "import node.store"`, paid by every node start.

Run: `python .ci/server_imports.py` (from .ci/run; tests/unit/test_server_imports.py runs it
too). Exit 1 names each forbidden module and the import chain that first loaded it.
"""

import sys
import traceback

# Forbidden in any node process (prefix match on the dotted name).
NOT_IN_NODE = (
    "urllib3",
    "statekeeper.client.sync",
    "statekeeper.client.sync_transport",
    "statekeeper.client.aio",
    "statekeeper.client.aio_transport",
    "statekeeper.client.aio_connection",
    "statekeeper.client.cache",
    "statekeeper.client.effects",
    "statekeeper.client.agent",
    "statekeeper.client.crdt.replica",
    # The web console and its templates: loaded only by a node with [ui] enabled.
    "statekeeper.console",
    "jinja2",
)
# node/api/server.py parses HTTP with httptools; the store has no reason to.
NOT_IN_STORE = (*NOT_IN_NODE, "httptools")

first_import_stack: dict[str, list[str]] = {}


class RecordForbiddenImports:
    """A meta-path finder that finds nothing: it notes who asked for a forbidden module."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if is_forbidden(name, NOT_IN_STORE) and name not in first_import_stack:
            frames = traceback.extract_stack()[:-1]
            first_import_stack[name] = [
                f"  {f.filename}:{f.lineno}"
                for f in frames
                if "importlib._bootstrap" not in f.filename
            ]
        return None


def is_forbidden(name: str, forbidden: tuple[str, ...]) -> bool:
    return any(name == f or name.startswith(f + ".") for f in forbidden)


def check(stage: str, forbidden: tuple[str, ...]) -> list[str]:
    """One error per forbidden package loaded, with the chain that first imported it."""
    errors = []
    for f in forbidden:
        loaded = [m for m in sys.modules if is_forbidden(m, (f,))]
        if loaded:
            first = f if f in first_import_stack else loaded[0]
            chain = "\n".join(first_import_stack.get(first, ["  (loaded before the check)"]))
            errors.append(f"{stage} loaded {f} ({len(loaded)} modules); {first} from:\n{chain}")
    return errors


def main() -> int:
    sys.meta_path.insert(0, RecordForbiddenImports)
    import statekeeper.node.store  # noqa: F401

    errors = check("import node.store", NOT_IN_STORE)
    import statekeeper.node.__main__  # noqa: F401  (python -m statekeeper.node)
    import statekeeper.node.main  # noqa: F401  (node.__main__.main -> run_node)

    errors += check("python -m statekeeper.node (node.__main__, node.main)", NOT_IN_NODE)
    for e in errors:
        print(e, file=sys.stderr)
    if not errors:
        print("server imports: ok (node.store and node.main load no client transport)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
