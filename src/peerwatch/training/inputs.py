"""Loading a throughput series from a file, whatever its form (CSV or step log)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from peerwatch.model import ProblemLog
from peerwatch.training.csv_series import looks_like_csv, read_csv
from peerwatch.training.series import InputError, TrainingSeries
from peerwatch.training.steplog import read_step_log


def load_series(path: Path, problems: ProblemLog, expected: float | None = None) -> TrainingSeries:
    """Read a CSV or step-log file; ``expected`` overrides any expected value in the file."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    lines = text.splitlines()
    content = [(i, line) for i, line in enumerate(lines, 1) if line.strip() and not line.lstrip().startswith("#")]
    if not content:
        raise InputError(f"{path}: empty")
    series = (
        read_csv(content, str(path), problems) if looks_like_csv(content) else read_step_log(lines, str(path), problems)
    )
    return series if expected is None else dataclasses.replace(series, expected=expected)
