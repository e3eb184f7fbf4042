"""Responses reach a TLS transport in pieces of at most TLS_WRITE_PIECE bytes (broker/network.py): the same bytes in
the same order, every piece but the last full, large buffers cut into views rather than copied."""

from __future__ import annotations

import os

from strata.broker.network import TLS_WRITE_PIECE, tls_pieces


def test_pieces_keep_the_bytes_and_fill_each_piece() -> None:
    big = os.urandom(3 * TLS_WRITE_PIECE + 17)
    parts: list = [b"\x00\x00\x01\x00", b"hdr", memoryview(big), bytearray(b"tail"), b"", memoryview(big)[5:9]]
    pieces = list(tls_pieces(parts))
    assert b"".join(bytes(p) for p in pieces) == b"".join(bytes(p) for p in parts)
    assert all(len(p) == TLS_WRITE_PIECE for p in pieces[:-1]) and 0 < len(pieces[-1]) <= TLS_WRITE_PIECE
    # a piece that lies inside one large buffer is a view of it, not a copy
    assert any(isinstance(p, memoryview) and p.obj is big for p in pieces)


def test_a_single_small_response_is_one_piece() -> None:
    assert [bytes(p) for p in tls_pieces(b"abc")] == [b"abc"]
    assert list(tls_pieces([])) == []
