"""nccl-hang: line prefixes, wrapped messages, culprit reports and how sure the answer is.

Lines marked "synthetic" are written here after the formats of PyTorch, NCCL and the launchers;
the others are real logs from tests/data/nccl (see SOURCE.md there).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from peerwatch.model import ProblemLog
from peerwatch.training import find_culprits
from peerwatch.training.commands import app
from peerwatch.training.nccl_lines import parse_line
from peerwatch.training.nccl_prefix import split_prefix
from peerwatch.training.nccl_reports import read_reports
from peerwatch.training.nccl_wrap import rejoin

DATA = Path(__file__).parent / "data" / "nccl"
TIMEOUT = (
    "[E1 1 ProcessGroupNCCL.cpp:607] [Rank {g}] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600001 milliseconds "
    "before timing out."
)


@pytest.mark.parametrize(
    ("line", "rank", "local", "host", "rest"),
    [  # synthetic, after the launchers' formats
        ("[80746] [rank0]:[E321 02:07:08.4 1 ProcessGroupNCCL.cpp:607] x", 0, None, None, "[E321"),
        (
            "dinov2.cn-d004 [stderr] [rank14]:[E909 09:55:29.3 1 ProcessGroupNCCL.cpp:607] x",
            14,
            None,
            "dinov2.cn-d004",
            "[",
        ),
        ("[1,3]<stderr>:gpu7:12:34 [1] NCCL INFO Bootstrap", 3, None, None, "gpu7:12:34"),
        ("0: [rank8]:[E1016 03:31:38.9 1 ProcessGroupNCCL.cpp:607] x", 8, None, None, "[E1016"),
        ("12: gpu3:1:2 [0] NCCL INFO x", None, None, None, "gpu3:1:2"),
        ("gpu068: [default3]:[rank11]: step 5", 11, 3, "gpu068", "step 5"),
        ("(RayWorkerWrapper pid=4009, ip=10.0.0.5) [rank1]:[E ProcessGroupNCCL.cpp:563] x", 1, None, "10.0.0.5", "[E"),
        ("[36m(RayWorkerWrapper pid=4009) [rank1]:[E ProcessGroupNCCL.cpp:563] x", 1, None, None, "[E"),
        (" 2025-02-18 12:54 ncivki7:180:915 [7] NCCL INFO misc/socket.cc:47 -> 3", None, None, None, "ncivki7:180:915"),
        ("18:11:06.680 [rank4]:[E205 18:11:06.3 1 ProcessGroupNCCL.cpp:1870] x", 4, None, None, "[E205"),
        (
            "Epoch 0:   6%|██   | 3/50 [6:28<94:39][rank5]:[E602 11:17:52.1 1 ProcessGroupNCCL.cpp:632] x",
            5,
            None,
            None,
            "[",
        ),
        ("[1] finished collective #3, but didn't join collective #4", None, None, None, "[1] finished"),
    ],
)
def test_prefixes(line: str, rank: int | None, local: int | None, host: str | None, rest: str) -> None:
    p = split_prefix(line)
    assert (p.global_rank, p.local_rank, p.host) == (rank, local, host)
    assert p.rest.startswith(rest)


def test_global_rank_is_kept_apart_from_the_group_rank() -> None:
    e = parse_line("[rank4]:[E ProcessGroupNCCL.cpp:1316] [PG 5 Rank 0] Heartbeat monitor timed out! x", 1)
    assert e is not None and (e.kind, e.global_rank, e.pg, e.pg_rank) == ("watchdog_stuck", 4, "5", 0)


def test_wrapped_messages_are_rejoined() -> None:
    viewer = [  # synthetic: a log viewer wrapping at a space
        "h1 [stderr] [rank3]:[E909 09:55:29.3 1 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective "
        "operation timeout: ",
        "WorkNCCL(SeqNum=2070, OpType=REDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600034 milliseconds "
        "before timing out.",
        "h1 [stderr] [rank3]:[E909 09:55:29.3 1 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank 3] Exception "
        "(either an error or timeout) detected",
        "by watchdog at work: 2070, last enqueued NCCL work: 2070, last completed NCCL work: 2069.",
        "an unrelated line",
    ]
    records = rejoin(viewer)
    assert [n for n, _ in records] == [1, 3, 5]
    first, second = (parse_line(text, n) for n, text in records[:2])
    assert first is not None and (first.kind, first.seq, first.op) == ("timeout", 2070, "REDUCE")
    assert second is not None and (second.kind, second.seq, second.enqueued) == ("progress", 2070, 2070)
    terminal = [  # synthetic: a terminal cutting mid-word at its width
        "[rank2]:[E424 01:11:21.1 1 ProcessGroupNCCL.cpp:629] [Rank 2] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=4, OpTy",
        "pe=BROADCAST, NumelIn=112, NumelOut=112, Timeout(ms)=1800000) ran for 1800010 milliseconds before timing out.",
    ]
    [(n, text)] = rejoin(terminal)
    e = parse_line(text, n)
    assert e is not None and (e.seq, e.op, e.ran_ms) == (4, "BROADCAST", 1800010)


def test_cut_paste_keeps_the_seqnum_and_drops_a_cut_field() -> None:
    e = parse_line("[E ProcessGroupNCCL.cpp:737] [Rank 5] Watchdog caught collective operation timeout: "
                   "WorkNCCL(SeqNum=469508, OpType=ALLR", 1)  # fmt: skip
    assert e is not None and (e.kind, e.seq, e.op) == ("timeout", 469508, None)


@pytest.mark.parametrize(
    ("text", "kind", "culprits", "ahead"),
    [  # synthetic, after PyTorch's TraceUtils.h, fr_trace and ncclras
        ("\t   - [47] joined but didn't finish collective #41207 (count from 1)", "desync", (47,), ()),
        ("\t     [0, 1, 2] finished collective #41207, but didn't join collective #41208 (count from 1)",
         "desync", (0, 1, 2), ()),
        (" - To our best knowledge, ranks [5, 9] are the lagging ranks that caused this timeout.",
         "desync", (5, 9), ()),
        ("Not all ranks joining collective for group 0:default_pg collective nccl:all_reduce Missing ranks are {2, 3}",
         "flight_recorder", (2, 3), ()),
        ("  Missing communicator data from 1 rank\n  Rank 9 -- GPU 1 managed by process 77 on node gpu2",
         "ras_missing", (9,), ()),
        ("  Communicator ranks have different AllReduce operation counts\n  7 ranks have launched up to operation 12\n"
         "  1 rank has launched up to operation 11\n  Rank 4 -- GPU 4 managed by process 7 on node gpu1",
         "ras_mismatch", (4,), ()),
        ("  Communicator ranks have different AllReduce operation counts\n  7 ranks have launched up to operation 11\n"
         "  1 rank has launched up to operation 12\n  Rank 4 -- GPU 4 managed by process 7 on node gpu1",
         "ras_mismatch", (), (4,)),
    ],
)  # fmt: skip
def test_reports_that_name_culprits(text: str, kind: str, culprits: tuple[int, ...], ahead: tuple[int, ...]) -> None:
    reports = read_reports(list(enumerate(text.split("\n"), 1)))
    assert [(r.kind, r.culprits, r.ahead) for r in reports] == [(kind, culprits, ahead)]


def test_one_rank_of_many_reporting_names_nobody(tmp_path: Path) -> None:
    (tmp_path / "job.log").write_text("[rank7]:" + TIMEOUT.format(g=7, seq=88) + "\n")  # synthetic
    v = find_culprits(tmp_path, ProblemLog(), world=128)
    assert v.culprit_ranks == () and v.level == "none"
    assert "127 of 128 rank(s) left no timeout" in v.reason and "too little is known" in v.reason


def test_a_rank_missing_from_a_paste_is_only_a_guess() -> None:
    v = find_culprits(DATA / "ofa_271.log", ProblemLog(), world=8)
    assert v.culprit_ranks == (0, 4) and v.level == "low" and v.reason.startswith("a guess")
    assert find_culprits(DATA / "ofa_271.log", ProblemLog()).culprit_ranks == ()  # without the world size: none


def test_a_log_naming_the_culprit_is_certain() -> None:
    v = find_culprits(DATA / "nccl_2213_desync.log", ProblemLog())
    assert v.culprit_ranks == (1,) and v.level == "certain" and "didn't join collective #1155874" in v.reason
    assert v.to_dict()["named_by_log"] == [
        "desync (line 10): [1] finished collective #1155873, but didn't join collective #1155874"
    ]


def test_seqnums_of_unnamed_groups_are_not_compared() -> None:
    v = find_culprits(DATA / "pytorch_118369.log", ProblemLog())  # [Rank 7] at 64088, [Rank 0] at 96117..96125
    assert v.culprit_ranks == () and not any(s.reason == "behind" for s in v.ranks)
    assert any("also unnamed group" in e for e in v.evidence)


def test_groups_with_the_same_id_and_other_guids_are_apart(tmp_path: Path) -> None:
    lines = [  # synthetic: PG ids repeat across ranks, GUIDs do not
        "[rank13]:" + TIMEOUT.format(g=1, seq=216),
        "[rank13]:[E218 1 ProcessGroupNCCL.cpp:1795] [PG ID 11 PG GUID 119 Rank 1] Exception (either an error or "
        "timeout) detected by watchdog at work: 216, last enqueued NCCL work: 220, last completed NCCL work: 215.",
        "[rank15]:" + TIMEOUT.format(g=0, seq=57),
        "[rank15]:[E218 1 ProcessGroupNCCL.cpp:1795] [PG ID 11 PG GUID 112 Rank 0] Exception (either an error or "
        "timeout) detected by watchdog at work: 57, last enqueued NCCL work: 57, last completed NCCL work: 56.",
    ]
    (tmp_path / "paste.txt").write_text("\n".join(lines))
    v = find_culprits(tmp_path / "paste.txt", ProblemLog())
    assert v.culprit_ranks == () and v.hang is not None and v.hang.reporters == 1
    assert v.reporting == (13, 15)


def test_disagreeing_ops_without_a_majority_name_nobody() -> None:
    v = find_culprits(DATA / "nccl_1409.log", ProblemLog())
    assert v.culprit_ranks == () and any("disagree" in e and "BROADCAST" in e for e in v.evidence)


def test_json_says_how_sure_and_where(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["nccl-hang", str(DATA / "milabench_269" / "first.log"), str(DATA / "milabench_269" / "second.log"), "--json"],
    )
    assert result.exit_code == 0, result.output
    out = orjson.loads(result.stdout)
    assert out["confidence_level"] == "none" and out["confidence_reason"].startswith("only waiting ranks")
    assert out["reporting_ranks"] == [11, 12, 13, 14, 15]
    assert set(out["hosts"].values()) == {"dinov2-giant-nodes.cn-d004"} and out["named_by_log"] == []
    stuck = CliRunner().invoke(app, ["nccl-hang", str(DATA / "deim_105.log"), "--json"])
    assert [w["rank"] for w in orjson.loads(stuck.stdout)["watchdog"]] == [0, 1, 2]


def test_text_output_names_culprits_of_a_report_without_a_timeout() -> None:
    result = CliRunner().invoke(app, ["nccl-hang", str(DATA / "heldout" / "nccl_1762_ras.txt")])
    assert result.exit_code == 0 and "culprit rank(s): 1  host(s): 10.4.109.13" in result.stdout
    assert "on node 10.4.109.13" in result.stdout  # the quote shows the rank line, not only the header
