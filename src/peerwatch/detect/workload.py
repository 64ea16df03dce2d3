"""Workload groups at the newest step, named for the dashboard and ``GET /api/v1/nodes``.

The engine compares each node only with nodes doing the same work (``detect.groups``): the main
job, a second synchronous job, idle nodes; nodes whose work no other node shares are compared
with nobody. Groups are numbered in that order among those present, so a number names the same
kind of group from one step to the next.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from peerwatch.detect.context import Context
from peerwatch.detect.groups import IDLE, LONE, MAIN, OTHER

LONE_KIND = "own work, compared with no node"
KINDS = ((MAIN, "busy"), (OTHER, "other job"), (IDLE, "idle"), (LONE, LONE_KIND))
NO_ACTIVITY = "no GPU activity data"  # the engine then puts every node in one group


@dataclass(frozen=True, slots=True)
class WorkloadGroup:
    """One workload group at the newest step."""

    id: int  # 1-based
    of: int  # groups at that step
    size: int  # nodes in it
    kind: str  # busy, other job, idle, LONE_KIND, or NO_ACTIVITY

    @property
    def label(self) -> str:
        nodes = "node" if self.size == 1 else "nodes"
        return f"group {self.id} of {self.of}: {self.size} {nodes}, {self.kind}"

    def as_json(self) -> dict[str, object]:
        return {"id": self.id, "of": self.of, "size": self.size, "kind": self.kind, "label": self.label}


def groups_at_end(ctx: Context) -> dict[str, WorkloadGroup]:
    """Each node's workload group at the context's last step; nodes of unknown group are left out."""
    if ctx.steps == 0 or not ctx.nodes:
        return {}
    last = ctx.groups[:, -1]
    names = ctx.by_name()
    has_activity = ctx.roles.first("activity", names) is not None
    present = [(code, kind if has_activity else NO_ACTIVITY) for code, kind in KINDS if np.any(last == code)]
    groups = {
        code: WorkloadGroup(i, len(present), int(np.count_nonzero(last == code)), kind)
        for i, (code, kind) in enumerate(present, 1)
    }
    return {node: groups[int(code)] for node, code in zip(ctx.nodes, last, strict=True) if int(code) in groups}
