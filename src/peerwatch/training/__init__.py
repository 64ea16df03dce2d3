"""Training-level signals: the shape of a job's throughput/MFU curve, and who an NCCL hang waited on.

Library entry points: :func:`classify_series` (arrays in, :class:`ShapeResult` out; what the engine
calls for a throughput series it finds in a source), :func:`load_series` (CSV or step log to
arrays), :func:`find_culprits` (a log directory to a :class:`HangVerdict`). The CLI is in
:mod:`peerwatch.training.commands`.
"""

from peerwatch.training.classify import classify_series
from peerwatch.training.features import SeriesError
from peerwatch.training.inputs import load_series
from peerwatch.training.nccl import HangVerdict, RankState
from peerwatch.training.nccl_logs import LogDirError
from peerwatch.training.nccl_report import analyze, find_culprits
from peerwatch.training.series import InputError, TrainingSeries
from peerwatch.training.shapes import DEFAULT_THRESHOLDS, SHAPES, Shape, ShapeDef, ShapeResult, Thresholds

__all__ = [
    "DEFAULT_THRESHOLDS",
    "SHAPES",
    "HangVerdict",
    "InputError",
    "LogDirError",
    "RankState",
    "SeriesError",
    "Shape",
    "ShapeDef",
    "ShapeResult",
    "Thresholds",
    "TrainingSeries",
    "analyze",
    "classify_series",
    "find_culprits",
    "load_series",
]
