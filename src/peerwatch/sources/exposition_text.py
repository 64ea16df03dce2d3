"""Literals of the exposition format read and quoted as Go's strconv does, so messages match expfmt's."""

from __future__ import annotations

import re

EOF_MESSAGE = "unexpected end of input stream"

# strconv.ParseFloat without hex (expfmt refuses 'p', 'P' and '_'); NaN takes no sign in Go.
_GO_FLOAT = re.compile(
    r"(?:[-+]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[iI][nN][fF](?:[iI][nN][iI][tT][yY])?)"
    r"|[nN][aA][nN])\Z"
)
_GO_INT = re.compile(r"[-+]?[0-9]+\Z")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")
_HELP_ESCAPE = re.compile(r"\\(.?)", re.DOTALL)
_HELP_ESCAPES = {"\\": "\\", "n": "\n", '"': '"'}
_C_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


class LineError(Exception):
    """What is wrong with one line, worded as expfmt words it (without the line number)."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self.msg = msg


def go_float(text: str) -> float | None:
    """The float Go's ``strconv.ParseFloat(text, 64)`` accepts, or None (also on overflow, as Go)."""
    if _GO_FLOAT.match(text) is None:
        return None
    value = float(text)
    if (value == _INF or value == -_INF) and text[-1] not in "fFyY":
        return None  # 1e400: Go returns ErrRange
    return value


_INF = float("inf")


def go_int64(text: str) -> int | None:
    """The integer ``strconv.ParseInt(text, 10, 64)`` accepts, or None."""
    if _GO_INT.match(text) is None:
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def has_surrogate(text: str) -> bool:
    """True if ``text`` holds bytes that were not UTF-8 (decoded with ``surrogateescape``)."""
    return _SURROGATE.search(text) is not None


def unescape_help(text: str, lenient: bool) -> str:
    r"""HELP text with ``\\``, ``\n`` and ``\"`` resolved; other escapes raise, or stay as written if ``lenient``."""
    if "\\" not in text:
        return text

    def one(m: re.Match[str]) -> str:
        c = m.group(1)
        e = _HELP_ESCAPES.get(c)
        if e is not None:
            return e
        if not lenient:
            raise LineError(f"invalid escape sequence '\\{c or chr(10)}'")
        return m.group()

    return _HELP_ESCAPE.sub(one, text)


def go_quote(text: str) -> str:
    """``text`` quoted as Go's ``%q`` does (strconv.Quote), undecodable bytes as ``\\xNN``."""
    out = ['"']
    for ch in text:
        o = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif 0xDC80 <= o <= 0xDCFF:
            out.append(f"\\x{o - 0xDC00:02x}")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(_escape_unprintable(ch))
    out.append('"')
    return "".join(out)


def go_quote_char(ch: str) -> str:
    """A single character quoted as Go's ``%q`` quotes a byte or rune: ``'x'``."""
    if ch == "'" or ch == "\\":
        return f"'\\{ch}'"
    if 0xDC80 <= ord(ch) <= 0xDCFF:
        return f"'\\x{ord(ch) - 0xDC00:02x}'"
    return f"'{ch}'" if ch.isprintable() else f"'{_escape_unprintable(ch)}'"


def _escape_unprintable(ch: str) -> str:
    o = ord(ch)
    if ch in _C_ESCAPES:
        return _C_ESCAPES[ch]
    if o < 0x20 or o == 0x7F:
        return f"\\x{o:02x}"
    return f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"
