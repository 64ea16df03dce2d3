"""Kernel logs as they reach users: real pastes from public issue trackers and repositories
(``tests/data/kernel``, see its SOURCE.md), the timestamp forms they use, SXid lines and GPUs lost
from the bus without an Xid line."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from peerwatch.agent.checks import Status
from peerwatch.agent.gpu_lost import parse_bus_losses
from peerwatch.agent.kernel_log import FileLogSource, LogLine, month_number, parse_line, parse_lines
from peerwatch.agent.paste import paste_lines
from peerwatch.agent.sxid import parse_sxids
from peerwatch.agent.xid import XidCheck, merge_bus_losses, parse_xids

DATA = Path(__file__).parent / "data" / "kernel"
BOOT = 1740900000.0


def verdicts(name: str) -> dict[str, tuple[Status, str]]:
    check = XidCheck(FileLogSource(DATA / name, lambda: BOOT), sys_root=DATA / "no-sys")
    return {r.component: (r.status, r.hint) for r in check.run()}


def local_fields(ts: float | None) -> tuple[int, ...]:
    assert ts is not None
    return tuple(time.localtime(ts)[1:6])


@pytest.mark.parametrize(
    ("raw", "fields", "text"),
    [
        # dmesg -x / --decode: facility and level before the stamp (gpud's dmesg.decode.iso.log)
        (
            "kern  :warn  : 2025-01-21T02:21:33,498559+00:00 NVRM: Xid (PCI:0000:38:00): 13, pid='<unknown>'",
            None,
            "NVRM: Xid (PCI:0000:38:00): 13, pid='<unknown>'",
        ),
        ("kern  :err   : [ 2345.5] NVRM: Xid (PCI:0000:3b:00): 79, x", None, "NVRM: Xid (PCI:0000:3b:00): 79, x"),
        # journalctl short with a French and a Chinese month, short-precise with microseconds
        ("oct. 11 09:53:05 alexv-pop-s76 kernel: pci 0000:01:00.0: x", (10, 11, 9, 53, 5), "pci 0000:01:00.0: x"),
        ("11月 15 14:15:47 node kernel: NVRM: Xid (PCI:0000:3b:00): 79, x", (11, 15, 14, 15, 47), None),
        ("Okt 02 08:00:01 node kernel: NVRM: Xid (PCI:0000:3b:00): 79, x", (10, 2, 8, 0, 1), None),
        ("Mar 02 10:15:42.123456 node kernel: NVRM: Xid (PCI:0000:3b:00): 79, x", (3, 2, 10, 15, 42), None),
        # ISO with a space, as `journalctl -o short-iso` pastes are sometimes edited
        ("2025-03-02 10:15:42 node kernel: NVRM: Xid (PCI:0000:3b:00): 79, x", (3, 2, 10, 15, 42), None),
    ],
)
def test_stamps_real_logs_use(raw: str, fields: tuple[int, ...] | None, text: str | None) -> None:
    line = parse_line(raw, BOOT)
    assert line.ts is not None
    if fields is not None:
        assert local_fields(line.ts) == fields
    assert line.text == (text or "NVRM: Xid (PCI:0000:3b:00): 79, x")


def test_journal_short_unix_stamp() -> None:
    line = parse_line("1740910542.123456 gpu01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, x", BOOT)
    assert line == LogLine(1740910542.123456, "NVRM: Xid (PCI:0000:3b:00): 79, x")


def test_dmesg_x_iso_and_raw_kmsg_times() -> None:
    iso = parse_line("kern  :warn  : 2025-01-21T02:21:33,498559+00:00 NVRM: x", BOOT)
    assert iso.ts == pytest.approx(1737426093.498559)
    kmsg = parse_line("4,3964,206764307,-;NVRM: Xid (PCI:0000:3b:00): 79, x", BOOT)
    assert kmsg == LogLine(BOOT + 206.764307, "NVRM: Xid (PCI:0000:3b:00): 79, x")


@pytest.mark.parametrize("word", ["Linux", "Call", "CPU:", "Hardware"])
def test_words_that_look_like_months_are_not_stamps(word: str) -> None:
    assert month_number(word) is None
    assert parse_line(f"{word} 12 10:15:42 something", BOOT).ts is None


def test_paste_artefacts_are_dropped() -> None:
    text = (
        "\ufeff```\n$ sudo dmesg -T | grep Xid\n> [ 12.5] NVRM: Xid (PCI:0000:3b:00): 79, x\n>\n"
        "root@gpu01:~# journalctl -k\n```\n"
    )
    assert [ln for ln in paste_lines(text) if ln] == ["[ 12.5] NVRM: Xid (PCI:0000:3b:00): 79, x"]
    assert parse_lines(text, BOOT) == (LogLine(BOOT + 12.5, "NVRM: Xid (PCI:0000:3b:00): 79, x"),)


def test_old_xid_spelling_without_pci_word() -> None:
    got = verdicts("bumblebee-329-kernlog-old-xid.txt")
    assert list(got) == ["0000:01:00.0"] and "(seen: 8, 16x8)" in got["0000:01:00.0"][1]


def test_sxid_headlines_count_and_details_do_not() -> None:
    events = parse_sxids(parse_lines((DATA / "nvtrust-124-dmesg-sxid.txt").read_text(), BOOT))
    assert [(e.bus_id, e.sxid, e.fatal) for e in events] == [("0000:02:00.0", 22013, False)] * 2
    got = verdicts("nvtrust-124-dmesg-sxid.txt")
    assert got["nvswitch/0000:02:00.0"][0] is Status.UNHEALTHY


def test_fatal_sxids_and_the_lost_gpu_from_a_quoted_markdown_paste() -> None:
    got = verdicts("gpud-sxid-readme.md")
    assert {c: s for c, (s, _) in got.items()} == {
        "0000:91:00.0": Status.CRITICAL,  # Xid 79; the NVRM "fallen off" line is the same loss
        "nvswitch/0000:05:00.0": Status.CRITICAL,
        "nvswitch/0000:06:00.0": Status.CRITICAL,
        "nvswitch/0000:07:00.0": Status.CRITICAL,
    }
    assert got["0000:91:00.0"][1].endswith("(seen: 79)")  # counted once
    assert "(seen: 20034x2)" in got["nvswitch/0000:05:00.0"][1]


def test_sxid_with_only_a_detail_line_is_still_read() -> None:
    got = verdicts("gpud-pr338-dmesg-x-sxid.txt")
    status, hint = got["nvswitch/0000:84:00.0"]
    assert status is Status.UNHEALTHY and "severity unknown" in hint
    (event,) = parse_sxids(parse_lines((DATA / "gpud-pr338-dmesg-x-sxid.txt").read_text()))
    assert event.ts == pytest.approx(1737801294.859532)


def test_gpu_lost_without_an_xid_line_is_critical() -> None:
    got = verdicts("nvsentinel-155-dmesg-fallen-off-bus.txt")
    status, hint = got["0000:b3:00.0"]
    assert status is Status.CRITICAL and "without an Xid line" in hint


@pytest.mark.parametrize(
    "text",
    [
        "NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.",
        "NVRM: GPU at PCI:0000:29:00: GPU has fallen off the bus.",
        "NVRM: GPU 29:00.0: GPU has fallen off the bus.",
    ],
)
def test_one_line_bus_loss_spellings(text: str) -> None:
    (loss,) = parse_bus_losses([LogLine(5.0, text)])
    assert (loss.bus_id, loss.ts) == ("0000:29:00.0", 5.0)


def test_a_loss_far_from_any_xid_79_counts_on_its_own() -> None:
    xid = parse_xids([LogLine(100.0, "NVRM: Xid (PCI:0000:29:00): 79, GPU has fallen off the bus.")])
    near = parse_bus_losses([LogLine(101.0, "NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.")])
    later = parse_bus_losses([LogLine(9000.0, "NVRM: GPU 0000:29:00.0: GPU has fallen off the bus.")])
    assert len(merge_bus_losses(xid, near)) == 1
    merged = merge_bus_losses(xid, later)
    assert [(e.xid, e.inferred) for e in merged] == [(79, False), (79, True)]


def test_xid_lines_of_real_logs_keep_their_time() -> None:
    """Every Xid line in the real logs that carry a stamp is placed in time."""
    placed = total = 0
    for name in ("gpud-dmesg-T-xid-119.txt", "gpud-dmesg-x-iso.txt", "gpud-sxid-readme.md"):
        events = parse_xids(parse_lines((DATA / name).read_text(), BOOT))
        total += len(events)
        placed += sum(e.ts is not None for e in events)
    assert total > 60 and placed == total
