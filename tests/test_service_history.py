"""The judged frames kept for the dashboard: every other step over the window, rows that join later, old steps gone."""

from __future__ import annotations

import numpy as np

from framekit import make_frame
from peerwatch.frames.history import FrameHistory
from peerwatch.service.memory import return_freed_memory, trim

STEP = 30.0
ROWS = [{"instance": f"gpu{n:02d}:9100"} for n in range(3)]


def chunk(k: int, values: np.ndarray, rows: int = 3) -> dict:  # type: ignore[type-arg]
    return {"node_load1": make_frame("node_load1", ROWS[:rows], values[:rows, None], k * STEP, STEP)}


def test_every_other_step_of_the_window_is_kept_and_older_ones_are_forgotten() -> None:
    history = FrameHistory(STEP, window=20 * STEP, points=10)  # stride 2, 10 slots
    assert (history.stride, history.capacity) == (2, 10)
    values = np.arange(3 * 40, dtype=float).reshape(3, 40)
    for k in range(1000, 1040):
        history.add(chunk(k, values[:, k - 1000], rows=2 if k < 1010 else 3))  # a third series joins
    assert history.newest == 1038 * STEP
    frame = history.frame("node_load1", 0, 1e12)
    assert frame is not None and frame.step == 2 * STEP and frame.start == 1020 * STEP
    np.testing.assert_array_equal(frame.values, values[:, 20:40:2])
    early = history.frame("node_load1", 1000 * STEP, 1025 * STEP)
    assert early is not None and early.steps == 3
    assert history.frame("node_load1", 0, 1000 * STEP) is None and history.frame("other", 0, 1e12) is None
    assert set(history.frames(0, 1e12)) == {"node_load1"}


def test_a_chunk_of_several_steps_and_a_family_silent_in_one_chunk() -> None:
    history = FrameHistory(STEP, window=10 * STEP, points=10)
    values = np.arange(3 * 6, dtype=float).reshape(3, 6)
    history.add({"node_load1": make_frame("node_load1", ROWS, values, 1000 * STEP, STEP)})
    history.add({"other": make_frame("other", ROWS, values[:, :1], 1006 * STEP, STEP)})
    frame = history.frame("node_load1", 0, 1e12)
    assert frame is not None
    np.testing.assert_array_equal(frame.values[:, :6], values)
    assert np.isnan(frame.values[:, 6]).all()  # absent from the last chunk: missing, not its old value


def test_freed_arrays_go_back_to_the_system_on_glibc() -> None:
    assert return_freed_memory() and trim()  # Debian's C library is glibc
