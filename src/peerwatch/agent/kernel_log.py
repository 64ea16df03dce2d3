"""Where kernel messages come from (dmesg, journalctl -k, /var/log/kern.log) and their timestamps.

Each source yields :class:`LogLine` s: the message without its timestamp, host and ``kernel:``
prefixes, and the wall-clock time when the prefix allows it. The timestamp formats are a
table, tried in order; a line matching none keeps its text with no time.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from peerwatch.agent.paste import paste_lines
from peerwatch.agent.runner import CommandError, CommandRunner


@dataclass(frozen=True, slots=True)
class LogLine:
    """One kernel message; ``ts`` is epoch seconds, or ``None`` when the line cannot be placed in time."""

    ts: float | None
    text: str


@dataclass(frozen=True, slots=True)
class KernelLog:
    """The lines read and where they came from (for hints)."""

    lines: tuple[LogLine, ...]
    where: str


class KernelLogUnavailable(Exception):
    """No kernel log could be read; the message says why."""


class KernelLogSource(Protocol):
    """Reads the kernel log; raises :class:`KernelLogUnavailable` when it cannot."""

    def read(self) -> KernelLog: ...


def is_stale(ts: float | None, now: float, max_age: float | None) -> bool:
    """Whether an event logged at ``ts`` is older than ``max_age`` seconds (never, when either is unknown)."""
    return max_age is not None and ts is not None and now - ts > max_age


def boot_time(proc_root: Path = Path("/proc")) -> float | None:
    """Boot time in epoch seconds (``btime`` in ``/proc/stat``), to place dmesg's ``[seconds]`` in wall time."""
    try:
        for line in (proc_root / "stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


_MONO = re.compile(r"^\[\s*(\d+\.\d+)\]\s?")
_HOST_KERNEL = re.compile(r"^\S+ kernel: ?")
# `dmesg -x` / `--decode` puts "facility:level:" (padded) before everything else.
_DECODE = re.compile(
    r"^(?:kern|user|mail|daemon|auth|syslog|lpr|news|uucp|cron|authpriv|ftp|local[0-7])\s*:"
    r"\s*(?:emerg|alert|crit|err|warn|notice|info|debug)\s*:\s?"
)
# /dev/kmsg records: "priority,sequence,microseconds since boot,flags;message".
_KMSG = re.compile(r"^\d+,\d+,(?P<usec>\d+),[^;]*;(?P<msg>.*)$")

MONTHS: Mapping[str, int] = {
    name: number
    for number, names in enumerate(
        (
            ("jan", "january", "janv", "janvier", "jän", "jänner", "ene", "enero", "gen", "genn", "янв"),
            ("feb", "february", "févr", "fevr", "février", "febr", "februar", "febrero", "fev", "fév", "фев"),
            ("mar", "march", "mars", "mär", "märz", "marzo", "março", "мар"),
            ("apr", "april", "avr", "avril", "abr", "abril", "aprile", "апр"),
            ("may", "mai", "mayo", "mag", "maggio", "maio", "май", "мая"),
            ("jun", "june", "juin", "juni", "junio", "giu", "giugno", "июн"),
            ("jul", "july", "juil", "juillet", "juli", "julio", "lug", "luglio", "июл"),
            ("aug", "august", "août", "aout", "ago", "agosto", "авг"),
            ("sep", "sept", "september", "septembre", "septiembre", "set", "settembre", "setembro", "сен"),
            ("oct", "october", "octobre", "okt", "oktober", "octubre", "ott", "ottobre", "out", "outubro", "окт"),
            ("nov", "november", "novembre", "noviembre", "novembro", "ноя"),
            ("dec", "december", "déc", "décembre", "dez", "dezember", "dic", "diciembre", "dicembre", "дек"),
        ),
        start=1,
    )
    for name in names
}
"""Month names and abbreviations journalctl and syslog print in common locales (lower case, no dot).

CJK locales print the number with 月/월, read by the pattern itself."""


def _mono(text: str, boot: float | None) -> tuple[float | None, str]:
    """Strip a ``[ 123.456789]`` prefix (kern.log keeps dmesg's) and place it after ``boot``."""
    match = _MONO.match(text)
    if match is None:
        return None, text
    return (boot + float(match.group(1)) if boot is not None else None), text[match.end() :]


def _from_iso(stamp: str) -> float:
    value = datetime.fromisoformat(stamp.replace(",", ".").replace(" ", "T", 1))
    return value.timestamp()  # naive stamps are local time, as the tools print them


def _from_ctime(stamp: str) -> float:
    return time.mktime(time.strptime(stamp, "%a %b %d %H:%M:%S %Y"))


def month_number(word: str) -> int | None:
    """The month a syslog/journal stamp names, in English or a common locale (``oct.``, ``Okt``, ``11月``)."""
    word = word.strip().rstrip(".").lower()
    if word.endswith(("月", "월")) and word[:-1].isdigit():
        number = int(word[:-1])
        return number if 1 <= number <= 12 else None
    return MONTHS.get(word)


def _from_syslog(stamp: str) -> float:
    # Traditional syslog and journalctl stamps have no year: this year, or last year if that is in the future.
    month_word, day, clock = stamp.split()
    month = month_number(month_word)
    if month is None:
        raise ValueError(f"unknown month {month_word!r}")
    hour, minute, second = clock.split(":")
    now = time.time()
    year = time.localtime(now).tm_year
    fields = (int(day), int(hour), int(minute), float(second))

    def at(y: int) -> float:
        whole = int(fields[3])
        return time.mktime((y, month, fields[0], fields[1], fields[2], whole, 0, 0, -1)) + fields[3] - whole

    value = at(year)
    return at(year - 1) if value > now + 86400 else value


_SYSLOG_MONTH = r"(?:[^\W\d_]{3,9}\.?|\d{1,2}[月월])"

# (pattern, how to turn the "stamp" group into epoch seconds); "msg" is the rest of the line.
_FORMATS: tuple[tuple[re.Pattern[str], Callable[[str], float]], ...] = (
    # journalctl -o short-iso / short-iso-precise, rsyslog RFC 3339, dmesg --time-format iso
    (
        re.compile(r"^(?P<stamp>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s+(?P<msg>.*)$"),
        _from_iso,
    ),
    # journalctl -o short-unix: epoch seconds
    (re.compile(r"^(?P<stamp>\d{9,11}\.\d+)\s+(?P<msg>\S+ \S.*)$"), float),
    # dmesg -T
    (
        re.compile(r"^\[(?P<stamp>[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\]\s?(?P<msg>.*)$"),
        _from_ctime,
    ),
    # journalctl's default "short" / -o short-precise and /var/log/kern.log (syslog), month names in any
    # common locale: "Mar  2 10:15:42 host kernel: ...", "oct. 11 09:53:05 host kernel: ...", "11月 15 ..."
    (
        re.compile(rf"^(?P<stamp>{_SYSLOG_MONTH}\s+\d{{1,2}}\s+\d\d:\d\d:\d\d(?:\.\d+)?)\s+(?P<msg>\S+ \S.*)$"),
        _from_syslog,
    ),
)


def parse_line(raw: str, boot: float | None = None) -> LogLine:
    """Split one kernel log line into its time (when known) and message; see the module docstring."""
    raw = _DECODE.sub("", raw, count=1)
    kmsg = _KMSG.match(raw)
    if kmsg is not None:
        usec = int(kmsg.group("usec"))
        return LogLine(boot + usec / 1e6 if boot is not None else None, kmsg.group("msg"))
    for pattern, convert in _FORMATS:
        match = pattern.match(raw)
        if match is None:
            continue
        msg = _HOST_KERNEL.sub("", match.group("msg"), count=1)
        _, msg = _mono(msg, boot)  # the wall-clock stamp wins over the monotonic one
        try:
            return LogLine(convert(match.group("stamp")), msg)
        except (ValueError, OverflowError):
            continue  # "Linux version ..." looks like a month stamp to the pattern; not one
    ts, msg = _mono(raw, boot)
    return LogLine(ts, msg)


def parse_lines(text: str, boot: float | None = None) -> tuple[LogLine, ...]:
    """All lines of ``text``, skipping blanks, journalctl's ``-- ... --`` markers and paste artefacts."""
    return tuple(parse_line(raw, boot) for raw in paste_lines(text) if raw.strip() and not raw.startswith("-- "))


@dataclass(frozen=True)
class CommandLogSource:
    """Kernel log from a command's output (``dmesg``, ``journalctl -k -b -o short-iso``)."""

    runner: CommandRunner
    argv: tuple[str, ...] = ("dmesg",)
    boot: Callable[[], float | None] = boot_time
    timeout: float = 30.0

    def read(self) -> KernelLog:
        where = " ".join(self.argv)
        try:
            done = self.runner.run(self.argv, self.timeout)
        except CommandError as exc:
            raise KernelLogUnavailable(str(exc)) from exc
        # journalctl prints this (exit 0) when there is no journal at all: that is no log, not an empty one.
        if done.returncode != 0 or "No journal files were found" in done.stderr:
            message = (done.stderr or done.stdout).strip().splitlines()
            raise KernelLogUnavailable(f"{where}: {message[0] if message else f'exit {done.returncode}'}")
        return KernelLog(parse_lines(done.stdout, self.boot()), where)


@dataclass(frozen=True)
class FileLogSource:
    """Kernel log from a file such as ``/var/log/kern.log`` (only its last ``max_bytes``)."""

    path: Path
    boot: Callable[[], float | None] = boot_time
    max_bytes: int = 64 * 1024 * 1024

    def read(self) -> KernelLog:
        try:
            with self.path.open("rb") as f:
                size = f.seek(0, 2)
                f.seek(max(0, size - self.max_bytes))
                text = f.read().decode("utf-8", errors="replace")
        except OSError as exc:
            raise KernelLogUnavailable(f"{self.path}: {exc.strerror or exc}") from exc
        return KernelLog(parse_lines(text, self.boot()), str(self.path))


@dataclass(frozen=True)
class FirstAvailable:
    """The first of ``sources`` that can be read; unavailable (with every reason) if none can."""

    sources: Sequence[KernelLogSource]

    def read(self) -> KernelLog:
        reasons = []
        for source in self.sources:
            try:
                return source.read()
            except KernelLogUnavailable as exc:
                reasons.append(str(exc))
        raise KernelLogUnavailable("; ".join(reasons) or "no kernel log source configured")


def default_source(runner: CommandRunner, proc_root: Path = Path("/proc")) -> KernelLogSource:
    """dmesg, else ``journalctl -k`` for this boot, else ``/var/log/kern.log``."""

    def boot() -> float | None:
        return boot_time(proc_root)

    return FirstAvailable(
        (
            CommandLogSource(runner, ("dmesg",), boot),
            CommandLogSource(runner, ("journalctl", "-k", "-b", "-o", "short-iso", "--no-pager"), boot),
            FileLogSource(Path("/var/log/kern.log"), boot),
        )
    )
