"""NCCL hang culprit: line formats of PyTorch 1.13-2.6+, log folders with one or several culprits,
flight-recorder dumps, noise, and the command line."""

from __future__ import annotations

import gzip
import json
import pickle
import random
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from peerwatch.model import ProblemLog
from peerwatch.training import LogDirError, find_culprits
from peerwatch.training.commands import app
from peerwatch.training.nccl_lines import parse_line
from peerwatch.training.nccl_logs import names_from_path

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"

TIMEOUT_221 = (
    "[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5091, "
    "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            TIMEOUT_221,
            {
                "kind": "timeout",
                "seq": 5091,
                "op": "ALLREDUCE",
                "timeout_ms": 600000,
                "ran_ms": 600012,
                "pg": None,
                "pg_rank": 3,
                "global_rank": None,
            },
        ),
        (
            "[rank3]:[E1016 09:12:45.123456 1234 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective "
            "operation "
            "timeout: WorkNCCL(SeqNum=5091, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
            "600012 "
            "milliseconds before timing out.",
            {
                "kind": "timeout",
                "seq": 5091,
                "global_rank": 3,
                "timeout_ms": 600000,
                "ts": ((289 * 24 + 9) * 3600 + 765.123456),
            },
        ),
        (
            "  what():  [PG 0 Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, "
            "OpType=_ALLGATHER_BASE, NumelIn=8, NumelOut=64, Timeout(ms)=1800000) ran for 1800087 milliseconds before "
            "timing out.",
            {"kind": "timeout", "seq": 7, "op": "_ALLGATHER_BASE", "pg": "0", "pg_rank": 3},
        ),
        (
            "[default2]:[rank10]:[E1016 09:12:45.1 7 torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:632] [PG "
            "ID 1 PG GUID "
            "1(TENSOR_PARALLEL) Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=77, "
            "OpType=ALLGATHER,"
            " NumelIn=4, NumelOut=32, Timeout(ms)=600000) ran for 600001 milliseconds before timing out.",
            {
                "kind": "timeout",
                "global_rank": 10,
                "local_rank": 2,
                "pg": "1",
                "pg_desc": "TENSOR_PARALLEL",
                "pg_rank": 2,
            },
        ),
        (
            "[rank11]:[E1016 09:12:45.123456 1234 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank "
            "11] Timeout"
            " at NCCL work: 5091, last enqueued NCCL work: 5091, last completed NCCL work: 5090.",
            {"kind": "progress", "seq": 5091, "enqueued": 5091, "completed": 5090, "pg": "0", "pg_desc": "default_pg"},
        ),
        (
            "[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank 5] Exception (either an error or timeout) detected by "
            "watchdog at "
            "work: 12, last enqueued NCCL work: 12, last completed NCCL work: 11.",
            {"kind": "progress", "seq": 12, "enqueued": 12, "completed": 11, "pg": "0", "pg_rank": 5},
        ),
        (
            "[rank5]:[E1016 09:12:46.000000 99 ProcessGroupNCCL.cpp:1400] [PG 0 (default_pg) Rank 5] Received a "
            "dump signal "
            "due to a collective timeout from  rank 0 and we will try our best to dump the debug info. Last "
            "enqueued NCCL "
            "work: 5090, last completed NCCL work: 5090.This is most likely caused by incorrect usages of collectives",
            {
                "kind": "progress",
                "seq": None,
                "enqueued": 5090,
                "completed": 5090,
                "from_rank": 0,
                "pg_desc": "default_pg",
            },
        ),
        (
            "[rank1]:[E1016 09:12:46.0 9 ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank 1] "
            "failure detected"
            " by watchdog at work sequence id: 42 PG status: last enqueued work: 42, last completed work: 41",
            {"kind": "progress", "seq": 42, "enqueued": 42, "completed": 41},
        ),
        (
            "[PG ID 0 PG GUID 0(default_pg) Rank 4] ProcessGroupNCCL's watchdog got stuck for 480 seconds "
            "without making "
            "progress in monitoring enqueued collectives.",
            {"kind": "watchdog_stuck", "pg_rank": 4},
        ),
        (
            "[E ProcessGroupNCCL.cpp:1202] [PG 0 Rank 4] Heartbeat monitor timed out! Process will be terminated after "
            "dumping debug info. workMetaList_.size()=1",
            {"kind": "watchdog_stuck"},
        ),
        (
            "[rank3]:[W1016 11:42:13.0 3 ProcessGroupNCCL.cpp:1341] [PG ID 0 PG GUID 0(default_pg) Rank 3] Could "
            "not acquire"
            " GIL within 300 ms on exit, possible GIL induced hang",
            {"kind": "gil", "global_rank": 3},
        ),
        (
            "gpu068:12345:12400 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer "
            "10.0.0.5<41234> "
            "with error 12",
            {"kind": "nccl_warn", "host": "gpu068", "local_rank": 3},
        ),
        (
            "[default3]:gpu068:12345:12345 [3] NCCL INFO comm 0x55d1 rank 11 nRanks 16 nNodes 2 localRanks 8 "
            "localRank 3 "
            "MNNVL 0",
            {"kind": "comm", "comm_rank": 11, "size": 16, "local_rank": 3, "host": "gpu068"},
        ),
        (
            "[PG 1 (TENSOR_PARALLEL) Rank 2] ProcessGroupNCCL initialization options: size: 8, global rank: 10, "
            "TIMEOUT(ms): 600000",
            {"kind": "pg_init", "size": 8, "global_rank": 10, "pg": "1"},
        ),
        ("  rank      : 9 (local_rank: 1)", {"kind": "elastic_rank", "global_rank": 9, "local_rank": 1}),
        ("  host      : gpu068", {"kind": "elastic_host", "host": "gpu068"}),
        ("using world size: 16, data-parallel size: 2", {"kind": "world", "size": 16}),
        ("Initializing: WORLD_SIZE=8 RANK=5", {"kind": "world", "size": 8}),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", {"kind": "error"}),
        ("gpu068:12345:12345 [3] NCCL INFO Bootstrap : Using ib0:10.0.0.68<0>", None),
        ("step 5090 | loss 2.31 | step_time 0.91s", None),
        ("frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout() + 0x1d2 (0x7f in libtorch_cuda.so)", None),
        (  # PyTorch 1.x: no SeqNum
            "Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=1)",
            {"kind": "timeout", "seq": None, "op": "ALLREDUCE"},
        ),
        ("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=", None),  # cut off
        ("\x00\x1b[31mgarbage \udcff", None),
        ("", None),
    ],
)
def test_line_formats(line: str, expected: dict[str, Any] | None) -> None:
    event = parse_line(line, 7)
    if expected is None:
        assert event is None
        return
    assert event is not None and event.lineno == 7
    got = {k: getattr(event, k) for k in expected}
    assert got == pytest.approx(expected) if "ts" in expected else got == expected


@pytest.mark.parametrize(
    ("name", "rank", "host"),
    [
        ("rank3.log", 3, None),
        ("gpu068.log", None, "gpu068"),
        ("gpu068-rank3.out", 3, "gpu068"),
        ("node-017_rank_12.log.gz", 12, "node-017"),
        ("nccl_trace_rank_5", 5, None),
        ("nccl_trace_rank_5.json", 5, None),
        ("slurm-123456.out", None, None),
        ("train.log", None, None),
        ("worker-rank-2.txt", 2, None),
    ],
)
def test_names_from_file(tmp_path: Path, name: str, rank: int | None, host: str | None) -> None:
    assert names_from_path(tmp_path / name, tmp_path) == (rank, host)


def test_folder_name_is_the_host_when_the_file_says_none(tmp_path: Path) -> None:
    assert names_from_path(tmp_path / "gpu071" / "rank2.log", tmp_path) == (2, "gpu071")


# fixture -> culprit ranks, culprit hosts, seq, op, lowest confidence, highest confidence, phrase in the evidence
FOLDERS = [
    ("pt21_rank_files", (5,), (), 5091, "ALLREDUCE", 0.7, 0.8, "no timeout for SeqNum 5091"),
    ("pt24_host_files", (6,), ("gpu069",), 5091, "ALLREDUCE", 0.85, 0.95, "never reached SeqNum 5091"),
    ("pt26_two_culprits", (3, 12), ("node-a07", "node-b12"), 42, "_ALLGATHER_BASE", 0.85, 0.95, "older SeqNum 41"),
    ("silent_host", (2, 3), (), 2404, "ALLREDUCE", 0.55, 0.65, "ranks 2-3 would be one host"),
    ("all_timed_out", (), (), 310, "ALLREDUCE", 0.1, 0.3, "peers named: 10.0.2.17 (4x)"),
    ("op_mismatch", (2,), (), 100, "ALLREDUCE", 0.85, 0.95, "BROADCAST #100 while the others ran ALLREDUCE"),
]


@pytest.mark.parametrize(("folder", "ranks", "hosts", "seq", "op", "low", "high", "phrase"), FOLDERS)
def test_fixture_folders(
    folder: str, ranks: tuple[int, ...], hosts: tuple[str, ...], seq: int, op: str, low: float, high: float, phrase: str
) -> None:
    problems = ProblemLog()
    v = find_culprits(FIXTURES / folder, problems)
    assert (v.culprit_ranks, v.culprit_hosts) == (ranks, hosts), v.evidence
    assert v.hang is not None and (v.hang.seq, v.hang.op) == (seq, op)
    assert low <= v.confidence <= high
    assert any(phrase in e for e in v.evidence), v.evidence
    assert not len(problems)


def test_secondary_group_is_reported_but_the_first_timeout_wins() -> None:
    v = find_culprits(FIXTURES / "pt26_two_culprits", ProblemLog())
    assert v.hang is not None and v.hang.pg == "0" and v.world_size == 16
    assert any("also PG 2 (TENSOR_PARALLEL): 7 rank(s) wait on SeqNum 77" in e for e in v.evidence)
    assert any("Could not acquire GIL" in e and e.startswith("rank 3") for e in v.evidence)


def test_local_ranks_are_mapped_to_global_ranks_and_hosts() -> None:
    v = find_culprits(FIXTURES / "pt24_host_files", ProblemLog())
    hosts = {s.rank: s.host for s in v.ranks}
    assert hosts == {r: "gpu068" if r < 4 else "gpu069" for r in range(8)}
    assert {s.reason for s in v.ranks if s.rank != 6} == {"timed_out"}


@pytest.mark.parametrize(
    ("folder", "world", "ranks", "reasons"),
    [
        ("all_timed_out", 6, (4, 5), {"silent": 2, "timed_out": 4}),  # two ranks left no log at all
        ("pt24_host_files", 10, (6,), {"behind": 1, "silent": 2, "timed_out": 7}),  # stronger evidence wins
    ],
)
def test_world_size_option_names_silent_ranks(
    folder: str, world: int, ranks: tuple[int, ...], reasons: dict[str, int]
) -> None:
    v = find_culprits(FIXTURES / folder, ProblemLog(), world)
    assert v.culprit_ranks == ranks and v.world_size == world and v.world_source == "--world-size"
    counts: dict[str, int] = {}
    for s in v.ranks:
        counts[s.reason] = counts.get(s.reason, 0) + 1
    assert counts == reasons


def _copy(folder: str, tmp_path: Path) -> Path:
    dest = tmp_path / folder
    shutil.copytree(FIXTURES / folder, dest)
    return dest


@pytest.mark.parametrize("folder", [f[0] for f in FOLDERS])
def test_noise_and_gzip_do_not_change_the_verdict(folder: str, tmp_path: Path) -> None:
    dest = _copy(folder, tmp_path)
    rng = random.Random(5)
    junk = [
        "",
        "\x00\x01\x02 binary",
        "NCCL INFO half a line",
        "[rank",
        "WorkNCCL(SeqNum=",
        "[E ProcessGroupNCCL.cpp",
        "Traceback (most recent call last):",
        '  File "train.py", line 12, in <module>',
        "x" * 5000,
    ]
    files = sorted(dest.iterdir())
    for path in files:
        lines = path.read_text().splitlines()
        for _ in range(30):
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(junk))
        path.write_text("\n".join(lines))
    first = files[0]
    first.with_name(first.name + ".gz").write_bytes(gzip.compress(first.read_bytes()))
    first.unlink()
    (dest / ".hidden").write_text("[rank0]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)")
    expected = find_culprits(FIXTURES / folder, ProblemLog())
    got = find_culprits(dest, ProblemLog())
    assert (got.culprit_ranks, got.culprit_hosts, got.hang, got.confidence) == (
        expected.culprit_ranks,
        expected.culprit_hosts,
        expected.hang,
        expected.confidence,
    )


def _dump(last: int, completed: int, with_status: bool = True) -> dict[str, Any]:
    entries = [
        {
            "record_id": s,
            "pg_id": 0,
            "process_group": ["0", "default_pg"],
            "collective_seq_id": s,
            "p2p_seq_id": 0,
            "op_id": s,
            "profiling_name": "nccl:all_reduce",
            "time_created_ns": s * 10**9,
            "input_sizes": [[1024]],
            "output_sizes": [[1024]],
            "state": "completed" if s <= completed else "started",
            "retired": False,
            "timeout_ms": 600000,
            "is_p2p": False,
            "frames": [{"name": "all_reduce", "filename": "t.py", "line": 3}],
        }
        for s in range(last - 3, last + 1)
    ]
    entries.append(
        {**entries[-1], "collective_seq_id": None, "p2p_seq_id": 9, "is_p2p": True, "profiling_name": "nccl:send"}
    )
    out: dict[str, Any] = {
        "version": "2.4",
        "entries": entries,
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
    }
    if with_status:
        out["pg_status"] = {
            "0": {
                "last_enqueued_collective": last,
                "last_started_collective": last,
                "last_completed_collective": completed,
            }
        }
    return out


def test_flight_recorder_dumps(tmp_path: Path) -> None:
    for rank in range(4):
        dump = _dump(41, 41) if rank == 2 else _dump(42, 41, with_status=rank != 1)
        path = tmp_path / f"nccl_trace_rank_{rank}"
        if rank == 3:
            path.with_suffix(".json").write_text(json.dumps(dump))
        else:
            path.write_bytes(pickle.dumps(dump))
    v = find_culprits(tmp_path, ProblemLog())
    assert v.culprit_ranks == (2,) and v.hang is not None and v.hang.seq == 42 and v.hang.op == "all_reduce"
    assert v.confidence == pytest.approx(0.9) and v.world_size == 4
    assert any("last enqueued work 41, last completed 41: never reached SeqNum 42" in e for e in v.evidence)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (pickle.dumps({"entries": [Path("/etc/passwd")]}), "refusing to load pathlib"),
        (pickle.dumps({"no": "entries"}), "no 'entries' list"),
        (b"\x80\x04truncated", "not a flight-recorder dump"),
    ],
)
def test_bad_dumps_are_problems_not_crashes(tmp_path: Path, payload: bytes, message: str) -> None:
    shutil.copytree(FIXTURES / "pt24_host_files", tmp_path / "logs")
    (tmp_path / "logs" / "nccl_trace_rank_0").write_bytes(payload)
    problems = ProblemLog()
    v = find_culprits(tmp_path / "logs", problems)
    assert v.culprit_ranks == (6,)
    assert [p.where for p in problems] == [str(tmp_path / "logs" / "nccl_trace_rank_0")]
    assert message in problems.problems[0].message


def test_logs_without_a_hang(tmp_path: Path) -> None:
    (tmp_path / "rank0.log").write_text("step=1 loss=2.0\n[rank0]:gpu1:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2\n")
    v = find_culprits(tmp_path, ProblemLog())
    assert v.hang is None and v.culprit_ranks == () and v.confidence == 0.0
    assert "no NCCL watchdog timeout" in v.evidence[0]


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_unusable_logdir(tmp_path: Path, make: str) -> None:
    target = tmp_path / "logs"
    if make == "empty":
        target.mkdir()
    with pytest.raises(LogDirError, match=str(target)):
        find_culprits(target, ProblemLog())


def test_files_and_folders_together_are_one_job(tmp_path: Path) -> None:
    files = sorted((FIXTURES / "pt24_host_files").iterdir())
    (tmp_path / "gpu069").mkdir()
    shutil.copy(files[1], tmp_path / "gpu069" / "gpu069.log")
    v = find_culprits([files[0], tmp_path / "gpu069"], ProblemLog())
    assert v.culprit_ranks == (6,) and v.culprit_hosts == ("gpu069",)
    alone = find_culprits(files[0], ProblemLog())  # rank 6's host missing: nobody is behind
    assert alone.culprit_ranks == () and alone.level == "none"


def test_cli_nccl_hang() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["nccl-hang", str(FIXTURES / "pt26_two_culprits"), "--json"])
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.stdout)
    assert out["culprit_ranks"] == [3, 12] and out["culprit_hosts"] == ["node-a07", "node-b12"]
    assert (out["seq"], out["op_type"], out["timeout_ms"]) == (42, "_ALLGATHER_BASE", 1800000)
    assert len(out["ranks"]) == 16 and out["process_group"] == {"id": "0", "desc": "default_pg", "named": True}
    text = runner.invoke(app, ["nccl-hang", str(FIXTURES / "pt24_host_files")])
    assert text.exit_code == 0 and "culprit rank(s): 6" in text.stdout and "gpu069" in text.stdout
    missing = runner.invoke(app, ["nccl-hang", str(FIXTURES / "nope")])
    assert missing.exit_code == 2 and "no such file or directory" in missing.output
    assert "confidence: high: rank(s) 6 reported it themselves (rank 6: last enqueued work 5090" in text.stdout
    silent = runner.invoke(app, ["nccl-hang", str(FIXTURES / "all_timed_out"), "--world-size", "6", "--json"])
    assert orjson.loads(silent.stdout)["culprit_ranks"] == [4, 5]
