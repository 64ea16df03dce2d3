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


def test_a_bad_first_line_or_a_bom_does_not_decide_the_format(tmp_path: Path) -> None:
    t = [NOW_MS - 30_000, NOW_MS]
    good = [vm_line("node_load1", [1.0, 2.0], t, instance=f"gpu0{i}:9100") for i in range(1, 6)]
    path = tmp_path / "export.jsonl"
    path.write_bytes(b"\xef\xbb\xbf[1,2,3]\n" + b"\n".join(good) + b"\n")
    text = tmp_path / "scrape.prom"
    text.write_bytes(b"\xef\xbb\xbf# TYPE node_load5 gauge\n" + f"node_load5 3 {NOW_MS}\n".encode())
    code, report = run_catalog(str(path), str(text))
    assert code == 0, report
    families = {f["name"]: f for f in report["families"]}
    assert families["node_load1"]["series"] == 5 and "node_load5" in families
    assert [p["where"] for p in report["problems"]] == [f"{path}:1"]


def test_conflicting_duplicates_and_quoted_numbers_are_noted_once_per_series(tmp_path: Path) -> None:
    t = [NOW_MS - 30_000, NOW_MS]
    path = tmp_path / "dup.jsonl"
    lines = [vm_line("node_load1", [1.0, 2.0], t, instance="gpu01:9100")] * 3  # same values: no note
    lines += [vm_line("node_load1", [5.0, 6.0], t, instance="gpu01:9100")] * 2  # conflicting, twice
    lines += [vm_line("node_load5", ["1.5", "2"], t, instance="gpu01:9100")] * 2  # quoted numbers
    path.write_bytes(b"\n".join(lines) + b"\n")
    code, report = run_catalog(str(path))
    assert code == 0, report
    notes = [f"{p['where']}: {p['message']}" for p in report["problems"]]
    assert len(notes) == 2, notes
    assert "conflicting samples" in notes[1] and "(1 and 5)" in notes[1] and "node_load1" in notes[1]
    assert "numbers given as strings" in notes[0] and "node_load5" in notes[0]


def test_series_over_the_budget_are_reported_with_what_was_kept(tmp_path: Path) -> None:
    t = [NOW_MS - 30_000, NOW_MS]
    path = tmp_path / "card.jsonl"
    lines = [vm_line("app_requests", [1, 2], t, instance=f"gpu0{i % 4}:9100", path=f"/{i}") for i in range(30)]
    lines += [vm_line("node_load1", [1, 2], t, instance=f"gpu0{i}:9100") for i in range(4)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "alarms.jsonl"
    result = CliRunner().invoke(app, ["analyze", str(path), "--out", str(out), "--max-series-per-family", "10"])
    assert result.exit_code == 0, result.output
    assert "app_requests: 30 series: the first 10 read kept, 20 left out" in " ".join(result.output.split())
    assert "node_load1" not in result.output  # under budget: nothing said
    second = tmp_path / "more.jsonl"
    second.write_bytes(b"\n".join(lines[-4:]) + b"\n")
    args = ["analyze", str(path), str(second), "--out", str(out), "--max-series-per-input", "20"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "card.jsonl: 34 series: the first 20 read kept, 14 left out (series budget per input 20)" in said
    assert "more.jsonl" not in said


def test_exposition_without_instance_takes_its_node_from_the_file_name_or_node(tmp_path: Path) -> None:
    from peerwatch.sources.inputs import bundled_samples

    sample = next(p for p in bundled_samples() if p.name == "node_exporter.prom")
    out = tmp_path / "alarms.jsonl"
    for extra in ([], ["--node", "gpu42"]):
        result = CliRunner().invoke(app, ["analyze", str(sample), "--out", str(out), *extra])
        assert result.exit_code == 0, result.output
        assert "main job: 1 node" in result.output
    from peerwatch.engine import read_frames

    builder = read_frames([str(sample)], node="gpu42")
    assert set(builder.build()["node_load1"].nodes) == {"gpu42"}
    folder = tmp_path / "scrapes"
    folder.mkdir()
    (folder / "gpu07.prom").write_bytes(sample.read_bytes())
    (folder / "SOURCE.md").write_text("# Where these come from\nnode_exporter 1.8 output\n")
    (folder / "notes").write_text("just words here\nand more\n")
    code, report = run_catalog(str(folder))
    assert code == 0, report
    assert sorted((Path(p["where"]).name, p["message"].split(" (")[0]) for p in report["problems"]) == [
        ("SOURCE.md", "not metrics"),
        ("notes", "not metrics"),
    ]
