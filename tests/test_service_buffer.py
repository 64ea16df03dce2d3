"""The live service's sample buffer: overlapping fetches, reads of part of a fetch, release and span."""

from __future__ import annotations

import numpy as np

from peerwatch.frames.buffer import SampleBuffer
from peerwatch.model import SeriesBlock, SeriesKey

A = SeriesKey("m", (("instance", "a"),))
B = SeriesKey("m", (("instance", "b"),))


def block(key: SeriesKey, ts: list[float]) -> SeriesBlock:
    return SeriesBlock(key, np.array(ts), np.array(ts) * 10, "gauge")


def test_overlapping_fetches_never_double_a_sample_and_a_read_takes_its_part_of_each_fetch() -> None:
    buffer = SampleBuffer(span=1000.0)
    assert buffer.add([block(A, [10, 20, 30]), block(B, [15, 25])]) == 5
    assert buffer.add([block(A, [20, 30, 40, 50]), block(B, [25, 35])]) == 3  # a TSDB read re-reading its last steps
    ids, ts, vals = buffer.between(20, 40)
    assert sorted(zip(ids.tolist(), ts.tolist(), strict=True)) == [(0, 30.0), (0, 40.0), (1, 25.0), (1, 35.0)]
    assert np.array_equal(vals, ts * 10)
    assert [(b.key, b.timestamps.tolist()) for b in buffer.blocks(0, 100)] == [
        (A, [10.0, 20.0, 30.0, 40.0, 50.0]),
        (B, [15.0, 25.0, 35.0]),
    ]
    assert buffer.between(50, 100)[0].size == 0 and buffer.between(60, 100)[0].dtype == np.int64


def test_released_fetches_and_those_older_than_the_span_are_forgotten() -> None:
    buffer = SampleBuffer(span=100.0)
    buffer.add([block(A, [10, 20])])
    buffer.add([block(A, [30, 40])])
    buffer.release(20)  # the first fetch was judged
    assert buffer.samples == 2 and buffer.oldest() == 30
    buffer.add([block(B, [200])])  # the second fetch is now older than the span
    assert buffer.samples == 1 and buffer.series == 2 and buffer.newest == 200


def test_keys_share_one_copy_of_each_label_string_and_pair() -> None:
    def fresh(*parts: str) -> str:  # a new str object each time, as a parser makes them
        return "".join(list("".join(parts)))

    buffer = SampleBuffer(span=1000.0)
    keys = [
        SeriesKey(fresh("DCGM_FI_DEV_GPU_TEMP"), ((fresh("Hostname"), fresh("gpu001")), ("gpu", str(g))))
        for g in range(3)
    ]
    assert keys[0].labels[0][1] is not keys[1].labels[0][1]
    buffer.add(block(k, [10]) for k in keys)
    held = [key for key, _ in buffer.series_of(0, 3)]
    assert held == keys
    assert held[0].name is held[1].name is held[2].name
    assert held[0].labels[0] is held[1].labels[0] is held[2].labels[0]  # ("Hostname", "gpu001"), once
    assert buffer.add([block(keys[1], [20])]) == 1 and buffer.series == 3  # the original key still finds its id
