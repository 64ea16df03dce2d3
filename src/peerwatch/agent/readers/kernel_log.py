"""dmesg / journalctl -k / kern.log text, judged by the agent's own Xid check (Xid, SXid, lost GPUs)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from peerwatch.agent.checks import CheckResult
from peerwatch.agent.kernel_log import KernelLog, parse_line, parse_lines
from peerwatch.agent.paste import first_lines
from peerwatch.agent.readers.errors import ReadError
from peerwatch.agent.xid import XidCheck

FORMAT = "kernel-log"

# Driver words of the kernel log; not "NVIDIA" alone, which lspci and nvidia-smi print too.
_DRIVER = re.compile(r"NVRM|SXid|nvidia-nvswitch|nvidia-modeset|\bnvidia: ")


@dataclass(frozen=True)
class _Saved:
    """A kernel-log source over text already read (no boot time: raw dmesg stamps stay unplaced)."""

    log: KernelLog

    def read(self) -> KernelLog:
        return self.log


def detect(text: str) -> bool:
    """Among the first lines, one carries a kernel-log stamp or prefix, or the driver's NVRM / SXid words."""
    for line in first_lines(text):
        parsed = parse_line(line)
        if parsed.ts is not None or parsed.text != line or _DRIVER.search(line):
            return True
    return False


def read(text: str) -> list[CheckResult]:
    """The ``xid`` verdicts (per GPU, per NVSwitch) of a saved kernel log."""
    lines = parse_lines(text)
    if not lines:
        raise ReadError("no kernel log lines (the file is empty after paste artefacts)")
    # A saved log shows the driver was loaded when it has driver lines; the host's /sys says nothing of it.
    check = XidCheck(_Saved(KernelLog(lines, "the log")), sys_root=Path("/nonexistent"), driver_in_log=True)
    return list(check.run())
