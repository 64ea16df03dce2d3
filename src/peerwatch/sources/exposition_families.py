"""Metric families met while parsing: declared TYPE and HELP, and which family a sample name belongs to."""

from __future__ import annotations

from enum import Enum

from peerwatch.sources.exposition_text import EOF_MESSAGE, LineError, go_quote, has_surrogate, unescape_help

SUMMARY = "summary"
HISTOGRAMS = frozenset({"histogram", "gaugehistogram"})

# TYPE words as written (upper-cased, as expfmt compares them) -> the name peerwatch keeps.
STRICT_TYPES = {
    "COUNTER": "counter",
    "GAUGE": "gauge",
    "SUMMARY": "summary",
    "UNTYPED": "untyped",
    "HISTOGRAM": "histogram",
    "GAUGE_HISTOGRAM": "gaugehistogram",
    "GAUGEHISTOGRAM": "gaugehistogram",
}
# OpenMetrics adds these; lenient mode accepts them.
LENIENT_TYPES = {**STRICT_TYPES, "INFO": "info", "STATESET": "stateset", "UNKNOWN": "unknown"}

# Sample-name suffix -> the family types it belongs to (for declared_type).
SUFFIX_TYPES: tuple[tuple[str, frozenset[str]], ...] = (
    ("_bucket", HISTOGRAMS),
    ("_count", frozenset({"summary", "histogram"})),
    ("_sum", frozenset({"summary", "histogram"})),
    ("_gcount", frozenset({"gaugehistogram"})),
    ("_gsum", frozenset({"gaugehistogram"})),
    ("_total", frozenset({"counter"})),
    ("_created", frozenset({"counter", "summary", "histogram", "gaugehistogram"})),
    ("_info", frozenset({"info"})),
)


class Role(Enum):
    """What a sample is within its family (expfmt's currentIs*Count/Sum flags)."""

    plain = 0
    count = 1
    sum = 2


class Family:
    """A family as expfmt tracks it; ``mtype`` is fixed by TYPE or, as 'untyped', by the first sample."""

    __slots__ = ("help", "mtype", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.mtype: str | None = None
        self.help: str | None = None


class Families:
    """All families of one input; ``types`` and ``helps`` hold what was declared."""

    def __init__(self, lenient: bool) -> None:
        self.lenient = lenient
        self.by_name: dict[str, Family] = {}
        self.types: dict[str, str] = {}
        self.helps: dict[str, str] = {}

    def of_comment(self, name: str) -> Family:
        """The family a HELP or TYPE line names (``x_count`` of a summary ``x`` is ``x``)."""
        return self._resolve(name)[0]

    def of_sample(self, name: str) -> tuple[Family, Role]:
        """The family of a sample name and the sample's role; the family's type is fixed from now on."""
        fam, role = self._resolve(name)
        if fam.mtype is None:
            fam.mtype = "untyped"
        return fam, role

    def _resolve(self, name: str) -> tuple[Family, Role]:
        # expfmt's setOrCreateCurrentMF: exact name, then summary, then histogram parents.
        fam = self.by_name.get(name)
        if fam is not None:
            return fam, Role.plain
        n = len(name)
        base, role = None, Role.plain
        if n > 6 and name.endswith("_count"):
            base, role = name[:-6], Role.count
        elif n > 4 and name.endswith("_sum"):
            base, role = name[:-4], Role.sum
        if base is not None:
            parent = self.by_name.get(base)
            if parent is not None and parent.mtype == SUMMARY:
                return parent, role
        if base is None and n > 7 and name.endswith("_bucket"):
            base = name[:-7]
        if base is not None:
            parent = self.by_name.get(base)
            if parent is not None and parent.mtype in HISTOGRAMS:
                return parent, role
        fam = self.by_name[name] = Family(name)
        return fam, Role.plain

    def declare(self, fam: Family, keyword: str, text: str, terminated: bool) -> None:
        """Apply a HELP or TYPE line's ``text``; raises LineError as expfmt would (lenient: on conflicts only)."""
        if keyword == "HELP":
            self._help(fam, text, terminated)
        else:
            self._type(fam, text, terminated)

    def _help(self, fam: Family, text: str, terminated: bool) -> None:
        if fam.help is not None and not self.lenient:
            raise _second_help(fam)
        if "\\" in text:
            text = unescape_help(text, self.lenient)
        if not terminated:
            raise LineError(EOF_MESSAGE)
        if not text.isascii() and has_surrogate(text):
            # expfmt keeps bytes it cannot decode in HELP; a str cannot carry them onwards.
            text = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        if fam.help is None:
            fam.help = self.helps[fam.name] = text
        elif fam.help != text:  # all-smi repeats identical HELP lines; a different one is a conflict
            raise _second_help(fam)

    def _type(self, fam: Family, text: str, terminated: bool) -> None:
        if fam.mtype is not None and not self.lenient:
            raise _second_type(fam)
        word = text.replace("\\", "")  # expfmt drops backslashes here
        if not terminated:
            raise LineError(EOF_MESSAGE)
        mtype = (LENIENT_TYPES if self.lenient else STRICT_TYPES).get(word.upper())
        if fam.mtype is not None:
            # Lenient: a repeat of the declared type is fine (all-smi), anything else a conflict.
            if mtype is None or self.types.get(fam.name) != mtype:
                raise _second_type(fam)
            return
        if mtype is None:
            raise LineError(f"unknown metric type {go_quote(word)}")
        fam.mtype = self.types[fam.name] = mtype

    def declared_type(self, sample_name: str) -> str | None:
        """The declared TYPE of a sample name's family: exact, else via _bucket/_sum/_count/_total/... suffixes."""
        mtype = self.types.get(sample_name)
        if mtype is not None:
            return mtype
        for suffix, kinds in SUFFIX_TYPES:
            if sample_name.endswith(suffix) and len(sample_name) > len(suffix):
                mtype = self.types.get(sample_name[: -len(suffix)])
                if mtype in kinds:
                    return mtype
        return None


def _second_help(fam: Family) -> LineError:
    return LineError(f"second HELP line for metric name {go_quote(fam.name)}")


def _second_type(fam: Family) -> LineError:
    return LineError(f"second TYPE line for metric name {go_quote(fam.name)}, or TYPE reported after samples")
