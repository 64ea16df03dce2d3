"""Saved outputs (``peerwatch agent read``): format detection, each nvidia-smi reader on real outputs
(``tests/data/agent``, see SOURCE.md), the fault fields, bad input, and the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from peerwatch.agent.checks import Status
from peerwatch.agent.nvidia import QUERY_FIELDS, RECOVERY_FIELDS, REMAP_FIELDS, NvidiaSmi, NvidiaSmiCheck
from peerwatch.agent.readers import ReadError, read_saved, reader_for
from peerwatch.agent.readers.nvidia_smi_csv import parse_csv
from peerwatch.agent.readers.nvidia_smi_query import parse_query_text
from peerwatch.agent.readers.nvidia_smi_xml import parse_xml
from peerwatch.agent.runner import CommandResult, RecordedRunner
from peerwatch.cli import app

DATA = Path(__file__).parent / "data"
AGENT = DATA / "agent"
CMD = Path(__file__).parent / "fixtures" / "agent" / "commands"


def text(name: str) -> str:
    return (AGENT / name).read_text(encoding="utf-8")


def statuses(raw: str) -> dict[str, Status]:
    return {r.component: r.status for r in read_saved(raw).results}


@pytest.mark.parametrize(
    ("path", "fmt"),
    [
        (AGENT / "gpud-nvidia-smi-q.535.154.05.4090x8.txt", "nvidia-smi-q"),
        (AGENT / "jesse-nvidia-smi-q-566.36-paste.md", "nvidia-smi-q"),
        (AGENT / "netdata-tesla-p100.xml", "nvidia-smi-xml"),
        (AGENT / "netdata-rtx-4090-driver-535.xml", "nvidia-smi-xml"),
        (AGENT / "netdata-tesla-p100.csv", "nvidia-smi-csv"),
        (CMD / "nvidia_smi_faulty.csv", "nvidia-smi-csv"),
        (CMD / "nvidia_smi_remap_faulty.csv", "nvidia-smi-csv"),
        (DATA / "kernel" / "gpud-dmesg-T-xid-119.txt", "kernel-log"),
        (DATA / "kernel" / "gpud-sxid-readme.md", "kernel-log"),
        (DATA / "kernel" / "popos-368-journal-fr.txt", "kernel-log"),
    ],
)
def test_format_detected_from_content(path: Path, fmt: str) -> None:
    reader = reader_for(path.read_text(encoding="utf-8"))
    assert reader is not None and fmt == reader.FORMAT


def test_query_text_fields_of_real_outputs() -> None:
    q = parse_query_text(text("gpud-nvidia-smi-q.535.154.05.sw-power-cap.txt"))
    assert len(q.gpus) == 8 and q.gpus[1].bus_id == "0000:23:00.0" and q.gpus[1].utilization == 97
    assert q.gpus[1].clock_reasons == 0x4  # SW Power Cap: no fault
    assert {s for s in statuses(text("gpud-nvidia-smi-q.535.154.05.sw-power-cap.txt")).values()} == {Status.OK}
    a10 = parse_query_text(text("gpud-nvidia-smi-q.535.129.03.a10-remap-pending.txt"))
    assert a10.gpus[0].ecc_uncorrected == 0 and a10.remaps["0000:07:00.0"].uncorrectable == 4
    assert statuses(text("gpud-nvidia-smi-q.535.129.03.a10-remap-pending.txt")) == {"0000:07:00.0": Status.UNHEALTHY}


def test_query_text_through_paste_artefacts_and_recovery_action() -> None:
    raw = text("jesse-nvidia-smi-q-566.36-paste.md")
    (gpu,) = parse_query_text(raw).gpus
    assert (gpu.bus_id, gpu.recovery_action, gpu.clock_reasons) == ("0000:01:00.0", "None", 0x1)
    assert statuses(raw) == {"0000:01:00.0": Status.OK}
    # Synthetic variations of the real output: the driver asking for a reset, a drain, a reboot.
    line = "GPU Recovery Action                   : None"
    for action, status in (("Reset", Status.CRITICAL), ("Drain P2P", Status.UNHEALTHY), ("Reboot", Status.CRITICAL)):
        assert statuses(raw.replace(line, line.replace("None", action))) == {"0000:01:00.0": status}


def test_old_reset_status_and_old_throttle_section_names() -> None:
    raw = text("gpud-nvidia-smi-q.535.154.05.4090x8.txt")
    # Synthetic: the pre-535 section name and an active hardware slowdown on every GPU.
    old = raw.replace("Clocks Event Reasons\n", "Clocks Throttle Reasons\n").replace(
        "HW Slowdown                       : Not Active", "HW Slowdown                       : Active"
    )
    assert set(statuses(old).values()) == {Status.UNHEALTHY}
    reset = raw.replace("Reset Required                    : No", "Reset Required                    : Yes", 1)
    assert statuses(reset)["0000:01:00.0"] is Status.CRITICAL


def test_truncated_output_says_what_it_could_not_read() -> None:
    results = read_saved(text("gpud-nvidia-smi-q.535.183.01.truncated.txt")).results
    assert [(r.component, r.status) for r in results] == [("0000:53:00.0", Status.OK), ("node", Status.UNKNOWN)]
    assert "8 attached GPUs but shows 1" in results[1].hint


def test_xml_old_and_new_names() -> None:
    p100 = parse_xml(text("netdata-tesla-p100.xml"))
    assert (p100.gpus[0].ecc_uncorrected, p100.gpus[0].retired_pending, p100.gpus[0].clock_reasons) == (0, False, 1)
    assert p100.remaps == {}  # <remapped_rows>N/A</remapped_rows>
    ada = parse_xml(text("netdata-rtx-4090-driver-535.xml"))
    assert ada.gpus[0].clock_reasons == 1 and ada.remaps["0000:84:00.0"].pending is False
    # Synthetic variations: a DBE count, a pending retirement, a pending remap, an active thermal slowdown.
    p = text("netdata-tesla-p100.xml")
    dbe = p.replace("<total>0</total>\n\t\t\t\t</double_bit>", "<total>2</total>\n\t\t\t\t</double_bit>", 1)
    assert statuses(dbe) == {"0000:00:04.0": Status.CRITICAL}
    retire = p.replace("<pending_retirement>No<", "<pending_retirement>Yes<")
    assert statuses(retire) == {"0000:00:04.0": Status.UNHEALTHY}
    a = text("netdata-rtx-4090-driver-535.xml")
    assert statuses(a.replace("<remapped_row_pending>No<", "<remapped_row_pending>Yes<")) == {
        "0000:84:00.0": Status.UNHEALTHY
    }
    hot = a.replace(
        "<clocks_event_reason_hw_thermal_slowdown>Not Active<", "<clocks_event_reason_hw_thermal_slowdown>Active<"
    )
    assert statuses(hot) == {"0000:84:00.0": Status.UNHEALTHY}


def test_csv_with_header_and_units() -> None:
    (gpu,) = parse_csv(text("netdata-tesla-p100.csv")).gpus
    assert (gpu.bus_id, gpu.name, gpu.utilization) == ("gpu/0", "Tesla P100-PCIE-16GB", 0)
    raw = (
        "index, pci.bus_id, clocks_event_reasons.hw_thermal_slowdown, gpu_recovery_action\n"
        "0, 00000000:3B:00.0, Active, None\n"
    )
    assert statuses(raw) == {"0000:3b:00.0": Status.UNHEALTHY}  # synthetic: the newer field names


def test_live_check_and_saved_csv_read_alike() -> None:
    """One implementation: the agent's nvidia-smi call and a saved copy of its output give the same verdicts."""
    faulty, remap = (CMD / "nvidia_smi_faulty.csv").read_text(), (CMD / "nvidia_smi_remap_faulty.csv").read_text()
    runner = RecordedRunner(
        {
            f"nvidia-smi --query-gpu={QUERY_FIELDS} --format=csv,noheader,nounits": CommandResult(15, faulty),
            f"nvidia-smi --query-remapped-rows={REMAP_FIELDS} --format=csv,noheader,nounits": CommandResult(0, "\n"),
        }
    )
    live = [(r.component, r.status, r.hint) for r in NvidiaSmiCheck(NvidiaSmi(runner)).run()]
    saved = [(r.component, r.status, r.hint) for r in read_saved(faulty).results]
    assert live == saved
    assert statuses(remap) == {
        "0000:18:00.0": Status.CRITICAL,
        "0000:3b:00.0": Status.UNHEALTHY,
        "0000:5d:00.0": Status.OK,
    }


@pytest.mark.parametrize(
    ("answer", "status"),
    [
        (CommandResult(0, "0, 00000000:18:00.0, Reset\n1, 00000000:3B:00.0, None\n"), Status.CRITICAL),
        (CommandResult(2, 'Field "gpu_recovery_action" is not a valid field to query.\n'), Status.OK),  # driver < 550
    ],
)
def test_live_check_asks_the_recovery_action_apart(answer: CommandResult, status: Status) -> None:
    runner = RecordedRunner(
        {
            f"nvidia-smi --query-gpu={QUERY_FIELDS} --format=csv,noheader,nounits": CommandResult(
                0, (CMD / "nvidia_smi_healthy.csv").read_text()
            ),
            f"nvidia-smi --query-gpu={RECOVERY_FIELDS} --format=csv,noheader,nounits": answer,
        }
    )
    got = {r.component: r for r in NvidiaSmiCheck(NvidiaSmi(runner)).run()}
    assert got["0000:18:00.0"].status is status and got["0000:3b:00.0"].status is Status.OK
    if status is Status.CRITICAL:
        assert got["0000:18:00.0"].hint.startswith("GPU recovery action Reset: driver requires a GPU reset")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("hello\nworld\n", "no reader recognises"),
        ('<?xml version="1.0" ?>\n<nvidia_smi_log>\n<gpu id="00000000:01:00.0">\n<uuid>x', "no complete"),
        ("<nvidia_smi_log>\n<gpu id='0000:01:00.0'><uuid></gpu>\n</nvidia_smi_log>\n", "line 2: not well-formed"),
        ("==============NVSMI LOG==============\n\nDriver Version : 535.54\n", "no 'GPU 0000:xx:00.0' block"),
        ("uuid, fan.speed [%]\n", "names no GPU"),
        # lspci -vv of a GPU says "NVIDIA" but is no kernel log (fabric's lspci reader takes it)
        ("3b:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)\n", "no reader recognises"),
    ],
)
def test_bad_input_names_what_is_wrong(raw: str, message: str) -> None:
    with pytest.raises(ReadError, match=message):
        read_saved(raw)


def test_agent_read_command(tmp_path: Path) -> None:
    missing = tmp_path / "missing.txt"
    files = [str(AGENT / "gpud-nvidia-smi-q.535.129.03.a10-remap-pending.txt"), str(missing)]
    result = CliRunner().invoke(app, ["agent", "read", "--json", *files])
    assert result.exit_code == 1  # one file could not be read; the other still was
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines[0]["format"] == "nvidia-smi-q"
    assert lines[0]["checks"] == [
        {
            "check": "nvidia_smi",
            "component": "0000:07:00.0",
            "status": "warning",
            "detail": "row remap pending: reset the GPU to apply it",
        }
    ]
    assert lines[1]["file"] == str(missing) and "No such file" in lines[1]["error"]
    plain = CliRunner().invoke(app, ["agent", "read", str(DATA / "kernel" / "nvsentinel-155-dmesg-fallen-off-bus.txt")])
    assert plain.exit_code == 0 and "critical  xid" in plain.stdout and "0000:b3:00.0" in plain.stdout


def test_agent_options_still_work_through_the_group() -> None:
    result = CliRunner().invoke(app, ["agent", "--once", "--check", "cpu_frequency"])
    assert result.exit_code == 0, result.output
    assert 'peerwatch_agent_check_status{check="cpu_frequency"' in result.stdout
    assert "give --once" in CliRunner().invoke(app, ["agent"]).output
