"""Property tests: no crash on any input, samples round-trip, and the fast path agrees with the careful one."""

from __future__ import annotations

import math
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peerwatch.model import ProblemLog
from peerwatch.sources.exposition import ExpositionError, ParsedSample, parse_text

FAST = settings(max_examples=250, deadline=timedelta(milliseconds=500), suppress_health_check=[HealthCheck.too_slow])

VALID_DOCS = [
    '# HELP a Help.\n# TYPE a counter\na{x="1",y="2"} 1.5 1234567890\na{x="2", y="3",} -Inf\n',
    '# TYPE h histogram\nh_bucket{le="0.5"} 1\nh_bucket{le="+Inf"} 2\nh_sum 3\nh_count 2\n',
    '# TYPE s summary\ns{quantile="0.9",n="a"} 1\ns_sum{n="a"} 2\ns_count{n="a"} 3\n',
    '{"a.b","c.d"="e\\"f\\\\g\\nh"} NaN\n# HELP "a.b" x\\ny\n',
    'all_smi_gpu{gpu="H100", instance="n1"} 0.37\nall_smi_gpu{gpu="H100", instance="n2"} 1e-3 -5\n',
    'a_total 1 # {id="x"} 0.5 1.5\n# EOF\n',
]
NOISE = st.sampled_from([*'{}",=\\ \t\n\r#.eE+-_:0123456789aZ', "NaN", "Inf", "# TYPE ", "# HELP ", "\udcff", "é"])


@st.composite
def mutated_docs(draw: st.DrawFn) -> str:
    """A valid document with a few characters inserted, deleted or replaced."""
    doc = draw(st.sampled_from(VALID_DOCS)) * draw(st.integers(1, 2))
    for _ in range(draw(st.integers(0, 6))):
        at = draw(st.integers(0, len(doc)))
        action = draw(st.sampled_from(["insert", "delete", "replace"]))
        noise = draw(NOISE)
        if action == "insert":
            doc = doc[:at] + noise + doc[at:]
        elif action == "delete":
            doc = doc[:at] + doc[at + 1 :]
        else:
            doc = doc[:at] + noise + doc[at + 1 :]
    return doc


Row = tuple[str, tuple[tuple[str, str], ...], float | str, float | None]


def outcome(text: str | bytes, strict: bool) -> tuple[list[Row], list[str]]:
    """Samples (NaN made comparable) and problems; in strict mode the error message stands for the problems."""
    problems = ProblemLog()
    try:
        samples = parse_text(text, strict=strict, problems=problems)
    except ExpositionError as exc:
        return [], [f"{exc.line}: {exc.msg}"]
    comparable: list[Row] = [
        (s.name, s.labels, "NaN" if math.isnan(s.value) else s.value, s.timestamp) for s in samples
    ]
    return comparable, [str(p) for p in problems]


@FAST
@given(st.one_of(st.text(max_size=300), st.binary(max_size=300), mutated_docs()))
def test_lenient_never_raises_and_strict_raises_only_exposition_errors(text: str | bytes) -> None:
    problems = ProblemLog()
    samples = parse_text(text, "f", problems=problems)
    assert all(isinstance(s, ParsedSample) and isinstance(s.value, float) for s in samples)
    assert all(p.where.startswith("f:") and p.message for p in problems)
    try:
        parse_text(text, strict=True)
    except ExpositionError as exc:
        assert exc.line >= 1 and str(exc).startswith(f"text format parsing error in line {exc.line}: ")
    else:  # lenient takes more than strict, never less or otherwise
        assert outcome(text, strict=False) == outcome(text, strict=True)


@FAST
@given(mutated_docs(), st.booleans())
def test_fast_path_decides_as_the_careful_path(doc: str, strict: bool) -> None:
    # A leading blank changes nothing in the format but keeps every line off the fast path.
    indented = "\n".join(" " + line if line else line for line in doc.split("\n"))
    assert outcome(indented, strict) == outcome(doc, strict)


LEGACY_NAME = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,12}", fullmatch=True)
UTF8_NAME = st.text(st.characters(codec="utf-8"), min_size=1, max_size=8)
LABEL_NAME = st.one_of(st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,8}", fullmatch=True), UTF8_NAME).filter(
    lambda n: n != "__name__"
)
LABEL_VALUE = st.text(st.characters(codec="utf-8"), max_size=12)
VALUE = st.floats(allow_nan=True, allow_infinity=True)
STAMP_MS = st.one_of(st.none(), st.integers(-(2**62), 2**62))


def quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def legacy(name: str, label: bool) -> bool:
    first = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_" + ("" if label else ":")
    return bool(name) and name[0] in first and all(c.isascii() and (c.isalnum() or c in first) for c in name)


Expected = tuple[str, tuple[tuple[str, str], ...], float, int | None]


@st.composite
def sample_lines(draw: st.DrawFn) -> tuple[str, Expected]:
    name = draw(st.one_of(LEGACY_NAME, UTF8_NAME))
    labels = draw(st.dictionaries(LABEL_NAME, LABEL_VALUE, max_size=4))
    value, stamp = draw(VALUE), draw(STAMP_MS)
    sep = draw(st.sampled_from([",", ", "]))
    pairs = [f"{k if legacy(k, True) else quoted(k)}={quoted(v)}" for k, v in labels.items()]
    if legacy(name, False):
        trailing = draw(st.sampled_from(["", ","])) if pairs else ""  # a trailing comma needs a pair before it
        braces = bool(pairs) or draw(st.booleans())
        text = name + ("{" + sep.join(pairs) + trailing + "}" if braces else "")
    else:
        text = "{" + sep.join([quoted(name), *pairs]) + "}"
    text += f" {value!r}" + ("" if stamp is None else f" {stamp}")
    return text, (name, tuple(sorted(labels.items())), value, stamp)


@FAST
@given(st.lists(sample_lines(), max_size=8), st.booleans())
def test_rendered_samples_parse_back_identically(lines: list[tuple[str, Expected]], strict: bool) -> None:
    text = "".join(line + "\n" for line, _ in lines)
    got, problems = outcome(text, strict)
    assert problems == []
    want = [
        (name, labels, "NaN" if math.isnan(value) else value, None if ms is None else ms / 1000)
        for _, (name, labels, value, ms) in lines
    ]
    assert got == want
