"""A sans-IO TLS pipe for the raft port: ssl.SSLObject over two memory BIOs.

pysyncobj owns the sockets (non-blocking, in its poller); a TLS-wrapped socket would
need the handshake and every read and write restarted on WANT_READ/WANT_WRITE inside
code we do not own. Instead the raw bytes stay pysyncobj's business and this pipe only
translates: `feed(ciphertext) -> plaintext` (driving the handshake), `send(plaintext)`
(held until the handshake completes), `outgoing() -> ciphertext` to write. No sockets,
so two pipes can be paired in memory (tests/unit/test_raft_tls_pipe.py).

Every failure is one exception, TlsRefused, with `kind` and a sentence saying why: the
peer's certificate (another CA, expired), the wrong node (the dialler's name check, or an
accepted peer whose certificate names no cluster node), not TLS at all (plaintext, the
old AES-GCM-only peers, garbage), or the peer refusing us (its alert)."""

from __future__ import annotations

import ssl

__all__ = ["TlsPipe", "TlsRefused"]

# Plaintext asked of the SSL object per read() call; one call returns at most one record
# (16 KiB), so more would only make every call allocate (and, past glibc's mmap threshold,
# map and unmap) a larger buffer.
_READ_CHUNK = 64 * 1024

# OpenSSL reasons that mean the bytes were never TLS records.
_NOT_TLS = {
    "WRONG_VERSION_NUMBER",
    "HTTP_REQUEST",
    "HTTPS_PROXY_REQUEST",
    "UNEXPECTED_RECORD",
    "PACKET_LENGTH_TOO_LONG",
    "RECORD_LENGTH_MISMATCH",
    "UNKNOWN_PROTOCOL",
    "RECORD_LAYER_FAILURE",
    "UNEXPECTED_MESSAGE",
    "BAD_PACKET_LENGTH",
    "WRONG_SSL_VERSION",
    "UNSUPPORTED_PROTOCOL",
}


class TlsRefused(Exception):
    """The connection must be dropped. kind: "bad-cert" (the peer's certificate does not
    verify), "wrong-node" (valid, but not the node expected), "not-tls", "peer-refused"
    (the peer sent an alert: it refused our certificate or handshake), "closed", "tls"."""

    def __init__(self, kind: str, why: str):
        super().__init__(why)
        self.kind = kind
        self.why = why


def _refusal(e: ssl.SSLError) -> TlsRefused:
    if isinstance(e, ssl.SSLCertVerificationError):
        msg = e.verify_message or str(e)
        if "hostname" in msg.lower() or "not valid for" in msg.lower():
            return TlsRefused("wrong-node", f"the peer's certificate is not this node's: {msg}")
        return TlsRefused("bad-cert", f"the peer's certificate does not verify: {msg}")
    if isinstance(e, ssl.SSLZeroReturnError):
        return TlsRefused("closed", "the peer closed the TLS session")
    reason = e.reason or ""
    if "ALERT" in reason:
        return TlsRefused("peer-refused", f"the peer refused the handshake ({reason.lower()})")
    if reason in _NOT_TLS:
        return TlsRefused("not-tls", f"not TLS (plaintext or garbage: {reason.lower()})")
    return TlsRefused("tls", f"TLS error: {reason.lower() or e}")


def dns_names(cert: dict | None) -> frozenset[str]:
    """The DNS subject alternative names of a certificate as SSLObject.getpeercert()
    returns it (a verified one)."""
    if not cert:
        return frozenset()
    return frozenset(v for k, v in cert.get("subjectAltName", ()) if k == "DNS")


class TlsPipe:
    """One TLS session over memory BIOs.

    server_side: the accepting end; `expect_any` (a set of node ids) then requires the
    peer's certificate to name one of them. The dialling end passes `server_hostname` (the
    peer's node id), which the context's check_hostname verifies against its DNS SANs."""

    def __init__(
        self,
        ctx: ssl.SSLContext,
        *,
        server_side: bool,
        server_hostname: str | None = None,
        expect_any: frozenset[str] | set[str] | None = None,
    ):
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._ssl = ctx.wrap_bio(
            self._in, self._out, server_side=server_side, server_hostname=server_hostname
        )
        self._expect_any = frozenset(expect_any) if expect_any is not None else None
        self._pending: list[bytes] = []  # plaintext sent before the handshake completed
        self.pending_bytes = 0
        self.handshake_done = False
        self.peer_names: frozenset[str] = frozenset()
        self.failed: TlsRefused | None = None
        if not server_side:
            self._handshake()  # the ClientHello, ready in outgoing()

    # -- the three verbs ----------------------------------------------------------------

    def feed(self, raw: bytes) -> bytes:
        """Ciphertext from the peer in; whatever plaintext it completes out (possibly b"").
        Raises TlsRefused (and keeps raising it) once the session has failed."""
        if self.failed is not None:
            raise self.failed
        if raw:
            self._in.write(raw)
        if not self.handshake_done:
            self._handshake()
            if not self.handshake_done:
                return b""
        chunks = []
        # Until every complete record is decrypted. Each read() releases the GIL (the
        # raft thread may then wait for it behind the HTTP threads): stop when nothing is
        # left rather than on the SSLWantReadError of one more call. Without read-ahead
        # OpenSSL takes whole records from the BIO, so bytes still there mean a record.
        while self._in.pending or self._ssl.pending():
            try:
                chunk = self._ssl.read(_READ_CHUNK)
            except ssl.SSLWantReadError:
                break  # half a record: the rest comes with a later feed()
            except ssl.SSLError as e:
                raise self._fail(_refusal(e)) from None
            if not chunk:  # a clean close_notify
                raise self._fail(TlsRefused("closed", "the peer closed the TLS session"))
            chunks.append(chunk)
        return b"".join(chunks)

    def send(self, plain: bytes) -> None:
        """Plaintext to the peer: encrypted now, or once the handshake completes."""
        if self.failed is not None:
            raise self.failed
        if not plain:
            return
        if not self.handshake_done:
            self._pending.append(bytes(plain))
            self.pending_bytes += len(plain)
            return
        self._write(plain)

    def outgoing(self) -> bytes:
        """Ciphertext to write to the peer (handshake records, data, alerts)."""
        return self._out.read()

    @property
    def has_outgoing(self) -> bool:
        return self._out.pending > 0

    # -- inside -------------------------------------------------------------------------

    def _write(self, plain: bytes) -> None:
        view = memoryview(plain)
        try:
            while view:
                n = self._ssl.write(view)  # a memory BIO takes everything
                view = view[n:]
        except ssl.SSLError as e:
            raise self._fail(_refusal(e)) from None

    def _handshake(self) -> None:
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            return
        except ssl.SSLError as e:
            raise self._fail(_refusal(e)) from None
        self.handshake_done = True
        self.peer_names = dns_names(self._ssl.getpeercert())
        if self._expect_any is not None and not (self.peer_names & self._expect_any):
            names = ", ".join(sorted(self.peer_names)) or "none"
            raise self._fail(
                TlsRefused(
                    "wrong-node",
                    f"the peer's certificate names none of this node's peers (its DNS names: {names})",
                )
            )
        pending, self._pending, self.pending_bytes = self._pending, [], 0
        for plain in pending:
            self._write(plain)

    def _fail(self, refused: TlsRefused) -> TlsRefused:
        self.failed = refused
        return refused
