"""The one framer (frames/framer.py): whatever the chunking, the same rows, kinds, steps judged and values."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from peerwatch.catalog.load import Catalog
from peerwatch.engine import kind_by_catalog
from peerwatch.frames import Frame
from peerwatch.frames.frame_store import Cells
from peerwatch.frames.framer import HELD, Framer
from peerwatch.model import SeriesKey

STEP = 30.0
K0 = 58_800_000  # 2025-11-30 on a 30-s grid
STEPS = 60


def series() -> dict[str, tuple[str | None, list[SeriesKey], np.ndarray]]:
    """Synthetic families: an error counter quiet until step 40, an untyped counter (vmstat), a
    gauge, and a node that joins at step 10 (rows in order of their first sample)."""
    rng = np.random.default_rng(3)
    nodes = ["n3", "n1", "n2"]
    quiet = np.zeros((3, STEPS))
    quiet[1, 40:] = 5.0  # one XID at step 40
    untyped = np.cumsum(rng.integers(0, 50, (3, STEPS)), axis=1).astype(float)
    gauge = rng.normal(50, 5, (3, STEPS))
    gauge[0, :10] = np.nan  # n3 starts reporting at step 10
    out = {}
    for name, declared, values in (
        ("DCGM_FI_DEV_XID_ERRORS", "counter", quiet),
        ("node_vmstat_pgfault", "untyped", untyped),
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", gauge),
    ):
        keys = [SeriesKey(name, (("instance", f"{n}:9400"),)) for n in nodes]
        out[name] = (declared, keys, values)
    return out


def framed(cuts: list[int]) -> dict[str, tuple[Frame, ...]]:
    """Each family's frames over the chunks cut at ``cuts``."""
    data = series()
    framer = Framer(STEP, kind_of=kind_by_catalog(Catalog.default()))
    out: dict[str, list[Frame]] = {}
    for a, b in itertools.pairwise([0, *cuts, STEPS]):
        cells = {}
        for name, (declared, keys, values) in data.items():
            grid = (K0 + a + np.arange(b - a)) * STEP
            part = values[:, a:b]
            cells[name] = Cells(
                ids=np.arange(len(keys)),
                values=part,
                times=np.where(np.isnan(part), np.nan, grid - 0.25),
                declared=declared,
                key_of=keys.__getitem__,
            )
        for name, f in framer.frames(K0 + a, b - a, cells).items():
            out.setdefault(name, []).append(f)
    return {k: tuple(v) for k, v in out.items()}


def joined(frames: tuple[Frame, ...]) -> tuple[str, tuple[str, ...], int, np.ndarray]:
    """Kind, nodes, first step and values (NaN before the first step judged) over the chunks."""
    rows = len(frames[-1].keys)
    parts = [np.r_[f.values, np.full((rows - f.values.shape[0], f.steps), np.nan)] for f in frames]
    first = round(frames[0].start / STEP) - K0
    values = np.c_[np.full((rows, first), np.nan), *parts]
    return frames[-1].kind, frames[-1].nodes, first, values


@pytest.mark.parametrize("cuts", [[], list(range(1, STEPS)), [5, 39, 40, 41], [12, 33]])
def test_kinds_rows_and_values_do_not_depend_on_the_chunking(cuts: list[int]) -> None:
    whole = {k: joined(v) for k, v in framed([]).items()}
    got = {k: joined(v) for k, v in framed(cuts).items()}
    assert whole.keys() == got.keys()
    for name, (kind, nodes, _, values) in whole.items():
        g_kind, g_nodes, _, g_values = got[name]
        assert (g_kind, g_nodes) == (kind, nodes), name
        np.testing.assert_array_equal(g_values, values, err_msg=name)


def test_a_counter_is_judged_from_its_first_move_and_a_gauge_at_once() -> None:
    frames = {k: joined(v) for k, v in framed(list(range(1, STEPS))).items()}
    kind, _, _, xid = frames["DCGM_FI_DEV_XID_ERRORS"]
    assert kind == "rate"
    assert np.isnan(xid[:, :40]).all(), "a counter that never moved is not judged"
    assert xid[:, 40].tolist() == [0.0, 5.0 / STEP, 0.0]  # the quiet steps before are carried: its first rate
    kind, _, first, _ = frames["node_vmstat_pgfault"]
    assert kind == "rate" and 0 < first < HELD  # untyped, decided by its values
    kind, nodes, first, temp = frames["DCGM_FI_DEV_GPU_TEMP"]
    assert kind == "gauge" and first == 0
    assert nodes == ("n1", "n2", "n3")  # n3 joined at step 10: its row after those seen before
    assert np.isnan(temp[2, :10]).all() and not np.isnan(temp[2, 10:]).any()
