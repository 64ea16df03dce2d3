"""Bad input end to end: every kind of damage is named, and everything else is still read."""

from __future__ import annotations

import gzip
import json
import socket
import time
from pathlib import Path

import orjson
from typer.testing import CliRunner

from peerwatch.cli import app

NOW_MS = int(time.time() // 30 * 30 * 1000)


def vm_line(name: str, values: list[object], stamps: list[int], **labels: str) -> bytes:
    return orjson.dumps({"metric": {"__name__": name, **labels}, "values": values, "timestamps": stamps})


def run_catalog(*inputs: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    result = CliRunner().invoke(app, ["catalog", "--json", *inputs])
    return result.exit_code, json.loads(result.stdout) if result.exit_code == 0 else {"output": result.output}


def test_damaged_recordings_are_reported_and_the_rest_is_kept(tmp_path: Path) -> None:
    t = [NOW_MS - 60_000, NOW_MS - 30_000, NOW_MS]
    jsonl = tmp_path / "damaged.jsonl"
    jsonl.write_bytes(
        b"\n".join(
            [
                vm_line("DCGM_FI_DEV_GPU_TEMP", [60, 61, 62], t, Hostname="gpu01", gpu="0"),
                b'{"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP"',  # cut mid-line
                vm_line("DCGM_FI_DEV_GPU_TEMP", [60, 61, 62], t, Hostname="gpu01", gpu="0"),  # duplicate series
                vm_line("DCGM_FI_DEV_POWER_USAGE", ["NaN", "+Inf", 300], t, Hostname="gpu01", gpu="0"),
                vm_line("DCGM_FI_DEV_SM_CLOCK", [1980, 1975, 1990], t[::-1], Hostname="gpu01", gpu="0"),  # reversed
                vm_line("DCGM_FI_DEV_MEM_CLOCK", [3996, 3996], [t[0], NOW_MS + 400 * 86_400_000], Hostname="gpu01"),
                vm_line("node_load1", [1.5, 1.6, 1.7], t, instance="gpu01:9100", huge="x" * 200_000),
            ]
        )
        + b"\n"
    )
    text = tmp_path / "scrape.prom.gz"
    body = "".join(f'node_load5{{instance="gpu0{i}:9100"}} {i} {NOW_MS}\n' for i in range(1, 4))
    body += 'node_load15{instance="gpu01:9100" 3\nnode_procs_running{instance="gpu01:9100"} 12 ' + f"{NOW_MS}\n"
    text.write_bytes(gzip.compress(body.encode() * 200)[:-40])  # truncated gzip
    code, report = run_catalog(str(jsonl), str(text))
    assert code == 0, report
    names = {f["name"] for f in report["families"]}
    assert {
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "node_load1",
        "node_load5",
        "node_procs_running",
    } <= names
    problems = [f"{p['where']}: {p['message']}" for p in report["problems"]]
    assert any("damaged.jsonl:2" in p for p in problems), problems
    assert any("infinite values" in p and "DCGM_FI_DEV_POWER_USAGE" in p for p in problems), problems
    assert any("impossible timestamps" in p and "DCGM_FI_DEV_MEM_CLOCK" in p for p in problems), problems
    assert any("scrape.prom.gz:" in p and "truncated" in p for p in problems), problems
    assert any("scrape.prom.gz:" in p and "node_load15" not in names for p in problems), problems


def test_unreachable_tsdb_and_exporter_exit_non_zero_naming_the_url() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = CliRunner().invoke(app, ["catalog", f"http://127.0.0.1:{port}"])
    assert result.exit_code == 1
    assert f"127.0.0.1:{port}" in result.output and "nothing usable" in result.output
    # An exporter that is down still yields its own up=0 series, which is usable information.
    code, report = run_catalog(f"http://127.0.0.1:{port}/metrics")
    assert code == 0 and {f["name"] for f in report["families"]} >= {"up"}
    assert any(f"127.0.0.1:{port}" in p["where"] for p in report["problems"])
