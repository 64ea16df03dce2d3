"""Host health agent: checks a GPU node's kernel log, PCIe links, CPU clocks, InfiniBand ports,
NVMe drives, nvidia-smi and DCGM, and exports each verdict as Prometheus metrics.

``peerwatch agent`` (:func:`peerwatch.agent.command.agent_command`) is the command line;
:class:`Agent` with :func:`build_checks` is the library. See ``docs/agent.md``.
"""

from peerwatch.agent.checks import Check, CheckResult, Measurement, Status, worst
from peerwatch.agent.collect import Agent, RunReport
from peerwatch.agent.config import CHECK_NAMES, AgentConfig, build_checks
from peerwatch.agent.exposition import render
from peerwatch.agent.families import FAMILIES, FamilySpec
from peerwatch.agent.runner import CommandError, CommandResult, CommandRunner, RecordedRunner, SubprocessRunner
from peerwatch.agent.serve import MetricsServer, write_textfile

__all__ = [
    "CHECK_NAMES",
    "FAMILIES",
    "Agent",
    "AgentConfig",
    "Check",
    "CheckResult",
    "CommandError",
    "CommandResult",
    "CommandRunner",
    "FamilySpec",
    "Measurement",
    "MetricsServer",
    "RecordedRunner",
    "RunReport",
    "Status",
    "SubprocessRunner",
    "build_checks",
    "render",
    "worst",
    "write_textfile",
]
