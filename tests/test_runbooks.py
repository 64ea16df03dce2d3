"""docs/runbooks: one per diagnosis peerwatch can name, each saying what the failure is, what to check
and what to do, with the action peerwatch recommends for it."""

from __future__ import annotations

import re
from pathlib import Path

from peerwatch.decide.actions import severity_and_action
from peerwatch.model import DIAGNOSES

RUNBOOKS = Path(__file__).resolve().parents[1] / "docs" / "runbooks"
SECTIONS = ["## What it is", "## What to check", "## What to do"]


def test_every_diagnosis_has_a_runbook_and_no_runbook_is_stray() -> None:
    present = {p.stem for p in RUNBOOKS.glob("*.md")} - {"README"}
    assert present == set(DIAGNOSES), (sorted(set(DIAGNOSES) - present), sorted(present - set(DIAGNOSES)))


def test_each_runbook_has_its_sections_and_peerwatchs_action() -> None:
    for diagnosis in DIAGNOSES:
        text = (RUNBOOKS / f"{diagnosis}.md").read_text()
        assert text.startswith(f"# {diagnosis}: "), diagnosis
        positions = [text.find(s) for s in SECTIONS]
        assert -1 not in positions and positions == sorted(positions), (diagnosis, positions)
        _, action = severity_and_action(diagnosis, 0.0)
        stated = re.search(r"peerwatch's action: \*\*(\w+)\*\*", text)
        assert stated is not None and stated.group(1) == action, (diagnosis, action)
        for link in re.findall(r"\]\(([^)#]+\.md)\)", text):
            assert (RUNBOOKS / link).is_file(), (diagnosis, link)


def test_the_index_links_every_runbook() -> None:
    index = (RUNBOOKS / "README.md").read_text()
    assert set(re.findall(r"\]\((\w+)\.md\)", index)) == set(DIAGNOSES)
