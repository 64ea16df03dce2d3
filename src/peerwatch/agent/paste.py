"""Tool output as people paste it: without the markdown, shell and HTML artefacts around it.

Outputs copied into an issue, a chat or a mailing list arrive inside ``` fences, quoted with
``> ``, after the prompt line that ran the tool (``$ dmesg -T``, ``root@gpu01:~# nvidia-smi -q``,
``[root@host ~]# ibstat``), with HTML line breaks and sometimes a byte-order mark.
:func:`clean_lines` removes those and keeps every other line as it was, with its number in the
original text so that errors can name it; the readers (and the kernel-log parser) see what the
tool printed.
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"^\s*(?:```|~~~)")
_QUOTE = re.compile(r"^\s{0,3}(?:>[ \t]?)+")
# "$ cmd", "# cmd", "user@host:~$ cmd", "[root@host ~]# cmd", "sh-5.1# cmd", "PS C:\> cmd";
# a kernel line or a tool's own output never starts so.
_PROMPT = re.compile(
    r"^\s*(?:(?:\[[^\]\s]*@[^\]]*\]|[\w.-]+@[\w.-]+(?::\S*)?)\s*)?[$#%]\s+\S"
    r"|^\s*(?:\[[^\]\n]*\]|[\w.@:~/()+-]*)[#$]\s+[A-Za-z/.]"
    r"|^\s*PS [^>]*>\s"
)
_HTML_BREAK = re.compile(r"<br\s*/?>\s*$", re.IGNORECASE)


def clean_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of every line that is not a fence or a prompt; BOM, quotes and HTML breaks removed."""
    out = []
    for number, raw in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        line = _HTML_BREAK.sub("", raw.replace("&nbsp;", " ")).rstrip()
        quoted = _QUOTE.match(line)
        if quoted is not None:
            line = line[quoted.end() :]
        if _FENCE.match(line) or _PROMPT.match(line):
            continue
        out.append((number, line))
    return out


def paste_lines(text: str) -> list[str]:
    """The lines of :func:`clean_lines` without their numbers."""
    return [line for _, line in clean_lines(text)]


def first_lines(text: str, limit: int = 40) -> list[str]:
    """The first ``limit`` non-blank cleaned lines, stripped: what a format sniff looks at."""
    found = []
    for _, line in clean_lines(text[:65536]):
        if line.strip():
            found.append(line.strip())
            if len(found) == limit:
                break
    return found


def key_value(line: str) -> tuple[str, str] | None:
    """``("state", "PORT_ACTIVE (4)")`` of ``\\tstate:\\t\\t\\tPORT_ACTIVE (4)``; ``None`` without a colon."""
    key, sep, value = line.strip().partition(":")
    return (key.strip(), value.strip()) if sep else None
