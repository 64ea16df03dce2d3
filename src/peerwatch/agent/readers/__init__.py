"""Saved host-check outputs judged as the agent judges live ones (``peerwatch agent read``).

Each reader module has ``FORMAT``, ``detect(text)`` (a cheap sniff of the first lines, robust to
BOM, blank lines and paste artefacts) and ``read(text) -> list[CheckResult]`` (raises
:class:`ReadError` naming the line). The modules named in :data:`READER_MODULES` are tried in
order and the first whose ``detect`` matches reads the text: specific formats first, the kernel
log (the loosest sniff) last. They are imported on first use, not with this package, because
the live agent's checks import single reader modules (``nvidia.py`` parses its CSV with
:mod:`.nvidia_smi_csv`) and the readers import those checks in turn.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Protocol, cast

from peerwatch.agent.checks import CheckResult
from peerwatch.agent.readers.errors import ReadError


class Reader(Protocol):
    """A reader module's interface (modules satisfy it structurally)."""

    FORMAT: str

    def detect(self, text: str) -> bool: ...

    def read(self, text: str) -> list[CheckResult]: ...


READER_MODULES: tuple[str, ...] = (
    "nvidia_smi_xml",
    "nvidia_smi_query",
    "nvidia_smi_csv",
    "dcgmi_diag",
    "dcgmi_health",
    "ibstat",
    "ibstatus",
    "ibv_devinfo",
    "lspci",
    "kernel_log",
)
"""Reader modules of this package in detection order; the kernel log stays last."""


@cache
def registry() -> tuple[Reader, ...]:
    """The reader modules of :data:`READER_MODULES`, imported, in order."""
    return tuple(cast(Reader, importlib.import_module(f"{__name__}.{name}")) for name in READER_MODULES)


@dataclass(frozen=True, slots=True)
class SavedRead:
    """What one saved output said: its format and the verdicts read from it."""

    format: str
    results: tuple[CheckResult, ...]


def reader_for(text: str, readers: Sequence[Reader] | None = None) -> Reader | None:
    """The first reader whose ``detect`` recognises ``text``, or ``None``."""
    return next((r for r in (readers or registry()) if r.detect(text)), None)


def read_saved(text: str, readers: Sequence[Reader] | None = None) -> SavedRead:
    """Detect the format of ``text`` and read it; :class:`ReadError` when no reader knows it or it is bad."""
    reader = reader_for(text, readers)
    if reader is None:
        known = ", ".join(r.FORMAT for r in (readers or registry()))
        raise ReadError(f"no reader recognises this output (first lines match none of: {known})")
    return SavedRead(reader.FORMAT, tuple(reader.read(text)))


__all__ = ["READER_MODULES", "ReadError", "Reader", "SavedRead", "read_saved", "reader_for", "registry"]
