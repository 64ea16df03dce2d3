"""A word of progress on long CLI work: a spinner on stderr when it is a terminal, silence otherwise."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from rich.console import Console


def stderr_is_terminal() -> bool:
    return Console(stderr=True).is_terminal


def working(message: str) -> AbstractContextManager[object]:
    """Show ``message`` with a spinner while the block runs (pipes and logs get nothing)."""
    console = Console(stderr=True)
    return console.status(message) if console.is_terminal else nullcontext()
