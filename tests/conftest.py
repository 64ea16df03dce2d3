"""Shared fixtures: where the third-party test data lives."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from services import node_exporter, postgres, postgres_url, prometheus_factory, victoria_metrics  # noqa: F401

REPO = Path(__file__).resolve().parents[1]

# CI (`.ci/run` sets CI) draws Hypothesis's examples from a fixed seed, so that a run gates on the code, not
# on the draw; elsewhere each run draws new examples and may find a new failing case to add as @example.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


def shared_data_dir() -> Path:
    """`tests/data` (third-party data, each folder with its SOURCE.md), or $PEERWATCH_SHARED_DATA."""
    return Path(os.environ.get("PEERWATCH_SHARED_DATA", REPO / "tests" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    assert path.is_dir(), f"third-party test data not found at {path} (set PEERWATCH_SHARED_DATA)"
    return path
