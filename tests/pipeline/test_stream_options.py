"""Executor and stream options: a streaming option the running Spark cannot honour fails at start instead of being
ignored; a broker-mode read with failOnDataLoss=false goes on from the new log start when retention deletes under it."""

from __future__ import annotations

from typing import Any

import pytest

from strata.pipeline import source


def test_max_offsets_per_trigger_without_admission_control_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source, "ReadMaxRows", None)  # what Spark 4.0/4.1 lack
    opts = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t", "maxOffsetsPerTrigger": "100"}
    with pytest.raises(ValueError, match=r"maxOffsetsPerTrigger needs Spark 4.2"):
        source.StrataStreamReader(opts, source.StrataDataSource(opts).schema())
    del opts["maxOffsetsPerTrigger"]
    assert source.StrataStreamReader(opts, source.StrataDataSource(opts).schema()).opts.max_offsets_per_trigger in (
        None,
        0,
    )


class _Msg:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"k%d" % self._offset

    def value(self) -> bytes:
        return b"v%d" % self._offset

    def timestamp(self) -> tuple[int, int]:
        return 1, 1000 + self._offset

    def headers(self) -> None:
        return None


def test_broker_read_without_fail_on_data_loss_goes_on_from_the_new_log_start(monkeypatch) -> None:
    """Retention deletes [5, 8) while a broker-mode read of [0, 10) runs: failOnDataLoss=false reads 0-4, then
    8-9 from the new log start (as Spark's Kafka source does) instead of dropping the rest of the range."""
    from strata.pipeline import reading
    from strata.pipeline.client import DataLossError
    from strata.pipeline.decode import Columns
    from strata.pipeline.options import parse_source_options
    from strata.pipeline.planning import OffsetRange, Piece

    starts = iter([8])  # asked once the read fails: retention moved the log start to 8

    def consume_range(conf, topic, partition, start, end, poll_timeout_s):
        if start == 0:
            yield [_Msg(o) for o in range(5)]
            raise DataLossError("offset 5 is out of range")
        yield [_Msg(o) for o in range(start, end)]

    monkeypatch.setattr(reading, "consume_range", consume_range)
    monkeypatch.setattr(reading, "log_start_offset", lambda conf, topic, partition: next(starts))

    class Out:
        columns = Columns(with_headers=False)

        def take(self) -> None:
            raise AssertionError("fewer rows than a batch")

    for fail in ("false", "true"):
        opts = parse_source_options(
            {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "t", "failOnDataLoss": fail}, streaming=False
        )
        out: Any = Out()  # stands in for the ArrowEmitter: read_broker_piece uses only .columns and .take()
        out.columns.clear()
        starts = iter([8])
        gen = reading.read_broker_piece(opts, OffsetRange("t", 0, 0, 10), Piece(0, 10), out)
        if fail == "true":
            with pytest.raises(DataLossError):
                list(gen)
        else:
            assert list(gen) == []
            assert out.columns.offsets == [0, 1, 2, 3, 4, 8, 9]
