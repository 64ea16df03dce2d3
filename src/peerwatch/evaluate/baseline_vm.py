"""Baseline: what a user would write instead of peerwatch, VictoriaMetrics' own ``outliers_mad``.

The scenario's recording is imported into a real VictoriaMetrics with an extra label
``peerwatch_scenario`` (so scenarios never mix), then for a fixed list of families a user would
pick, ``outliers_mad(3, <expr>) by (peerwatch_scenario[, …])`` is evaluated at every step, the way
vmalert evaluates a rule. ``outliers_mad`` returns every series that has *at least one* point
outside median ± tolerance x MAD over the evaluated range, so a single range query over the whole
recording would flag a series at every step once it strays at one; an instant query per step gives
the per-step verdict. Outlier points become alarms by :mod:`peerwatch.evaluate.continuity`.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

from peerwatch.evaluate.continuity import DEFAULT_RULE, Rule, episodes
from peerwatch.evaluate.labels import ScenarioLabels
from peerwatch.model import Alarm, Evidence, SeriesBlock, labels_of, node_of
from peerwatch.sources.replay import GZIP_MAGIC, detect_format, open_recording
from peerwatch.sources.tsdb import TSDBClient, TSDBError

SCENARIO_LABEL = "peerwatch_scenario"
SEL = "{S}"  # placeholder for the scenario selector in BaselineQuery.expr


@dataclass(frozen=True, slots=True)
class BaselineQuery:
    """One family as a user would watch it: MetricsQL ``expr``, what it names, extra grouping."""

    name: str
    expr: str
    unit: str  # gpu | ib | nfs | node: how an outlier series names its component
    by: tuple[str, ...] = ()


_NFS_RTT = (
    "rate(node_mountstats_nfs_operations_{}_seconds_total{S}[2m])"
    " / rate(node_mountstats_nfs_operations_requests_total{S}[2m])"
)
QUERIES: tuple[BaselineQuery, ...] = (
    BaselineQuery("gpu_util", "DCGM_FI_DEV_GPU_UTIL{S}", "gpu"),
    BaselineQuery("sm_active", "DCGM_FI_PROF_SM_ACTIVE{S}", "gpu"),
    BaselineQuery("gpu_temp", "DCGM_FI_DEV_GPU_TEMP{S}", "gpu"),
    BaselineQuery("power", "DCGM_FI_DEV_POWER_USAGE{S}", "gpu"),
    BaselineQuery("sm_clock", "DCGM_FI_DEV_SM_CLOCK{S}", "gpu"),
    BaselineQuery("pcie_replays", "rate(DCGM_FI_DEV_PCIE_REPLAY_COUNTER{S}[2m])", "gpu"),
    # declared a counter, carries a rate (GUIDE 7): watched as it is
    BaselineQuery("nvlink_bandwidth", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{S}", "gpu"),
    BaselineQuery("ib_rx_bytes", "rate(node_infiniband_port_data_received_bytes_total{S}[2m])", "ib"),
    BaselineQuery("ib_tx_bytes", "rate(node_infiniband_port_data_transmitted_bytes_total{S}[2m])", "ib"),
    BaselineQuery("ib_symbol_errors", "rate(node_infiniband_symbol_error_total{S}[2m])", "ib"),
    BaselineQuery("ib_link_recoveries", "rate(node_infiniband_link_error_recovery_total{S}[2m])", "ib"),
    BaselineQuery("load1", "node_load1{S}", "node"),
    BaselineQuery("interrupts", "rate(node_intr_total{S}[2m])", "node"),
    BaselineQuery("procs_running", "node_procs_running{S}", "node"),
    BaselineQuery("procs_blocked", "node_procs_blocked{S}", "node"),
    BaselineQuery("nfs_rtt_per_op", _NFS_RTT.format("response_time", S=SEL), "nfs", ("export", "operation")),
    BaselineQuery("nfs_exec_per_op", _NFS_RTT.format("request_time", S=SEL), "nfs", ("export", "operation")),
    BaselineQuery("agent_async_tasks", "backendai_async_task_count{S}", "node"),
)
"""The fixed family list of the baseline (docs/evaluation.md shows the resulting queries)."""


@dataclass(frozen=True, slots=True)
class BaselineConfig:
    """Tolerance of ``outliers_mad``, the continuity rule, and how to talk to VictoriaMetrics."""

    tolerance: float = 3.0
    rule: Rule = field(default_factory=Rule)
    queries: tuple[BaselineQuery, ...] = QUERIES
    workers: int = 4
    timeout: float = 120.0
    visible_timeout: float = 60.0


def outlier_query(q: BaselineQuery, tag: str, tolerance: float = 3.0) -> str:
    """The MetricsQL a user would write for ``q``, restricted to one imported scenario."""
    inner = q.expr.replace(SEL, f'{{{SCENARIO_LABEL}="{tag}"}}')
    return f"outliers_mad({tolerance:g}, {inner}) by ({', '.join((SCENARIO_LABEL, *q.by))})"


def scenario_tag(name: str, labels_path: Path) -> str:
    """A label value unique to this scenario's content: folder name plus a hash of its labels."""
    digest = hashlib.sha1(labels_path.read_bytes()).hexdigest()[:10]
    return f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}-{digest}"


def component_of(unit: str, labels: Mapping[str, str]) -> str:
    """The component an outlier series names (GUIDE 3.1), ``node`` when its labels say no more."""
    if unit == "gpu" and labels.get("gpu"):
        return f"gpu/{labels['gpu']}"
    if unit == "ib" and labels.get("device"):
        port = labels.get("port")
        return f"ib/{labels['device']}" + (f":{port}" if port else "")
    if unit == "nfs" and labels.get("export"):
        return f"nfs/{labels['export']}"
    return "node"


def _chunks(path: Path, size: int = 1 << 20) -> Iterator[bytes]:
    with path.open("rb") as fh:
        while chunk := fh.read(size):
            yield chunk


def import_recording(vm_url: str, files: Sequence[Path], tag: str, timeout: float = 120.0) -> None:
    """Stream recordings (VictoriaMetrics JSON lines or Prometheus text, gzipped or not) into VM, tagged."""
    with httpx.Client(timeout=timeout) as http:
        for path in files:
            with open_recording(path) as stream:
                head = stream.peek(4096) if hasattr(stream, "peek") else stream.read(4096)
            endpoint = "/api/v1/import" if detect_format(head) == "vm-jsonl" else "/api/v1/import/prometheus"
            with path.open("rb") as fh:
                gz = fh.read(2) == GZIP_MAGIC
            headers = {"Content-Encoding": "gzip"} if gz else {}
            url = f"{vm_url.rstrip('/')}{endpoint}"
            try:
                resp = http.post(
                    url, params={"extra_label": f"{SCENARIO_LABEL}={tag}"}, content=_chunks(path), headers=headers
                )
            except httpx.TransportError as exc:
                raise TSDBError(url, f"import {path}", f"{type(exc).__name__}: {exc}") from exc
            if resp.status_code not in (200, 204):
                raise TSDBError(url, f"import {path}", f"HTTP {resp.status_code}: {resp.text[:300]}", resp.status_code)
        http.get(f"{vm_url.rstrip('/')}/internal/force_flush")


def wait_visible(client: TSDBClient, labels: ScenarioLabels, tag: str, timeout: float) -> int:
    """Poll until the scenario's series count is non-zero and steady; returns it."""
    span = int(np.ceil(labels.end_ts - labels.start_ts + labels.step))
    query = f'count(last_over_time({{{SCENARIO_LABEL}="{tag}"}}[{span}s]))'
    deadline, last = time.monotonic() + timeout, -1
    while True:
        blocks = client.query(query, labels.end_ts)
        count = int(blocks[0].values[0]) if blocks and len(blocks[0]) else 0
        if count and count == last:
            return count
        if time.monotonic() > deadline:
            raise TSDBError(
                client.url,
                query,
                f"imported scenario not visible after {timeout:g}s (is -retentionPeriod long enough?)",
            )
        last = count
        time.sleep(0.3)


def step_times(labels: ScenarioLabels) -> np.ndarray:
    """Evaluation times: every step after the recording's start, up to its end."""
    n = int(np.floor((labels.end_ts - labels.start_ts) / labels.step + 1e-9))
    return labels.start_ts + labels.step * np.arange(1, n + 1, dtype=np.float64)


def baseline_alarms(
    vm_url: str, files: Sequence[Path], labels: ScenarioLabels, tag: str, config: BaselineConfig | None = None
) -> list[Alarm]:
    """Import one scenario into VictoriaMetrics and return the ``outliers_mad`` baseline's alarms."""
    config = config or BaselineConfig()
    import_recording(vm_url, files, tag, config.timeout)
    times = step_times(labels)
    with TSDBClient(vm_url, kind="victoriametrics", timeout=config.timeout) as client:
        wait_visible(client, labels, tag, config.visible_timeout)
        jobs = [(qi, k) for qi in range(len(config.queries)) for k in range(times.size)]
        texts = [outlier_query(q, tag, config.tolerance) for q in config.queries]
        with ThreadPoolExecutor(max(1, config.workers)) as pool:
            answers = list(pool.map(lambda j: client.query(texts[j[0]], float(times[j[1]])), jobs))
    return alarms_from_outliers(
        [(k, config.queries[qi], blocks) for (qi, k), blocks in zip(jobs, answers, strict=True)], times, config.rule
    )


def alarms_from_outliers(
    answers: Sequence[tuple[int, BaselineQuery, Sequence[SeriesBlock]]], times: np.ndarray, rule: Rule = DEFAULT_RULE
) -> list[Alarm]:
    """Alarms from outlier series per step: ``(step index, query, series returned)`` triples."""
    keys: dict[tuple[str, str], int] = {}
    rows: list[int] = []
    cols: list[int] = []
    first: dict[tuple[int, int], Evidence] = {}
    for k, q, blocks in answers:
        for b in blocks:
            labels = b.key.label_dict()
            key = (node_of(labels), component_of(q.unit, labels))
            row = keys.setdefault(key, len(keys))
            rows.append(row)
            cols.append(k)
            if (row, k) not in first:
                value = float(b.values[-1]) if len(b) else float("nan")
                note = f"outliers_mad outlier ({q.name})"
                first[(row, k)] = Evidence(q.name, labels_of(labels), value, note=note)
    flags = np.zeros((len(keys), times.size), dtype=bool)
    flags[np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)] = True
    alarms = []
    for (node, component), row in keys.items():
        for ep in episodes(flags[row], rule):
            ev = tuple(first[(row, s)] for s in range(ep.first, ep.raised + 1) if (row, s) in first)
            alarms.append(
                Alarm(
                    f"vm-outliers-mad:{node}:{component}:{int(times[ep.raised])}",
                    float(times[ep.raised]),
                    node,
                    component,
                    "unknown",
                    "warning",
                    float(ep.points),
                    "watch",
                    ev,
                    float(times[ep.last]),
                    float(times[ep.last]),
                )
            )
    return sorted(alarms, key=lambda a: (a.ts, a.node, a.component))
