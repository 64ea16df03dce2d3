"""Step-time logs turned into a throughput series.

Two forms are read, line by line, anything else being log noise:

* Megatron-LM: ``[2024-05-01 12:00:00] iteration  100/ 5000 | consumed samples: ... | elapsed time
  per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 402.3 | ... | global batch size: 512 |``
  (timestamp and TFLOP/s only in recent releases);
* key-value: ``step=120 step_time=0.85 tokens_per_sec=12000 rank=3`` (``=`` or ``:``; the keys are
  the table below), optionally after an ISO timestamp and torchrun's ``[rank3]:``/``[default3]:``.

The unit used is the best one most records carry (TFLOP/s, tokens/s, ... down to iterations/s
from the step time). Without timestamps, time is the running sum of step times; a step number
that goes back is a restart and opens a gap so that runs stay apart.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

import numpy as np

from peerwatch.model import ProblemLog
from peerwatch.training.series import InputError, TrainingSeries, align_steps, job_median, parse_ts

# (key, unit it gives, factor to that unit); higher-is-better first, in order of preference.
RATE_KEYS: tuple[tuple[str, str, float], ...] = (
    ("mfu", "MFU", 1.0),
    ("tflops", "TFLOP/s", 1.0),
    ("tflops_per_gpu", "TFLOP/s", 1.0),
    ("tokens_per_sec", "tokens/s", 1.0),
    ("tokens_per_second", "tokens/s", 1.0),
    ("tokens/s", "tokens/s", 1.0),
    ("tok/s", "tokens/s", 1.0),
    ("tps", "tokens/s", 1.0),
    ("throughput", "throughput", 1.0),
    ("samples_per_sec", "samples/s", 1.0),
    ("samples_per_second", "samples/s", 1.0),
    ("samples/s", "samples/s", 1.0),
    ("it/s", "iterations/s", 1.0),
)
# Step-time keys and their factor to seconds.
TIME_KEYS: dict[str, float] = {
    "step_time": 1.0,
    "step_time_s": 1.0,
    "iter_time": 1.0,
    "iteration_time": 1.0,
    "time_per_step": 1.0,
    "batch_time": 1.0,
    "sec_per_step": 1.0,
    "s/it": 1.0,
    "step_time_ms": 1e-3,
    "iter_time_ms": 1e-3,
    "elapsed_ms": 1e-3,
    "time_ms": 1e-3,
    "step_ms": 1e-3,
}
STEP_KEYS = frozenset({"step", "iter", "iteration", "global_step", "it"})
RANK_KEYS = frozenset({"rank", "global_rank"})
TS_KEYS = frozenset({"ts", "timestamp", "time_unix", "epoch"})

_PREFIX = re.compile(r"^\s*\[(rank|default|[a-z_]+?)(\d+)\]:\s*")
_STAMP = re.compile(r"^\s*\[?(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)\]?\s*")
_MEGATRON = re.compile(r"\biteration\s+(\d+)\s*/\s*\d+\s*\|")
_ELAPSED = re.compile(r"elapsed time per iteration \(ms\):\s*([0-9.eE+-]+)")
_TFLOPS = re.compile(r"throughput per GPU \(TFLOP/s/GPU\):\s*([0-9.eE+-]+)")
_GBS = re.compile(r"global batch size:\s*(\d+)")
_KV = re.compile(r"([A-Za-z_][\w/.]*)\s*[=:]\s*([-+]?\d[\d.]*(?:[eE][-+]?\d+)?)\s*(ms|s)?\b")


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One logged step (or logging interval)."""

    lineno: int
    rank: int | None
    ts: float | None
    step: int | None
    seconds: float | None  # step time
    rates: tuple[tuple[str, float], ...]  # (unit, value) pairs the line carries


def parse_line(line: str, lineno: int) -> StepRecord | None:
    """A record if the line logs a step time or a rate, else None. Raises ValueError on a broken one."""
    rank = None
    while m := _PREFIX.match(line):
        rank = int(m.group(2)) if m.group(1) == "rank" or rank is None else rank
        line = line[m.end() :]
    ts: float | None = None
    seconds: float | None = None
    if m := _STAMP.match(line):
        ts = parse_ts(m.group(1))
        line = line[m.end() :]
    if m := _MEGATRON.search(line):
        elapsed = _ELAPSED.search(line)
        if elapsed is None:
            raise ValueError("Megatron iteration line without 'elapsed time per iteration (ms)'")
        seconds = float(elapsed.group(1)) / 1e3
        rates: list[tuple[str, float]] = []
        if tf := _TFLOPS.search(line):
            rates.append(("TFLOP/s/GPU", float(tf.group(1))))
        if (gbs := _GBS.search(line)) and seconds > 0:
            rates.append(("samples/s", int(gbs.group(1)) / seconds))
        return StepRecord(lineno, rank, ts, int(m.group(1)), seconds, tuple(rates))
    pairs = {k.lower(): (float(v), unit) for k, v, unit in _KV.findall(line)}
    rates = [(u, pairs[k][0] * f) for k, u, f in RATE_KEYS if k in pairs]
    time_key = next((k for k in TIME_KEYS if k in pairs), None)
    if not rates and time_key is None:
        return None
    seconds = None
    if time_key is not None:
        value, unit = pairs[time_key]
        seconds = value * (1e-3 if unit == "ms" else 1.0 if unit == "s" else TIME_KEYS[time_key])
    step = next((int(pairs[k][0]) for k in STEP_KEYS if k in pairs), None)
    rank = next((int(pairs[k][0]) for k in RANK_KEYS if k in pairs), rank)
    if ts is None and (key := next((k for k in TS_KEYS if k in pairs), None)):
        ts = parse_ts(str(pairs[key][0]))
    return StepRecord(lineno, rank, ts, step, seconds, tuple(rates))


def read_step_log(lines: list[str], where: str, problems: ProblemLog) -> TrainingSeries:
    """Throughput series of a step log (per rank when several ranks log)."""
    records: list[StepRecord] = []
    for lineno, line in enumerate(lines, 1):
        try:
            rec = parse_line(line, lineno)
        except ValueError as exc:
            problems.add(f"{where}:{lineno}", str(exc))
            continue
        if rec is not None:
            records.append(rec)
    if not records:
        raise InputError(f"{where}: no step times or throughput found (neither CSV nor a known step-log format)")
    unit, notes = _choose_unit(records)
    value = np.array([_value(r, unit) for r in records])
    ts, gap_notes = _times(records)
    notes += gap_notes
    timed = np.isfinite(ts)
    if not timed.all():
        notes.append(f"{np.count_nonzero(~timed)} line(s) without a timestamp left out")
    ranks = np.array([-1 if r.rank is None else r.rank for r in records])
    ids = np.unique(ranks[ranks >= 0])
    if ids.size < 2:
        return TrainingSeries(
            ts[timed], value[timed], None, unit=unit, source=f"{where} (step log)", notes=tuple(notes)
        )
    keep = (ranks >= 0) & timed
    row = np.searchsorted(ids, ranks[keep])
    steps = np.array([-1 if r.step is None else r.step for r in records])[keep]
    if (steps >= 0).all():
        # Ranks run the same steps: align on (run, step), not on each rank's own clock.
        grid, cell = _align_on_steps(ts[keep], row, steps)
    else:
        grid, cell = align_steps(ts[keep], row)
    per_rank = np.full((ids.size, grid.size), np.nan)
    per_rank[row, cell] = value[keep]
    notes.append(f"{ids.size} ranks; job series is the median rank at each step")
    job = job_median(per_rank)
    return TrainingSeries(
        grid, job, None, per_rank, tuple(int(i) for i in ids), unit, f"{where} (step log)", tuple(notes)
    )


def _align_on_steps(ts: np.ndarray, row: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cells keyed by (run, step), a run ending when a rank's step number goes back; cell time is the mean."""
    order = np.lexsort((np.arange(row.size), row))  # by rank, file order within a rank
    r, st = row[order], steps[order]
    new_rank = np.concatenate([[True], r[1:] != r[:-1]])
    back = np.concatenate([[0], (~new_rank[1:]) & (np.diff(st) <= 0)]).astype(np.int64)
    cum = np.cumsum(back)
    group_start = np.maximum.accumulate(np.where(new_rank, np.arange(r.size), 0))
    run = np.empty(row.size, dtype=np.int64)
    run[order] = cum - cum[group_start]
    key = run * (int(steps.max()) + 1) + steps
    used, cell = np.unique(key, return_inverse=True)
    finite = np.isfinite(ts)
    total = np.bincount(cell, weights=np.where(finite, ts, 0.0), minlength=used.size)
    count = np.bincount(cell, weights=finite.astype(np.float64), minlength=used.size)
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / count, cell


def _choose_unit(records: list[StepRecord]) -> tuple[str, list[str]]:
    counts = Counter(u for r in records for u, _ in r.rates)
    for unit, n in counts.most_common():
        if n >= 0.9 * len(records):
            return unit, []
    if sum(r.seconds is not None for r in records) >= 0.9 * len(records):
        return "iterations/s", ["throughput is 1 / step time (iterations/s)"]
    unit = counts.most_common(1)[0][0] if counts else "iterations/s"
    return unit, [f"only some lines carry {unit}; the others are missing samples"]


def _value(r: StepRecord, unit: str) -> float:
    for u, v in r.rates:
        if u == unit:
            return v
    if unit == "iterations/s" and r.seconds:
        return 1.0 / r.seconds
    return float("nan")


def _times(records: list[StepRecord]) -> tuple[np.ndarray, list[str]]:
    """Logged timestamps, or the running sum of step times per rank with a gap at each restart."""
    if sum(r.ts is not None for r in records) >= 0.9 * len(records):
        ts = np.array([np.nan if r.ts is None else r.ts for r in records])
        return ts, []
    seconds = np.array([r.seconds or np.nan for r in records])
    typical = float(np.nanmedian(seconds)) if np.isfinite(seconds).any() else 1.0
    gap = max(600.0, 20 * typical)  # wide enough to split runs, see Thresholds.break_min_s
    clock: dict[int | None, tuple[float, int | None]] = {}
    restarts: Counter[int | None] = Counter()
    out = []
    for r in records:
        now, last_step = clock.get(r.rank, (0.0, None))
        steps = 1 if r.step is None or last_step is None else r.step - last_step
        if steps <= 0:
            restarts[r.rank] += 1
            now, steps = now + gap, 1
        now += steps * (r.seconds if r.seconds else typical)
        clock[r.rank] = (now, r.step)
        out.append(now)
    notes = ["no timestamps: time is the running sum of step times"]
    if restarts:
        notes.append(f"{max(restarts.values())} restart(s) (step number went back); runs kept apart")
    return np.array(out), notes
