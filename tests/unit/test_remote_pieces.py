"""remote/pieces.py: record batches walked across buffer boundaries, and views of a byte range over the pieces."""

from __future__ import annotations

from strata.protocol.records import BufferChain, build_batch, iter_batches
from strata.remote.pieces import Pieces


def _segment() -> bytes:
    return b"".join(build_batch([b"v" * (50 + 30 * i)] * (i + 1), base_offset=10 * i) for i in range(6))


def _split(data: bytes, size: int) -> list[memoryview]:
    return [memoryview(data)[i : i + size] for i in range(0, len(data), size)]


def test_batches_across_pieces_are_those_of_the_joined_bytes() -> None:
    data = _segment()
    want = [(pos, h.base_offset, h.last_offset, h.size) for pos, h in iter_batches(data)]
    for size in (7, 61, 100, 333, len(data)):  # headers cut anywhere, including mid-header
        assert list(Pieces(_split(data, size)).batches()) == want, size


def test_a_cut_off_batch_is_left_out_unless_asked_for() -> None:
    data = _segment()
    cut = Pieces(_split(data[:-5], 40))
    complete = list(cut.batches())
    assert len(complete) == 5
    assert len(list(cut.batches(complete=False))) == 6
    last_pos, _base, _last, last_size = list(cut.batches(complete=False))[-1]
    assert cut.first_batch(50) == (last_pos, last_size)  # the cut-off batch holds offsets 50-55
    assert cut.first_batch(60) is None


def test_views_are_the_joined_bytes_and_share_the_pieces_memory() -> None:
    data = bytearray(_segment())
    p = Pieces(_split(bytes(data), 100))
    one = p.view(120, 180)  # inside one piece: a plain view
    assert isinstance(one, memoryview) and bytes(one) == data[120:180]
    many = p.view(50, 420)
    assert isinstance(many, BufferChain) and len(many.pieces) == 5
    assert bytes(many) == data[50:420] and len(many) == 370
    # views on the chunks: no copy
    assert all(isinstance(piece, memoryview) and piece.obj is p.pieces[0].obj for piece in many.pieces)
