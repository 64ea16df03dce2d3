"""How bad an Xid is: NVIDIA's resolution bucket mapped to a check status, as tables.

The catalogue's ``immediate_action`` decides, except where :data:`XID_OVERRIDES` says
otherwise: a few Xids whose immediate action concerns only the job (63, 92, 94) still mean the
hardware is degrading, and Xid 162-172 have no bucket in our copy. Xid 154 states the recovery
action itself, so its status comes from the message (:data:`RECOVERY_ACTIONS`). The tables are
mirrored in ``docs/agent.md``; a test keeps every bucket of the catalogue mapped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from peerwatch.agent.checks import Status
from peerwatch.xid_catalog import XidEntry

CRITICAL, UNHEALTHY, OK = Status.CRITICAL, Status.UNHEALTHY, Status.OK


@dataclass(frozen=True, slots=True)
class XidPolicy:
    """Status for an Xid and what to do about it."""

    status: Status
    hint: str


BUCKET_POLICY: Mapping[str, XidPolicy] = {
    "RESTART_BM": XidPolicy(CRITICAL, "drain and reboot the node; swap the GPU if it recurs"),
    "RESET_GPU": XidPolicy(CRITICAL, "drain the node and reset the GPU (or reboot); swap if it recurs"),
    "WORKFLOW_XID_48": XidPolicy(
        CRITICAL, "uncorrectable ECC error: drain and reset the GPU; with Xid 63/64 check row remapping"
    ),
    "WORKFLOW_NVLINK_ERR": XidPolicy(
        CRITICAL, "NVLink error: drain and reset the GPU; the fault may be at the link's far end, check seating"
    ),
    "WORKFLOW_NVLINK5_ERR": XidPolicy(
        UNHEALTHY, "NVLink5 error: decode intrInfo/errorStatus (NVIDIA Xid 144-150 decode); link-fatal needs a reset"
    ),
    "XID_154": XidPolicy(UNHEALTHY, "follow the recovery action stated in the message"),
    "CONTACT_SUPPORT": XidPolicy(
        UNHEALTHY, "rare or retired Xid: collect nvidia-bug-report.sh output, contact support"
    ),
    "CHECK_MECHANICALS": XidPolicy(UNHEALTHY, "check GPU seating, power cables and connectors"),
    "UPDATE_SWFW": XidPolicy(UNHEALTHY, "update driver and firmware (guest and host) to matching versions"),
    "RESTART_VM": XidPolicy(UNHEALTHY, "restart the VM that owns the GPU"),
    "CHECK_UVM": XidPolicy(UNHEALTHY, "if UVM or vGPU is in use reset the GPU, else no action"),
    "RESTART_APP": XidPolicy(
        OK, "application-level: restart the job; repeats on this GPU across jobs suggest hardware (dcgmi diag -r 3)"
    ),
    "IGNORE": XidPolicy(OK, "informational: no action"),
    "WORKFLOW_XID_45": XidPolicy(OK, "job torn down after another error: follow the other Xid (alone: restart FM)"),
}

XID_OVERRIDES: Mapping[int, XidPolicy] = {
    63: XidPolicy(UNHEALTHY, "memory row remapped after ECC errors: watch the remap trend; reset GPU to apply"),
    92: XidPolicy(UNHEALTHY, "high single-bit ECC error rate: GPU memory degrading; plan a swap"),
    94: XidPolicy(UNHEALTHY, "contained uncorrectable memory error: restart the job, reset the GPU when convenient"),
    162: XidPolicy(OK, "power smoothing re-engaged: no action"),
    163: XidPolicy(UNHEALTHY, "power smoothing disengaged: resolve thermal events; reset GPU if disabled by timeout"),
    164: XidPolicy(UNHEALTHY, "power smoothing lifetime low: it will be disabled soon; watch power swings"),
    165: XidPolicy(UNHEALTHY, "power smoothing disabled: expect power swings; plan service"),
    166: XidPolicy(UNHEALTHY, "NVLink crypto error (confidential computing): contact support"),
    167: XidPolicy(CRITICAL, "PCIe fatal timeout: drain and reset the GPU or reboot; check the PCIe link"),
    168: XidPolicy(UNHEALTHY, "reduced GPU memory capacity: enable ECC (row remapping) or reboot"),
    169: XidPolicy(CRITICAL, "SEC2 engine halted: drain and reset the GPU"),
    170: XidPolicy(UNHEALTHY, "NVLink interrupt in confidential-computing mode: contact support"),
    171: XidPolicy(CRITICAL, "uncorrectable DRAM error: drain and reset the GPU; check row remapping"),
    172: XidPolicy(CRITICAL, "uncorrectable SRAM error: drain and reset the GPU; field diag if it recurs"),
}

UNKNOWN_XID = XidPolicy(UNHEALTHY, "Xid not in the catalogue (newer driver?): treat as contact support")

# Xid 154's "recovery action changed ... to 0xN (Name)"; codes as in NVML's nvmlDeviceGpuRecoveryAction_t.
RECOVERY_ACTIONS: Mapping[int, XidPolicy] = {
    0: XidPolicy(OK, "driver needs no recovery action"),
    1: XidPolicy(CRITICAL, "driver requires a GPU reset: drain and reset the GPU"),
    2: XidPolicy(CRITICAL, "driver requires a node reboot: drain and reboot"),
    3: XidPolicy(UNHEALTHY, "driver asks to drain peer-to-peer traffic (Drain P2P)"),
    4: XidPolicy(CRITICAL, "driver asks to drain and reset the GPU"),
}
_RECOVERY = re.compile(r"recovery action changed (?:from \S+ \([^)]*\) )?to (0x[0-9a-fA-F]+|\d+)(?:\s*\(([^)]*)\))?")
_RECOVERY_WORDS = (("reboot", 2), ("drain p2p", 3), ("drain and reset", 4), ("reset", 1), ("flr", 1), ("none", 0))


def recovery_action(message: str) -> int | None:
    """The NVML recovery-action code an Xid 154 message announces, or ``None`` if it names none."""
    match = _RECOVERY.search(message)
    if match is None:
        return None
    code = int(match.group(1), 0)
    if code in RECOVERY_ACTIONS:
        return code
    name = (match.group(2) or "").lower()
    return next((c for word, c in _RECOVERY_WORDS if word in name), None)


def recovery_action_named(name: str) -> int | None:
    """The NVML recovery-action code of a name as nvidia-smi prints it (``None``, ``Reset``, ``GPU_RESET``,
    ``Reboot``, ``Drain P2P``, ``Drain and Reset``); ``None`` for ``N/A`` and names it does not know."""
    words = name.strip().lower().replace("_", " ")
    if words.startswith("0x") or words.isdigit():
        code = int(words, 0)
        return code if code in RECOVERY_ACTIONS else None
    return next((c for word, c in _RECOVERY_WORDS if word in words), None)


def classify(xid: int, message: str, catalog: Mapping[int, XidEntry]) -> XidPolicy:
    """Status and hint for one Xid event (``message`` is the text after ``Xid (PCI:...): N,``)."""
    entry = catalog.get(xid)
    if xid == 154:
        code = recovery_action(message)
        if code is not None:
            return RECOVERY_ACTIONS[code]
    if xid in XID_OVERRIDES:
        return XID_OVERRIDES[xid]
    if entry is None:
        return UNKNOWN_XID
    return BUCKET_POLICY.get(entry.immediate_action, UNKNOWN_XID)
