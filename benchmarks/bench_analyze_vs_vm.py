"""`peerwatch analyze` against VictoriaMetrics importing the same recording and evaluating 25 alert rules.

    .venv/bin/python benchmarks/bench_analyze_vs_vm.py [--recording FILE] [--runs 3] [--jobs 1 0]

What a user without peerwatch would run to get alerts out of a recording: a fresh VictoriaMetrics
(``victoria-metrics``), the file streamed into ``/api/v1/import``, then ``vmalert`` in replay mode
(``-replay.timeFrom/-replay.timeTo``) evaluating ``RULES`` (10 peer ``outliers_mad`` rules,
10 ``increase()`` error-counter rules, 5 state rules) over the whole recording at a 30-s step and
writing the alerts back. Timed from starting VictoriaMetrics to vmalert's exit: import, flush and
rule evaluation. Beside it, in the same run and alternating with it, ``peerwatch analyze FILE`` with
each ``--jobs`` value (0: every core). Wall seconds and CPU seconds (the children's rusage) of each
side; the medians and the ratio of the medians are printed. peerwatch's modules are compiled first,
as an installed wheel's are.

Without ``--recording`` the 6-h 63-node ``reference_mix`` scenario is simulated first (943 MB).
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import httpx

import peerwatch

PEER = "outliers_mad(3, {expr}) by (job)"
RULES: tuple[tuple[str, str], ...] = (
    # peers: one series far from its family's median (what a user writes for "one GPU unlike the others")
    ("GpuUtilOutlier", PEER.format(expr="DCGM_FI_DEV_GPU_UTIL")),
    ("SmActiveOutlier", PEER.format(expr="DCGM_FI_PROF_SM_ACTIVE")),
    ("GpuTempOutlier", PEER.format(expr="DCGM_FI_DEV_GPU_TEMP")),
    ("GpuPowerOutlier", PEER.format(expr="DCGM_FI_DEV_POWER_USAGE")),
    ("SmClockOutlier", PEER.format(expr="DCGM_FI_DEV_SM_CLOCK")),
    ("NvlinkBandwidthOutlier", PEER.format(expr="DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")),
    ("IbRxOutlier", PEER.format(expr="rate(node_infiniband_port_data_received_bytes_total[2m])")),
    ("IbTxOutlier", PEER.format(expr="rate(node_infiniband_port_data_transmitted_bytes_total[2m])")),
    ("Load1Outlier", PEER.format(expr="node_load1")),
    (
        "NfsResponseTimeOutlier",
        PEER.format(
            expr="rate(node_mountstats_nfs_operations_response_time_seconds_total[2m])"
            " / rate(node_mountstats_nfs_operations_requests_total[2m])"
        ),
    ),
    # error counters: any increase
    ("PcieReplays", "increase(DCGM_FI_DEV_PCIE_REPLAY_COUNTER[5m]) > 0"),
    ("NvlinkCrcFlitErrors", "increase(DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL[5m]) > 0"),
    ("NvlinkReplayErrors", "increase(DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL[5m]) > 0"),
    ("EccDoubleBit", "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[5m]) > 0"),
    ("EccSingleBitBurst", "increase(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL[5m]) > 10"),
    ("IbSymbolErrors", "increase(node_infiniband_symbol_error_total[5m]) > 0"),
    ("IbLinkDowned", "increase(node_infiniband_link_downed_total[5m]) > 0"),
    ("IbLinkRecoveries", "increase(node_infiniband_link_error_recovery_total[5m]) > 0"),
    ("IbPortRcvErrors", "increase(node_infiniband_port_errors_received_total[5m]) > 0"),
    ("NicReceiveErrors", "increase(node_network_receive_errs_total[5m]) > 0"),
    # states
    ("TargetDown", "up == 0"),
    ("XidError", "DCGM_FI_DEV_XID_ERRORS > 0"),
    ("IbPortNotActive", "node_infiniband_state_id != 4"),
    ("PcieLinkDegraded", "DCGM_FI_DEV_PCIE_LINK_WIDTH < 16"),
    ("GpuThermalThrottle", "bitmap_and(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, 32) > 0"),
)
STEP = "30s"


def rules_yaml() -> str:
    rules = [{"alert": name, "expr": expr} for name, expr in RULES]
    return json.dumps({"groups": [{"name": "bench", "interval": STEP, "rules": rules}]})  # YAML is JSON's superset


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def time_range(recording: Path) -> tuple[float, float]:
    """First and last timestamp of a VictoriaMetrics JSON-lines file (its first line's)."""
    with recording.open("rb") as fh:
        stamps = json.loads(fh.readline())["timestamps"]
    return stamps[0] / 1000.0, stamps[-1] / 1000.0


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_vm(recording: Path, work: Path) -> dict[str, float]:
    """Fresh VictoriaMetrics, import, flush, vmalert replay of RULES; seconds of each part."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    data = work / "vmdata"
    shutil.rmtree(data, ignore_errors=True)
    rules = work / "rules.yml"
    rules.write_text(rules_yaml())
    lo, hi = time_range(recording)
    cpu0, t0 = children_cpu(), time.perf_counter()
    vm = subprocess.Popen(
        ["victoria-metrics", f"-storageDataPath={data}", f"-httpListenAddr=127.0.0.1:{port}", "-retentionPeriod=100y",
         "-search.latencyOffset=0s", "-loggerLevel=ERROR"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with httpx.Client(timeout=600) as http:
            while True:
                try:
                    if http.get(f"{url}/health").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.05)
            with recording.open("rb") as fh:
                http.post(f"{url}/api/v1/import", content=iter(lambda: fh.read(1 << 20), b"")).raise_for_status()
            http.get(f"{url}/internal/force_flush").raise_for_status()
            t_import = time.perf_counter()

            def iso(ts: float) -> str:
                return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

            done = subprocess.run(
                ["vmalert", f"-rule={rules}", f"-datasource.url={url}", f"-remoteWrite.url={url}",
                 f"-replay.timeFrom={iso(lo)}", f"-replay.timeTo={iso(hi)}", "-replay.rulesDelay=0s",
                 "-replay.disableProgressBar"],
                capture_output=True, text=True,
            )  # fmt: skip
            replayed = re.search(r"replay finished! Imported (\d+) samples", done.stdout + done.stderr)
            if done.returncode != 0 or not replayed:
                raise SystemExit(f"vmalert failed: {done.stderr[-2000:]}")
            t_rules = time.perf_counter()
    finally:
        vm.terminate()
        vm.wait()
    return {
        "wall": t_rules - t0,
        "import": t_import - t0,
        "rules": t_rules - t_import,
        "cpu": children_cpu() - cpu0,
        "alert_samples": float(replayed.group(1)),
    }


def run_analyze(recording: Path, jobs: int, work: Path) -> dict[str, float]:
    out = work / "alarms.jsonl"
    cmd = [sys.executable, "-m", "peerwatch", "analyze", str(recording), "--out", str(out), "--jobs", str(jobs)]
    cpu0, t0 = children_cpu(), time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"analyze failed ({done.returncode}): {done.stderr[-2000:]}")
    alarms = len(out.read_text().splitlines())
    return {"wall": wall, "cpu": children_cpu() - cpu0, "alarms": float(alarms)}


def simulate_reference(work: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "peerwatch", "simulate", "--scenarios", str(work), "--only", "reference_mix"],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return work / "reference_mix" / "metrics.jsonl"


def median(runs: Sequence[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--recording", type=Path, help="a VictoriaMetrics JSON-lines file (default: simulate reference_mix)"
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 0], help="analyze --jobs values to compare")
    args = parser.parse_args()
    # peerwatch's modules compiled once, as a wheel's are when installed: an editable install where
    # PYTHONDONTWRITEBYTECODE is set (this machine) compiles them at every start, in every process.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(peerwatch.__file__).parent)], check=True)
    with tempfile.TemporaryDirectory(prefix="bench-vm-") as tmp:
        work = Path(tmp)
        recording = args.recording or simulate_reference(work)
        vm_runs: list[dict[str, float]] = []
        pw_runs: dict[int, list[dict[str, float]]] = {j: [] for j in args.jobs}
        for run in range(args.runs):
            vm_runs.append(run_vm(recording, work))
            print(f"run {run + 1}: VictoriaMetrics {vm_runs[-1]}", flush=True)
            for jobs in args.jobs:
                pw_runs[jobs].append(run_analyze(recording, jobs, work))
                print(f"run {run + 1}: analyze --jobs {jobs} {pw_runs[jobs][-1]}", flush=True)
    vm_wall = median(vm_runs, "wall")
    print(
        f"\nrecording {recording} ({recording.stat().st_size / 1e6:.0f} MB), {len(RULES)} rules,"
        f" medians of {args.runs}:"
    )
    print(f"VictoriaMetrics import + vmalert replay: {vm_wall:.1f} s wall (import {median(vm_runs, 'import'):.1f} s,"
          f" rules {median(vm_runs, 'rules'):.1f} s), {median(vm_runs, 'cpu'):.1f} s CPU,"
        f" {median(vm_runs, 'alert_samples'):.0f} alert samples written")  # fmt: skip
    for jobs, runs in pw_runs.items():
        wall = median(runs, "wall")
        print(f"peerwatch analyze --jobs {jobs}: {wall:.1f} s wall, {median(runs, 'cpu'):.1f} s CPU,"
              f" {median(runs, 'alarms'):.0f} alarms; {wall / vm_wall:.2f} of VictoriaMetrics' wall time")  # fmt: skip


if __name__ == "__main__":
    main()
