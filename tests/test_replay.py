from __future__ import annotations

import gzip
import io
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pytest

from peerwatch.model import ProblemLog, SeriesBlock, SeriesKey
from peerwatch.sources.replay import detect_format, read_recording, read_vm_jsonl, write_vm_jsonl

T0 = 1_764_460_800.0


def sample_blocks() -> list[SeriesBlock]:
    rng = np.random.default_rng(7)
    out = []
    for node in ("gpu01", "gpu02"):
        for gpu in ("0", "1"):
            ts = T0 + 30.0 * np.arange(50) + rng.integers(-5, 5, 50) / 1000.0
            vals = rng.normal(70, 3, 50).round(6)
            out.append(SeriesBlock(SeriesKey.of("DCGM_FI_DEV_GPU_TEMP", {"Hostname": node, "gpu": gpu}), ts, vals))
    return out


def roundtrip(data: bytes, tmp_path: Path, name: str = "rec") -> tuple[list[SeriesBlock], ProblemLog]:
    path = tmp_path / name
    path.write_bytes(data)
    problems = ProblemLog()
    return list(read_recording(path, problems)), problems


def jsonl(blocks: list[SeriesBlock]) -> bytes:
    buf = io.BytesIO()
    write_vm_jsonl(blocks, buf)
    return buf.getvalue()


@pytest.mark.parametrize("compress", [False, True])
def test_vm_jsonl_roundtrip_is_exact_plain_and_gzip(tmp_path: Path, compress: bool) -> None:
    blocks = sample_blocks()
    data = jsonl(blocks)
    got, problems = roundtrip(gzip.compress(data) if compress else data, tmp_path, "x.json")
    assert not problems.problems
    assert [b.key for b in got] == [b.key for b in blocks]
    for a, b in zip(got, blocks, strict=True):
        np.testing.assert_array_equal(a.values, b.values)
        np.testing.assert_array_equal(np.rint(a.timestamps * 1000), np.rint(b.timestamps * 1000))


def test_bad_lines_are_reported_by_line_and_the_rest_kept(tmp_path: Path) -> None:
    good = jsonl(sample_blocks()[:1]).strip()
    lines = [
        good,
        b"{not json",
        b'{"metric":{"a":"b"},"values":[1],"timestamps":[1]}',  # no __name__
        b'{"metric":{"__name__":"m"},"values":[1,2],"timestamps":[1]}',
        b"",
        b'{"metric":{"__name__":"m","x":"y"},"values":["NaN",null,3,"+Inf"],"timestamps":[1e12,1e12,2e12,3e12]}',
        b'{"metric":{"__name__":"m"},"values":["abc",1],"timestamps":[1e12,2e12]}',
        good,
    ]
    got, problems = roundtrip(b"\n".join(lines) + b"\n", tmp_path)
    assert len(got) == 4
    where = [p.where.rsplit(":", 1)[1] for p in problems]
    assert where == ["2", "3", "4", "7"]  # special values NaN/null/+Inf are valid; "abc" is not
    assert "2 values but 1 timestamps" in problems.problems[2].message
    special = got[1]
    assert np.isnan(special.values[0]) and np.isnan(special.values[1]) and special.values[2] == 3
    assert np.isposinf(special.values[3])
    assert np.isnan(got[2].values[0]) and got[2].values[1] == 1


def test_truncated_gzip_keeps_what_was_read(tmp_path: Path) -> None:
    power = [replace(b, key=SeriesKey("DCGM_FI_DEV_POWER_USAGE", b.key.labels)) for b in sample_blocks()]
    second = gzip.compress(jsonl(power * 25))  # a gzip of two members, cut in the second
    data = gzip.compress(jsonl(sample_blocks() * 25)) + second[: len(second) // 2]
    got, problems = roundtrip(data, tmp_path, "cut.jsonl.gz")
    assert {b.key.name for b in got} == {"DCGM_FI_DEV_GPU_TEMP"} and len(got) == 100
    messages = [p.message for p in problems]
    assert "truncated or corrupt" in messages[0]
    # The metric the cut went through is set aside: its unread part would read as its series stopping.
    assert "series read before the truncation set aside" in messages[1]
    assert got[-1].key.name != messages[1].split(":")[0]


def test_missing_file_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    problems = ProblemLog()
    assert list(read_recording(tmp_path / "nope.jsonl", problems)) == []
    assert "cannot open" in problems.problems[0].message


@pytest.mark.parametrize(
    ("head", "fmt"),
    [
        (b'{"metric":{}}', "vm-jsonl"),
        (b'\n  \n{"metric"', "vm-jsonl"),
        (b"# HELP x y\n", "prometheus-text"),
        (b"up 1 1700000000000\n", "prometheus-text"),
        (b"", "prometheus-text"),
    ],
)
def test_format_detected_from_content(head: bytes, fmt: str) -> None:
    assert detect_format(head) == fmt


def test_reader_accepts_any_iterable_of_lines() -> None:
    line = orjson.dumps({"metric": {"__name__": "up", "job": "n"}, "values": [1, 0], "timestamps": [1000, 2000]})
    (b,) = read_vm_jsonl([line], "mem", ProblemLog())
    assert b.key == SeriesKey.of("up", {"job": "n"})
    np.testing.assert_array_equal(b.timestamps, [1.0, 2.0])


def test_bare_special_values_as_victoriametrics_writes_them() -> None:
    # VictoriaMetrics 1.79 exports +Inf/-Inf/NaN unquoted: not JSON, but real files hold them.
    line = b'{"metric":{"__name__":"m","le":"+Inf"},"values":[1,+Inf,-Inf,NaN],"timestamps":[1000,2000,3000,4000]}'
    problems = ProblemLog()
    (b,) = read_vm_jsonl([line], "mem", problems)
    assert not problems.problems and b.key.get("le") == "+Inf"
    assert b.values[0] == 1 and np.isposinf(b.values[1]) and np.isneginf(b.values[2]) and np.isnan(b.values[3])


def test_typed_and_careful_reads_agree_and_a_line_the_fast_path_refuses_does_not_stop_it() -> None:
    # Lines simdjson reads into typed buffers (ints and floats mixed, a 2**64-1 counter, exponents)
    # around lines only the careful path reads (bare NaN, numbers as strings, a null, a broken line):
    # every line gives what the careful path alone gives, and the fast path still works after each.
    good = [
        {"metric": {"__name__": "c", "i": str(i)}, "values": [0, 1.5, 18446744073709551615, -2e-7, 3], "timestamps":
         [1000, 2000, 3000, 4000, 5000]}
        for i in range(4)
    ]  # fmt: skip
    odd = [
        b'{"metric":{"__name__":"n"},"values":[NaN,1],"timestamps":[1000,2000]}',
        b'{"metric":{"__name__":"s"},"values":["1.5","2"],"timestamps":[1000,2000]}',
        b'{"metric":{"__name__":"z"},"values":[null,2],"timestamps":[1000,2000]}',
        b'{"metric":{"__name__":"b"},"values":[1,2',
    ]
    lines = [orjson.dumps(good[0]), odd[0], orjson.dumps(good[1]), odd[1], orjson.dumps(good[2]), odd[2]]
    lines += [orjson.dumps(good[3]), odd[3]]
    problems = ProblemLog()
    blocks = {b.key.name + b.key.get("i", ""): b for b in read_vm_jsonl(lines, "mem", problems)}
    assert sorted(blocks) == ["c0", "c1", "c2", "c3", "n", "s", "z"]
    for i in range(4):
        np.testing.assert_array_equal(blocks[f"c{i}"].values, np.array(good[i]["values"], dtype=np.float64))
        np.testing.assert_array_equal(blocks[f"c{i}"].timestamps, [1.0, 2.0, 3.0, 4.0, 5.0])
    assert np.isnan(blocks["n"].values[0]) and blocks["s"].values.tolist() == [1.5, 2.0]
    assert np.isnan(blocks["z"].values[0]) and blocks["z"].values[1] == 2.0
    assert [p.where for p in problems.problems] == ["mem:4", "mem:8"]  # the strings, the cut line (null: missing)


def test_timestamps_read_once_per_text_and_any_key_order_still_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # Timestamps are parsed once per text and found again for the next series of the target. Lines
    # that share them, keys in another order, a label holding the key's own text, and the memory
    # cleared when full (here after two texts) all read as the careful path reads them.
    monkeypatch.setattr("peerwatch.sources.replay.STAMPS_KEPT", 2)
    lines = [
        b'{"metric":{"__name__":"a","i":"0"},"values":[1,2],"timestamps":[1000,2000]}',
        b'{"metric":{"__name__":"a","i":"1"},"values":[3,4],"timestamps":[1000,2000]}',
        b'{"metric":{"__name__":"b"},"timestamps":[5000,6000],"values":[5,6]}',
        b'{"metric":{"__name__":"c","x":",\\"timestamps\\":[7"},"values":[7,8],"timestamps":[7000,8000]}',
        b'{"metric":{"__name__":"d"},"values":[9,10],"timestamps":[9000,10000]}  \n',
        b'{"metric":{"__name__":"e"},"values":[11,12],"timestamps":[1000,2000]}',
    ]
    problems = ProblemLog()
    blocks = list(read_vm_jsonl(lines, "mem", problems))
    assert not problems.problems
    careful = [orjson.loads(line) for line in lines]
    assert [b.key.name for b in blocks] == [c["metric"]["__name__"] for c in careful]
    for b, c in zip(blocks, careful, strict=True):
        assert b.key.get("x") == c["metric"].get("x")
        np.testing.assert_array_equal(b.values, c["values"])
        np.testing.assert_array_equal(b.timestamps, np.array(c["timestamps"]) / 1000.0)
