"""What the raft peer connection tests (tests/unit/test_peer_encoding.py,
tests/loopback/test_peer_dial.py) share: a poller that watches nothing, and the sealer."""

from __future__ import annotations

from statekeeper.node.raft.peers import AuthenticatingEncryptor


class NullPoller:
    """pysyncobj's poller as a connection without a running loop needs it: a no-op."""

    def subscribe(self, *args) -> None:
        pass

    def unsubscribe(self, *args) -> None:
        pass


def peer_encryptor() -> AuthenticatingEncryptor:
    """The AES-GCM sealer of a test cluster (key derivation: ~0.2 s, so one per module)."""
    return AuthenticatingEncryptor("test-secret")
