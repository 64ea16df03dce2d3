"""NVMe controllers: sysfs state (``/sys/class/nvme/*/state``) and ``nvme smart-log`` when nvme-cli is there."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peerwatch.agent.checks import CheckResult, Measurement, Status, unknown, worst
from peerwatch.agent.runner import CommandError, CommandRunner
from peerwatch.agent.sysfs import read_text

CONTROLLER_STATES: Mapping[str, Status] = {
    "live": Status.OK,
    "new": Status.UNHEALTHY,
    "connecting": Status.UNHEALTHY,
    "resetting": Status.UNHEALTHY,
    "deleting": Status.CRITICAL,
    "deleting (no IO)": Status.CRITICAL,
    "dead": Status.CRITICAL,
}
"""Controller state (drivers/nvme/host/core.c names) → status; states not listed are UNKNOWN."""

CRITICAL_WARNING_BITS: Mapping[int, str] = {
    0x01: "available spare below threshold",
    0x02: "temperature outside its threshold",
    0x04: "NVM subsystem reliability degraded",
    0x08: "media placed in read-only mode",
    0x10: "volatile memory backup failed",
    0x20: "persistent memory region read-only",
}


@dataclass(frozen=True, slots=True)
class SmartLog:
    """The SMART / health fields the check judges (``None``: not in the tool's output)."""

    critical_warning: int | None
    media_errors: int | None
    error_log_entries: int | None
    percent_used: int | None


def _int(value: Any) -> int | None:
    if isinstance(value, dict):  # newer nvme-cli nests some fields: {"value": 0, ...}
        value = value.get("value")
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def parse_smart_log(text: str) -> SmartLog:
    """Fields of ``nvme smart-log DEV --output-format=json``; raises ``ValueError`` on non-JSON."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("smart-log JSON is not an object")
    return SmartLog(
        _int(data.get("critical_warning")),
        _int(data.get("media_errors")),
        _int(data.get("num_err_log_entries")),
        _int(data.get("percent_used", data.get("percentage_used"))),
    )


@dataclass(frozen=True)
class NvmeCheck:
    """``nvme_controller`` (sysfs state) and ``nvme_smart`` (SMART log) per controller."""

    runner: CommandRunner
    sys_root: Path = Path("/sys")
    dev_root: Path = Path("/dev")
    timeout: float = 10.0
    name: str = "nvme"

    def run(self) -> Iterator[CheckResult]:
        base = self.sys_root / "class" / "nvme"
        controllers = sorted(base.iterdir()) if base.is_dir() else []
        if not controllers:
            why = f"no NVMe controller under {base}"
            yield unknown(f"{self.name}_controller", why)
            yield unknown(f"{self.name}_smart", why)
            return
        has_cli = self.runner.which("nvme") is not None
        for ctrl in controllers:
            yield self._controller(ctrl)
            if has_cli:
                yield self._smart(ctrl.name)
            else:
                yield unknown(f"{self.name}_smart", "nvme CLI not found (install nvme-cli)", ctrl.name)

    def _controller(self, ctrl: Path) -> CheckResult:
        check = f"{self.name}_controller"
        state = read_text(ctrl / "state")
        model = read_text(ctrl / "model") or "?"
        if state is None:
            return CheckResult(check, ctrl.name, Status.UNKNOWN, "controller state unreadable")
        measurements = (Measurement.of("peerwatch_agent_nvme_controller_state", 1, device=ctrl.name, state=state),)
        status = CONTROLLER_STATES.get(state, Status.UNKNOWN)
        hint = f"{model}: state {state}"
        if status is not Status.OK:
            hint += "; check the drive and its slot, dmesg for nvme errors, replace if it stays down"
        return CheckResult(check, ctrl.name, status, hint, measurements)

    def _smart(self, name: str) -> CheckResult:
        check = f"{self.name}_smart"
        argv = ("nvme", "smart-log", str(self.dev_root / name), "--output-format=json")
        try:
            done = self.runner.run(argv, self.timeout)
            if done.returncode != 0:
                raise CommandError((done.stderr or done.stdout).strip() or f"exit {done.returncode}")
            smart = parse_smart_log(done.stdout)
        except (CommandError, ValueError) as exc:
            return unknown(check, f"nvme smart-log failed: {exc}", name)
        measurements = tuple(
            Measurement.of(family, value, device=name)
            for family, value in (
                ("peerwatch_agent_nvme_critical_warning", smart.critical_warning),
                ("peerwatch_agent_nvme_media_errors_total", smart.media_errors),
                ("peerwatch_agent_nvme_error_log_entries_total", smart.error_log_entries),
                ("peerwatch_agent_nvme_endurance_used_percent", smart.percent_used),
            )
            if value is not None
        )
        if smart.critical_warning is None:
            return CheckResult(check, name, Status.UNKNOWN, "smart-log has no critical_warning", measurements)
        problems: list[tuple[Status, str]] = [
            (Status.CRITICAL, text) for bit, text in CRITICAL_WARNING_BITS.items() if smart.critical_warning & bit
        ]
        if problems:
            problems[-1] = (Status.CRITICAL, problems[-1][1] + "; back up and replace the drive")
        if smart.media_errors:
            problems.append((Status.UNHEALTHY, f"{smart.media_errors} media errors; plan a replacement"))
        if smart.percent_used is not None and smart.percent_used >= 100:
            problems.append((Status.UNHEALTHY, f"{smart.percent_used}% of rated endurance used"))
        if not problems:
            return CheckResult(check, name, Status.OK, "no critical warning or media error", measurements)
        status = worst(s for s, _ in problems)
        return CheckResult(check, name, status, "; ".join(t for _, t in problems), measurements)
