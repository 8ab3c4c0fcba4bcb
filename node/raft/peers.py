"""The raft peers' message authenticator: AES-GCM with a key derived from the cluster
secret, in place of pysyncobj's Fernet (pysyncobj's transport calls it for every message)."""

from __future__ import annotations

import logging
import os
import struct
import time

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

log = logging.getLogger("statekeeper.raft")

# Fixed and public on purpose: it only has to differ from other uses of the same secret.
KDF_SALT = b"statekeeper raft peers v1"


class AuthenticatingEncryptor:
    """What pysyncobj's transport calls for every peer message, with AES-GCM instead of
    its Fernet (AES-CBC + HMAC + base64: ~120 us per message here, GCM ~8 us). A token is
    version | 8-byte timestamp | 12-byte nonce | ciphertext+tag, the first 9 bytes
    authenticated as associated data. A message failing authentication is logged (pysyncobj
    drops such connections silently); nothing unauthenticated is ever decompressed or
    unpickled, because pysyncobj decrypts first. Every node must run this same scheme."""

    _VERSION = b"\x01"
    _HEAD = 9  # version + timestamp

    def __init__(self, secret: str):
        kdf = PBKDF2HMAC(algorithm=hashes.SHA256(), length=32, salt=KDF_SALT, iterations=200_000)
        self._aead = AESGCM(kdf.derive(secret.encode()))
        self.rejected = 0
        self._last_log = 0.0

    def reject(self, why: str = "message failed authentication") -> None:
        self.rejected += 1
        now = time.monotonic()
        if now - self._last_log > 1.0:  # a flood of garbage must not flood the log
            self._last_log = now
            log.warning(
                "dropped a raft peer connection: %s (wrong cluster secret, or not a "
                "statekeeper peer); %d rejected so far",
                why,
                self.rejected,
            )

    def encrypt_at_time(self, data: bytes, current_time: int) -> bytes:
        head = self._VERSION + struct.pack(">Q", current_time)
        nonce = os.urandom(12)
        return head + nonce + self._aead.encrypt(nonce, data, head)

    def extract_timestamp(self, token: bytes) -> int:
        if len(token) < self._HEAD + 12 + 16 or token[:1] != self._VERSION:
            self.reject()
            raise ValueError("not a statekeeper peer message")
        return struct.unpack(">Q", token[1 : self._HEAD])[0]

    def decrypt(self, token: bytes) -> bytes:
        head, nonce = token[: self._HEAD], token[self._HEAD : self._HEAD + 12]
        try:
            return self._aead.decrypt(nonce, token[self._HEAD + 12 :], head)
        except (InvalidTag, ValueError):
            self.reject()
            raise


# An incoming raft connection must authenticate within this time and these many bytes,
# and must have been seen unauthenticated by this many sweeps (0.2 s apart): raft runs on
# the node's loop, and after a long step (a RocksDB write stall under a 10M-key load) the
# sweep ran before the reads that were waiting, and dropped a peer whose first message
# had arrived in time (the leader's connection, mid-snapshot, in the 10M-key sweep).
UNAUTHENTICATED_GRACE = 2.0
UNAUTHENTICATED_SWEEPS = 3
MAX_UNAUTHENTICATED_BYTES = 64 * 1024


class UnauthenticatedSweepMixin:
    """Of syncobj.PatchedSyncObj (no pysyncobj import): call _init_sweep() before SyncObj.__init__
    and _sweep_unauthenticated() from every tick; `_sk_encryptor` counts the rejections."""

    def _init_sweep(self) -> None:
        # connection -> [first seen unauthenticated, sweeps that saw it so]
        self._unknown_since: dict[object, list] = {}
        self._next_sweep = 0.0

    def _sweep_unauthenticated(self) -> None:
        """pysyncobj checks a connection's timeout only when bytes arrive, so a client that
        sends half a frame (or a huge length prefix) and waits is kept forever. A real peer
        authenticates within one round trip: drop connections that have not done so."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + 0.2
        transport = self._SyncObj__transport
        unknown = getattr(transport, "_unknownConnections", set())
        for conn in list(unknown):
            seen = self._unknown_since.setdefault(conn, [now, 0])
            seen[1] += 1
            buffered = len(getattr(conn, "_TcpConnection__readBuffer", b""))
            late = now - seen[0] > UNAUTHENTICATED_GRACE and seen[1] > UNAUTHENTICATED_SWEEPS
            if late or buffered > MAX_UNAUTHENTICATED_BYTES:
                self._sk_encryptor.reject("connection sent no authenticated message in time")
                conn.disconnect()
                unknown.discard(conn)
        for conn in list(self._unknown_since):
            if conn not in unknown:
                del self._unknown_since[conn]
