"""Tool output as people paste it: without the markdown and shell artefacts around it.

Outputs copied into an issue or a chat arrive inside ``` fences, quoted with ``> ``, after the
prompt line that ran the tool (``$ dmesg -T``, ``root@gpu01:~# nvidia-smi -q``) and sometimes
with a byte-order mark. :func:`paste_lines` removes those and keeps every other line as it was,
so the readers (and the kernel-log parser) see what the tool printed.
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"^\s*(?:```|~~~)")
_QUOTE = re.compile(r"^\s{0,3}(?:>[ \t]?)+")
# "$ cmd", "# cmd", "user@host:~$ cmd", "[root@host ~]# cmd", "PS C:\> cmd"; a kernel line never starts so.
_PROMPT = re.compile(r"^\s*(?:(?:\[[^\]\s]*@[^\]]*\]|[\w.-]+@[\w.-]+(?::\S*)?)\s*)?[$#%]\s+\S|^\s*PS [^>]*>\s")


def paste_lines(text: str) -> list[str]:
    """The lines of ``text`` without BOM, code fences, quote markers and shell prompt lines."""
    out = []
    for raw in text.lstrip("\ufeff").splitlines():
        line = raw.rstrip("\r")
        quoted = _QUOTE.match(line)
        if quoted is not None:
            line = line[quoted.end() :]
        if _FENCE.match(line) or _PROMPT.match(line):
            continue
        out.append(line)
    return out


def first_lines(text: str, limit: int = 40) -> list[str]:
    """The first ``limit`` non-blank lines after :func:`paste_lines`: what a format sniff looks at."""
    found = []
    for line in paste_lines(text[:65536]):
        if line.strip():
            found.append(line)
            if len(found) == limit:
                break
    return found
