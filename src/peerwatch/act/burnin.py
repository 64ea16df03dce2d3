"""InfiniBand burn-in results, port by port, and which ports to disable.

Input: CSV with one row per port and the header (any column order; ``lid`` optional)::

    node,device,port,lid,duration_s,avg_gbps,expected_gbps,symbol_errors,link_downed,link_error_recovery,result

``avg_gbps`` is the throughput the port sustained over ``duration_s`` seconds, ``expected_gbps`` its
line rate, the three counters are the port's increments over the run, ``result`` the burn-in tool's
own verdict (``pass`` or ``fail``). Decisions come from a table of :class:`PortRule` rows (data,
replaceable from a TOML file); a port is judged against its line rate and against the median of its
peers (ports with the same line rate), and a rule on a value that is unknown (NaN) never fires.
"""

from __future__ import annotations

import csv
import io
import operator
import shlex
import string
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from peerwatch.model import FloatArray

COLUMNS = (
    "node",
    "device",
    "port",
    "duration_s",
    "avg_gbps",
    "expected_gbps",
    "symbol_errors",
    "link_downed",
    "link_error_recovery",
    "result",
)
OPTIONAL = ("lid",)
COUNTERS = ("symbol_errors", "link_downed", "link_error_recovery")
ACTIONS = ("disable", "watch")  # most severe first
OPS: dict[str, Callable[[Any, Any], Any]] = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
MIN_PEERS = 3  # below this a median says little
DEFAULT_COMMAND = "ibportstate {lid} {port} disable"
COMMAND_FIELDS = ("node", "device", "port", "lid")


class BurninError(ValueError):
    """A burn-in file or rule table that cannot be used; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class PortRule:
    """One row of the decision table: ``measure op threshold`` ⇒ ``action``, explained by ``reason``.

    ``reason`` is a format string over ``value``, ``threshold`` and the port's fields.
    """

    name: str
    measure: str
    op: str
    threshold: float
    action: str
    reason: str


DEFAULT_RULES: tuple[PortRule, ...] = (
    PortRule("tool_failed", "failed", ">=", 1, "disable", "burn-in tool reported fail"),
    PortRule("link_downed", "link_downed", ">", 0, "disable", "link went down {value:g} time(s)"),
    PortRule(
        "slow_vs_line_rate",
        "vs_expected",
        "<",
        0.90,
        "disable",
        "{avg_gbps:g} Gb/s is {value:.1%} of the {expected_gbps:g} Gb/s line rate",
    ),
    PortRule(
        "slow_vs_peers",
        "vs_peers",
        "<",
        0.95,
        "disable",
        "{avg_gbps:g} Gb/s is {value:.1%} of the peer median {peer_gbps:g} Gb/s",
    ),
    # effective bit error rate: 1e-12 is the usual InfiniBand link acceptance limit
    PortRule("bit_errors", "symbol_ber", ">", 1e-12, "disable", "symbol error rate {value:.1e} per bit"),
    PortRule("link_recoveries", "link_error_recovery", ">", 1, "disable", "{value:g} link error recoveries"),
    # a single recovery or a few symbol errors are common and mostly harmless: keep an eye on the port
    PortRule("one_recovery", "link_error_recovery", ">=", 1, "watch", "{value:g} link error recovery"),
    PortRule("some_bit_errors", "symbol_ber", ">", 1e-14, "watch", "symbol error rate {value:.1e} per bit"),
)
MEASURES = (
    "failed",
    "link_downed",
    "link_error_recovery",
    "symbol_errors",
    "symbol_ber",
    "vs_expected",
    "vs_peers",
    "avg_gbps",
)


@dataclass(frozen=True, slots=True)
class BurninResults:
    """Parsed burn-in rows as columns (one entry per port, in file order)."""

    source: str
    lines: tuple[int, ...]
    node: tuple[str, ...]
    device: tuple[str, ...]
    port: tuple[int, ...]
    lid: tuple[str, ...]  # "" when unknown
    failed: FloatArray  # 1.0 when the tool said fail
    numbers: dict[str, FloatArray]  # duration_s, avg_gbps, expected_gbps and the counters

    def __len__(self) -> int:
        return len(self.node)


@dataclass(frozen=True, slots=True)
class PortDecision:
    """A port some rule fired on: the most severe action, every reason, and the command for ``disable``."""

    node: str
    device: str
    port: int
    lid: str
    action: str
    rules: tuple[str, ...]
    reasons: tuple[str, ...]
    command: str | None


@dataclass(frozen=True, slots=True)
class BurninReport:
    """Decisions over a whole burn-in run."""

    source: str
    ports: int
    nodes: int
    peer_median_gbps: dict[float, float]  # line rate -> median throughput of its ports
    decisions: tuple[PortDecision, ...]

    def of(self, action: str) -> list[PortDecision]:
        return [d for d in self.decisions if d.action == action]


def read_burnin(path: Path) -> BurninResults:
    """Read a burn-in CSV; any bad row raises :class:`BurninError` naming the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise BurninError(f"{path}: cannot read: {exc.strerror}") from exc
    return parse_burnin(text, str(path))


def parse_burnin(text: str, where: str) -> BurninResults:
    """Parse burn-in CSV text (see the module docstring for the columns)."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise BurninError(f"{where}:1: header lacks {', '.join(missing)}")
    rows: dict[str, list[Any]] = {c: [] for c in (*COLUMNS, *OPTIONAL, "line")}
    seen: dict[tuple[str, str, int], int] = {}
    for row in reader:
        line = reader.line_num
        try:
            parsed = _row(row)
        except ValueError as exc:
            raise BurninError(f"{where}:{line}: {exc}") from exc
        key = (parsed["node"], parsed["device"], parsed["port"])
        if key in seen:
            raise BurninError(f"{where}:{line}: port {key[0]} {key[1]}/{key[2]} already given on line {seen[key]}")
        seen[key] = line
        for c, v in parsed.items():
            rows[c].append(v)
        rows["line"].append(line)
    numeric = ("duration_s", "avg_gbps", "expected_gbps", *COUNTERS)
    return BurninResults(
        where,
        tuple(rows["line"]),
        tuple(rows["node"]),
        tuple(rows["device"]),
        tuple(rows["port"]),
        tuple(rows["lid"]),
        np.array(rows["result"], dtype=np.float64),
        {c: np.array(rows[c], dtype=np.float64) for c in numeric},
    )


def measures(results: BurninResults) -> dict[str, FloatArray]:
    """Every quantity a rule may test, one value per port (NaN = unknown), plus ``peer_gbps``."""
    n = results.numbers
    rate = n["expected_gbps"]
    peer = np.full(len(results), np.nan)
    for speed in np.unique(rate):
        same = rate == speed
        if same.sum() >= MIN_PEERS:
            peer[same] = np.median(n["avg_gbps"][same])
    bits = n["duration_s"] * rate * 1e9
    return {
        "failed": results.failed,
        "link_downed": n["link_downed"],
        "link_error_recovery": n["link_error_recovery"],
        "symbol_errors": n["symbol_errors"],
        "symbol_ber": n["symbol_errors"] / bits,
        "vs_expected": n["avg_gbps"] / rate,
        "vs_peers": n["avg_gbps"] / peer,
        "avg_gbps": n["avg_gbps"],
        "peer_gbps": peer,
    }


def decide(
    results: BurninResults, rules: Sequence[PortRule] = DEFAULT_RULES, command: str = DEFAULT_COMMAND
) -> BurninReport:
    """Apply the decision table to every port; ``command`` is rendered for each port to disable."""
    needs_lid = "lid" in check_command(command)
    m = measures(results)
    fired = [OPS[r.op](m[r.measure], r.threshold) for r in rules]  # NaN compares False: unknown never fires
    decisions = []
    for i in np.flatnonzero(np.any(fired, axis=0)) if rules else ():
        hits = [r for r, f in zip(rules, fired, strict=True) if f[i]]
        action = min((r.action for r in hits), key=ACTIONS.index)
        # a milder rule on a measure a harsher rule already judged adds nothing but noise
        worst = {r.measure: min((h.action for h in hits if h.measure == r.measure), key=ACTIONS.index) for r in hits}
        hits = [r for r in hits if r.action == worst[r.measure]]
        port = {c: results.numbers[c][i] for c in ("avg_gbps", "expected_gbps")} | {"peer_gbps": m["peer_gbps"][i]}
        # The command is printed for a shell: names from the file are quoted, so "a;reboot" stays one word.
        place = {
            "node": shlex.quote(results.node[i]),
            "device": shlex.quote(results.device[i]),
            "port": results.port[i],
            "lid": shlex.quote(results.lid[i]) if results.lid[i] else "",
        }
        cmd = command.format(**place) if action == "disable" and (results.lid[i] or not needs_lid) else None
        decisions.append(
            PortDecision(
                results.node[i],
                results.device[i],
                results.port[i],
                results.lid[i],
                action,
                tuple(r.name for r in hits),
                tuple(r.reason.format(value=m[r.measure][i], threshold=r.threshold, **port) for r in hits),
                cmd,
            )
        )
    decisions.sort(key=lambda d: (ACTIONS.index(d.action), d.node, d.device, d.port))
    speeds = {
        float(s): float(np.median(results.numbers["avg_gbps"][results.numbers["expected_gbps"] == s]))
        for s in np.unique(results.numbers["expected_gbps"])
    }
    return BurninReport(results.source, len(results), len(set(results.node)), speeds, tuple(decisions))


def check_command(template: str) -> set[str]:
    """The fields a command template uses; rejects any but node, device, port and lid."""
    try:
        names = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as exc:
        raise BurninError(f"command template {template!r}: {exc}") from exc
    unknown = names - set(COMMAND_FIELDS)
    if unknown:
        raise BurninError(f"command template {template!r} uses {sorted(unknown)}; allowed: {', '.join(COMMAND_FIELDS)}")
    return names


def load_rules(path: Path) -> tuple[PortRule, ...]:
    """Read a decision table from TOML: ``[[rule]]`` tables with the fields of :class:`PortRule`."""
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BurninError(f"{path}: {exc}") from exc
    extra = set(table) - {"rule"}
    if extra or not isinstance(table.get("rule"), list):
        raise BurninError(f"{path}: expected only [[rule]] tables, found {sorted(extra) or 'no rule'}")
    names = [f.name for f in fields(PortRule)]
    rules = []
    for i, item in enumerate(table["rule"], 1):
        where = f"{path}: rule {i}"
        if set(item) != set(names):
            raise BurninError(f"{where}: needs exactly the keys {', '.join(names)}; got {', '.join(sorted(item))}")
        if item["measure"] not in MEASURES or item["op"] not in OPS or item["action"] not in ACTIONS:
            raise BurninError(
                f"{where}: measure must be one of {MEASURES}, op one of {tuple(OPS)}, action one of {ACTIONS}"
            )
        if not isinstance(item["threshold"], int | float) or isinstance(item["threshold"], bool):
            raise BurninError(f"{where}: threshold must be a number")
        try:
            str(item["reason"]).format(value=1.0, threshold=1.0, avg_gbps=1.0, expected_gbps=1.0, peer_gbps=1.0)
        except (KeyError, ValueError, IndexError) as exc:
            raise BurninError(f"{where}: reason {item['reason']!r} cannot be formatted: {exc!r}") from exc
        text = {k: str(item[k]) for k in ("name", "measure", "op", "action", "reason")}
        rules.append(PortRule(threshold=float(item["threshold"]), **text))
    return tuple(rules)


def _row(row: dict[str, str | None]) -> dict[str, Any]:
    def text(col: str) -> str:
        value = (row.get(col) or "").strip()
        if not value and col not in OPTIONAL:
            raise ValueError(f"{col} is empty")
        return value

    def number(col: str, low: float, strict: bool = False) -> float:
        try:
            value = float(text(col))
        except ValueError:
            raise ValueError(f"{col} {row.get(col)!r} is not a number") from None
        if not (value > low if strict else value >= low) or value == float("inf"):
            raise ValueError(f"{col} {value:g} must be {'>' if strict else '>='} {low:g}")
        return value

    result = text("result").lower()
    if result not in ("pass", "fail"):
        raise ValueError(f"result {row.get('result')!r} is not pass or fail")
    port = number("port", 1)
    if port != int(port):
        raise ValueError(f"port {port:g} is not an integer")
    return {
        "node": text("node"),
        "device": text("device"),
        "port": int(port),
        "lid": text("lid"),
        "duration_s": number("duration_s", 0, strict=True),
        "avg_gbps": number("avg_gbps", 0),
        "expected_gbps": number("expected_gbps", 0, strict=True),
        "result": 1.0 if result == "fail" else 0.0,
        **{c: number(c, 0) for c in COUNTERS},
    }
