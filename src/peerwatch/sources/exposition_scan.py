"""Careful, character by character reading of one exposition line, the way prometheus/common expfmt reads it.

This is the slow path: :mod:`peerwatch.sources.exposition` sends here only the lines its fast
path does not take (comments it cannot split, escapes, quoted names, summaries, errors). The
states and error messages follow expfmt's ``TextParser`` so that strict mode reports what
Prometheus reports; ``lenient`` adds what real exporters and OpenMetrics emit.
"""

from __future__ import annotations

import re

from peerwatch.sources.exposition_families import HISTOGRAMS, SUMMARY, Families, Family, Role
from peerwatch.sources.exposition_text import (
    EOF_MESSAGE,
    LineError,
    go_float,
    go_int64,
    go_quote,
    go_quote_char,
    has_surrogate,
)

_ESCAPES = {"\\": "\\", "n": "\n", '"': '"'}
_VALUE_RUN = re.compile(r'[^"\\\n]*')
# An OpenMetrics exemplar after the value or timestamp: ``# {labels} value [timestamp]``.
_EXEMPLAR = re.compile(
    r'# \{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*)?\}'
    r" (\S+)(?: (\S+))?\Z"
)

RawSample = tuple[str, list[tuple[str, str]], float, float | None]
"""Name, label pairs as written, value, timestamp in seconds."""


class Cursor:
    """Reads one line as expfmt reads its byte stream: ``c`` is the last character read."""

    __slots__ = ("c", "i", "lenient", "s")

    def __init__(self, line: str, terminated: bool, lenient: bool) -> None:
        self.s = line + "\n" if terminated else line  # reading past the end is "unexpected end of input"
        self.i = 0
        self.c = ""
        self.lenient = lenient

    def read(self) -> str:
        if self.i >= len(self.s):
            raise LineError(EOF_MESSAGE)
        self.c = c = self.s[self.i]
        self.i += 1
        return c

    def skip_blank(self) -> str:
        c = self.read()
        while c == " " or c == "\t":
            c = self.read()
        return c

    def token_until_blank(self) -> str:
        start = self.i - 1
        c = self.c
        while c != " " and c != "\t" and c != "\n":
            c = self.read()
        return self.s[start : self.i - 1]

    def rest(self) -> str:
        """From the current character to the end of the line (without the newline)."""
        text = self.s[self.i - 1 :]
        return text[:-1] if text.endswith("\n") else text

    def escape(self, c: str, out: list[str]) -> bool:
        """Handle the character after a backslash; False if it is to be read as an ordinary one."""
        e = _ESCAPES.get(c)
        if e is not None:
            out.append(e)
            return True
        if not self.lenient:
            raise LineError(f"invalid escape sequence '\\{c}'")
        out.append("\\")  # OpenMetrics and Prometheus' own scraper keep unknown escapes as written
        return False

    def name(self, label: bool) -> str:
        """A metric (or label) name, plain or quoted with escapes; '' if none starts here."""
        c = self.c
        if not (_name_char(c, label) or c == '"'):
            return ""
        out: list[str] = []
        quoted = escaped = False
        while True:
            if escaped:
                escaped = False
                if self.escape(c, out):
                    c = self.read()
                    continue
            if c == '"':
                quoted = not quoted
                if not quoted:
                    self.read()
                    return "".join(out)
            elif c == "\n":
                what = "label" if label else "metric"
                raise LineError(f"{what} name {go_quote(''.join(out))} contains unescaped new-line")
            elif c == "\\":
                escaped = True
            else:
                out.append(c)
            c = self.read()
            # expfmt quirk kept: a '"' also continues an unquoted name (and opens quoting).
            if not quoted and not (_name_char(c, label) or c == '"' or (c.isdigit() and c.isascii())):
                return "".join(out)

    def label_value(self) -> str:
        out: list[str] = []
        while True:
            run = _VALUE_RUN.match(self.s, self.i)
            if run is not None and run.end() > self.i:
                out.append(run.group())
                self.i = run.end()
            c = self.read()
            if c == "\\":
                c = self.read()
                if self.escape(c, out):
                    continue
            if c == '"':
                return "".join(out)
            if c == "\n":
                raise LineError(f"label value {go_quote(''.join(out))} contains unescaped new-line")
            out.append(c)


def _name_char(c: str, label: bool) -> bool:
    return c.isascii() and (c.isalpha() or c == "_" or (not label and c == ":"))


def read_sample(line: str, terminated: bool, families: Families, lenient: bool) -> RawSample:
    """The sample on ``line``; raises LineError as expfmt would (``families`` learns its family)."""
    cur = Cursor(line, terminated, lenient)
    c = cur.skip_blank()
    in_braces = c == "{"
    name = ""
    fam = None
    role = Role.plain
    if not in_braces:
        name = cur.name(label=False)
        if not name or has_surrogate(name):
            raise LineError("invalid metric name" + (f" {go_quote(name)}" if name else ""))
        fam, role = families.of_sample(name)
        c = cur.c
        if c == " " or c == "\t":
            c = cur.skip_blank()
    labels: list[tuple[str, str]] = []
    checked: list[str] = []
    bucket = False
    if c == "{":
        while True:
            c = cur.skip_blank()
            if c == "}":
                if fam is None:
                    raise LineError("invalid metric name")
                c = cur.skip_blank()
                break
            lname = cur.name(label=True)
            family = fam.name if fam is not None else ""
            if not lname or has_surrogate(lname):
                raise LineError(f"invalid label name for metric {go_quote(family)}")
            c = cur.c
            if c == " " or c == "\t":
                c = cur.skip_blank()
            if c != "=":
                if not in_braces:
                    raise LineError(f"expected '=' after label name, found {go_quote_char(c)}")
                if c != "," and c != "}":
                    raise LineError(f"unexpected end of metric name {go_quote_char(c)}")
                if fam is not None:
                    raise LineError(f"multiple metric names for metric {go_quote(fam.name)}")
                name = lname
                fam, role = families.of_sample(name)
                if c == ",":
                    continue
                c = cur.skip_blank()
                break
            if lname == "__name__":
                raise LineError('label name "__name__" is reserved')
            kind = fam.mtype if fam is not None else None
            special = (kind == SUMMARY and lname == "quantile") or (kind in HISTOGRAMS and lname == "le")
            if not special:
                if lname in checked:
                    raise LineError(f"duplicate label names for metric {go_quote(family)}")
                checked.append(lname)
            c = cur.skip_blank()
            if c != '"':
                raise LineError(f"expected '\"' at start of label value, found {go_quote_char(c)}")
            value = cur.label_value()
            if has_surrogate(value):
                raise LineError(f"invalid label value {go_quote(value)}")
            if special:
                if go_float(value) is None:
                    raise LineError(f"expected float as value for '{lname}' label, got {go_quote(value)}")
                bucket = bucket or lname == "le"
            labels.append((lname, value))
            c = cur.skip_blank()
            if c == "}":
                if fam is None:
                    raise LineError("invalid metric name")
                c = cur.skip_blank()
                break
            if c != ",":
                raise LineError(f"unexpected end of label value {go_quote(value)}")
    assert fam is not None  # every path above either named the family or raised
    number = _value(cur.token_until_blank(), fam, role, bucket)
    return name, labels, number, _timestamp(cur, terminated)


def _value(token: str, fam: Family, role: Role, bucket: bool) -> float:
    number = go_float(token)
    if number is None:
        raise LineError(f"expected float as value, got {go_quote(token)}")
    if fam.mtype == "histogram" and number < 0:
        if role is Role.count:
            raise LineError(f"negative count for histogram {go_quote(fam.name)}")
        if bucket and role is not Role.sum:
            raise LineError(f"negative bucket population for histogram {go_quote(fam.name)}")
    return number


def _timestamp(cur: Cursor, terminated: bool) -> float | None:
    """The optional timestamp after the value (and, lenient, an exemplar to check and drop)."""
    if cur.c == "\n":
        return None
    if cur.skip_blank() == "#" and cur.lenient:
        _exemplar(cur.rest())
        return None
    stamp = _seconds(cur.token_until_blank(), cur.lenient)
    if cur.c != "\n":
        if not terminated:
            raise LineError(EOF_MESSAGE)
        rest = cur.rest()
        spurious = rest.replace("\\", "")  # expfmt reads the rest without escapes but drops backslashes
        if cur.lenient and rest.lstrip(" \t").startswith("#"):
            _exemplar(rest.lstrip(" \t"))
        elif spurious:
            raise LineError(f"spurious string after timestamp: {go_quote(spurious)}")
    return stamp


def _seconds(token: str, lenient: bool) -> float:
    ms = go_int64(token)
    if ms is not None:
        return ms / 1000  # int / int rounds correctly
    if lenient and ("." in token or "e" in token or "E" in token):
        seconds = go_float(token)  # OpenMetrics: seconds, as a float
        if seconds is not None and seconds - seconds == 0.0:
            return seconds
    raise LineError(f"expected integer as timestamp, got {go_quote(token)}")


def _exemplar(text: str) -> None:
    m = _EXEMPLAR.match(text)
    ok = m is not None and go_float(m.group(1)) is not None
    if m is not None and ok and m.group(2) is not None:
        stamp = go_float(m.group(2))
        ok = stamp is not None and stamp - stamp == 0.0
    if not ok:
        raise LineError(f"invalid exemplar {go_quote(text)}")


def read_comment(line: str, terminated: bool, families: Families, lenient: bool) -> None:
    """A '#' line: HELP and TYPE update ``families``; other comments are ignored. Raises LineError."""
    cur = Cursor(line, terminated, lenient)
    cur.skip_blank()  # the '#'
    if cur.skip_blank() == "\n":
        return
    keyword = cur.token_until_blank()
    if cur.c == "\n":
        return
    if keyword != "HELP" and keyword != "TYPE":
        if not terminated:
            raise LineError(EOF_MESSAGE)
        return
    cur.skip_blank()
    name = cur.name(label=False)
    if cur.c == "\n":
        return
    if (cur.c != " " and cur.c != "\t") or has_surrogate(name):
        raise LineError("invalid metric name in comment")
    fam = families.of_comment(name)
    if cur.skip_blank() == "\n":
        return
    families.declare(fam, keyword, cur.rest(), terminated)
