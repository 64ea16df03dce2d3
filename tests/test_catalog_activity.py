"""The activity filter: which families carry signal over a window, and the counts of those set aside."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest

from peerwatch.catalog import (
    Activity,
    ActivityFilter,
    Catalog,
    Category,
    Family,
    Reason,
    Unit,
    judge,
    summarize,
)

NaN = np.nan


def family(name: str) -> Family:
    return Catalog.default().classify(name, frozenset(), "gauge")


CASES = [
    # family, values (series x steps, NaN = missing), expected reason (None = active)
    ("DCGM_FI_DEV_GPU_TEMP", [[40, 41, 40], [55, 55, 56]], None),
    ("DCGM_FI_DEV_GPU_TEMP", [[40, NaN, 40, 40], [55, 55, NaN, 55]], Reason.constant),  # gaps inside
    ("DCGM_FI_DEV_GPU_TEMP", [[40, NaN, 40, 40], [55, 55, NaN, 57]], None),  # one series moved
    ("DCGM_FI_DEV_GPU_TEMP", [[NaN, 40, 40, 40, 40], [55, 55, 55, 55, NaN]], Reason.constant),  # missed scrapes
    ("node_infiniband_link_downed_total", [[3, 3, 3, 3, 3, 3], [0, 0, 0, 0, 0, 0]], Reason.constant),  # old errors
    ("DCGM_FI_DEV_XID_ERRORS", [[NaN, NaN, NaN, 79, 79, 79], [0, 0, 0, 0, 0, 0]], None),  # a new XID series
    ("DCGM_FI_DEV_GPU_UTIL", [[97, 97, 97, NaN, NaN, NaN], [97, 97, 97, 97, 97, 97]], None),  # a GPU vanished
    ("DCGM_FI_DEV_GPU_UTIL", [[97], [98]], None),  # single snapshot: constancy cannot be judged
    ("DCGM_FI_DEV_GPU_UTIL", [[97, NaN, NaN], [NaN, 98, NaN]], None),  # no series has two samples
    ("DCGM_FI_DEV_GPU_UTIL", [[NaN, NaN, NaN], [NaN, NaN, NaN]], Reason.empty),
    ("DCGM_FI_DEV_GPU_UTIL", np.empty((0, 5)), Reason.empty),
    ("DCGM_FI_DEV_GPU_UTIL", [5, 5, 5, NaN, 5], Reason.constant),  # one series as a 1-D array
    ("DCGM_FI_DEV_GPU_UTIL", None, None),  # values not read: only name rules apply
    ("go_goroutines", [[10, 12, 15]], Reason.runtime),  # set aside even when it moves
    ("process_cpu_seconds_total", None, Reason.runtime),
    ("python_gc_collections_total", [[1, 2, 3]], Reason.runtime),
    ("promhttp_metric_handler_requests_total", [[1, 2, 3]], Reason.runtime),
    ("node_zfs_arc_hits", [[1, 2, 3]], Reason.zfs),
    ("node_zfs_zpool_state", [[1, 1, 1]], Reason.zfs),
    ("scrape_duration_seconds", [[0.1, 0.3, 0.2]], Reason.scrape_internal),
    ("node_scrape_collector_duration_seconds", [[0.1, 0.3, 0.2]], Reason.scrape_internal),
    ("node_scrape_collector_success", [[1, 1, 0]], None),  # a failing collector is signal
    ("up", [[1, 1, 1]], Reason.constant),  # the scraper's health series is not bookkeeping
    ("acme_unknown_widgets", [[1, 2, 4]], None),  # unknown families are judged too
]


@pytest.mark.parametrize(("name", "values", "reason"), CASES)
def test_judge(name: str, values: object, reason: Reason | None) -> None:
    fam = family(name)
    verdict = judge(fam, None if values is None else np.asarray(values, dtype=float))
    assert verdict.reason is reason
    assert verdict.active is (reason is None)
    assert (verdict.family, verdict.category, verdict.unit) == (fam.name, fam.category, fam.unit)


def test_judge_reports_the_shape_and_refuses_cubes() -> None:
    verdict = judge(family("DCGM_FI_DEV_GPU_TEMP"), np.ones((8, 30)))
    assert (verdict.series, verdict.steps) == (8, 30)
    with pytest.raises(ValueError, match="series x steps"):
        judge(family("DCGM_FI_DEV_GPU_TEMP"), np.ones((2, 3, 4)))


@pytest.mark.parametrize(
    ("min_edge_gap", "edge_fraction", "reason"),
    [(3, 0.1, None), (4, 0.1, Reason.constant), (2, 0.5, Reason.constant)],
)
def test_edge_gap_decides_appearance(min_edge_gap: int, edge_fraction: float, reason: Reason | None) -> None:
    # steps=8: the first series is missing for its first 3 steps
    values = np.array([[NaN, NaN, NaN, 1, 1, 1, 1, 1], [2, 2, 2, 2, 2, 2, 2, 2]])
    flt = ActivityFilter(ActivityFilter.default().set_aside, min_edge_gap, edge_fraction)
    assert flt.judge(family("DCGM_FI_DEV_XID_ERRORS"), values).reason is reason


def test_whole_family_is_judged_at_once() -> None:
    rng = np.random.default_rng(7)
    values = np.repeat(rng.integers(0, 5, size=(4000, 1)).astype(float), 240, axis=1)
    values[rng.random(values.shape) < 0.03] = NaN  # a few per cent of scrapes missed
    values[:, 0] = values[:, 1]  # keep the first and last steps so no series "appears"
    values[:, -1] = values[:, -2]
    start = time.perf_counter()
    assert judge(family("node_infiniband_link_downed_total"), values).reason is Reason.constant
    values[1234, 100] += 1
    assert judge(family("node_infiniband_link_downed_total"), values).active
    assert time.perf_counter() - start < 2.0


def test_set_aside_rules_come_from_the_rules_file(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text('[[set_aside]]\nreason = "zfs"\nname = "^acme_"\n', encoding="utf-8")
    flt = ActivityFilter.from_toml(path)
    assert flt.judge(family("acme_thing"), [[1.0, 2.0]]).reason is Reason.zfs
    assert flt.judge(family("go_goroutines"), [[1.0, 2.0]]).active  # only the file's rules apply


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[[set_aside]]\nreason = "constant"\nname = "^x"\n', "needs name and/or category"),
        ('[[set_aside]]\nreason = "zfs"\n', "needs name and/or category"),
        ('[[set_aside]]\nreason = "zfs"\nnmae = "^x"\n', "unknown key(s) ['nmae']"),
        ('[[set_aside]]\nreason = "bored"\nname = "^x"\n', "set_aside 1"),
        ("[[set_aside]\n", "rules.toml"),
    ],
)
def test_bad_set_aside_rules_are_refused(tmp_path: Path, toml: str, message: str) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(toml, encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(message)):
        ActivityFilter.from_toml(path)


def test_summary_counts_by_reason_category_and_unit() -> None:
    verdicts = [
        Activity("a", Category.temperature, Unit.gpu),
        Activity("b", Category.temperature, Unit.gpu, Reason.constant),
        Activity("c", Category.error_counter, Unit.ib_port, Reason.constant),
        Activity("d", Category.runtime, Unit.exporter, Reason.runtime),
        Activity("e", Category.error_counter, Unit.ib_port),
        Activity("f", Category.memory, Unit.node, Reason.zfs),
        Activity("g", Category.memory, Unit.node, Reason.empty),
    ]
    summary = summarize(verdicts)
    assert (summary.total.seen, summary.total.active) == (7, 2)
    assert dict(summary.total.set_aside) == {Reason.runtime: 1, Reason.zfs: 1, Reason.constant: 2, Reason.empty: 1}
    assert list(summary.by_category) == [
        Category.error_counter,
        Category.temperature,
        Category.memory,
        Category.runtime,
    ]  # vocabulary order
    temp = summary.by_category[Category.temperature]
    assert (temp.seen, temp.active, dict(temp.set_aside)) == (2, 1, {Reason.constant: 1})
    node = summary.by_unit[Unit.node]
    assert (node.seen, node.active, dict(node.set_aside)) == (2, 0, {Reason.zfs: 1, Reason.empty: 1})
    assert summarize([]).total.seen == 0


def test_node_exporter_families_set_aside_by_name(shared_data: Path) -> None:
    catalog = Catalog.default()
    names = {
        line.split()[2]
        for line in (shared_data / "node_exporter" / "e2e-output.txt").read_text(encoding="utf-8").split("\n")
        if line.startswith("# TYPE ")
    }
    summary = summarize(judge(catalog.classify(n), None) for n in sorted(names))
    print("\nnode_exporter e2e families by name alone:", summary.total)
    assert summary.total.seen == 1228
    assert dict(summary.total.set_aside) == {Reason.runtime: 41, Reason.zfs: 278, Reason.scrape_internal: 1}
    assert summary.by_category[Category.runtime].set_aside == {Reason.runtime: 41}
