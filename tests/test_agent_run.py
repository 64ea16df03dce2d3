"""The agent end to end: exposition format, a faulty host replayed, this machine for real, HTTP and textfile."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from peerwatch.agent import (
    CHECK_NAMES,
    FAMILIES,
    Agent,
    AgentConfig,
    CheckResult,
    Measurement,
    MetricsServer,
    RecordedRunner,
    Status,
    build_checks,
    render,
    write_textfile,
)
from peerwatch.agent.command import agent_command
from peerwatch.agent.nvidia import QUERY_FIELDS, REMAP_FIELDS
from peerwatch.agent.runner import CommandError, CommandResult, SubprocessRunner

REPO = Path(__file__).resolve().parents[1]
FIX = Path(__file__).parent / "fixtures" / "agent"
CMD = FIX / "commands"


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, parsed by prometheus_client (strict about the format)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def status_of(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[tuple[str, str], float]:
    return {
        (dict(labels)["check"], dict(labels)["component"]): v
        for (name, labels), v in samples.items()
        if name == "peerwatch_agent_check_status"
    }


# --- exposition -----------------------------------------------------------------------------------


def test_render_escapes_and_parses() -> None:
    hint = 'quote " backslash \\ newline \n end'
    results = [CheckResult("xid", "0000:3b:00.0", Status.CRITICAL, hint)]
    measurements = [
        Measurement.of("peerwatch_agent_check_status", 2, component="0000:3b:00.0", check="xid"),  # label order free
        Measurement.of(
            "peerwatch_agent_check_info", 1, check="xid", component="0000:3b:00.0", status="CRITICAL", hint=hint
        ),
        Measurement.of("peerwatch_agent_cpu_frequency_ratio", float("nan"), stat="max"),
        Measurement.of(
            "peerwatch_agent_infiniband_port_errors_total", 7, device="mlx5_0", port="1", counter="symbol_error"
        ),
        Measurement.of("peerwatch_agent_last_run_timestamp_seconds", 1740900000.25),
    ]
    text = render(measurements)
    assert 'peerwatch_agent_check_status{check="xid",component="0000:3b:00.0"} 2\n' in text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["peerwatch_agent_infiniband_port_errors"].type == "counter"
    info = families["peerwatch_agent_check_info"].samples[0]
    assert info.labels["hint"] == hint and results[0].hint == hint
    assert (
        families["peerwatch_agent_cpu_frequency_ratio"].samples[0].value
        != families["peerwatch_agent_cpu_frequency_ratio"].samples[0].value
    )  # NaN
    assert families["peerwatch_agent_last_run_timestamp_seconds"].samples[0].value == 1740900000.25
    assert render([]) == ""


def test_render_rejects_undeclared_families_and_labels() -> None:
    with pytest.raises(ValueError, match="not declared"):
        render([Measurement.of("peerwatch_agent_bogus", 1)])
    with pytest.raises(ValueError, match="labels"):
        render([Measurement.of("peerwatch_agent_check_status", 1, check="xid")])


def test_every_family_is_documented() -> None:
    doc = (REPO / "docs" / "agent.md").read_text()
    for spec in FAMILIES.values():
        row = next((line for line in doc.splitlines() if line.startswith(f"| `{spec.name}` |")), None)
        assert row is not None, f"{spec.name} missing from docs/agent.md"
        assert f"| {spec.type} |" in row, f"{spec.name}: type not documented as {spec.type}"
        for label in spec.labels:
            assert f"`{label}`" in row, f"{spec.name}: label {label} not documented"
        assert spec.name.startswith("peerwatch_agent_")
        assert spec.type != "counter" or spec.name.endswith("_total")
    for check in ("xid", "pcie_link", "cpu_frequency", "cpu_frequency_cap", "infiniband_port", "infiniband_errors",
                  "nvme_controller", "nvme_smart", "nvidia_smi", "dcgm_health"):  # fmt: skip
        assert f"| `{check}` |" in doc, f"check {check} not documented"


# --- the agent ------------------------------------------------------------------------------------


class Boom:
    name = "boom"

    def run(self) -> Iterator[CheckResult]:
        raise RuntimeError("sysfs vanished")


class Silent:
    name = "silent"

    def run(self) -> Iterator[CheckResult]:
        return iter(())


class Fine:
    name = "fine"

    def run(self) -> Iterator[CheckResult]:
        yield CheckResult("fine", "node", Status.OK, "all good")


def test_a_crashing_or_silent_check_says_unknown_and_others_run() -> None:
    report = Agent([Boom(), Silent(), Fine()], clock=lambda: 123.0).run_once()
    assert [(r.check, r.status, r.hint) for r in report.results] == [
        ("boom", Status.UNKNOWN, "check failed: RuntimeError: sysfs vanished"),
        ("silent", Status.UNKNOWN, "check found nothing to report"),
        ("fine", Status.OK, "all good"),
    ]
    samples = parse(report.exposition())
    assert samples[("peerwatch_agent_last_run_timestamp_seconds", ())] == 123.0
    assert {dict(k[1])["check"] for k in samples if k[0] == "peerwatch_agent_check_duration_seconds"} == {
        "boom",
        "silent",
        "fine",
    }


def faulty_runner() -> RecordedRunner:
    def rec(name: str, code: int = 0) -> CommandResult:
        return CommandResult(code, (CMD / name).read_text())

    return RecordedRunner(
        {
            f"nvidia-smi --query-gpu={QUERY_FIELDS} --format=csv,noheader,nounits": rec("nvidia_smi_faulty.csv", 15),
            f"nvidia-smi --query-remapped-rows={REMAP_FIELDS} --format=csv,noheader,nounits": rec(
                "nvidia_smi_remap_faulty.csv"
            ),
            "dcgmi health -c": rec("dcgmi_health_warning.txt"),
            "nvme smart-log /dev/nvme0 --output-format=json": rec("nvme_smart_log_faulty.json"),
            "nvme smart-log /dev/nvme1 --output-format=json": CommandResult(1, "", "No such device\n"),
        }
    )


def test_faulty_host_replayed_end_to_end() -> None:
    runner = faulty_runner()
    config = AgentConfig(
        sys_root=FIX / "sys_faulty",
        proc_root=FIX / "proc_busy",
        kernel_log=FIX / "logs" / "dmesg_faulty.txt",
        runner=runner,
    )
    report = Agent(build_checks(config)).run_once()
    samples = parse(report.exposition())
    status = status_of(samples)
    assert status[("xid", "0000:9a:00.0")] == 2  # fell off the bus
    assert status[("xid", "0000:18:00.0")] == 0  # Xid 13: application
    assert status[("pcie_link", "0000:18:00.0")] == 1  # x8 < x16
    assert status[("pcie_link", "0000:5d:00.0")] == 1  # slow link on a busy GPU
    assert status[("cpu_frequency", "node")] == 1 and status[("cpu_frequency_cap", "node")] == 1
    assert status[("infiniband_port", "mlx5_1:1")] == 2 and status[("infiniband_port", "mlx5_2:1")] == 1
    assert status[("nvme_controller", "nvme1")] == 2 and status[("nvme_smart", "nvme0")] == 2
    assert status[("nvme_smart", "nvme1")] == 3
    assert status[("nvidia_smi", "0000:9a:00.0")] == 2
    assert status[("dcgm_health", "gpu/1")] == 1
    assert samples[("peerwatch_agent_xid_last", (("gpu", ""), ("pci_bus_id", "0000:9a:00.0")))] == 154
    gpu_info = {
        ("gpu", "2"),
        ("name", "NVIDIA H100 80GB HBM3"),
        ("pci_bus_id", "0000:5d:00.0"),
        ("uuid", "GPU-4e5f6a7b-8c9d-4e0f-a1b2-c3d4e5f6a7b8"),
    }
    assert samples[("peerwatch_agent_gpu_info", tuple(sorted(gpu_info)))] == 1
    assert {dict(k[1])["check"] for k in samples if k[0] == "peerwatch_agent_check_duration_seconds"} == set(
        CHECK_NAMES
    )
    smi_calls = [c for c in runner.calls if c.startswith(f"nvidia-smi --query-gpu={QUERY_FIELDS}")]
    assert len(smi_calls) == 1, "the nvidia-smi answer is shared by the checks of one run"
    assert not any("check failed" in r.hint for r in report.results)


def test_config_rejects_unknown_checks_and_selects() -> None:
    with pytest.raises(ValueError, match="unknown check"):
        AgentConfig(checks=frozenset({"xid", "smart"}))
    checks = build_checks(AgentConfig(checks=frozenset({"nvme", "xid"})))
    assert [c.name for c in checks] == ["xid", "nvme"]


# --- this machine, for real --------------------------------------------------------------------------


def cli() -> typer.Typer:
    app = typer.Typer()
    app.command()(agent_command)
    return app


def test_once_on_this_machine() -> None:
    result = CliRunner().invoke(cli(), ["--once"])
    assert result.exit_code == 0, result.output
    samples = parse(result.stdout)
    status = status_of(samples)
    checks = {check for check, _ in status}
    assert {"xid", "pcie_link", "cpu_frequency", "infiniband_port", "nvme_smart", "nvidia_smi", "dcgm_health"} <= checks
    if not Path("/sys/class/infiniband").exists():
        assert status[("infiniband_port", "node")] == 3
    if not Path("/sys/module/nvidia").exists():
        assert status[("nvidia_smi", "node")] == 3 and status[("xid", "node")] == 3
    info = [dict(k[1])["hint"] for k in samples if k[0] == "peerwatch_agent_check_info"]
    assert not any(h.startswith("check failed") for h in info), info


def test_once_writes_textfile(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli(), ["--once", "--textfile", str(tmp_path), "--check", "cpu_frequency"])
    assert result.exit_code == 0, result.output
    assert [p.name for p in tmp_path.iterdir()] == ["peerwatch_agent.prom"]
    status = status_of(parse((tmp_path / "peerwatch_agent.prom").read_text()))
    assert set(status) == {("cpu_frequency", "node"), ("cpu_frequency_cap", "node")}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--once", "--textfile", "/nonexistent/dir"], 1, "cannot write"),
        (["--textfile", "/nonexistent/dir"], 1, "is not a directory"),
        (["--once", "--port", "0"], 2, "pick one"),
        (["--port", "0", "--textfile", "/tmp"], 2, "not both"),
        ([], 2, "give --once"),
        (["--once", "--check", "smart"], 2, "unknown check"),
    ],
)
def test_cli_errors(args: list[str], code: int, message: str) -> None:
    result = CliRunner().invoke(cli(), args)
    assert result.exit_code == code
    assert message in result.output


def test_busy_port_is_an_agent_failure() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli(), ["--port", str(port), "--host", "127.0.0.1", "--check", "cpu_frequency"])
    assert result.exit_code == 1 and "cannot listen on 127.0.0.1" in result.output


def test_write_textfile_is_atomic(tmp_path: Path) -> None:
    target = write_textfile(tmp_path, "a 1\n")
    write_textfile(tmp_path, "a 2\n")
    assert target.read_text() == "a 2\n" and sorted(p.name for p in tmp_path.iterdir()) == ["peerwatch_agent.prom"]
    assert target.stat().st_mode & 0o777 == 0o644


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.headers["Content-Type"], resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_http_server_serves_and_refreshes() -> None:
    ticks = iter(range(1, 10_000))
    agent = Agent(build_checks(AgentConfig()), clock=lambda: float(next(ticks)))  # real /sys of this machine
    server = MetricsServer(agent, interval=0.05, host="127.0.0.1", port=0)
    server.start()
    try:
        code, ctype, body = get(f"http://127.0.0.1:{server.port}/metrics")
        assert code == 200 and ctype.startswith("text/plain; version=0.0.4")
        first = parse(body)[("peerwatch_agent_last_run_timestamp_seconds", ())]
        assert any(check == "pcie_link" for check, _ in status_of(parse(body)))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            _, _, body = get(f"http://127.0.0.1:{server.port}/metrics")
            if parse(body)[("peerwatch_agent_last_run_timestamp_seconds", ())] > first:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the server did not rerun the checks")
        assert get(f"http://127.0.0.1:{server.port}/nope")[0] == 404
        assert "metrics" in get(f"http://127.0.0.1:{server.port}/")[2]
    finally:
        server.stop()


@settings(max_examples=200, deadline=None)
@given(hint=st.text(), component=st.text(min_size=1))
def test_any_label_text_survives_the_exposition(hint: str, component: str) -> None:
    text = render(
        [Measurement.of("peerwatch_agent_check_info", 1, check="x", component=component, status="OK", hint=hint)]
    )
    (sample,) = next(iter(text_string_to_metric_families(text))).samples
    assert (sample.labels["hint"], sample.labels["component"]) == (hint, component)


def test_subprocess_runner_reports_missing_programs_and_timeouts() -> None:
    runner = SubprocessRunner()
    assert runner.which("sh") is not None and runner.which("peerwatch-no-such-tool") is None
    assert runner.run(["sh", "-c", "echo out; echo err >&2; exit 3"], 5) == CommandResult(3, "out\n", "err\n")
    with pytest.raises(CommandError, match="not found"):
        runner.run(["peerwatch-no-such-tool"], 5)
    with pytest.raises(CommandError, match=r"timed out after 0\.2 s"):
        runner.run(["sleep", "5"], 0.2)
