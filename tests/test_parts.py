"""A large export read in parts by child processes (frames/parts.py) gives what one process gives."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import orjson
import pytest

from peerwatch.engine import read_frames
from peerwatch.frames import FrameBuilder, Part, parts
from peerwatch.frames.frame_store import Rows
from peerwatch.model import ProblemLog
from peerwatch.series_budget import SeriesBudget

T0 = 1_764_460_800_000  # ms
STEP = 30.0


def export(path: Path) -> None:
    """An export that puts each reading difficulty on both sides of a cut: each series in two lines
    far apart that overlap by 20 steps (one sample of node 2 read again with another value: a
    conflict), families met only in the second half, broken lines, a BOM."""
    lines = []
    for half in (0, 1):
        for family in ("DCGM_FI_DEV_GPU_TEMP", "node_load1", f"late_{half}_total"):
            for node in range(6):
                stamps = T0 + 30_000 * np.arange(140) + (node * 37) % 900
                values = np.random.default_rng(node).normal(50, 5, stamps.size).round(3)
                part = slice(half * 60, half * 60 + 80)
                stamps, values = stamps[part], values[part]
                if half == 1 and node == 2:
                    values[0] += 1.0
                metric = {"__name__": family, "instance": f"gpu{node:02d}:9400", "job": "dcgm"}
                lines.append(orjson.dumps({"metric": metric, "values": values.tolist(), "timestamps": stamps.tolist()}))
        lines.append(b'{"metric":{"__name__":"broken"},"values":[1,2')
    path.write_bytes(b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n")


def outcome(b: FrameBuilder, problems: ProblemLog) -> tuple[object, ...]:
    """Frames to the bit, series and problems. Not ``samples``, nor the problems' order: conflicts
    are noted when a batch of samples is placed, so both follow where batches end."""
    frames = b.build()
    return (
        [(n, f.keys, f.values.tobytes(), f.last_seen.tobytes()) for n, f in frames.items()],
        b.series,
        sorted(str(p) for p in problems),
    )


def read(path: Path, jobs: int, **kw: object) -> tuple[object, ...]:
    problems = ProblemLog()
    b = read_frames([str(path)], jobs=jobs, problems=problems, now=T0 / 1000 + 86_400, **kw)  # type: ignore[arg-type]
    return outcome(b, problems)


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every file counts as large; the parts taken in from a child are counted."""
    monkeypatch.setattr(parts, "MIN_BYTES", 0)
    seen: list[bool] = []
    absorb = FrameBuilder.absorb

    def counted(self: FrameBuilder, part: Part, kept: set[int]) -> bool:
        seen.append(absorb(self, part, kept))
        return seen[-1]

    monkeypatch.setattr(FrameBuilder, "absorb", counted)
    return seen


@pytest.mark.parametrize(("jobs", "method"), [(2, "fork"), (2, "forkserver"), (3, "fork")])
def test_parts_read_by_children_give_what_one_process_reads(
    tmp_path: Path, taken: list[bool], jobs: int, method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parts, "start_context", lambda: multiprocessing.get_context(method))
    path = tmp_path / "export.jsonl"
    export(path)
    one = read(path, 1, step=STEP)
    assert not taken
    assert read(path, jobs, step=STEP) == one
    assert taken == [True] * (jobs - 1)
    _, _, problems = one
    assert [p.split(":")[1] for p in problems[:2]] == ["19", "38"]  # the file's line numbers; the BOM gone
    assert len(problems) == 4 and all("the last read is kept" in p for p in problems[2:])  # once per series


def test_a_part_the_budget_would_cut_is_read_here_in_order(tmp_path: Path, taken: list[bool]) -> None:
    # The run's budget is reached in the child's part (the family met only at the end of the file):
    # its part is read here, so that the first series read are the ones kept, as in one process.
    path = tmp_path / "export.jsonl"
    export(path)
    budget = SeriesBudget(total=20)
    one = read(path, 1, step=STEP, budget=budget)
    assert read(path, 2, step=STEP, budget=budget) == one
    assert taken == [False]
    assert any("series budget of the run 20" in p for p in one[-1])  # type: ignore[union-attr]


def test_the_step_judged_from_the_file_head_and_a_small_head_reads_here(tmp_path: Path, taken: list[bool]) -> None:
    # Without --step, the grid's step is judged from the first series read: parts begun before that
    # (here the whole file) are read in this process.
    path = tmp_path / "export.jsonl"
    export(path)
    assert read(path, 2) == read(path, 1)
    assert taken == []


def test_a_failed_child_leaves_its_part_to_this_process(tmp_path: Path) -> None:
    failed: Future[parts.Shared] = Future()
    failed.set_exception(MemoryError("no room"))
    with parts._result(failed, tmp_path) as got:
        assert got is None


def test_only_one_large_plain_export_is_read_in_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "export.jsonl"
    export(path)
    text = tmp_path / "node.prom"
    text.write_bytes(b"node_load1 1\n" * 100)
    assert parts.file_parts([str(path)], 2) is None  # small
    monkeypatch.setattr(parts, "MIN_BYTES", 0)
    assert parts.file_parts([str(path)], 1) is None
    assert parts.file_parts([str(text)], 2) is None
    assert parts.file_parts([str(path), str(path)], 2) is None
    assert parts.file_parts(["http://vm:8428"], 2) is None
    found = parts.file_parts([str(path)], 3)
    assert found is not None and found[1][0] == 0 and found[1][-1] == path.stat().st_size and len(found[1]) == 4


def test_a_full_dev_shm_is_a_failed_child_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    # Docker gives /dev/shm 64 MB: a grid larger than what is free is refused before it is written.
    monkeypatch.setattr(parts, "_shm_free", lambda: 1000)
    rows = Rows(vals=np.zeros((10, 32)), offs=np.zeros((10, 32), dtype=np.float32))
    with pytest.raises(MemoryError, match="MB free"):
        parts.Shared.share(Part({"m": rows}, 0, frozenset(), ProblemLog(), False))


def test_a_part_is_read_as_the_export_its_file_was_judged(tmp_path: Path, taken: list[bool]) -> None:
    # An export whose second half is Prometheus text: one process reads the whole file as an
    # export (each text line a bad line); the child's part must not judge its format afresh.
    path = tmp_path / "export.jsonl"
    export(path)
    path.write_bytes(path.read_bytes() + b'node_load1{instance="gpu00:9100"} 1\n' * 5000)  # most of the file
    assert read(path, 2, step=STEP) == read(path, 1, step=STEP)
    assert taken == [True]
