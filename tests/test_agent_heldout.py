"""Readers on outputs held out while they were written (``tests/data/{agent,kernel}/heldout``): every one is
read, and the verdicts match what the outputs show (checked by reading them afterwards)."""

from __future__ import annotations

from pathlib import Path

import pytest

from peerwatch.agent.checks import Status
from peerwatch.agent.kernel_log import parse_lines
from peerwatch.agent.readers import read_saved
from peerwatch.agent.xid import parse_xids

DATA = Path(__file__).parent / "data"
HELD = sorted(p for d in ("agent", "kernel") for p in (DATA / d).glob("heldout/*") if p.name != "SOURCE.md")


@pytest.mark.parametrize("path", HELD, ids=lambda p: p.name)
def test_every_held_out_output_is_read(path: Path) -> None:
    saved = read_saved(path.read_text(encoding="utf-8"))
    assert saved.results and all(r.status is not Status.UNKNOWN for r in saved.results)


def test_held_out_verdicts() -> None:
    def read(name: str) -> dict[str, Status]:
        path = next(p for p in HELD if p.name == name)
        return {r.component: r.status for r in read_saved(path.read_text(encoding="utf-8")).results}

    # H100s with "HW Slowdown" and "HW Power Brake Slowdown" Active on all 8 GPUs.
    assert set(read("gpud-nvidia-smi-q.535.161.08.txt").values()) == {Status.UNHEALTHY}
    assert len(read("gpud-nvidia-smi-q.535.161.08.txt")) == 8
    assert read("gpud-dmesg-time-format-iso.txt") == {"0000:19:00.0": Status.CRITICAL}  # Xid 48 DBE (+63, 94)
    assert read("gpud-kmsg-1.txt") == {"node": Status.OK}  # NVSwitch driver messages, no SXid
    for name in ("netdata-a100-sxm4-mig.xml", "netdata-rtx-3060.xml", "netdata-rtx-2080-win.xml"):
        assert set(read(name).values()) == {Status.OK}


def test_held_out_xid_lines_are_all_placed_in_time() -> None:
    path = DATA / "kernel" / "heldout" / "gpud-dmesg-time-format-iso.txt"
    events = parse_xids(parse_lines(path.read_text(encoding="utf-8")))
    assert len(events) == 11 and all(e.ts is not None for e in events)
