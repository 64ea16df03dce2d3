"""What the agent looks at and how: I/O roots, tool runner, thresholds; and the checks built from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from peerwatch.agent.checks import Check
from peerwatch.agent.cpufreq import CpuFreqCheck
from peerwatch.agent.dcgm import DcgmHealthCheck
from peerwatch.agent.infiniband import InfinibandCheck
from peerwatch.agent.kernel_log import FileLogSource, KernelLogSource, boot_time, default_source
from peerwatch.agent.nvidia import NvidiaSmi, NvidiaSmiCheck
from peerwatch.agent.nvme import NvmeCheck
from peerwatch.agent.pcie import PcieLinkCheck
from peerwatch.agent.runner import CommandRunner, SubprocessRunner
from peerwatch.agent.xid import XidCheck

CHECK_NAMES = ("xid", "pcie_link", "cpu_frequency", "infiniband", "nvme", "nvidia_smi", "dcgm_health")
"""Names accepted by :attr:`AgentConfig.checks`, in run order."""


@dataclass(frozen=True)
class AgentConfig:
    """Everything the checks read from, each root injectable so tests can point it at a fake tree.

    ``kernel_log``: a file to read instead of dmesg → ``journalctl -k`` → ``/var/log/kern.log``.
    ``checks``: the names to run (``None``: all of :data:`CHECK_NAMES`).
    """

    sys_root: Path = Path("/sys")
    proc_root: Path = Path("/proc")
    dev_root: Path = Path("/dev")
    kernel_log: Path | None = None
    runner: CommandRunner = field(default_factory=SubprocessRunner)
    command_timeout: float = 20.0
    xid_max_age: float | None = None
    gpu_busy_utilization: float = 10.0
    cpu_low_ratio: float = 0.5
    ib_expected_rate_gbps: float | None = None
    ib_ignore: frozenset[str] = frozenset()
    checks: frozenset[str] | None = None

    def __post_init__(self) -> None:
        unknown = sorted((self.checks or frozenset()) - set(CHECK_NAMES))
        if unknown:
            raise ValueError(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(CHECK_NAMES)}")
        if self.command_timeout <= 0:
            raise ValueError(f"command_timeout must be positive, not {self.command_timeout}")
        if self.xid_max_age is not None and self.xid_max_age <= 0:
            raise ValueError(f"xid_max_age must be positive, not {self.xid_max_age}")

    def kernel_log_source(self) -> KernelLogSource:
        if self.kernel_log is not None:
            proc = self.proc_root
            return FileLogSource(self.kernel_log, lambda: boot_time(proc))
        return default_source(self.runner, self.proc_root)


def build_checks(config: AgentConfig) -> list[Check]:
    """The configured checks, sharing one cached nvidia-smi so a run calls it once."""
    smi = NvidiaSmi(config.runner, timeout=config.command_timeout)
    every: dict[str, Check] = {
        "xid": XidCheck(config.kernel_log_source(), smi, max_age=config.xid_max_age, sys_root=config.sys_root),
        "pcie_link": PcieLinkCheck(config.sys_root, smi, busy_utilization=config.gpu_busy_utilization),
        "cpu_frequency": CpuFreqCheck(config.sys_root, config.proc_root, low_ratio=config.cpu_low_ratio),
        "infiniband": InfinibandCheck(config.sys_root, config.ib_expected_rate_gbps, config.ib_ignore),
        "nvme": NvmeCheck(config.runner, config.sys_root, config.dev_root, timeout=config.command_timeout),
        "nvidia_smi": NvidiaSmiCheck(smi),
        "dcgm_health": DcgmHealthCheck(config.runner, timeout=config.command_timeout),
    }
    wanted = config.checks if config.checks is not None else frozenset(CHECK_NAMES)
    return [check for name, check in every.items() if name in wanted]
