"""The exposition parser against the third-party suites (expfmt, OpenMetrics) and real exporter output."""

from __future__ import annotations

import base64
import gzip
import io
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from peerwatch.model import ProblemLog
from peerwatch.sources.exposition import (
    ExpositionError,
    ExpositionParser,
    ParsedSample,
    blocks_from_samples,
    parse_text,
)

Row = tuple[str, tuple[tuple[str, str], ...], float | str, float | None]
NAN = "NaN"  # stands for a NaN value, so that rows compare equal


def row(name: str, labels: dict[str, str] | None = None, value: float = 1.0, ts: float | None = None) -> Row:
    return (name, tuple(sorted((labels or {}).items())), NAN if math.isnan(value) else value, ts)


def rows(samples: list[ParsedSample]) -> list[Row]:
    return [row(s.name, dict(s.labels), s.value, s.timestamp) for s in samples]


def expfmt_cases(shared: Path, kind: str) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads(
        (shared / "prometheus-common-expfmt/text_parse_test_cases.json").read_text()
    )[kind]
    return cases


def case_input(case: dict[str, Any]) -> str | bytes:
    return base64.b64decode(case["in_base64"]) if "in_base64" in case else str(case["in"])


def lenient(text: str | bytes, source: str = "<input>") -> tuple[list[ParsedSample], ProblemLog]:
    problems = ProblemLog()
    return parse_text(text, source, problems=problems), problems


# --- prometheus/common expfmt cases ---------------------------------------------------------

HIST = "request_duration_microseconds"
# Exact samples of valid cases, worked out from text_parse_test.go's expected families.
EXPFMT_VALID = {
    0: [],
    1: [row("minimal_metric", value=1.234), row("another_metric", value=-3e3, ts=103.948), row("no_labels", value=3)],
    2: [
        row("name", {"labelname": "val1", "basename": "basevalue"}, math.nan),
        row("name", {"labelname": "val2", "basename": 'base"v\\al\nue'}, 0.23, 1234567.89),
        row("name2", {"labelname": "val2", "basename": "basevalue2"}, math.inf, 54.321),
        row("name2", {"labelname": "val1"}, -math.inf),
    ],
    4: [
        *(row(f"{HIST}_bucket", {"le": le}, v) for le, v in [("100", 123), ("120", 412), ("144", 592)]),
        row(f"{HIST}_bucket", {"le": "172.8"}, 1524),
        row(f"{HIST}_bucket", {"le": "+Inf"}, 2693),
        row(f"{HIST}_sum", value=1756047.3),
        row(f"{HIST}_count", value=2693),
    ],
    5: [row("my.noncompliant.metric", {"label.name": "value"})],
    6: [
        row("name.with.dots", {"labelname": "val1", "basename": "basevalue"}, 42),
        row("name.with.dots", {"labelname": "val2", "basename": "basevalue"}, 0.23, 1234567.89),
    ],
    7: [row("name.with.dots", value=42), row("name.with.dots", value=0.23, ts=1234567.89)],
    8: [
        row("gauge.name", {"name.1": "val with\nnew line", "name*2": 'val with \\backslash and "quotes"'}, math.inf),
        row("gauge.name", {"name.1": "Björn", "name*2": "佖佥"}, 3.14e42),
    ],
    9: [row('my"noncompliant\nmetric\\', {'label"name\n': "value"})],
    10: [row("my.noncompliant.metric", {"labelname": "value"})],
    11: [row("name.1"), row("name.2"), row("name.3")],
    13: [
        *(row(f"{HIST}_bucket", {"le": le}, v) for le, v in [("100", 123), ("120", 412), ("144", 592)]),
        row(f"{HIST}_bucket", {"le": "172.8"}, 1524),
        row(f"{HIST}_sum", value=1756047.3),
        row(f"{HIST}_count", value=2693.9),
    ],
}
# Case 3, the "evil summary": a few of its samples, in order.
EXPFMT_CASE3_PART = [
    row("my_summary", {"n1": "val1", "quantile": "0.5"}, 110),
    row("decoy", value=-1, ts=-0.002),
    row("my_summary", {"n1": "val1", "quantile": "0.9"}, 140, 0.001),
    row("my_summary_count", {"n1": "val1"}, 42),
    row("my_summary_sum", {"n1": "val1"}, 4711, 0.002),
]
EXPFMT_TYPES = {2: {"name": "counter", "name2": "gauge"}, 3: {"my_summary": "summary", "another_summary": "summary"}}
EXPFMT_HELPS = {
    2: {"name": "two-line\n doc  str\\ing", "name2": 'doc str"ing 2'},
    8: {"gauge.name": 'gauge\ndoc\nstr"ing'},
}
# Invalid cases lenient mode takes on purpose (each line is kept), and why.
LENIENT_TAKES = {
    0: "missing final newline (the real dcgm-exporter fixture ends so)",
    1: r"unknown escape \t kept as written, as Prometheus' scraper and OpenMetrics do",
    9: "2.72 is an OpenMetrics float timestamp in seconds",
    36: r"unknown escape \x in a quoted name kept as written",
    38: r"unknown escape \t in a quoted name kept as written",
}


def test_expfmt_suite_has_the_documented_size(shared_data: Path) -> None:
    assert len(expfmt_cases(shared_data, "valid")) == 18
    assert len(expfmt_cases(shared_data, "invalid")) == 48


@pytest.mark.parametrize("index", range(18))
def test_expfmt_valid_case_parses_in_both_modes(shared_data: Path, index: int) -> None:
    case = expfmt_cases(shared_data, "valid")[index]
    parser = ExpositionParser(strict=True)
    strict = parser.parse_text(case_input(case))
    loose, problems = lenient(case_input(case))
    assert rows(loose) == rows(strict) and len(problems) == 0
    if index in EXPFMT_VALID:
        assert rows(strict) == EXPFMT_VALID[index]
    if index == 3:
        assert rows(strict)[:5] == EXPFMT_CASE3_PART and len(strict) == 12
    assert parser.types == EXPFMT_TYPES.get(index, parser.types)
    assert parser.helps == EXPFMT_HELPS.get(index, parser.helps)


@pytest.mark.parametrize("index", range(48))
def test_expfmt_invalid_case_fails_as_prometheus_says(shared_data: Path, index: int) -> None:
    case = expfmt_cases(shared_data, "invalid")[index]
    data, expected = case_input(case), case["error_prefix_utf8_validation"]
    if expected is None:  # valid under UTF-8 names (41, 42)
        parse_text(data, strict=True)
    else:
        with pytest.raises(ExpositionError) as err:
            parse_text(data, strict=True)
        assert str(err.value).startswith(expected)
        assert err.value.line == int(expected.split("line ")[1].split(":")[0])
    _, problems = lenient(data, "case.prom")  # never raises
    if expected is None or index in LENIENT_TAKES:
        assert len(problems) == 0, [str(p) for p in problems]
    else:
        first = next(iter(problems))
        assert first.where == f"case.prom:{err.value.line}"
        assert first.message == err.value.msg


@pytest.mark.parametrize("name", [f"from_test_parse_{i}" for i in range(5)] + ["minimal"])
def test_fuzz_corpus_valid_inputs(shared_data: Path, name: str) -> None:
    data = (shared_data / "prometheus-common-expfmt/fuzz-corpus" / name).read_bytes()
    strict = parse_text(data, strict=True)
    loose, problems = lenient(data)
    assert rows(loose) == rows(strict) and len(problems) == 0
    if name == "minimal":
        assert rows(strict) == [row("m", value=0)]


# Same reasons as LENIENT_TAKES: no final newline, unknown escape kept, float timestamp.
CORPUS_LENIENT_TAKES = {"from_test_parse_error_0", "from_test_parse_error_1", "from_test_parse_error_9"}


@pytest.mark.parametrize("name", [f"from_test_parse_error_{i}" for i in range(20)])
def test_fuzz_corpus_invalid_inputs(shared_data: Path, name: str) -> None:
    data = (shared_data / "prometheus-common-expfmt/fuzz-corpus" / name).read_bytes()
    with pytest.raises(ExpositionError):
        parse_text(data, strict=True)
    _, problems = lenient(data)
    assert (len(problems) == 0) == (name in CORPUS_LENIENT_TAKES)


def client_rows(text: str) -> list[Row]:
    """prometheus_client's samples, with the ``_total`` it adds to counter names taken off again."""
    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            name = s.name
            if family.type == "counter" and name == family.name + "_total" and f"\n{name}" not in "\n" + text:
                name = family.name
            stamp = None if s.timestamp is None else float(s.timestamp)
            out.append(row(name, s.labels, s.value, stamp))
    return out


def ordered(r: list[Row]) -> list[Row]:
    return sorted(r, key=repr)


@pytest.mark.parametrize("name", ["text", "text.gz"])
def test_real_prometheus_scrape_matches_prometheus_client(shared_data: Path, name: str) -> None:
    data = (shared_data / "prometheus-common-expfmt" / name).read_bytes()
    text = gzip.decompress(data).decode() if name.endswith(".gz") else data.decode()
    ours = parse_text(text, strict=True)
    assert len(ours) == 248
    assert ordered(rows(ours)) == ordered(client_rows(text))


# --- real exporter output ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "count"),
    [
        ("node_exporter/e2e-output.txt", 3027),
        ("datadog-dcgm-fixture/metrics.txt", 38),
        ("all-smi/sample-metrics-docker-cpu-only.prom", 21),
    ],
)
def test_real_exporter_output_parses_cleanly(shared_data: Path, path: str, count: int) -> None:
    text = (shared_data / path).read_text()
    samples, problems = lenient(text)
    assert len(problems) == 0 and len(samples) == count
    assert count == sum(1 for line in text.split("\n") if line.strip() and not line.startswith("#"))
    if "all-smi" in path:  # prometheus_client refuses all-smi's repeated HELP; its ", " must leave clean names
        assert all(re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", k) for s in samples for k, _ in s.labels)
        assert ("hostname", "a8416cc9eadf") in samples[0].labels
    else:
        assert ordered(rows(samples)) == ordered(client_rows(text))
    # Streaming the file's lines gives the same as the whole text.
    streamed = list(ExpositionParser().parse(io.BytesIO(text.encode())))
    assert rows(streamed) == rows(samples)


def test_dcgm_types_are_declared(shared_data: Path) -> None:
    parser = ExpositionParser()
    parser.parse_text((shared_data / "datadog-dcgm-fixture/metrics.txt").read_bytes())
    assert parser.declared_type("DCGM_FI_DEV_GPU_TEMP") == "gauge"
    assert parser.declared_type("DCGM_FI_DEV_PCIE_REPLAY_COUNTER") == "counter"


# --- OpenMetrics parser suite -----------------------------------------------------------------

# Bad OpenMetrics cases lenient mode takes on purpose, by reason. Every other bad case must be reported.
OPENMETRICS_TAKES: dict[str, list[str]] = {
    "0.0.4 has no # EOF and allows blank lines and text after # EOF (recordings join scrapes)": [
        "bad_no_eof",
        "bad_blank_line",
        "bad_text_after_eof_1",
    ],
    "identical repeated HELP/TYPE is accepted: all-smi repeats them per sample": [
        "bad_clashing_names_0",
        "bad_repeated_metadata_0",
        "bad_repeated_metadata_1",
        "bad_repeated_metadata_2",
    ],
    "# UNIT and unknown # lines are comments in 0.0.4": [
        *(f"bad_unit_{i}" for i in range(8)),
        "bad_repeated_metadata_3",
        "bad_metadata",
        "bad_metadata_in_wrong_place_2",
    ],
    "HELP/TYPE without name or text, or after a blank, are plain comments in expfmt": [
        *(f"bad_help_{i}" for i in range(5)),
        *(f"bad_type_{i}" for i in range(4)),
    ],
    "expfmt allows HELP after samples": ["bad_metadata_in_wrong_place_1"],
    "untyped is a 0.0.4 type": ["bad_type_7"],
    "trailing blanks are tolerated": ["bad_type_6", "bad_value_2", "bad_value_3", "bad_exemplars_4", "bad_exemplars_5"],
    "expfmt allows several blanks, no blank after '}', and a trailing comma": [
        "bad_value_1",
        "bad_invalid_labels_6",
        "bad_missing_or_extra_commas_2",
    ],
    "OpenMetrics name clashes (_created, _total) are not checked": ["bad_clashing_names_2"],
    "per-type value rules (NaN or negative counters, sums, info/stateset values) are data: the frames decide": [
        *(f"bad_counter_values_{i}" for i in range(20) if i not in (6, 7)),
        "bad_info_and_stateset_values_0",
        "bad_info_and_stateset_values_1",
        *(f"bad_stateset_info_values_{i}" for i in range(4)),
    ],
    "histogram/summary completeness, bucket order and quantile range are not checked (0.0.4 does not ask)": [
        *(f"bad_histograms_{i}" for i in range(15)),
        *(f"bad_missing_or_invalid_labels_for_a_type_{i}" for i in (0, 1, 3, 4, 5, 6, 7)),
    ],
    "sample order and timestamp monotonicity are not checked (recordings interleave scrapes)": [
        *(f"bad_grouping_or_ordering_{i}" for i in (0, 2, 3, 4, 5, 6, 7, 8, 9, 10)),
    ],
    "exemplars are dropped; only their syntax is checked, not length, type or sample": [
        "bad_exemplar_complex_chars",
        "bad_exemplars_6",
        *(f"bad_exemplars_on_unallowed_metric_types_{i}" for i in range(3)),
        *(f"bad_exemplars_on_unallowed_samples_{i}" for i in range(4)),
    ],
}


def openmetrics_cases(shared: Path) -> list[tuple[str, bool, bytes]]:
    out = []
    for case in sorted((shared / "openmetrics-parser-tests/parsers").iterdir()):
        meta = json.loads((case / "test.json").read_text())
        out.append((case.name, bool(meta["shouldParse"]), (case / meta["file"]).read_bytes()))
    return out


def test_openmetrics_good_cases_parse_without_problems(shared_data: Path) -> None:
    cases = [(name, data) for name, good, data in openmetrics_cases(shared_data) if good]
    assert len(cases) == 44
    troubled = {name: [str(p) for p in lenient(data)[1]] for name, data in cases}
    assert {name: msgs for name, msgs in troubled.items() if msgs} == {}


def test_openmetrics_bad_cases_are_reported_or_taken_on_purpose(shared_data: Path) -> None:
    cases = [(name, data) for name, good, data in openmetrics_cases(shared_data) if not good]
    assert len(cases) == 167
    taken = {name for names in OPENMETRICS_TAKES.values() for name in names}
    assert taken <= {name for name, _ in cases}, "the table names a case that does not exist"
    silent = {name for name, data in cases if len(lenient(data)[1]) == 0}
    assert silent - taken == set(), "bad cases neither reported nor listed"
    assert taken - silent == set(), "listed as taken but now reported: update the table"


def test_openmetrics_samples_come_through(shared_data: Path) -> None:
    cases = {name: data for name, _, data in openmetrics_cases(shared_data)}
    samples, _ = lenient(cases["timestamps"])
    assert [s.timestamp for s in samples] == [0.0, 0.0, 1.1, 12345678901234567890.1234567890, 1500.0, 1234567.89]
    samples, _ = lenient(cases["escaping"])
    assert [s.labels[0][1] for s in samples] == ['b"a\nr', "b\\a\\z", 'b"a\nr # ', "b\\a\\z # "]
    samples, _ = lenient(cases["exemplars_with_hash_in_label_values"])
    assert rows(samples)[0] == row("a_bucket", {"le": "1.0", "foo": "bar # "}, 0)


# --- lenient mode: what real exporters emit ----------------------------------------------------

LENIENT = [
    ("crlf", 'a 1\r\nb{x="y"} 2\r\n', [row("a"), row("b", {"x": "y"}, 2)], []),
    ("all-smi separator", 'a{x="1", y="2"} 3\n', [row("a", {"x": "1", "y": "2"}, 3)], []),
    ("trailing comma", 'a{x="1",} 3\n', [row("a", {"x": "1"}, 3)], []),
    ("labels sorted", 'a{z="1",b="2",m="3"} 3\n', [row("a", {"b": "2", "m": "3", "z": "1"}, 3)], []),
    ("missing final newline", "a 1\nb 2", [row("a"), row("b", value=2)], []),
    ("eof, unit, note", "# TYPE a gauge\n# UNIT a s\n# NOTE x\na 1\n# EOF\n", [row("a")], []),
    ("exemplar after value", 'a_total 1 # {id="x"} 0.5\n', [row("a_total")], []),
    ("exemplar after timestamp", 'a_total 1 1000 # {id="x"} 0.5 1.5\n', [row("a_total", ts=1.0)], []),
    ("bad exemplar", "a_total 1 # x\nb 2\n", [row("b", value=2)], [(1, 'invalid exemplar "# x"')]),
    ("integer timestamp is ms", "a 1 1520879607789\n", [row("a", ts=1520879607.789)], []),
    (
        "float timestamp is seconds",
        "a 1 1520879607.789\nb 1 1.5e3\n",
        [row("a", ts=1520879607.789), row("b", ts=1500.0)],
        [],
    ),
    (
        "NaN and infinities are data",
        "a NaN\nb +Inf\nc -Inf\n",
        [row("a", value=math.nan), row("b", value=math.inf), row("c", value=-math.inf)],
        [],
    ),
    (
        "far and negative timestamps pass",
        "a 1 99999999999999\nb 1 -5000\n",
        [row("a", ts=99999999999.999), row("b", ts=-5.0)],
        [],
    ),
    ("unknown escape kept", 'a{p="C:\\temp"} 1\n', [row("a", {"p": "C:\\temp"})], []),
    ("trailing blanks", "a 1 \t\n# TYPE b gauge \nb 2\n", [row("a"), row("b", value=2)], []),
    (
        "repeated identical metadata",
        '# HELP a x\n# TYPE a gauge\na{i="0"} 1\n# HELP a x\n# TYPE a gauge\na{i="1"} 2\n',
        [row("a", {"i": "0"}), row("a", {"i": "1"}, 2)],
        [],
    ),
    (
        "conflicting TYPE: first wins",
        "# TYPE a gauge\na 1\n# TYPE a counter\na 2\n",
        [row("a"), row("a", value=2)],
        [(3, 'second TYPE line for metric name "a", or TYPE reported after samples')],
    ),
    ("conflicting HELP", "# HELP a x\n# HELP a y\na 1\n", [row("a")], [(2, 'second HELP line for metric name "a"')]),
    (
        "one bad line, the rest kept",
        "a 1\nb{x=1} 2\nc 3\n",
        [row("a"), row("c", value=3)],
        [(2, "expected '\"' at start of label value, found '1'")],
    ),
    ("duplicate labels", 'a{x="1",x="2"} 1\nb 2\n', [row("b", value=2)], [(1, 'duplicate label names for metric "a"')]),
    (
        "invalid UTF-8",
        b'a{x="\xff"} 1\nb{x="\xc3\xa9"} 2\n',
        [row("b", {"x": "é"}, 2)],
        [(1, 'invalid label value "\\xff"')],
    ),
    ("overflowing value", "a 1e400\nb 1e300\n", [row("b", value=1e300)], [(1, 'expected float as value, got "1e400"')]),
]


@pytest.mark.parametrize(("text", "expected", "problems"), [c[1:] for c in LENIENT], ids=[c[0] for c in LENIENT])
def test_lenient_mode(text: str | bytes, expected: list[Row], problems: list[tuple[int, str]]) -> None:
    samples, log = lenient(text, "x.prom")
    assert rows(samples) == expected
    assert [(p.where, p.message) for p in log] == [(f"x.prom:{n}", m) for n, m in problems]


def test_lenient_types_include_openmetrics_and_first_type_wins() -> None:
    parser = ExpositionParser()
    parser.parse_text(
        "# TYPE a info\n# TYPE b stateset\n# TYPE c unknown\n# TYPE d GAUGE_HISTOGRAM\n"
        "# TYPE e gauge\n# TYPE e counter\n"
    )
    assert parser.types == {"a": "info", "b": "stateset", "c": "unknown", "d": "gaugehistogram", "e": "gauge"}
    assert len(parser.problems) == 1


STRICT_REJECTS = [
    ("crlf", "a 1\r\n", 'expected float as value, got "1\\r"'),
    ("exemplar", 'a_total 1 # {id="x"} 0.5\n', 'expected integer as timestamp, got "#"'),
    ("float timestamp", "a 1 1.5\n", 'expected integer as timestamp, got "1.5"'),
    ("repeated HELP", "# HELP a x\n# HELP a x\n", 'second HELP line for metric name "a"'),
    ("openmetrics type", "# TYPE a info\n", 'unknown metric type "info"'),
    ("trailing blank", "a 1 \n", 'expected integer as timestamp, got ""'),
    ("timestamp beyond int64", "a 1 9223372036854775808\n", "expected integer as timestamp"),
    ("comment without newline", "a 1\n# x", "unexpected end of input stream"),
]


@pytest.mark.parametrize(("text", "message"), [c[1:] for c in STRICT_REJECTS], ids=[c[0] for c in STRICT_REJECTS])
def test_strict_mode_rejects_what_lenient_takes(text: str, message: str) -> None:
    with pytest.raises(ExpositionError) as err:
        parse_text(text, "f.prom", strict=True)
    assert err.value.msg.startswith(message)
    assert str(err.value).startswith(f"text format parsing error in line {err.value.line}: {message}")
    assert str(err.value).endswith("(in f.prom)")


# --- streaming lines ---------------------------------------------------------------------------

STREAMS: list[tuple[str, list[bytes | str], list[Row]]] = [
    ("bytes lines", [b"a 1\n", b"b 2\n"], [row("a"), row("b", value=2)]),
    ("str lines without newlines", ["a 1", "b 2"], [row("a"), row("b", value=2)]),
    ("an item holding several lines", ["a 1\nb 2\n", "c 3\n"], [row("a"), row("b", value=2), row("c", value=3)]),
    ("iterator", list(io.BytesIO(b"# TYPE a gauge\na 1\n")), [row("a")]),
]


@pytest.mark.parametrize(("lines", "expected"), [c[1:] for c in STREAMS], ids=[c[0] for c in STREAMS])
def test_parse_streams_lines(lines: list[bytes | str], expected: list[Row]) -> None:
    assert rows(list(ExpositionParser(strict=True).parse(iter(lines)))) == expected


@pytest.mark.parametrize(
    ("lines", "line"), [([b"a 1\n", b"b 2"], 2), (["a 1"], 1)], ids=["last line unterminated", "lone line"]
)
def test_parse_reports_an_unterminated_last_line_in_strict_mode(lines: list[bytes | str], line: int) -> None:
    with pytest.raises(ExpositionError, match="unexpected end of input stream") as err:
        list(ExpositionParser(strict=True).parse(lines))
    assert err.value.line == line
    assert rows(list(ExpositionParser().parse(lines)))[-1][0] in ("a", "b")


# --- declared types and blocks -----------------------------------------------------------------

DECLARED = "# TYPE h histogram\n# TYPE s summary\n# TYPE c counter\n# TYPE g gauge\n# TYPE x_total counter\n"


@pytest.mark.parametrize(
    ("name", "mtype"),
    [
        ("h_bucket", "histogram"),
        ("h_sum", "histogram"),
        ("h_count", "histogram"),
        ("h_created", "histogram"),
        ("s", "summary"),
        ("s_sum", "summary"),
        ("s_count", "summary"),
        ("s_bucket", None),
        ("c", "counter"),
        ("c_total", "counter"),
        ("c_created", "counter"),
        ("x_total", "counter"),
        ("g", "gauge"),
        ("g_sum", None),
        ("g_total", None),
        ("unknown", None),
        ("_total", None),
    ],
)
def test_declared_type_maps_sample_names_to_their_family(name: str, mtype: str | None) -> None:
    parser = ExpositionParser()
    parser.parse_text(DECLARED)
    assert parser.declared_type(name) == mtype


def test_blocks_group_series_in_chunks_with_default_timestamps() -> None:
    text = DECLARED + 'c_total{i="1"} 1 1000\ng 5\nc_total{i="2"} 2 1000\nc_total{i="1"} 3 2000\ng 6 3000\n'
    parser = ExpositionParser()
    samples = parser.parse_text(text)
    blocks = list(blocks_from_samples(samples, parser.declared_type, default_timestamp=99.0))
    got = [(str(b.key), b.mtype, b.timestamps.tolist(), b.values.tolist()) for b in blocks]
    assert got == [
        ('c_total{i="1"}', "counter", [1.0, 2.0], [1.0, 3.0]),
        ("g{}", "gauge", [99.0, 3.0], [5.0, 6.0]),
        ('c_total{i="2"}', "counter", [1.0], [2.0]),
    ]
    assert all(b.values.dtype == np.float64 and b.timestamps.dtype == np.float64 for b in blocks)
    chunked = [
        (str(b.key), b.values.tolist()) for b in blocks_from_samples(samples, parser.declared_type, 0.0, chunk=2)
    ]
    assert chunked == [
        ('c_total{i="1"}', [1.0]),
        ("g{}", [5.0]),
        ('c_total{i="2"}', [2.0]),
        ('c_total{i="1"}', [3.0]),
        ("g{}", [6.0]),
    ]
    assert list(blocks_from_samples([], parser.declared_type, 0.0)) == []
