"""The raft peer message authenticator (node/raft/peers.py), without a network."""

from __future__ import annotations

import pytest
from cryptography.exceptions import InvalidTag

from statekeeper.node.raft.peers import AuthenticatingEncryptor


@pytest.fixture(scope="module")
def pair():
    return AuthenticatingEncryptor("s3cret"), AuthenticatingEncryptor("s3cret")


def test_roundtrip_between_two_holders_of_the_secret(pair) -> None:
    a, b = pair
    token = a.encrypt_at_time(b"hello peer", 42)
    assert b.extract_timestamp(token) == 42
    assert b.decrypt(token) == b"hello peer"


@pytest.mark.parametrize("where", [0, 5, 12, 30, -1])
def test_any_flipped_byte_is_rejected(pair, where: int) -> None:
    a, b = pair
    token = bytearray(a.encrypt_at_time(b"x" * 40, 7))
    token[where] ^= 0x01
    before = b.rejected
    with pytest.raises((ValueError, InvalidTag)):
        b.extract_timestamp(bytes(token))
        b.decrypt(bytes(token))
    assert b.rejected == before + 1


def test_a_different_secret_cannot_read_or_forge() -> None:
    a, other = AuthenticatingEncryptor("s3cret"), AuthenticatingEncryptor("guess")
    with pytest.raises((ValueError, InvalidTag)):
        other.decrypt(a.encrypt_at_time(b"msg", 1))
    assert other.rejected == 1


def test_garbage_is_rejected_before_decryption(pair) -> None:
    _, b = pair
    with pytest.raises(ValueError):
        b.extract_timestamp(b"\x80\x04garbage")


def test_pysyncobj_pickles_with_a_modern_protocol() -> None:
    """Protocol 2 (pysyncobj's default) pickles bytes via a latin-1 str: slow for entries."""
    from pysyncobj import pickle as pysyncobj_pickle

    from statekeeper.node.raft import syncobj

    data = pysyncobj_pickle.dumps((0, (b"x" * 1000,)))
    assert data[:2] == bytes([0x80, syncobj.PEER_PICKLE_PROTOCOL])
    assert pysyncobj_pickle.loads(data) == (0, (b"x" * 1000,))
