"""`nccl-hang` on real logs pasted into public issue trackers (tests/data/nccl, see SOURCE.md there).

The expected answers in expected.toml were written from each log's text before the parser was
changed. ``python tests/test_training_nccl_real.py`` prints the score table (issue 15's figures).
"""

from __future__ import annotations

import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from peerwatch.model import ProblemLog
from peerwatch.training import find_culprits
from peerwatch.training.nccl import HangVerdict

DATA = Path(__file__).parent / "data" / "nccl"
CASES: dict[str, dict[str, Any]] = tomllib.loads((DATA / "expected.toml").read_text())["case"]


@dataclass(frozen=True)
class Check:
    """One case's expected answer against what the tool said: (hits, out of) per figure."""

    culprit: tuple[int, int]  # culprit named (certain) where the log names one
    reporting: tuple[int, int]  # reporting ranks recognised
    watchdog: tuple[int, int]  # stuck-watchdog / heartbeat messages reported
    hosts: tuple[int, int]  # hosts recognised
    no_culprit: tuple[int, int]  # no culprit named where only waiters are visible


def verdict(name: str) -> HangVerdict:
    return find_culprits(DATA / CASES[name]["path"], ProblemLog())


def check(name: str, v: HangVerdict) -> Check:
    case = CASES[name]
    culprits = tuple(case["culprits"])
    reporting = set(case.get("reporting", []))
    hosts = {int(r): h for r, h in case.get("hosts", {}).items()}
    got_hosts = dict(v.hosts)
    named = (int(v.culprit_ranks == culprits and v.level == "certain"), 1) if culprits else (0, 0)
    clean = not set(v.culprit_ranks) & set(case.get("not_culprits", []))
    clean = clean and set(v.culprit_ranks) <= set(case.get("may_name", []))  # an acceptable inference
    return Check(
        culprit=named,
        reporting=(len(reporting & set(v.reporting)), len(reporting)),
        watchdog=(int(bool(v.watchdog)), 1) if case.get("watchdog") else (0, 0),
        hosts=(sum(h in (got_hosts.get(r) or "") for r, h in hosts.items()), len(hosts)),
        no_culprit=(int(clean), 1) if not culprits else (0, 0),
    )


TRAINING = sorted(n for n in CASES if not n.startswith(("heldout_", "later_")))
HELDOUT = sorted(n for n in CASES if n.startswith("heldout_"))
LATER = sorted(n for n in CASES if n.startswith("later_"))


@pytest.mark.parametrize("name", TRAINING + HELDOUT + LATER)
def test_real_log(name: str) -> None:
    v = verdict(name)
    c = check(name, v)
    for figure in ("culprit", "reporting", "watchdog", "hosts", "no_culprit"):
        hits, total = getattr(c, figure)
        assert hits == total, (figure, v.culprit_ranks, v.level, v.reason, v.reporting, v.hosts)
    assert v.reason, "every answer says why"


def table(names: list[str]) -> str:
    sums = {f: [0, 0] for f in ("culprit", "reporting", "watchdog", "hosts", "no_culprit")}
    for name in names:
        c = check(name, verdict(name))
        for f in sums:
            hits, total = getattr(c, f)
            sums[f][0] += hits
            sums[f][1] += total
    labels = {
        "culprit": "culprit named (certain) where the log names one",
        "reporting": "reporting ranks recognised",
        "watchdog": "stuck watchdog / heartbeat reported",
        "hosts": "host of each rank recognised",
        "no_culprit": "no culprit where only waiters are visible",
    }
    return "\n".join(f"| {labels[f]} | {h} of {t} |" for f, (h, t) in sums.items())


if __name__ == "__main__":
    which = HELDOUT if "--heldout" in sys.argv else LATER if "--later" in sys.argv else TRAINING
    print(f"{len(which)} logs\n| what | result |\n|---|---|\n{table(which)}")
