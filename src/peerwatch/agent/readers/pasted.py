"""Undoing what pasting does to a tool's output: a byte-order mark, markdown fences, shell prompts.

Saved outputs come from terminals and issue trackers: ``$ ibstat`` or ``root@node:~# lspci -vv``
before the text, fences around it, HTML line breaks in mailing-list archives. Readers look at the
lines this leaves, each with its number in the original text so errors can name it.
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"^\s*(```|~~~)")
# `$ cmd`, `# cmd`, `root@host:~# cmd`, `[root@host ~]# cmd`, `sh-5.1# cmd`, `node01$ cmd`
_PROMPT = re.compile(r"^\s*(?:\[[^\]\n]*\]|[\w.@:~/()+-]*)[#$]\s+[A-Za-z/.]")
_HTML_BREAK = re.compile(r"<br\s*/?>\s*$", re.IGNORECASE)


def clean_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` for every line that is not a fence or a shell prompt, BOM and HTML breaks removed."""
    out = []
    for number, line in enumerate(text.lstrip("\ufeff").splitlines(), start=1):
        line = _HTML_BREAK.sub("", line.replace("&nbsp;", " ")).rstrip()
        if _FENCE.match(line) or _PROMPT.match(line):
            continue
        out.append((number, line))
    return out


def first_lines(text: str, count: int = 20) -> list[str]:
    """The first ``count`` non-blank cleaned lines, stripped: what ``detect`` sniffs."""
    return [line.strip() for _, line in clean_lines(text[:20000]) if line.strip()][:count]


def key_value(line: str) -> tuple[str, str] | None:
    """``("state", "PORT_ACTIVE (4)")`` of ``\\tstate:\\t\\t\\tPORT_ACTIVE (4)``; ``None`` without a colon."""
    key, sep, value = line.strip().partition(":")
    return (key.strip(), value.strip()) if sep else None
