"""Child processes start by fork only while no other thread runs here (children.py)."""

from __future__ import annotations

import multiprocessing

import pytest

from peerwatch import children


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork on this platform")
def test_fork_only_while_this_process_runs_no_other_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(children.threading, "active_count", lambda: 1)
    assert children.start_context().get_start_method() == "fork"
    monkeypatch.setattr(children.threading, "active_count", lambda: 2)  # e.g. the CLI's spinner
    assert children.start_context().get_start_method() == "forkserver"
