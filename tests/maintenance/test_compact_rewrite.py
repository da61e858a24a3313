"""The executor's parts: rolling by rows, read-ahead, token-bucket pacing, dictionary choice."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import Backend

from lakelog import InvalidArgumentError
from lakelog.io.writer import RollingWriter, WriteOptions
from lakelog.maintenance.pacing import TokenBucket
from lakelog.maintenance.sources import dictionary_columns, read_ahead
from lakelog.storage import Storage


def _batches(n: int, size: int) -> list[pa.RecordBatch]:
    return [
        pa.record_batch({"id": pa.array(np.arange(i * size, (i + 1) * size))}) for i in range(n)
    ]


@pytest.mark.parametrize(
    "target_rows, row_group, batch", [(1000, 300, 250), (700, 1000, 64), (1, 5, 3), (500, 500, 500)]
)
def test_rolling_writer_cuts_files_by_rows(
    local_backend: Backend, target_rows: int, row_group: int, batch: int
) -> None:
    storage = Storage(local_backend.uri)
    opts = WriteOptions(target_file_size=1 << 40, row_group_size=row_group, target_rows=target_rows)
    w = RollingWriter(
        storage,
        file_schema=pa.schema([("id", pa.int64())]),
        partition={},
        partition_by=(),
        options=opts,
    )
    total = 3 * target_rows + 17
    for b in _batches(total // batch + 1, batch):
        w.write(b)
    files = w.close()
    ids: list[int] = []
    for f in files:
        md = pq.ParquetFile(storage.open_input(f.path)).metadata
        assert md.num_rows == f.num_rows <= target_rows
        assert all(md.row_group(i).num_rows <= row_group for i in range(md.num_row_groups))
        ids.extend(pq.read_table(storage.open_input(f.path)).column("id").to_pylist())
    written = (total // batch + 1) * batch
    assert ids == list(range(written))
    assert len(files) == -(-written // target_rows)  # all but the last file are full


def test_write_options_validate_target_rows() -> None:
    with pytest.raises(InvalidArgumentError, match="target_rows"):
        WriteOptions(target_file_size=10, row_group_size=10, target_rows=0)


def test_read_ahead_yields_everything_in_order_and_propagates_errors() -> None:
    assert [b.column(0)[0].as_py() for b in read_ahead(iter(_batches(20, 3)))] == list(
        range(0, 60, 3)
    )

    def failing() -> Iterator[pa.RecordBatch]:
        yield _batches(1, 3)[0]
        raise OSError("disk gone")

    it = read_ahead(failing())
    next(it)
    with pytest.raises(OSError, match="disk gone"):
        next(it)


def test_read_ahead_stops_and_closes_the_source_when_abandoned() -> None:
    closed = threading.Event()
    produced = []

    def endless() -> Iterator[pa.RecordBatch]:
        try:
            i = 0
            while True:
                produced.append(i)
                yield _batches(1, 1)[0]
                i += 1
        finally:
            closed.set()

    it = read_ahead(endless(), depth=2)
    next(it)
    it.close()  # the consumer gives up (e.g. the writer failed)
    assert closed.wait(5)
    assert len(produced) <= 5  # it never ran far ahead


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_token_bucket_holds_the_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(1000, clock=clock, sleep=clock.sleep)
    bucket.acquire(1000)  # the one-second burst
    assert clock.now == 0
    for _ in range(10):
        bucket.acquire(500)
    assert clock.now == pytest.approx(5.0)  # 5000 bytes more at 1000 B/s
    bucket.acquire(4000)  # a request larger than the bucket waits off its debt
    assert clock.now == pytest.approx(9.0)
    clock.now += 100  # idle time refills at most one burst
    bucket.acquire(2000)
    assert clock.now == pytest.approx(110.0)
    assert bucket.bytes_acquired == 12000 and bucket.waited_seconds == pytest.approx(10.0)


def test_token_bucket_is_shared_fairly_across_threads() -> None:
    clock = FakeClock()
    lock = threading.Lock()

    def sleep(seconds: float) -> None:
        with lock:
            clock.sleep(seconds)

    bucket = TokenBucket(100, burst_seconds=1, clock=clock, sleep=sleep)
    threads = [
        threading.Thread(target=lambda: [bucket.acquire(10) for _ in range(50)]) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 2000 bytes at 100 B/s with a 100-byte burst: at least 19 seconds of waiting in total
    assert bucket.bytes_acquired == 2000
    assert bucket.waited_seconds >= 19 - 1e-6


@pytest.mark.parametrize("rate", [0, -1, True])
def test_token_bucket_rejects_bad_rates(rate: float) -> None:
    with pytest.raises(InvalidArgumentError, match="max_bytes_per_second"):
        TokenBucket(rate)


def test_dictionary_columns_keep_only_repeating_columns() -> None:
    n = 5000
    rng = np.random.default_rng(0)
    sample = pa.record_batch(
        {
            "unique": pa.array(np.arange(n)),
            "floats": pa.array(rng.random(n)),
            "few": pa.array([("a", "b", "c")[i % 3] for i in range(n)]),
            "mostly_null": pa.array([None] * (n - 1) + ["x"], pa.string()),
        }
    )
    assert dictionary_columns(sample) == ("few", "mostly_null")
    assert dictionary_columns(sample.select(["unique", "floats"])) is False
    assert dictionary_columns(sample.select(["few"])) is True
    assert dictionary_columns(sample.slice(0, 10)) is True  # too small to judge
    assert dictionary_columns(None) is True
    nested = pa.record_batch({"l": pa.array([[i] for i in range(n)])})
    assert dictionary_columns(nested) is True
